"""The OpenAPI schema is valid, warning-free and describes the real bodies; the docs page uses local assets."""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The schema as `manage.py spectacular` writes it; `--fail-on-warn` makes any warning an error."""
    path = Path(tmp_path_factory.mktemp("schema")) / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path), stderr=StringIO())
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def test_it_documents_every_operation_with_its_problems(schema: dict[str, Any]) -> None:
    paths = schema["paths"]
    for collection in ("routes", "endpoints", "guards"):
        assert set(paths[f"/api/v1/{collection}/"]) == {"get", "post"}
        detail = paths[f"/api/v1/{collection}/{{name}}/"]
        assert set(detail) == {"get", "put", "patch", "delete"}
        assert {"200", "201", "400", "401", "403", "404", "415"} <= set(detail["put"]["responses"])
        problem = detail["get"]["responses"]["404"]["content"]["application/problem+json"]["schema"]
        assert problem == {"$ref": "#/components/schemas/Problem"}
        (name,) = detail["get"]["parameters"]
        assert name["name"] == "name"
        assert name["schema"]["pattern"] == "^[-a-zA-Z0-9_]+$"
    assert "409" in paths["/api/v1/endpoints/{name}/"]["delete"]["responses"]
    # Revocations have no name: by id, and what one covers is fixed (no PUT).
    assert set(paths["/api/v1/revocations/"]) == {"get", "post"}
    revocation = paths["/api/v1/revocations/{id}/"]
    assert set(revocation) == {"get", "patch", "delete"}
    assert {"200", "400", "401", "403", "404"} <= set(revocation["patch"]["responses"])
    assert "409" not in paths["/api/v1/routes/{name}/"]["delete"]["responses"]


def test_it_documents_the_list_filters(schema: dict[str, Any]) -> None:
    def parameters(path: str) -> set[str]:
        return {p["name"] for p in schema["paths"][path]["get"]["parameters"]}

    assert parameters("/api/v1/routes/") == {"topic", "endpoint", "guard", "search", "limit", "offset"}
    assert parameters("/api/v1/endpoints/") == {"search", "limit", "offset"}
    assert parameters("/api/v1/guards/") == {"issuer", "search", "limit", "offset"}
    assert parameters("/api/v1/revocations/") == {"guard", "identity", "jti", "active", "limit", "offset"}


def test_it_describes_a_route_as_the_api_shows_it(schema: dict[str, Any]) -> None:
    components = schema["components"]["schemas"]
    route = components["Route"]
    assert route["required"] == list(route["properties"])
    assert "guarded" in route["required"]
    assert route["properties"]["filters"]["items"] == {"$ref": "#/components/schemas/FilterSpec"}
    assert set(components["FilterSpec"]["properties"]) == {"key", "headers", "value", "expression"}
    assert components["FilterSpec"]["properties"]["key"]["nullable"] is True
    assert set(components["FilterValue"]["properties"]) == {"path", "equals"}
    request = components["RouteRequest"]
    assert "required" not in request, "PUT takes the name from the URL; what is missing is a 400 naming it"
    assert request["properties"]["path"]["writeOnly"] is True
    assert request["properties"]["filters"]["items"] == {"$ref": "#/components/schemas/FilterSpecRequest"}
    assert components["Problem"]["required"] == ["type", "title", "status", "detail", "errors"]


def test_a_request_body_holds_its_declared_fields_only(schema: dict[str, Any]) -> None:
    components = schema["components"]["schemas"]
    bodies = [
        operation["requestBody"]["content"]["application/json"]["schema"]
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if method in ("post", "put", "patch") and path != "/api/v1/import/asyncapi"  # AsyncAPI's own document
    ]
    assert len(bodies) == 18  # POST, PUT and PATCH of five kinds, POST and PATCH of revocations, the zilla import
    for body in bodies:
        resolved = components[body["$ref"].split("/")[-1]] if "$ref" in body else body
        assert resolved["additionalProperties"] is False, body
    for name, component in components.items():  # the nested ones too: filters, models, subjects
        if name.endswith("Request"):
            assert component["additionalProperties"] is False, name
    # A GET's body may be written back: the representation's read-only fields are declared, marked so.
    for name in ("Catalog", "Revocation", "Route", "TopicModel"):
        assert set(components[name]["properties"]) <= set(components[f"Patched{name}Request"]["properties"])
    assert components["CatalogRequest"]["properties"]["auth_set"]["readOnly"] is True


def test_it_reads_json_only(schema: dict[str, Any]) -> None:
    body = schema["paths"]["/api/v1/routes/"]["post"]["requestBody"]["content"]
    assert list(body) == ["application/json"]


def test_the_schema_is_served(client: Client) -> None:
    response = client.get("/api/v1/schema/?format=json")
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")
    assert client.get("/api/v1/schema/").status_code == 200


def test_the_docs_page_loads_nothing_from_another_site(client: Client) -> None:
    response = client.get("/api/v1/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    assert urls, html
    assert not re.search(r"https?://", html), "an absolute URL: a CDN?"
    static = [url for url in urls if url.startswith("/static/")]
    assert any("swagger-ui-bundle.js" in url for url in static), urls
    for url in static:
        assert finders.find(url.removeprefix("/static/")), f"{url} is not a static file of an installed app"
