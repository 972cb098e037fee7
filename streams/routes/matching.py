"""Match a request path against the routes (docs/contract.md §1): first match wins, `{name}` is one segment."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote

from bindings.patterns import PathPattern, PatternError, parse_path, render
from bindings.selectors import RouteSpec


def _match_pattern(pattern: PathPattern, segments: list[str]) -> dict[str, str] | None:
    if len(segments) != len(pattern.segments):
        return None
    params: dict[str, str] = {}
    for raw, (text, is_param) in zip(segments, pattern.segments, strict=True):
        value = unquote(raw, errors="replace")
        if is_param:
            if not value:
                return None
            params[text] = value
        elif value != text:
            return None
    return params


@dataclass(frozen=True)
class CompiledRoute:
    spec: RouteSpec
    patterns: tuple[PathPattern, ...]

    def match(self, segments: list[str]) -> dict[str, str] | None:
        """The params of the first condition that matches, or None."""
        for pattern in self.patterns:
            params = _match_pattern(pattern, segments)
            if params is not None:
                return params
        return None


@dataclass(frozen=True)
class Match:
    route: RouteSpec
    params: dict[str, str]
    guarded: dict[str, dict[str, str]] = field(default_factory=dict)  # guard -> identity, attributes.<name>

    @property
    def topic(self) -> str:
        return render(self.route.topic, self.params, self.guarded)


def compile_routes(specs: Iterable[RouteSpec]) -> tuple[CompiledRoute, ...]:
    """Compile route specs; a route whose pattern no longer parses is skipped, never fatal."""
    compiled = []
    for spec in specs:
        try:
            patterns = tuple(parse_path(path) for path in spec.paths)
        except PatternError:
            continue
        compiled.append(CompiledRoute(spec, patterns))
    return tuple(compiled)


def path_segments(raw_path: str) -> list[str]:
    """The segments of a path still percent-encoded, no query string; a path not starting with / has none that
    match (a pattern has at least one segment)."""
    return raw_path[1:].split("/") if raw_path.startswith("/") else []


def match_all(routes: Iterable[CompiledRoute], raw_path: str) -> list[Match]:
    """Every route matching `raw_path` (still percent-encoded, no query string), in the order they are tried:
    the first whose guards authorise the request serves it."""
    if not raw_path.startswith("/"):
        return []
    segments = path_segments(raw_path)
    return [Match(route.spec, params) for route in routes if (params := route.match(segments)) is not None]


def match_path(routes: Iterable[CompiledRoute], raw_path: str) -> Match | None:
    """The first route matching `raw_path`."""
    found = match_all(routes, raw_path)
    return found[0] if found else None
