"""Lint sources: pre-filter, parse once, build the file model, run the selected rules, place
and filter the findings. Knows no rule by name."""

from __future__ import annotations

import ast
import gc
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import symtable
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from gradlint import deep, parse, prechecks
from gradlint.config import Settings
from gradlint.file_model import FileModel
from gradlint.fixes import SourceLines, apply_fixes, plan_to_fix
from gradlint.findings import FileResult, Finding, Severity
from gradlint.registry import all_rules
from gradlint.rule import Hit, Rule
from gradlint.cache import ResultCache
from gradlint.prescan import child_nodes
from gradlint.project import PrecheckAnswers, Project
from gradlint.code_text import code_only
from gradlint.source import DEFAULT_MAX_BYTES, Unreadable, decode_source, read_bytes, split_lines, text_digest
from gradlint.suppressions import Suppressions, find_suppressions, may_hold_our_codes, unused_findings

SYNTAX_ERROR = ("GL000", "syntax-error")
UNREADABLE = ("GL001", "unreadable-file")
UNUSED_NOQA = ("GL002", "unused-noqa")
# The engine's codes a selector can turn on and off, as a rule's (GL000 and GL001 are always on).
SELECTABLE_ENGINE_CODES = (UNUSED_NOQA[0],)
_ALWAYS_ON = frozenset({SYNTAX_ERROR[0], UNREADABLE[0]})


def selectable_codes() -> tuple[str, ...]:
    """Every code select, ignore, per-file-ignores and severity may name: the rules' and GL002."""
    return tuple(sorted([r.code for r in all_rules()] + list(SELECTABLE_ENGINE_CODES)))


_known_codes: frozenset[str] | None = None


def known_codes() -> frozenset[str]:
    """Every code gradlint has: a `# noqa` naming another GL code names a code that does not exist."""
    global _known_codes
    if _known_codes is None:
        _known_codes = frozenset(r.code for r in all_rules()) | _ALWAYS_ON | frozenset(SELECTABLE_ENGINE_CODES)
    return _known_codes


@dataclass(frozen=True)
class RuleSet:
    """The rules a run applies, resolved once from the settings (per worker, not per file)."""

    rules: tuple[Rule, ...]
    severity: dict[str, Severity]
    # The selectable engine codes on (GL002). Settings turn GL002 on by default; a RuleSet built
    # from a list of rules checks those rules only.
    engine: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls, settings: Settings) -> "RuleSet":
        rules = all_rules()
        codes = [r.code for r in rules] + list(SELECTABLE_ENGINE_CODES)
        defaults = [r.code for r in rules if r.default_enabled] + list(SELECTABLE_ENGINE_CODES)
        enabled = settings.enabled_codes(codes, defaults)
        return cls(tuple(r for r in rules if r.code in enabled), dict(settings.severity),
                   frozenset(SELECTABLE_ENGINE_CODES) & enabled)

    def key(self, max_bytes: int) -> str:
        """Everything besides the file's bytes and gradlint's build that decides its findings."""
        severities = ",".join(f"{code}={severity.value}" for code, severity in sorted(self.severity.items()))
        codes = sorted([r.code for r in self.rules] + list(self.engine))
        return f"{','.join(codes)};{severities};{max_bytes}"

    def without(self, codes: frozenset[str]) -> "RuleSet":
        if not codes:
            return self
        return RuleSet(tuple(r for r in self.rules if r.code not in codes), self.severity, self.engine - codes)


def _finding(path: str, code_name: tuple[str, str], line: int, column: int, message: str) -> Finding:
    return Finding(path=path, line=line, column=column, code=code_name[0], name=code_name[1],
                   message=message, severity=Severity.ERROR, end_line=line, end_column=column)


def _rules_marked_in(source: str, rules: Sequence[Rule]) -> list[Rule]:
    """The rules one of whose markers the text holds. Rules share needles ("autograd" is in
    eight of them): each is looked for once per file, which halves this pass on torch's sources."""
    seen: dict[str, bool] = {}

    def holds(needle: str) -> bool:
        found = seen.get(needle)
        if found is None:
            found = seen[needle] = needle in source
        return found

    return [rule for rule in rules if any(
        holds(marker) if isinstance(marker, str) else all(holds(part) for part in marker)
        for marker in rule.markers)]


# A file that imports another deep-learning framework and never names torch is that framework's
# code (DGL's examples/mxnet, a TensorFlow port beside the PyTorch one): its `loss.backward()` and
# `nn.` are not torch's, and no rule here is about it.
_OTHER_FRAMEWORK = re.compile(r"^[ \t]*(?:import|from)[ \t]+(?:mxnet|tensorflow|jax|paddle|oneflow|mindspore)\b",
                              re.MULTILINE)


def _another_frameworks(source: str) -> bool:
    return "torch" not in source and _OTHER_FRAMEWORK.search(source) is not None


def _python_ast(source: str, path: str) -> ast.Module | Finding | None:
    """CPython's own parse: about 10x cheaper than libcst, and its syntax messages ("'(' was
    never closed") are the ones users know. None: valid Python newer than the one running."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # `"\e"` in the user's strings: not ours to report
            return compile(source, path, "exec", ast.PyCF_ONLY_AST)
    except SyntaxError as error:
        if _newer_syntax(source, error):
            return None
        return _finding(path, SYNTAX_ERROR, error.lineno or 1, error.offset or 1, f"syntax error: {error.msg}")
    except (RecursionError, MemoryError, ValueError):
        return _finding(path, UNREADABLE, 1, 1, "too deeply nested to parse")


# What a 3.12 file holds that 3.10 and 3.11 reject: `type X = ...`, `def f[T]`/`class C[T]`, and
# f-strings that reuse their quote or hold a backslash or comment (PEP 701). libcst reads all of them.
_NEWER_SYNTAX_LINE = re.compile(r"^\s*type\s+[A-Za-z_]\w*\s*[=\[]|\b(?:def|class)\s+[A-Za-z_]\w*\s*\[|"
                                r"(?<![\w.])[rRbB]?[fF][rR]?['\"]")


def _newer_syntax(source: str, error: SyntaxError) -> bool:
    """Whether a file this Python rejects is still Python: 3.12 syntax checked on 3.10 or 3.11.
    libcst accepting the file is no proof (it reads 300 nested brackets, which no Python does), so
    CPython's error must also point at a line that holds 3.12 syntax. That textual gate also keeps
    libcst off the ordinary syntax errors, some of which take it tens of seconds (a long `+`
    chain). Asked only of files with a syntax error."""
    if sys.version_info >= (3, 12):
        return False  # nothing libcst reads is newer than 3.12's grammar
    lines = split_lines(source)  # CPython's line numbers: \f and \u2028 break no line
    if not error.lineno or not 0 < error.lineno <= len(lines):
        return False
    # 3.11 puts some f-string errors on the string's last line, which holds no prefix.
    if not _NEWER_SYNTAX_LINE.search(lines[error.lineno - 1]) and not str(error.msg).startswith("f-string"):
        return False

    def parses() -> bool:
        try:
            cst.parse_module(source)
        except Exception:  # noqa: BLE001 - any failure means: report CPython's syntax error
            return False
        return True

    try:
        return deep.call(parses, len(source))
    except (RecursionError, deep.NoStack):
        return False


def _syntax_error(source: str, path: str) -> Finding | None:
    """CPython's syntax check without building Python AST objects: its parser then its symbol
    table, both in C, with no bytecode made. For torch's 2,285 files (CPU time, measured twice,
    2026-12-04): 3.9 and 3.6 s, against 5.7 and 4.8 s compiling to bytecode and 6.9 and 6.1 s for
    an AST parse. The symbol table also rejects what only it checks (`nonlocal` at the top level);
    files with rules to run get an AST parse only, so such a file is re-read that way and reported
    the same in both cases."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SyntaxWarning for invalid escapes: not ours to report
        try:
            symtable.symtable(source, path, "exec")
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            tree = _python_ast(source, path)
            return tree if isinstance(tree, Finding) else None
    return None


def _precheck(rule: Rule, tree: ast.Module) -> bool:
    try:
        return rule.precheck(tree)
    except Exception:  # noqa: BLE001 - a precheck only saves time: if it fails, the rule itself decides
        # (a RecursionError too: libcst then meets the same depth and says so, GL001)
        return True


def _prechecked(rules: list[Rule], tree: ast.Module | None) -> list[Rule]:
    """The rules whose prechecks let the file through. A precheck saves the libcst parse and the
    analysis of a file no rule can report in; where statements are kept (the editor: parse.keep)
    and one rule already takes the file to the analysis, the parse of an unchanged statement costs
    nothing and the rest of the analysis is shared, so the remaining rules go without theirs (the
    prechecks find what the analysis finds: bench/precheck_agreement.py, test_realworld). That was
    12 of 46 ms of a lint of the LSP bench's script, GL103/GL104's precheck the most of it."""
    if tree is None:
        return list(rules)
    passed: list[Rule] = []
    for index, rule in enumerate(rules):
        if _precheck(rule, tree):
            passed.append(rule)
            if parse.keeping():
                return passed + list(rules[index + 1:])
    return passed


def lint_source(source: str, path: str, ruleset: RuleSet) -> FileResult:
    """Lint one file's text. Never raises for bad input: it becomes a GL000/GL001 finding.

    Three gates, cheapest first: each rule's text markers (none for another framework's file),
    then CPython's parse (which also reports syntax errors for every file) and each rule's
    precheck of that tree, and only then the libcst parse and the analysis, for the rules still
    in play."""
    result = FileResult(path)
    # GL002 reads the comments of a file whose comments name a GL code, even when no rule has a
    # finding to silence there: a rule the gates leave out has no finding in the file at all.
    noqa = UNUSED_NOQA[0] in ruleset.engine and may_hold_our_codes(source)
    rules = _rules_marked_in(source, ruleset.rules) if not _another_frameworks(source) else []
    if rules:  # read again in the code alone: a marker in a comment or docstring shows no code
        rules = _rules_marked_in(code_only(source), rules)
    if not rules:  # only the syntax check is left
        error = _syntax_error(source, path)
        if error is not None:
            result.findings.append(error)
        elif noqa:
            _report_unused(source, path, ruleset, result, find_suppressions(source))
        return result
    tree = _python_ast(source, path)
    if isinstance(tree, Finding):
        result.findings.append(tree)
        return result
    # Newer syntax than this Python's: no tree to precheck, so every rule goes on to libcst.
    answers = PrecheckAnswers(path, tree, _project_for) if tree is not None else None
    with prechecks.asking(answers):
        rules = _prechecked(rules, tree)
    begun = answers.project if answers is not None else None  # a precheck asked about another module
    if not rules:
        if begun is not None:
            result.depends = dict(begun.consulted)  # the prechecks' no rests on what they read there
        if noqa:
            _report_unused(source, path, ruleset, result, find_suppressions(source))
        return result
    result.analyzed = True
    try:
        return deep.call(lambda: _analyze(source, path, ruleset, rules, result, tree, noqa, begun), len(source))
    except deep.NoStack as error:
        result.findings.append(_finding(path, UNREADABLE, 1, 1, f"too large to analyze: it would need {error}"))
        return result


# The project modules this process has read (see gradlint/project.py): one per process, so a
# module imported by many checked files is parsed once per worker.
_project: Project | None = None


def _build_model(module: cst.Module, path: str, source: str, project: Project) -> FileModel:
    return FileModel(module, path, source, project)


_in_run = False  # inside lint_files: the files do not change under one run


def _project_for(path: str, tree: ast.Module | None) -> Project:
    """The project begun on the checked file (`tree`: its CPython tree, for the directories it
    puts on sys.path; None where there is none)."""
    global _project
    if _project is None:
        _project = Project(_worker_max_bytes or DEFAULT_MAX_BYTES, _build_model)
    elif not _in_run:
        _project.refresh()  # one file at a time (an editor): modules may have changed since
    _project.begin(path, tree)
    return _project


def _analyze(source: str, path: str, ruleset: RuleSet, rules: list[Rule], result: FileResult,
             tree: ast.Module | None, noqa: bool = False, begun: Project | None = None) -> FileResult:
    """The libcst parse, the model, the rules and the findings' positions: on the deep-stack
    thread, since each of them recurses once per level of libcst's tree (see gradlint/deep.py).
    `begun`: the project already begun on the file by its prechecks, whose reads count too (a
    rule they turned away rests on them)."""
    try:
        module = parse.parse_module(source, tree)
    except cst.ParserSyntaxError as error:  # CPython accepted it: syntax libcst does not support
        message = str(error.message).strip().splitlines()[0] if error.message else "invalid syntax"
        result.findings.append(_finding(path, SYNTAX_ERROR, error.raw_line, error.raw_column + 1,
                                        f"libcst cannot parse this file: {message}"))
        return result
    except RecursionError:
        result.findings.append(_finding(path, UNREADABLE, 1, 1, "too deeply nested to parse"))
        return result
    try:
        project = begun if begun is not None else _project_for(path, tree)
        model = FileModel(module, path, source, project)
        hits: list[tuple[Rule, Hit]] = []
        for rule in rules:
            hits.extend((rule, hit) for hit in rule.check(model))
        model.release()  # the hits hold nodes of the tree, never the model
        if hits:
            positions = _positions(module, tree, source, hits)
    except RecursionError:
        result.findings.append(_finding(path, UNREADABLE, 1, 1, "too deeply nested to analyze"))
        return result
    except Exception as error:  # a bug of ours: say where, keep the run going, exit 2 at the end
        result.internal_error = f"{type(error).__name__}: {error}"
        return result
    result.depends = dict(project.consulted)
    suppressions = find_suppressions(source) if hits or noqa else None
    lines = SourceLines(source) if any(hit.fix for _, hit in hits) else None
    seen: set[tuple[str, int, int]] = set()
    for rule, hit in hits:
        where = positions.get(hit.node)
        if where is None:
            continue
        line, column = where.start.line, where.start.column + 1
        key = (rule.code, line, column)
        if key in seen:  # a helper walked from two call sites reports once
            continue
        seen.add(key)
        if suppressions is not None and suppressions.silences(rule.code, line, where.end.line):
            continue
        severity = ruleset.severity.get(rule.code) or hit.severity or rule.severity
        fix = plan_to_fix(hit.fix, positions, lines) if hit.fix is not None and lines is not None else None
        result.findings.append(Finding(
            path=path, line=line, column=column, code=rule.code, name=rule.name, message=hit.message,
            severity=severity, end_line=where.end.line, end_column=where.end.column + 1, subject=hit.subject,
            fix=fix))
    if noqa:
        _report_unused(source, path, ruleset, result, suppressions)
    result.findings.sort()
    return result


def _report_unused(source: str, path: str, ruleset: RuleSet, result: FileResult,
                   suppressions: Suppressions) -> None:
    """GL002: the directives that name a GL code no finding of this file was silenced by. Only
    once the file's analysis has run to its end: every finding of a rule that ran (or that the
    gates left out: none) has been offered to `suppressions.silences` by then."""
    if not suppressions.directives:
        return
    checked = frozenset(r.code for r in ruleset.rules) | _ALWAYS_ON
    severity = ruleset.severity.get(UNUSED_NOQA[0]) or Severity.ERROR
    for finding in unused_findings(source, path, suppressions, UNUSED_NOQA, checked, known_codes(), severity):
        if not suppressions.silences(finding.code, finding.line):  # a noqa naming GL002 keeps it
            result.findings.append(finding)
    result.findings.sort()


def _positions(module: cst.Module, tree: ast.Module | None, source: str,
               hits: Sequence[tuple[Rule, Hit]]) -> Mapping[cst.CSTNode, CodeRange]:
    """Positions for the statements that hold a finding's node or its fix's nodes, not for the
    whole module: libcst computes positions by generating the code of every node it covers (about
    35 us a node, more than its parse), so one finding in a file with a 200 KB data literal cost
    seconds, and one in a method of an 11,000-line test class cost 2.5 s. A class or def is
    entered down to the statement of its body that holds the nodes; that statement is placed with
    its enclosing headers only (its siblings pruned, so columns stay what they are), at the line
    CPython gives it, checked against the text; anything that does not line up falls back to the
    whole module."""
    wanted = {id(hit.node) for _, hit in hits}
    for _, hit in hits:
        if hit.fix is not None:
            wanted.update(id(change.node) for change in hit.fix.changes)
    placed = _by_statement(module, tree, split_lines(source), wanted) if tree is not None else None
    if placed is None:
        return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return placed


def _by_statement(module: cst.Module, tree: ast.Module, source_lines: list[str],
                  wanted: set[int]) -> dict[cst.CSTNode, CodeRange] | None:
    """None when a node lies outside every statement (the module itself, its header) or a statement
    does not line up with CPython's."""
    positions: dict[cst.CSTNode, CodeRange] = {}
    pending = [((), module.body, tree.body, wanted)]
    while pending:
        ancestors, body, nodes, wanted = pending.pop()
        paired = _paired(body, nodes)
        if paired is None:
            return None
        for statement, node in paired:
            if not wanted:
                break
            top = ancestors[0] if ancestors else statement  # what the parse keeps them with
            inside = wanted & _ids_in(statement, top)
            if not inside:
                continue
            wanted = wanted - inside
            block = getattr(statement, "body", None)
            if isinstance(statement, (cst.ClassDef, cst.FunctionDef)) and isinstance(block, cst.IndentedBlock) \
                    and isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and id(statement) not in inside and _in_body(block, inside, top):
                pending.append(((*ancestors, statement), block.body, node.body, inside))
                continue
            if not _place(module, ancestors, top, statement, node.lineno, source_lines, positions):
                return None
        if wanted:
            return None
    return positions


def _paired(body: Sequence[cst.CSTNode], nodes: list[ast.stmt]) -> list[tuple[cst.CSTNode, ast.stmt]] | None:
    """Each of libcst's statements of a block with CPython's first statement of it: one libcst
    line of `a; b` is two CPython statements."""
    paired = []
    index = 0
    for statement in body:
        if index >= len(nodes):
            return None
        paired.append((statement, nodes[index]))
        index += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
    return paired if index == len(nodes) else None


def _in_body(block: cst.IndentedBlock, inside: set[int], top: cst.CSTNode) -> bool:
    found: set[int] = set()
    for statement in block.body:
        found |= inside & _ids_in(statement, top)
    return found == inside


def _ids_in(statement: cst.CSTNode, top: cst.CSTNode) -> frozenset[int]:
    """The ids of a statement's nodes, itself included; `top` is the top-level statement that
    holds it, with which the parse keeps them (an editor's next lint finds them again)."""
    return parse.memo("ids", statement, top, lambda: _holding_all([statement]))


def _place(module: cst.Module, ancestors: tuple[cst.CSTNode, ...], top: cst.CSTNode, statement: cst.CSTNode,
           line: int, source_lines: list[str], positions: dict[cst.CSTNode, CodeRange]) -> bool:
    """Positions for one statement and what it holds, from a module of it and its enclosing class
    and def headers alone; False when its line there does not hold the source's line."""
    placed = parse.memo("placed", statement, top, lambda: _placed_alone(module, ancestors, statement),
                        tuple(id(a) for a in ancestors))
    if not (0 < line <= len(source_lines)) or placed.first_line != source_lines[line - 1]:
        return False
    shift = line - placed.line
    for node, where in placed.positions:
        positions[node] = CodeRange((where.start.line + shift, where.start.column),
                                    (where.end.line + shift, where.end.column))
    return True


@dataclass(frozen=True)
class _Placed:
    """A statement's nodes placed in a module of it and its enclosing headers alone: its own line
    there and that line's text, to be shifted to the line it has in the source."""

    positions: tuple[tuple[cst.CSTNode, CodeRange], ...]
    line: int
    first_line: str | None  # None: the statement's line lies outside the pruned text


def _placed_alone(module: cst.Module, ancestors: tuple[cst.CSTNode, ...], statement: cst.CSTNode) -> _Placed:
    alone = statement
    # The enclosing headers are placed in the pruned text, not in the source: none of theirs is kept.
    wrappers: set[int] = set()
    headers: list[cst.CSTNode] = []
    for ancestor in reversed(ancestors):
        block = ancestor.body.with_changes(body=(alone,))
        alone = ancestor.with_changes(body=block)
        wrappers |= {id(alone), id(block)}
        headers += [child for child in child_nodes(ancestor) if child is not ancestor.body]
        kept = {id(child) for child in ancestor.body.body}
        headers += [child for child in child_nodes(ancestor.body) if id(child) not in kept]
    pruned = module.with_changes(header=(), body=(alone,), footer=())
    found = MetadataWrapper(pruned, unsafe_skip_copy=True).resolve(PositionProvider)
    start = found[statement].start
    code_lines = split_lines(pruned.code)
    first_line = code_lines[start.line - 1] if 0 < start.line <= len(code_lines) else None
    outside = wrappers | _holding_all(headers)
    return _Placed(tuple((node, where) for node, where in found.items() if id(node) not in outside),
                   start.line, first_line)


def _holding_all(nodes: list[cst.CSTNode]) -> set[int]:
    """The ids of the nodes and of everything inside them."""
    found: set[int] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        found.add(id(node))
        stack.extend(child_nodes(node))
    return found


# A fix can make another applicable (GL101's second attribute joins the first one's
# save_for_backward call); ruff stops after 100 rounds, but our fixes settle in two or three.
MAX_FIX_ROUNDS = 10


def fix_source(source: str, path: str, ruleset: RuleSet, unsafe: bool) -> FileResult:
    """Lint, apply the fixes that do not overlap, re-lint the result, until nothing more applies.
    The result's findings are those left in the fixed source; `fixed_source` is set when it changed."""
    result = first = lint_source(source, path, ruleset)
    fixed = 0
    current = source
    for _ in range(MAX_FIX_ROUNDS):
        if result.internal_error:
            break
        candidate, count = apply_fixes(current, result.findings, unsafe)
        if count == 0 or candidate == current:
            break
        if isinstance(_python_ast(candidate, path), Finding):  # a bug of ours: keep the last good text
            result.internal_error = "a fix produced code that does not parse; the remaining fixes were not applied"
            break
        current, fixed = candidate, fixed + count
        result = lint_source(current, path, ruleset)
    result.fixes_applied = fixed
    if current != source:
        result.fixed_source = current
        result.source_digest = text_digest(source)
        result.unfixed_findings = first.findings
    return result


def lint_bytes(data: bytes, path: str, ruleset: RuleSet, max_bytes: int) -> FileResult:
    source = decode_source(data, max_bytes)
    if isinstance(source, Unreadable):
        return FileResult(path, [_finding(path, UNREADABLE, 1, 1, source.reason)])
    return lint_source(source, path, ruleset)


def lint_file(path: str, ruleset: RuleSet, max_bytes: int, fix: str | None = None,
              cache: ResultCache | None = None) -> FileResult:
    """`fix`: None to lint only, "safe" or "unsafe" to compute the fixed text as well. A cache is
    read and written only when linting: fixing always starts from the file itself."""
    data = read_bytes(path, max_bytes)
    if isinstance(data, Unreadable):
        return FileResult(path, [_finding(path, UNREADABLE, 1, 1, data.reason)])
    if cache is not None and fix is None:
        cached = cache.get(data, ruleset.key(max_bytes), path)
        if cached is not None:
            return FileResult(path, cached, cached=True)
    source = decode_source(data, max_bytes)
    if isinstance(source, Unreadable):
        return FileResult(path, [_finding(path, UNREADABLE, 1, 1, source.reason)])
    if fix is not None:
        return fix_source(source, path, ruleset, unsafe=fix == "unsafe")
    result = lint_source(source, path, ruleset)
    if cache is not None and result.internal_error is None:
        cache.put(data, ruleset.key(max_bytes), result.findings, result.depends)
    return result


# ----- many files -------------------------------------------------------------------------

_worker_rulesets: dict[frozenset[str], RuleSet] = {}
_worker_base: RuleSet | None = None
_worker_max_bytes = 0
_worker_fix: str | None = None
_worker_cache: ResultCache | None = None
_worker_count = 0


def _init_worker(ruleset: RuleSet, max_bytes: int, fix: str | None = None, cache: ResultCache | None = None) -> None:
    global _worker_base, _worker_max_bytes, _worker_fix, _worker_cache, _project, _in_run
    _worker_base, _worker_max_bytes, _worker_fix, _worker_cache = ruleset, max_bytes, fix, cache
    _project, _in_run = None, True  # a new run reads the project afresh
    _worker_rulesets.clear()
    # libcst trees are large and acyclic: the automatic collector only costs time here
    # (parse of torch's sources: 50 s with it, 40 s without, measured); collect every few files.
    gc.disable()


def _lint_in_worker(job: tuple[str, frozenset[str]]) -> FileResult:
    global _worker_count
    path, ignored = job
    assert _worker_base is not None
    ruleset = _worker_rulesets.get(ignored)
    if ruleset is None:
        ruleset = _worker_rulesets[ignored] = _worker_base.without(ignored)
    _worker_count += 1
    if _worker_count % 32 == 0:
        # Between files every cycle a lint made is garbage. The youngest generation holds what
        # was made since the last collection; the project index's long-lived summaries were
        # promoted out of it, so each collection costs the files since then, not the whole heap
        # (a full gc.collect() here took 11.4 of 35.7 s on torch's sources, one core, measured).
        gc.collect(0)
    return lint_file(path, ruleset, _worker_max_bytes, _worker_fix, _worker_cache)


def lint_files(
    jobs_list: Sequence[tuple[str, frozenset[str]]],
    ruleset: RuleSet,
    max_bytes: int,
    jobs: int | None = None,
    fix: str | None = None,
    cache: ResultCache | None = None,
) -> Iterable[FileResult]:
    """Lint (path, codes ignored for that path) pairs, in a process pool when it pays. Files the
    cache answers for are answered here, before any worker starts: a warm run reads and hashes
    each file once and parses none."""
    if cache is not None and fix is None:
        jobs_list = yield from _cache_hits(jobs_list, ruleset, max_bytes, cache)
    jobs = jobs or os.cpu_count() or 1
    if jobs <= 1 or len(jobs_list) < 8:
        # In this process, the collector is given back as the caller had it: the probe's
        # cross-check runs here after a script turned it off, and must not turn it on again.
        enabled = gc.isenabled()
        _init_worker(ruleset, max_bytes, fix, cache)
        global _in_run
        try:
            for job in jobs_list:
                yield _lint_in_worker(job)
        finally:
            if enabled:
                gc.enable()
            _in_run = False
        return
    chunk = max(1, min(16, len(jobs_list) // (jobs * 4)))
    unanswered: list[tuple[str, frozenset[str]]] = []
    with ProcessPoolExecutor(max_workers=min(jobs, len(jobs_list)), initializer=_init_worker,
                             initargs=(ruleset, max_bytes, fix, cache)) as pool:
        futures = [pool.submit(_lint_chunk, jobs_list[i:i + chunk]) for i in range(0, len(jobs_list), chunk)]
        for start, future in zip(range(0, len(jobs_list), chunk), futures):
            try:
                yield from future.result()
            except BrokenProcessPool:
                # One worker died: the pool fails every chunk still pending, whatever file did it.
                unanswered.extend(jobs_list[start:start + chunk])
    if unanswered:
        yield from _lint_isolated(unanswered, ruleset, max_bytes, jobs, fix, cache)


def _lint_isolated(jobs_list, ruleset: RuleSet, max_bytes: int, jobs: int, fix: str | None,
                   cache: ResultCache | None) -> Iterable[FileResult]:
    """Each file in a process of its own, `jobs` at a time: a file that kills its process (a crash
    in libcst's native code, the kernel's OOM killer) loses its own result and no other."""
    context = multiprocessing.get_context()
    running: dict = {}  # reader connection -> (process, path)
    pending = list(reversed(jobs_list))
    while pending or running:
        while pending and len(running) < jobs:
            job = pending.pop()
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(target=_lint_one_and_send, args=(job, writer, ruleset, max_bytes, fix, cache),
                                      daemon=True)
            process.start()
            writer.close()
            running[reader] = (process, job[0])
        for reader in multiprocessing.connection.wait(list(running)):
            process, path = running.pop(reader)
            try:
                result = reader.recv()
            except (EOFError, OSError):
                result = None
            reader.close()
            process.join()
            if isinstance(result, FileResult):
                yield result
                continue
            code = process.exitcode or 0
            how = f"signal {signal.Signals(-code).name}" if code < 0 and -code in signal.Signals._value2member_map_ \
                else f"exit status {code}"
            yield FileResult(path, [_finding(
                path, UNREADABLE, 1, 1,
                f"gradlint's process died checking this file ({how}); the other files were checked; "
                "please report it with the file")])


def _lint_one_and_send(job, writer, ruleset: RuleSet, max_bytes: int, fix: str | None, cache: ResultCache | None) -> None:
    _init_worker(ruleset, max_bytes, fix, cache)
    writer.send(_lint_in_worker(job))
    writer.close()


def _cache_hits(jobs_list, ruleset: RuleSet, max_bytes: int, cache: ResultCache):
    """Yield the cached results; return the jobs still to run."""
    rulesets: dict[frozenset[str], RuleSet] = {}
    pending = []
    for path, ignored in jobs_list:
        data = read_bytes(path, max_bytes)
        if not isinstance(data, Unreadable):
            file_rules = rulesets.get(ignored) or rulesets.setdefault(ignored, ruleset.without(ignored))
            found = cache.get(data, file_rules.key(max_bytes), path)
            if found is not None:
                yield FileResult(path, found, cached=True)
                continue
        pending.append((path, ignored))
    return pending


def _lint_chunk(chunk: Sequence[tuple[str, frozenset[str]]]) -> list[FileResult]:
    return [_lint_in_worker(job) for job in chunk]
