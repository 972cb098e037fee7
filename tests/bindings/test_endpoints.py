"""Endpoints (bindings/models/endpoints.py) on save: exact origins only, `*` alone and without credentials, each
error keyed by the field that is wrong; an endpoint a route is served on is never deleted."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db.models import ProtectedError

from bindings.models import Endpoint
from bindings.services import do_put_endpoint, do_put_route

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cors_origins": ["https://app.example.com/"]}, "cors_origins"),
        ({"cors_origins": ["app.example.com"]}, "cors_origins"),
        ({"cors_origins": ["https://app.example.com:99999"]}, "cors_origins"),
        ({"cors_origins": ["https://App.example.com"]}, "cors_origins"),
        ({"cors_origins": ["https://user@app.example.com"]}, "cors_origins"),
        ({"cors_origins": ["*", "https://app.example.com"]}, "cors_origins"),
        ({"cors_origins": ["*"], "cors_credentials": True}, "cors_credentials"),
        ({"retry_ms": -1}, "retry_ms"),
        ({"keepalive_s": -1}, "keepalive_s"),
        ({"name": "no spaces"}, "name"),
    ],
)
def test_it_refuses_a_bad_endpoint_on_the_right_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        do_put_endpoint(**{"name": "e", **kwargs})
    assert list(info.value.message_dict) == [field]


def test_it_accepts_good_endpoints() -> None:
    do_put_endpoint(name="any", cors_origins=["*"])
    do_put_endpoint(
        name="app", cors_origins=["https://app.example.com", "http://localhost:8000"], cors_credentials=True
    )
    again = do_put_endpoint(name="app", retry_ms=0, keepalive_s=0)
    assert (again.retry_ms, again.keepalive_s, again.cors_origins) == (0, 0, [])
    assert Endpoint.objects.filter(name="app").count() == 1


def test_an_endpoint_in_use_cannot_be_deleted() -> None:
    do_put_endpoint(name="public")
    do_put_route(name="items", path="/items", topic="items", endpoint="public")
    with pytest.raises(ProtectedError):
        Endpoint.objects.get(name="public").delete()
