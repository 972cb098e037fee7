"""The external form of each configuration object: what the API shows, what history records, what imports
write back. One function per kind, so the API, the change history and the exports never disagree."""

from __future__ import annotations

from typing import Any

from bindings.models import LATEST, Catalog, Endpoint, Guard, Route, RouteFilter, TopicModel
from bindings.models.catalogs import redacted_url


def route_representation(route: Route) -> dict[str, Any]:
    """A route as the API shows it; reads prefetched conditions, filters and guards when there are."""
    return {
        "name": route.name,
        "position": route.position,
        "endpoint": route.endpoint.name,
        "topic": route.topic,
        "paths": [condition.path for condition in route.conditions.all()],
        "filters": [filter_representation(route_filter) for route_filter in route.filters.all()],
        "guarded": {route_guard.guard.name: list(route_guard.roles) for route_guard in route.guards.all()},
        "event_id": route.event_id,
        "start": route.start,
        "caught_up": route.caught_up,
        "slow_client": route.slow_client,
        "fields": list(route.fields),
        "conflate_ms": route.conflate_ms,
    }


def filter_representation(route_filter: RouteFilter) -> dict[str, Any]:
    """A filter as the API shows it: every field, `expression` "" when it has none."""
    return {
        "key": route_filter.key,
        "headers": dict(route_filter.header_items()),
        "value": (
            {"path": route_filter.value_path, "equals": route_filter.value_equals} if route_filter.value_path else None
        ),
        "expression": route_filter.expression,
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


def catalog_representation(catalog: Catalog) -> dict[str, Any]:
    """A catalog as the API shows it: never its `auth`, only whether one is set and when it was last set, and its
    URL without the user info of one saved before such URLs were refused."""
    schemas = sorted(catalog.schemas.all(), key=lambda schema: (schema.subject, schema.version))
    latest = {schema.subject: schema for schema in schemas}  # the last of each subject is its latest
    return {
        "name": catalog.name,
        "kind": catalog.kind,
        "url": redacted_url(catalog.url) if catalog.url else None,
        "auth_set": bool(catalog.auth),
        "auth_updated": catalog.auth_updated.isoformat() if catalog.auth_updated else None,
        "max_age_s": catalog.max_age_s,
        "subjects": {
            subject: {"format": schema.format, "schema": schema.text, "version": schema.version}
            for subject, schema in latest.items()
        },
        "schemas": [
            {"subject": schema.subject, "version": schema.version, "format": schema.format, "schema": schema.text}
            for schema in schemas
        ],
    }


def model_representation(topic_model: TopicModel, side: str) -> dict[str, Any] | None:
    """The key's or value's model as the API shows it (None: raw bytes); every key present, null where unused."""
    fields = topic_model.side(side)
    if not fields["model"]:
        return None
    catalog = fields["catalog"]
    by_id = fields["strategy"] == TopicModel.Strategy.ID
    version = fields["version"] or LATEST
    return {
        "model": fields["model"],
        "catalog": catalog.name if catalog is not None else None,
        "strategy": fields["strategy"] or None,
        "id": fields["schema_id"],
        "subject": fields["subject"] or None,
        "version": None if catalog is None or by_id else (LATEST if version == LATEST else int(version)),
        "record": fields["record"] or None,
        "encoding": fields["encoding"] or None,
    }


def topic_model_representation(topic_model: TopicModel) -> dict[str, Any]:
    return {
        "topic": topic_model.topic,
        "key": model_representation(topic_model, "key"),
        "value": model_representation(topic_model, "value"),
    }
