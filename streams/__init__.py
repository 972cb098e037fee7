"""The data plane: SSE endpoint, route matching, event-id codec, wire format, Kafka reading."""
