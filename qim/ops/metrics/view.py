"""GET /metrics on every node: the Prometheus text format (or OpenMetrics, when the scraper
asks for it), behind the scraper guard (qim/ops/metrics/guard.py)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from prometheus_client.exposition import choose_encoder

from qim.ops.metrics.collector import declare_known_labels
from qim.ops.metrics.guard import check_scraper
from qim.infra.instruments import REGISTRY


@csrf_exempt  # a POST answers our 405, not a CSRF page
async def metrics(request: HttpRequest) -> HttpResponse:
    """Async on purpose: the collector reads the node's in-memory state on the event loop that
    changes it, never from a thread."""
    if request.method not in ("GET", "HEAD"):
        return JsonResponse(
            {"code": "method_not_allowed", "message": f"{request.method} is not allowed on /metrics"},
            status=405, headers={"Allow": "GET, HEAD"},
        )
    refusal = check_scraper(settings.QIM_METRICS_TOKEN, request.META)
    if refusal is not None:
        headers = {"WWW-Authenticate": 'Bearer realm="qim-metrics"'} if refusal.status == 401 else None
        return JsonResponse({"code": refusal.code, "message": refusal.message}, status=refusal.status, headers=headers)
    declare_known_labels()
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encode(REGISTRY), content_type=content_type)
