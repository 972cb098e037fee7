"""Every model of the control plane, in one package: Django imports `bindings.models` to find them.

`configuration` holds endpoints, guards, routes, their conditions and filters, and the change history;
`revocation` holds revocations; `catalogs` holds catalogs of schemas, their inline schemas and the topic models
that name them.
"""

from bindings.models.catalogs import DEFAULT_ENCODING, DEFAULT_MAX_AGE_S, LATEST, Catalog, InlineSchema, TopicModel
from bindings.models.configuration import (
    ASYMMETRIC_ALGORITHMS,
    DEFAULT_ENDPOINT,
    DEFAULT_IDENTITY_CLAIM,
    DEFAULT_KEEPALIVE_S,
    DEFAULT_RETRY_MS,
    DEFAULT_ROLES_CLAIM,
    EVENT_ID_ETAG,
    EVENT_ID_KEY_AND_ETAG,
    PRIVATE_JWK_MEMBERS,
    SLOW_CLIENT_CLOSE,
    SLOW_CLIENT_CONFLATE,
    START_HISTORICAL,
    START_LIVE,
    Change,
    Endpoint,
    Guard,
    Route,
    RouteCondition,
    RouteFilter,
    RouteGuard,
    check_route_params,
    default_endpoint,
    routes_in_order,
)
from bindings.models.revocation import Revocation

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "DEFAULT_ENCODING",
    "DEFAULT_ENDPOINT",
    "DEFAULT_IDENTITY_CLAIM",
    "DEFAULT_KEEPALIVE_S",
    "DEFAULT_MAX_AGE_S",
    "DEFAULT_RETRY_MS",
    "DEFAULT_ROLES_CLAIM",
    "EVENT_ID_ETAG",
    "EVENT_ID_KEY_AND_ETAG",
    "LATEST",
    "PRIVATE_JWK_MEMBERS",
    "SLOW_CLIENT_CLOSE",
    "SLOW_CLIENT_CONFLATE",
    "START_HISTORICAL",
    "START_LIVE",
    "Catalog",
    "Change",
    "Endpoint",
    "Guard",
    "InlineSchema",
    "Revocation",
    "Route",
    "RouteCondition",
    "RouteFilter",
    "RouteGuard",
    "TopicModel",
    "check_route_params",
    "default_endpoint",
    "routes_in_order",
]
