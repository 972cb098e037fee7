"""The route page's preview of the topic's recent records (streams/edge/preview.py) on a live server and Kafka:
each record as the topic holds it, and what the route's filters, fields and conflation make of it; staff only."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import httpx
import pytest
from django.contrib.auth.models import User

from bindings.services import do_put_route
from tests.conftest import unique

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "a-long-preview-test-password"


def signed_in(base: str, *, staff: bool = True) -> httpx.Client:
    """A client holding an admin session of a new user (a superuser, or a plain active user)."""
    name = unique("op")
    if staff:
        User.objects.create_superuser(name, f"{name}@example.com", PASSWORD)
    else:
        User.objects.create_user(name, f"{name}@example.com", PASSWORD)
    client = httpx.Client(base_url=base, timeout=20)
    form = client.get("/admin/login/").text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    assert token is not None
    data = {"username": name, "password": PASSWORD, "csrfmiddlewaretoken": token.group(1), "next": "/admin/"}
    client.post("/admin/login/?next=/admin/", data=data, headers={"referer": f"{base}/admin/login/"})
    return client  # open: the caller closes it


def test_it_shows_each_recent_record_and_what_the_route_makes_of_it(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic, name = new_topic(), unique("preview")
    do_put_route(
        name=name,
        path=f"/{name}/{{region}}",
        topic=topic,
        filters=[{"expression": "value.region == params.region"}],
        fields=["/price"],
        conflate_ms=60_000,
    )
    for price, region in ((1, "eu"), (2, "us"), (3, "eu"), (4, "eu")):
        produce(topic, json.dumps({"price": price, "region": region, "pad": "x"}).encode(), key=b"tea")

    client = signed_in(daphne_url)
    try:
        response = client.get(f"/admin/recent-records/{name}", params={"path": f"/{name}/eu"})
    finally:
        client.close()
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["topic"] == topic
    seen = [(json.loads(r["value"])["price"], r["fate"], r["sent"]) for r in body["records"]]
    assert seen == [
        (1, "sent", '{"price":1}'),
        (2, "filtered out", None),
        (3, "conflated away", '{"price":3}'),
        (4, "waits for its key's interval", '{"price":4}'),
    ]


def test_only_staff_with_view_route_see_it(daphne_url: str, new_topic: Callable[..., str]) -> None:
    name = unique("preview")
    do_put_route(name=name, path=f"/{name}", topic=new_topic())
    assert httpx.get(f"{daphne_url}/admin/recent-records/{name}?path=/{name}", timeout=10).status_code == 403
    for staff, path, status in ((False, f"/{name}", 403), (True, "/elsewhere", 404)):
        client = signed_in(daphne_url, staff=staff)
        try:
            assert client.get(f"/admin/recent-records/{name}", params={"path": path}).status_code == status
        finally:
            client.close()
