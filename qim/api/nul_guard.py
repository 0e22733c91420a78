"""A request whose path or query string holds NUL answers 400 `{code, message}` before any
view runs: PostgreSQL stores no NUL, and ids in URLs go straight into queries (on it, such a
path was a 500 with a traceback, issue #17). JSON bodies are covered by DRF's CharField, which
refuses NUL, and frames by qim/gateway/inbound.py."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote

from django.http import HttpRequest, HttpResponse, JsonResponse


class RefuseNulMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        query = request.META.get("QUERY_STRING", "")
        if "\x00" in request.path or ("%00" in query and "\x00" in unquote(query)):
            return JsonResponse(
                {"code": "bad_request", "message": "a URL may not hold NUL (%00)"}, status=400
            )
        return self.get_response(request)
