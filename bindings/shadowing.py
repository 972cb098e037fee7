"""Routes that an earlier route hides: the admin's warning when a route can never serve one of its paths.

Routes are tried in order (`position`, then id) and the first whose path matches and whose guards authorise the
request serves it (streams/routes/matching.py, streams/access/guards.py). So an earlier route whose pattern matches
every path a later pattern matches, and which asks no more of a request (no guard, or only guards and roles the
later route asks for too), takes every request the later pattern would have served: an unguarded `/t/{t}` before
a guarded `/t/orders` serves `/t/orders` to anyone. Nothing refuses such a table (the order may be what the
operator meant); the admin says so when a route is saved and on the routes' list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bindings.patterns import PathPattern, PatternError, parse_path
from bindings.selectors import RouteSpec


@dataclass(frozen=True)
class Shadow:
    """`path` of the route `route` is served by the earlier route `by` first: `route` never serves it."""

    route: str
    path: str
    by: str

    def message(self) -> str:
        return (
            f"Route {self.route!r} never serves {self.path}: the earlier route {self.by!r} matches it and asks no "
            f"more of a request, so it serves it first. Move {self.route!r} before it, or guard {self.by!r}."
        )


def covers(earlier: PathPattern, later: PathPattern) -> bool:
    """Whether every path `later` matches is matched by `earlier` too (a `{param}` matches any non-empty segment)."""
    if len(earlier.segments) != len(later.segments):
        return False
    for (text, is_param), (later_text, later_is_param) in zip(earlier.segments, later.segments, strict=True):
        if is_param:
            if not later_is_param and not later_text:
                return False  # an empty segment: a parameter never matches it
        elif later_is_param or text != later_text:
            return False
    return True


def asks_no_more(earlier: RouteSpec, later: RouteSpec) -> bool:
    """Whether every request `later`'s guards authorise, `earlier`'s authorise too."""
    needed = {guard.name: set(roles) for guard, roles in later.guarded}
    return all(guard.name in needed and set(roles) <= needed[guard.name] for guard, roles in earlier.guarded)


def _patterns(route: RouteSpec) -> list[PathPattern]:
    parsed = []
    for path in route.paths:
        try:
            parsed.append(parse_path(path))
        except PatternError:
            continue
    return parsed


def shadows(routes: Sequence[RouteSpec]) -> list[Shadow]:
    """Each path of `routes` (in the order they are tried) that an earlier route serves first."""
    found = []
    patterns = [_patterns(route) for route in routes]
    for index, later in enumerate(routes):
        for pattern in patterns[index]:
            for earlier_index, earlier in enumerate(routes[:index]):
                if asks_no_more(earlier, later) and any(covers(p, pattern) for p in patterns[earlier_index]):
                    found.append(Shadow(later.name, pattern.text, earlier.name))
                    break
    return found
