"""A route's `conflate_ms` on the control plane: checked on save on its field, stored, shown, recorded and carried
by the exports (docs/contract.md §7)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from django.core.exceptions import ValidationError

from bindings.asyncapi.document import export_asyncapi
from bindings.history import Actor
from bindings.models import Change, Route
from bindings.selectors import route_specs
from bindings.services import do_put_route
from bindings.zilla.document import ZillaConfigError, do_import_zilla, export_zilla
from tests.bindings.test_route_fields import ZILLA

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("conflate_ms", [-1, 3_600_001, "soon", 1.5, True])
def test_it_refuses_an_interval_that_is_no_whole_number_of_ms_up_to_an_hour(conflate_ms: Any) -> None:
    with pytest.raises(ValidationError) as info:
        do_put_route(name="r", path="/items", topic="items", conflate_ms=conflate_ms)
    assert list(info.value.message_dict) == ["conflate_ms"]
    assert not Route.objects.exists()


def test_it_stores_the_interval_and_every_form_carries_it() -> None:
    do_put_route(name="r", path="/items", topic="items", conflate_ms=500)
    assert route_specs()[0].conflate_ms == 500
    after = Change.objects.get(kind="route").after
    assert after is not None
    assert after["conflate_ms"] == 500
    channel = next(iter(export_asyncapi("https://sse.example.com")["channels"].values()))
    assert channel["x-sse-kafka"]["conflate-ms"] == 500
    text, notes = export_zilla()
    assert "route r: conflate_ms=500 (not in Zilla's schema)" in notes
    routes = [r for b in yaml.safe_load(text)["bindings"].values() if b["type"] == "sse-kafka" for r in b["routes"]]
    assert [route["with"].get("conflate_ms") for route in routes] == [500]


def test_a_zilla_import_reports_a_bad_interval_where_it_is() -> None:
    text = ZILLA.replace("          fields: FIELDS\n", "          conflate_ms: soon\n")
    with pytest.raises(ZillaConfigError) as info:
        do_import_zilla(text, actor=Actor(name="tester", source="import"))
    where = "bindings.sse_kafka.routes[0].with.conflate_ms"
    assert info.value.errors == {where: ["conflate_ms is a whole number of milliseconds."]}
