"""The web edge: what a request meets first, and everything one web process holds for its streams.

Holds the SSE endpoint (`endpoint`), the requests on a stream path that open no stream (`side_requests`), the
HTTP pieces of a response (`http`), `/healthz` and `/readyz` (`readiness`), `/metrics` (`metrics`), the limits
an operator sets (`limits`), memory given back when idle (`memory`), and `runtime`, the one object that wires
them to the hub, the route table and access control.

May import every other package of `streams`; nothing in `streams` imports it (the top layer).
"""
