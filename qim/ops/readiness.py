"""GET /api/v1/ready: whether this node can serve, its database and Redis each answering within
QIM_READY_TIMEOUT_S, for a load balancer's readiness probe. /api/v1/health stays the liveness
probe: it checks nothing, so a node is not restarted because its database is away."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from redis.exceptions import TimeoutError as RedisTimeoutError

from qim.infra.db_outage import RETRY_AFTER_MS
from qim.node.connection_node import get_node
from qim.infra.redis_client import probe_client, redis_configured, redis_passwords

logger = logging.getLogger(__name__)

# One thread of its own, and one check at a time in it: a database that hangs (rather than
# refuses) holds that thread, and later probes wait on the same check instead of piling up
# threads, or taking the frame handlers' ones.
_db_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qim-ready-db")
_db_check: Future[None] | None = None
# Each check's last outcome, so the log says when it changes rather than at every probe.
_last_ok: dict[str, bool] = {}


def _ping_database() -> None:
    # A connection an outage broke is found and replaced here (CONN_HEALTH_CHECKS).
    close_old_connections()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:
        with suppress(Exception):
            connection.close()
        raise


async def check_database() -> None:
    global _db_check
    if _db_check is None or _db_check.done():
        _db_check = _db_thread.submit(_ping_database)
    await asyncio.wrap_future(_db_check)


async def check_redis() -> None:
    """A connection of its own, without the pool's retries: the probe answers for this
    moment, and never waits behind the node's own traffic for a pooled connection."""
    timeout = settings.QIM_READY_TIMEOUT_S
    client = probe_client(timeout)
    try:
        await client.ping()
    finally:
        with suppress(Exception):
            await client.aclose()


def checks() -> dict[str, Callable[[], Awaitable[None]]]:
    """What this node depends on: the database always, Redis when configured."""
    found: dict[str, Callable[[], Awaitable[None]]] = {"database": check_database}
    if redis_configured():
        found["redis"] = check_redis
    return found


async def run_check(name: str, check: Callable[[], Awaitable[None]]) -> dict[str, Any]:
    """{"ok": true, "ms": ...} or {"ok": false, "error": "timeout" | "failed", "detail": ...}:
    the detail names the exception's class only (its message may name hosts; the log has it)."""
    timeout = settings.QIM_READY_TIMEOUT_S
    started = time.monotonic()
    try:
        await asyncio.wait_for(check(), timeout)
        result: dict[str, Any] = {"ok": True, "ms": round((time.monotonic() - started) * 1000, 1)}
        why = ""
    except (TimeoutError, RedisTimeoutError):
        result = {"ok": False, "error": "timeout", "detail": f"no answer within {timeout:g} s"}
        why = result["detail"]
    except Exception as exc:
        result = {"ok": False, "error": "failed", "detail": type(exc).__name__}
        why = f"{type(exc).__name__}: {_first_line(exc)}"
    _log_change(name, result["ok"], why)
    return result


def _log_change(name: str, ok: bool, why: str) -> None:
    if _last_ok.get(name, True) != ok:
        if ok:
            logger.info("readiness: %s answers again", name)
        else:
            logger.warning("readiness: %s check failed: %s", name, scrubbed(why))
    _last_ok[name] = ok


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def scrubbed(text: str) -> str:
    """`text` without the database's or Redis's password, should a driver's message hold one."""
    for secret in (settings.DATABASES["default"].get("PASSWORD"), *redis_passwords()):
        if secret:
            text = text.replace(secret, "***")
    return text


@csrf_exempt  # answers every method, a 405 included, as {code, message}; it changes nothing
async def ready(request: HttpRequest) -> JsonResponse:
    """200 {"status": "ready", checks} or 503 {code: unavailable, message, checks}; no auth (a
    probe), and nothing in it a stranger could use: check names, outcomes, exception classes."""
    if request.method not in ("GET", "HEAD"):
        refusal = {"code": "method_not_allowed", "message": "GET only"}
        return JsonResponse(refusal, status=405, headers={"Allow": "GET, HEAD"})
    found = checks()
    results = dict(zip(found, await asyncio.gather(*(run_check(name, check) for name, check in found.items()))))
    node_id = get_node().node_id
    failed = [name for name, result in results.items() if not result["ok"]]
    if not failed:
        return JsonResponse({"status": "ready", "node_id": node_id, "checks": results})
    answer = {
        "code": "unavailable", "message": f"not ready: {', '.join(failed)} failed",
        "retry_after_ms": RETRY_AFTER_MS, "status": "not_ready", "node_id": node_id,
        "failed": failed, "checks": results,
    }
    response = JsonResponse(answer, status=503, headers={"Retry-After": str(max(1, RETRY_AFTER_MS // 1000))})
    # Django logs every 5xx as an ERROR (django.request): a probe every few seconds would log
    # one each time; our WARNING when a check starts failing says it once (Django's own flag).
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response
