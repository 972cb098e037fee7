"""The Kafka connection settings, one frozen object shared by every part that talks to Kafka."""

from __future__ import annotations

from dataclasses import dataclass

Config = dict[str, str | int | float | bool]

# Apache Kafka creates a topic that a metadata request names when `auto.create.topics.enable` is on, its default,
# and librdkafka's producers (and the admin client, a producer inside) ask it to: a deleted topic that a client
# still knew would come back, with the broker's default partitions, under the streams that just ended. The
# platform creates the topics it needs itself (streams/kafka/admin.py), so none of its clients ever asks.
NEVER_CREATE: Config = {"allow.auto.create.topics": False}
METADATA_MAX_AGE_MS = 900_000  # librdkafka's default with its default refresh interval (three times 300 s)


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap_servers: str
    client_id: str = "sse-platform"
    # Kafka answers a waiting fetch as soon as a record arrives, so this does not bound steady latency; it bounds
    # how long a partition newly assigned waits behind a fetch already out, and on a broker that does not wake
    # waiting fetches, the latency itself. 20, 100 and 500 ms gave the same 1000x100 latency on Kafka 4.1
    # (docs/benchmarks.md), so the default stays at 20 ms, the cheapest for a new stream's first read.
    fetch_wait_max_ms: int = 20
    metadata_timeout_s: float = 5.0
    # librdkafka prefetches up to this much per consumer (its default, 64 MiB, would dwarf a small cache).
    fetch_queue_kbytes: int = 8192
    max_historical_readers: int = 0  # at once per process; 0: no limit
    # How often the live fetcher asks Kafka for its topics' partition leaders (`fetcher_config`): one metadata
    # request per worker process per interval, naming the topics it fetches.
    leader_refresh_ms: int = 250

    def consumer_config(self) -> Config:
        """librdkafka settings for a group-less reader (``assign()`` with explicit offsets)."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": self.client_id,
            "group.id": f"{self.client_id}-nogroup",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            # An offset that falls out of range (retention overtook a paused or lagging fetch) goes on from Kafka's
            # first record, never from its last: the streams below it get their `reset`, and nothing later is lost.
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": self.fetch_wait_max_ms,
            "queued.max.messages.kbytes": self.fetch_queue_kbytes,
            "fetch.max.bytes": min(52428800, self.fetch_queue_kbytes * 1024),
            "socket.connection.setup.timeout.ms": int(self.metadata_timeout_s * 1000),
            **NEVER_CREATE,
        }

    def fetcher_config(self) -> Config:
        """The live fetcher's consumer (streams/kafka/fetcher.py): `consumer_config()`, and a partition whose leader
        died is fetched from the new leader within two `leader_refresh_ms` of Kafka electing it (docs/operations.md,
        "Broker failover").

        librdkafka asks again for such a partition's leader only on its one-second scan of topics, and on learning
        the new leader it can leave the partition parked until the next scan (traced on 2.16: a second more), so a
        record stalled up to two seconds longer on a stream than on a producer. Its periodic refresh of the assigned
        topics' metadata, at this pace, finds the leader and clears the parking sooner. The metadata cache keeps
        librdkafka's usual age (it would otherwise default to three refresh intervals and expire under a broker's
        slow answers).
        """
        return {
            **self.consumer_config(),
            "topic.metadata.refresh.interval.ms": self.leader_refresh_ms,
            "metadata.max.age.ms": METADATA_MAX_AGE_MS,
        }

    def producer_config(self) -> Config:
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": self.client_id,
            "linger.ms": 2,
            **NEVER_CREATE,
        }

    def admin_config(self) -> Config:
        return {"bootstrap.servers": self.bootstrap_servers, "client.id": self.client_id, **NEVER_CREATE}
