"""AsyncAPI 3.0: the routes as a document a client can read, and a document's SSE channels as routes.

Export: each path pattern of a route is a channel (its `{name}` segments are channel parameters) with one
`receive` operation, written from the client's side: what a browser subscribing to the address receives. The
messages are the SSE events a stream sends (`event`, `delete`, `reset`, and `caught-up` / `challenge` / `revoked`
where the route has them), each with the `id:` it carries; a guarded route's operation refers to an http bearer (JWT)
security scheme per guard and names the roles in its description (AsyncAPI 3.0 allows `scopes` only on oauth2 and
openIdConnect schemes). Everything a route is made of that AsyncAPI has no word for (topic, filters, event-id
form, start, slow-client policy, guards and roles) is under the channel's `x-sse-kafka`, and the guards and
endpoints the routes use under the document's (guards with their public keys only), so importing our own export
into an empty database gives the same configuration.

Import: a channel whose address is a path, served over HTTP, becomes a route (channels of one route are merged
by `x-sse-kafka.route`); other channels are listed as ignored with the reason, never dropped silently. All of it
or nothing, every write through `bindings.services`; problems are keyed by where they are in the document, e.g.
`channels.items.x-sse-kafka.topic`.
"""

from __future__ import annotations

import re
from functools import partial

from bindings.asyncapi.export import dump_yaml, export_asyncapi
from bindings.asyncapi.plan import _plan, _PlannedRoute
from bindings.asyncapi.schema import _DOCUMENT_KEY, _NAMED, EXTENSION
from bindings.documents import yaml_io
from bindings.documents.importing import ImportProblems, ImportResult, Write, run_import
from bindings.history import Actor
from bindings.services import do_put_endpoint, do_put_guard, do_put_route

# The format's entry points. Import is here; reading channels into a plan is in plan.py, the export in
# export.py, the mapping between our fields and the document's keys in schema.py.
__all__ = ["AsyncApiImportError", "ImportResult", "dump_yaml", "export_asyncapi", "import_asyncapi", "parse_document"]


class AsyncApiImportError(ImportProblems):
    """A document that cannot be imported: `errors` maps where each problem is (`channels.<id>.<field>`)."""


def parse_document(text: str | bytes, *, is_json: bool = False) -> object:
    """A document from YAML (JSON is YAML too) or, with `is_json`, strict JSON; AsyncApiImportError naming
    `document` if it is neither."""
    try:
        return yaml_io.load(text, is_json=is_json)
    except yaml_io.DocumentError as exc:
        what = "JSON" if is_json else "YAML or JSON"
        raise AsyncApiImportError({"document": [f"Not valid {what}: {exc}"]}) from None


def import_asyncapi(document: object, *, dry_run: bool = False, actor: Actor | None = None) -> ImportResult:
    """Create or replace a route for each SSE channel of an AsyncAPI 3 `document` (parsed YAML or JSON), and the
    guards and endpoints under its `x-sse-kafka`.

    All of it or nothing: raises AsyncApiImportError, having written nothing, if anything is wrong. With
    `dry_run` everything is validated and written inside a transaction that is then rolled back.
    """
    actor = actor or Actor(name="asyncapi import", source="import")
    errors: dict[str, list[str]] = {}
    ignored: list[str] = []
    routes, named = _plan(document, errors, ignored)
    if errors:
        raise AsyncApiImportError(errors)
    writes: list[Write] = []
    for kind, put in (("guard", do_put_guard), ("endpoint", do_put_endpoint)):
        section = f"{kind}s"
        document_keys = {argument: key for key, (argument, _, _) in _NAMED[section][1].items()}
        for name, arguments in named.get(section, {}).items():
            where = f"{EXTENSION}.{section}.{name}"
            write = partial(put, name=name, actor=actor, **arguments)
            writes.append(Write(kind, name, where, write, partial(_named_where, where, document_keys)))
    for planned in routes:
        put_route = partial(do_put_route, **planned.arguments, actor=actor)
        origin = ", ".join(f"channels.{channel}" for channel in planned.channels)
        writes.append(Write("route", planned.name, origin, put_route, partial(_where, planned)))
    return run_import(writes, dry_run=dry_run, ignored=ignored, error=AsyncApiImportError)


def _named_where(where: str, document_keys: dict[str, str], key: str) -> str:
    """The place in the document of a guard's or endpoint's error key (`issuer`, `cors_origins`...)."""
    document_key = document_keys.get(key)
    return f"{where}.{document_key}" if document_key else where


def _where(planned: _PlannedRoute, key: str) -> str:
    """The place in the document of a `do_put_route` error key (`topic`, `paths[1]`, `filters[0].key`...)."""
    first = f"channels.{planned.channels[0]}"
    match = re.fullmatch(r"paths\[(\d+)\]", key)
    if match is not None and int(match.group(1)) < len(planned.channels):
        return f"channels.{planned.channels[int(match.group(1))]}.address"
    if key in ("paths", "path"):
        return f"{first}.address"
    argument, _, rest = key.partition(".")
    argument, bracket, index = argument.partition("[")
    document_key = _DOCUMENT_KEY.get(argument)
    if document_key is None or document_key not in planned.explicit:
        return first
    return f"{first}.{EXTENSION}.{document_key}{bracket}{index}" + (f".{rest}" if rest else "")
