"""zilla.yaml import and export: a Zilla user's config becomes routes here, and routes go back out."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from bindings.models import Endpoint, Route
from bindings.selectors import EVENT_ID_KEY_AND_ETAG, route_specs
from bindings.services import do_put_route
from bindings.zilla import ZillaConfigError, do_import_zilla, export_zilla

pytestmark = pytest.mark.django_db

ZILLA_YAML = """
name: example
bindings:
  north_http_server:
    type: http
    kind: server
    routes:
      - when:
          - headers:
              :path: /events
        exit: north_sse_server
  north_sse_server:
    type: sse
    kind: server
    options:
      retry: 3000
    exit: north_sse_kafka_mapping
  north_sse_kafka_mapping:
    type: sse-kafka
    kind: proxy
    routes:
      - when:
          - path: /items
        exit: north_kafka_cache_client
        with:
          topic: items-snapshots
          event:
            id: '["${base64(key)}","${etag}"]'
      - when:
          - path: /{topic}/{key}
        exit: north_kafka_cache_client
        with:
          topic: ${params.topic}
          filters:
            - key: ${params.key}
              headers:
                tag: blue
  north_kafka_cache_client:
    type: kafka
    kind: cache_client
    exit: south_kafka_cache_server
"""


def test_it_imports_the_routes_of_a_zilla_yaml() -> None:
    routes = do_import_zilla(ZILLA_YAML)
    assert [r.name for r in routes] == ["north-sse-kafka-mapping-0", "north-sse-kafka-mapping-1"]
    first, second = route_specs()
    assert (first.paths, first.topic, first.event_id) == (("/items",), "items-snapshots", EVENT_ID_KEY_AND_ETAG)
    assert first.endpoint.name == "north-sse-server"
    assert first.endpoint.retry_ms == 3000
    assert (second.paths, second.topic) == (("/{topic}/{key}",), "${params.topic}")
    assert [(f.key, f.headers) for f in second.filters] == [("${params.key}", (("tag", "blue"),))]


def test_importing_again_replaces_instead_of_duplicating() -> None:
    do_import_zilla(ZILLA_YAML)
    do_import_zilla(ZILLA_YAML.replace("items-snapshots", "items-v2"))
    assert Route.objects.count() == 2
    assert route_specs()[0].topic == "items-v2"


NO_TOPIC = ZILLA_YAML.replace("          topic: items-snapshots\n", "", 1)
NO_PATH = ZILLA_YAML.replace("      - when:\n          - path: /items\n        exit:", "      - exit:", 1)
UNKNOWN_KEY = ZILLA_YAML.replace("          event:\n", "          guarded_by: nobody\n          event:\n", 1)
GUARDED = ZILLA_YAML.replace("      - when:\n          - path: /items\n", "      - guarded:\n          jwt: [read]\n"
                             "        when:\n          - path: /items\n", 1)  # fmt: skip


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (NO_TOPIC, "binding north_sse_kafka_mapping, route 0: `with.topic` is required"),
        (NO_PATH, "binding north_sse_kafka_mapping, route 0: give it `when` paths"),
        (UNKNOWN_KEY, "binding north_sse_kafka_mapping, route 0: unknown keys in with: guarded_by"),
        (GUARDED, "binding north_sse_kafka_mapping, route 0: guarded routes need JWT guards"),
    ],
    ids=["no-topic", "no-path", "unknown-key", "guarded"],
)
def test_a_bad_route_is_reported_where_it_is_and_nothing_is_written(text: str, problem: str) -> None:
    with pytest.raises(ZillaConfigError) as info:
        do_import_zilla(text)
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems
    assert not Route.objects.exists()


def test_validation_errors_name_the_route_and_roll_everything_back() -> None:
    with pytest.raises(ZillaConfigError) as info:
        do_import_zilla(ZILLA_YAML.replace("${params.topic}", "${params.nope}"))
    assert any(p.startswith("route north-sse-kafka-mapping-1, topic:") for p in info.value.problems)
    assert not Route.objects.exists()  # the valid first route was rolled back too
    assert not Endpoint.objects.filter(name="north-sse-server").exists()


@pytest.mark.parametrize("text", ["bindings: [", "just text", "bindings:\n  x:\n    type: tcp\n"])
def test_a_file_that_is_no_zilla_config_is_refused(text: str) -> None:
    with pytest.raises(ZillaConfigError):
        do_import_zilla(text)


def test_export_then_import_gives_the_same_routes_and_lists_what_zilla_cannot_carry() -> None:
    do_import_zilla(ZILLA_YAML)
    do_put_route(
        name="dash", path="/dash", topic="dash", start="live", slow_client="conflate",
        filters=[{"value": {"path": "status", "equals": "open"}}], position=5,
    )  # fmt: skip
    before = [(s.name, s.paths, s.topic, s.event_id, s.endpoint.retry_ms) for s in route_specs()][:2]
    text, left_out = export_zilla()
    assert sorted(left_out) == sorted(
        ["route dash: start=live", "route dash: slow_client=conflate", "route dash: the value filter on status"]
    )
    config = yaml.safe_load(text)
    assert config["bindings"]["north_sse_server_sse_server"]["options"] == {"retry": 3000}
    Route.objects.all().delete()
    do_import_zilla(text)
    after = [(s.paths, s.topic, s.event_id, s.endpoint.retry_ms) for s in route_specs()][:2]
    assert after == [(paths, topic, event_id, retry) for _, paths, topic, event_id, retry in before]


def test_export_reads_everything_in_four_queries(django_assert_num_queries: object) -> None:
    do_import_zilla(ZILLA_YAML)
    with django_assert_num_queries(4):  # type: ignore[operator]
        export_zilla()


def test_the_management_commands(tmp_path: Path) -> None:
    source = tmp_path / "zilla.yaml"
    source.write_text(ZILLA_YAML)
    out = StringIO()
    call_command("zilla_import", str(source), stdout=out)
    assert "route north-sse-kafka-mapping-0: /items -> items-snapshots" in out.getvalue()
    exported = StringIO()
    call_command("zilla_export", stdout=exported, stderr=StringIO())
    assert "north_sse_server_sse_kafka" in yaml.safe_load(exported.getvalue())["bindings"]
    source.write_text("bindings: [")
    with pytest.raises(CommandError, match="nothing imported"):
        call_command("zilla_import", str(source))
