"""A zilla.yaml refuses a key it does not know in every object it imports, as the API refuses a field: under the
key's own place in the file, with the key meant, and nothing is written. The objects are the API's
(`tests.support.shapes`); `NOT_REFUSED` says why a kind has no misspelling here."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from bindings import shapes
from bindings.history import Actor
from bindings.models import Catalog, Change, Guard, Route, TopicModel
from bindings.zilla.document import ZillaConfigError, do_import_zilla
from tests.support import jwt_keys
from tests.support.shapes import MEANT, writable_shapes

pytestmark = pytest.mark.django_db

ACTOR = Actor(name="tester", source="import")
ORDER = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]})
ROUTE = ("bindings", "sse_kafka", "routes", 0)
TOPIC = ("bindings", "kafka", "options", "topics", 0)

# Every object a zilla.yaml can hold, each with every key the misspellings below rename.
CONFIG: dict[str, Any] = {
    "name": "shop",
    "guards": {
        "authn_jwt": {
            "type": "jwt",
            "options": {
                "issuer": jwt_keys.ISSUER,
                "audience": jwt_keys.AUDIENCE,
                "keys": [jwt_keys.public_jwk()],
                "cookie": "token",
            },
        }
    },
    "catalogs": {
        "inline": {"type": "inline", "options": {"subjects": {"orders-value": {"schema": ORDER, "version": 1}}}},
        "registry": {"type": "karapace", "options": {"url": "http://karapace:8081", "max-age": 30}},
    },
    "bindings": {
        "sse_server": {"type": "sse", "kind": "server", "options": {"keepalive": 20}, "exit": "sse_kafka"},
        "sse_kafka": {
            "type": "sse-kafka",
            "kind": "proxy",
            "routes": [
                {
                    "when": [{"path": "/orders"}],
                    "guarded": {"authn_jwt": ["read"]},
                    "exit": "kafka",
                    "with": {
                        "topic": "orders",
                        "filters": [{"key": "k"}, {"value": {"path": "status", "equals": "open"}}],
                    },
                }
            ],
        },
        "kafka": {
            "type": "kafka",
            "kind": "cache_client",
            "options": {
                "topics": [
                    {"name": "orders", "key": {"model": "string"}, "value": {"model": "string", "encoding": "utf_8"}}
                ]
            },
        },
    },
}

# shape -> (the mapping that holds the key, the key, its misspelling, where the error is, the key meant)
MISSPELT: dict[type[shapes.Shape], tuple[tuple[str | int, ...], str, str, str, str]] = {
    shapes.RouteShape: (ROUTE, "guarded", "gaurded", "bindings.sse_kafka.routes[0].gaurded", "guarded"),
    shapes.FilterShape: (
        (*ROUTE, "with", "filters", 0), "key", "kee", "bindings.sse_kafka.routes[0].with.filters[0].kee", "key"
    ),
    shapes.FilterValueShape: (
        (*ROUTE, "with", "filters", 1, "value"),
        "equals",
        "equal",
        "bindings.sse_kafka.routes[0].with.filters[1].value.equal",
        "equals",
    ),
    shapes.EndpointShape: (
        ("bindings", "sse_server", "options"), "keepalive", "keepalve", "bindings.sse_server.options.keepalve",
        "keepalive",
    ),
    shapes.GuardShape: (
        ("guards", "authn_jwt", "options"), "cookie", "cookei", "guards.authn_jwt.options.cookei", "cookie"
    ),
    shapes.CatalogShape: (
        ("catalogs", "registry", "options"), "max-age", "max_age", "catalogs.registry.options.max_age", "max-age"
    ),
    shapes.InlineSubjectShape: (
        ("catalogs", "inline", "options", "subjects", "orders-value"),
        "version",
        "verison",
        "catalogs.inline.options.subjects.orders-value.verison",
        "version",
    ),
    shapes.ModelShape: (
        (*TOPIC, "value"), "encoding", "encodign", "bindings.kafka.options.topics[0].value.encodign", "encoding"
    ),
}  # fmt: skip

NOT_REFUSED = {
    shapes.RevocationShape: "a zilla.yaml has no revocations",
    # Zilla's topic entries carry options this platform does not import (defaultOffset, ...): another key of a
    # topic is listed as ignored, not refused (`test_an_unknown_key_of_a_topic_is_listed_as_ignored`).
    shapes.TopicModelShape: "a topic's other keys are Zilla's and listed as ignored",
}


def misspelt(path: tuple[str | int, ...], right: str, wrong: str) -> str:
    config = copy.deepcopy(CONFIG)
    holder: Any = config
    for step in path:
        holder = holder[step]
    holder[wrong] = holder.pop(right)
    return yaml.safe_dump(config)


def nothing_written() -> bool:
    models = (Route, Guard, Catalog, TopicModel, Change)
    return not any(model.objects.exists() for model in models)


def test_it_covers_every_shape() -> None:
    assert set(MISSPELT) | set(NOT_REFUSED) == writable_shapes()
    assert not set(MISSPELT) & set(NOT_REFUSED)


def test_the_file_imports_as_it_is() -> None:
    result = do_import_zilla(yaml.safe_dump(CONFIG), actor=ACTOR)
    kinds = sorted({item.kind for item in result.of("created")})
    assert kinds == ["catalog", "endpoint", "guard", "route", "topic-model"]


@pytest.mark.parametrize("shape", MISSPELT, ids=lambda shape: shape.__name__)
def test_a_misspelt_key_is_refused_where_it_is_and_nothing_is_written(shape: type[shapes.Shape]) -> None:
    path, right, wrong, where, meant = MISSPELT[shape]
    with pytest.raises(ZillaConfigError) as caught:
        do_import_zilla(misspelt(path, right, wrong), actor=ACTOR)
    assert caught.value.errors == {where: [MEANT.format(meant)]}
    assert nothing_written()


def test_an_unknown_key_of_a_topic_is_listed_as_ignored() -> None:
    result = do_import_zilla(misspelt(TOPIC, "value", "vaule"), actor=ACTOR)
    assert "binding kafka, topic orders: vaule ignored" in result.ignored
