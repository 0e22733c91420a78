"""The push worker's own /metrics (QIM_WORKER_METRICS_PORT): the outbox by state and the age
of its oldest pending task, counted in the database at scrape time, so every worker reports
the same backlog whichever of them Prometheus asks. Same guard as the nodes' /metrics."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from wsgiref.simple_server import WSGIRequestHandler, make_server

from django.db import Error as DatabaseError
from django.db import connection
from django.db.models import Count, Min
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer

from qim.clock import now_ms as wall_clock_ms
from qim.ops.metrics.guard import check_scraper
from qim.ops.metrics.sources import gauge
from qim.models import PushTask
from qim.push.worker import Tally

logger = logging.getLogger(__name__)

STATES = (PushTask.PENDING, PushTask.SENT, PushTask.FAILED)


class OutboxCollector:
    """qim_push_tasks{state}, qim_push_tasks_due, qim_push_oldest_pending_age_seconds."""

    def __init__(self, clock: Callable[[], int] = wall_clock_ms) -> None:
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        try:
            by_state = dict(PushTask.objects.order_by().values_list("state").annotate(n=Count("id")))
            pending = PushTask.objects.filter(state=PushTask.PENDING)
            oldest = pending.aggregate(oldest=Min("created_at_ms"))["oldest"]
            due = pending.filter(available_at_ms__lte=now).count()
        except DatabaseError as error:
            logger.warning("push outbox metrics: database unavailable (%s)", str(error).strip().splitlines()[0])
            yield gauge("qim_push_outbox_readable", "1 when the last scrape could read the outbox.", 0)
            return
        finally:
            connection.close()  # each scrape runs on a thread of its own: keep no connection
        tasks = GaugeMetricFamily("qim_push_tasks", "Push outbox tasks, by state.", labels=["state"])
        for state in STATES:
            tasks.add_metric([state], by_state.get(state, 0))
        yield tasks
        yield gauge("qim_push_tasks_due", "Pending tasks due now (not held back by a retry's backoff).", due)
        age_s = max(0, now - oldest) / 1000 if oldest is not None else 0
        yield gauge("qim_push_oldest_pending_age_seconds", "Age of the oldest pending task (0: none).", age_s)
        yield gauge("qim_push_outbox_readable", "1 when the last scrape could read the outbox.", 1)


class TallyCollector:
    """qim_push_worker_tasks_total{outcome}: what THIS worker did since it started (sent,
    retried, failed, lost, released, pruned), beside the outbox every worker sees alike."""

    OUTCOMES = ("sent", "retried", "failed", "lost", "released", "pruned")

    def __init__(self, tally: Tally) -> None:
        self.tally = tally

    def collect(self) -> Iterator[Metric]:
        done = CounterMetricFamily("qim_push_worker_tasks", "Tasks this worker settled or let go, by outcome.",
                                   labels=["outcome"])
        for outcome in self.OUTCOMES:
            done.add_metric([outcome], getattr(self.tally, outcome))
        yield done


class _QuietHandler(WSGIRequestHandler):
    """No access line on stderr for every scrape."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def guarded_app(registry: CollectorRegistry, token: str) -> Callable[..., Iterable[bytes]]:
    """prometheus_client's WSGI app at /metrics only, behind the scraper guard."""
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:  # type: ignore[type-arg]
        refusal = check_scraper(token, environ)
        if environ.get("PATH_INFO") != "/metrics":
            status, code, message = "404 Not Found", "not_found", "only /metrics is served here"
        elif refusal is not None:
            status = f"{refusal.status} {'Unauthorized' if refusal.status == 401 else 'Forbidden'}"
            code, message = refusal.code, refusal.message
        else:
            return metrics_app(environ, start_response)
        start_response(status, [("Content-Type", "application/json")])
        return [json.dumps({"code": code, "message": message}).encode()]

    return app


def serve_metrics(bind: str, port: int, token: str, tally: Tally | None = None) -> ThreadingWSGIServer:
    """Start serving in a daemon thread; the caller shuts it down (`shutdown()`)."""
    registry = CollectorRegistry()
    registry.register(OutboxCollector())
    if tally is not None:
        registry.register(TallyCollector(tally))
    server = make_server(bind, port, guarded_app(registry, token), ThreadingWSGIServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="push-metrics", daemon=True).start()
    logger.info("push worker metrics on http://%s:%s/metrics", bind, server.server_port)
    return server
