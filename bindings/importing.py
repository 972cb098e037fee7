"""The importers' shared core: the result of an import (one entry per object, with field diffs for updates) and
the error map (where in the document -> what is wrong there). Used by the zilla.yaml import; the shapes are the
API's answer and the command's output."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Errors = dict[str, list[str]]


@dataclass
class ObjectResult:
    """What an import did (or, in a dry run, would do) to one endpoint, guard or route."""

    kind: str
    name: str
    action: str  # created, updated, unchanged, deleted
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # field -> (before, after), for updates


@dataclass
class ImportResult:
    """The outcome the command prints and the API answers: one entry per object, and what the file held that
    is not imported."""

    dry_run: bool
    objects: list[ObjectResult] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def of(self, action: str) -> list[ObjectResult]:
        return [item for item in self.objects if item.action == action]

    def as_dict(self) -> dict[str, Any]:
        def entry(item: ObjectResult) -> dict[str, Any]:
            found: dict[str, Any] = {"kind": item.kind, "name": item.name}
            if item.action == "updated":
                found["changes"] = {name: {"before": b, "after": a} for name, (b, a) in item.changes.items()}
            return found

        actions = ("created", "updated", "unchanged", "deleted")
        return {
            "dry_run": self.dry_run,
            **{action: [entry(item) for item in self.of(action)] for action in actions},
            "ignored": list(self.ignored),
        }

    def lines(self) -> list[str]:
        """Human lines: one per object (updates with a line per changed field), then what was ignored."""
        out = []
        verbs = {"created": "create", "updated": "update", "unchanged": "unchanged", "deleted": "delete"}
        for item in self.objects:
            verb = verbs[item.action] if self.dry_run else item.action
            if self.dry_run and item.action != "unchanged":
                verb = f"would {verb}"
            out.append(f"{item.kind} {item.name}: {verb}")
            out.extend(f"    {name}: {b!r} -> {a!r}" for name, (b, a) in item.changes.items())
        out.extend(self.ignored)
        return out


def diff(before: dict[str, Any] | None, after: dict[str, Any] | None, kind: str, name: str) -> ObjectResult:
    if before is None:
        return ObjectResult(kind, name, "created")
    if after is None:
        return ObjectResult(kind, name, "deleted")
    changes = {key: (before.get(key), after.get(key)) for key in after if before.get(key) != after.get(key)}
    return ObjectResult(kind, name, "updated" if changes else "unchanged", changes)
