"""Precision and recall of every gradlint rule on the labelled corpus in tests/corpus/.

The corpus holds realistic custom autograd Functions, nn.Modules and training/eval
loops. ``tests/corpus/expected.txt`` lists every finding the linter must report
(``FILENAME:LINE CODE``); any other GL1xx-GL3xx finding is a false positive.
The linter runs as a subprocess through its CLI, exactly as a user would run it.

Run ``pytest -s tests/test_corpus.py`` to see the per-rule table.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
EXPECTED_FILE = CORPUS_DIR / "expected.txt"

from gradlint.registry import all_rules

# Every rule that is on by default must have labels here: a new rule cannot land unmeasured.
RULES = tuple(r.code for r in all_rules() if r.default_enabled)
RULE_CODE = re.compile(r"^GL[1-3]\d\d$")
MIN_PRECISION = 0.95
MIN_RECALL = 0.90

# (filename relative to the corpus, 1-based line, code)
Finding = tuple[str, int, str]


def load_expected(path: Path = EXPECTED_FILE) -> set[Finding]:
    expected: set[Finding] = set()
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"(\S+?):(\d+)\s+(GL\d{3})", line)
        assert m, f"{path.name}:{lineno}: malformed label {raw!r} (want FILENAME:LINE CODE)"
        filename, row, code = m.group(1), int(m.group(2)), m.group(3)
        target = CORPUS_DIR / filename
        assert target.is_file(), f"{path.name}:{lineno}: no such corpus file {filename!r}"
        n_lines = len(target.read_text(encoding="utf-8").splitlines())
        assert 1 <= row <= n_lines, f"{path.name}:{lineno}: line {row} is outside {filename} ({n_lines} lines)"
        expected.add((filename, row, code))
    return expected


def run_linter() -> list[dict]:
    cmd = [sys.executable, "-m", "gradlint", "check", "--output-format", "json", "--exit-zero", "--isolated", str(CORPUS_DIR)]
    proc = subprocess.run(cmd, cwd=CORPUS_DIR.parent, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (
        f"`{' '.join(cmd)}` exited {proc.returncode} (expected 0 with --exit-zero)\n"
        f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
    )
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(
            f"gradlint did not print JSON: {exc}\n--- stdout ---\n{proc.stdout[-4000:]}\n"
            f"--- stderr ---\n{proc.stderr[-4000:]}"
        ) from None
    assert isinstance(data, list), f"JSON output is not a list: {type(data).__name__}"
    return data


def corpus_relative(filename: str) -> str:
    path = Path(filename)
    if not path.is_absolute():
        path = (CORPUS_DIR.parent / path).resolve()
    try:
        return path.resolve().relative_to(CORPUS_DIR).as_posix()
    except ValueError:
        return filename


def source_line(filename: str, row: int) -> str:
    try:
        lines = (CORPUS_DIR / filename).read_text(encoding="utf-8").splitlines()
        return lines[row - 1].strip() if 1 <= row <= len(lines) else "<no such line>"
    except OSError:
        return "<unreadable>"


def score(expected: set[Finding], actual: set[Finding]) -> dict[str, dict[str, float]]:
    table = {}
    codes = sorted(set(RULES) | {c for _, _, c in expected} | {c for _, _, c in actual})
    for code in codes:
        exp = {f for f in expected if f[2] == code}
        got = {f for f in actual if f[2] == code}
        tp, fp, fn = len(exp & got), len(got - exp), len(exp - got)
        table[code] = {
            "expected": len(exp),
            "tp": tp,
            "fp": fp,
            "fn": fn,
            "precision": tp / (tp + fp) if tp + fp else 1.0,
            "recall": tp / (tp + fn) if tp + fn else 1.0,
        }
    return table


def format_table(table: dict[str, dict[str, float]]) -> str:
    rows = [f"{'code':<6} {'expected':>8} {'TP':>4} {'FP':>4} {'FN':>4} {'precision':>9} {'recall':>7}"]
    for code, s in table.items():
        rows.append(
            f"{code:<6} {s['expected']:>8} {s['tp']:>4} {s['fp']:>4} {s['fn']:>4} "
            f"{s['precision']:>9.3f} {s['recall']:>7.3f}"
        )
    return "\n".join(rows)


def format_mismatches(expected: set[Finding], actual: set[Finding], messages: dict[Finding, str]) -> str:
    out = []
    for title, items in (("false positives (reported, not expected)", actual - expected),
                         ("false negatives (expected, not reported)", expected - actual)):
        if not items:
            continue
        out.append(f"{title}:")
        for filename, row, code in sorted(items):
            out.append(f"  {filename}:{row} {code}: {source_line(filename, row)}")
            msg = messages.get((filename, row, code))
            if msg:
                out.append(f"      gradlint: {msg}")
    return "\n".join(out)


def test_corpus_precision_recall():
    expected = load_expected()
    raw = run_linter()

    actual: set[Finding] = set()
    messages: dict[Finding, str] = {}
    engine_errors = []
    for item in raw:
        code = str(item.get("code"))
        filename = corpus_relative(str(item.get("filename", "")))
        row = int((item.get("location") or {}).get("row", 0))
        if not RULE_CODE.match(code):
            engine_errors.append(f"  {filename}:{row} {code}: {item.get('message')}")
            continue
        key = (filename, row, code)
        actual.add(key)
        messages.setdefault(key, str(item.get("message", "")))

    table = score(expected, actual)
    report = format_table(table)
    mismatches = format_mismatches(expected, actual, messages)
    print("\ngradlint corpus: per-rule precision / recall\n" + report)
    if mismatches:
        print(mismatches)

    problems = []
    if engine_errors:
        problems.append("engine findings (GL0xx or unknown codes) on corpus files:\n" + "\n".join(engine_errors))
    for code in RULES:
        if table[code]["expected"] == 0:
            problems.append(f"{code}: no expected findings in the corpus")
    for code, s in table.items():
        if s["precision"] < MIN_PRECISION:
            problems.append(f"{code}: precision {s['precision']:.3f} < {MIN_PRECISION}")
        if s["recall"] < MIN_RECALL:
            problems.append(f"{code}: recall {s['recall']:.3f} < {MIN_RECALL}")

    assert not problems, "\n".join(problems) + "\n\n" + report + ("\n\n" + mismatches if mismatches else "")


def test_expected_labels_cover_every_rule():
    expected = load_expected()
    counts = defaultdict(int)
    for _, _, code in expected:
        counts[code] += 1
    assert set(counts) <= set(RULES), f"unknown codes in expected.txt: {sorted(set(counts) - set(RULES))}"
    for code in RULES:
        assert counts[code] >= 6, f"{code}: only {counts[code]} expected findings (want at least 6)"


def test_corpus_files_compile():
    for path in sorted(CORPUS_DIR.glob("*.py")):
        compile(path.read_text(encoding="utf-8"), str(path), "exec")
