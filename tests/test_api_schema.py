"""Property tests of the whole API against its own OpenAPI schema (schemathesis): for every
operation, requests generated from the schema (valid and invalid parameters, paths, bodies)
sent to a real server never get a 5xx. A user with every role sends them, over a store holding
every kind of call."""
from __future__ import annotations

import json

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from tests.test_api_strict import traffic

pytestmark = pytest.mark.django_db(transaction=True)


def api_schema() -> schemathesis.BaseSchema:
    """The schema /api/schema/ serves, generated in-process (no database needed)."""
    from drf_spectacular.generators import SchemaGenerator

    raw = SchemaGenerator().get_schema(request=None, public=True)
    return schemathesis.openapi.from_dict(json.loads(json.dumps(raw, default=str)))


schema = api_schema()


@pytest.fixture
def served(proxy):
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    server = proxy(None)
    traffic()
    user = User.objects.create_superuser("fuzz", "", "pw")
    return server.url, {"Authorization": f"Token {Token.objects.create(user=user).key}"}


@schema.parametrize()
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_it_never_answers_a_server_error(case, served):
    base_url, headers = served
    response = case.call(base_url=base_url, headers=headers, timeout=30)
    case.validate_response(response, checks=[not_a_server_error])
