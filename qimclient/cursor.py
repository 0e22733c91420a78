"""Where a device's mailbox cursor lives between runs: the CursorStore contract and two stores."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Protocol, runtime_checkable

logger = logging.getLogger("qimclient")


@runtime_checkable
class CursorStore(Protocol):
    """Persists one device's `mailbox_seq` cursor (§5 SYNC `after_mailbox_seq`).

    One store per (server, user, device): the cursor means nothing for another user's
    mailbox, and another device of the same user skips different entries.
    """

    def load(self) -> int | None:
        """The saved cursor, or None when nothing was saved (the client then starts at 0)."""
        ...

    def save(self, mailbox_seq: int) -> None:
        """Remember `mailbox_seq`; called after the events up to it were handed on."""
        ...


class MemoryCursorStore:
    """The default: the cursor lives as long as the process (a restart syncs from `initial`)."""

    def __init__(self, initial: int | None = None) -> None:
        self.mailbox_seq = initial

    def load(self) -> int | None:
        return self.mailbox_seq

    def save(self, mailbox_seq: int) -> None:
        self.mailbox_seq = mailbox_seq


class JsonFileCursorStore:
    """`{"mailbox_seq": N}` in one file, replaced atomically so a crash never leaves half a file.

    An unreadable file loads as None: syncing again from 0 re-delivers, which beats losing.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> int | None:
        try:
            value = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            logger.warning("ignoring unreadable cursor file %s: %s", self.path, error)
            return None
        seq = value.get("mailbox_seq") if isinstance(value, dict) else None
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            logger.warning("ignoring cursor file %s without a valid mailbox_seq", self.path)
            return None
        return seq

    def save(self, mailbox_seq: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                json.dump({"mailbox_seq": mailbox_seq}, file)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
