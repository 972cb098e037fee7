"""Internal topics are never served (bindings/patterns.py `is_internal_topic`), on the live server.

Kafka's own topics (names starting `__`) and those of `SSE_INTERNAL_TOPICS` (here `_schemas` and a prefix, so the
test can make one of its own) answer a stream request 404 as an unknown topic does, even when they exist and
a route's template renders their name; the API and the admin refuse a route naming one with a field error. The
tests make the topics they use, so they exist: a server that does not refuse them would serve them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.authtoken.models import Token

from bindings.models import Route
from bindings.services import do_put_route
from streams.kafka.admin import ensure_topic
from tests.bindings.test_control_plane import route_form
from tests.conftest import unique
from tests.support.servers import DaphneServer, start_daphne

pytestmark = pytest.mark.django_db(transaction=True)
DENIED_PREFIX = "deny-probe-"


@pytest.fixture(scope="module")
def server(django_db_setup: None, django_db_blocker: object) -> Iterator[DaphneServer]:
    started = start_daphne(
        {"SSE_INTERNAL_TOPICS": f"_schemas,{DENIED_PREFIX}*"}, log_name="test-daphne-internal-topics"
    )
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def make_topic(created_topics: list[str]) -> Callable[[str], str]:
    def make(prefix: str) -> str:
        name = unique(prefix)
        ensure_topic(settings.KAFKA, name, partitions=1)
        created_topics.append(name)
        return name

    return make


def problem_shape(response: httpx.Response) -> tuple[int, str, str, list[str]]:
    body = response.json()
    return response.status_code, response.headers["content-type"], body["title"], sorted(body)


@pytest.mark.parametrize("prefix", ["__internal-probe", DENIED_PREFIX])
def test_a_template_rendering_an_internal_topic_is_a_404_as_an_unknown_topic(
    server: DaphneServer, make_topic: Callable[[str], str], new_topic: Callable[..., str], prefix: str
) -> None:
    internal, ordinary = make_topic(prefix), new_topic()
    name = unique("any")
    do_put_route(name=name, path=f"/{name}/{{t}}", topic="${params.t}")
    served = httpx.head(f"{server.url}/{name}/{ordinary}", timeout=10)
    assert served.status_code == 200  # the route serves what it renders
    refused = httpx.get(f"{server.url}/{name}/{internal}", timeout=10)
    unknown = httpx.get(f"{server.url}/{name}/{unique('absent')}", timeout=10)
    assert refused.status_code == 404, f"{internal} was served"
    assert problem_shape(refused) == problem_shape(unknown) == (
        404, "application/problem+json", "Unknown topic", ["detail", "status", "title", "topic", "type"]
    )  # fmt: skip
    assert refused.json()["detail"] == f"Topic {internal!r} does not exist."  # no hint that it does


# The delivery log's topic is internal whatever SSE_INTERNAL_TOPICS says (the suite's default name).
@pytest.mark.parametrize(
    "topic", ["__consumer_offsets", "__transaction_state", "_schemas", f"{DENIED_PREFIX}x", "sse-delivery-log-test"]
)
def test_the_api_refuses_a_route_naming_an_internal_topic_on_its_field(server: DaphneServer, topic: str) -> None:
    user = User.objects.create_superuser(unique("root"), "root@example.com", "a-long-test-password")
    api = {"authorization": f"Token {Token.objects.create(user=user).key}"}
    name = unique("internal")
    body = {"topic": topic, "paths": [f"/{name}"]}
    response = httpx.put(f"{server.url}/api/v1/routes/{name}/", json=body, headers=api, timeout=10)
    assert response.status_code == 400, response.text
    assert list(response.json()["errors"]) == ["topic"]
    assert "never served" in str(response.json()["errors"]["topic"])


@pytest.mark.parametrize("topic", ["__consumer_offsets", "_schemas", "__${params.t}"])
def test_the_admin_refuses_an_internal_topic_on_the_topic_field(client: Client, topic: str) -> None:
    client.force_login(User.objects.create_superuser(unique("op"), "op@example.com", "a-long-test-password"))
    response = client.post("/admin/bindings/route/add/", route_form(topic=topic, paths=["/x/{t}"]))
    assert response.status_code == 200
    assert "never served" in str(response.context["adminform"].form.errors["topic"])
    assert not Route.objects.exists()
