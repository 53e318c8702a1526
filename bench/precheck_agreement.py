#!/usr/bin/env python3
"""Do the prechecks hide findings? Every file of a tree linted twice in one process: with each
rule's precheck, and with every precheck answering yes (the analysis alone decides).

    python bench/precheck_agreement.py DIR [--limit N]

Prints the findings of both runs, the files where they differ (each difference: a finding the
precheck hid, or one it let through that the analysis alone does not make), and both times.
The prechecks decide on CPython's tree which files reach libcst: a finding only the second run
has is a precheck that is not conservative, or an analysis false positive the precheck hides.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gradlint.engine import RuleSet, lint_source  # noqa: E402
from gradlint.registry import all_rules  # noqa: E402
from gradlint.source import DEFAULT_MAX_BYTES  # noqa: E402


def run(files: list[Path], rules: RuleSet) -> dict[str, list[tuple]]:
    found = {}
    for path in files:
        data = path.read_bytes()
        if len(data) > DEFAULT_MAX_BYTES:
            continue
        source = data.decode("utf-8", errors="replace")
        result = lint_source(source, str(path), rules)
        found[str(path)] = sorted((f.code, f.line, f.column, f.message) for f in result.findings)
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tree", type=Path)
    ap.add_argument("--limit", type=int, help="only the first N files, sorted by path")
    args = ap.parse_args()
    files = sorted(args.tree.rglob("*.py"))[: args.limit]
    rules = RuleSet(all_rules(), {})
    start = time.perf_counter()
    gated = run(files, rules)
    gated_s = time.perf_counter() - start
    for rule in all_rules():
        type(rule).precheck = lambda self, tree: True
    start = time.perf_counter()
    alone = run(files, rules)
    alone_s = time.perf_counter() - start
    differ = [path for path in gated if gated[path] != alone[path]]
    print(f"{len(gated)} files; findings with the prechecks {sum(map(len, gated.values()))}, "
          f"the analysis alone {sum(map(len, alone.values()))}; files that differ: {len(differ)}")
    print(f"time: {gated_s:.1f} s with the prechecks, {alone_s:.1f} s without ({alone_s / gated_s:.2f}x)")
    for path in differ:
        print(path)
        for finding in sorted(set(alone[path]) - set(gated[path])):
            print("  hidden by a precheck:", *finding[:3], finding[3])
        for finding in sorted(set(gated[path]) - set(alone[path])):
            print("  only with the prechecks:", *finding[:3], finding[3])
    return 0


if __name__ == "__main__":
    sys.exit(main())
