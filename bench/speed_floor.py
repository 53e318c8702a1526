#!/usr/bin/env python3
"""What a cold gradlint run cannot go below, against ruff's whole run, on one core.

    python bench/speed_floor.py                 # the installed torch package's .py files
    python bench/speed_floor.py --corpus DIR --limit 500

bench/lint_speed.py times whole runs. This script says how much of gradlint's one-core time is
parsing that the design needs whatever the rest of the analysis costs, so a speed goal can be
checked against it before anyone optimises towards it:
- CPython's parse of every file: gradlint reports syntax errors in every file it is given (ruff
  does too), and its cheapest check is CPython's parser and symbol table, in C; a file a rule
  may report in gets the AST parse instead (`engine._syntax_error`, `engine._python_ast`);
- libcst's parse of the files that reach the analysis (libcst is the analysis tree; which files
  reach it is decided by the rules' markers and prechecks, each measured to hide nothing: see
  docs/architecture.md), parsed here once each, as `gradlint/parse.py` parses them in a run.
The whole run is `lint_files` with one job in this process, as `gradlint check --jobs 1
--no-cache` runs it without the CLI around it; ruff runs as lint_speed.py runs it, as a process.
Everything is pinned to the first CPU this process may use; the times are CPU seconds (ruff's
is its wall time on that one core, as lint_speed.py's one-core row).

The corpus is copied into a temporary tree named as the corpus' directory, as lint_speed.py does
(the project index follows a package's own imports by its name).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import gc
import os
import subprocess
import symtable
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lint_speed import collect, default_corpus, materialize, ruff_cmd

from gradlint import deep, engine, parse
from gradlint.config import Settings
from gradlint.source import DEFAULT_MAX_BYTES


def _cpu(work) -> float:
    """The process' CPU seconds while `work` runs (libcst's parse runs on gradlint's deep-stack
    thread, gradlint/deep.py), with the cyclic collector off as gradlint's workers run."""
    enabled = gc.isenabled()
    gc.disable()
    start = time.process_time()
    try:
        work()
    finally:
        spent = time.process_time() - start
        if enabled:
            gc.enable()
    return spent


def whole_run(paths: list[str]) -> tuple[float, list[str]]:
    """The CPU time of linting `paths` with one job in this process, and the files analysed."""
    ruleset = engine.RuleSet.from_settings(Settings())
    analysed: list[str] = []
    start = time.process_time()
    for result in engine.lint_files([(p, frozenset()) for p in paths], ruleset, DEFAULT_MAX_BYTES, jobs=1):
        if result.analyzed:
            analysed.append(result.path)
    return time.process_time() - start, analysed


def cpython_parse(sources: dict[str, str], with_ast: set[str]) -> float:
    """CPython's parse of every file as the engine reads it: an AST for `with_ast`, the symbol
    table's syntax check for the rest."""
    def work() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for path, source in sources.items():
                try:
                    if path in with_ast:
                        compile(source, path, "exec", ast.PyCF_ONLY_AST)
                    else:
                        symtable.symtable(source, path, "exec")
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    pass
    return _cpu(work)


def libcst_parse(sources: list[str]) -> float:
    def work() -> None:
        for source in sources:
            with contextlib.suppress(Exception):  # a file libcst refuses costs what it cost
                deep.call(functools.partial(parse.parse, source), len(source))
            gc.collect(0)
    return _cpu(work)


def ruff_one_core(target: Path) -> float | None:
    cmd = ruff_cmd(None)
    if cmd is None:
        return None
    cpu = min(os.sched_getaffinity(0))
    start = time.perf_counter()
    done = subprocess.run(["taskset", "-c", str(cpu), *cmd, "check", "--isolated", "--select", "ALL",
                           "--no-cache", "--exit-zero", "--quiet", str(target)],
                          cwd=target.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start if done.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, help="a folder of .py files (default: the installed torch package)")
    parser.add_argument("--limit", type=int, help="the first N files only, sorted")
    args = parser.parse_args(argv)
    corpus = (args.corpus or default_corpus()).resolve()
    if not corpus.is_dir():
        parser.error(f"--corpus {corpus} is not a directory")
    files = collect(corpus, args.limit)
    if not files:
        parser.error(f"no .py files under {corpus}")
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    with tempfile.TemporaryDirectory(prefix="gradlint-floor-") as tmp:
        target = materialize(corpus, files, Path(tmp) / corpus.name)
        paths = sorted(str(p) for p in target.rglob("*.py"))
        sources = {p: Path(p).read_text(encoding="utf-8", errors="replace") for p in paths}
        total, analysed = whole_run(paths)
        gc.collect()
        # An AST for the files analysed, the symbol table's check for the rest: the files whose
        # prechecks turned them away got an AST in the run too, so this is below what it spent.
        cpython = cpython_parse(sources, set(analysed))
        cst = libcst_parse([sources[p] for p in analysed])
        ruff = ruff_one_core(target)
    size = sum(len(sources[p]) for p in analysed) / 1e6
    print(f"corpus: {corpus} -> {len(paths)} .py files; python {sys.version.split()[0]}; one core, CPU seconds")
    print(f"{'part of a cold gradlint run':58s} {'seconds':>8s} {'x ruff':>7s}")
    rows = [
        ("the whole run (lint_files, one job, no cache)", total),
        (f"libcst parse of the {len(analysed)} files analysed ({size:.1f} MB)", cst),
        (f"CPython parse of all {len(paths)} files (syntax errors)", cpython),
        ("floor: the two parses", cst + cpython),
        ("ruff --select ALL, whole run", ruff),
    ]
    for name, seconds in rows:
        ratio = f"{seconds / ruff:7.2f}" if ruff and seconds is not None else "      -"
        print(f"{name:58s} {seconds if seconds is not None else float('nan'):8.2f} {ratio}")
    if ruff:
        floor = (cst + cpython) / ruff
        print(f"\nthe parses alone take {floor:.2f}x ruff's whole run: "
              + ("'at or below ruff' is out of reach while these files are parsed so"
                 if floor >= 1 else f"the rest of the run has {ruff - cst - cpython:.1f} s left under ruff's time"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
