"""The route table of a web process: compiled routes, matching a path, route filters, and hearing changes.

Holds `table` (compiled once, rebuilt when the configuration changes), `matching` (a request path against the
routes), `filters` (a route's filters compiled against a request's params) and `listen` (a Channels group
heard for as long as the process lives: the control plane's changes and broadcasts).

May import `streams.kafka` (its record type), `streams.codecs` and `bindings` (selectors, patterns, changes).
"""
