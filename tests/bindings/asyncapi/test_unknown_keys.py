"""An AsyncAPI document refuses a key it does not know in every object it imports, as the API refuses a field:
under the key's own place in the document, with the key meant, and nothing is written. The objects are the API's
(`tests.support.shapes`); `NOT_IMPORTED` says which this format has no place for."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bindings import shapes
from bindings.asyncapi.document import AsyncApiImportError, import_asyncapi
from bindings.models import Change, Endpoint, Guard, Route
from tests.support import jwt_keys
from tests.support.shapes import MEANT, writable_shapes

pytestmark = pytest.mark.django_db

CHANNEL = ("channels", "orders", "x-sse-kafka")

# Every object an AsyncAPI document can hold, each with every key the misspellings below rename.
DOCUMENT: dict[str, Any] = {
    "asyncapi": "3.0.0",
    "info": {"title": "shop", "version": "1"},
    "x-sse-kafka": {
        "guards": {
            "jwt": {
                "issuer": jwt_keys.ISSUER,
                "audience": jwt_keys.AUDIENCE,
                "keys": [jwt_keys.public_jwk()],
                "cookie": "token",
            }
        },
        "endpoints": {"eu": {"retry-ms": 5000, "keepalive-s": 30}},
    },
    "channels": {
        "orders": {
            "address": "/orders",
            "x-sse-kafka": {
                "topic": "orders",
                "endpoint": "eu",
                "guarded": {"jwt": ["read"]},
                "filters": [{"key": "k"}, {"value": {"path": "status", "equals": "open"}}],
            },
        }
    },
}

# shape -> (the object that holds the key, the key, its misspelling, where the error is, the key meant)
MISSPELT: dict[type[shapes.Shape], tuple[tuple[str | int, ...], str, str, str, str]] = {
    shapes.RouteShape: (CHANNEL, "guarded", "gaurded", "channels.orders.x-sse-kafka.gaurded", "guarded"),
    shapes.FilterShape: (
        (*CHANNEL, "filters", 0), "key", "kee", "channels.orders.x-sse-kafka.filters[0].kee", "key"
    ),
    shapes.FilterValueShape: (
        (*CHANNEL, "filters", 1, "value"),
        "equals",
        "equal",
        "channels.orders.x-sse-kafka.filters[1].value.equal",
        "equals",
    ),
    shapes.EndpointShape: (
        ("x-sse-kafka", "endpoints", "eu"), "keepalive-s", "keepalive", "x-sse-kafka.endpoints.eu.keepalive",
        "keepalive-s",
    ),
    shapes.GuardShape: (
        ("x-sse-kafka", "guards", "jwt"), "cookie", "cookei", "x-sse-kafka.guards.jwt.cookei", "cookie"
    ),
}  # fmt: skip

# The import writes routes, with the guards and endpoints they use; the rest has its own API.
NOT_IMPORTED = {
    shapes.RevocationShape,
    shapes.CatalogShape,
    shapes.InlineSubjectShape,
    shapes.TopicModelShape,
    shapes.ModelShape,
}


def misspelt(path: tuple[str | int, ...], right: str, wrong: str) -> dict[str, Any]:
    document = copy.deepcopy(DOCUMENT)
    holder: Any = document
    for step in path:
        holder = holder[step]
    holder[wrong] = holder.pop(right)
    return document


def test_it_covers_every_shape() -> None:
    assert set(MISSPELT) | NOT_IMPORTED == writable_shapes()
    assert not set(MISSPELT) & NOT_IMPORTED


def test_the_document_imports_as_it_is() -> None:
    result = import_asyncapi(copy.deepcopy(DOCUMENT))
    assert sorted(f"{item.kind} {item.name}" for item in result.of("created")) == [
        "endpoint eu",
        "guard jwt",
        "route orders",
    ]


@pytest.mark.parametrize("shape", MISSPELT, ids=lambda shape: shape.__name__)
def test_a_misspelt_key_is_refused_where_it_is_and_nothing_is_written(shape: type[shapes.Shape]) -> None:
    path, right, wrong, where, meant = MISSPELT[shape]
    with pytest.raises(AsyncApiImportError) as caught:
        import_asyncapi(misspelt(path, right, wrong))
    assert caught.value.errors == {where: [MEANT.format(meant)]}
    assert not Route.objects.exists()
    assert not Guard.objects.exists()
    assert not Endpoint.objects.filter(name="eu").exists()
    assert not Change.objects.exists()
