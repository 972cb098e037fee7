"""Kafka access for the data plane: the consumers, their child processes, and the admin calls.

Holds `client` (records, topic metadata and historical reads, off the event loop), `admin` (topic
administration), `fetcher` (one consumer per web process, in a child process), `fetch_process` (the child
processes themselves, run as `python -m streams.kafka.fetch_process`), `consumer_host` (the historical
readers' consumers) and `pipe` (what a child process sends the worker over its socket).

May import `streams.codecs` and `config.kafka_settings`; nothing else of the project.
"""
