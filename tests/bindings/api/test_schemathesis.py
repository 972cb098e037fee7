"""Property-based run of the OpenAPI schema against the real server (schemathesis + hypothesis).

Every operation of the schema is called with generated data, valid and invalid, on a live daphne over the test
database, with a staff token. Each response must not be a 500, must have a status and a content type the schema
documents, and a body (a representation or a problem) that matches the schema.

Most calls come from schemathesis' deterministic coverage phase (boundaries, wrong types, methods an operation
lacks: about 1,600); `max_examples` bounds the random ones per operation. About a minute in all.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import Permission, User
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from bindings.api.permissions import grant_api_writer

# The schema the server serves at /api/v1/schema/, built in process so pytest can make one test per operation.
SCHEMA = json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(public=True)))  # type: ignore[no-untyped-call]
schema = schemathesis.openapi.from_dict(SCHEMA)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
CALLS: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def report_calls(request: pytest.FixtureRequest) -> Iterator[None]:
    """How many operations were exercised with how many calls, in the terminal summary."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    documented = {f"{method.upper()} {path}" for path, operations in SCHEMA["paths"].items() for method in operations}
    if reporter is not None and CALLS:
        reporter.write_line(
            f"schemathesis: {len(documented & set(CALLS))} of {len(documented)} operations, {CALLS.total()} calls "
            f"({sum(n for key, n in CALLS.items() if key not in documented)} of them undocumented methods)"
        )


@pytest.fixture
def admin_token(transactional_db: None) -> str:
    """A staff token, committed so that the daphne process sees it; it may also revoke."""
    user = User.objects.create_user("schemathesis", is_staff=True)
    grant_api_writer(user)
    user.user_permissions.add(*Permission.objects.filter(codename__endswith="_revocation"))
    key: str = Token.objects.create(user=user).key
    return key


@pytest.mark.timeout(60)
@schema.parametrize()
@settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_api(case: schemathesis.Case[Any], daphne_url: str, admin_token: str) -> None:
    CALLS[f"{case.method} {case.path}"] += 1
    case.call_and_validate(
        base_url=daphne_url, headers={"Authorization": f"Token {admin_token}"}, checks=CHECKS, timeout=10
    )
