"""Postgres unreachable (a TCP proxy of the test's own, cut and restored): open streams go on, new streams are served
from the last route table, the API answers 503 problems, and everything recovers without a restart."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from bindings.services import do_put_route
from tests.conftest import unique, wait_until
from tests.support.servers import DaphneServer, TcpProxy, start_daphne
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def behind_a_cuttable_database() -> Iterator[tuple[DaphneServer, TcpProxy]]:
    db = settings.DATABASES["default"]
    proxy = TcpProxy(int(str(db["PORT"])))
    url = f"postgres://{db['USER']}:{db['PASSWORD']}@{proxy.address}/{db['NAME']}"
    server = start_daphne({"DATABASE_URL": url}, log_name="test-daphne-postgres-outage")
    try:
        yield server, proxy
    finally:
        server.stop()
        proxy.close()


def test_streams_go_on_and_the_api_answers_503_while_postgres_is_unreachable(
    behind_a_cuttable_database: tuple[DaphneServer, TcpProxy],
    new_topic: Callable[..., str],
    produce: Callable[..., tuple[int, int]],
) -> None:
    server, proxy = behind_a_cuttable_database
    topic = new_topic()
    name = unique("pg")
    do_put_route(name=name, path=f"/{name}", topic=topic)
    user = User.objects.create_superuser(unique("root"), "root@example.com", "a-long-test-password")
    api = {"authorization": f"Token {Token.objects.create(user=user).key}"}
    assert httpx.get(f"{server.url}/api/v1/routes/{name}/", headers=api, timeout=10).status_code == 200

    with EventStream(f"{server.url}/{name}") as before:
        produce(topic, b"one")
        assert before.next_event().text == "one"
        proxy.cut()
        # A change announced now marks the table stale: the next request tries the database, which is gone.
        do_put_route(name=unique("other"), path=f"/{unique('other')}", topic=topic)
        produce(topic, b"two")
        assert before.next_event().text == "two"
        with EventStream(f"{server.url}/{name}") as during:  # served from the last table read
            assert during.response.status_code == 200
            assert [e.text for e in during.events(2)] == ["one", "two"]
        refused = httpx.get(f"{server.url}/api/v1/routes/{name}/", headers=api, timeout=20)
        assert refused.status_code == 503
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.headers["retry-after"] == "5"
        assert "database" in refused.json()["detail"]
        assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
        assert httpx.get(f"{server.url}/readyz", timeout=10).json()["failed"] == ["postgres"]

        proxy.restore()
        created = unique("after")
        do_put_route(name=created, path=f"/{created}", topic=topic)
        wait_until(lambda: httpx.head(f"{server.url}/{created}", timeout=10).status_code == 200, timeout=15)
        assert httpx.get(f"{server.url}/api/v1/routes/{created}/", headers=api, timeout=10).status_code == 200
        produce(topic, b"three")
        assert before.next_event().text == "three"  # the first stream never stopped
