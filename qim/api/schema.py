"""The OpenAPI schema declares the error answers every view can give (protocol.md §13.2), so a
client generated from it, and the REST fuzzer (tests/fuzz/test_rest_fuzz.py), know their shape."""

from __future__ import annotations

from typing import Any

ERROR_COMPONENT = "Error"
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Every REST error (qim/api/errors.py).",
    "properties": {
        "code": {"type": "string", "description": "branch on this: bad_request, unauthenticated, ..."},
        "message": {"type": "string", "description": "for humans and logs"},
        "fields": {"type": "object", "description": "per-field messages of a validation error"},
        "retry_after_ms": {"type": "integer", "minimum": 0},
    },
    "required": ["code", "message"],
}

_DESCRIPTIONS = {
    "400": "bad_request: validation failed, malformed JSON",
    "401": "unauthenticated: no token, an unknown token, or a wrong login",
    "403": "forbidden",
    "404": "not_found: no such path, or no such id in the caller's tenant",
    "405": "method_not_allowed",
    "406": "not_acceptable: the answer is JSON",
    "409": "conflict",
    "413": "too_large: the request body is too large",
    "415": "bad_request: the body is not JSON",
}
_WRITES = {"post", "put", "patch", "delete"}


def error_statuses(method: str, operation: dict[str, Any]) -> list[str]:
    """The error statuses this operation can answer: any of them 400 (a bad query or header),
    401 (no token, or a wrong login at auth/token), 404 (another tenant's id), 405, 406."""
    statuses = ["400", "401", "403", "404", "405", "406"]
    if method in _WRITES:
        statuses.append("409")
    if "requestBody" in operation:
        statuses += ["413", "415"]
    return statuses


def add_error_responses(result: dict[str, Any], generator, request, public) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """drf-spectacular postprocessing hook: every operation answers errors as `Error`."""
    result.setdefault("components", {}).setdefault("schemas", {})[ERROR_COMPONENT] = ERROR_SCHEMA
    body = {"application/json": {"schema": {"$ref": f"#/components/schemas/{ERROR_COMPONENT}"}}}
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            for status in error_statuses(method, operation):
                responses.setdefault(status, {"description": _DESCRIPTIONS[status], "content": body})
    return result


READY_OPERATION: dict[str, Any] = {
    "operationId": "ready_retrieve",
    "description": "Readiness for load balancers and orchestrators (qim/ops/readiness.py): the database and "
                   "Redis each answer within QIM_READY_TIMEOUT_S. A plain async Django view, so "
                   "drf-spectacular cannot see it; declared here.",
    "tags": ["health"],
    "security": [{}],
    "responses": {
        "200": {"description": "ready", "content": {"application/json": {"schema": {
            "type": "object", "required": ["status", "node_id", "checks"],
            "properties": {"status": {"type": "string", "enum": ["ready"]}, "node_id": {"type": "string"},
                           "checks": {"type": "object", "additionalProperties": {"type": "object"}}}}}}},
        "503": {"description": "unavailable: a check failed (named in `failed`)", "content": {"application/json": {"schema": {
            "allOf": [{"$ref": f"#/components/schemas/{ERROR_COMPONENT}"}, {
                "type": "object", "properties": {"status": {"type": "string", "enum": ["not_ready"]},
                                                 "failed": {"type": "array", "items": {"type": "string"}},
                                                 "checks": {"type": "object"}}}]}}}},
    },
}


def add_plain_views(result: dict[str, Any], generator, request, public) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """drf-spectacular postprocessing hook: the endpoints outside DRF (GET /api/v1/ready)."""
    result.setdefault("paths", {}).setdefault("/api/v1/ready", {"get": READY_OPERATION})
    return result
