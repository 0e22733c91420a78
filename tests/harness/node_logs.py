"""Node logs that tell what broke: whole tracebacks in failures, and copies that outlive pytest's
temp-dir rotation (under var/test-logs/, or QIM_TEST_LOG_DIR)."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from tests.harness.qim_process import REPO

# A line that starts a new record: a log line (text or JSON, QIM_LOG_FORMAT), daphne's access
# log, a node (re)start marker.
_RECORD_START = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|\{\"|\d{1,3}(\.\d{1,3}){3}:\d+ - |==== start)")
# Enough of a log for a failure message; the whole file is kept beside it.
MAX_REPORT_CHARS = 20_000


def is_crash_line(line: str) -> bool:
    record = json_record(line)
    if record is not None:  # QIM_LOG_FORMAT=json: the same two signs, as fields
        return "exc_info" in record or (record.get("level") == "ERROR" and _is_qim(record.get("logger")))
    return "Traceback" in line or " ERROR qim" in line


def json_record(line: str) -> dict | None:
    """The JSON object a QIM_LOG_FORMAT=json line holds, or None for any other line."""
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _is_qim(logger: object) -> bool:
    return isinstance(logger, str) and (logger == "qim" or logger.startswith("qim"))


def crash_blocks(text: str) -> list[str]:
    """Each logged error with everything that belongs to it: the ERROR line, the whole
    traceback (chained ones too), up to the next record."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    record: str | None = None  # the record a bare traceback belongs to (a WARNING with exc_info)
    for line in text.splitlines():
        starts_record = bool(_RECORD_START.match(line))
        if current is not None and starts_record:
            current = None
        if current is None and is_crash_line(line):
            current = [record] if record is not None and not starts_record else []
            blocks.append(current)
        if current is not None:
            current.append(line)
        if starts_record:
            record = line
    return ["\n".join(block) for block in blocks]


def log_home() -> Path:
    """Where failed tests' node logs are kept: QIM_TEST_LOG_DIR, else var/test-logs in the repo."""
    configured = os.environ.get("QIM_TEST_LOG_DIR")
    return Path(configured) if configured else REPO / "var" / "test-logs"


def label_of(nodeid: str) -> str:
    """A directory name for a test or module id: tests/x/test_y.py::test_z -> x.test_y.test_z."""
    name = nodeid.split(" ")[0].removeprefix("tests/").replace(".py", "").replace("/", ".").replace("::", ".")
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:150] or "unknown"


def keep_logs(paths: Iterable[Path], label: str) -> Path:
    """Copy node logs to log_home()/label (replacing an earlier copy); answers that directory."""
    target = log_home() / label
    target.mkdir(parents=True, exist_ok=True)
    for path in paths:
        if path.exists():
            shutil.copyfile(path, target / path.name)
    return target


def current_label() -> str:
    """The running test's module (or test) as a label, from PYTEST_CURRENT_TEST."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    return label_of(current.split("::")[0] if "::" in current else current)


def crash_report(paths: Iterable[Path], label: str) -> str | None:
    """None when no log holds an error; else the whole crash blocks and where the logs are kept."""
    paths = list(paths)
    found = [
        f"--- {path.name} ---\n{block}"
        for path in paths if path.exists()
        for block in crash_blocks(path.read_text(errors="replace"))
    ]
    if not found:
        return None
    kept = keep_logs(paths, label)
    text = "\n".join(found)
    if len(text) > MAX_REPORT_CHARS:
        text = text[:MAX_REPORT_CHARS] + "\n[... cut; the whole logs are kept]"
    return f"server errors logged (node logs kept in {kept}):\n{text}"


def tail_since(path: Path, offset: int, max_chars: int = 8_000) -> str:
    """What `path` got since byte `offset` (its end, when that is long)."""
    if not path.exists():
        return ""
    with open(path, "rb") as log:
        log.seek(offset if offset <= path.stat().st_size else 0)
        data = log.read().decode(errors="replace")
    return data if len(data) <= max_chars else "[...]\n" + data[-max_chars:]
