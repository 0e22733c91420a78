"""`qim_push_worker`: drain the offline push outbox, once or until SIGTERM/SIGINT."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from qim.models import PushTask
from qim.push.metrics import serve_metrics
from qim.push.senders import load_sender
from qim.push.worker import Tally, drain, run_forever

logger = logging.getLogger(__name__)
WORKER_ID_MAX = PushTask._meta.get_field("claimed_by").max_length or 64


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"[-WORKER_ID_MAX:]


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGTERM or SIGINT, so the current send finishes before we exit."""
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():  # only it may set handlers
        previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def logging_stats(worker_id: str, report: Callable[[], dict] | None, interval_s: float) -> Iterator[None]:
    """Log the sender's per-provider counters as one INFO line of JSON every `interval_s`
    and once at exit (nothing when the sender keeps none)."""
    if report is None:
        yield
        return
    done = threading.Event()

    def log_line() -> None:
        line = {"event": "push_worker_stats", "worker_id": worker_id, "providers": report()}
        logger.info("%s", json.dumps(line, sort_keys=True))

    def loop() -> None:
        while not done.wait(max(interval_s, 0.01)):
            log_line()

    thread = threading.Thread(target=loop, name="push-stats", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        log_line()


@contextmanager
def serving_metrics(tally: Tally) -> Iterator[None]:
    """The outbox's /metrics on QIM_WORKER_METRICS_PORT while the worker runs (none when 0)."""
    if not settings.QIM_WORKER_METRICS_PORT:
        yield
        return
    bind, port = settings.QIM_WORKER_METRICS_BIND, settings.QIM_WORKER_METRICS_PORT
    try:
        server = serve_metrics(bind, port, settings.QIM_METRICS_TOKEN, tally)
    except OSError as error:  # taken, or an address this host does not have
        raise CommandError(f"cannot serve metrics on {bind}:{port} (QIM_WORKER_METRICS_*): {error}") from None
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


class Command(BaseCommand):
    help = (
        "Send pending offline pushes through settings.QIM_PUSH_SENDER. Runs until SIGTERM/SIGINT; "
        "with --once, drains what is due and prints one JSON line {sent, failed, retried, providers}."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--once", action="store_true", help="drain what is due, then exit")
        parser.add_argument("--batch", type=int, default=100, help="tasks claimed per round")
        parser.add_argument("--idle-sleep", type=float, default=1.0, help="seconds to sleep when idle")
        parser.add_argument(
            "--horizon",
            type=float,
            default=0.0,
            help="with --once: also wait for tasks (retries, expiring claims) claimable within S seconds",
        )
        parser.add_argument("--worker-id", default="", help="claim owner name (default hostname:pid)")

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        if options["batch"] < 1:
            raise CommandError("--batch must be at least 1")
        worker_id = options["worker_id"] or default_worker_id()
        if len(worker_id) > WORKER_ID_MAX:
            raise CommandError(f"--worker-id is longer than {WORKER_ID_MAX} characters")
        sender = load_sender()
        # A sender that counts per provider (push_providers' ProviderSender) says so by a
        # report(); the core names no provider.
        providers = getattr(sender, "report", None)
        with stop_on_signals() as stop:
            if options["once"]:
                tally = drain(worker_id, sender, options["batch"], options["horizon"], stop_event=stop)
            else:
                tally = Tally()
                with logging_stats(worker_id, providers, settings.QIM_PUSH_STATS_INTERVAL_S), serving_metrics(tally):
                    run_forever(worker_id, sender, options["idle_sleep"], stop, options["batch"], tally=tally)
        result: dict[str, object] = dict(tally.report())
        if providers is not None:
            result["providers"] = providers()
        self.stdout.write(json.dumps(result))
