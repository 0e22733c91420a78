"""Node logs in failures: whole tracebacks, chained ones too, and copies kept outside pytest's temp dirs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.node_logs import crash_blocks, crash_report, label_of, log_home, tail_since

LOG = """\
==== start 1 ====
127.0.0.1:41980 - - [03/Dec/2026:22:09:20] "GET /api/v1/health" 200 32
2026-12-03 22:10:20,026 ERROR qim.node.connection_node: disconnect hook end_calls_of_departed_device failed
Traceback (most recent call last):
  File "/repo/qim/gateway/node.py", line 251, in unregister
    await hook(conn)
redis.exceptions.ConnectionError: Connection closed by server.
127.0.0.1:32818 - - [03/Dec/2026:22:10:28] "WSCONNECTING /ws/v1" - -
2026-12-03 22:10:28,279 WARNING qim.gateway.db: database away
Traceback (most recent call last):
  File "/repo/qim/frames/messaging.py", line 126, in handle_send
    raise KeyError("x")
KeyError: 'x'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/repo/qim/frames/messaging.py", line 130, in handle_send
    raise ValueError("y")
ValueError: y
2026-12-03 22:10:29,000 INFO qim.gateway: fine again
"""


def test_each_error_comes_out_whole() -> None:
    first, second = crash_blocks(LOG)
    assert first.splitlines()[0].endswith("end_calls_of_departed_device failed")
    assert first.splitlines()[-1] == "redis.exceptions.ConnectionError: Connection closed by server."
    assert "await hook(conn)" in first and "WSCONNECTING" not in first
    # A traceback logged under a WARNING keeps its record line and both chained exceptions.
    assert second.splitlines()[0].endswith("WARNING qim.gateway.db: database away")
    assert "KeyError: 'x'" in second and second.splitlines()[-1] == "ValueError: y"
    assert "fine again" not in second


def test_a_clean_log_has_no_blocks() -> None:
    assert crash_blocks('==== start 1 ====\n127.0.0.1:1 - - [x] "GET /api/v1/health" 200 32\n') == []


def test_a_crash_report_keeps_the_logs_where_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QIM_TEST_LOG_DIR", str(tmp_path / "kept"))
    log = tmp_path / "rotating" / "c1n2.log"
    log.parent.mkdir()
    log.write_text(LOG)
    report = crash_report([log], "faults.test_x")
    assert report is not None
    kept = tmp_path / "kept" / "faults.test_x" / "c1n2.log"
    assert f"kept in {kept.parent}" in report and kept.read_text() == LOG
    assert "ValueError: y" in report and "await hook(conn)" in report
    assert crash_report([tmp_path / "missing.log"], "faults.test_y") is None


def test_logs_default_to_var_under_the_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QIM_TEST_LOG_DIR", raising=False)
    assert log_home().parts[-2:] == ("var", "test-logs")


def test_labels_are_directory_names() -> None:
    assert label_of("tests/faults/test_node_kill.py::test_a[p1 x] (teardown)") == "faults.test_node_kill.test_a_p1"
    assert label_of("tests/rooms/test_rooms.py") == "rooms.test_rooms"


def test_a_tail_is_what_came_after_the_offset(tmp_path: Path) -> None:
    log = tmp_path / "n.log"
    log.write_text("before\n")
    offset = log.stat().st_size
    with open(log, "a") as out:
        out.write("during\n")
    assert tail_since(log, offset) == "during\n"
    assert tail_since(log, offset, max_chars=3) == "[...]\nng\n"


JSON_LOG = "\n".join([
    "==== start 1 ====",
    '{"level": "WARNING", "logger": "qim.gateway.consumer", "message": "closing connection c1 as flooding"}',
    '{"level": "ERROR", "logger": "django.request", "message": "Not Found: /x"}',
    '{"level": "ERROR", "logger": "qim.notify", "message": "push after commit failed"}',
    '{"level": "WARNING", "logger": "rooms.local", "message": "odd", "exc_info": "Traceback (most recent call last):\\nKeyError: 1"}',
    '{"level": "INFO", "logger": "qimclient", "message": "a message that says Traceback"}',
])


def test_json_lines_are_checked_by_their_fields() -> None:
    """QIM_LOG_FORMAT=json nodes: an ERROR from a qim logger or any record with a traceback is
    a crash, each one line; a message that merely says "Traceback" is not, nor another
    library's ERROR."""
    blocks = crash_blocks(JSON_LOG)
    assert [block.count("\n") for block in blocks] == [0, 0]
    assert "push after commit failed" in blocks[0] and '"exc_info"' in blocks[1]
