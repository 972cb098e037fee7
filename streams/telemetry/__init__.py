"""What a web process records of its streams: the delivery log and the counters.

Holds `delivery_log` (what this process delivered, to whom, and whom it refused, tallied on the event loop),
`log_writer` (the thread that sends those tallies as rows to a Kafka topic), `delivery_schema` (the rows' format,
read by `analytics`) and `counters` (counts of a process's streams).
Prometheus metrics, served by the web edge, are `streams.edge.metrics`.

May import `streams.kafka` (its record type, and its admin to create the log's topic) and `streams.codecs`.
"""
