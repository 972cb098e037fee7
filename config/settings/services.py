"""Connections to the services the platform uses: Redis (Channels layer, Celery) and Kafka."""

from __future__ import annotations

from config.env import envint, envstr, redis_url
from config.kafka_settings import KafkaSettings

REDIS_URL = redis_url("REDIS_URL", envstr("REDIS_URL"))

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL]},
    },
}

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

KAFKA = KafkaSettings(
    bootstrap_servers=envstr("KAFKA_BOOTSTRAP_SERVERS"),
    client_id=envstr("KAFKA_CLIENT_ID", default="sse-platform"),
    fetch_wait_max_ms=envint("KAFKA_FETCH_WAIT_MAX_MS", default=20, minimum=1, maximum=10_000),
    metadata_timeout_s=envint("KAFKA_METADATA_TIMEOUT_MS", default=5_000, minimum=100) / 1000,
    fetch_queue_kbytes=envint("KAFKA_FETCH_QUEUE_KBYTES", default=8192, minimum=1024),
    leader_refresh_ms=envint("KAFKA_LEADER_REFRESH_MS", default=250, minimum=10, maximum=300_000),
    # Kafka consumers one process opens at once for streams replaying history older than its cache (0: no limit);
    # past it a new stream that needs one gets a 503, and one already open waits for a free reader.
    max_historical_readers=envint("SSE_MAX_HISTORICAL_READERS", default=64, minimum=0),
)

# Spark for the analytics rollup: local[*] by default, or a cluster (spark://host:7077).
SPARK_MASTER = envstr("SPARK_MASTER", default="local[*]")
# How often beat runs the rollup (the schedule lives in the database and can be edited in the admin).
ANALYTICS_ROLLUP_EVERY_S = envint("ANALYTICS_ROLLUP_EVERY_S", default=60, minimum=5)
