#!/usr/bin/env python3
"""Lint speed: gradlint against ruff and TorchFix on the same corpus, in the same run.

    python bench/lint_speed.py                      # the installed torch package's .py files
    python bench/lint_speed.py --corpus DIR --limit 500 --repeat 3
    python bench/lint_speed.py --torchfix-limit 100 # TorchFix on a spread-out sample, extrapolated

The corpus defaults to the installed torch package, found with importlib.util.find_spec("torch"),
which locates the package without importing it: this script never imports torch. Its .py files
are copied, sorted and (with --limit) cut to the first N, into one temporary tree, and every tool
is given that tree's root directory (not thousands of arguments). The copy keeps each tool's default
excludes ("site-packages", ".venv", ...) and any config above the corpus from dropping files, so all
tools see the same files.

Commands (no fixes, exit status ignored; each run is timed from process start to exit):
    gradlint check --exit-zero --quiet --jobs J --no-cache DIR                      (cold)
    GRADLINT_CACHE_DIR=TMP gradlint check --exit-zero --quiet --jobs J DIR          (cached: after one warming run)
    the same after one widely imported file is edited (the note counts the files checked again):
    a comment appended, then a comment on its largest class's header line (an edit inside a
    statement other files read, so they are checked again too)
    with --one-core: both tools under `taskset -c 0`, gradlint with --jobs 1 (CPU time, in effect)
    ruff check --isolated --select ALL --no-cache --exit-zero --quiet DIR           (cold)
    ruff check --isolated --select ALL --cache-dir TMP --exit-zero --quiet DIR      (cached: after one warming run)
    flake8 --isolated --select TOR --exit-zero DIR     (TorchFix as a flake8 plugin; or its own CLI; no cache)
TorchFix takes about 0.2-0.5 s a file: --torchfix-limit N runs it on N files spread evenly over the
sorted corpus and extrapolates its per-file rate to the whole corpus; that row is labelled so.
The time reported is the median of --repeat runs.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TORCHFIX_VENV = Path("/tmp/tfvenv/bin")


@dataclass
class Result:
    tool: str
    files: int
    seconds: float | None  # None: the tool failed
    note: str = ""
    extrapolated: bool = False

    @property
    def rate(self) -> float | None:
        return self.files / self.seconds if self.seconds else None


def default_corpus() -> Path:
    spec = importlib.util.find_spec("torch")  # a top-level package: located, not imported
    if spec is None or not spec.submodule_search_locations:
        sys.exit("torch is not installed in this interpreter: pass --corpus DIR")
    return Path(next(iter(spec.submodule_search_locations)))


def collect(corpus: Path, limit: int | None) -> list[Path]:
    files = sorted(p.relative_to(corpus) for p in corpus.rglob("*.py") if p.is_file())
    return files[:limit] if limit else files


def materialize(corpus: Path, rel_files: list[Path], dest: Path) -> Path:
    for rel in rel_files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(corpus / rel, dest / rel)
    return dest


def spread(items: list[Path], n: int) -> list[Path]:
    """n items taken at even steps over the sorted list (deterministic, covers the whole tree)."""
    if n >= len(items):
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def find_exe(name: str) -> str | None:
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def gradlint_cmd(opt: str | None) -> list[str] | None:
    if opt:
        return opt.split()
    exe = find_exe("gradlint")
    if exe:
        return [exe]
    if importlib.util.find_spec("gradlint") is not None:
        return [sys.executable, "-m", "gradlint"]
    return None


def ruff_cmd(opt: str | None) -> list[str] | None:
    if opt:
        return opt.split()
    exe = find_exe("ruff")
    if exe:
        return [exe]
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    return None


def torchfix_cmd(opt: str | None, mode: str) -> list[str] | None:
    """The flake8 plugin (default, as TorchFix is usually run) or TorchFix's own CLI."""
    name = "flake8" if mode == "flake8" else "torchfix"
    if opt:
        path = Path(opt)
        if path.is_dir():  # a venv or its bin/
            path = path / name if (path / name).exists() else path / "bin" / name
        cmd = [str(path)]
    else:
        found = shutil.which(name) or (str(DEFAULT_TORCHFIX_VENV / name) if (DEFAULT_TORCHFIX_VENV / name).exists() else None)
        if not found:
            return None
        cmd = [found]
    if mode == "flake8":
        # flake8 also runs pyflakes/pycodestyle (filtered out by --select), as users run TorchFix.
        check = subprocess.run(cmd + ["--version"], capture_output=True, text=True, check=False)
        if check.returncode != 0 or "TorchFix" not in check.stdout:
            return None
    return cmd


def time_once(cmd: list[str], cwd: Path, env: dict | None = None) -> tuple[float | None, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, env=env)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return None, f"exit {proc.returncode}: " + " | ".join(tail)
    return took, ""


def measure(tool: str, cmd: list[str], cwd: Path, files: int, repeat: int, verbose: bool,
            env: dict | None = None, warm: bool = False) -> Result:
    """With `warm`, one untimed run first fills the tool's cache."""
    if warm:
        took, err = time_once(cmd, cwd, env)
        if took is None:
            return Result(tool, files, None, note=err)
    times = []
    for i in range(repeat):
        took, err = time_once(cmd, cwd, env)
        if verbose:
            print(f"  {tool} run {i + 1}/{repeat}: " + (f"{took:.2f} s" if took is not None else err), file=sys.stderr)
        if took is None:
            return Result(tool, files, None, note=err)
        times.append(took)
    return Result(tool, files, statistics.median(times), note=f"median of {repeat}" if repeat > 1 else "")


def ruff_file_count(cmd: list[str], target: Path, cwd: Path) -> int | None:
    proc = subprocess.run(cmd + ["check", "--isolated", "--show-files", str(target)], cwd=cwd,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return None
    return sum(1 for line in proc.stdout.splitlines() if line.strip().endswith(".py"))


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_table(results: list[Result], gl: Result | None) -> None:
    header = ("tool", "files", "seconds", "files/s", "gradlint cold speed / tool speed")
    rows = []
    for r in results:
        ratio = None
        if gl is not None and gl.rate and r.rate:
            ratio = gl.rate / r.rate
        rows.append((r.tool, str(r.files), fmt(r.seconds, ".2f"), fmt(r.rate, ".1f"),
                     "1.00 (baseline)" if r is gl else (fmt(ratio, ".2f") + ("x" if ratio else ""))))
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    notes = [f"  {r.tool}: {r.note}" for r in results if r.note]
    if notes:
        print("notes:")
        print("\n".join(notes))


_RECHECK = """
import sys
from pathlib import Path
from gradlint.check import CheckRequest, run_check
outcome = run_check(CheckRequest(paths=[Path(sys.argv[1])]))
print(outcome.files_checked - outcome.files_cached, outcome.files_checked)
"""

# Imported by many of torch's modules: a change here is the worst case for the project index.
_EDITED = ("nn/modules/module.py", "nn/functional.py")


def one_file_changed(target: Path, cache_env: dict) -> list[Result]:
    """After the cached runs, two edits of one widely imported file, each followed by a run with
    the same cache: a comment appended (no part another file reads changes: only that file is
    checked again), then a comment on the header line of its largest class (a statement other
    files' findings rest on: they are checked again too). Each row's note says how many files."""
    edited = next((target / name for name in _EDITED if (target / name).is_file()), None)
    if edited is None:
        edited = next(iter(sorted(target.rglob("*.py"))), None)
    if edited is None:
        return []
    results = []
    text = edited.read_text() + "\n# edited by bench/lint_speed.py\n"
    edited.write_text(text)
    results.append(_recheck("gradlint cached, one file changed", target, cache_env, f"{edited.relative_to(target)}: a comment appended"))
    try:
        classes = [node for node in ast.parse(text).body if isinstance(node, ast.ClassDef)]
    except SyntaxError:
        classes = []
    lines = text.splitlines(keepends=True)
    largest = max(classes, key=lambda node: (node.end_lineno or node.lineno) - node.lineno, default=None)
    if largest is not None and lines[largest.lineno - 1].rstrip().endswith(":"):
        header = lines[largest.lineno - 1]
        lines[largest.lineno - 1] = header.rstrip("\r\n") + "  # edited by bench/lint_speed.py" + header[len(header.rstrip("\r\n")):]
        edited.write_text("".join(lines))
        results.append(_recheck("gradlint cached, one class edited", target, cache_env,
                                f"{edited.relative_to(target)}: a comment on class {largest.name}'s line"))
    return results


def _recheck(tool: str, target: Path, cache_env: dict, what: str) -> Result:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _RECHECK, str(target)], env=cache_env, capture_output=True,
                          text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0 or not proc.stdout.strip():
        return Result(tool, 0, None, note=proc.stderr.strip()[-200:])
    rechecked, total = map(int, proc.stdout.split())
    return Result(tool, total, seconds, note=f"{what}: {rechecked} of {total} files checked again")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, help="directory of .py files (default: the installed torch package)")
    ap.add_argument("--limit", type=int, help="only the first N files, sorted by path")
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool; the median is reported (default 1)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="gradlint --jobs (default: all cores)")
    ap.add_argument("--gradlint", help="gradlint command (default: gradlint beside this Python, on PATH, or -m gradlint)")
    ap.add_argument("--ruff", help="ruff command (default: ruff beside this Python, on PATH, or -m ruff)")
    ap.add_argument("--torchfix", help=f"flake8 (or torchfix) executable, or a venv holding it (default: PATH, then {DEFAULT_TORCHFIX_VENV})")
    ap.add_argument("--torchfix-mode", choices=("flake8", "cli"), default="flake8",
                    help="run TorchFix as `flake8 --select TOR` (default) or as its own `torchfix` CLI")
    ap.add_argument("--torchfix-limit", type=int,
                    help="run TorchFix on N files spread over the corpus and extrapolate its rate to all files")
    ap.add_argument("--one-core", action="store_true", help="also run gradlint (--jobs 1) and ruff pinned to one core")
    ap.add_argument("--no-ruff", action="store_true")
    ap.add_argument("--no-torchfix", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each run's time to stderr")
    args = ap.parse_args(argv)

    corpus = (args.corpus or default_corpus()).resolve()
    if not corpus.is_dir():
        return ap.error(f"--corpus {corpus} is not a directory")
    rel_files = collect(corpus, args.limit)
    if not rel_files:
        return ap.error(f"no .py files under {corpus}")
    nbytes = sum((corpus / f).stat().st_size for f in rel_files)

    gl_cmd = gradlint_cmd(args.gradlint)
    if gl_cmd is None:
        print("gradlint is not installed (pip install -e .)", file=sys.stderr)
        return 2
    rf_cmd = None if args.no_ruff else ruff_cmd(args.ruff)
    tf_cmd = None if args.no_torchfix else torchfix_cmd(args.torchfix, args.torchfix_mode)

    with tempfile.TemporaryDirectory(prefix="gradlint-bench-") as tmp:
        tmpdir = Path(tmp)
        target = materialize(corpus, rel_files, tmpdir / corpus.name)
        print(f"corpus: {corpus} -> {len(rel_files)} .py files, {nbytes / 1e6:.1f} MB "
              f"(copied to a temporary tree){f', first {args.limit} sorted' if args.limit else ''}")
        print(f"cpus: {os.cpu_count()}; repeat: {args.repeat}; python: {sys.version.split()[0]}")

        results: list[Result] = []
        cmd = gl_cmd + ["check", "--exit-zero", "--quiet", "--jobs", str(args.jobs)]
        print("gradlint:", " ".join(cmd + ["--no-cache", str(target)]), flush=True)
        gl = measure("gradlint cold (--no-cache)", cmd + ["--no-cache", str(target)], tmpdir, len(rel_files),
                     args.repeat, args.verbose)
        results.append(gl)
        cache_env = {**os.environ, "GRADLINT_CACHE_DIR": str(tmpdir / "gradlint-cache")}
        results.append(measure("gradlint cached", cmd + [str(target)], tmpdir, len(rel_files), args.repeat,
                               args.verbose, env=cache_env, warm=True))

        if args.gradlint:
            # The rechecks count files in-process, with the gradlint this Python imports: after a
            # --gradlint command's cached runs they measured another gradlint's cache (an older
            # commit's, run from a worktree, read by this one: 2,187 of 2,285 files checked again).
            print("gradlint cached, one file changed: not measured with --gradlint (see the code)", flush=True)
        else:
            results.extend(one_file_changed(target, cache_env))

        if args.one_core and shutil.which("taskset"):
            # Both tools on one core, one process each: the CPU time either needs for the corpus.
            cmd = ["taskset", "-c", "0", *gl_cmd, "check", "--exit-zero", "--quiet", "--jobs", "1", "--no-cache", str(target)]
            results.append(measure("gradlint cold, one core", cmd, tmpdir, len(rel_files), args.repeat, args.verbose))
            if rf_cmd:
                cmd = ["taskset", "-c", "0", *rf_cmd, "check", "--isolated", "--select", "ALL", "--no-cache",
                       "--exit-zero", "--quiet", str(target)]
                results.append(measure("ruff --select ALL cold, one core", cmd, tmpdir, len(rel_files), args.repeat,
                                       args.verbose))

        if rf_cmd:
            version = subprocess.run(rf_cmd + ["--version"], capture_output=True, text=True, check=False).stdout.strip()
            cmd = rf_cmd + ["check", "--isolated", "--select", "ALL", "--no-cache", "--exit-zero", "--quiet", str(target)]
            print(f"ruff ({version}):", " ".join(cmd), flush=True)
            r = measure("ruff --select ALL cold", cmd, tmpdir, len(rel_files), args.repeat, args.verbose)
            seen = ruff_file_count(rf_cmd, target, tmpdir)
            if seen is not None and seen != len(rel_files):
                r.note = (r.note + "; " if r.note else "") + f"ruff itself lists {seen} files"
            results.append(r)
            cached = [c if c != "--no-cache" else f"--cache-dir={tmpdir / 'ruff-cache'}" for c in cmd]
            results.append(measure("ruff --select ALL cached", cached, tmpdir, len(rel_files), args.repeat,
                                   args.verbose, warm=True))
        else:
            print("ruff: not found, skipped")

        if tf_cmd:
            version = subprocess.run(tf_cmd + ["--version"], capture_output=True, text=True, check=False).stdout.strip()
            subset = rel_files
            tf_target = target
            if args.torchfix_limit and args.torchfix_limit < len(rel_files):
                subset = spread(rel_files, args.torchfix_limit)
                tf_target = materialize(corpus, subset, tmpdir / "torchfix-subset" / corpus.name)
            if args.torchfix_mode == "flake8":
                cmd = tf_cmd + ["--isolated", "--select", "TOR", "--exit-zero", str(tf_target)]
            else:
                cmd = tf_cmd + [str(tf_target)]
            print(f"TorchFix ({version.splitlines()[0] if version else '?'}):", " ".join(cmd), flush=True)
            name = "TorchFix (flake8 --select TOR)" if args.torchfix_mode == "flake8" else "TorchFix (torchfix CLI)"
            if subset is not rel_files:
                name += " subset"
            t = measure(name, cmd, tmpdir, len(subset), args.repeat, args.verbose)
            if args.torchfix_mode == "cli" and t.seconds is None and t.note.startswith("exit 1"):
                t.note = "torchfix exits 1 when it finds something; " + t.note
            results.append(t)
            if subset is not rel_files and t.rate:
                t.note = (t.note + "; " if t.note else "") + (
                    f"{len(subset)} files spread evenly over the sorted corpus (every ~{len(rel_files) / len(subset):.0f}th)")
                results.append(Result(
                    name.replace(" subset", "") + " EXTRAPOLATED", len(rel_files), len(rel_files) / t.rate,
                    note=f"estimate: the subset's rate ({t.rate:.2f} files/s) applied to all {len(rel_files)} files, not measured",
                    extrapolated=True,
                ))
        else:
            print("TorchFix: not found, skipped (pass --torchfix PATH)")

    print()
    print_table(results, gl if gl.seconds else None)
    if gl.seconds:
        print()
        by_tool = {r.tool: r for r in results}
        for r in results:
            if r is gl or not r.rate:
                continue
            ratio = gl.rate / r.rate
            if r.tool in ("gradlint cached, one file changed", "gradlint cached, one class edited"):
                print(f"{r.tool.removeprefix('gradlint cached, ')}: {r.seconds:.2f} s ({r.note})")
            elif r.tool == "gradlint cold, one core":
                ruff_one = by_tool.get("ruff --select ALL cold, one core")
                if ruff_one and ruff_one.seconds:
                    print(f"one core (CPU time): gradlint {r.seconds:.1f} s, ruff {ruff_one.seconds:.1f} s: "
                          f"{r.seconds / ruff_one.seconds:.2f}x ruff's time")
            elif r.tool == "ruff --select ALL cold, one core":
                continue
            elif r.tool.startswith("gradlint cached"):
                print(f"cache: a warm run takes {r.seconds / gl.seconds:.3f} of a cold one "
                      f"({gl.seconds / r.seconds:.1f}x faster)")
            elif r.tool == "ruff --select ALL cached":
                print(f"cached: gradlint cached at {r.rate and next(x for x in results if x.tool == 'gradlint cached').rate / r.rate:.2f}x "
                      "ruff cached's speed")
            elif r.tool.startswith("ruff"):
                verdict = "meets" if ratio >= 1 else "misses"
                print(f"target 'at or below ruff uncached': gradlint takes {r.rate / gl.rate:.2f}x ruff's time -> {verdict}")
            elif r.tool.startswith("TorchFix") and (r.extrapolated or not args.torchfix_limit or r.files == len(rel_files)):
                verdict = "meets" if ratio >= 20 else "misses"
                print(f"target 'at least 20x TorchFix': gradlint at {ratio:.1f}x TorchFix's speed"
                      f"{' (TorchFix rate from a subset)' if r.extrapolated else ''} -> {verdict}")
    return 0 if gl.seconds else 1


if __name__ == "__main__":
    sys.exit(main())
