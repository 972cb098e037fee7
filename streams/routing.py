"""Match a request path against the routes (SPEC.md §1): first match wins, `{name}` is one segment."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

from bindings.patterns import PathPattern, PatternError, parse_path, render
from bindings.selectors import RouteSpec


@dataclass(frozen=True)
class CompiledRoute:
    spec: RouteSpec
    pattern: PathPattern

    def match(self, segments: list[str]) -> dict[str, str] | None:
        if len(segments) != len(self.pattern.segments):
            return None
        params: dict[str, str] = {}
        for raw, (text, is_param) in zip(segments, self.pattern.segments, strict=True):
            value = unquote(raw, errors="replace")
            if is_param:
                if not value:
                    return None
                params[text] = value
            elif value != text:
                return None
        return params


@dataclass(frozen=True)
class Match:
    route: RouteSpec
    params: dict[str, str]

    @property
    def topic(self) -> str:
        return render(self.route.topic, self.params)


def compile_routes(specs: Iterable[RouteSpec]) -> tuple[CompiledRoute, ...]:
    """Compile route specs; a route whose pattern no longer parses is skipped, never fatal."""
    compiled = []
    for spec in specs:
        try:
            compiled.append(CompiledRoute(spec, parse_path(spec.path)))
        except PatternError:
            continue
    return tuple(compiled)


def match_path(routes: Iterable[CompiledRoute], raw_path: str) -> Match | None:
    """The first route matching `raw_path` (still percent-encoded, no query string)."""
    if not raw_path.startswith("/"):
        return None
    segments = raw_path[1:].split("/")
    for route in routes:
        params = route.match(segments)
        if params is not None:
            return Match(route.spec, params)
    return None
