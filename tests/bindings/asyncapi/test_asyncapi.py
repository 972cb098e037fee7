"""AsyncAPI 3.0: the export (checked by `asyncapi3`, an AsyncAPI 3.0 object model from PyPI), the API endpoint,
the import of a document's SSE channels, and `manage.py asyncapi`."""

from __future__ import annotations

import copy
import json
import warnings
from io import StringIO
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from jwt.algorithms import RSAAlgorithm
from rest_framework.authtoken.models import Token

from bindings.api.permissions import api_readers, grant_api_writer
from bindings.asyncapi.document import AsyncApiImportError, export_asyncapi, import_asyncapi
from bindings.models import Change, Endpoint, Guard, Route, routes_in_order
from bindings.representations import endpoint_representation, guard_representation, route_representation
from bindings.selectors import EVENT_ID_KEY_AND_ETAG
from bindings.services import do_put_endpoint, do_put_guard, do_put_route
from streams.access.revocations import REVOKED_EVENT
from tests.support.jwt_keys import guard_fields, private_key, public_jwk

with warnings.catch_warnings():  # asyncapi3 0.0.2 names a pydantic field `schema`, which pydantic warns about
    warnings.simplefilter("ignore", UserWarning)
    from asyncapi3 import AsyncAPI3  # type: ignore[import-untyped]

pytestmark = pytest.mark.django_db


def validate(document: dict[str, Any]) -> None:
    """Raise unless `document` is a valid AsyncAPI 3 document, by asyncapi3 and by its own references."""
    AsyncAPI3.model_validate(document)
    for operation in document.get("operations", {}).values():
        refs = [operation["channel"]["$ref"], *(m["$ref"] for m in operation.get("messages", []))]
        refs += [s["$ref"] for s in operation.get("security", [])]
        for ref in refs:  # asyncapi3 does not resolve references: check each points at something
            target: Any = document
            for part in ref.removeprefix("#/").split("/"):
                assert isinstance(target, dict), f"{ref} points nowhere"
                assert part in target, f"{ref} points nowhere"
                target = target[part]


def all_routes() -> list[dict[str, Any]]:
    return [route_representation(route) for route in routes_in_order()]


def make_routes() -> None:
    """A bit of everything a route can be: several paths, filters of each kind, a guard, another endpoint."""
    do_put_endpoint(name="eu", retry_ms=5000, keepalive_s=30, cors_origins=["https://app.example.com"])
    do_put_guard(**guard_fields("jwt", challenge_s=30, cookie="sse_token"))
    do_put_route(name="items", paths=["/items", "/items/{id}"], topic="items", event_id=EVENT_ID_KEY_AND_ETAG)
    do_put_route(
        name="orders",
        path="/orders/{region}/{status}",
        topic="orders-${params.region}",
        filters=[
            {"key": "${params.status}", "headers": {"tag": "x"}},
            {"value": {"path": "item.status", "equals": "${params.status}"}},
        ],
        start="live",
        caught_up=True,
        slow_client="conflate",
        fields=["/item/status", "/price"],
        conflate_ms=250,
        endpoint="eu",
        position=1,
    )
    do_put_route(
        name="mine",
        path="/mine",
        topic="mine",
        filters=[{"key": "${guarded['jwt'].identity}"}],
        guarded={"jwt": ["read:items", "read:mine"]},
        position=2,
    )


@pytest.fixture
def staff(client: Client) -> Client:
    user = User.objects.create_user("ops", is_staff=True)
    grant_api_writer(user)
    client.force_login(user)
    return client


# Export


def test_each_path_is_a_channel_with_its_parameters_and_a_receive_operation() -> None:
    make_routes()
    document = export_asyncapi("https://sse.example.com")
    validate(document)
    assert document["asyncapi"] == "3.0.0"
    assert document["servers"]["platform"]["host"] == "sse.example.com"
    assert document["servers"]["platform"]["protocol"] == "https"
    channels = document["channels"]
    assert [(cid, c["address"]) for cid, c in channels.items()] == [
        ("items", "/items"), ("items-1", "/items/{id}"), ("orders", "/orders/{region}/{status}"), ("mine", "/mine")
    ]  # fmt: skip
    assert "parameters" not in channels["items"]
    assert sorted(channels["orders"]["parameters"]) == ["region", "status"]
    assert channels["items-1"]["x-sse-kafka"]["event-id"] == "key-and-etag"
    assert channels["orders"]["x-sse-kafka"]["topic"] == "orders-${params.region}"
    assert channels["orders"]["x-sse-kafka"]["filters"][1]["value"] == {
        "path": "item.status",
        "equals": "${params.status}",
    }
    for channel_id in channels:
        operation = document["operations"][f"receive-{channel_id}"]
        assert operation["action"] == "receive"
        assert operation["channel"] == {"$ref": f"#/channels/{channel_id}"}
        assert operation["bindings"]["http"]["method"] == "GET"


def test_messages_say_what_a_stream_sends_and_how_ids_resume() -> None:
    make_routes()
    channels = export_asyncapi("https://sse.example.com")["channels"]
    assert list(channels["items"]["messages"]) == ["event", "delete", "reset", "patch"]  # no caught-up, no guard
    assert list(channels["orders"]["messages"]) == ["event", "delete", "reset", "patch", "caught-up"]
    assert list(channels["mine"]["messages"]) == ["event", "delete", "reset", "patch", "challenge", "revoked"]
    for message in ("delete", "reset", "caught-up"):
        assert channels["orders"]["messages"][message]["headers"]["properties"]["event"]["const"] == message
    items_id = channels["items"]["messages"]["event"]["headers"]["properties"]["id"]["description"]
    orders_id = channels["orders"]["messages"]["event"]["headers"]["properties"]["id"]["description"]
    assert "base64url key" in items_id  # the key form
    assert "base64url key" not in orders_id
    for description in (items_id, orders_id):
        assert "0x01" in description
        assert "Last-Event-ID" in description


def test_a_shaped_route_says_which_fields_and_intervals_a_client_may_ask_and_what_a_patch_is() -> None:
    do_put_route(name="prices", path="/prices", topic="prices", fields=["/price", "/item/name"], conflate_ms=500)
    do_put_route(name="plain", path="/plain", topic="plain", position=1)
    document = export_asyncapi("https://sse.example.com")
    validate(document)
    shaped = document["operations"]["receive-prices"]["bindings"]["http"]["query"]["properties"]
    plain = document["operations"]["receive-plain"]["bindings"]["http"]["query"]["properties"]
    assert "`/price`, `/item/name`" in shaped["fields"]["description"]
    assert "`/price`" not in plain["fields"]["description"]
    assert shaped["conflate_ms"]["minimum"] == 500  # a shorter interval than the route's is a 400
    assert plain["conflate_ms"]["minimum"] == 0
    assert shaped["delta"]["enum"] == plain["delta"]["enum"] == ["merge-patch"]
    patch = document["channels"]["prices"]["messages"]["patch"]
    assert patch["contentType"] == "application/merge-patch+json"
    assert patch["headers"]["properties"]["event"]["const"] == "patch"
    assert "base64url key" in patch["headers"]["properties"]["id"]["description"]  # patches name their key
    assert document["channels"]["prices"]["x-sse-kafka"]["conflate-ms"] == 500


def test_a_guarded_route_refers_to_a_bearer_jwt_scheme_and_names_its_roles() -> None:
    make_routes()
    document = export_asyncapi("https://sse.example.com")
    scheme = document["components"]["securitySchemes"]["jwt"]
    assert (scheme["type"], scheme["scheme"], scheme["bearerFormat"]) == ("http", "bearer", "JWT")
    assert "https://auth.example.com" in scheme["description"]
    assert "`sse_token` cookie" in scheme["description"]
    mine = document["operations"]["receive-mine"]
    assert mine["security"] == [{"$ref": "#/components/securitySchemes/jwt"}]
    assert "`read:items`, `read:mine`" in mine["description"]
    assert "access_token" in mine["bindings"]["http"]["query"]["properties"]
    assert "security" not in document["operations"]["receive-items"]


def test_a_guarded_route_may_end_with_revoked_described_as_the_server_sends_it() -> None:
    do_put_guard(**guard_fields("plain"))  # no challenge: revoked is listed on its own
    do_put_route(name="open", path="/open", topic="t")
    do_put_route(name="guarded", path="/guarded", topic="t", guarded={"plain": ["read"]}, position=1)
    document = export_asyncapi("https://sse.example.com")
    validate(document)
    channels = document["channels"]
    assert list(channels["open"]["messages"]) == ["event", "delete", "reset", "patch"]  # no token, nothing to revoke
    assert list(channels["guarded"]["messages"]) == ["event", "delete", "reset", "patch", "revoked"]
    operation = document["operations"]["receive-guarded"]
    assert {"$ref": "#/channels/guarded/messages/revoked"} in operation["messages"]
    assert "urn:sse-kafka-platform:problem:token-revoked" in operation["description"]
    revoked = channels["guarded"]["messages"]["revoked"]
    assert revoked["headers"]["properties"]["event"]["const"] == "revoked"
    # The data plane's bytes, field for field: the event's name, then a problem every member of which is described.
    head, _, data = REVOKED_EVENT.partition(b"\ndata:")
    assert head == b"event:revoked"
    sent = json.loads(data)
    payload = revoked["payload"]
    assert sorted(payload["required"]) == sorted(sent)
    assert {name: schema["const"] for name, schema in payload["properties"].items() if "const" in schema} == {
        "type": sent["type"], "title": sent["title"], "status": sent["status"],
    }  # fmt: skip
    assert payload["properties"]["detail"] == {"type": "string"}
    assert isinstance(sent["detail"], str)


def test_a_route_whose_name_is_another_routes_second_channel_gets_its_own_channel() -> None:
    do_put_route(name="a", paths=["/a", "/a/{id}"], topic="a")
    do_put_route(name="a-1", path="/a1", topic="a1", position=1)
    channels = export_asyncapi("http://127.0.0.1:8000")["channels"]
    assert {cid: c["address"] for cid, c in channels.items()} == {"a": "/a", "a-1": "/a/{id}", "a-1-2": "/a1"}


# The PyPI validator has teeth


@pytest.mark.parametrize(
    ("what", "breaks"),
    [
        ("an AsyncAPI 2 action", lambda d: d["operations"]["receive-items"].update(action="subscribe")),
        ("an operation without its channel", lambda d: d["operations"]["receive-items"].pop("channel")),
        ("info without a title", lambda d: d["info"].pop("title")),
        ("a server without a protocol", lambda d: d["servers"]["platform"].pop("protocol")),
        ("a field the spec does not have", lambda d: d["channels"]["items"].update(topic="items")),
        ("scopes on an http scheme", lambda d: d["components"]["securitySchemes"]["jwt"].update(scopes=["read"])),
        ("parameters on an address without any", lambda d: d["channels"]["items"].update(parameters={"x": {}})),
    ],
)
def test_the_validator_rejects_a_broken_document(what: str, breaks: Any) -> None:
    make_routes()
    document = export_asyncapi("https://sse.example.com")
    validate(document)
    broken = copy.deepcopy(document)
    breaks(broken)
    with pytest.raises(pydantic.ValidationError):
        AsyncAPI3.model_validate(broken)


# The API


def test_the_api_serves_the_document_as_yaml_for_the_server_it_was_asked_on(staff: Client, settings: Any) -> None:
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "sse.example.com"]
    make_routes()
    response = staff.get("/api/v1/asyncapi.yaml", HTTP_HOST="sse.example.com")
    assert response.status_code == 200, response.content
    assert response["content-type"].startswith("application/yaml")
    document = yaml.safe_load(response.content)
    validate(document)
    assert document["servers"]["platform"] == {
        "host": "sse.example.com",
        "protocol": "http",
        "description": document["servers"]["platform"]["description"],
    }
    assert document == export_asyncapi("http://sse.example.com/")


def test_the_api_serves_json_when_asked_and_another_server_when_given(staff: Client) -> None:
    do_put_route(name="items", path="/items", topic="items")
    by_query = staff.get("/api/v1/asyncapi.yaml", {"format": "json", "server": "https://sse.example.com/base"})
    assert by_query.status_code == 200, by_query.content
    assert by_query["content-type"].startswith("application/json")
    document = by_query.json()
    validate(document)
    assert document["servers"]["platform"]["host"] == "sse.example.com"
    assert document["servers"]["platform"]["pathname"] == "/base"
    by_accept = staff.get("/api/v1/asyncapi.yaml", HTTP_ACCEPT="application/json")
    assert by_accept["content-type"].startswith("application/json")
    assert by_accept.json()["channels"]["items"]["address"] == "/items"


def test_a_bad_server_is_a_400_naming_it(staff: Client) -> None:
    response = staff.get("/api/v1/asyncapi.yaml", {"server": "sse.example.com"})
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["server"]


def test_the_document_needs_the_api_s_credentials(client: Client) -> None:
    assert client.get("/api/v1/asyncapi.yaml").status_code in (401, 403)
    assert client.post("/api/v1/import/asyncapi", "asyncapi: 3.0.0", content_type="application/yaml").status_code in (
        401,
        403,
    )
    client.force_login(User.objects.create_user("nobody"))
    assert client.get("/api/v1/asyncapi.yaml").status_code == 403


def test_an_api_token_of_a_reader_reads_the_document_but_cannot_import(client: Client) -> None:
    user = User.objects.create_user("reader")
    user.groups.add(api_readers())
    key = Token.objects.create(user=user).key
    assert client.get("/api/v1/asyncapi.yaml", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200
    document = yaml.safe_dump(export_asyncapi("http://x"))
    response = client.post(
        "/api/v1/import/asyncapi", document, content_type="application/yaml", HTTP_AUTHORIZATION=f"Token {key}"
    )
    assert response.status_code == 403


# Import


def configuration() -> tuple[list[dict[str, Any]], ...]:
    return (
        all_routes(),
        [endpoint_representation(e) for e in Endpoint.objects.order_by("name")],
        [guard_representation(g) for g in Guard.objects.order_by("name")],
    )


def test_export_then_import_into_an_empty_database_gives_the_same_routes(staff: Client) -> None:
    make_routes()
    before = configuration()
    text = staff.get("/api/v1/asyncapi.yaml").content
    Route.objects.all().delete()
    Endpoint.objects.all().delete()
    Guard.objects.all().delete()
    response = staff.post("/api/v1/import/asyncapi", text, content_type="application/yaml")
    assert response.status_code == 200, response.content
    assert configuration() == before
    body = response.json()
    assert [(item["kind"], item["name"], item["from"]) for item in body["created"]] == [
        ("guard", "jwt", "x-sse-kafka.guards.jwt"),
        ("endpoint", "default", "x-sse-kafka.endpoints.default"),
        ("endpoint", "eu", "x-sse-kafka.endpoints.eu"),
        ("route", "items", "channels.items, channels.items-1"),
        ("route", "orders", "channels.orders"),
        ("route", "mine", "channels.mine"),
    ]
    assert body["updated"] == body["unchanged"] == body["deleted"] == body["ignored"] == []
    assert Change.objects.filter(kind="route", source="api", actor="ops").count() == 3


def test_importing_the_same_document_again_replaces_and_changes_nothing() -> None:
    make_routes()
    before = configuration()
    changes = Change.objects.count()
    document = export_asyncapi("http://x")
    result = import_asyncapi(document)
    assert [(item.kind, item.action) for item in result.objects if item.kind == "route"] == [("route", "unchanged")] * 3
    assert result.of("created") == result.of("updated") == []
    assert configuration() == before
    assert Change.objects.count() == changes  # the history notes no write that changed nothing


def test_a_guard_travels_with_its_public_keys_only() -> None:
    make_routes()
    private = json.loads(RSAAlgorithm.to_jwk(private_key("k1")))  # an admin pasting the whole key pair
    with pytest.raises(DjangoValidationError) as refused:
        do_put_guard(**guard_fields("jwt", keys=[{**private, "kid": "k1", "alg": "RS256", "use": "sig"}]))
    assert "private key" in refused.value.message_dict["keys"][0]
    do_put_guard(**guard_fields("jwt"))
    guards = export_asyncapi("http://x")["x-sse-kafka"]["guards"]
    assert list(guards) == ["jwt"]  # only the guards routes use
    assert guards["jwt"]["issuer"] == "https://auth.example.com"
    (exported,) = guards["jwt"]["keys"]
    assert set(exported) & {"d", "p", "q", "dp", "dq", "qi"} == set()
    assert {name: exported[name] for name in ("kty", "kid", "alg", "n", "e")} == {
        name: public_jwk()[name] for name in ("kty", "kid", "alg", "n", "e")
    }


FOREIGN = """
asyncapi: 3.0.0
info: {title: shop, version: "1"}
servers:
  web: {host: shop.example.com, protocol: https}
  broker: {host: kafka.example.com:9092, protocol: kafka}
channels:
  orderUpdates:
    address: /orders/{orderId}
    parameters: {orderId: {}}
    messages: {update: {payload: {type: object}}}
    servers: [{$ref: '#/servers/web'}]
  user.events:
    address: /users
  orderPlaced:
    address: shop.orders.placed
    servers: [{$ref: '#/servers/web'}]
  raw:
    address: /raw
    servers: [{$ref: '#/servers/broker'}]
  replies:
    address: null
operations:
  onOrderUpdate:
    action: send
    channel: {$ref: '#/channels/orderUpdates'}
"""


def test_foreign_channels_become_routes_and_the_rest_are_listed_as_ignored() -> None:
    result = import_asyncapi(yaml.safe_load(FOREIGN))
    assert [item.name for item in result.of("created", "route")] == ["orderUpdates", "user-events"]
    assert [(route["name"], route["paths"], route["topic"]) for route in all_routes()] == [
        ("orderUpdates", ["/orders/{orderId}"], "orderUpdates"),
        ("user-events", ["/users"], "user.events"),  # a route name is a slug; a topic may have dots
    ]
    ignored = dict(line.split(": ignored, ", 1) for line in result.ignored)
    assert sorted(ignored) == ["channel orderPlaced", "channel raw", "channel replies"]
    assert "is not a path" in ignored["channel orderPlaced"]
    assert "kafka" in ignored["channel raw"]
    assert "no address" in ignored["channel replies"]


def test_a_dry_run_reports_and_writes_nothing(staff: Client) -> None:
    changes = Change.objects.count()
    response = staff.post("/api/v1/import/asyncapi?dry_run=1", FOREIGN, content_type="application/yaml")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["dry_run"] is True
    assert [(item["kind"], item["name"]) for item in body["created"]] == [
        ("route", "orderUpdates"), ("route", "user-events")
    ]  # fmt: skip
    assert len(body["ignored"]) == 3
    assert Route.objects.count() == 0
    assert Change.objects.count() == changes


def test_json_bodies_are_read_too(staff: Client) -> None:
    response = staff.post(
        "/api/v1/import/asyncapi", json.dumps(yaml.safe_load(FOREIGN)), content_type="application/json"
    )
    assert response.status_code == 200, response.content
    assert Route.objects.count() == 2


def _document(**extension: Any) -> dict[str, Any]:
    return {
        "asyncapi": "3.0.0",
        "info": {"title": "t", "version": "1"},
        "channels": {
            "good": {"address": "/good", "x-sse-kafka": {"topic": "good"}},
            "items": {"address": "/items/{id}", "x-sse-kafka": {"topic": "items", **extension}},
        },
    }


@pytest.mark.parametrize(
    ("document", "field"),
    [
        (_document(topic="not a topic!"), "channels.items.x-sse-kafka.topic"),
        (_document(topic="items-${params.nope}"), "channels.items.x-sse-kafka.topic"),
        (_document(filters=[{"key": 5}]), "channels.items.x-sse-kafka.filters[0].key"),
        (
            _document(filters=[{"value": {"path": "a..b", "equals": "x"}}]),
            "channels.items.x-sse-kafka.filters[0].value.path",
        ),
        (_document(**{"event-id": "uuid"}), "channels.items.x-sse-kafka.event-id"),
        (_document(start="yesterday"), "channels.items.x-sse-kafka.start"),
        (_document(endpoint="nowhere"), "channels.items.x-sse-kafka.endpoint"),
        (_document(guarded={"nope": []}), "channels.items.x-sse-kafka.guarded.nope"),
        (_document(colour="red"), "channels.items.x-sse-kafka.colour"),
        (_document(position="first"), "channels.items.x-sse-kafka.position"),
        ({**_document(), "asyncapi": "2.6.0"}, "asyncapi"),
        ({**_document(), "channels": ["a"]}, "channels"),
        ({"asyncapi": "3.0.0", "channels": {"a": {"address": "/a/{x}.json"}}}, "channels.a.address"),
        (
            {"asyncapi": "3.0.0", "channels": {"a": {"address": "/a", "x-sse-kafka": {"topic": "a\x00"}}}},
            "channels.a.x-sse-kafka.topic",
        ),
        (
            {"asyncapi": "3.0.0", "x-sse-kafka": {"endpoints": {"eu": {"cors-origins": ["https://A.example.com"]}}}},
            "x-sse-kafka.endpoints.eu.cors-origins",
        ),
        (
            {"asyncapi": "3.0.0", "x-sse-kafka": {"guards": {"g": {"audience": "a", "keys": []}}}},
            "x-sse-kafka.guards.g.issuer",
        ),
        (
            {
                "asyncapi": "3.0.0",
                "x-sse-kafka": {"guards": {"g": {"issuer": "i", "audience": "a", "keys": [{"kid": "k"}]}}},
            },
            "x-sse-kafka.guards.g.keys",
        ),
        ({"asyncapi": "3.0.0", "x-sse-kafka": {"routes": {}}}, "x-sse-kafka.routes"),
    ],
)
def test_bad_input_is_a_400_naming_the_channel_and_field_and_writes_nothing(
    staff: Client, document: dict[str, Any], field: str
) -> None:
    response = staff.post("/api/v1/import/asyncapi", json.dumps(document), content_type="application/json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"], response.json()
    assert Route.objects.count() == 0  # not even the good channel
    assert not Endpoint.objects.filter(name="eu").exists()
    assert not Guard.objects.exists()


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("channels: [unclosed", "application/yaml"),
        ("{'asyncapi': '3.0.0'}", "application/json"),  # YAML, but not JSON
        ("asyncapi: 3.0.0\nchannels: &loop {a: *loop}", "application/yaml"),  # refers to itself
        ("[" * 100_000 + "]" * 100_000, "application/yaml"),
        ("[" * 100_000 + "]" * 100_000, "application/json"),
        (b"asyncapi: \xff", "application/yaml"),
        ("asyncapi: 2020-13-01", "application/yaml"),  # a date YAML types that Python cannot make: was a 500
        ("asyncapi: " + "9" * 5000, "application/yaml"),  # past Python's 4300 digits: was a 500
        ('{"asyncapi": ' + "9" * 5000 + "}", "application/json"),
    ],
)
def test_a_body_that_is_not_a_document_is_a_400_on_document(staff: Client, body: str, content_type: str) -> None:
    response = staff.post("/api/v1/import/asyncapi", body, content_type=content_type)
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == ["document"]


def test_a_secured_channel_is_not_imported_as_an_open_route() -> None:
    document = yaml.safe_load(FOREIGN)
    document["operations"]["onOrderUpdate"]["security"] = [{"type": "http", "scheme": "bearer"}]
    with pytest.raises(AsyncApiImportError) as raised:
        import_asyncapi(document)
    assert list(raised.value.errors) == ["channels.orderUpdates.x-sse-kafka.guarded"]
    do_put_guard(**guard_fields("jwt"))
    document["channels"]["orderUpdates"]["x-sse-kafka"] = {"guarded": {"jwt": ["read:orders"]}}
    import_asyncapi(document)
    assert Route.objects.get(name="orderUpdates").guards.get().roles == ["read:orders"]


def test_channels_of_one_route_must_agree() -> None:
    document = _document(route="one")
    document["channels"]["good"]["x-sse-kafka"]["route"] = "one"
    with pytest.raises(AsyncApiImportError) as raised:
        import_asyncapi(document)
    assert list(raised.value.errors) == ["channels.items.x-sse-kafka.topic"]


# The command


def test_the_command_exports_and_imports(tmp_path: Path) -> None:
    make_routes()
    before = all_routes()
    out = StringIO()
    call_command("asyncapi", "export", "--server", "http://127.0.0.1:8000", stdout=out)
    document = yaml.safe_load(out.getvalue())
    validate(document)
    assert document["channels"]["items"]["address"] == "/items"
    path = tmp_path / "asyncapi.yaml"
    path.write_text(out.getvalue())
    Route.objects.all().delete()

    out = StringIO()
    call_command("asyncapi", "import", str(path), "--dry-run", stdout=out)
    assert "route items: would create" in out.getvalue()
    assert Route.objects.count() == 0

    out = StringIO()
    call_command("asyncapi", "import", str(path), stdout=out)
    assert "route orders: created" in out.getvalue()
    assert all_routes() == before


def test_the_command_says_what_is_wrong_and_imports_nothing(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_document(topic="not a topic!")))
    with pytest.raises(CommandError, match=r"channels\.items\.x-sse-kafka\.topic"):
        call_command("asyncapi", "import", str(path))
    assert Route.objects.count() == 0
    with pytest.raises(CommandError, match="cannot read"):
        call_command("asyncapi", "import", str(tmp_path / "missing.yaml"))
