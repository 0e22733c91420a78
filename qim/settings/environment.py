"""What every settings module reads from: the repository, the state directory and the process
environment (django-environ)."""

from __future__ import annotations

import os
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parents[2]
VAR_DIR = Path(os.environ.get("QIM_VAR_DIR", BASE_DIR / "var"))

env = environ.Env()
