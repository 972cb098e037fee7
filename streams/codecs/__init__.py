"""Codecs: the SSE wire format, event ids, ASGI types and schema decoding, with no state but caches.

Holds `sse` (events, comments and the retry line, as bytes), `event_id` (Zilla-compatible event ids) and
`asgi` (the ASGI types and request helpers every layer above shares), and `schemas/`, which turns Avro,
Protobuf, JSON and plain records into JSON (docs/schemas.md); its registry client is the one module here with
I/O, for the fetch processes that decode records import nothing above the codecs.

Imports nothing of the project but `bindings.schemas`, the rules of what a schema may be, which the control
plane's forms and these decoders apply alike (pure functions, no Django; an import-linter contract keeps it
so): every other package may import it.
"""
