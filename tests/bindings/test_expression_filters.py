"""A route filter's CEL `expression` on the control plane: compiled and type-checked when the route is saved, an
error on `filters[i].expression` in the services, the API, the admin and the importers; stored, shown, recorded in
the history and carried by the exports (docs/contract.md §7)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client

from bindings.asyncapi.document import AsyncApiImportError, export_asyncapi, import_asyncapi
from bindings.history import Actor
from bindings.models import Change, Route
from bindings.selectors import route_specs
from bindings.services import do_put_route
from bindings.zilla.document import ZillaConfigError, do_import_zilla, export_zilla
from tests.bindings.test_control_plane import route_form

pytestmark = pytest.mark.django_db

GOOD = "value.order.total > 100.0 && value.order.region == params.region && has(headers.tag)"


def put_errors(expression: object) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as info:
        do_put_route(name="r", paths=["/orders/{region}"], topic="orders", filters=[{"expression": expression}])
    assert not Route.objects.exists()
    return info.value.message_dict


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("value.total >", "line 1, column 14: Syntax error"),
        ("params.region + 1", "no matching overload for '_+_' applied to '(string, int)'"),
        ("value.total > limit", "undeclared reference to 'limit'"),
        ("size(value.items)", "gives int; a filter's expression must give a boolean"),
        ("headers.tag", "gives string"),
        ("   ", "cannot be empty"),
        (7, "An expression is a string of CEL."),
    ],
)
def test_it_refuses_an_expression_that_cannot_be_a_filter_on_its_field(expression: object, words: str) -> None:
    errors = put_errors(expression)
    assert list(errors) == ["filters[0].expression"], errors
    assert words in errors["filters[0].expression"][0], errors


def test_it_stores_an_expression_and_hands_it_to_the_data_plane() -> None:
    route = do_put_route(
        name="r", paths=["/orders/{region}"], topic="orders", filters=[{"expression": GOOD}, {"key": "k"}]
    )
    assert [f.expression for f in route.filters.all()] == [GOOD, ""]
    (spec,) = route_specs()
    assert [f.expression for f in spec.filters] == [GOOD, ""]
    after = Change.objects.get(kind="route").after
    assert after is not None
    assert after["filters"] == [
        {"key": None, "headers": {}, "value": None, "expression": GOOD},
        {"key": "k", "headers": {}, "value": None, "expression": ""},
    ]


@pytest.fixture
def api(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-test-password"))
    return client


def test_the_api_answers_400_naming_the_expression_and_shows_a_good_one(api: Client) -> None:
    body: dict[str, Any] = {"topic": "orders", "paths": ["/orders/{region}"], "filters": [{"expression": "value >"}]}
    refused = api.put("/api/v1/routes/r/", body, content_type="application/json")
    assert refused.status_code == 400
    assert refused["content-type"] == "application/problem+json"
    assert list(refused.json()["errors"]) == ["filters[0].expression"]
    body["filters"] = [{"expression": GOOD}]
    created = api.put("/api/v1/routes/r/", body, content_type="application/json")
    assert created.status_code == 201, created.content
    assert created.json()["filters"] == [{"key": None, "headers": {}, "value": None, "expression": GOOD}]
    schema = yaml.safe_load(api.get("/api/v1/schema/").content)
    assert "expression" in schema["components"]["schemas"]["FilterSpecRequest"]["properties"]


def test_the_admin_shows_a_bad_expression_on_its_field(api: Client) -> None:
    response = api.post("/admin/bindings/route/add/", route_form(filters=[{"expression": "value.total >"}]))
    assert response.status_code == 200
    formset = next(f for f in response.context["inline_admin_formsets"] if f.formset.prefix == "filters").formset
    assert list(formset.forms[0].errors) == ["expression"]
    assert "Syntax error" in formset.forms[0].errors["expression"][0]
    created = api.post("/admin/bindings/route/add/", route_form(filters=[{"expression": "value.total > 1"}]))
    assert created.status_code == 302
    assert Route.objects.get().filters.get().expression == "value.total > 1"


ZILLA = """
name: shop
bindings:
  sse_server:
    type: sse
    kind: server
    exit: sse_kafka
  sse_kafka:
    type: sse-kafka
    kind: proxy
    routes:
      - when:
          - path: /orders
        exit: kafka_cache_client
        with:
          topic: orders
          filters:
            - expression: EXPRESSION
  kafka_cache_client:
    type: kafka
    kind: cache_client
"""


def test_a_zilla_import_reports_a_bad_expression_where_it_is_and_the_export_marks_it_ours() -> None:
    actor = Actor(name="tester", source="import")
    with pytest.raises(ZillaConfigError) as info:
        do_import_zilla(ZILLA.replace("EXPRESSION", "'value.total >'"), actor=actor)
    assert list(info.value.errors) == ["bindings.sse_kafka.routes[0].with.filters[0].expression"]
    do_import_zilla(ZILLA.replace("EXPRESSION", "'value.total > 1'"), actor=actor)
    text, notes = export_zilla()
    name = Route.objects.get().name
    assert f"route {name}: the expression filter 'value.total > 1' (not in Zilla's schema)" in notes, notes
    routes = [r for b in yaml.safe_load(text)["bindings"].values() if b["type"] == "sse-kafka" for r in b["routes"]]
    assert [route["with"].get("filters") for route in routes] == [[{"expression": "value.total > 1"}]]
    strict, strict_notes = export_zilla(strict=True)
    assert "expression" not in strict
    assert any(note.startswith("left out: ") and "expression filter" in note for note in strict_notes)


def test_the_asyncapi_export_carries_an_expression_and_its_import_checks_it() -> None:
    do_put_route(name="r", paths=["/orders/{region}"], topic="orders", filters=[{"expression": GOOD}])
    document = export_asyncapi("https://sse.example.com")
    channel = next(iter(document["channels"].values()))
    assert channel["x-sse-kafka"]["filters"][0]["expression"] == GOOD
    channel["x-sse-kafka"]["filters"][0]["expression"] = "value.total >"
    with pytest.raises(AsyncApiImportError) as info:
        import_asyncapi(document)
    assert any(key.endswith("filters[0].expression") for key in info.value.errors), info.value.errors
