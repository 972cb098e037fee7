"""The importers' shared core, for zilla.yaml and AsyncAPI alike.

An import reads a document (`bindings.documents.yaml_io` loads it), plans it without the database (each format its
own way, problems keyed by where they are in the document) and then runs its writes here:

- `Problems` collects what is wrong, keyed by where in the document (`bindings.x.routes[0].with.topic`,
  `channels.items.x-sse-kafka.topic`); a service's `ValidationError` is placed there by the write's `locate`.
- `Write` is one object to put (or delete) through `bindings.services`: its kind and name, where it comes from in
  the document, the call, and how to place the service's error keys in the document.
- `run_import` runs the writes in one transaction, all or nothing: one problem anywhere and nothing is written
  (`ImportProblems` is raised with every problem found); with `dry_run` the writes are made, reported and rolled
  back, so a dry run validates exactly as the import would.
- `ImportResult` is what the command prints and the API answers: per object, created, updated (field: before ->
  after), unchanged or deleted, and what the document held that is not imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import transaction

from bindings.history import object_state

Errors = dict[str, list[str]]

ACTIONS = ("created", "updated", "unchanged", "deleted")


class ImportProblems(ValueError):
    """A document that cannot be imported: `errors` maps where in it (dotted) to what is wrong there."""

    def __init__(self, errors: Errors) -> None:
        self.errors = errors
        self.problems = [f"{where}: {message}" if where else message for where, ms in errors.items() for message in ms]
        super().__init__("; ".join(self.problems))


class Problems:
    """The error collector: where in the document -> what is wrong there, in the order found."""

    def __init__(self) -> None:
        self.errors: Errors = {}

    def __bool__(self) -> bool:
        return bool(self.errors)

    def add(self, where: str, messages: str | Sequence[str]) -> None:
        self.errors.setdefault(where, []).extend([messages] if isinstance(messages, str) else messages)

    def add_invalid(self, exc: ValidationError, locate: Callable[[str], str]) -> None:
        """A service's errors, each key (`topic`, `paths[1]`, `filters[0].key`, `""` for the object as a whole)
        placed in the document by `locate`."""
        found = exc.message_dict if hasattr(exc, "error_dict") else {"": exc.messages}
        for key, messages in found.items():
            self.add(locate("" if key == NON_FIELD_ERRORS else key), messages)


@dataclass
class ObjectResult:
    """What an import did (or, in a dry run, would do) to one endpoint, guard or route."""

    kind: str
    name: str
    action: str  # one of ACTIONS
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # field -> (before, after), for updates
    origin: str = ""  # where in the document it comes from


@dataclass
class ImportResult:
    """The outcome the command prints and the API answers: one entry per object, and what the document held
    that is not imported (with the reason)."""

    dry_run: bool
    objects: list[ObjectResult] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def of(self, action: str, kind: str | None = None) -> list[ObjectResult]:
        return [item for item in self.objects if item.action == action and kind in (None, item.kind)]

    def as_dict(self) -> dict[str, Any]:
        def entry(item: ObjectResult) -> dict[str, Any]:
            found: dict[str, Any] = {"kind": item.kind, "name": item.name}
            if item.origin:
                found["from"] = item.origin
            if item.action == "updated":
                found["changes"] = {name: {"before": b, "after": a} for name, (b, a) in item.changes.items()}
            return found

        return {
            "dry_run": self.dry_run,
            **{action: [entry(item) for item in self.of(action)] for action in ACTIONS},
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


@dataclass(frozen=True)
class Write:
    """One object an import puts or deletes: `run` calls `bindings.services`, which validates it."""

    kind: str  # endpoint, guard or route
    name: str
    origin: str  # where in the document it comes from; problems the write has no place for go there
    run: Callable[[], object]
    locate: Callable[[str], str]  # a service's error key -> where in the document


def run_import(
    writes: Iterable[Write],
    *,
    dry_run: bool,
    ignored: Sequence[str] = (),
    error: Callable[[Errors], ImportProblems] = ImportProblems,
) -> ImportResult:
    """Run `writes` in order, in one transaction, and report what each did; all of them or none.

    Every write is attempted, so that one run reports every problem; if any fails, `error(problems)` is raised
    and the transaction rolls back. With `dry_run` it rolls back anyway, after the result is complete.
    """
    result = ImportResult(dry_run=dry_run, ignored=list(ignored))
    problems = Problems()
    with transaction.atomic():
        for write in writes:  # consumed inside the transaction: a generator may read what earlier writes wrote
            before = object_state(write.kind, write.name)
            try:
                write.run()
            except ValidationError as exc:
                problems.add_invalid(exc, write.locate)
                continue
            done = diff(before, object_state(write.kind, write.name), write.kind, write.name)
            done.origin = write.origin
            result.objects.append(done)
        if problems:
            raise error(problems.errors)  # leaves the atomic block: everything written is rolled back
        if dry_run:
            transaction.set_rollback(True)
    return result
