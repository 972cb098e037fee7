"""The REST API (`/api/v1/`): its views, one module per resource, and the plumbing they share.

Views: `resources` (routes, endpoints, guards, changes), `revocations`, `zilla` (import and export of
zilla.yaml) and `asyncapi` (AsyncAPI 3.0), with `urls`. Plumbing: `permissions`, `parsers`, `problems`
(RFC 9457 bodies), `query_filters` (list filters and paging) and `openapi` (what the schema cannot infer).

May import the rest of `bindings`; nothing of the data plane.
"""
