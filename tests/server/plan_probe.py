"""`python -m tests.server.plan_probe '<json>'`: qim.server.tuning.plan in a fresh interpreter.

A test process may already have installed the server tuning (any test that imports qim.asgi
does), after which the originals no longer verify there; plan() is meant to judge stock code,
so the tests ask a process that never installed anything. The JSON may set `mode`,
`versions` (distribution -> the version to pretend is installed) and `verified_on`
(replacement -> the versions to pretend it declares); the answer is one JSON line."""

from __future__ import annotations

import dataclasses
import json
import sys

from qim.server.catalog import REPLACEMENTS
from qim.server.declarations import version_of
from qim.server.tuning import plan


def main(request: dict) -> dict:
    pretended = request.get("versions", {})
    declared = request.get("verified_on", {})
    replacements = [dataclasses.replace(r, verified_on=declared[r.name]) if r.name in declared else r
                    for r in REPLACEMENTS]
    chosen, stock = plan(request.get("mode", "on"), replacements,
                         lambda distribution: pretended.get(distribution) or version_of(distribution))
    return {"chosen": [r.name for r in chosen], "stock": stock}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
