"""REST fuzzing (issue #17) with schemathesis, from the live node's own OpenAPI schema:
positive and negative cases for every operation, as a tenant admin, as a plain user, with an
unknown token and without one. No 5xx, every error body `{code, message}`, every answer
(status, content type, body, headers) as the schema declares it, no traceback logged."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import QimDeployment
from tests.fuzz.deploy import start_node
from tests.fuzz.wire import LogWatch

EXAMPLES_PER_OPERATION = 12
CHECKS = [
    not_a_server_error, status_code_conformance, content_type_conformance,
    response_schema_conformance, response_headers_conformance,
]
# Operations whose schema takes no input at all: negative cases cannot be made for them.
NO_INPUT = {"GET /api/v1/health", "GET /api/v1/ready", "GET /api/v1/node", "GET /api/v1/rtc/ice-servers", "GET /api/v1/tenant/settings"}
# Logging out with a token the other operations use would revoke it for the rest of the module:
# fuzzed only without a valid token here; tests/core/test_credentials_*.py test it with one.
REVOKES_OWN_TOKEN = {"DELETE /api/v1/auth/token"}


@dataclass
class RestTarget:
    deployment: QimDeployment
    schema: Any
    tokens: dict[str, str | None]
    log: LogWatch
    requests: dict[str, int] = field(default_factory=dict)


BACKEND = "sqlite"  # tests/fuzz/test_rest_fuzz_postgres.py runs these tests on PostgreSQL


@pytest.fixture(scope="module")
def rest(request: pytest.FixtureRequest) -> Iterator[RestTarget]:
    deployment = start_node(request)
    acme = deployment.tenants["acme"]
    tokens = {
        "admin": acme.admin_token, "user": acme.persona("fuzzy").token(), "none": None,
        "bad": "0" * 40,  # shaped like a token, issued to nobody
    }
    schema = schemathesis.openapi.from_url(f"{deployment.node.http_url}/api/v1/schema/")
    target = RestTarget(deployment, schema, tokens, LogWatch(deployment.node.log_path))
    yield target
    print(f"\nREST fuzz ({request.module.BACKEND}): {target.requests} total {sum(target.requests.values())}")
    deployment.stop()


def check_error_body(response: Any) -> None:
    """protocol.md §13.2: every error is a JSON object with string `code` and `message`."""
    if response.status_code < 400:
        return
    body = json.loads(response.content)
    assert isinstance(body, dict), body
    assert isinstance(body.get("code"), str) and body["code"], body
    assert isinstance(body.get("message"), str) and body["message"], body


def fuzz_operation(target: RestTarget, operation: Any, mode: GenerationMode, who: str) -> None:
    token = target.tokens[who]
    headers = {"Authorization": f"Token {token}"} if token else {}
    checks = CHECKS + ([ignored_auth] if token else [])
    key = f"{mode.value}/{who}"

    @settings(
        max_examples=EXAMPLES_PER_OPERATION, derandomize=True, database=None, deadline=None, print_blob=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case: Any) -> None:
        if not token and case.headers:
            case.headers.pop("Authorization", None)
        response = case.call(base_url=target.deployment.node.http_url, headers=headers, timeout=30)
        target.requests[key] = target.requests.get(key, 0) + 1
        case.validate_response(response, checks=checks, headers=headers)
        check_error_body(response)

    fuzz()


@pytest.mark.parametrize("who", ["admin", "user", "none", "bad"])
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["positive", "negative"])
def test_every_operation_answers_as_its_schema_says(rest: RestTarget, mode: GenerationMode, who: str) -> None:
    failures = []
    operations = [result.ok() for result in rest.schema.get_all_operations()]
    assert len(operations) >= 20, [op.label for op in operations]
    for operation in operations:
        if mode is GenerationMode.NEGATIVE and operation.label in NO_INPUT:
            continue
        if who in ("admin", "user") and operation.label in REVOKES_OWN_TOKEN:
            continue
        try:
            fuzz_operation(rest, operation, mode, who)
        except BaseException as exc:  # a failure group from schemathesis, or an assertion
            if isinstance(exc, KeyboardInterrupt):
                raise
            failures.append(f"{operation.label}: {exc}")
    rest.log.assert_clean()
    assert not failures, "\n\n".join(failures)


def test_unauthenticated_calls_answer_401_everywhere(rest: RestTarget) -> None:
    """Every operation that needs a token answers 401 `unauthenticated` without one (the
    registry answered 500: its permission read request.user before anyone checked it)."""
    operations = [result.ok() for result in rest.schema.get_all_operations()]
    needing = [op for op in operations if any(requirement for requirement in op.definition.raw.get("security", []))]
    assert len(needing) >= 15
    for operation in needing:
        path = operation.path.replace("{", "").replace("}", "")
        response = httpx.request(operation.method.upper(), f"{rest.deployment.node.http_url}{path}", json={}, timeout=30)
        assert response.status_code == 401, (operation.label, response.text)
        assert response.json()["code"] == "unauthenticated", (operation.label, response.text)
    rest.log.assert_clean()


BIG_JSON = b'{"kind": "group", "member_user_ids": [], "title": "' + b"x" * 3_000_000 + b'"}'


@pytest.mark.parametrize(
    ("content_type", "body", "status", "code"),
    [
        ("application/json", b'{"kind": "group", ', 400, "bad_request"),
        ("application/json", b"[" * 5000 + b"]" * 5000, 400, "bad_request"),
        ("application/json", BIG_JSON, 413, "too_large"),
        ("multipart/form-data; boundary=x", b"--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--x--", 415, "bad_request"),
        ("multipart/form-data", b"no boundary at all", 415, "bad_request"),
        ("application/x-www-form-urlencoded", b"kind=group&" * 2000, 415, "bad_request"),
        ("text/plain", b"hello", 415, "bad_request"),
    ],
    ids=["truncated-json", "deep-json", "big-json", "multipart", "multipart-no-boundary", "form-too-many-fields", "text"],
)
def test_unreadable_bodies_answer_code_and_message(
    rest: RestTarget, content_type: str, body: bytes, status: int, code: str
) -> None:
    """Each was a 500 or a bare 400 from Twisted before issue #17's fixes."""
    response = httpx.post(
        f"{rest.deployment.node.http_url}/api/v1/conversations", content=body, timeout=30,
        headers={"Content-Type": content_type, "Authorization": f"Token {rest.tokens['user']}"},
    )
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"] == "application/json", response.headers
    assert response.json()["code"] == code and response.json()["message"], response.text
    rest.log.assert_clean()


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "rooms/a%00b", None, 400),
        ("GET", "registry/types/a%00b", None, 400),
        ("POST", "conversations/a%00b/members", {"user_ids": ["x"]}, 400),
        ("DELETE", "conversations/a%00b/members/c%00d", None, 400),
        ("POST", "devices/a%00b/push", {"platform": "ios", "push_token": "t"}, 400),
        ("GET", "registry/types?since_version=%00", None, 400),
        ("GET", "rooms/x?a%00=b", None, 400),
        ("POST", "rooms", {"room_id": "a\u0000b"}, 400),
        ("POST", "conversations", {"kind": "group", "title": "a\u0000b", "member_user_ids": []}, 400),
        ("GET", "rooms/%F0%9F%98%80", None, 404),
        ("GET", "registry/types?since_version=99999999999999999999999", None, 200),
    ],
    ids=["room", "type", "members", "member", "push", "since", "query", "room-body", "title", "emoji-room", "huge-since"],
)
def test_odd_ids_answer_an_error_not_a_crash(rest: RestTarget, method: str, path: str, body: Any, status: int) -> None:
    """NUL in a path, a query or a body (PostgreSQL stores none: a NUL in a path was a 500
    there), unicode ids, integers past 64 bits."""
    response = httpx.request(
        method, f"{rest.deployment.node.http_url}/api/v1/{path}", json=body, timeout=30,
        headers={"Authorization": f"Token {rest.tokens['admin']}"},
    )
    assert response.status_code == status, (response.status_code, response.text)
    check_error_body(response)
    rest.log.assert_clean()
