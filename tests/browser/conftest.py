"""Browser fixtures: Debian's Chromium (/usr/bin/chromium, headless, never downloaded) driven
by Playwright, against an embedded node whose static files include the built web client."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Browser, BrowserContext, Request, expect, sync_playwright

from tests.conftest import QimDeployment, start_embedded
from tests.harness.qim_process import REPO, collect_static
from tests.harness.repo_lock import repo_lock

CHROMIUM = "/usr/bin/chromium"
# No update checks, sync, QUIC probes or first-run pings: the only requests are the page's.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--disable-quic", "--no-first-run", "--disable-default-apps",
]
SCREENSHOTS = REPO / "docs" / "screenshots"
# Waits are for conditions, generous for a loaded 2-core machine (Playwright's default is 5 s).
expect.set_options(timeout=30_000)


@pytest.fixture(scope="session")
def web_client_built(work_dir: Path) -> Path:
    """clients/web built (as `make web` does), then collected again into the nodes' static
    root, so every node started after this serves `/` and its hashed files."""
    with repo_lock():  # pytest-xdist workers share clients/web and clients/js/node_modules
        done = subprocess.run([sys.executable, str(REPO / "clients" / "web" / "build.py")], cwd=REPO,
                              capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    collect_static(work_dir)
    return work_dir


@pytest.fixture(scope="module")
def web(request: pytest.FixtureRequest, sqlite_template: Path, work_dir: Path,
        web_client_built: Path) -> Iterator[QimDeployment]:
    """One embedded node (what `make run` serves) with the web client collected; the test
    module's `WEB_ENV`, if any, adds settings."""
    # The page's origin is http://127.0.0.1:<a free port>: its WebSocket handshake must pass.
    extra_env = {"QIM_ALLOWED_ORIGINS": "*", **getattr(request.module, "WEB_ENV", {})}
    deployment = start_embedded(sqlite_template, work_dir, extra_env=extra_env)
    yield deployment
    deployment.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Per module, not per session: Playwright's sync API keeps an asyncio loop running on
    the main thread while it is started, and pytest-asyncio cannot run the suite's async
    tests beside it; stopping it at the module's end gives the thread back."""
    assert shutil.which(CHROMIUM), "Debian's chromium is needed (make services installs it)"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


class RequestLog:
    """Every request a browser context made, to prove none left 127.0.0.1. A request the
    page's Content-Security-Policy blocked never reached the network: it is kept apart."""

    def __init__(self) -> None:
        self.urls: list[str] = []
        self.blocked: list[str] = []

    def record(self, request: Request) -> None:
        self.urls.append(request.url)

    def record_failure(self, request: Request) -> None:
        if request.failure == "csp":  # Chromium's reason for net::ERR_BLOCKED_BY_CSP
            self.blocked.append(request.url)

    def foreign(self) -> list[str]:
        return [url for url in self.urls
                if not url.startswith(("data:", "blob:", "about:")) and urlparse(url).hostname != "127.0.0.1"
                and url not in self.blocked]


def new_context(browser: Browser, width: int = 1280, height: int = 800) -> tuple[BrowserContext, RequestLog]:
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(30_000)  # generous: a loaded 2-core machine
    log = RequestLog()
    context.on("request", log.record)
    context.on("requestfailed", log.record_failure)
    return context, log


def screenshot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))
