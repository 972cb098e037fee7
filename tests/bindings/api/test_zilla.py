"""zilla.yaml over the API: POST /api/v1/import/zilla (YAML or JSON body, dry run) and GET /api/v1/export/zilla."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.test import Client

from bindings.api.permissions import api_readers
from bindings.models import Change, Endpoint, Route
from bindings.services import do_put_route
from tests.bindings.zilla.test_zilla import ZILLA_YAML

pytestmark = pytest.mark.django_db

IMPORT = "/api/v1/import/zilla"
EXPORT = "/api/v1/export/zilla"
SEED = Path(__file__).parents[2] / "support" / "fixtures" / "zilla-sse-kafka-proxy.yaml"
PROXY = "bindings.north_sse_kafka_mapping"


@pytest.fixture
def admin(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-test-password"))
    return client


@pytest.fixture
def reader(client: Client) -> Client:
    user = User.objects.create_user("reader", "reader@example.com", "a-long-test-password")
    user.groups.add(api_readers())
    client.force_login(user)
    return client


def post_yaml(client: Client, text: str, query: str = "", content_type: str = "application/yaml") -> Any:
    return client.post(f"{IMPORT}{query}", data=text.encode(), content_type=content_type)


@pytest.mark.parametrize("content_type", ["application/yaml", "text/yaml", "application/x-yaml", "text/plain"])
def test_it_imports_a_yaml_body(admin: Client, content_type: str) -> None:
    response = post_yaml(admin, ZILLA_YAML, content_type=content_type)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["dry_run"] is False
    assert body["created"] == [
        {"kind": "endpoint", "name": "north-sse-server", "from": "bindings.north_sse_server"},
        {"kind": "route", "name": "north-sse-kafka-mapping-0", "from": "bindings.north_sse_kafka_mapping.routes[0]"},
        {"kind": "route", "name": "north-sse-kafka-mapping-1", "from": "bindings.north_sse_kafka_mapping.routes[1]"},
    ]
    assert body["ignored"] == [
        "binding north_http_server (http): ignored, not an SSE binding",
        "binding north_kafka_cache_client (kafka): ignored, not an SSE binding",
    ]
    assert Route.objects.count() == 2


def test_it_imports_json_with_the_yaml_in_it_and_records_who(admin: Client) -> None:
    response = admin.post(IMPORT, {"yaml": SEED.read_text()}, content_type="application/json")
    assert response.status_code == 200, response.content
    assert [item["name"] for item in response.json()["created"]] == ["north-sse-server", "north-sse-kafka-mapping-0"]
    assert "binding south_kafka_client (kafka): ignored, not an SSE binding" in response.json()["ignored"]
    assert set(Change.objects.values_list("actor", "source")) == {("root", "import")}


def test_a_dry_run_answers_the_diff_and_writes_nothing(admin: Client) -> None:
    do_put_route(name="north-sse-kafka-mapping-0", path="/items", topic="old-topic")
    changes = Change.objects.count()
    response = post_yaml(admin, ZILLA_YAML, "?dry_run=true")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["dry_run"] is True
    assert [item["name"] for item in body["created"]] == ["north-sse-server", "north-sse-kafka-mapping-1"]
    (updated,) = body["updated"]
    assert updated["name"] == "north-sse-kafka-mapping-0"
    assert updated["changes"]["topic"] == {"before": "old-topic", "after": "items-snapshots"}
    assert Route.objects.get().topic == "old-topic"
    assert not Endpoint.objects.filter(name="north-sse-server").exists()
    assert Change.objects.count() == changes


def test_prune_deletes_routes_the_file_does_not_have(admin: Client) -> None:
    do_put_route(name="manual", path="/manual", topic="manual")
    response = post_yaml(admin, ZILLA_YAML, "?prune=true")
    assert response.json()["deleted"] == [{"kind": "route", "name": "manual"}]
    assert not Route.objects.filter(name="manual").exists()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("bindings: [", "yaml"),
        (ZILLA_YAML.replace("          topic: items-snapshots\n", "", 1), f"{PROXY}.routes[0].with.topic"),
        (
            ZILLA_YAML.replace("          event:\n", "          colour: red\n          event:\n", 1),
            f"{PROXY}.routes[0].with.colour",
        ),
        (ZILLA_YAML.replace("- path: /items\n", "- path: items\n", 1), f"{PROXY}.routes[0].when[0].path"),
        (ZILLA_YAML.replace("${params.topic}", "${params.nope}"), f"{PROXY}.routes[1].with.topic"),
        (ZILLA_YAML.replace("retry: 3000", "retry: -1"), "bindings.north_sse_server.options.retry"),
    ],
    ids=["yaml", "topic", "unknown-key", "pattern", "param", "retry"],
)
def test_bad_input_is_a_400_problem_naming_the_field(admin: Client, text: str, field: str) -> None:
    response = post_yaml(admin, text)
    assert response.status_code == 400, response.content
    assert response["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == 400
    assert list(body["errors"]) == [field]
    assert field in body["detail"] or field == "yaml"
    assert not Route.objects.exists()


@pytest.mark.parametrize(
    ("data", "content_type"),
    [
        (json.dumps({"yml": "bindings: {}"}).encode(), "application/json"),
        (json.dumps({"yaml": 7}).encode(), "application/json"),
        (json.dumps(["bindings"]).encode(), "application/json"),
        (b"\xff\xfe not utf-8", "application/yaml"),
        (b"", "application/yaml"),
    ],
    ids=["no-yaml-key", "yaml-not-text", "json-list", "not-utf8", "empty"],
)
def test_a_body_that_holds_no_yaml_is_a_400(admin: Client, data: bytes, content_type: str) -> None:
    response = admin.post(IMPORT, data=data, content_type=content_type)
    assert response.status_code == 400, response.content
    assert response.json()["status"] == 400


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"yml": ZILLA_YAML}, {"yml": ["Unknown field; did you mean `yaml`?"]}),
        ({"yaml": ZILLA_YAML, "prune": True}, {"prune": ["Unknown field; known: yaml."]}),
    ],
    ids=["misspelt", "a-query-in-the-body"],
)
def test_a_json_body_holds_the_yaml_and_nothing_else(
    admin: Client, body: dict[str, Any], errors: dict[str, list[str]]
) -> None:
    do_put_route(name="manual", path="/manual", topic="manual")
    response = admin.post(IMPORT, data=json.dumps(body), content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["errors"] == errors
    assert list(Route.objects.values_list("name", flat=True)) == ["manual"]


LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (LAUGHS + "bindings: {}\n", "aliases"),
        ('bindings:\n  x:\n    type: "sse\\0"\n', "NUL"),
        ("name: 2020-13-01\nbindings: {}\n", "month must be in 1..12"),  # was a 500
        ("name: " + "9" * 5000 + "\nbindings: {}\n", "4300 digits"),  # was a 500
    ],
    ids=["billion-laughs", "nul", "impossible-date", "huge-integer"],
)
def test_a_file_that_cannot_be_stored_is_a_400(admin: Client, text: str, words: str) -> None:
    response = post_yaml(admin, text)
    assert response.status_code == 400, response.content
    assert words in response.json()["errors"]["yaml"][0]


def test_another_content_type_is_refused(admin: Client) -> None:
    response = admin.post(IMPORT, data=b"<zilla/>", content_type="application/xml")
    assert response.status_code == 415


def test_export_answers_yaml_that_imports_back_unchanged(admin: Client) -> None:
    post_yaml(admin, ZILLA_YAML)
    response = admin.get(EXPORT)
    assert response.status_code == 200
    assert response["content-type"].startswith("application/yaml")
    text = response.content.decode()
    assert yaml.safe_load(text)["bindings"]["north-sse-server"]["options"] == {"retry": 3000}
    again = post_yaml(admin, text, "?dry_run=true").json()
    assert again["created"] == again["updated"] == again["deleted"] == []
    assert {item["name"] for item in again["unchanged"]} >= {"north-sse-kafka-mapping-0", "north-sse-kafka-mapping-1"}


def test_a_strict_export_leads_with_what_it_left_out(admin: Client) -> None:
    do_put_route(name="live", path="/live", topic="live", start="live")
    text = admin.get(f"{EXPORT}?strict=true").content.decode()
    assert text.startswith("# left out: route live: start=live\n")
    assert "start" not in yaml.safe_load(text)["bindings"]["default_sse_kafka"]["routes"][0]["with"]


def test_anonymous_requests_are_refused(client: Client) -> None:
    assert post_yaml(client, ZILLA_YAML).status_code in (401, 403)
    assert client.get(EXPORT).status_code in (401, 403)
    assert not Route.objects.exists()


def test_a_reader_may_export_but_not_import(reader: Client) -> None:
    assert post_yaml(reader, ZILLA_YAML).status_code == 403
    assert post_yaml(reader, ZILLA_YAML, "?dry_run=true").status_code == 403
    assert not Route.objects.exists()
    assert reader.get(EXPORT).status_code == 200


def test_a_user_without_api_rights_may_do_neither(client: Client) -> None:
    client.force_login(User.objects.create_user("nobody", "nobody@example.com", "a-long-test-password"))
    assert post_yaml(client, ZILLA_YAML).status_code == 403
    assert client.get(EXPORT).status_code == 403
