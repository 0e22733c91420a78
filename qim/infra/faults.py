"""Fault injection for crash tests: `QIM_FAULT=<point>` kills the process at that point."""

from __future__ import annotations

import logging
import os
import sys

from django.conf import settings

logger = logging.getLogger(__name__)

FAULT_POINTS = frozenset(
    {"recall.after_log", "edit.after_log", "read_sync.before_flush", "room.after_append"}
)


def fault_point(name: str) -> None:
    """Die abruptly (exit 137, no cleanup, no flush) when `QIM_FAULT` names this point."""
    assert name in FAULT_POINTS, name
    if settings.QIM_FAULT == name:
        logger.critical("QIM_FAULT=%s reached: exiting now", name)
        sys.stderr.flush()
        os._exit(137)
