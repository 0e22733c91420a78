"""Logging filters named in settings.LOGGING."""

from __future__ import annotations

import logging


class WithoutTraceback(logging.Filter):
    """Keep the record's message, drop its traceback: for refusals Django logs as errors with
    exc_info, such as a request whose Host is not allowed (scanners send many), which are
    answered 400 and are not server faults."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text = None, None
        return True
