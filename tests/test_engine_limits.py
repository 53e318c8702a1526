"""The engine on files built to break it: nesting that crashed libcst's native parser, syntax errors
that only libcst accepted or that took it tens of seconds, one long line, a worker that dies. Each
file's result must stand on its own, and no file may take the process down."""

from __future__ import annotations

import ast
import faulthandler
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from gradlint import deep, engine, parse
from gradlint.config import Settings
from gradlint.engine import RuleSet, lint_files, lint_source

RULESET = RuleSet.from_settings(Settings())

FUNCTION = textwrap.dedent("""\
    import torch


    class Exp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.out = x.exp()
            return ctx.out

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.out
    """)


def _check(*paths: Path, jobs: int = 1) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradlint", "check", "--no-cache", "--jobs", str(jobs),
                           *map(str, paths)], capture_output=True, text=True, timeout=600)


def _codes(result) -> list[str]:
    return [finding.code for finding in result.findings]


@pytest.mark.parametrize("terms", [2_000, 6_000])
def test_a_long_flat_and_chain_is_analyzed_not_called_too_deeply_nested(terms):
    # CPython keeps `a and a and ...` flat; libcst nests one node per term.
    source = FUNCTION + "y = " + " and ".join(["a"] * terms) + "\n"
    result = lint_source(source, "chain.py", RULESET)
    assert result.internal_error is None
    assert _codes(result) == ["GL101"]


def test_ten_thousand_terms_do_not_crash_the_process(tmp_path):
    # Was SIGSEGV with no output: libcst's parser ran out of the main thread's 8 MiB stack.
    path = tmp_path / "chain.py"
    path.write_text(FUNCTION + "y = " + " and ".join(["a"] * 10_000) + "\n")
    run = _check(path)
    assert run.returncode == 1, (run.returncode, run.stderr)
    assert "chain.py:7:9: GL101" in run.stdout
    assert "GL001" not in run.stdout


@pytest.mark.parametrize("depth", [300, 1_500])
def test_brackets_no_python_accepts_are_a_syntax_error(tmp_path, depth):
    # 1,500 crashed the process (CPython's error sent the file to libcst's parser, which overflowed);
    # 300 passed as "All checks passed!" on 3.11, because libcst accepts what CPython's limit rejects.
    path = tmp_path / "brackets.py"
    path.write_text(FUNCTION + "x = " + "(" * depth + "1" + ")" * depth + "\n")
    run = _check(path)
    assert run.returncode == 1, (run.returncode, run.stderr)
    assert "brackets.py:13:" in run.stdout and "GL000 syntax error: too many nested parentheses" in run.stdout


def test_an_ordinary_syntax_error_never_reaches_libcst(monkeypatch):
    # A 12 KB `+` chain ending in a syntax error took libcst 10-40 s to reject (its time grows
    # faster than the square of the chain). Only an error on a line with 3.12 syntax is asked of it.
    def parse_module(*_args, **_kwargs):
        raise AssertionError("libcst was asked about a plain syntax error")

    monkeypatch.setattr(cst, "parse_module", parse_module)
    source = FUNCTION + "y = " + " + ".join(["a"] * 3_000) + " +\n"
    result = lint_source(source, "plus.py", RULESET)
    assert [(f.code, f.line) for f in result.findings] == [("GL000", 13)]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 reads its own syntax")
@pytest.mark.parametrize("line", ["type Pair = tuple[int, int]", "def first[T](xs: list[T]) -> T: return xs[0]",
                                  "class Box[T]: pass", "label = f\"{'a' + \"b\"}\"",
                                  # 3.11 puts these two errors on the string's last line, with no prefix
                                  'report = f"""\nrows\n{"\\n".join(rows)}\nend\n"""',
                                  'report = f"""\n{x  # a comment\n}\n"""',
                                  # a form feed is no line break for CPython's line numbers
                                  "\x0c\ndef first[T](xs: list[T]) -> T: return xs[0]"])
def test_three_twelve_syntax_still_passes_on_an_older_python(line):
    result = lint_source(FUNCTION + line + "\n", "newer.py", RULESET)
    assert _codes(result) == ["GL101"]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 reads its own syntax")
def test_three_twelve_syntax_does_not_excuse_an_error_elsewhere():
    result = lint_source(FUNCTION + "x = (1 +\ntype Pair = int\n", "newer.py", RULESET)
    assert _codes(result) == ["GL000"]


def _count_positioned(monkeypatch) -> list[int]:
    """How many nodes each positions pass of libcst places, one entry per pass. The statements
    parsed and placed before (by earlier tests) are forgotten: they would be placed from memory."""
    parse.forget()
    covered: list[int] = []
    resolve = MetadataWrapper.resolve

    def counting(self, provider):
        found = resolve(self, provider)
        covered.append(len(found))
        return found

    monkeypatch.setattr(MetadataWrapper, "resolve", counting)
    return covered


def _whole_module(module, tree, source, hits):
    """engine._positions as it was: every node of the module placed."""
    return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)


def test_positions_are_computed_only_for_the_statements_that_hold_findings(monkeypatch):
    # One finding used to cost positions for the whole module: seconds for a 200 KB data literal.
    data = "TABLE = [" + ", ".join(["1"] * 20_000) + "]\n"
    source = data + "\n\n# the op\n" + FUNCTION + "\n\n" + data
    covered = _count_positioned(monkeypatch)
    result = lint_source(source, "data.py", RULESET)
    assert [(f.code, f.line, f.column) for f in result.findings] == [("GL101", 11, 9)]
    assert covered and max(covered) < 200  # the class alone, not the 40,000 elements


def test_a_finding_in_one_method_of_a_large_class_places_that_method_only(monkeypatch):
    # Was: the whole class (2.5 s for a method of torch's 11,000-line distributed_test.py).
    table = "        TABLE = [" + ", ".join(["1"] * 5_000) + "]\n"
    padding = "".join(f"\n    def helper_{index}(self):\n{table}" for index in range(4))
    source = FUNCTION.replace("    @staticmethod\n    def backward", padding.lstrip("\n") + "\n    @staticmethod\n    def backward")
    covered = _count_positioned(monkeypatch)
    result = lint_source(source, "big_class.py", RULESET)
    assert [(f.code, f.line, f.column) for f in result.findings] == [("GL101", 7, 9)]
    assert covered and max(covered) < 200  # forward and the class header, not 20,000 elements
    monkeypatch.setattr(engine, "_positions", _whole_module)
    assert lint_source(source, "big_class.py", RULESET).findings == result.findings


def test_positions_by_statement_agree_with_positions_of_the_whole_module(monkeypatch):
    root = Path(__file__).parent
    checked = 0
    for path in sorted((root / "corpus").rglob("*.py")) + sorted((root.parent / "rules").glob("gl*.py")):
        source = path.read_text(encoding="utf-8")
        by_statement = lint_source(source, str(path), RULESET)
        if not by_statement.findings:
            continue
        with monkeypatch.context() as patched:
            patched.setattr(engine, "_positions", _whole_module)
            by_module = lint_source(source, str(path), RULESET)
        assert by_statement.findings == by_module.findings, path
        checked += 1
    assert checked >= 20


def test_a_worker_that_dies_loses_its_own_file_only(tmp_path, monkeypatch):
    # Was: the pool broke and all 201 files read "the worker checking this file (or one beside it) died".
    if multiprocessing.get_start_method() != "fork":
        pytest.skip("the crash is planted by patching the parent, which only a forked worker inherits")
    paths = []
    for index in range(201):
        path = tmp_path / f"op_{index:03}.py"
        path.write_text(FUNCTION)
        paths.append(str(path))
    crasher = paths[57]
    lint_file = engine.lint_file

    def crashing(path, *args, **kwargs):
        if path == crasher:
            faulthandler.disable()  # pytest's, inherited by the fork: no dump in the test's output
            os.kill(os.getpid(), signal.SIGSEGV)
        return lint_file(path, *args, **kwargs)

    monkeypatch.setattr(engine, "lint_file", crashing)
    results = {result.path: result for result in lint_files([(p, frozenset()) for p in paths], RULESET,
                                                               1 << 20, jobs=2)}
    assert sorted(results) == sorted(paths)
    assert _codes(results[crasher]) == ["GL001"]
    assert "signal SIGSEGV" in results[crasher].findings[0].message
    assert all(_codes(results[p]) == ["GL101"] for p in paths if p != crasher)


def test_a_file_no_stack_can_hold_is_refused_with_a_message(monkeypatch):
    monkeypatch.setattr(deep, "STACK_PER_SOURCE_BYTE", 1 << 50)
    result = lint_source(FUNCTION, "op.py", RULESET)
    assert [(f.code, f.message.split(":")[0]) for f in result.findings] == [("GL001", "too large to analyze")]


# Constructs at sizes real code never reaches, each written as a file CPython accepts or rejects;
# none may crash, hang or turn into an internal error, and what CPython accepts is analyzed.
NESTED = {
    "and": lambda n: "y = " + " and ".join(["a"] * n),
    "or": lambda n: "def g(a):\n    return " + " or ".join(["a"] * n),
    "compare": lambda n: "y = " + " < ".join(["a"] * n),
    "plus": lambda n: "y = " + " + ".join(["a"] * n),
    "attribute": lambda n: "y = a" + ".b" * n,
    "subscript": lambda n: "y = a" + "[0]" * n,
    "call": lambda n: "y = f" + "()" * n,
    "not": lambda n: "y = " + "not " * n + "a",
    "minus": lambda n: "y = " + "-" * n + "a",
    "lambda": lambda n: "y = " + "lambda: " * n + "a",
    "brackets": lambda n: "y = " + "[" * n + "]" * n,
    "strings": lambda n: "y = " + " ".join(['"a"'] * n),
    "elif": lambda n: "if a:\n    pass\n" + "elif a:\n    pass\n" * n,
    "indent": lambda n: "".join(" " * i + "if a:\n" for i in range(n)) + " " * n + "pass",
    "list": lambda n: "y = [" + ", ".join(["1"] * n) + "]",
}


def test_nesting_of_every_kind_never_crashes_or_loses_a_file(tmp_path):
    paths = []
    for kind, make in NESTED.items():
        for size in (150, 1_200, 8_000):
            if kind in ("plus", "attribute", "subscript", "call") and size == 1_200:
                size = 1_000
            path = tmp_path / f"{kind}_{size}.py"
            path.write_text(FUNCTION + make(size) + "\n")
            paths.append(path)
    run = _check(*paths, jobs=2)
    assert run.returncode == 1, (run.returncode, run.stderr[-2000:])
    assert "internal error" not in run.stderr.lower() and "Traceback" not in run.stderr
    for path in paths:
        source = path.read_text()
        lines = [line for line in run.stdout.splitlines() if line.startswith(str(path) + ":")]
        assert lines, f"{path.name}: no result"
        # gradlint's test of a readable file is CPython's parse (engine._python_ast), not its
        # bytecode compiler: on Python 3.10 the compiler alone gives up on 8,000 nested `+` that
        # the parser reads, and gradlint analyses such a file (GL101 here).
        try:
            compile(source, str(path), "exec", ast.PyCF_ONLY_AST)
        except (SyntaxError, RecursionError, MemoryError):
            assert all(" GL000 " in line or " GL001 " in line for line in lines), lines
        else:
            assert any(" GL101 " in line for line in lines) or path.name.startswith("strings_"), lines


def test_fuzzing_mutated_real_sources_and_deep_programs_finds_nothing():
    # bench/fuzz.py at a size CI affords (about 30 s); run it with --files 6000 for the long trial.
    run = subprocess.run([sys.executable, str(Path(__file__).parent.parent / "bench" / "fuzz.py"),
                          "--files", "200", "--batch", "100", "--seed", "7"], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    summary = run.stdout.splitlines()[-1]
    assert summary.startswith("200 files in") and summary.endswith(" 0 problems"), summary
    assert int(summary.split(", ")[1].split()[0]) > 0, summary  # --fix was exercised, not only check


def test_the_syntax_check_without_an_ast_answers_as_the_ast_parse():
    """Files no rule is marked in get engine._syntax_error (the parser and symbol table, no AST
    objects), the others engine._python_ast: a file must be reported the same either way."""
    from gradlint import engine

    sources = [make(size) + "\n" for make in NESTED.values() for size in (10, 150, 1_000, 8_000)]
    sources += [
        "nonlocal x\n",  # only the symbol table rejects it
        "def f():\n    global x\n    x: int = 1\n",  # annotated name declared global: symbol table
        "return 1\n", "yield 1\n", "await x\n", "break\n",  # only the bytecode compiler rejects these
        "def f(a, a):\n    pass\n",  # duplicate argument: symbol table
        "f(**a, *b)\n", "x = (\n", "def f(:\n", "print 'a'\n", "a = 1 +\n", "\0x = 1\n",
        "x = '\\e'\n",  # an invalid escape: a SyntaxWarning, no error
        "match x:\n    case [a, *b]:\n        pass\n", "async def f():\n    return [x async for x in y]\n",
        "with (a as b, c as d):\n    pass\n", "def f[T](x: T) -> T:\n    return x\n", "type X = int\n",
        "f'{a!r:>{w}}'\n", "f'{\"nested\"}'\n",
    ]
    sources += [path.read_text(errors="replace") for path in sorted(Path(__file__).parent.glob("fixtures/**/*.py"))]
    assert len(sources) > 100
    for source in sources:
        checked = engine._syntax_error(source, "x.py")
        parsed = engine._python_ast(source, "x.py")
        expected = parsed if isinstance(parsed, engine.Finding) else None
        assert checked == expected, source[:80]


MXNET_TRAINING = textwrap.dedent("""\
    import mxnet as mx
    from mxnet.gluon import nn


    def train(net, trainer, loader, criterion):
        running_loss = 0
        for x, y in loader:
            with mx.autograd.record():
                loss = criterion(net(x), y).sum()
            running_loss += loss
            loss.backward()
            trainer.step(x.shape[0])
    """)


@pytest.mark.parametrize("header, codes", [("", []), ("import torch\n", ["GL104"])])
def test_a_file_of_another_framework_that_never_names_torch_gets_no_rule(header, codes):
    """DGL's examples/mxnet: gluon's `loss.backward()` and `nn.` are not torch's. Once the file
    names torch, it is read as torch code again."""
    assert [f.code for f in lint_source(header + MXNET_TRAINING, "train.py", RULESET).findings] == codes
