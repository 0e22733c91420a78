"""What a replacement of a library's internals declares, and how a declaration is checked.

Modelled on Django's system checks: each replacement says what it expects to find (the
library versions it was verified on, and the original attributes it replaces or relies on),
and a start-up that finds something else leaves that piece stock with a WARNING instead of
breaking the node or silently running code written for another release (qim/server/tuning.py).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import textwrap
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable, Literal

# The digest an Original gives for an attribute that must not exist yet.
ABSENT = "absent"
# A digest that asks only that the attribute exists: a wrapper that calls whatever is there.
PRESENT = "present"
# A digest "is:<dotted path>" asks for identity with that object instead of a code hash
# (autobahn's module attribute `pformat` must still be pprint's own).
IDENTITY = "is:"


@dataclass(frozen=True)
class Original:
    """One attribute a replacement sets or relies on, as it must be before QIM touches it."""

    # Dotted path of the module or class that holds the attribute.
    target: str
    attribute: str
    # sha256 of the original's source (first 16 hex digits), ABSENT, PRESENT, or IDENTITY + a path.
    digest: str

    def __str__(self) -> str:
        return f"{self.target}.{self.attribute}"


@dataclass(frozen=True)
class Replacement:
    """One piece of QIM's server tuning, declared once (qim/server/catalog.py)."""

    # The name in GET /api/v1/node and in the metric qim_server_tuning{name}.
    name: str
    # What it changes and what that buys, in one line (docs/performance.md has the figures).
    why: str
    # Distribution name -> the exact version this replacement was verified on.
    verified_on: dict[str, str]
    # What it replaces, or reads past the library's public API; all checked before any is set.
    originals: tuple[Original, ...]
    # "module:function" that installs it; None for a path that only reads (switched by its flag).
    apply: str | None = None
    # Other replacements it cannot work without: stock when any of them is.
    requires: tuple[str, ...] = ()
    # "tuning": off with QIM_SERVER_TUNING=off. "fix": a correctness repair that QIM's contract
    # depends on (a clear error for every bad input), installed in both modes when it verifies.
    kind: Literal["tuning", "fix"] = "tuning"

    def installer(self) -> Callable[[], Any] | None:
        if self.apply is None:
            return None
        module, _, function = self.apply.partition(":")
        return getattr(importlib.import_module(module), function)


def resolve(path: str) -> Any:
    """The object at a dotted path: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise ImportError(f"nothing importable in {path}")


def code_digest(value: Any) -> str:
    """sha256 of a function's or class's source, dedented, first 16 hex digits; of its repr
    for anything without source."""
    try:
        text = textwrap.dedent(inspect.getsource(value))
    except (TypeError, OSError):
        text = repr(value)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def current_digest(original: Original) -> str:
    """What `original.digest` would have to be for the code installed now."""
    holder = resolve(original.target)
    # An attribute a class inherits is read through it: the base class's code is what runs.
    if not hasattr(holder, original.attribute):
        return ABSENT
    value = getattr(holder, original.attribute)
    if original.digest == PRESENT:
        return PRESENT
    if original.digest.startswith(IDENTITY):
        return original.digest if value is resolve(original.digest[len(IDENTITY):]) else code_digest(value)
    return code_digest(value)


def version_of(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def mismatch(replacement: Replacement, version: Callable[[str], str | None] = version_of) -> str | None:
    """Why `replacement` must stay stock here (a version or an original that differs), or None."""
    for distribution, verified in replacement.verified_on.items():
        found = version(distribution)
        if found != verified:
            return f"{distribution} {found or 'missing'} installed, verified on {verified}"
    for original in replacement.originals:
        try:
            found = current_digest(original)
        except (ImportError, AttributeError) as exc:
            return f"{original} not found ({exc.__class__.__name__})"
        if found != original.digest:
            return f"{original} is not the original it was verified against (digest {found}, expected {original.digest})"
    return None
