"""The log context (qim/infra/log_context.py) through the formatters the settings configure: a line
logged in an ORM-style thread while a frame is handled names the socket and the frame, a
traceback stays inside one JSON field, a node's loops started under `unbound()` name nobody,
and QIM_LOG_FORMAT accepts text and json only. End-to-end on a real node: test_json_logs.py."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from dataclasses import replace

from django.conf import settings
from pythonjsonlogger.json import JsonFormatter

from qim.gateway.batching import KeyedBatcher
from qim.node.connection import Connection
from qim.infra.log_context import ContextFilter, TextFormatter, bind_connection, current, frame_scope, unbound
from tests.harness.qim_process import REPO, process_env


class Lines(logging.Handler):
    """The formatted lines, as the console handler of settings.LOGGING would write them."""

    def __init__(self, formatter: logging.Formatter) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.setFormatter(formatter)
        self.addFilter(ContextFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def capture(formatter: logging.Formatter) -> tuple[logging.Logger, Lines]:
    logger = logging.getLogger(f"qim.test_log_context.{id(formatter)}")
    logger.propagate, logger.level = False, logging.DEBUG
    lines = Lines(formatter)
    logger.handlers = [lines]
    return logger, lines


def json_formatter() -> JsonFormatter:
    """As settings.LOGGING builds it for QIM_LOG_FORMAT=json."""
    return JsonFormatter("%(levelname)s %(name)s %(message)s",
                         rename_fields={"levelname": "level", "name": "logger"}, timestamp="time")


async def _no_send(text: object) -> None:
    return None


def alice() -> Connection:
    return Connection(connection_id="01CONN", tenant_id=1, tenant_name="acme", user_pk=7, user_id="alice",
                      device_id="phone", is_tenant_admin=False, client_version="t", send_text=_no_send)


def fails_in_a_thread(logger: logging.Logger) -> None:
    """Code that knows nothing of the connection, run as in_db_thread runs actions."""
    try:
        raise KeyError("boom")
    except KeyError:
        logger.exception("action failed")


async def test_a_thread_line_names_the_socket_and_frame_and_its_traceback_is_one_field() -> None:
    logger, lines = capture(json_formatter())
    bind_connection(alice())
    with frame_scope("SEND", "s1"):
        await asyncio.to_thread(fails_in_a_thread, logger)
    logger.warning("between frames")
    [failed, between] = lines.lines
    record = json.loads(failed)
    assert {k: record[k] for k in ("level", "logger", "message", "node_id")} == {
        "level": "ERROR", "logger": logger.name, "message": "action failed", "node_id": settings.QIM_NODE_ID}
    assert {k: record[k] for k in ("tenant", "user_id", "device_id", "connection_id", "type", "req_id")} == {
        "tenant": "acme", "user_id": "alice", "device_id": "phone", "connection_id": "01CONN",
        "type": "SEND", "req_id": "s1"}
    assert "\n" not in failed and record["exc_info"].startswith("Traceback") and "KeyError: 'boom'" in record["exc_info"]
    assert "time" in record
    between_record = json.loads(between)
    assert between_record["connection_id"] == "01CONN" and "type" not in between_record and "req_id" not in between_record


async def test_tasks_started_unbound_name_nobody() -> None:
    logger, lines = capture(TextFormatter("%(levelname)s %(name)s: %(message)s"))
    bind_connection(alice())
    with frame_scope("ROOM_JOIN", None):
        with unbound():
            node_loop = asyncio.create_task(_log_later(logger, "node loop tick"))
        frame_task = asyncio.create_task(_log_later(logger, "fire and forget for this frame"))
    await asyncio.gather(node_loop, frame_task)
    assert lines.lines == [
        f"WARNING {logger.name}: node loop tick",
        f"WARNING {logger.name}: fire and forget for this frame "
        "[tenant=acme user=alice device=phone conn=01CONN frame=ROOM_JOIN]",
    ]


async def test_a_batch_logs_as_none_of_its_submitters() -> None:
    """A batch runs for every item it gathered, so the first submitter's socket is not its own."""
    seen: list[dict[str, str]] = []

    async def apply(key: str, items: list[str]) -> list[str]:
        seen.append(current())
        await asyncio.sleep(0)
        return items

    batcher: KeyedBatcher[str, str, str] = KeyedBatcher("test_log_batch", apply, on_loop=True)

    async def submit_as(user_id: str) -> str:
        bind_connection(replace(alice(), user_id=user_id, connection_id=f"01{user_id}"))
        with frame_scope("SEND", user_id):
            return await batcher.submit("key", user_id)

    assert await asyncio.gather(submit_as("alice"), submit_as("bob")) == ["alice", "bob"]
    assert seen and all(context == {} for context in seen)


async def _log_later(logger: logging.Logger, message: str) -> None:
    await asyncio.sleep(0)
    logger.warning(message)


def test_log_format_takes_text_or_json_only() -> None:
    probe = "import django; django.setup(); from django.conf import settings; print(settings.QIM_LOG_FORMAT)"
    for given, expected in (("JSON", "json"), ("", "text")):
        done = subprocess.run([sys.executable, "-c", probe], env=process_env({"QIM_LOG_FORMAT": given}),
                              cwd=REPO, capture_output=True, text=True, check=True)
        assert done.stdout.strip() == expected
    refused = subprocess.run([sys.executable, "-c", probe], env=process_env({"QIM_LOG_FORMAT": "xml"}),
                             cwd=REPO, capture_output=True, text=True)
    assert refused.returncode != 0 and "QIM_LOG_FORMAT must be text or json, not 'xml'" in refused.stderr


STRAY = """
import django, threading, warnings
django.setup()
warnings.warn("a stray warning")
thread = threading.Thread(target=lambda: 1 / 0, name="worker-1")
thread.start()
thread.join()
"""


def test_json_mode_turns_warnings_and_uncaught_exceptions_into_json_lines() -> None:
    done = subprocess.run([sys.executable, "-c", STRAY], env=process_env({"QIM_LOG_FORMAT": "json"}),
                          cwd=REPO, capture_output=True, text=True, check=True)
    records = [json.loads(line) for line in done.stderr.splitlines()]  # a raw line fails here
    warning, uncaught = records
    assert (warning["logger"], warning["level"]) == ("py.warnings", "WARNING")
    assert "a stray warning" in warning["message"]
    assert (uncaught["logger"], uncaught["message"]) == ("qim.uncaught", "uncaught exception in thread worker-1")
    assert "ZeroDivisionError" in uncaught["exc_info"]


def test_a_frame_says_it_was_handled_at_debug_only() -> None:
    """frame_scope's one line per frame, with the frame's context, only when DEBUG is on; the
    frame's context is gone after it, also when the frame raised."""
    frames = logging.getLogger("qim.gateway.frames")
    lines = Lines(TextFormatter("%(levelname)s %(message)s"))
    saved = frames.handlers, frames.level, frames.propagate
    frames.handlers, frames.propagate = [lines], False
    try:
        frames.setLevel(logging.INFO)
        with frame_scope("PING", "p1"):
            assert current() == {"type": "PING", "req_id": "p1"}
        frames.setLevel(logging.DEBUG)
        try:
            with frame_scope("SEND", "s2"):
                raise KeyError("boom")
        except KeyError:
            pass
    finally:
        frames.handlers, frames.level, frames.propagate = saved
        frames.manager._clear_cache()
    assert current() == {}
    [line] = lines.lines
    assert line.startswith("DEBUG SEND handled in ") and line.endswith(" ms [frame=SEND req=s2]")
