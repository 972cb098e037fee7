"""Every model of the control plane, in one package: Django imports `bindings.models` to find them.

`endpoints` holds the SSE endpoints; `guards` the JWT guards; `configuration` the routes, their conditions,
filters and guards, and the change history; `revocation` revocations; `catalogs` catalogs of schemas, their
inline schemas and the topic models that name them.
"""

from bindings.models.catalogs import DEFAULT_ENCODING, DEFAULT_MAX_AGE_S, LATEST, Catalog, InlineSchema, TopicModel
from bindings.models.configuration import (
    EVENT_ID_ETAG,
    EVENT_ID_KEY_AND_ETAG,
    SLOW_CLIENT_CLOSE,
    SLOW_CLIENT_CONFLATE,
    START_HISTORICAL,
    START_LIVE,
    Change,
    Route,
    RouteCondition,
    RouteFilter,
    RouteGuard,
    check_route_params,
    routes_in_order,
)
from bindings.models.endpoints import (
    DEFAULT_ENDPOINT,
    DEFAULT_KEEPALIVE_S,
    DEFAULT_RETRY_MS,
    Endpoint,
    default_endpoint,
)
from bindings.models.guards import (
    ASYMMETRIC_ALGORITHMS,
    DEFAULT_IDENTITY_CLAIM,
    DEFAULT_ROLES_CLAIM,
    PRIVATE_JWK_MEMBERS,
    Guard,
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
