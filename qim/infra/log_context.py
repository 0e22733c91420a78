"""Who a log line is about: the connection and the frame being handled, held in contextvars so
that any line logged while handling a frame carries them, also from code that knows nothing of
the connection (actions in ORM threads: asgiref and asyncio.to_thread copy the context)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

from django.conf import settings


class SocketIdentity(Protocol):
    """What a log line says of its socket (a qim.node.connection.Connection has it)."""

    tenant_name: str
    user_id: str
    device_id: str
    connection_id: str

# The record attributes (and JSON keys) a gateway line carries, in the order text shows them.
FIELDS = ("tenant", "user_id", "device_id", "connection_id", "type", "req_id")
_TEXT_LABELS = {"tenant": "tenant", "user_id": "user", "device_id": "device",
                "connection_id": "conn", "type": "frame", "req_id": "req"}

_frames_logger = logging.getLogger("qim.gateway.frames")

# Two variables, not one: the connection is bound once per socket (each socket runs in its own
# task, so no other socket sees it); the frame is set and reset around each frame.
_connection: ContextVar[Mapping[str, str]] = ContextVar("qim_log_connection", default={})
_frame: ContextVar[Mapping[str, str]] = ContextVar("qim_log_frame", default={})


def bind_connection(conn: SocketIdentity) -> None:
    """From AUTH on, every line of this socket's task names its tenant, user, device and id."""
    _connection.set({
        "tenant": conn.tenant_name, "user_id": conn.user_id,
        "device_id": conn.device_id, "connection_id": conn.connection_id,
    })


class frame_scope:  # lower case: used as `with frame_scope(...)`, as the function it was
    """Lines logged while this frame is handled name its type and req_id; at DEBUG, one line
    per frame says it was handled (QIM_LOG_LEVEL=DEBUG: every frame, with its context).

    A class, not a generator context manager: every frame of every socket enters one, and the
    generator, its frame and the wrapper were three objects and two resumptions per frame
    (docs/performance.md, "Lean handshake, upgrade, frame and per-socket paths")."""

    __slots__ = ("_frame_type", "_context", "_token", "_started")

    def __init__(self, frame_type: str, req_id: str | None) -> None:
        self._frame_type = frame_type
        self._context = {"type": frame_type} if req_id is None else {"type": frame_type, "req_id": req_id}

    def __enter__(self) -> None:
        self._token = _frame.set(self._context)
        # Timed only when the line would be written.
        self._started = time.monotonic() if _frames_logger.isEnabledFor(logging.DEBUG) else None

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self._started is not None:
                _frames_logger.debug("%s handled in %.1f ms", self._frame_type, (time.monotonic() - self._started) * 1000)
        finally:
            _frame.reset(self._token)


@contextmanager
def unbound() -> Iterator[None]:
    """No connection nor frame: tasks created inside start from an empty context, so a node's
    long-lived loops, started by whichever socket came first, never log as that socket."""
    connection, frame = _connection.set({}), _frame.set({})
    try:
        yield
    finally:
        _frame.reset(frame)
        _connection.reset(connection)


def current() -> dict[str, str]:
    return {**_connection.get(), **_frame.get()}


class ContextFilter(logging.Filter):
    """Puts `node_id` and the current context on each record, as attributes both formatters
    read (a handler filter: it runs in the thread, so the context, of the logging call)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "node_id"):
            record.node_id = settings.QIM_NODE_ID
        for name, value in current().items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


class TextFormatter(logging.Formatter):
    """The plain format, with the context after the message, compactly:
    `... handler for SEND failed [tenant=acme user=alice device=phone conn=01J.. frame=SEND req=r1]`."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        shown = [f"{_TEXT_LABELS[name]}={getattr(record, name)}" for name in FIELDS if hasattr(record, name)]
        line = super().formatMessage(record)
        return f"{line} [{' '.join(shown)}]" if shown else line


def capture_stray_output() -> None:
    """QIM_LOG_FORMAT=json: Python warnings and exceptions nothing caught (in any thread) become
    log records, so they reach the log as JSON lines with the traceback in `exc_info`, not as
    raw lines on stderr."""
    logging.captureWarnings(True)
    uncaught = logging.getLogger("qim.uncaught")

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if not issubclass(args.exc_type, SystemExit):
            name = args.thread.name if args.thread is not None else "?"
            uncaught.error("uncaught exception in thread %s", name,
                           exc_info=(args.exc_type, args.exc_value, args.exc_traceback))  # type: ignore[arg-type]

    def process_hook(exc_type, exc_value, exc_traceback) -> None:  # type: ignore[no-untyped-def]
        uncaught.critical("uncaught exception", exc_info=(exc_type, exc_value, exc_traceback))

    threading.excepthook = thread_hook
    sys.excepthook = process_hook
