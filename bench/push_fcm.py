"""Sends per second of one `qim_push_worker` through FCM HTTP v1 against the local FCM stand-in
(tests/harness/push_standins/fcm.py: HTTP/2 over TLS, OAuth2 token endpoint), side by side
with LogSender in the same run, on one SQLite database.

    python bench/push_fcm.py [--tasks N] [--quick]

Each case seeds N message tasks for N Android devices and times `qim_push_worker --once
--batch 100`; a worker run with nothing due, timed the same way, is subtracted (Django start
and the first claim), so the rate is the drain alone. The stand-in runs in a process of its
own. LogSender's line is at INFO, below the workers' WARNING level here: it measures the
outbox alone. Closed loop: one request at a time, as the worker sends.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from common import emit, print_table, work_directory
from tests.harness.qim_process import REPO, last_json_line, make_sqlite_template, manage, process_env, sqlite_database

SEED = """
import json
from qim.actions.accounts import do_populate_users
from qim.clock import now_ms
from qim.models import Device, PushTask, Tenant
tenant = Tenant.objects.get_or_create(name="bench")[0]
if not Device.objects.exists():
    do_populate_users(tenant, {tasks}, "pw", "pixel")
    for device in Device.objects.all():
        device.push_platform, device.push_token = "android", f"fcm-token-{{device.pk}}"
        device.save()
now = now_ms()
PushTask.objects.bulk_create(
    PushTask(tenant=tenant, user=d.user, device=d, available_at_ms=now, created_at_ms=now,
             payload={{"conversation_id": "01BENCH", "conversation_seq": d.pk, "sender_id": "u1",
                      "preview": "bench message " * 8, "badge": 1}})
    for d in Device.objects.select_related("user")
)
"""


def serve_standin(directory: Path) -> None:
    """Stand-in mode: serve until stdin closes; print how many messages FCM accepted."""
    from tests.harness.asgi_server import serving
    from tests.harness.push_standins.fcm import FcmStandIn
    from tests.harness.tls import make_tls_files

    tls = make_tls_files(directory)
    app = FcmStandIn()
    with serving(app, tls=tls) as base_url:
        app.base_url = base_url
        (directory / "account.json").write_text(json.dumps(app.new_service_account("qim-bench")))
        (directory / "standin.json").write_text(json.dumps({"base_url": base_url, "ca": str(tls.cert)}))
        print("ready", flush=True)
        sys.stdin.read()
    print(json.dumps({"received": len(app.received), "refused": len(app.refused),
                      "token_requests": len(app.token_requests)}), flush=True)


def timed_worker(env: dict[str, str]) -> tuple[float, dict]:
    started = time.perf_counter()
    out = manage(env, "qim_push_worker", "--once", "--batch", "100", timeout=600)
    return time.perf_counter() - started, last_json_line(out)


def run_case(name: str, env: dict[str, str], tasks: int) -> dict:
    idle_s, _ = timed_worker(env)
    manage(env, "shell", "-c", SEED.format(tasks=tasks))
    busy_s, report = timed_worker(env)
    assert report["sent"] == tasks, report
    drain_s = max(busy_s - idle_s, 1e-6)
    return {"sender": name, "tasks": tasks, "drain_s": round(drain_s, 3), "sends_per_s": round(tasks / drain_s, 1),
            "mean_ms_per_send": round(drain_s * 1000 / tasks, 3)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="500 tasks")
    parser.add_argument("--standin", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.standin:
        return serve_standin(args.standin)
    tasks = 500 if args.quick else args.tasks
    with work_directory() as work_dir:
        template = make_sqlite_template(work_dir)
        standin = subprocess.Popen([sys.executable, __file__, "--standin", str(work_dir / "standin")], cwd=REPO,
                                   env=process_env({}), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert standin.stdout is not None and standin.stdout.readline().strip() == "ready"
            info = json.loads((work_dir / "standin" / "standin.json").read_text())
            base = {"QIM_VAR_DIR": str(work_dir)}
            log_db, fcm_db = (sqlite_database(template, work_dir, n) for n in ("log", "fcm"))
            rows = [
                run_case("LogSender", {**base, **log_db.env, "QIM_PUSH_SENDER": "qim.push.senders.LogSender"}, tasks),
                run_case("FCM (ProviderSender)", {
                    **base, **fcm_db.env, "QIM_FCM_ENDPOINT": info["base_url"], "QIM_PUSH_CA_FILE": info["ca"],
                    "QIM_FCM_SERVICE_ACCOUNT_FILE": str(work_dir / "standin" / "account.json"),
                }, tasks),
            ]
        finally:
            out, _ = standin.communicate(input="", timeout=60)
    seen = last_json_line(out)
    assert seen["received"] == tasks and seen["refused"] == 0, seen
    print_table("one qim_push_worker, SQLite, closed loop", list(rows[0]), [list(r.values()) for r in rows])
    emit({"bench": "push_fcm", "cases": rows, "standin": seen})


if __name__ == "__main__":
    main()
