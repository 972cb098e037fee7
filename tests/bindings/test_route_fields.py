"""A route's `fields` (JSON Pointers) on the control plane: checked on save, keyed by the field, in the services,
the API, the admin and the importers; stored, shown, recorded and carried by the exports (docs/contract.md §7)."""

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


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        (["price"], "'price': a JSON Pointer starts with '/'"),
        (["/a~2b"], "'~' is written '~0'"),
        (["/price", "/price"], "'/price' is listed twice."),
        ([f"/f{n}" for n in range(65)], "At most 64 fields."),
        ("/price", None),
        ([7], None),
    ],
)
def test_it_refuses_fields_that_are_no_json_pointers_on_the_field(fields: Any, words: str | None) -> None:
    with pytest.raises(ValidationError) as info:
        do_put_route(name="r", path="/items", topic="items", fields=fields)
    errors = info.value.message_dict
    assert list(errors) == ["fields"] or all(key.startswith("fields") for key in errors), errors
    if words is not None:
        assert any(words in message for message in errors["fields"]), errors
    assert not Route.objects.exists()


def test_it_stores_the_fields_and_hands_them_to_the_data_plane() -> None:
    do_put_route(name="r", path="/items", topic="items", fields=["/price", "/item/name"])
    assert route_specs()[0].fields == ("/price", "/item/name")
    after = Change.objects.get(kind="route").after
    assert after is not None
    assert after["fields"] == ["/price", "/item/name"]


@pytest.fixture
def api(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-test-password"))
    return client


def test_the_api_and_the_admin_name_the_fields(api: Client) -> None:
    body = {"topic": "items", "paths": ["/items"], "fields": ["price"]}
    refused = api.put("/api/v1/routes/r/", body, content_type="application/json")
    assert refused.status_code == 400
    assert list(refused.json()["errors"]) == ["fields"]
    created = api.put("/api/v1/routes/r/", {**body, "fields": ["/price"]}, content_type="application/json")
    assert created.status_code == 201, created.content
    assert created.json()["fields"] == ["/price"]
    response = api.post("/admin/bindings/route/add/", route_form(name="a", fields="/price,nope"))
    assert response.status_code == 200
    assert "fields" in response.context["adminform"].form.errors
    assert api.post("/admin/bindings/route/add/", route_form(name="a", fields="/price,/item")).status_code == 302
    assert Route.objects.get(name="a").fields == ["/price", "/item"]


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
          fields: FIELDS
  kafka_cache_client:
    type: kafka
    kind: cache_client
"""


def test_zilla_import_checks_the_fields_and_the_export_marks_them_ours() -> None:
    actor = Actor(name="tester", source="import")
    with pytest.raises(ZillaConfigError) as info:
        do_import_zilla(ZILLA.replace("FIELDS", "[price]"), actor=actor)
    assert list(info.value.errors) == ["bindings.sse_kafka.routes[0].with.fields"]
    do_import_zilla(ZILLA.replace("FIELDS", "[/price]"), actor=actor)
    text, notes = export_zilla()
    name = Route.objects.get().name
    assert f"route {name}: fields /price (not in Zilla's schema)" in notes
    routes = [r for b in yaml.safe_load(text)["bindings"].values() if b["type"] == "sse-kafka" for r in b["routes"]]
    assert [route["with"].get("fields") for route in routes] == [["/price"]]
    do_import_zilla(ZILLA.replace("          fields: FIELDS\n", ""), actor=actor)  # Zilla's own file keeps them
    assert Route.objects.get().fields == ["/price"]


def test_the_asyncapi_export_carries_the_fields_and_its_import_checks_them() -> None:
    do_put_route(name="r", path="/items", topic="items", fields=["/price"])
    document = export_asyncapi("https://sse.example.com")
    channel = next(iter(document["channels"].values()))
    assert channel["x-sse-kafka"]["fields"] == ["/price"]
    channel["x-sse-kafka"]["fields"] = ["price"]
    with pytest.raises(AsyncApiImportError) as info:
        import_asyncapi(document)
    assert any(key.endswith("fields") for key in info.value.errors), info.value.errors
