"""Builds the web client into clients/web/dist/ (app.js, app.css, sw.js): esbuild, from the SDK's
lockfile (clients/js/package-lock.json), bundles src/ with the SDK's TypeScript sources.
Run by `make web` (so by `make run`) and by the browser tests' session fixture."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SDK = HERE.parent / "js"


def run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode})")


def main() -> None:
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("npm is needed to build the web client (make services installs it)")
    if not (SDK / "node_modules" / ".bin" / "esbuild").exists():
        run([npm, "ci", "--no-audit", "--no-fund"], SDK)
    # Written beside dist/ and moved in, so a node never collects a half-written bundle.
    staging = HERE / "dist.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    run([str(SDK / "node_modules" / ".bin" / "esbuild"), str(HERE / "src" / "main.js"), "--bundle",
         "--format=esm", "--platform=browser", "--target=es2020", "--log-level=warning",
         f"--outfile={staging / 'app.js'}"], HERE)
    # The service worker is a classic script on its own: served at /sw.js (qim/api/web_client.py)
    # so its scope covers the whole site.
    run([str(SDK / "node_modules" / ".bin" / "esbuild"), str(HERE / "src" / "sw.js"), "--bundle",
         "--format=iife", "--platform=browser", "--target=es2020", "--log-level=warning",
         f"--outfile={staging / 'sw.js'}"], HERE)
    shutil.rmtree(HERE / "dist", ignore_errors=True)
    staging.rename(HERE / "dist")


if __name__ == "__main__":
    main()
