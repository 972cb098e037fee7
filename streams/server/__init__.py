"""The HTTP server: daphne with write flow control, and HTTPS with HTTP/2.

Holds `daphne` (the server: the app learns when a client's transport is full), `tls` (HTTPS on a listening
socket handed to a worker), `forwarded` (the client address: forwarded headers only from a trusted proxy) and
`addresses` (the one key per client that every per-address limit counts).
`python -m streams.server` runs it (`__main__`).

Imports nothing of `streams` but itself (one stream imports its flow control), `config.logs`, and Django's
settings (`TRUSTED_PROXIES`, `SSE_CLIENT_IPV6_PREFIX`, the body bounds), which daphne has loaded with the
application by the time the server is built.
"""
