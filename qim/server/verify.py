"""`python -m qim.server.verify [--write]`: each declared replacement against the installed
libraries, as start-up would judge it, with the digest each original has now.

After re-verifying a replacement on a new library release (read the originals' changes, run
tests/server/), `--write` puts the installed versions and digests into qim/server/catalog.py.
Run it in a process that has not imported qim.asgi: the digests are of the stock code.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from qim.server.catalog import REPLACEMENTS
from qim.server.declarations import IDENTITY, PRESENT, current_digest, mismatch, version_of

CATALOG = Path(__file__).with_name("catalog.py")


def report() -> list[str]:
    lines = []
    for replacement in REPLACEMENTS:
        why = mismatch(replacement)
        lines.append(f"{replacement.name}: {'verifies' if why is None else 'stock: ' + why}")
        for original in replacement.originals:
            lines.append(f"    {original}: {current_digest(original)} (declared {original.digest})")
    return lines


def write_catalog() -> int:
    """Rewrite the catalog's versions and digests to the installed ones; how many changed."""
    text = CATALOG.read_text()
    changed = 0
    for replacement in REPLACEMENTS:
        for original in replacement.originals:
            now = current_digest(original)
            if now == original.digest or original.digest == PRESENT or original.digest.startswith(IDENTITY):
                continue
            pattern = re.compile(
                rf'(Original\((?:"{re.escape(original.target)}"|\w+), "{re.escape(original.attribute)}", ")'
                rf'{re.escape(original.digest)}(")'
            )
            text, count = pattern.subn(lambda m: m.group(1) + now + m.group(2), text)
            changed += count
    for name in ("daphne", "autobahn", "twisted"):
        installed = version_of(name)
        text, count = re.subn(rf'(\{{"{name}": ")[^"]+(")', lambda m: m.group(1) + str(installed) + m.group(2), text)
        changed += count
    CATALOG.write_text(text)
    return changed


def main(argv: list[str]) -> int:
    if "--write" in argv:
        print(f"{write_catalog()} declarations rewritten in {CATALOG}")
        return 0
    print("\n".join(report()))
    return 0 if all(mismatch(replacement) is None for replacement in REPLACEMENTS) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
