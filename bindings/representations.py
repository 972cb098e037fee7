"""The external form of each configuration object: what the API shows, what history records, what imports
write back. One function per kind, so the API, the change history and the exports never disagree."""

from __future__ import annotations

from typing import Any

from bindings.models import Endpoint, Guard, Route


def route_representation(route: Route) -> dict[str, Any]:
    """A route as the API shows it; reads prefetched conditions, filters and guards when there are."""
    return {
        "name": route.name,
        "position": route.position,
        "endpoint": route.endpoint.name,
        "topic": route.topic,
        "paths": [condition.path for condition in route.conditions.all()],
        "filters": [
            {
                "key": route_filter.key,
                "headers": dict(route_filter.header_items()),
                "value": (
                    {"path": route_filter.value_path, "equals": route_filter.value_equals}
                    if route_filter.value_path
                    else None
                ),
            }
            for route_filter in route.filters.all()
        ],
        "guarded": {route_guard.guard.name: list(route_guard.roles) for route_guard in route.guards.all()},
        "event_id": route.event_id,
        "start": route.start,
        "caught_up": route.caught_up,
        "slow_client": route.slow_client,
    }


def endpoint_representation(endpoint: Endpoint) -> dict[str, Any]:
    return {
        "name": endpoint.name,
        "retry_ms": endpoint.retry_ms,
        "keepalive_s": endpoint.keepalive_s,
        "cors_origins": list(endpoint.cors_origins),
        "cors_credentials": endpoint.cors_credentials,
        "max_streams_per_client": endpoint.max_streams_per_client,
        "max_streams_per_identity": endpoint.max_streams_per_identity,
    }


def guard_representation(guard: Guard) -> dict[str, Any]:
    return {
        "name": guard.name,
        "issuer": guard.issuer,
        "audience": guard.audience,
        "keys": guard.keys,
        "jwks_url": guard.jwks_url,
        "roles_claim": guard.roles_claim,
        "identity_claim": guard.identity_claim,
        "attributes": guard.attributes,
        "challenge_s": guard.challenge_s,
        "cookie": guard.cookie,
        "allow_tokens_without_exp": guard.allow_tokens_without_exp,
    }
