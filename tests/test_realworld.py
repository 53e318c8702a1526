"""gradlint on real code: the labelled corpus of pinned PyPI wheels (tests/realworld/).

The wheels are downloaded into a cache on the first run (`pip download --no-deps`, hash-checked);
without the network the tests skip and say why. Run `python tests/realworld/corpus.py score
--list` to see the table and every false positive and negative.
"""
from __future__ import annotations

import ast
import importlib.util
import re
import warnings
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "realworld"))
import corpus  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# Section 4 of the real-code issue: precision is what decides whether a linter stays installed.
PRECISION_FLOOR = 0.90  # per family; the goal is 0.95
RECALL_FLOOR_FILE = 0.85  # on positives the file alone decides
RECALL_FLOOR_ALL = 0.60  # on all positives: the rest need other files of the project
# A GL101 safe fix moves the value into save_for_backward, which takes tensors (and None) only.
SAVABLE = {"tensor", "optional", "output", "view"}


@pytest.fixture(scope="module")
def labelled():
    packages = corpus.load_packages()
    try:
        for pkg in packages.values():
            corpus.fetch(pkg)
    except corpus.Unavailable as exc:
        pytest.skip(f"the real-world corpus cannot be downloaded here: {exc}")
    labels = corpus.read_all_labels()
    files = corpus.check(labels, packages)
    return labels, files


@pytest.fixture(scope="module")
def findings(labelled):
    return corpus.run_gradlint(labelled[1])


def test_the_corpus_is_big_enough_and_holds_real_problems(labelled):
    labels, files = labelled
    positives = [x for x in labels if x.label == "pos" and x.rule != "GL303"]
    with_positive = {(x.package, x.version, x.path) for x in positives}
    assert len({x.package for x in labels}) >= 15
    assert len(files) >= 50 and len(labels) >= 600 and len(positives) >= 60
    # Files labelled for the problems they hold, and clean code beside them: a clean file can
    # only cost precision (the L files, chosen by their text alone, showed three false alarms),
    # never raise a score. Real library code is mostly clean (of 45 files chosen by their text
    # alone on 2026-12-06, 9 held a problem), so clean files may be many; a third of the files
    # holding a problem keeps recall measured on more than a handful of projects.
    assert len(with_positive) * 3 >= len(files), "files with a real problem should be at least a third"


def test_precision_per_family_and_recall_hold_their_floors(labelled, findings):
    labels, _ = labelled
    result = corpus.score(labels, findings, borderline=False, rules=corpus.default_rules())
    report = corpus.table(result, "clear labels") + "\n" + "\n".join(
        [f"FP {f.where()}: {f.message[:90]}" for f, _ in result.false_positives]
        + [f"FN {lab.where()} ({lab.scope}): {lab.note[:90]}" for lab in result.false_negatives])
    low = {fam: t.precision for fam, t in result.tallies.items()
           if t.precision is not None and t.precision < PRECISION_FLOOR}
    assert not low, f"precision below {PRECISION_FLOOR}: {low}\n{report}"
    total = result.total()
    assert total.recall_file >= RECALL_FLOOR_FILE, report
    assert total.recall >= RECALL_FLOOR_ALL, report


def test_calls_on_held_instances_of_project_classes_stay_quiet_where_labelled_negative(labelled):
    """tests/realworld/sites/held_instances.csv: every call `self.x.m(v)` (x set in __init__) and
    `p.m(v)` (p annotated with the class) on an instance of another module's class, in the corpus
    files with GL103/GL104's markers (a module-level instance `g.m(v)` was looked for too: none),
    labelled by reading (120 sites, 119 negative: the method converts, detaches, is given no graph
    or runs outside the step). The analysis follows the calls on `self.x` into the other module
    (flow's KeptElsewhere); none of these may turn into a finding. Only these statements are
    labelled, so only findings on them count."""
    labels = corpus.read_labels(Path(__file__).parent / "realworld" / "sites" / "held_instances.csv")
    files = corpus.check(labels, corpus.load_packages())
    result = corpus.score(labels, corpus.run_gradlint(files), borderline=True, rules=corpus.default_rules())
    wrong = [f"FP {f.where()}: {f.message[:90]}  [{lab.note[:90]}]"
             for f, lab in result.false_positives if lab is not None]
    assert not wrong, "\n".join(wrong)


def _label_at(labels, finding) -> corpus.Label | None:
    for lab in labels:
        if lab.key == finding.key and lab.rule == finding.code:
            return lab
    return None


def test_every_safe_fix_moves_a_true_tensor_and_fixed_files_still_compile(labelled, tmp_path):
    """Apply every safe fix to copies of the corpus: each file still compiles, and every value a
    GL101 fix hands to save_for_backward is labelled a tensor (or tensor-or-None) by a person."""
    labels, files = labelled
    copies: dict[Path, corpus.SourceFile] = {}
    for src in files:
        target = tmp_path / f"{src.package.name}-{src.package.version}" / src.path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(corpus.source_root(src.package) / src.path, target)
        copies[target] = src
    report = subprocess.run(
        [sys.executable, "-m", "gradlint", "check", "--isolated", "--no-cache", "--exit-zero",
         "--output-format", "json", *map(str, copies)], capture_output=True, text=True, check=True)
    wrong = []
    for item in json.loads(report.stdout):
        if (item.get("fix") or {}).get("applicability") != "safe":
            continue
        src = copies[Path(item["filename"]).resolve()] if Path(item["filename"]).resolve() in copies \
            else copies[Path(item["filename"])]
        found = corpus.Finding(f"{src.package.name}-{src.package.version}", src.path,
                               src.statement(item["location"]["row"]), item["code"], item["message"], "safe")
        lab = _label_at(labels, found)
        if item["code"] == "GL101" and not (lab and lab.label == "pos" and lab.clarity == "clear"
                                            and lab.detail in SAVABLE):
            wrong.append(f"{found.where()}: {lab.note if lab else 'no label'}")
    assert not wrong, "safe GL101 fixes on values not labelled a single tensor:\n" + "\n".join(wrong)
    subprocess.run([sys.executable, "-m", "gradlint", "check", "--isolated", "--no-cache", "--exit-zero",
                    "--fix", *map(str, copies)], capture_output=True, text=True, check=True)
    broken = []
    for path in copies:
        try:
            with warnings.catch_warnings():  # their `"\e"` escapes are theirs
                warnings.simplefilter("ignore")
                compile(path.read_text(encoding="utf-8"), str(path), "exec", dont_inherit=True)
        except SyntaxError as exc:
            broken.append(f"{path}: {exc}")
    assert not broken, "\n".join(broken)


# Every unsafe GL103/GL104 edit `--fix --unsafe-fixes --select ALL` makes on the corpus, read by a
# person and judged still right code (issue 16): (package-version, path, the edited line after the
# fix) -> why. A new unsafe edit fails the test until someone reads it and adds it here.
REVIEWED_UNSAFE_EDITS = {
    ("spikingjelly-2.0.0", "spikingjelly/activation_based/examples/ppo.py",
     "entropy += dist.entropy().mean().item()"):
        "the rollout's entropy total is never read again (ppo_update computes its own): a number is right",
    ("spikingjelly-2.0.0", "spikingjelly/activation_based/examples/spiking_ppo.py",
     "entropy += dist.entropy().mean().item()"):
        "the same rollout loop as ppo.py",
}
# What shows a reader that `x.item()` has one element to give: a full reduction, a torch loss.
_ONE_ELEMENT = re.compile(r"\.(mean|sum|norm|prod|max|min|amax|amin|std|var)\(\)\)?$"
                          r"|^\(?(F|torch\.nn\.functional|nn\.functional)\.\w*(loss|entropy|kl_div)\w*\(")
_HOLDER = re.compile(r"^\s*([\w.]+)(\.(append|appendleft|insert)\(|\[.*\]\s*=|\s*\+=|\s*=\s*\1\s*\+)")


@pytest.fixture(scope="module")
def all_fixes(labelled):
    """Every finding with a fix under `--select ALL`, by file, from the CLI's JSON."""
    _, files = labelled
    by_path = {str((corpus.source_root(f.package) / f.path).resolve()): f for f in files}
    report = subprocess.run(
        [sys.executable, "-m", "gradlint", "check", "--isolated", "--no-cache", "--exit-zero", "--select", "ALL",
         "--output-format", "json", *sorted(by_path)], capture_output=True, text=True, check=True)
    found: dict[str, list[dict]] = {}
    for item in json.loads(report.stdout):
        if item.get("fix"):
            found.setdefault(str(Path(item["filename"]).resolve()), []).append(item)
    return [(by_path[path], items) for path, items in sorted(found.items())]


def test_every_fix_safe_and_unsafe_leaves_real_code_compiling_stable_and_right(all_fixes, tmp_path):
    """`--fix --unsafe-fixes --select ALL` on copies of the corpus files: every fixed file compiles,
    fixing again changes nothing, and every unsafe GL103/GL104 edit is what the policy allows (issue
    16): `E` -> `E.item()` only where E shows one element (a full reduction, a torch loss, or a name
    backward() ran on), `E.detach()` otherwise; never in a Module's forward or a method it runs,
    never on a holder a backward or a return of the function reads; and read by a person."""
    from gradlint.file_model import FileModel
    import libcst as cst

    copies = {}
    for src, _ in all_fixes:
        target = tmp_path / f"{src.package.name}-{src.package.version}" / src.path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(corpus.source_root(src.package) / src.path, target)
        copies[target] = src
    assert copies, "the corpus has no fixes at all: the test checks nothing"
    command = [sys.executable, "-m", "gradlint", "check", "--isolated", "--no-cache", "--select", "ALL", "--unsafe-fixes"]
    subprocess.run([*command, "--exit-zero", "--fix", *map(str, copies)], capture_output=True, text=True, check=True)
    broken, changed = [], []
    for path, src in copies.items():
        text = path.read_text(encoding="utf-8")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compile(text, str(path), "exec", dont_inherit=True)
        except SyntaxError as exc:
            broken.append(f"{path}: {exc}")
        if text != src.text:
            changed.append(path)
    assert not broken, "\n".join(broken)
    again = subprocess.run([*command, "--diff", *map(str, changed)], capture_output=True, text=True)
    assert "@@" not in again.stdout, "fixing the fixed files again changes them:\n" + again.stdout[-3000:]

    wrong, seen = [], set()
    for src, items in all_fixes:
        model = FileModel(cst.parse_module(src.text), src.path, src.text)
        for item in items:
            if item["fix"]["applicability"] != "unsafe" or item["code"] not in ("GL103", "GL104"):
                continue
            where = f"{src.package.name}-{src.package.version}/{src.path}:{item['location']['row']}"
            edits = item["fix"]["edits"]
            edit = edits[0]
            start, end = edit["location"], edit["end_location"]
            line = src.lines[start["row"] - 1]
            if len(edits) != 1 or start["row"] != end["row"]:
                wrong.append(f"{where}: not one edit of one line")
                continue
            kept = line[start["column"] - 1:end["column"] - 1]
            method = next((m for m in ("item", "detach") if edit["content"] in (f"{kept}.{m}()", f"({kept}).{m}()")), None)
            fixed_line = line[:start["column"] - 1] + edit["content"] + line[end["column"] - 1:]
            seen.add((f"{src.package.name}-{src.package.version}", src.path, fixed_line.strip()))
            function = _enclosing_def(src.text, start["row"])
            body = ast.get_source_segment(src.text, function) if function is not None else src.text
            holder = _HOLDER.match(line)
            if method is None:
                wrong.append(f"{where}: {kept!r} -> {edit['content']!r} is neither E.item() nor E.detach()")
            elif method == "item" and not (_ONE_ELEMENT.search(kept) or re.search(
                    rf"(?<![\w.]){re.escape(kept)}\.backward\(\)", body)):
                wrong.append(f"{where}: .item() on {kept!r}, which shows no one-element tensor")
            if function is not None and _runs_in_forward(model, src.text, function):
                wrong.append(f"{where}: an edit in a Module's forward (or a method it runs)")
            if holder is None:
                wrong.append(f"{where}: no container or total named on {line.strip()!r}")
            else:
                name = re.escape(holder.group(1))
                for other in body.splitlines():
                    if re.search(rf"(?<![\w.]){name}\b", other) and ("backward(" in other or re.match(r"(return|yield)\b", other.strip())):
                        wrong.append(f"{where}: {holder.group(1)} is read by {other.strip()!r}")
    unread = seen - set(REVIEWED_UNSAFE_EDITS)
    stale = set(REVIEWED_UNSAFE_EDITS) - seen
    assert not wrong, "unsafe fixes outside the policy:\n" + "\n".join(wrong)
    assert not unread, "unsafe edits no person has read (add them to REVIEWED_UNSAFE_EDITS once judged right):\n" \
        + "\n".join(map(str, sorted(unread)))
    assert not stale, "reviewed edits no longer made (drop them):\n" + "\n".join(map(str, sorted(stale)))


def _enclosing_def(source: str, row: int) -> ast.FunctionDef | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = ast.parse(source)
    found = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= row <= (node.end_lineno or 0):
            if found is None or node.lineno >= found.lineno:
                found = node
    return found


def _runs_in_forward(model, source: str, function: ast.FunctionDef) -> bool:
    """The def is a forward of a module class of the file, or a method such a forward runs."""
    for info_class in model.module_classes:
        method = info_class.methods.get(function.name)
        if method is not None and model.runs_in_forward(method):
            return True
    return False


GRADCHECKS = tomllib.loads((Path(__file__).parent / "realworld" / "gradcheck.toml").read_text(encoding="utf-8"))


def _module_from(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", GRADCHECKS["function"], ids=lambda c: f"{c['package']}:{c['function']}")
def test_fixed_self_contained_functions_still_pass_gradcheck(case, labelled, tmp_path):
    """The corpus Functions that run on CPU with torch alone, before and after every fix (`--fix
    --unsafe-fixes --select ALL`): same outputs, and gradcheck passes on both."""
    torch = pytest.importorskip("torch")
    packages = corpus.load_packages()
    pkg = corpus.find_package(packages, case["package"], case.get("version", ""))
    original = corpus.source_root(pkg) / case["path"]
    fixed = tmp_path / Path(case["path"]).name
    shutil.copyfile(original, fixed)
    subprocess.run([sys.executable, "-m", "gradlint", "check", "--isolated", "--no-cache", "--exit-zero",
                    "--select", "ALL", "--fix", "--unsafe-fixes", str(fixed)], capture_output=True, text=True, check=True)
    outputs = []
    for label, path in (("original", original), ("fixed", fixed)):
        module = _module_from(path, f"gl_gradcheck_{label}_{fixed.stem}")
        namespace = {"torch": torch, "F": getattr(module, case["function"])}
        torch.manual_seed(0)
        inputs = eval(case["inputs"], namespace)  # noqa: S307 - the recipe is ours, in gradcheck.toml
        fn = namespace["F"]
        extra = eval(case.get("extra", "()"), namespace)  # noqa: S307
        assert torch.autograd.gradcheck(lambda *xs: fn.apply(*xs, *extra), inputs), (label, case)
        outputs.append(fn.apply(*inputs, *extra))
    assert torch.equal(outputs[0], outputs[1])


def test_no_gate_turns_a_finding_away_on_real_code(labelled, monkeypatch):
    """The markers and prechecks only save time: on every corpus file, the rules with their gates
    and without them find exactly the same."""
    from gradlint import engine, graph_store_precheck
    from gradlint.registry import all_rules

    rules = [r for r in all_rules() if r.default_enabled]
    _, files = labelled
    gated = {(src.package.name, src.package.version, src.path): engine.lint_source(
        src.text, src.path, engine.RuleSet(tuple(rules), {})).findings for src in files}
    for rule in rules:
        monkeypatch.setattr(type(rule), "precheck", lambda self, tree: True)
        monkeypatch.setattr(type(rule), "markers", ("",))
    monkeypatch.setattr(graph_store_precheck, "may_store_across_steps", lambda tree: True)
    differ = []
    for src in files:
        key = (src.package.name, src.package.version, src.path)
        open_ = engine.lint_source(src.text, src.path, engine.RuleSet(tuple(rules), {})).findings
        if open_ != gated[key]:
            differ.append(f"{'/'.join(key)}: gated {len(gated[key])}, open {len(open_)}: "
                          f"{sorted({(f.line, f.code) for f in open_} ^ {(f.line, f.code) for f in gated[key]})}")
    assert not differ, "\n".join(differ)


def test_the_editors_kept_statements_find_what_a_whole_parse_finds_on_real_code(labelled):
    """The language server keeps each statement's parse between lints (gradlint/parse.py): on every
    corpus file, the module put together from kept statements writes back the file, and its lint,
    first and again from what was kept, finds exactly what a whole parse finds."""
    from gradlint import deep, engine, parse
    from gradlint.registry import all_rules

    ruleset = engine.RuleSet(tuple(r for r in all_rules() if r.default_enabled), {})
    _, files = labelled
    differ, assembled = [], 0
    try:
        for src in files:
            parse.keep(0)
            whole = engine.lint_source(src.text, src.path, ruleset).findings
            parse.keep(parse.EDITOR_KEPT_TEXT)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # `"\e"` in the package's strings: not ours
                tree = compile(src.text, src.path, "exec", ast.PyCF_ONLY_AST)
            module = deep.call(lambda: parse._assemble(src.text, tree), len(src.text))
            if module is not None:
                assembled += 1
                assert deep.call(lambda: module.code, len(src.text)) == src.text, src.path
            kept = [engine.lint_source(src.text, src.path, ruleset).findings for _ in range(2)]
            if kept != [whole, whole]:
                differ.append(f"{src.package.name} {src.path}: whole {len(whole)}, kept {[len(k) for k in kept]}")
    finally:
        parse.keep(0)
    assert assembled >= 0.9 * len(files)  # the rest: one statement, or indentation that varies
    assert not differ, "\n".join(differ)
