"""APNs push throughput: how many pushes a second one `qim_push_worker` sends to the local APNs
stand-in (HTTP/2 over TLS, ES256 JWT checked per request), side by side with LogSender.

    python bench/push_apns.py [--tasks N] [--rounds R]

Each run seeds N message PushTasks for iOS devices into a fresh embedded (SQLite) database
and runs one `qim_push_worker --once` process over them; the rate is read from the tasks'
`sent_at_ms` (when each send started), first to last, so the worker's start-up is not in it:
claim, send and settle are. The stand-in runs in this process, so it shares the machine's cores
with the worker: a real APNs would cost the worker less.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from common import REPO, emit, last_json_line, make_sqlite_template, manage, print_table, process_env
from common import sqlite_database, work_directory
from tests.harness.asgi_server import serving
from tests.harness.push_standins.apns import ApnsStandIn, new_signing_key
from tests.harness.tls import make_tls_files

KEY_ID, TEAM_ID, BUNDLE = "BENCHKEY01", "BENCHTEAM1", "com.example.qim.bench"

SEED = """
import secrets
from qim.actions.accounts import do_populate_users
from qim.clock import now_ms
from qim.models import Device, PushTask, Tenant
tenant = Tenant.objects.create(name="bench")
do_populate_users(tenant, 50, "pw", "iphone")
for device in Device.objects.all():
    device.push_platform, device.push_token = "ios", secrets.token_hex(32)
    device.save()
devices = list(Device.objects.select_related("user").order_by("id"))
now = now_ms()
PushTask.objects.bulk_create(
    PushTask(tenant=tenant, user=devices[i % 50].user, device=devices[i % 50], available_at_ms=now,
             created_at_ms=now, payload={{"conversation_id": "c-%d" % (i % 50), "conversation_seq": i + 1,
             "sender_id": "u000001", "preview": "bench message %d" % i, "badge": 1}})
    for i in range({tasks})
)
"""


def run_worker(env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "qim_push_worker", "--once", "--batch", "100"],
        env=process_env(env), cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"worker failed:\n{done.stdout}\n{done.stderr}")
    return last_json_line(done.stdout)


def one_run(template: Path, work: Path, name: str, tasks: int, sender_env: dict[str, str]) -> float:
    """Sends per second of one worker over `tasks` tasks."""
    db = sqlite_database(template, work, name)
    env = {**db.env, "QIM_VAR_DIR": str(work), **sender_env}
    manage(env, "shell", "-c", SEED.format(tasks=tasks))
    report = run_worker(env)
    if report["sent"] != tasks:
        raise RuntimeError(f"{name}: sent {report['sent']} of {tasks}: {report}")
    [(first_ms, last_ms)] = db.query("SELECT min(sent_at_ms), max(sent_at_ms) FROM qim_pushtask")
    return (tasks - 1) * 1000 / max(last_ms - first_ms, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    private, public = new_signing_key()
    standin = ApnsStandIn(public, KEY_ID, TEAM_ID, BUNDLE)
    with work_directory() as work:
        key_file = work / "AuthKey.p8"
        key_file.write_text(private)
        template = make_sqlite_template(work)
        with serving(standin, tls=make_tls_files(work / "tls")) as url:
            senders = {
                "log": {"QIM_PUSH_SENDER": "qim.push.senders.LogSender", "QIM_LOG_LEVEL": "WARNING"},
                "apns": {
                    "QIM_APNS_KEY_FILE": str(key_file), "QIM_APNS_KEY_ID": KEY_ID, "QIM_APNS_TEAM_ID": TEAM_ID,
                    "QIM_APNS_BUNDLE_ID": BUNDLE, "QIM_APNS_ENDPOINT": url,
                    "QIM_PUSH_CA_FILE": str(work / "tls" / "standin-cert.pem"), "QIM_LOG_LEVEL": "WARNING",
                },
            }
            rates: dict[str, list[float]] = {name: [] for name in senders}
            for round_ in range(args.rounds):  # alternated, so a slow minute falls on both
                for name, sender_env in senders.items():
                    rates[name].append(one_run(template, work, f"{name}{round_}", args.tasks, sender_env))
    accepted = len(standin.accepted)
    rows = [[name, args.tasks, f"{statistics.median(r):.0f}", " ".join(f"{x:.0f}" for x in r)] for name, r in rates.items()]
    print_table("pushes per second, one worker (median of rounds)", ["sender", "tasks", "sends/s", "rounds"], rows)
    emit({
        "bench": "push_apns", "tasks": args.tasks, "rounds": args.rounds, "apns_accepted": accepted,
        "sends_per_s": {name: statistics.median(r) for name, r in rates.items()},
        "ratios": {"apns_vs_log": statistics.median(rates["apns"]) / statistics.median(rates["log"])},
    })


if __name__ == "__main__":
    main()
