"""Path patterns (`/items/{id}`) and templates: parsing and validation.

A template may use `${params.<name>}` (a path parameter), `${guarded['<guard>'].identity}` and
`${guarded['<guard>'].attributes.<name>}` (from the token a route's guard verified).

Shared by validation on save (here) and by the data plane, which compiles the parsed form.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_TEMPLATE_REF = re.compile(r"\$\{params\.([^}]*)\}")
_EXPRESSION = re.compile(r"\$\{([^}]*)\}")
_GUARDED = re.compile(r"guarded\['([^']*)'\]\.(identity|attributes\.(.*))")
ATTRIBUTE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
GUARD_NAME = re.compile(r"[-a-zA-Z0-9_]+")
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
FORBIDDEN_TOPIC_NAMES = frozenset({".", ".."})  # Kafka refuses these two, though its character set allows them


def is_topic_name(name: str) -> bool:
    """Whether Kafka accepts `name` as a topic name (checked before asking it: its refusal is slow)."""
    return TOPIC_NAME.fullmatch(name) is not None and name not in FORBIDDEN_TOPIC_NAMES


INTERNAL_TOPIC_PREFIX = "__"  # Kafka's own topics: __consumer_offsets, __transaction_state, ...


def _denied(name: str, entry: str) -> bool:
    """`entry` of a deny list: a topic name, or a prefix followed by `*`."""
    return name.startswith(entry[:-1]) if entry.endswith("*") else name == entry


def is_internal_topic(name: str, denied: Iterable[str]) -> bool:
    """Whether `name` is never served: Kafka's own topics, or one of `denied` (SSE_INTERNAL_TOPICS)."""
    return name.startswith(INTERNAL_TOPIC_PREFIX) or any(_denied(name, entry) for entry in denied)


def check_not_internal(template: str, denied: Iterable[str]) -> None:
    """A route's topic template names no internal topic: whatever it renders to, its fixed start is not
    Kafka's `__`, nor (without placeholders) a denied name; what a placeholder renders is refused per request."""
    fixed = template.split("${", 1)[0]
    if fixed.startswith(INTERNAL_TOPIC_PREFIX):
        raise PatternError("Topics whose names start with '__' are Kafka's own: they are never served.")
    for entry in denied:
        if (fixed == template and _denied(template, entry)) or (entry.endswith("*") and _denied(fixed, entry)):
            raise PatternError(f"{template!r} is an internal topic ({entry!r} in SSE_INTERNAL_TOPICS): never served.")


VALUE_PATH = re.compile(r"[^.]+(?:\.[^.]+)*")

Where = TypeVar("Where", bound=Hashable)


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


def guard_values(template: str) -> set[tuple[str, str]]:
    """(guard, value) for each `${guarded['<guard>'].<value>}` of a template: `identity` or `attributes.<name>`."""
    return {(m.group(1), m.group(2)) for e in _EXPRESSION.findall(template) if (m := _GUARDED.fullmatch(e)) is not None}


def guard_refs(template: str) -> set[str]:
    """The guard names a template refers to with `${guarded['<guard>']...}`."""
    return {m.group(1) for e in _EXPRESSION.findall(template) if (m := _GUARDED.fullmatch(e)) is not None}


def render(template: str, params: Mapping[str, str], guarded: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """Fill in every `${...}`: params by name; `guarded` maps a guard to its grant's values (`identity`,
    `attributes.<name>`). Names are checked on save, so a missing one renders empty."""

    def value(match: re.Match[str]) -> str:
        expression = match.group(1)
        if expression.startswith("params."):
            return params.get(expression.removeprefix("params."), "")
        found = _GUARDED.fullmatch(expression)
        if found is None or guarded is None:
            return ""
        return guarded.get(found.group(1), {}).get(found.group(2), "")

    return _EXPRESSION.sub(value, template)


def check_expressions(template: str, guards: Iterable[str] | None = None) -> None:
    """Every `${...}` in a template is `${params.<name>}` or a reference to a guard of the route; `guards` are
    the route's guard names (None: not known here, checked with the route)."""
    for expression in _EXPRESSION.findall(template):
        if expression.startswith("guarded["):
            found = _GUARDED.fullmatch(expression)
            if found is None or (found.group(3) is not None and not ATTRIBUTE_NAME.fullmatch(found.group(3))):
                raise PatternError(
                    f"${{{expression}}}: write ${{guarded['<guard>'].identity}} or "
                    f"${{guarded['<guard>'].attributes.<name>}}."
                )
            if guards is not None and found.group(1) not in set(guards):
                raise PatternError(f"${{{expression}}}: the route is not guarded by {found.group(1)!r}.")
            continue
        if not expression.startswith("params."):
            raise PatternError(
                f"${{{expression}}} is not a template expression: write ${{params.<name>}} or "
                "${guarded['<guard>'].identity}."
            )
        if not PARAM_NAME.fullmatch(expression.removeprefix("params.")):
            raise PatternError(
                f"${{{expression}}}: a param name has letters, digits and '_', not starting with a digit."
            )


def check_topic_name(template: str) -> None:
    """The topic is a legal Kafka topic name once its placeholders are filled in."""
    check_expressions(template)
    if not TOPIC_NAME.fullmatch(_EXPRESSION.sub("x", template)):
        raise PatternError(
            "A topic name has 1 to 249 characters among letters, digits, '.', '_' and '-' (plus ${...} placeholders)."
        )
    if template in FORBIDDEN_TOPIC_NAMES:
        raise PatternError(f"Kafka does not allow a topic named {template!r}.")


def check_value_path(path: str) -> None:
    if not VALUE_PATH.fullmatch(path):
        raise PatternError("A value path is field names separated by '.', e.g. status or item.status.")


def check_params(
    patterns: Mapping[int, PathPattern], uses: Iterable[tuple[Where, str, str]]
) -> tuple[dict[Where, list[str]], dict[int, list[str]]]:
    """Check that every path pattern of a route declares each `${params.x}` its templates use.

    `patterns` maps a condition's index to its parsed pattern; `uses` holds (where, what, template): where an
    error goes and how a message names the template ("the topic"). A param that no pattern declares is an
    error of the template; one that only some patterns declare is an error of each pattern that lacks it.
    Returns (errors by `where`, errors by pattern index).
    """
    template_errors: dict[Where, list[str]] = {}
    lacking: dict[tuple[int, str], list[str]] = {}
    if not patterns:
        return template_errors, {}
    for where, what, template in uses:
        for name in sorted(template_params(template)):
            missing = [index for index, pattern in patterns.items() if name not in pattern.params]
            if len(missing) == len(patterns):
                texts = ", ".join(patterns[index].text for index in missing)
                plural = "s" if len(missing) > 1 else ""
                template_errors.setdefault(where, []).append(
                    f"${{params.{name}}} is not declared by the path pattern{plural} {texts}."
                )
                continue
            for index in missing:
                users = lacking.setdefault((index, name), [])
                if what not in users:
                    users.append(what)
    pattern_errors: dict[int, list[str]] = {}
    for (index, name), users in sorted(lacking.items()):
        verb = "uses" if len(users) == 1 else "use"
        pattern_errors.setdefault(index, []).append(
            f"{patterns[index].text} does not declare {{{name}}}, which {' and '.join(users)} {verb}: "
            "every path of the route must declare it."
        )
    return template_errors, pattern_errors


def check_template(template: str, declared: frozenset[str]) -> None:
    check_expressions(template)
    unknown = sorted(template_params(template) - declared)
    if unknown:
        names = ", ".join(f"${{params.{name}}}" for name in unknown)
        raise PatternError(f"{names} is not declared by the route's path pattern.")


def check_topic(template: str, declared: frozenset[str]) -> None:
    check_template(template, declared)
    check_topic_name(template)


# --- values that cannot be told apart (docs/contract.md §1) ---------------------------------------------------


def _parts(template: str) -> list[tuple[str, str]]:
    """The template as (kind, text) parts: `literal` text, or a `params` / `guarded` expression (without `${}`)."""
    parts: list[tuple[str, str]] = []
    end = 0
    for match in _EXPRESSION.finditer(template):
        if match.start() > end:
            parts.append(("literal", template[end : match.start()]))
        expression = match.group(1)
        parts.append(("guarded" if expression.startswith("guarded[") else "params", expression))
        end = match.end()
    if end < len(template):
        parts.append(("literal", template[end:]))
    return parts


def touching_placeholders(template: str) -> list[str]:
    """In a template holding a guarded value, each pair of `${...}` with nothing between them: the boundary
    between their values could fall anywhere, so a request could move it into another token's value."""
    parts = _parts(template)
    if not any(kind == "guarded" for kind, _ in parts):
        return []
    return [
        f"${{{left[1]}}} and ${{{right[1]}}} touch: put a separator between them (e.g. '-'), which values filled "
        "in next to it may then not contain."
        for left, right in itertools.pairwise(parts)
        if left[0] != "literal" and right[0] != "literal"
    ]


def inseparable_values(
    template: str, params: Mapping[str, str], guarded: Mapping[str, Mapping[str, str]]
) -> list[tuple[str, str, str]]:
    """The values a template holding a guarded value would be filled with that contain a character the template
    puts right next to them, as (expression, value, character).

    Each value free of its neighbours' characters can be read back from the rendered text in one way only, so
    one token's values and a request's path parameters can never render what another token's values do (the
    tenant `a` asking for `t-${tenant}-${params.s}` with s=`b-x` would read the topic of tenant `a-b`). A lone
    guarded value is exempt, being the token's and not the request's: the values around it are enough to tell
    where it ends. Placeholders that touch are refused on save (`touching_placeholders`)."""
    parts = _parts(template)
    guarded_parts = [index for index, (kind, _) in enumerate(parts) if kind == "guarded"]
    if not guarded_parts:
        return []
    exempt = guarded_parts[0] if len(guarded_parts) == 1 else -1
    found: list[tuple[str, str, str]] = []
    for index, (kind, expression) in enumerate(parts):
        if kind == "literal" or index == exempt:
            continue
        if kind == "params":
            value = params.get(expression.removeprefix("params."), "")
        else:
            matched = _GUARDED.fullmatch(expression)
            value = "" if matched is None else guarded.get(matched.group(1), {}).get(matched.group(2), "")
        neighbours = []
        if index > 0 and parts[index - 1][0] == "literal":
            neighbours.append(parts[index - 1][1][-1])
        if index + 1 < len(parts) and parts[index + 1][0] == "literal":
            neighbours.append(parts[index + 1][1][0])
        found.extend((expression, value, char) for char in dict.fromkeys(neighbours) if char in value)
    return found
