"""GET / : the web client's page (clients/web), whose scripts and styles are static files, and
GET /sw.js : its service worker, which must be served from the root for its scope to be `/`."""

from __future__ import annotations

from django.conf import settings
from django.contrib.staticfiles.storage import staticfiles_storage
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.views.decorators.csrf import csrf_exempt

# The page runs only its own files and talks only to this server (REST and /ws/v1; CSP 3's
# 'self' covers the same host's ws:/wss:), so an injected script or beacon has nowhere to go.
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
# The worker only shows notifications and opens windows: it loads and fetches nothing.
WORKER_CSP = "default-src 'none'"
NOT_BUILT = "the web client is not built: run `make web`, then `manage.py collectstatic`"


@csrf_exempt  # it changes nothing: any other method answers 405 {code, message}
def index(request: HttpRequest) -> HttpResponse:
    """The page only links hashed static files. Until clients/web is built and collected
    (`make run` does both) it answers a JSON error saying so, never a 500."""
    if request.method not in ("GET", "HEAD"):
        return _not_allowed(request)
    if not (settings.WEB_CLIENT_DIST / "app.js").is_file():
        return JsonResponse({"code": "not_found", "message": NOT_BUILT}, status=404)
    try:
        page = render_to_string("web/index.html", request=request)
    except ValueError:  # the manifest has no entry for app.js: collectstatic has not run since
        return JsonResponse({"code": "unavailable", "message": NOT_BUILT}, status=503)
    response = HttpResponse(page)
    response["Content-Security-Policy"] = PAGE_CSP
    return response


@csrf_exempt  # as index
def service_worker(request: HttpRequest) -> HttpResponse:
    """The collected sw.js under a fixed root path: a worker's scope can be no wider than its
    script's directory, and a hashed /static/ name would make every build a new worker.
    no-cache, so a browser checks for a new build each time it looks for updates."""
    if request.method not in ("GET", "HEAD"):
        return _not_allowed(request)
    try:
        with staticfiles_storage.open("web/sw.js") as script:
            body = script.read()
    except FileNotFoundError:
        return JsonResponse({"code": "not_found", "message": NOT_BUILT}, status=404)
    response = HttpResponse(body, content_type="text/javascript; charset=utf-8")
    response["Service-Worker-Allowed"] = "/"
    response["Cache-Control"] = "no-cache"
    response["Content-Security-Policy"] = WORKER_CSP
    return response


def _not_allowed(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"code": "method_not_allowed", "message": f"{request.method} {request.path} is not allowed"},
                        status=405)
