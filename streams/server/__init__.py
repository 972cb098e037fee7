"""The HTTP server of a web worker: daphne with write flow control, speaking HTTP/1.1 to the edge in front.

Holds `daphne` (the server: the app learns when a client's connection is full), `bodies` (request bodies bounded as
they arrive), `forwarded` (the client address: forwarded headers only from the edge or a trusted proxy),
`addresses` (the one key per client that every per-address limit counts), `reaping` (finished requests forgotten
when they change) and `collector` (the garbage collector tuned for long-lived streams). TLS, HTTP/2 and the
connection-level policy are the edge's (platform/edge/haproxy.cfg). `python -m streams.server` runs it (`__main__`).

Imports nothing of `streams` but itself (one stream imports its flow control), `config.logs`, and Django's
settings (`TRUSTED_PROXIES`, `SSE_CLIENT_IPV6_PREFIX`, the body bounds), which daphne has loaded with the
application by the time the server is built.
"""
