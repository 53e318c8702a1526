"""Fuzz `gradlint check` and `--fix` with mutated real sources and generated programs.

    python bench/fuzz.py [--files N] [--seed S] [--source DIR ...] [--keep DIR]

Real sources (the installed torch package by default, or the folders given) are cut, spliced,
duplicated and sprinkled with junk; generated programs nest the constructs libcst nests deeper
than CPython does. Every batch is checked by the real CLI in a process of its own (`--jobs 2`), so
a crash is seen as a crash. It fails (exit 1) on any of: a process killed by a signal, an exit
status other than 0 or 1, a traceback or internal error on stderr, a file missing from the JSON
output's file count, a fixed file that no longer compiles where the original did, and a second
`--fix` that changes a fixed file again. tests/test_engine_limits.py runs a small size in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JUNK = ["(", ")", "[", "]", "{", "}", ":", "\n", "    ", "\t", "\\", "'", '"', '"""', "#", "lambda", "yield",
        "ctx.", "save_for_backward(", ".detach()", "backward(", " and ", "@", "\x0c", "\u00e9", "\r"]
DEEP = [
    lambda n: "y = " + " and ".join(["a"] * n),
    lambda n: "y = " + " + ".join(["a"] * min(n, 2_500)),
    lambda n: "y = " + "(" * n + "1" + ")" * n,
    lambda n: "y = a" + ".b" * min(n, 2_500),
    lambda n: "y = " + "not " * n + "a",
    lambda n: "y = [" + ", ".join(["1"] * n) + "]",
    lambda n: "".join(" " * i + "if a:\n" for i in range(min(n, 150))) + " " * min(n, 150) + "pass",
    lambda n: "if a:\n    pass\n" + "elif a:\n    pass\n" * n,
]
FUNCTION = ("import torch\nclass F(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
            "        ctx.out = x.exp()\n        return ctx.out\n")


def _mutate(text: str, rng: random.Random) -> str:
    for _ in range(rng.randint(1, 4)):
        if not text:
            break
        at = rng.randrange(len(text) + 1)
        choice = rng.random()
        if choice < 0.4:
            text = text[:at] + rng.choice(JUNK) * rng.randint(1, 3) + text[at:]
        elif choice < 0.6:
            end = min(len(text), at + rng.randint(1, 200))
            text = text[:at] + text[end:]
        elif choice < 0.8:
            end = min(len(text), at + rng.randint(1, 400))
            text = text[:end] + text[at:end] + text[end:]
        else:
            text = FUNCTION + text
    return text


def _compiles(text: str) -> bool:
    try:
        compile(text, "fuzz.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False
    return True


def _gradlint(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradlint", *args], cwd=cwd, capture_output=True,
                          text=True, errors="replace", timeout=1200)


def _problems(run: subprocess.CompletedProcess, what: str) -> list[str]:
    found = []
    if run.returncode < 0:
        found.append(f"{what}: killed by signal {-run.returncode}")
    elif run.returncode not in (0, 1):
        found.append(f"{what}: exit {run.returncode}: {run.stderr.strip()[-300:]}")
    if "Traceback" in run.stderr or "internal error" in run.stderr.lower():
        found.append(f"{what}: {run.stderr.strip()[-300:]}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--source", action="append", type=Path)
    parser.add_argument("--keep", type=Path, help="keep each batch's files here")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    roots = args.source
    if not roots:
        import importlib.util
        spec = importlib.util.find_spec("torch")
        roots = [Path(spec.origin).parent] if spec and spec.origin else [Path(__file__).parent.parent]
    sources = sorted(p for root in roots for p in root.rglob("*.py") if p.stat().st_size < 200_000)
    # Code with fixes to apply, so that --fix is exercised too: the bundled examples and fixtures.
    repository = Path(__file__).resolve().parent.parent
    fixable = sorted(repository.glob("examples/*.py")) + sorted(repository.glob("tests/fixtures/*.py"))
    if not sources:
        print("no sources to mutate", file=sys.stderr)
        return 2
    problems: list[str] = []
    made = fixed_files = 0
    started = time.perf_counter()
    slowest = (0.0, "")
    while made < args.files:
        with tempfile.TemporaryDirectory() as tmp:
            batch = Path(tmp)
            size = min(args.batch, args.files - made)
            for index in range(size):
                draw = rng.random()
                if draw < 0.15:
                    text = FUNCTION + rng.choice(DEEP)(rng.choice([10, 300, 3_000, 20_000])) + "\n"
                elif draw < 0.35 and fixable:
                    text = Path(rng.choice(fixable)).read_text(encoding="utf-8")
                    if draw < 0.28:
                        text = _mutate(text, rng)
                else:
                    text = _mutate(Path(rng.choice(sources)).read_text(encoding="utf-8", errors="replace"), rng)
                (batch / f"f{index:04}.py").write_text(text, encoding="utf-8", errors="surrogatepass")
            made += size
            t0 = time.perf_counter()
            run = _gradlint("check", "--no-cache", "--jobs", "2", "--output-format", "json", "--exit-zero",
                            "--select", "ALL", ".", cwd=batch)
            elapsed = time.perf_counter() - t0
            slowest = max(slowest, (elapsed / size, f"batch at {made}"))
            problems += _problems(run, f"check, files {made - size}-{made}")
            if not problems and run.stdout.strip():
                json.loads(run.stdout)
            before = {p.name: p.read_text(encoding="utf-8", errors="surrogatepass") for p in batch.glob("*.py")}
            fixed = _gradlint("check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "ALL", "--exit-zero", ".",
                              cwd=batch)
            problems += _problems(fixed, f"fix, files {made - size}-{made}")
            after = {p.name: p.read_text(encoding="utf-8", errors="surrogatepass") for p in batch.glob("*.py")}
            changed = [name for name in before if before[name] != after[name]]
            fixed_files += len(changed)
            for name in changed:
                if _compiles(before[name]) and not _compiles(after[name]):
                    problems.append(f"fix broke {name} (batch ending {made}): it compiled before")
            if changed:
                again = _gradlint("check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "ALL", "--exit-zero",
                                  *changed, cwd=batch)
                problems += _problems(again, "second fix")
                for name in changed:
                    if (batch / name).read_text(encoding="utf-8", errors="surrogatepass") != after[name]:
                        problems.append(f"a second --fix changed {name} again (batch ending {made})")
            if args.keep:
                shutil.copytree(batch, args.keep / f"batch_{made:06}", dirs_exist_ok=True)
            print(f"{made}/{args.files} files, {elapsed:.1f} s for this batch, {len(changed)} fixed, "
                  f"{len(problems)} problems so far", flush=True)
    total = time.perf_counter() - started
    print(f"{made} files in {total:.0f} s, {fixed_files} changed by --fix; slowest batch "
          f"{slowest[0] * 1000:.0f} ms/file; {len(problems)} problems")
    for problem in problems:
        print("  " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
