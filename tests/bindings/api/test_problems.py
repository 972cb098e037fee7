"""Every API error is an RFC 9457 problem body: the status, a sentence, and the bad fields by name."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError as DjangoValidationError
from django.test import Client, RequestFactory
from rest_framework.exceptions import Throttled

from bindings.api.problems import exception_handler, flatten_errors, server_error
from tests.support.jwt_keys import public_jwk

pytestmark = pytest.mark.django_db

PROBLEM_KEYS = {"type", "title", "status", "detail", "errors"}
ROUTE = {"name": "items", "topic": "t", "paths": ["/a"]}


@pytest.fixture
def api(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-test-password"))
    return client


def problem_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert set(body) == PROBLEM_KEYS
    assert body["status"] == status
    assert body["type"] == "about:blank"
    assert body["detail"]
    return body


def test_a_bad_field_is_named_under_errors_with_a_summary(api: Client) -> None:
    route = {"name": "items", "topic": "t", "paths": ["/a", ""]}
    body = problem_of(api.post("/api/v1/routes/", route, content_type="application/json"), 400)
    assert body["title"] == "Bad Request"
    assert list(body["errors"]) == ["paths[1]"]
    assert body["detail"].startswith("paths[1]: ")


def test_service_errors_keep_their_keys(api: Client) -> None:
    body = problem_of(
        api.post(
            "/api/v1/routes/",
            {"name": "items", "topic": "t", "paths": ["/a"], "filters": [{"key": "${params.nope}"}]},
            content_type="application/json",
        ),
        400,
    )
    assert list(body["errors"]) == ["filters[0].key"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**ROUTE, "filters": [{"key": "a\x00"}]}, "filters[0].key"),
        ({**ROUTE, "filters": [{"headers": {"\x00": "x"}}]}, "filters[0].headers"),
        ({"name": "g", "issuer": "i", "audience": "a", "keys": [{"kid": "\x00"}]}, "keys[0].kid"),
    ],
)
def test_a_nul_character_is_a_400_naming_where_it_is(api: Client, body: dict[str, Any], field: str) -> None:
    collection = "guards" if "issuer" in body else "routes"
    problem = problem_of(api.post(f"/api/v1/{collection}/", body, content_type="application/json"), 400)
    assert problem["errors"] == {field: ["Null characters are not allowed."]}


def test_a_lone_surrogate_is_a_400_naming_where_it_is(api: Client) -> None:
    body = '{"name": "items", "topic": "t", "paths": ["/a"], "filters": [{"key": "\\udb9a"}]}'
    problem = problem_of(api.post("/api/v1/routes/", body, content_type="application/json"), 400)
    assert list(problem["errors"]) == ["filters[0].key"]
    assert problem["errors"]["filters[0].key"][0].startswith("Lone surrogates")


def test_a_problem_quoting_a_lone_surrogate_still_renders(api: Client) -> None:
    """Found by schemathesis: a YAML key `"\\udb9a"` quoted in an import's 400 made the JSON renderer fail."""
    response = api.post("/api/v1/import/zilla", '{"\\udb9a": 1}', content_type="text/plain")
    problem = problem_of(response, 400)
    assert "\\udb9a" in json.dumps(problem, ensure_ascii=True)


def test_malformed_json_is_a_400_parse_error(api: Client) -> None:
    body = problem_of(api.post("/api/v1/routes/", "{", content_type="application/json"), 400)
    assert "JSON parse error" in body["detail"]
    assert body["errors"] == {}


def test_a_body_that_is_not_json_is_415(api: Client) -> None:
    body = problem_of(api.post("/api/v1/routes/", {"name": "items"}), 415)  # multipart form
    assert "multipart/form-data" in body["detail"]


def test_an_unknown_object_is_404(api: Client) -> None:
    assert problem_of(api.get("/api/v1/routes/nope/"), 404)["title"] == "Not Found"


@pytest.mark.parametrize("url", ["/api/v1/nope/", "/api/v1/routes/not.a.slug/", "/api/v1/routes/%00/"])
def test_a_url_no_view_matches_is_a_404_problem(api: Client, url: str) -> None:
    problem_of(api.get(url), 404)


def test_a_page_outside_the_api_stays_html(client: Client) -> None:
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_a_method_the_collection_lacks_is_405(api: Client) -> None:
    body = problem_of(api.delete("/api/v1/routes/"), 405)
    assert body["detail"] == 'Method "DELETE" not allowed.'


def test_throttling_is_a_429_problem_with_retry_after() -> None:
    response = exception_handler(Throttled(wait=3), {})
    assert response is not None
    assert response.status_code == 429
    assert response["Retry-After"] == "3"
    assert response.data["title"] == "Too Many Requests"
    assert response.content_type == "application/problem+json"


def test_a_django_validation_error_that_escapes_a_view_is_400_not_500() -> None:
    response = exception_handler(DjangoValidationError({"topic": ["Bad topic."]}), {})
    assert response is not None
    assert response.status_code == 400
    assert response.data["errors"] == {"topic": ["Bad topic."]}


def test_a_crash_under_the_api_is_a_500_problem() -> None:
    response = server_error(RequestFactory().get("/api/v1/routes/"))
    assert response.status_code == 500
    assert response["Content-Type"] == "application/problem+json"
    assert server_error(RequestFactory().get("/"))["Content-Type"].startswith("text/html")


def test_nested_errors_flatten_to_the_services_keys() -> None:
    assert flatten_errors(
        {"paths": {1: ["blank"]}, "value": {"path": ["bad"]}, "non_field_errors": ["x"], "list": [{}, {"k": ["y"]}]}
    ) == {"paths[1]": ["blank"], "value.path": ["bad"], "non_field_errors": ["x"], "list[1].k": ["y"]}


def test_the_browsable_api_keeps_its_html_page(api: Client) -> None:
    response = api.get("/api/v1/routes/nope/", HTTP_ACCEPT="text/html")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_a_body_over_the_bound_is_a_413_problem_before_any_parsing(api: Client, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    body = json.dumps({"name": "big", "topic": "t", "paths": ["/big"], "filler": "x" * 4096})
    response = api.post("/api/v1/routes/", body, content_type="application/json")
    problem = problem_of(response, 413)
    assert "2048" in problem["detail"]
    small = api.post(
        "/api/v1/routes/", {"name": "small", "topic": "t", "paths": ["/small"]}, content_type="application/json"
    )
    assert small.status_code == 201


@pytest.mark.parametrize("number", ["1e400", "-1e400"])
def test_a_guard_key_holding_a_number_past_json_s_range_is_a_400(api: Client, number: str) -> None:
    """JSON's 1e400 reads as infinity, which Postgres refuses in jsonb: in a member PyJWK ignores, a 500."""
    key = json.dumps({**public_jwk(), "x-rotated": "@"}).replace('"@"', number)
    body = f'{{"name": "g", "issuer": "i", "audience": "a", "keys": [{key}]}}'
    problem = problem_of(api.post("/api/v1/guards/", body, content_type="application/json"), 400)
    assert list(problem["errors"]) == ["keys[0]"]
    assert "infinity" in problem["errors"]["keys[0]"][0]


@pytest.mark.parametrize("depth", [65, 900, 5000])
@pytest.mark.parametrize("url", ["/api/v1/endpoints/", "/api/v1/guards/", "/api/v1/import/zilla"])
def test_a_body_nested_deeper_than_any_configuration_is_a_400(api: Client, url: str, depth: int) -> None:
    """At 5000 levels the JSON parser's RecursionError was a 500; at 900 it parsed, and validation or the database
    driver, deeper in the stack, overflowed instead."""
    body = '{"name": "deep", "yaml": "", "cors_origins": %s}' % ("[" * depth + "]" * depth)
    problem = problem_of(api.post(url, body, content_type="application/json"), 400)
    assert "nested" in problem["detail"]
