"""Topic administration over the Kafka protocol (works the same on Kafka and the embedded broker)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from config.kafka_settings import KafkaSettings


def ensure_topic(kafka: KafkaSettings, name: str, *, partitions: int = 1, config: dict[str, str] | None = None) -> bool:
    """Create `name` unless it exists; True when it was created."""
    admin = AdminClient(kafka.admin_config())
    existing = admin.list_topics(timeout=kafka.metadata_timeout_s).topics
    if name in existing and existing[name].error is None:
        return False
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})]
    )
    try:
        futures[name].result(timeout=kafka.metadata_timeout_s * 2)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise
    return True
