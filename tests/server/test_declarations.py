"""The declarations of qim/server/catalog.py against the installed libraries and the pins, and
how start-up judges a declaration that does not hold (qim/server/tuning.py `plan`). Nothing
here installs anything: the checks run on stock code in a fresh process, or on `plan` alone."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from qim.server.catalog import BY_NAME, REPLACEMENTS
from qim.server.declarations import Original, Replacement, code_digest, mismatch, version_of
from qim.server.tuning import checked_mode

REPO = Path(__file__).resolve().parents[2]
LIBRARIES = ("daphne", "autobahn", "twisted")


def pinned() -> dict[str, str]:
    """requirements.txt's exact pins, by lower-cased distribution name."""
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        found = re.match(r"^([A-Za-z0-9_.-]+)==([^\s#;]+)", line)
        if found:
            pins[found.group(1).lower()] = found.group(2)
    return pins


def test_every_declaration_holds_for_the_installed_libraries() -> None:
    """Fails after a pinned daphne, autobahn or Twisted changes until each replacement is
    re-verified and its declaration updated (`python -m qim.server.verify`, then `--write`)."""
    done = subprocess.run([sys.executable, "-m", "qim.server.verify"], cwd=REPO, capture_output=True, text=True,
                          env={"DJANGO_SETTINGS_MODULE": "qim.settings", "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": verifies") == len(REPLACEMENTS), done.stdout


def test_each_declaration_was_verified_on_the_pinned_release() -> None:
    pins = pinned()
    for replacement in REPLACEMENTS:
        assert replacement.verified_on, replacement.name
        for distribution, version in replacement.verified_on.items():
            assert distribution in LIBRARIES, (replacement.name, distribution)
            assert pins[distribution] == version == version_of(distribution), (replacement.name, distribution)


def test_declarations_are_complete_and_consistent() -> None:
    assert len(BY_NAME) == len(REPLACEMENTS), "a name declared twice"
    for replacement in REPLACEMENTS:
        assert replacement.originals and replacement.why, replacement.name
        assert set(replacement.requires) <= set(BY_NAME), replacement.name
        assert replacement.kind in ("tuning", "fix")
        # What requires another comes after it: plan() judges them in this order.
        names = [r.name for r in REPLACEMENTS]
        assert all(names.index(r) < names.index(replacement.name) for r in replacement.requires)
        if replacement.apply is not None:
            assert callable(replacement.installer()), replacement.name


def fresh_plan(**request: object) -> dict:
    """plan() as a process that never installed anything judges it (tests/server/plan_probe.py)."""
    done = subprocess.run([sys.executable, "-m", "tests.server.plan_probe", json.dumps(request)], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={"DJANGO_SETTINGS_MODULE": "qim.settings", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_everything_verifies_on_the_pinned_libraries() -> None:
    assert fresh_plan() == {"chosen": [r.name for r in REPLACEMENTS], "stock": {}}


def test_a_version_not_verified_leaves_that_replacement_stock_and_what_needs_it() -> None:
    judged = fresh_plan(versions={"twisted": "26.12.0"})
    twisted_ones = {r.name for r in REPLACEMENTS if "twisted" in r.verified_on}
    assert set(judged["stock"]) == twisted_ones
    assert judged["stock"]["lean_upgrade"] == "twisted 26.12.0 installed, verified on 26.10.0"
    assert set(judged["chosen"]) == set(BY_NAME) - twisted_ones


def test_a_replacement_needing_a_stock_one_stays_stock() -> None:
    judged = fresh_plan(verified_on={"direct_handshake_write": {"daphne": "1.0"}})
    assert judged["stock"] == {"direct_handshake_write": "daphne 4.2.3 installed, verified on 1.0",
                               "direct_writes": "needs direct_handshake_write, which runs stock"}


def test_an_original_that_changed_is_named() -> None:
    changed = Replacement(name="t", why="test", verified_on={"daphne": version_of("daphne")},
                          originals=(Original("daphne.server.Server", "timeout_checker", "0" * 16),))
    assert mismatch(changed) == (
        "daphne.server.Server.timeout_checker is not the original it was verified against "
        f"(digest {code_digest(__import__('daphne.server').server.Server.timeout_checker)}, expected {'0' * 16})"
    )
    missing = Replacement(name="t", why="test", verified_on={},
                          originals=(Original("daphne.server.Server", "no_such_attribute", "0" * 16),))
    assert mismatch(missing) == "daphne.server.Server.no_such_attribute is not the original it was verified against (digest absent, expected 0000000000000000)"
    gone = Replacement(name="t", why="test", verified_on={}, originals=(Original("daphne.no_such_module.X", "y", "0"),))
    assert mismatch(gone) == "daphne.no_such_module.X.y not found (AttributeError)"


def test_off_keeps_only_the_fixes() -> None:
    judged = fresh_plan(mode="off")
    assert judged["chosen"] == [r.name for r in REPLACEMENTS if r.kind == "fix"]
    assert judged["chosen"] == ["raw_bodies", "connect_errors", "protocol_errors"]
    assert set(judged["stock"].values()) == {"QIM_SERVER_TUNING=off"}


@pytest.mark.parametrize("value", ["", "On", "fast", "true"])
def test_an_unknown_mode_stops_the_node(value: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="QIM_SERVER_TUNING must be one of on, off"):
        checked_mode(value)


# The modules outside qim/server that may import daphne, autobahn or Twisted, and why: they
# read public API (exceptions, a transport's buffer for the slow-socket bound), patch nothing.
LIBRARY_READERS = {
    "qim/gateway/consumer.py",  # autobahn.exception.Disconnected
}


def test_nothing_outside_qim_server_touches_the_libraries() -> None:
    """The fence: a module that imports daphne, autobahn or Twisted lives in qim/server/, or is
    a listed reader; and no module anywhere else assigns to an attribute of one of them."""
    offenders = []
    for path in sorted(REPO.glob("*/**/*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative.startswith(("qim/server/", "tests/", "bench/", ".venv/", "deploy/")) or "node_modules" in relative:
            continue
        tree = ast.parse(path.read_text(), relative)
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name.split(".")[0] in LIBRARIES for name in names) and relative not in LIBRARY_READERS:
                offenders.append(f"{relative}:{node.lineno}")
    assert offenders == [], offenders
