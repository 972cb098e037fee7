"""zilla.yaml: Zilla's configuration read into endpoints, guards and routes, and written back.

Holds `document` (import and export), `plan` (the file's shape and the planning of endpoints and routes),
`guards` (JWT guards) and `export` (writing a zilla.yaml). Imports the shared core (`bindings.documents`),
never `bindings.asyncapi`.
"""
