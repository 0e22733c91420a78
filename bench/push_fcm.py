"""Sends per second of one `qim_push_worker` through FCM HTTP v1 against the local FCM stand-in
(tests/harness/push_standins/fcm.py: HTTP/2 over TLS, OAuth2 token endpoint), side by side
with LogSender in the same run, on one SQLite database.

    python bench/push_fcm.py [--tasks N] [--quick] [--sends N] [--idle-sleep S]

Each case seeds N message tasks for N Android devices and times the worker's drain (batches
of 100, as `qim_push_worker --once` runs it) inside one process, Django's start excluded. The stand-in runs in a process of its
own. LogSender's line is at INFO, below the workers' WARNING level here: it measures the
outbox alone. Closed loop: one request at a time, as the worker sends.

Then the end-to-end latency: a daphne node, a worker in forever mode (--idle-sleep, 1 s by
default as in production), alice SENDs to a group whose other member has only an Android
device, offline; from just before the SEND to the stand-in accepting that message
(conversation_seq matched), one SEND at a time, each after a random pause within the idle
sleep (as messages come at random times; right after a push the worker has just gone idle).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from pathlib import Path

from common import bootstrap, emit, mean, percentile, populate, print_table, start_node, work_directory
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

    class Recording(FcmStandIn):
        """Appends (conversation_seq, wall time) per accepted message, for the latency case."""

        def send(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            answer = super().send(*args, **kwargs)
            if answer.status == 200:
                data = self.received[-1].message.get("data", {})
                with open(directory / "arrivals.jsonl", "a") as fh:
                    fh.write(json.dumps({"conversation_id": data.get("conversation_id"),
                                         "seq": data.get("conversation_seq"), "at": time.time()}) + "\n")
            return answer

    tls = make_tls_files(directory)
    app = Recording()
    with serving(app, tls=tls) as base_url:
        app.base_url = base_url
        (directory / "account.json").write_text(json.dumps(app.new_service_account("qim-bench")))
        (directory / "standin.json").write_text(json.dumps({"base_url": base_url, "ca": str(tls.cert)}))
        print("ready", flush=True)
        sys.stdin.read()
    print(json.dumps({"received": len(app.received), "refused": len(app.refused),
                      "refusals": [[status, reason] for status, reason, _ in app.refused],
                      "token_requests": len(app.token_requests)}), flush=True)


DRAIN = """
import json, time
from qim.push.senders import load_sender
from qim.push.worker import drain
sender = load_sender()
started = time.perf_counter()
tally = drain("bench", sender, 100, 0.0)
from qim.models import PushTask
errors = list(PushTask.objects.exclude(last_error="").values_list("last_error", flat=True)[:5])
print(json.dumps({**tally.report(), "seconds": time.perf_counter() - started, "errors": errors}))
"""


def run_case(name: str, env: dict[str, str], tasks: int) -> dict:
    """Seed, then drain in one process, timing the drain alone (not Django's start)."""
    manage(env, "shell", "-c", SEED.format(tasks=tasks))
    report = last_json_line(manage(env, "shell", "-c", DRAIN, timeout=600))
    assert report["sent"] == tasks, report
    drain_s = report["seconds"]
    if report["retried"] or report["failed"]:
        print(f"{name}: {report}", file=sys.stderr)
    return {"sender": name, "tasks": tasks, "retried": report["retried"], "drain_s": round(drain_s, 3), "sends_per_s": round(tasks / drain_s, 1),
            "mean_ms_per_send": round(drain_s * 1000 / tasks, 3)}


def arrival_of(path: Path, conversation_id: str, seq: int, timeout_s: float = 60.0) -> float:
    """When the stand-in accepted the push of that message (wall time)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            for line in path.read_text().splitlines():
                row = json.loads(line)
                if (row["conversation_id"], row["seq"]) == (conversation_id, str(seq)):
                    return row["at"]
        time.sleep(0.002)
    raise TimeoutError(f"message {seq} never reached the stand-in")


async def send_and_wait(node, tokens: dict, arrivals: Path, sends: int, idle_sleep: float) -> list[float]:  # type: ignore[no-untyped-def]
    from qimclient import QimClient

    [alice, bob] = sorted(tokens["users"])
    import httpx

    answer = httpx.post(f"{node.http_url}/api/v1/devices/populated/push", timeout=30,
                        headers={"Authorization": f"Token {tokens['users'][bob]}"},
                        json={"platform": "android", "push_token": "fcm-token-of-the-offline-member"})
    assert answer.status_code < 300, answer.text
    client = QimClient(node.ws_url, tokens["users"][alice], "populated", reconnect=False)
    await client.connect()
    latencies = []
    try:
        for i in range(-1, sends):  # -1: a warm-up, while the worker starts and gets its token
            # At a random point of the worker's idle sleep, as real messages come.
            await asyncio.sleep(random.uniform(0, idle_sleep))
            started = time.time()
            ack = await client.request("SEND", conversation_id=tokens["group"], client_msg_id=f"lat-{i}",
                                       content_type="text", payload={"text": f"latency {i}"})
            arrived = await asyncio.to_thread(arrival_of, arrivals, tokens["group"], ack["conversation_seq"])
            if i >= 0:
                latencies.append((arrived - started) * 1000)
    finally:
        await client.close()
    return latencies


def latency_case(work_dir: Path, template: Path, info: dict, sends: int, idle_sleep: float) -> dict:
    db = sqlite_database(template, work_dir, "latency")
    fcm_env = {"QIM_FCM_ENDPOINT": info["base_url"], "QIM_PUSH_CA_FILE": info["ca"],
               "QIM_FCM_SERVICE_ACCOUNT_FILE": str(work_dir / "standin" / "account.json")}
    node = start_node(db, work_dir, "latency")
    bootstrap(node)
    tokens = populate(node, 2, work_dir / "tokens.json", group="latency", members=2)
    worker = subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "qim_push_worker", "--idle-sleep", str(idle_sleep)],
        env=process_env({**node.env, **fcm_env}), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        latencies = asyncio.run(send_and_wait(node, tokens, work_dir / "standin" / "arrivals.jsonl", sends, idle_sleep))
    finally:
        worker.terminate()
        worker.communicate(timeout=60)
        node.stop()
    return {"sends": sends, "idle_sleep_s": idle_sleep, "mean_ms": round(mean(latencies), 1),
            "p50_ms": round(percentile(latencies, 50), 1), "p95_ms": round(percentile(latencies, 95), 1),
            "max_ms": round(max(latencies), 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="500 tasks")
    parser.add_argument("--sends", type=int, default=40, help="latency case: SENDs, one at a time")
    parser.add_argument("--idle-sleep", type=float, default=1.0, help="latency case: the worker's --idle-sleep")
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
            latency = latency_case(work_dir, template, info, 10 if args.quick else args.sends, args.idle_sleep)
        finally:
            out, _ = standin.communicate(input="", timeout=60)
    seen = last_json_line(out)
    # At least once: hypercorn closes an HTTP/2 connection after 1 000 requests (as Google's
    # front ends recycle theirs); a request caught in that is retried by the outbox, and may
    # have been accepted already (a duplicate, which the collapse key and tag make replace
    # the notification on the phone rather than add one).
    assert seen["received"] >= tasks + latency["sends"] + 1, seen
    print_table("one qim_push_worker, SQLite, closed loop", list(rows[0]), [list(r.values()) for r in rows])
    print_table("SEND -> accepted by the local FCM, worker in forever mode", list(latency), [list(latency.values())])
    emit({"bench": "push_fcm", "cases": rows, "latency": latency, "standin": seen})


if __name__ == "__main__":
    main()
