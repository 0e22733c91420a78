"""Settings come from the environment exactly as protocol.md §1 names them."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys

from tests.harness.qim_process import REPO, process_env

PRINT_SETTINGS = """
import django, json
django.setup()
from django.conf import settings
from django.db import connection
db = settings.DATABASES["default"]
journal = None
if db["ENGINE"].endswith("sqlite3"):
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        journal = cursor.fetchone()[0]
print(json.dumps({
    "limits": settings.QIM_LIMITS, "engine": db["ENGINE"], "name": str(db["NAME"]),
    "options": {k: v for k, v in db.get("OPTIONS", {}).items() if isinstance(v, (str, int))},
    "journal": journal, "layer": settings.CHANNEL_LAYERS["default"]["BACKEND"],
    "layer_config": settings.CHANNEL_LAYERS["default"]["CONFIG"],
    "node": settings.QIM_NODE_ID, "origins": settings.QIM_ALLOWED_ORIGINS,
    "hosts": settings.ALLOWED_HOSTS, "debug": settings.DEBUG, "turn": settings.QIM_TURN_URLS,
}, default=repr))
"""


def read_settings(env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PRINT_SETTINGS], env=process_env(env), cwd=REPO,
        capture_output=True, text=True, check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_embedded_default_is_sqlite_in_wal_with_immediate_transactions(tmp_path) -> None:
    seen = read_settings({"QIM_VAR_DIR": str(tmp_path)})
    assert seen["engine"] == "django.db.backends.sqlite3"
    assert seen["name"] == str(tmp_path / "qim.sqlite3")
    assert seen["journal"] == "wal"
    assert seen["options"]["transaction_mode"] == "IMMEDIATE"
    assert seen["layer"] == "channels.layers.InMemoryChannelLayer"
    # No QIM_NODE_ID: <host>-<pid>, so two hosts' processes never share an id.
    host = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname())[:48]
    assert re.fullmatch(rf"{re.escape(host)}-\d+", seen["node"]), seen["node"]


def test_every_tunable_has_an_env_override_and_floats_are_allowed(tmp_path) -> None:
    seen = read_settings({
        "QIM_VAR_DIR": str(tmp_path), "QIM_ROOM_MSG_RATE": "2.5",
        "QIM_READ_SYNC_MERGE_WINDOW_S": "0.2", "QIM_RTC_VOIP_PUSH_DAILY_QUOTA": "3",
        "QIM_TURN_URLS": "turn:a.example:3478,turns:b.example:5349",
    })
    assert seen["limits"]["room_msg_rate"] == 2.5
    assert seen["limits"]["read_sync_merge_window_s"] == 0.2
    assert seen["limits"]["rtc_voip_push_daily_quota"] == 3
    assert seen["limits"]["room_ring_max_items"] == 1000  # untouched default
    assert seen["turn"] == ["turn:a.example:3478", "turns:b.example:5349"]


def test_multi_node_settings(tmp_path) -> None:
    seen = read_settings({
        "QIM_VAR_DIR": str(tmp_path),
        "QIM_DATABASE_URL": "postgres://qim:pw@db.example:5432/qim",
        "QIM_REDIS_URL": "redis://cache.example:6379/0",
        "QIM_NODE_ID": "node-a",
        "QIM_ALLOWED_ORIGINS": "https://app.example,https://admin.example",
        "QIM_ALLOWED_HOSTS": "qim.example,.internal",
        "QIM_DEBUG": "true",
    })
    assert seen["engine"] == "django.db.backends.postgresql"
    assert seen["layer"] == "channels_redis.core.RedisChannelLayer"
    # channels-redis drops on full channels and forgets after `expiry`: ours are explicit.
    assert seen["layer_config"]["capacity"] >= 1000
    assert seen["layer_config"]["channel_capacity"]["qim.node.*"] >= 10000
    # Its connections retry after a redis-server restart (qim/infra/outage.py), like ours.
    [host] = seen["layer_config"]["hosts"]
    assert "Retry" in host["retry"] and host["health_check_interval"] > 0
    assert seen["node"] == "node-a"
    assert seen["origins"] == ["https://app.example", "https://admin.example"]
    assert seen["hosts"] == ["qim.example", ".internal"]
    assert seen["debug"] is True


def test_sqlite_url_with_an_absolute_path(tmp_path) -> None:
    path = tmp_path / "elsewhere.sqlite3"
    seen = read_settings({"QIM_VAR_DIR": str(tmp_path), "QIM_DATABASE_URL": f"sqlite:///{path}"})
    assert seen["name"] == str(path)
    assert seen["journal"] == "wal"
