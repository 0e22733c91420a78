"""The API docs pages (Swagger UI, Redoc), self-hosted (drf-spectacular-sidecar), under a
Content-Security-Policy that lets them load nothing from anywhere else: Redoc's footer has no
option to drop the logo it fetches from cdn.redoc.ly."""

from __future__ import annotations

from functools import wraps
from typing import Any, Callable

from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerView

DOCS_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'"
)


def self_hosted(view: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(view)
    def with_policy(request, *args, **kwargs):  # type: ignore[no-untyped-def]
        response = view(request, *args, **kwargs)
        response["Content-Security-Policy"] = DOCS_CSP
        return response

    return with_policy


swagger = self_hosted(SpectacularSwaggerView.as_view(url_name="schema"))
# Our template: drf-spectacular's without its Google Fonts links.
redoc = self_hosted(SpectacularRedocView.as_view(url_name="schema", template_name="qim/redoc.html"))
