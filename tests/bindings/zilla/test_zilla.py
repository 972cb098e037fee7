"""zilla.yaml import and export: a Zilla user's config becomes endpoints, guards and routes here, and goes back out."""

from __future__ import annotations

import base64
from io import StringIO
from pathlib import Path
from typing import Any

import jwt
import pytest
import yaml
from django.core.management import CommandError, call_command
from jwt import PyJWK

from bindings.history import Actor, route_state
from bindings.models import Change, Endpoint, Guard, Route
from bindings.representations import endpoint_representation, guard_representation
from bindings.selectors import EVENT_ID_KEY_AND_ETAG, route_specs
from bindings.services import do_put_endpoint, do_put_guard, do_put_route
from bindings.zilla.document import ImportResult, ZillaConfigError, do_import_zilla, export_zilla
from tests.support import jwt_keys

pytestmark = pytest.mark.django_db

ACTOR = Actor(name="tester", source="import")
SEED = Path(__file__).parents[2] / "support" / "fixtures" / "zilla-sse-kafka-proxy.yaml"

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

PROXY = "bindings.north_sse_kafka_mapping"


def do_import(text: str, **options: Any) -> ImportResult:
    return do_import_zilla(text, actor=ACTOR, **options)


def names(result: ImportResult, action: str) -> list[str]:
    return [f"{item.kind} {item.name}" for item in result.of(action)]


def test_it_imports_the_routes_and_endpoint_of_a_zilla_yaml() -> None:
    result = do_import(ZILLA_YAML)
    assert names(result, "created") == [
        "endpoint north-sse-server",
        "route north-sse-kafka-mapping-0",
        "route north-sse-kafka-mapping-1",
    ]
    first, second = route_specs()
    assert (first.paths, first.topic, first.event_id) == (("/items",), "items-snapshots", EVENT_ID_KEY_AND_ETAG)
    assert (first.endpoint.name, first.endpoint.retry_ms) == ("north-sse-server", 3000)
    assert (second.paths, second.topic) == (("/{topic}/{key}",), "${params.topic}")
    assert [(f.key, f.headers) for f in second.filters] == [("${params.key}", (("tag", "blue"),))]
    assert result.ignored == [
        "binding north_http_server (http): ignored, not an SSE binding",
        "binding north_kafka_cache_client (kafka): ignored, not an SSE binding",
    ]


def test_the_seed_example_of_zillas_docs_imports() -> None:
    result = do_import(SEED.read_text())
    assert names(result, "created") == ["endpoint north-sse-server", "route north-sse-kafka-mapping-0"]
    (route,) = route_specs()
    assert (route.paths, route.topic, route.filters, route.event_id) == (
        ("/{topic}",),
        "${params.topic}",
        (),
        "${etag}",
    )
    assert (route.endpoint.name, route.endpoint.retry_ms, route.guarded) == ("north-sse-server", 2000, ())
    assert result.ignored == [
        "vaults: ignored, the platform has its own",
        "telemetry: ignored, the platform has its own",
        "binding north_tcp_server (tcp): ignored, not an SSE binding",
        "binding north_tls_server (tls): ignored, not an SSE binding",
        "binding north_http_server (http): ignored, not an SSE binding",
        "binding east_http_filesystem_mapping (http-filesystem): ignored, not an SSE binding",
        "binding east_filesystem_server (filesystem): ignored, not an SSE binding",
        "binding north_kafka_cache_client (kafka): ignored, not an SSE binding",
        "binding south_kafka_cache_server (kafka): ignored, not an SSE binding",
        "binding south_kafka_client (kafka): ignored, not an SSE binding",
        "binding south_tcp_client (tcp): ignored, not an SSE binding",
    ]


def test_importing_again_replaces_and_reports_the_changed_fields() -> None:
    do_import(ZILLA_YAML)
    result = do_import(ZILLA_YAML.replace("items-snapshots", "items-v2"))
    assert Route.objects.count() == 2
    assert route_specs()[0].topic == "items-v2"
    (updated,) = result.of("updated")
    assert (updated.name, updated.changes) == ("north-sse-kafka-mapping-0", {"topic": ("items-snapshots", "items-v2")})
    assert names(result, "unchanged") == ["endpoint north-sse-server", "route north-sse-kafka-mapping-1"]


def test_a_dry_run_writes_nothing_and_reports_the_diff() -> None:
    first = do_import(ZILLA_YAML, dry_run=True)
    assert len(first.of("created")) == 3
    assert not Route.objects.exists()
    assert not Endpoint.objects.filter(name="north-sse-server").exists()
    assert not Change.objects.exists()

    do_import(ZILLA_YAML)
    changes = Change.objects.count()
    result = do_import(ZILLA_YAML.replace("retry: 3000", "retry: 5000").replace("tag: blue", "tag: red"), dry_run=True)
    assert result.dry_run
    assert {item.name: item.changes for item in result.of("updated")} == {
        "north-sse-server": {"retry_ms": (3000, 5000)},
        "north-sse-kafka-mapping-1": {
            "filters": (
                [{"key": "${params.key}", "headers": {"tag": "blue"}, "value": None, "expression": ""}],
                [{"key": "${params.key}", "headers": {"tag": "red"}, "value": None, "expression": ""}],
            )
        },
    }
    assert Endpoint.objects.get(name="north-sse-server").retry_ms == 3000
    assert route_specs()[1].filters[0].headers == (("tag", "blue"),)
    assert Change.objects.count() == changes
    assert result.as_dict()["updated"][0] == {
        "kind": "endpoint",
        "name": "north-sse-server",
        "from": "bindings.north_sse_server",
        "changes": {"retry_ms": {"before": 3000, "after": 5000}},
    }


def test_every_write_is_in_the_history_as_an_import() -> None:
    do_import(ZILLA_YAML)
    rows = list(Change.objects.order_by("id").values_list("actor", "source", "action", "kind", "name"))
    assert rows == [
        ("tester", "import", "create", "endpoint", "north-sse-server"),
        ("tester", "import", "create", "route", "north-sse-kafka-mapping-0"),
        ("tester", "import", "create", "route", "north-sse-kafka-mapping-1"),
    ]


def test_prune_deletes_the_routes_the_file_does_not_have() -> None:
    do_put_route(name="manual", path="/manual", topic="manual", actor=ACTOR)
    result = do_import(ZILLA_YAML, prune=True)
    assert names(result, "deleted") == ["route manual"]
    assert sorted(Route.objects.values_list("name", flat=True)) == [
        "north-sse-kafka-mapping-0",
        "north-sse-kafka-mapping-1",
    ]
    do_put_route(name="manual", path="/manual", topic="manual", actor=ACTOR)
    assert do_import(ZILLA_YAML).of("deleted") == []  # without --prune it stays
    assert Route.objects.filter(name="manual").exists()


NO_TOPIC = ZILLA_YAML.replace("          topic: items-snapshots\n", "", 1)
NO_PATH = ZILLA_YAML.replace("      - when:\n          - path: /items\n        exit:", "      - exit:", 1)
UNKNOWN_KEY = ZILLA_YAML.replace("          event:\n", "          guarded_by: nobody\n          event:\n", 1)
BAD_EVENT_ID = ZILLA_YAML.replace("""'["${base64(key)}","${etag}"]'""", "${key}", 1)
BAD_PATTERN = ZILLA_YAML.replace("- path: /items\n", "- path: /items/{id\n", 1)
BAD_HEADER = ZILLA_YAML.replace("tag: blue", "tag: 7", 1)
BAD_RETRY = ZILLA_YAML.replace("retry: 3000", "retry: soon", 1)
GUARDED_ITEMS = "      - guarded:\n          jwt: [read]\n        when:\n          - path: /items\n"
UNKNOWN_GUARD = ZILLA_YAML.replace("      - when:\n          - path: /items\n", GUARDED_ITEMS, 1)


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        (NO_TOPIC, f"{PROXY}.routes[0].with.topic", "`with.topic` is required"),
        (NO_PATH, f"{PROXY}.routes[0].when", "paths"),
        (UNKNOWN_KEY, f"{PROXY}.routes[0].with.guarded_by", "Unknown field; known: caught_up, conflate_ms, event"),
        (BAD_EVENT_ID, f"{PROXY}.routes[0].with.event.id", "not '${key}'"),
        (BAD_PATTERN, f"{PROXY}.routes[0].when[0].path", "{name}"),
        (BAD_HEADER, f"{PROXY}.routes[1].with.filters[0].headers", "'tag'"),
        (BAD_RETRY, "bindings.north_sse_server.options.retry", "'soon'"),
        (UNKNOWN_GUARD, f"{PROXY}.routes[0].guarded.jwt", "no guard named 'jwt'"),
    ],
    ids=["no-topic", "no-path", "unknown-key", "event-id", "pattern", "header", "retry", "unknown-guard"],
)
def test_a_bad_file_is_reported_where_it_is_and_nothing_is_written(text: str, where: str, words: str) -> None:
    with pytest.raises(ZillaConfigError) as info:
        do_import(text)
    assert where in info.value.errors, info.value.errors
    assert any(words in message for message in info.value.errors[where]), info.value.errors[where]
    assert not Route.objects.exists()
    assert not Endpoint.objects.filter(name="north-sse-server").exists()
    assert not Change.objects.exists()


def test_a_file_nested_too_deeply_is_refused_as_invalid_yaml_not_a_crash() -> None:
    """The YAML parser recurses per level: before the shared loader this was a RecursionError, a 500 on the API."""
    with pytest.raises(ZillaConfigError) as info:
        do_import("bindings: " + "[" * 5000 + "]" * 5000)
    assert info.value.errors == {"yaml": ["Not valid YAML: nested too deeply"]}
    assert not Change.objects.exists()


def test_anchors_and_aliases_of_a_zilla_file_are_read() -> None:
    """Zilla files may share values through YAML anchors: the AsyncAPI import refuses aliases, this one reads
    them (and bounds what they expand to)."""
    first = "exit: north_kafka_cache_client\n        with:\n          topic: items-snapshots"
    second = "exit: north_kafka_cache_client\n        with:\n          topic: ${params.topic}"
    shared = ZILLA_YAML.replace(first, first.replace("exit: ", "exit: &cache ")).replace(
        second, second.replace("exit: north_kafka_cache_client", "exit: *cache")
    )
    assert "&cache" in shared
    assert "*cache" in shared
    result = do_import(shared)
    assert {"route north-sse-kafka-mapping-0", "route north-sse-kafka-mapping-1"} <= set(names(result, "created"))


def test_validation_errors_roll_back_the_routes_that_were_valid() -> None:
    with pytest.raises(ZillaConfigError) as info:
        do_import(ZILLA_YAML.replace("${params.topic}", "${params.nope}"))
    assert list(info.value.errors) == [f"{PROXY}.routes[1].with.topic"]
    assert info.value.problems[0].startswith(f"{PROXY}.routes[1].with.topic: ")
    assert not Route.objects.exists()  # the valid first route was rolled back too
    assert not Endpoint.objects.filter(name="north-sse-server").exists()


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("bindings: [", "yaml"),
        ("just text", "yaml"),
        ("bindings:\n  x:\n    type: tcp\n", "bindings"),
        ("bindings: {}\nextras: 1\n", "extras"),
    ],
)
def test_a_file_that_is_no_zilla_config_is_refused(text: str, where: str) -> None:
    with pytest.raises(ZillaConfigError) as info:
        do_import(text)
    assert where in info.value.errors


# --- guards -------------------------------------------------------------------------------------------------


def guarded_yaml(keys: Any, **options: Any) -> str:
    """A JWT-guarded file in the shape of Zilla's sse.kafka.fanout.jwt example (keys None: no keys option)."""
    config: dict[str, Any] = {
        "name": "jwt",
        "guards": {
            "authn_jwt": {
                "type": "jwt",
                "options": {"issuer": jwt_keys.ISSUER, "audience": jwt_keys.AUDIENCE, "keys": keys, **options},
            },
            "other": {"type": "vault-guard"},
        },
        "bindings": {
            "sse_server": {"type": "sse", "kind": "server", "exit": "sse_kafka"},
            "sse_kafka": {
                "type": "sse-kafka",
                "kind": "proxy",
                "routes": [
                    {
                        "when": [{"path": "/{topic}"}],
                        "guarded": {"authn_jwt": ["proxy:stream"]},
                        "exit": "kafka_cache_client",
                        "with": {
                            "topic": "${params.topic}",
                            "filters": [{"key": "${guarded['authn_jwt'].identity}"}],
                        },
                    }
                ],
            },
        },
    }
    if keys is None:
        del config["guards"]["authn_jwt"]["options"]["keys"]
    return yaml.safe_dump(config)


def test_a_jwt_guard_and_its_guarded_route_import() -> None:
    text = guarded_yaml(
        [jwt_keys.public_jwk()],
        roles="realm_access.roles",
        identity="email",
        attributes={"tenant": "org.id"},
        challenge=10,
    )
    result = do_import(text)
    assert names(result, "created") == ["endpoint sse-server", "guard authn_jwt", "route sse-kafka-0"]
    assert result.ignored == ["guard other (vault-guard): ignored, only jwt guards are imported"]
    guard = Guard.objects.get(name="authn_jwt")
    assert guard_representation(guard) == {
        "name": "authn_jwt",
        "issuer": jwt_keys.ISSUER,
        "audience": jwt_keys.AUDIENCE,
        "keys": [jwt_keys.public_jwk()],
        "jwks_url": "",
        "roles_claim": "realm_access.roles",
        "identity_claim": "email",
        "attributes": {"tenant": "org.id"},
        "challenge_s": 10,
        "cookie": "",
        "allow_tokens_without_exp": False,
    }
    (route,) = route_specs()
    assert [(spec.name, roles) for spec, roles in route.guarded] == [("authn_jwt", ("proxy:stream",))]


def test_a_guard_with_a_url_reads_its_keys_there_and_without_keys_from_the_issuer() -> None:
    do_import(guarded_yaml("https://auth.example.com/keys.json"))
    assert Guard.objects.get(name="authn_jwt").jwks_url == "https://auth.example.com/keys.json"
    assert Guard.objects.get(name="authn_jwt").keys == []
    text = guarded_yaml(None)
    assert "keys" not in yaml.safe_load(text)["guards"]["authn_jwt"]["options"]
    do_import(text)
    assert Guard.objects.get(name="authn_jwt").jwks_url == "https://auth.example.com/.well-known/jwks.json"


def standard_base64(value: str) -> str:
    """A base64url value rewritten in standard base64 with padding, as Zilla's example configs write `n`."""
    return base64.b64encode(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))).decode()


def test_keys_in_standard_base64_are_stored_as_base64url_and_verify_tokens() -> None:
    key = jwt_keys.public_jwk()
    zilla_key = {**key, "n": standard_base64(key["n"]), "e": standard_base64(key["e"])}
    assert set(zilla_key["n"]) & set("+/=")  # the variant really uses the other alphabet
    do_import(guarded_yaml([zilla_key]))
    (stored,) = Guard.objects.get(name="authn_jwt").keys
    assert stored == key
    claims = jwt.decode(
        jwt_keys.token(), PyJWK(stored).key, algorithms=["RS256"], audience=jwt_keys.AUDIENCE, issuer=jwt_keys.ISSUER
    )
    assert claims["sub"] == "alice"


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"issuer": None}, "guards.authn_jwt.options.issuer"),
        ({"keys": [{"kty": "RSA", "kid": "k1", "alg": "HS256", "k": "c2VjcmV0"}]}, "guards.authn_jwt.options.keys"),
        ({"keys": 7}, "guards.authn_jwt.options.keys"),
        ({"challenge": "soon"}, "guards.authn_jwt.options.challenge"),
        ({"roles": "a..b"}, "guards.authn_jwt.options.roles"),
        ({"algorithm": "RS256"}, "guards.authn_jwt.options.algorithm"),
    ],
    ids=["issuer", "symmetric-key", "keys-shape", "challenge", "roles-path", "unknown-option"],
)
def test_a_bad_guard_is_reported_with_its_field(change: dict[str, Any], where: str) -> None:
    config = yaml.safe_load(guarded_yaml([jwt_keys.public_jwk()]))
    config["guards"]["authn_jwt"]["options"].update(change)
    config["guards"]["authn_jwt"]["options"] = {
        key: value for key, value in config["guards"]["authn_jwt"]["options"].items() if value is not None
    }
    with pytest.raises(ZillaConfigError) as info:
        do_import(yaml.safe_dump(config))
    assert where in info.value.errors, info.value.errors
    assert not Guard.objects.exists()
    assert not Route.objects.exists()


def test_a_guard_on_the_sse_server_route_guards_every_route_behind_it() -> None:
    config = yaml.safe_load(guarded_yaml([jwt_keys.public_jwk()]))
    config["bindings"]["sse_server"] = {
        "type": "sse",
        "kind": "server",
        "routes": [{"guarded": {"authn_jwt": ["proxy:stream", "admin"]}, "exit": "sse_kafka"}],
    }
    do_import(yaml.safe_dump(config))
    (route,) = route_specs()
    assert [(spec.name, roles) for spec, roles in route.guarded] == [("authn_jwt", ("proxy:stream", "admin"))]


# --- export and round trip ----------------------------------------------------------------------------------


def build_configuration() -> None:
    """Everything the configuration can hold, spread over two endpoints with routes interleaved."""
    do_put_endpoint(name="app", retry_ms=1500, keepalive_s=30, cors_origins=["https://app.example.com"],
                    cors_credentials=True)  # fmt: skip
    do_put_endpoint(name="Ops_Panel", retry_ms=4000)
    extras = {"attributes": {"tenant": "org.id"}, "challenge_s": 10, "cookie": "session"}
    do_put_guard(**jwt_keys.guard_fields("authn_jwt", roles_claim="roles", identity_claim="email", **extras))
    do_put_guard(
        name="remote", issuer="https://idp.example.com/", audience="api", jwks_url="https://idp.example.com/jwks"
    )
    do_put_route(
        name="items", endpoint="app", paths=["/items/{id}", "/things/{id}"], topic="items-${params.id}", position=0,
        filters=[
            {"key": "${params.id}", "headers": {"tag": "x", "region": "${guarded['authn_jwt'].attributes.tenant}"}},
            {"value": {"path": "status", "equals": "open"}},
        ],
        guarded={"authn_jwt": ["read:items"], "remote": []}, event_id=EVENT_ID_KEY_AND_ETAG,
    )  # fmt: skip
    do_put_route(name="ops", endpoint="Ops_Panel", path="/ops", topic="ops", position=1, start="live",
                 caught_up=True, slow_client="conflate")  # fmt: skip
    do_put_route(name="mine", endpoint="app", path="/mine", topic="mine", position=2,
                 filters=[{"key": "${guarded['authn_jwt'].identity}"}], guarded={"authn_jwt": []})  # fmt: skip


def snapshot() -> dict[str, Any]:
    return {
        "endpoints": [endpoint_representation(e) for e in Endpoint.objects.order_by("name")],
        "guards": [guard_representation(g) for g in Guard.objects.order_by("name")],
        "routes": [
            route_state(name) for name in Route.objects.order_by("position", "id").values_list("name", flat=True)
        ],
    }


def test_export_then_import_gives_the_same_configuration() -> None:
    build_configuration()
    before = snapshot()
    text, notes = export_zilla()
    assert "route items: the value filter on status (not in Zilla's schema)" in notes
    Route.objects.all().delete()
    Guard.objects.all().delete()
    Endpoint.objects.exclude(name="default").delete()
    result = do_import(text)
    assert not result.of("updated")
    assert snapshot() == before
    again = do_import(text, dry_run=True)
    assert [item.action for item in again.objects] == ["unchanged"] * len(again.objects)
    assert len(again.objects) == 3 + 2 + 3  # endpoints (default too), guards, routes


def test_a_strict_export_is_zillas_schema_and_lists_what_it_left_out() -> None:
    build_configuration()
    text, notes = export_zilla(strict=True)
    config = yaml.safe_load(text)
    assert config["guards"]["remote"] == {
        "type": "jwt",
        "options": {"issuer": "https://idp.example.com/", "audience": "api", "keys": "https://idp.example.com/jwks"},
    }
    routes = config["bindings"]["app_sse_kafka"]["routes"]
    assert [set(route) for route in routes] == [{"when", "exit", "guarded", "with"}] * 2
    assert routes[0]["with"]["filters"] == [
        {"key": "${params.id}", "headers": {"region": "${guarded['authn_jwt'].attributes.tenant}", "tag": "x"}}
    ]
    assert config["bindings"]["Ops_Panel_sse_kafka"]["routes"][0]["with"] == {"topic": "ops"}
    assert sorted(notes) == sorted(
        [
            "left out: endpoint app: keepalive 30",
            "left out: endpoint app: cors",
            "left out: guard authn_jwt: cookie session",
            "left out: route items: the value filter on status",
            "left out: route ops: start=live",
            "left out: route ops: caught_up=True",
            "left out: route ops: slow_client=conflate",
        ]
    )


def test_a_guard_accepting_tokens_without_exp_is_exported_without_it_and_imports_refusing_them() -> None:
    do_put_guard(**jwt_keys.guard_fields("lenient", allow_tokens_without_exp=True))
    text, notes = export_zilla()
    assert "left out: guard lenient accepts tokens without exp (an import refuses them)" in notes
    assert set(yaml.safe_load(text)["guards"]["lenient"]["options"]) == {"issuer", "audience", "keys"}
    Guard.objects.all().delete()
    do_import(text)
    assert Guard.objects.get(name="lenient").allow_tokens_without_exp is False


def test_export_reads_everything_in_eight_queries(django_assert_num_queries: Any) -> None:
    build_configuration()
    # guards, endpoints, the four of routes_in_order, topic models and catalogs (their schemas: one more, if any)
    with django_assert_num_queries(8):
        export_zilla()


# --- the command --------------------------------------------------------------------------------------------


def test_the_zilla_command_imports_dry_runs_and_exports(tmp_path: Path) -> None:
    source = tmp_path / "zilla.yaml"
    source.write_text(ZILLA_YAML)
    dry = StringIO()
    call_command("zilla", "import", str(source), "--dry-run", stdout=dry)
    assert "route north-sse-kafka-mapping-0: would create" in dry.getvalue()
    assert "dry run: nothing was written" in dry.getvalue()
    assert not Route.objects.exists()

    out = StringIO()
    call_command("zilla", "import", str(source), stdout=out)
    assert "route north-sse-kafka-mapping-0: created" in out.getvalue()
    assert "binding north_http_server (http): ignored, not an SSE binding" in out.getvalue()
    assert set(Change.objects.values_list("actor", "source")) == {("zilla import", "import")}

    source.write_text(ZILLA_YAML.replace("retry: 3000", "retry: 100"))
    out = StringIO()
    call_command("zilla", "import", str(source), "--dry-run", stdout=out)
    assert "endpoint north-sse-server: would update\n    retry_ms: 3000 -> 100" in out.getvalue()

    exported, notes = StringIO(), StringIO()
    call_command("zilla", "export", stdout=exported, stderr=notes)
    assert "north_sse_kafka_mapping-0" not in exported.getvalue()
    assert yaml.safe_load(exported.getvalue())["bindings"]["north-sse-server"]["options"] == {"retry": 3000}

    source.write_text(ZILLA_YAML.replace("${params.topic}", "${params.nope}"))
    with pytest.raises(CommandError, match=r"nothing imported:\n  bindings.north_sse_kafka_mapping.routes\[1\]"):
        call_command("zilla", "import", str(source))
    with pytest.raises(CommandError, match="cannot read"):
        call_command("zilla", "import", str(tmp_path / "missing.yaml"))
