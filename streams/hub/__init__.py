"""The per-process hub: between the fetcher and the streams, one per web process.

Holds `hub` (topics read by this process, the fan-out, the janitor), the cache of recent records (`cache`),
topics described and grown (`descriptions`), the fetcher's reports taken in (`arrivals`), where a new stream
starts (`start_finder`), topics deleted under their streams (`deletions`), changes to the topics noticed
(`topic_watch`), the stall watch (`watchdog`) and catch-up reads shared by streams in the same position
(`shared_reads`).

May import `streams.events` and the layers under it; never one stream, access control or the web edge.
Inside, `hub` alone assembles the others; they share the topic state and never import `hub`.
"""
