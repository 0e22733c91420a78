"""Every REST error is `{code, message}` with a fitting status (protocol.md §3, §10)."""

from __future__ import annotations

import logging
import math

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from qim.infra.db_outage import MESSAGE as UNAVAILABLE_MESSAGE
from qim.infra.db_outage import RETRY_AFTER_MS, is_database_unavailable
from qim.errors import Refused
from qim.infra.outage import outage_of

logger = logging.getLogger(__name__)


class ApiError(exceptions.APIException):
    """Raised by views with one of our codes (`conflict`, `forbidden`, ...)."""

    def __init__(self, code: str, message: str, status_code: int) -> None:
        super().__init__(detail=message, code=code)
        self.status_code = status_code
        self.qim_code = code


_CODES_BY_EXCEPTION: list[tuple[type[Exception], str]] = [
    (exceptions.NotAuthenticated, "unauthenticated"),
    (exceptions.AuthenticationFailed, "unauthenticated"),
    (exceptions.PermissionDenied, "forbidden"),
    (exceptions.NotFound, "not_found"),
    (exceptions.ValidationError, "bad_request"),
    (exceptions.ParseError, "bad_request"),
    (exceptions.UnsupportedMediaType, "bad_request"),
    (exceptions.MethodNotAllowed, "method_not_allowed"),
    (exceptions.Throttled, "rate_limited"),
    (exceptions.NotAcceptable, "not_acceptable"),
]


def _message(detail) -> str:  # type: ignore[no-untyped-def]
    if isinstance(detail, dict):
        return "; ".join(f"{field}: {_message(value)}" for field, value in detail.items())
    if isinstance(detail, list):
        return " ".join(_message(item) for item in detail)
    return str(detail)


def exception_handler(exc, context):  # type: ignore[no-untyped-def]
    if isinstance(exc, Refused):
        body = {"code": exc.code, "message": exc.message}
        headers = None
        if exc.retry_after_ms is not None:
            body["retry_after_ms"] = exc.retry_after_ms
            headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after_ms / 1000)))}
        return Response(body, status=exc.http_status, headers=headers)
    if isinstance(exc, SuspiciousOperation):
        return _refused_request(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        unavailable = _unavailable(exc, context)
        if unavailable is not None:
            return unavailable
        logger.exception("unhandled error in %s", context.get("view"), exc_info=exc)
        return Response(
            {"code": "internal", "message": "internal server error"},
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    code = getattr(exc, "qim_code", None)
    if code is None:
        code = next((c for cls, c in _CODES_BY_EXCEPTION if isinstance(exc, cls)), "error")
    body = {"code": code, "message": _message(getattr(exc, "detail", str(exc)))}
    if isinstance(exc, exceptions.ValidationError):
        body["fields"] = exc.detail
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        body["retry_after_ms"] = int(exc.wait * 1000)
    response.data = body
    return response


def _unavailable(exc, context) -> Response | None:  # type: ignore[no-untyped-def]
    """503 `unavailable` for an outage (the database away, Redis unreachable): not a bug, one
    WARNING line, and the client retries after `retry_after_ms`; None for anything else."""
    if is_database_unavailable(exc):
        logger.warning("%s: database unavailable (%s)", context.get("view"), str(exc).strip().splitlines()[0])
        message = UNAVAILABLE_MESSAGE
    elif outage_of(exc) is not None:
        logger.warning("%s refused: Redis unreachable (%s)", context.get("view"), outage_of(exc))
        message = "Redis is unreachable; retry later"
    else:
        return None
    return Response(
        {"code": "unavailable", "message": message, "retry_after_ms": RETRY_AFTER_MS},
        status=status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": str(math.ceil(RETRY_AFTER_MS / 1000))},
    )


def _refused_request(exc: SuspiciousOperation) -> Response:
    """Django refuses a request it will not read (too big, too many fields, a bad header):
    the client's fault, answered like any other bad request and logged without a traceback."""
    if isinstance(exc, RequestDataTooBig):
        return Response({"code": "too_large", "message": "request body too large"}, status=413)
    return Response({"code": "bad_request", "message": f"request refused: {exc}"}, status=400)


def json_not_found(request, exception=None):  # type: ignore[no-untyped-def]
    return JsonResponse({"code": "not_found", "message": "no such path"}, status=404)


def json_bad_request(request, exception=None):  # type: ignore[no-untyped-def]
    # Django answers here for a disallowed Host header, before any view runs.
    return JsonResponse({"code": "bad_request", "message": "bad request (is the Host allowed?)"}, status=400)


def json_server_error(request):  # type: ignore[no-untyped-def]
    return JsonResponse({"code": "internal", "message": "internal server error"}, status=500)
