"""AsyncAPI 3.0: the routes as a document a client can read, and a document's SSE channels as routes.

Holds `document` (import and export), `plan` (channels into planned routes, guards and endpoints), `schema`
(how our configuration maps to the document's keys) and `export`. Imports the shared core
(`bindings.documents`), never `bindings.zilla`.
"""
