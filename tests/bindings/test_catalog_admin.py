"""Catalogs and topic models in the admin: schema errors on the field, versions, the write-only header, history."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bindings.models import Catalog, Change, InlineSchema, TopicModel
from bindings.services import do_put_catalog

pytestmark = pytest.mark.django_db

ORDER = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]})
SECRET = "Basic c2VjcmV0OnBhc3N3b3Jk"


@pytest.fixture
def admin_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("operator", "op@example.com", "a-long-test-password"))
    return client


def catalog_form(*, schemas: Sequence[tuple[str, str, str]] = (), initial: int = 0, **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"name": "schemas", "kind": "inline", "url": "", "max_age_s": 300, "new_auth": ""}
    data |= fields
    data |= {
        "schemas-TOTAL_FORMS": len(schemas),
        "schemas-INITIAL_FORMS": initial,
        "schemas-MIN_NUM_FORMS": 0,
        "schemas-MAX_NUM_FORMS": 1000,
    }
    for index, (subject, schema_format, text) in enumerate(schemas):
        data |= {f"schemas-{index}-subject": subject, f"schemas-{index}-format": schema_format}
        data |= {f"schemas-{index}-text": text}
    return data


def field_errors(response: Any) -> dict[str, list[str]]:
    """The errors of the inline schema forms, by field."""
    found: dict[str, list[str]] = {}
    for form in response.context["inline_admin_formsets"][0].formset.forms:
        for field, messages in form.errors.items():
            found.setdefault(field, []).extend(messages)
    return found


@pytest.mark.parametrize(
    ("schema_format", "text", "says"),
    [
        ("avro", '{"type": "record", "name": "A", "fields": [{"name": "x", "type": "strin"}]}', "Not an Avro schema"),
        ("protobuf", 'syntax = "proto3"; message A { strin x = 1; }', "Does not compile"),
        ("json", '{"type": 12}', "Not a JSON Schema"),
    ],
)
def test_a_bad_schema_is_an_error_on_its_field(admin_client: Client, schema_format: str, text: str, says: str) -> None:
    response = admin_client.post(
        "/admin/bindings/catalog/add/", catalog_form(schemas=[("orders-value", schema_format, text)])
    )
    assert response.status_code == 200
    errors = field_errors(response)
    assert list(errors) == ["text"]
    assert says in errors["text"][0]
    assert not Catalog.objects.exists()


def test_a_schema_added_to_a_subject_is_its_next_version(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/bindings/catalog/add/", catalog_form(schemas=[("orders-value", "avro", ORDER)])
    )
    assert response.status_code == 302, response.context and field_errors(response)
    catalog = Catalog.objects.get()
    url = f"/admin/bindings/catalog/{catalog.pk}/change/"
    schema = InlineSchema.objects.get()
    data = catalog_form(initial=1) | {
        "schemas-TOTAL_FORMS": 2,
        "schemas-0-id": schema.pk,
        "schemas-0-catalog": catalog.pk,
    }
    data |= {
        "schemas-1-subject": "orders-value",
        "schemas-1-format": "avro",
        "schemas-1-text": ORDER.replace("id", "key"),
    }
    response = admin_client.post(url, data)
    assert response.status_code == 302, field_errors(response)
    assert list(InlineSchema.objects.values_list("subject", "version")) == [("orders-value", 1), ("orders-value", 2)]
    assert list(Change.objects.filter(kind="catalog").values_list("action", flat=True)) == ["update", "create"]


def test_the_header_is_write_only_and_on_its_field(admin_client: Client) -> None:
    registry: dict[str, Any] = {"kind": "schema-registry", "url": "http://registry:8081"}
    response = admin_client.post("/admin/bindings/catalog/add/", catalog_form(name="reg", new_auth=SECRET, **registry))
    assert response.status_code == 302
    catalog = Catalog.objects.get()
    assert (catalog.auth, catalog.auth_updated is not None) == (SECRET, True)
    page = admin_client.get(f"/admin/bindings/catalog/{catalog.pk}/change/").content.decode()
    assert "c2VjcmV0" not in page
    assert "set (set " in page
    kept = admin_client.post(f"/admin/bindings/catalog/{catalog.pk}/change/", catalog_form(max_age_s=20, **registry))
    assert kept.status_code == 302
    assert Catalog.objects.get().auth == SECRET
    inline = admin_client.post("/admin/bindings/catalog/add/", catalog_form(name="inl", new_auth=SECRET))
    assert inline.context is not None
    assert "no registry to send an Authorization header to" in " ".join(
        inline.context["adminform"].form.errors["new_auth"]
    )
    assert "c2VjcmV0" not in json.dumps(list(Change.objects.values_list("after", flat=True)))


def test_a_topic_model_error_is_on_its_field(admin_client: Client) -> None:
    catalog = do_put_catalog(name="schemas", subjects={"orders-value": {"format": "avro", "schema": ORDER}})
    data = {"topic": "orders", "key_model": "string", "value_model": "avro", "value_catalog": catalog.pk}
    data |= {"value_strategy": "subject", "value_subject": "payments-value"}
    response = admin_client.post("/admin/bindings/topicmodel/add/", data)
    assert response.status_code == 200
    assert response.context is not None
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["value_subject"]
    assert "holds no subject 'payments-value'" in errors["value_subject"][0]
    data["value_subject"] = "orders-value"
    assert admin_client.post("/admin/bindings/topicmodel/add/", data).status_code == 302
    topic_model = TopicModel.objects.get()
    assert (topic_model.value_version, topic_model.key_encoding) == ("latest", "utf_8")
    after = Change.objects.get(kind="topic-model").after
    assert after is not None
    assert after["value"]["subject"] == "orders-value"
    assert admin_client.get("/admin/bindings/topicmodel/?q=schemas").status_code == 200


def test_moving_the_url_to_another_host_removes_the_header_and_says_so(admin_client: Client) -> None:
    registry: dict[str, Any] = {"name": "reg", "kind": "schema-registry"}
    added = catalog_form(new_auth=SECRET, url="http://registry:8081", **registry)
    assert admin_client.post("/admin/bindings/catalog/add/", added).status_code == 302
    change = f"/admin/bindings/catalog/{Catalog.objects.get().pk}/change/"

    moved = admin_client.post(change, catalog_form(url="http://elsewhere:8081", **registry), follow=True)

    assert Catalog.objects.get().auth == ""
    assert "The Authorization header was removed" in moved.content.decode()
    latest = Change.objects.filter(kind="catalog").first()
    assert latest is not None
    assert ((latest.before or {}).get("auth_set"), (latest.after or {}).get("auth_set")) == (True, False)
    admin_client.post(change, catalog_form(url="http://third:8081", new_auth="Bearer t", **registry))
    assert Catalog.objects.get().auth == "Bearer t"  # given with the move: kept
    refused = admin_client.post(change, catalog_form(url="http://ada:s3cret@third:8081", **registry))
    assert refused.context is not None
    assert "carries no credentials" in " ".join(refused.context["adminform"].form.errors["url"])
    assert Catalog.objects.get().url == "http://third:8081"


def test_the_list_shows_a_url_saved_with_credentials_without_them(admin_client: Client) -> None:
    do_put_catalog(name="reg", kind="karapace", url="http://registry:8081")
    Catalog.objects.update(url="http://ada:s3cret@registry:8081")  # as an older version could save it

    page = admin_client.get("/admin/bindings/catalog/").content.decode()

    assert "http://***@registry:8081" in page
    assert "s3cret" not in page
