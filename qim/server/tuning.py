"""Installing the declared replacements once per process, and what was installed.

`QIM_SERVER_TUNING=on` (the default) installs every replacement of qim/server/catalog.py whose
library versions and originals verify, and whose requirements are installed; `off` installs
only the correctness fixes (kind "fix"), so the node runs stock daphne, autobahn and Twisted.
Every piece left stock in `on` is named in one WARNING with its reason. The outcome is what
GET /api/v1/node (`server_tuning`) and /metrics (`qim_server_tuning{name}`) report.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Iterable

from django.core.exceptions import ImproperlyConfigured

from qim.server.catalog import REPLACEMENTS
from qim.server.declarations import Replacement, mismatch, version_of

logger = logging.getLogger("qim.server")
MODES = ("on", "off")


@dataclass
class TuningState:
    """This process's server tuning: the mode, and each declared replacement's fate."""

    mode: str = "unset"
    installed: list[str] = field(default_factory=list)
    # name -> why it runs stock ("QIM_SERVER_TUNING=off", a version or original mismatch, ...)
    stock: dict[str, str] = field(default_factory=dict)
    # Looked up per socket by the paths that only read past a library (qim/server/wire.py).
    enabled: frozenset[str] = frozenset()

    def as_json(self) -> dict:
        return {"mode": self.mode, "installed": list(self.installed), "stock": dict(self.stock)}


STATE = TuningState()


def is_installed(name: str) -> bool:
    return name in STATE.enabled


def checked_mode(value: str) -> str:
    if value not in MODES:
        raise ImproperlyConfigured(f"QIM_SERVER_TUNING must be one of {', '.join(MODES)}, not {value!r}")
    return value


def plan(mode: str, replacements: Iterable[Replacement] = REPLACEMENTS,
         version: Callable[[str], str | None] = version_of) -> tuple[list[Replacement], dict[str, str]]:
    """Which replacements to install in `mode`, in declaration order, and why each other one
    stays stock. Checks everything before anything is set: a check must see stock code."""
    chosen: list[Replacement] = []
    stock: dict[str, str] = {}
    for replacement in replacements:
        if mode == "off" and replacement.kind == "tuning":
            stock[replacement.name] = "QIM_SERVER_TUNING=off"
            continue
        why = mismatch(replacement, version)
        missing = [name for name in replacement.requires if name in stock]
        if why is None and missing:
            why = f"needs {', '.join(missing)}, which runs stock"
        if why is None:
            chosen.append(replacement)
        else:
            stock[replacement.name] = why
    return chosen, stock


def install(mode: str | None = None, replacements: Iterable[Replacement] = REPLACEMENTS,
            version: Callable[[str], str | None] = version_of) -> TuningState:
    """Once per process, before daphne accepts a connection (qim/asgi.py): a second call, from
    a second import of the application, answers the first call's state and changes nothing."""
    if STATE.mode != "unset":
        return STATE
    if mode is None:
        from django.conf import settings

        mode = settings.QIM_SERVER_TUNING
    mode = checked_mode(mode)
    chosen, stock = plan(mode, replacements, version)
    for replacement in chosen:
        installer = replacement.installer()
        if installer is not None:
            installer()
    STATE.mode = mode
    STATE.installed = [replacement.name for replacement in chosen]
    STATE.stock = stock
    STATE.enabled = frozenset(STATE.installed)
    mismatched = {name: why for name, why in stock.items() if why != "QIM_SERVER_TUNING=off"}
    if mismatched:
        logger.warning("server tuning: %d replacement(s) left stock, the node runs the libraries' own code there: %s",
                       len(mismatched), "; ".join(f"{name} ({why})" for name, why in mismatched.items()))
    return STATE
