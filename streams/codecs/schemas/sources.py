"""Where decoders find schemas: a catalog's schemas behind one protocol, inline or from a registry.

`Catalogs` is what a process keeps: built from the catalogs' specs, it makes each catalog's source once, so every
decoder of a registry catalog shares one client, its cache and its rate limit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, Protocol

from streams.codecs.schemas.errors import DecodeError, Reason, SchemaError
from streams.codecs.schemas.registry import Limits, RegistryClient
from streams.codecs.schemas.registry_answers import Reference, Schema, SubjectVersions
from streams.codecs.schemas.spec import CatalogSpec, InlineSchema, matches

MAX_REFERENCE_DEPTH = 16


class SchemaSource(Protocol):
    def by_id(self, schema_id: int) -> Schema: ...

    def subjects_of(self, schema_id: int) -> SubjectVersions: ...

    def by_subject(self, subject: str, version: Literal["latest"] | int) -> Schema: ...


class InlineSource:
    """An inline catalog's schemas. A subject is looked up by its exact name first, then among the subjects
    holding `*` the most specific that matches (the one with the most characters besides its wildcards)."""

    def __init__(self, schemas: Iterable[InlineSchema]) -> None:
        self._versions: dict[str, dict[int, InlineSchema]] = {}
        for schema in schemas:
            self._versions.setdefault(schema.subject, {})[schema.version] = schema

    def by_id(self, schema_id: int) -> Schema:
        raise DecodeError(Reason.UNKNOWN_SCHEMA, f"an inline catalog has no schema ids ({schema_id})")

    def subjects_of(self, schema_id: int) -> SubjectVersions:
        raise DecodeError(Reason.UNKNOWN_SCHEMA, f"an inline catalog has no schema ids ({schema_id})")

    def by_subject(self, subject: str, version: Literal["latest"] | int) -> Schema:
        pattern = self._pattern(subject)
        versions = self._versions.get(pattern) if pattern is not None else None
        if not versions:
            raise DecodeError(Reason.UNKNOWN_SCHEMA, f"no subject {subject!r}")
        number = max(versions) if version == "latest" else version
        found = versions.get(number)
        if found is None:
            raise DecodeError(Reason.UNKNOWN_SCHEMA, f"no version {version} of {subject!r}")
        return Schema(format=found.format, text=found.text, subject=subject, version=found.version)

    def _pattern(self, subject: str) -> str | None:
        if subject in self._versions:
            return subject
        wildcards = [pattern for pattern in self._versions if "*" in pattern and matches(pattern, subject)]
        return max(wildcards, key=lambda pattern: (len(pattern.replace("*", "")), pattern), default=None)


class Catalogs:
    """The catalogs a process decodes with, by name, each source made on first use."""

    def __init__(self, specs: Iterable[CatalogSpec]) -> None:
        self.specs = {spec.name: spec for spec in specs}
        self._sources: dict[str, SchemaSource] = {}

    def updated(self, specs: Iterable[CatalogSpec]) -> Catalogs:
        """The catalogs of `specs`, keeping the sources (a registry client and its cache) of those unchanged."""
        fresh = Catalogs(specs)
        kept = self._sources.items()
        fresh._sources = {name: found for name, found in kept if fresh.specs.get(name) == self.specs[name]}
        return fresh

    def source(self, name: str) -> SchemaSource:
        source = self._sources.get(name)
        if source is None:
            spec = self.specs.get(name)
            if spec is None:
                raise SchemaError(f"no catalog named {name!r}")
            source = self._sources[name] = _make(spec)
        return source


def _make(spec: CatalogSpec) -> SchemaSource:
    if spec.kind == "inline":
        return InlineSource(spec.schemas)
    if not spec.url:
        raise SchemaError(f"the {spec.kind} catalog {spec.name!r} has no URL")
    limits = Limits(spec.cache_entries, spec.cache_bytes, spec.lookups_per_s, spec.give_up_s)
    try:
        return RegistryClient(spec.url, auth=spec.auth, max_age_s=spec.max_age_s, limits=limits)
    except ValueError:  # the control plane checks URLs: this one was saved before it did
        raise SchemaError(f"the {spec.kind} catalog {spec.name!r} has a URL that does not parse") from None


def referenced(schema: Schema, source: SchemaSource) -> tuple[tuple[str, Schema], ...]:
    """Every schema `schema` imports, directly or not, by the name it imports it as: each after its own imports."""
    found: dict[str, Schema] = {}

    def visit(references: tuple[Reference, ...], depth: int) -> None:
        if depth > MAX_REFERENCE_DEPTH:
            raise DecodeError(Reason.SCHEMA_MISMATCH, "references nested too deep")
        for reference in references:
            if reference.name in found:
                continue
            imported = source.by_subject(reference.subject, reference.version)
            visit(imported.references, depth + 1)
            found[reference.name] = imported

    visit(schema.references, 0)
    return tuple(found.items())
