"""Pure codecs: the SSE wire format, the event-id codec and the ASGI types, with no I/O and no state.

Holds `sse` (events, comments and the retry line, as bytes), `event_id` (Zilla-compatible event ids) and
`asgi` (the ASGI types and request helpers every layer above shares).

Imports nothing of the project: every other package may import it.
"""
