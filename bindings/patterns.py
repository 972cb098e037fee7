"""Path patterns (`/items/{id}`) and `${params.x}` templates: parsing and validation.

Shared by validation on save (here) and by the data plane, which compiles the parsed form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_TEMPLATE_REF = re.compile(r"\$\{params\.([^}]*)\}")
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


class PatternError(ValueError):
    """A path pattern or template that cannot be used; the message says why."""


@dataclass(frozen=True)
class PathPattern:
    """A pattern split into segments; each segment is a literal or a `{param}` placeholder."""

    text: str
    segments: tuple[tuple[str, bool], ...]  # (literal text or param name, is_param)

    @property
    def params(self) -> frozenset[str]:
        return frozenset(name for name, is_param in self.segments if is_param)


def parse_path(text: str) -> PathPattern:
    if not text.startswith("/"):
        raise PatternError("A path pattern starts with '/'.")
    if "?" in text or "#" in text:
        raise PatternError("A path pattern has no query string or fragment: the query never routes.")
    segments: list[tuple[str, bool]] = []
    seen: set[str] = set()
    for raw in text[1:].split("/"):
        if "{" in raw or "}" in raw:
            match = _PLACEHOLDER.fullmatch(raw)
            if match is None:
                raise PatternError(f"Segment {raw!r}: a parameter is a whole segment, written {{name}}.")
            name = match.group(1)
            if not PARAM_NAME.fullmatch(name):
                raise PatternError(f"Parameter {name!r}: use letters, digits and '_', not starting with a digit.")
            if name in seen:
                raise PatternError(f"Parameter {name!r} appears twice.")
            seen.add(name)
            segments.append((name, True))
        else:
            segments.append((raw, False))
    return PathPattern(text=text, segments=tuple(segments))


def template_params(template: str) -> set[str]:
    """The `${params.x}` names a template refers to."""
    return set(_TEMPLATE_REF.findall(template))


def render(template: str, params: dict[str, str]) -> str:
    """Replace every `${params.x}`; names are checked on save, so a missing one renders empty."""
    return _TEMPLATE_REF.sub(lambda m: params.get(m.group(1), ""), template)


def check_template(template: str, declared: frozenset[str]) -> None:
    unknown = sorted(template_params(template) - declared)
    if unknown:
        names = ", ".join(f"${{params.{name}}}" for name in unknown)
        raise PatternError(f"{names} is not declared by the route's path pattern.")


def check_topic(template: str, declared: frozenset[str]) -> None:
    check_template(template, declared)
    literal = _TEMPLATE_REF.sub("x", template)
    if not TOPIC_NAME.fullmatch(literal):
        raise PatternError(
            "A topic name has 1 to 249 characters among letters, digits, '.', '_' and '-' "
            "(plus ${params.x} placeholders)."
        )
