"""Push senders: how fast one `qim_push_worker` drains Web Push tasks against the local Web
Push stand-in, side by side with LogSender in the same run, and the latency from SEND to the
push decrypted at the stand-in with the worker in forever mode.

    python bench/push_senders.py [--quick] [--tasks N] [--sends M]

Throughput: N tasks (--quick 200, else 2 000) queued for N web devices in a fresh SQLite
database, then one `qim_push_worker --once` drains them: through WebPushSender (VAPID JWT,
aes128gcm encryption, one HTTP/1.1 POST on a kept-alive connection per push, the stand-in
verifying and decrypting in this process), then, on a second database with the same tasks,
through LogSender. sends/s = (N - 1) / (last task's sent_at_ms - first's): the worker's
sending alone, without Django's start-up. Latency: one node, alice SENDs to bob
whose only device is a browser subscribed at the stand-in and offline, M times (--quick 50,
else 300) one after the other; each latency is SEND to the stand-in having decrypted that
conversation_seq (the per-user message rate raised: we time the push path, not the
limiter). The worker polls with --idle-sleep 0.02 (its default, 1 s, adds up to 1 s).
The stand-in speaks plain http (QIM_WEB_PUSH_ALLOW_HTTP=1): TLS on a kept-alive connection
costs once per connection, not per push.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import REPO, Backend, emit, percentile, print_table, running, start_node, work_directory
from qimclient import QimClient
from tests.harness.personas import TenantHandle, api_ok
from tests.harness.push_standins.webpush import running_webpush_standin
from tests.harness.qim_process import manage, process_env

def new_vapid_key_pem() -> str:
    """A P-256 key, PKCS#8 PEM (push_providers.credentials has the same, but needs Django)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()


SEED = """
import json
from qim.actions.accounts import do_populate_users
from qim.clock import now_ms
from qim.models import Device, PushTask, Tenant
subscriptions = json.load(open({path!r}))
tenant = Tenant.objects.create(name="bench")
do_populate_users(tenant, len(subscriptions), "pw", "laptop")
devices = list(Device.objects.select_related("user").order_by("id"))
for device, subscription in zip(devices, subscriptions):
    device.push_platform, device.push_token = "web", subscription
Device.objects.bulk_update(devices, ["push_platform", "push_token"])
now = now_ms()
PushTask.objects.bulk_create(
    PushTask(tenant=tenant, user=d.user, device=d, available_at_ms=now, created_at_ms=now, payload={{
        "conversation_id": i, "conversation_seq": 1, "sender_id": "alice", "preview": "hello " * 20, "badge": 1}})
    for i, d in enumerate(devices)
)
"""


def worker_seconds(env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(REPO / "manage.py"), "qim_push_worker", "--once", "--batch", "100"],
                          env=process_env(env), cwd=REPO, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"worker failed:\n{done.stderr[-3000:]}")
    return time.monotonic() - started, json.loads(done.stdout.strip().splitlines()[-1])


def throughput(backend: Backend, work_dir: Path, push: Any, base_env: dict[str, str], tasks: int) -> list[dict]:
    """Sends/s of one worker through each sender, the same N tasks each."""
    rows = []
    for sender in ("push_providers.dispatch.ProviderSender", "qim.push.senders.LogSender"):
        db = backend.database(f"push_{sender.split('.')[-1].lower()}")
        env = {**db.env, **base_env, "QIM_VAR_DIR": str(work_dir), "QIM_PUSH_SENDER": sender}
        names = [f"{sender[:4]}{i}" for i in range(tasks)]
        subscriptions = work_dir / "subscriptions.json"
        subscriptions.write_text(json.dumps([json.dumps(push.subscribe(n), separators=(",", ":")) for n in names]))
        manage(env, "shell", "-c", SEED.format(path=str(subscriptions)))
        elapsed, report = worker_seconds(env)
        delivered = sum(len(push.received(n)) for n in names) if "Provider" in sender else report["sent"]
        [(first_ms, last_ms)] = db.query("SELECT min(sent_at_ms), max(sent_at_ms) FROM qim_pushtask")
        sending_s = max(last_ms - first_ms, 1) / 1000
        rows.append({"sender": sender.split(".")[-1], "tasks": tasks, "sent": report["sent"], "delivered": delivered,
                     "worker_s": round(elapsed, 2), "sending_s": round(sending_s, 3),
                     "sends_per_s": round((tasks - 1) / sending_s, 1)})
    return rows


async def latencies(node: Any, push: Any, sends: int) -> list[float]:
    """SEND -> decrypted at the stand-in, ms, one message at a time."""
    tenant = TenantHandle(name="acme", admin_token=manage_token(node), node=node)
    alice, bob = tenant.persona("alice"), tenant.persona("bob")
    api_ok(node, "POST", "devices/laptop/push", bob.token("laptop"),
           json={"platform": "web", "subscription": push.subscribe("bob")})
    group = api_ok(node, "POST", "conversations", alice.token(),
                   json={"kind": "group", "title": "bench", "member_user_ids": [bob.user_id]})["conversation_id"]
    client = QimClient(node.ws_url, alice.token(), "phone", reconnect=False)
    await client.connect()
    out = []
    try:
        for i in range(sends):
            started = time.time()
            ack = await client.request("SEND", conversation_id=group, client_msg_id=f"b{i}", content_type="text",
                                       payload={"text": f"ping {i}"})
            got = await asyncio.to_thread(push.wait_received, "bob", i + 1, 201, 60.0)
            arrived = next(r.at for r in got if r.payload["conversation_seq"] == ack["conversation_seq"])
            out.append((arrived - started) * 1000)
    finally:
        await client.close()
    return out


def manage_token(node: Any) -> str:
    out = manage(node.env, "qim_bootstrap", "--tenant", "acme", "--admin", "admin", "--password", "admin-pw")
    return json.loads(out.strip().splitlines()[-1])["token"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 tasks and 50 SENDs")
    parser.add_argument("--tasks", type=int, default=0)
    parser.add_argument("--sends", type=int, default=0)
    args = parser.parse_args()
    tasks = args.tasks or (200 if args.quick else 2000)
    sends = args.sends or (50 if args.quick else 300)
    base_env = {"QIM_VAPID_PRIVATE_KEY": new_vapid_key_pem(), "QIM_VAPID_SUBJECT": "mailto:bench@example.com",
                "QIM_WEB_PUSH_ENDPOINT_HOSTS": "127.0.0.1", "QIM_WEB_PUSH_ALLOW_HTTP": "1", "QIM_LOG_LEVEL": "ERROR"}
    with work_directory() as work_dir, running_webpush_standin() as push:
        backend = Backend("sqlite", work_dir)
        rows = throughput(backend, work_dir, push, base_env, tasks)
        db = backend.database("push_latency")
        node = start_node(db, work_dir, "push1", extra_env={**base_env, "QIM_PER_USER_MSG_RATE": "100000"})
        worker = running(ForeverWorker({**node.env}))
        lat = asyncio.run(latencies(node, push, sends))
        worker.stop()
        node.stop()
    web, log = rows
    print_table(f"Push senders: one qim_push_worker draining {tasks} tasks (SQLite; Web Push to the local stand-in)",
                ["sender", "tasks", "sent", "delivered", "worker s", "first->last send s", "sends/s"],
                [[r["sender"], r["tasks"], r["sent"], r["delivered"], r["worker_s"], r["sending_s"], r["sends_per_s"]]
                 for r in rows])
    p50, p99 = round(percentile(lat, 50), 1), round(percentile(lat, 99), 1)
    print_table(f"SEND -> decrypted at the Web Push stand-in, worker in forever mode (--idle-sleep 0.02), {sends} SENDs",
                ["SENDs", "p50 ms", "p99 ms", "max ms"], [[len(lat), p50, p99, round(max(lat), 1)]])
    ratio = round(web["sends_per_s"] / log["sends_per_s"], 3) if log["sends_per_s"] else None
    emit({"scenario": "push_senders", "quick": args.quick, "throughput": rows,
          "latency": {"sends": len(lat), "p50_ms": p50, "p99_ms": p99, "max_ms": round(max(lat), 1)},
          "ratios": {"webpush_vs_log_sends_per_s": ratio},
          "targets": {"every web push delivered": web["delivered"] == tasks,
                      "web push p99 SEND->decrypted <= 1000 ms": p99 <= 1000,
                      "web push >= 50 sends/s": web["sends_per_s"] >= 50}})


class ForeverWorker:
    """`qim_push_worker` in forever mode for the latency phase."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(REPO / "manage.py"), "qim_push_worker", "--idle-sleep", "0.02"],
            env=process_env(env), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


if __name__ == "__main__":
    main()
