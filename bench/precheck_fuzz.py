#!/usr/bin/env python3
"""Do the prechecks hide findings on code nobody wrote for them? Real functions, with real
statements of other files spliced in, linted twice in one process: with each rule's gates
(markers and precheck) and with every gate open (the analysis alone decides).

    python bench/precheck_fuzz.py [--files N] [--seed S] [--source DIR ...] [--keep DIR] [--open-markers]

The prechecks decide on CPython's tree which files reach libcst (GL103/GL104's by the targets of
the file's stores alone: gradlint/graph_store_precheck.py). bench/precheck_agreement.py
compares the two on real files as they are; this makes new ones where they disagree most often:
statements that store (`x.append(...)`, `total += ...`, `self.h = ...`), make a graph
(`out = self.encoder(h)`, `loss = model(x)`) or step (`loss.backward()`) are taken from the
sources and inserted, at the right indentation, into functions of other files of the sources,
sometimes inside a new `for batch in loader:` loop. Each variant that compiles is linted both
ways. It fails (exit 1) when a precheck turns away a finding the analysis alone makes; with
--keep, each such variant is written there. A finding the gates let through and the analysis
alone does not make cannot happen (the gates only remove rules) and is reported as a bug too.

A rule's text markers are part of what the rule is (GL103/GL104 report only in a file that shows
training: a backward(), autograd.grad, a training_step, or a model call's result kept; each rule's
doc says so), so by default they stay; --open-markers opens them too, to see what they keep out.
"""

from __future__ import annotations

import argparse
import ast
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gradlint import engine, graph_store_precheck  # noqa: E402
from gradlint.registry import all_rules  # noqa: E402

# What a statement must mention to be worth splicing: a store a rule may report, or a source of
# graph-attached values, or a step.
_WORTH = (".append(", "+=", ".backward(", "model(", "self.", "loss", "optimizer.step(", ".extend(", "] = ")
_LOOP = "for batch in loader:"


def _default_sources() -> list[Path]:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    return [Path(spec.origin).parent] if spec and spec.origin else []


class _Statement:
    """A one-line statement of the sources: its text, the names it binds and reads, and whether it
    stores (appends, adds into a total, assigns an attribute or an item)."""

    def __init__(self, node: ast.stmt, text: str):
        self.text = text
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        self.binds = {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)
                      and isinstance(n.ctx, ast.Store)}
        self.reads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        self.makes = isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        self.stores = isinstance(node, ast.AugAssign) or any(isinstance(t, (ast.Attribute, ast.Subscript))
                                                             for t in targets if t is not None) \
            or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr in ("append", "extend", "insert", "add", "update"))


def _statements(tree: ast.Module, lines: list[str]) -> list[_Statement]:
    """One-line simple statements of the file's functions worth splicing, dedented."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.Expr)) and node.lineno == node.end_lineno:
            text = lines[node.lineno - 1].strip()
            if any(w in text for w in _WORTH) and not text.endswith(("\\", ":")) and ";" not in text \
                    and len(text) < 160:
                found.append(_Statement(node, text))
    return found


def _splice(pool: list[_Statement], makers: dict[str, list[_Statement]], rng: random.Random) -> list[str]:
    """Statements to insert: at random from the pool, or (half the time) a statement that makes
    a value with a call and one that stores what it made, so the pair may keep a graph."""
    if rng.random() < 0.5:
        storing = [s for s in rng.sample(pool, min(len(pool), 40)) if s.stores]
        for consumer in storing:
            producers = [p for name in consumer.reads for p in makers.get(name, ())]
            if producers:
                chosen = [rng.choice(producers).text, consumer.text]
                if rng.random() < 0.7:  # a step in the file: what GL103/GL104's markers ask for
                    chosen.append(rng.choice(("loss.backward()", "optimizer.step()", "opt.zero_grad()")))
                return chosen
    return [rng.choice(pool).text for _ in range(rng.randint(1, 4))]


def _blocks(tree: ast.Module) -> list[list[ast.stmt]]:
    """The statement lists of the file's functions (their bodies and the blocks inside them)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                for field in ("body", "orelse"):
                    block = getattr(inner, field, None)
                    if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                        found.append(block)
    return found


def _first_line(statement: ast.stmt) -> int:
    return min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", ()))])


def _variant(text: str, pool: list[_Statement], makers: dict[str, list[_Statement]],
             rng: random.Random) -> str | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    blocks = _blocks(tree)
    if not blocks:
        return None
    lines = text.splitlines(keepends=True)
    block = rng.choice(blocks)
    at = rng.choice(block)
    line = _first_line(at)
    if line < 1 or line > len(lines):
        return None
    indent = lines[line - 1][: len(lines[line - 1]) - len(lines[line - 1].lstrip())]
    spliced = _splice(pool, makers, rng)
    if rng.random() < 0.4:
        step = "    " if "\t" not in indent else "\t"
        new = [indent + _LOOP + "\n", *(indent + step + s + "\n" for s in spliced)]
    else:
        new = [indent + s + "\n" for s in spliced]
    return "".join(lines[: line - 1] + new + lines[line - 1:])


def _compiles(text: str) -> bool:
    try:
        compile(text, "variant.py", "exec", ast.PyCF_ONLY_AST)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _findings(text: str, path: str, rules: engine.RuleSet) -> set[tuple]:
    result = engine.lint_source(text, path, rules)
    return {(f.code, f.line, f.column, f.message) for f in result.findings}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=500, help="variants to lint (default 500)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--source", type=Path, action="append", help="folders of real code (default: torch's)")
    ap.add_argument("--keep", type=Path, help="write each variant a gate disagrees on here")
    ap.add_argument("--open-markers", action="store_true", help="open the rules' text markers too")
    ap.add_argument("--training", action="store_true",
                    help="splice into files that show training (a backward() or a training_step) only")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    files = sorted(p for root in (args.source or _default_sources()) for p in root.rglob("*.py")
                   if p.stat().st_size < 200_000)
    if args.training:
        files = [p for p in files if any(m in p.read_text(encoding="utf-8", errors="replace")
                                         for m in (".backward(", "training_step"))]
    if not files:
        print("no sources", file=sys.stderr)
        return 2
    pool: list[_Statement] = []
    for path in rng.sample(files, min(len(files), 400)):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            pool.extend(_statements(ast.parse(text), text.splitlines()))
        except (SyntaxError, ValueError, RecursionError):
            continue
    makers: dict[str, list[_Statement]] = {}
    for statement in pool:
        if statement.makes:
            for name in statement.binds:
                makers.setdefault(name, []).append(statement)
    rules = [r for r in all_rules() if r.default_enabled]
    gated_rules = engine.RuleSet(tuple(rules), {})
    precheck = {type(r): type(r).precheck for r in rules}
    markers = {type(r): type(r).markers for r in rules}
    may_store = graph_store_precheck.may_store_across_steps

    def gates(open_: bool) -> None:
        for rule in rules:
            type(rule).precheck = (lambda self, tree: True) if open_ else precheck[type(rule)]
            type(rule).markers = ("",) if open_ and args.open_markers else markers[type(rule)]
        graph_store_precheck.may_store_across_steps = (lambda tree: True) if open_ else may_store

    linted = hidden = extra = 0
    with_findings = 0
    started = time.perf_counter()
    problems: list[str] = []
    while linted < args.files:
        source = rng.choice(files)
        variant = _variant(source.read_text(encoding="utf-8", errors="replace"), pool, makers, rng)
        if variant is None or not _compiles(variant):
            continue
        linted += 1
        path = str(source)
        gates(open_=False)
        gated = _findings(variant, path, gated_rules)
        gates(open_=True)
        alone = _findings(variant, path, gated_rules)
        gates(open_=False)
        with_findings += bool(alone)
        if gated != alone:
            turned_away, let_through = alone - gated, gated - alone
            hidden += len(turned_away)
            extra += len(let_through)
            problems.append(f"{source}: hidden {sorted(turned_away)}; only gated {sorted(let_through)}")
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                (args.keep / f"variant_{linted:05}_{source.name}").write_text(variant, encoding="utf-8")
    seconds = time.perf_counter() - started
    print(f"{linted} variants ({with_findings} with findings) in {seconds:.0f} s; findings a gate hid: {hidden}; "
          f"findings only with the gates: {extra}")
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
