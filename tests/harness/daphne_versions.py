"""`python -m tests.harness.daphne_versions ARGS`: daphne's own command line, in a process whose
installed library versions read as QIM_TEST_PRETEND_VERSIONS says ("daphne=0.0,twisted=1.0").

The one way to start a real node on a library release its server tuning was not verified on
without installing another release: only what importlib.metadata answers changes, the code
served is the installed one (tests/server/test_stock_paths.py)."""

from __future__ import annotations

import os
from importlib import metadata

from daphne.cli import CommandLineInterface


def pretend() -> None:
    versions = dict(pair.split("=", 1) for pair in os.environ.get("QIM_TEST_PRETEND_VERSIONS", "").split(",") if pair)
    installed = metadata.version

    def version(distribution: str) -> str:
        return versions.get(distribution.lower(), None) or installed(distribution)

    metadata.version = version


if __name__ == "__main__":
    pretend()
    CommandLineInterface.entrypoint()
