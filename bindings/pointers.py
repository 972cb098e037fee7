"""JSON Pointers (RFC 6901) as a route's `fields` and a client's `?fields=` name them (docs/contract.md §7): the one
parser the checks on save and the data plane's projection share.

A pointer is `/` followed by reference tokens separated by `/`, in which `~1` stands for `/` and `~0` for `~`.
The empty pointer (the whole value) is refused: a projection to everything is no projection.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

MAX_FIELDS = 64
MAX_POINTER_LENGTH = 500


class PointerError(ValueError):
    """Not a pointer a projection can use; the message says why."""


def parse_pointer(text: str) -> tuple[str, ...]:
    """The pointer's reference tokens, unescaped; PointerError if it is not one."""
    if not text.startswith("/"):
        raise PointerError(f"{text!r}: a JSON Pointer starts with '/', e.g. /price or /item/name.")
    if len(text) > MAX_POINTER_LENGTH:
        raise PointerError(f"A JSON Pointer is at most {MAX_POINTER_LENGTH} characters.")
    tokens = []
    for token in text[1:].split("/"):
        if "~" in token.replace("~0", "").replace("~1", ""):
            raise PointerError(f"{text!r}: '~' is written '~0' in a JSON Pointer ('~1' is '/').")
        tokens.append(token.replace("~1", "/").replace("~0", "~"))
    return tuple(tokens)


def check_fields(fields: Sequence[str]) -> list[tuple[int, str]]:
    """(index, message) for each pointer of a route's `fields` that cannot be used (index -1: the list)."""
    problems: list[tuple[int, str]] = []
    if len(fields) > MAX_FIELDS:
        problems.append((-1, f"At most {MAX_FIELDS} fields."))
    seen: set[str] = set()
    for index, text in enumerate(fields):
        try:
            parse_pointer(text)
        except PointerError as exc:
            problems.append((index, str(exc)))
        if text in seen:
            problems.append((index, f"{text!r} is listed twice."))
        seen.add(text)
    return problems


def narrower(asked: Iterable[str], allowed: Sequence[str]) -> str | None:
    """The first of `asked` that is not among `allowed` (a route without fields allows any pointer), else None."""
    for text in asked:
        if allowed and text not in allowed:
            return text
    return None
