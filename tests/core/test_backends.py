"""One place chooses the backends (qim/infra/backends.py, issue #20): a process gets every backend
from the same family, in process when embedded and Redis when QIM_REDIS_URL is set, and no
other module decides on its own."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

from tests.core.test_architecture import project_modules
from tests.harness.qim_process import REPO, process_env

# Builds each factory's backend in a fresh process; building connects to nothing.
PRINT_BACKENDS = """
import asyncio, json, django
django.setup()
from qim.infra.backends import backend_family, registered_backends
from qim.node.connection_node import get_node
from qim.infra.ratelimit import _limiter
from reactions.pusher import get_pusher
from rooms.service import get_room_service
from rtc.calls import get_call_store

async def limiter_storage():
    return type(_limiter().storage).__name__

print(json.dumps({
    "family": backend_family(), "registered": registered_backends(),
    "presence": type(get_node().directory).__name__,
    "room_leases": type(get_room_service().leases).__name__,
    "reaction_windows": type(get_pusher().windows).__name__,
    "calls": type(get_call_store()).__name__,
    "rate_limits": asyncio.run(limiter_storage()),
}))
"""

ALL_BACKENDS = ["calls", "presence", "rate_limits", "reaction_windows", "room_leases"]


def read_backends(env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PRINT_BACKENDS], env=process_env(env), cwd=REPO,
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_embedded_process_gets_every_backend_in_process(tmp_path) -> None:
    seen = read_backends({"QIM_VAR_DIR": str(tmp_path)})
    assert seen == {
        "family": "memory", "registered": ALL_BACKENDS,
        "presence": "MemoryPresenceDirectory", "room_leases": "MemoryLeaseStore",
        "reaction_windows": "MemoryMergeWindows", "calls": "MemoryCallStore",
        "rate_limits": "MemoryStorage",
    }


def test_process_with_redis_gets_every_backend_in_redis(tmp_path) -> None:
    # Nothing listens there: choosing and building a backend must not need a connection.
    seen = read_backends({"QIM_VAR_DIR": str(tmp_path), "QIM_REDIS_URL": "redis://127.0.0.1:9/0"})
    assert seen == {
        "family": "redis", "registered": ALL_BACKENDS,
        "presence": "RedisPresenceDirectory", "room_leases": "RedisLeaseStore",
        "reaction_windows": "RedisMergeWindows", "calls": "RedisCallStore",
        "rate_limits": "RedisStorage",
    }


def test_only_the_connection_factory_and_settings_read_the_redis_url() -> None:
    """A sixth `if settings.QIM_REDIS_URL` would let one backend disagree with the others."""
    allowed = {"qim.settings", "qim.infra.redis_client"}
    readers = []
    for module, path in project_modules().items():
        if module in allowed or module.startswith("tests"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "QIM_REDIS_URL":
                readers.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not readers, "choose backends in qim/infra/backends.py, not here:\n" + "\n".join(readers)
