#!/usr/bin/env python3
"""Edits of the modules other files read, on a real project: does the cache still answer as a
fresh run, and how many files does each edit re-check?

    python bench/partial_invalidation.py DIR [DIR ...] --edits 40 --seed 1

Each DIR (a project or package tree) is copied to a temporary folder and checked once with a
fresh cache; the modules that some other file's findings read (the entries' dependencies) are the
ones edited. Each edit is one of: a line deleted, a line made a `pass` in place, a blank line
inserted (everything below moves), a def appended, a comment appended, the module deleted. After
each edit the tree is checked with the cache and without it, in this process (`--jobs 1`): the two
must give the same findings. The table counts the files checked again, against the files whose
entries list the edited module at all (what a dependency on the module's bytes re-checks). The edit
is then undone and the tree checked once more with the cache: that must give the first run's
findings again, and each edit starts from the same cache.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

KINDS = ("line deleted", "line made a pass", "blank line inserted", "def appended", "comment appended", "module deleted")


def edit(source: str, kind: str, rng: random.Random) -> str | None:
    if kind == "module deleted":
        return None
    lines = source.splitlines(keepends=True)
    code = [i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")]
    if kind == "comment appended" or not code:
        return source + "\n# edited by bench/partial_invalidation.py\n"
    if kind == "def appended":
        return source + "\n\ndef _added_by_bench(x):\n    return x\n"
    at = rng.choice(code)
    if kind == "line deleted":
        return "".join(lines[:at] + lines[at + 1:])
    if kind == "line made a pass":
        indent = lines[at][:len(lines[at]) - len(lines[at].lstrip())]
        return "".join(lines[:at] + [f"{indent}pass\n"] + lines[at + 1:])
    return "".join(lines[:at] + ["\n"] + lines[at:])  # blank line inserted


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="+", type=Path)
    ap.add_argument("--edits", type=int, default=40, help="edits per tree (default 40)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)

    from gradlint import engine
    from gradlint.check import CheckRequest, run_check

    rng = random.Random(args.seed)
    readers: dict[str, set[str]] = {}  # module -> the files whose findings read it
    lint_source = engine.lint_source

    def recording_lint_source(source, path, ruleset):
        result = lint_source(source, path, ruleset)
        for module, reads in result.depends.items():
            # Modules read, not the places looked at in vain or the layout (__init__.py, markers).
            if module != path and module.endswith(".py") and reads.digest and "absent" not in reads.parts:
                readers.setdefault(module, set()).add(path)
        return result

    rows = []
    mismatches = 0
    with tempfile.TemporaryDirectory(prefix="gradlint-partial-") as tmp:
        os.environ["GRADLINT_CACHE_DIR"] = str(Path(tmp) / "cache")
        for number, tree in enumerate(args.trees):
            root = Path(tmp) / f"{number}-{tree.name}"
            shutil.copytree(tree, root, ignore=shutil.ignore_patterns("__pycache__", ".git"))
            (root / "pyproject.toml").write_text("[tool.gradlint]\n")

            def run(**options):
                outcome = run_check(CheckRequest(paths=[root], jobs=1, **options))
                findings = sorted((f.path, f.line, f.column, f.code, f.message) for f in outcome.findings)
                return findings, outcome.files_checked - outcome.files_cached, outcome.files_checked

            # Which file reads which module: recorded as the first run checks each file.
            readers.clear()
            engine.lint_source = recording_lint_source
            try:
                baseline, _, _ = run()
            finally:
                engine.lint_source = lint_source
            readers_by_path = {path: len(files) for path, files in readers.items()}
            modules = sorted(path for path in readers_by_path if Path(path).is_file())
            if not modules:
                print(f"{tree}: no file reads another module of the project; nothing to edit")
                continue
            for _ in range(args.edits):
                module = Path(rng.choice(modules))
                kind = rng.choice(KINDS)
                original = module.read_text()
                edited = edit(original, kind, rng)
                if edited is None:
                    module.unlink()
                else:
                    module.write_text(edited)
                cached, rechecked, total = run()
                fresh, _, _ = run(no_cache=True)
                module.write_text(original)
                undone, _, _ = run()
                same = cached == fresh and undone == baseline
                mismatches += not same
                rows.append((tree.name, module.relative_to(root).as_posix(), kind, rechecked,
                             readers_by_path[str(module)] + 1, total, same))
    width = max((len(r[1]) for r in rows), default=10)
    print(f"{'tree':<24} {'module edited':<{width}} {'edit':<20} checked again  by bytes  same as fresh")
    for name, module, kind, rechecked, by_bytes, total, same in rows:
        print(f"{name[:24]:<24} {module:<{width}} {kind:<20} {rechecked:>13}  {by_bytes:>8}  {'yes' if same else 'NO'}")
    if rows:
        by_kind = Counter()
        sums: dict[str, list[int]] = {}
        for _, _, kind, rechecked, by_bytes, _, _ in rows:
            by_kind[kind] += 1
            sums.setdefault(kind, [0, 0])
            sums[kind][0] += rechecked
            sums[kind][1] += by_bytes
        print()
        for kind in KINDS:
            if by_kind[kind]:
                print(f"{kind}: {by_kind[kind]} edits, {sums[kind][0] / by_kind[kind]:.1f} files checked again on average "
                      f"(a dependency on the bytes: {sums[kind][1] / by_kind[kind]:.1f})")
    print(f"{len(rows)} edits, {mismatches} where the cached run differs from a fresh one (or, once undone, from the first)")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
