"""Kafka access for the data plane: the consumers, their child processes, and the admin calls.

Holds `client` (records, topic metadata and historical reads, off the event loop), `admin` (topic administration),
`fetcher` (a web process's two consumers, one for the topics with models and one for the rest, each in a child
process), `consumer_process` (such a child from the worker's side, and the watch on the one that decodes),
`fetch_process` (the child processes themselves, run as `python -m streams.kafka.fetch_process`), `consumer_host`
and `host_process` (the historical readers' consumers, from the worker's side and in their process), `pipe` (what a
child process sends the worker over its socket), `records` (a fetched record as a tuple), `process_logs` (how child
processes log), and decoding where records are fetched: `decoding` (a record's key and value to JSON),
`decode_queue` (records on their way to be decoded), `inline_decoder` (decoding in the decoded topics' fetch
process), `decoder` and `decoder_process` (the historical readers' host's decoder process, from its owner's side and
its own).

May import `streams.codecs` and `config.kafka_settings`; nothing else of the project.
"""
