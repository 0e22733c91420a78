"""Once-per-process replacements on daphne's, autobahn's and Twisted's classes.

QIM changes what those libraries do per socket by setting attributes on their classes at
start-up (qim/asgi.py installs each). Each replacement is made once: a second install, from a
second import of the application in the same process, finds the class's flag and does nothing,
so a wrapper never wraps the wrapper it installed before."""

from __future__ import annotations

from typing import Any


def patch_once(target: Any, flag: str, **replacements: Any) -> bool:
    """Set `replacements` as attributes of `target` (a class or module) and the attribute `flag`;
    whether it did (False: `flag` was already set, nothing changed)."""
    if getattr(target, flag, False):
        return False
    for name, value in replacements.items():
        setattr(target, name, value)
    setattr(target, flag, True)
    return True
