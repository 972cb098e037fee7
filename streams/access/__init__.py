"""Access control: who may open a stream, and for how long.

Holds the JWT guards (`guards`), a guard's JWKS URL (`jwks`), a guarded stream's token lease (`lease`), the
renewal of a stream's authorisation by a challenge response (`renewal`), and revocations in a web process
(`revocations`).

May import `streams.routes`, `streams.telemetry` and the layers under them, and `bindings.selectors`; never the
web edge, one stream or the hub.
"""
