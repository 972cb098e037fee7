"""Records to a stream's events, with no I/O: decisions and encoding a test can drive with plain data.

Holds `start_plan` (where each partition of a new stream starts, decided from the broker's answers) and
`subscription` (one stream's view of a topic: filters records and turns them into SSE bytes).

May import `streams.routes` (the route filters), `streams.kafka` (its record type) and `streams.codecs`.
"""
