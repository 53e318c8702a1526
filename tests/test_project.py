"""Findings that rest on another file of the project: a base class, a layer, a loss imported from
elsewhere carry the same facts as when they are defined in the checked file.

Each project under tests/fixtures/projects/ marks the lines it expects a finding on with
`# expect: GLxxx`; every other line must stay quiet.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECTS = Path(__file__).parent / "fixtures" / "projects"
EXPECT = re.compile(r"#\s*expect:\s*(GL\d{3})")


def _expected(root: Path) -> set[tuple[str, int, str]]:
    found = set()
    for file in sorted(root.rglob("*.py")):
        for number, line in enumerate(file.read_text().splitlines(), 1):
            for code in EXPECT.findall(line):
                found.add((file.relative_to(root).as_posix(), number, code))
    return found


def _check(*paths: Path, cwd: Path, extra: tuple[str, ...] = ("--no-cache",)) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "gradlint", "check", "--isolated", "--exit-zero", *extra,
                           "--output-format", "json", *map(str, paths)],
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def _found(root: Path, findings: list[dict]) -> set[tuple[str, int, str]]:
    return {(Path(f["filename"]).resolve().relative_to(root.resolve()).as_posix(), f["location"]["row"], f["code"])
            for f in findings if f["code"] != "GL000"}


@pytest.mark.parametrize("name", ["trainer", "meters", "ctx_helper", "cycle", "missing", "stars", "inherits", "kernels", "gated",
                                  "modes", "scripts", "native", "framework"])
def test_each_project_gets_exactly_its_expected_findings(name: str):
    root = PROJECTS / name
    assert _found(root, _check(root, cwd=root)) == _expected(root)


@pytest.mark.parametrize("name", ["trainer", "meters", "ctx_helper", "cycle", "missing", "stars", "inherits", "kernels",
                                  "gated", "modes", "scripts", "native", "framework"])
def test_no_precheck_hides_a_finding_that_rests_on_another_file(name: str, monkeypatch):
    """The prechecks read one file's CPython tree; what an imported name is, only the project
    index knows. Each project's findings with every precheck answering yes (the analysis alone
    decides) are the findings of a plain run: `gated` holds the three a precheck used to drop."""
    from gradlint import engine
    from gradlint.check import CheckRequest, run_check

    root = PROJECTS / name
    monkeypatch.setattr(engine, "_precheck", lambda rule, tree: True)
    outcome = run_check(CheckRequest(paths=[root], jobs=1, no_cache=True, isolated=True))
    alone = {(Path(f.path).resolve().relative_to(root.resolve()).as_posix(), f.line, f.code)
             for f in outcome.findings if f.code != "GL000"}
    monkeypatch.undo()
    assert _found(root, _check(root, cwd=root)) == alone


def test_a_file_checked_alone_still_reads_the_modules_it_imports():
    root = PROJECTS / "trainer"
    findings = _check(root / "pkg" / "models" / "net.py", cwd=root)
    assert _found(root, findings) == {("pkg/models/net.py", 14, "GL102")}
    findings = _check(root / "train.py", cwd=PROJECTS)  # from another directory: the same
    assert _found(root, findings) == {("train.py", 20, "GL103")}


def test_a_broken_or_missing_module_is_unknown_not_an_error():
    root = PROJECTS / "missing"
    findings = _check(root, cwd=root)
    assert {(Path(f["filename"]).name, f["code"]) for f in findings} == {("broken.py", "GL000")}


def test_a_change_to_an_imported_module_rechecks_the_files_that_rest_on_it(tmp_path: Path):
    from gradlint.check import CheckRequest, run_check

    project = tmp_path / "trainer"
    shutil.copytree(PROJECTS / "trainer", project)
    (project / "pyproject.toml").write_text("[tool.gradlint]\n")

    def run():
        return run_check(CheckRequest(paths=[project], jobs=1))

    first = run()
    assert {(Path(f.path).name, f.code) for f in first.findings} == {("net.py", "GL102"), ("train.py", "GL103")}
    assert run().files_cached == first.files_checked
    # BaseModel stops being an nn.Module: net.py's finding rested on it and goes; train.py's
    # rests on the losses (and on backward being called on the output), and stays.
    base = project / "pkg" / "models" / "base.py"
    base.write_text(base.read_text().replace("class BaseModel(nn.Module):", "class BaseModel:"))
    third = run()
    assert {(Path(f.path).name, f.code) for f in third.findings} == {("train.py", "GL103")}
    # Only base.py itself and the files that read it were checked again (net.py, train.py);
    # layers.py, losses.py, the meter and the package __init__s were answered from the cache.
    assert third.files_checked - third.files_cached == 3
    # The penalty becomes a Python number: train.py, which imports it, is checked again.
    losses = project / "pkg" / "losses.py"
    losses.write_text(losses.read_text().replace("return output.pow(2).mean()", "return output.pow(2).mean().item()"))
    fourth = run()
    assert fourth.findings == []
    assert fourth.files_checked - fourth.files_cached == 2  # losses.py and train.py
    assert run().files_cached == fourth.files_checked


def test_torchs_own_base_classes_are_not_walked_into(tmp_path: Path):
    """Linting torch's own sources, a Module subclass's `self.parameters()` is not followed into
    module.py: an edit of class Module checks only module.py again, not every subclass (the
    bench's one-class-edited measure went from 2 files to 20 while they were followed)."""
    from gradlint.check import CheckRequest, run_check

    root = tmp_path / "torch"
    (root / "nn").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "nn" / "__init__.py").write_text("from .module import Module\n")
    (root / "nn" / "module.py").write_text(
        "class Module:\n    def parameters(self):\n        return iter(self._params)\n")
    for name in ("linear", "conv"):
        (root / "nn" / f"{name}.py").write_text(
            "import torch\nfrom .module import Module\n\n\nclass Layer(Module):\n"
            "    def forward(self, x):\n        self.count = len(list(self.parameters()))\n        return x\n")
    (tmp_path / "pyproject.toml").write_text("[tool.gradlint]\n")

    def run():
        return run_check(CheckRequest(paths=[root], jobs=1))

    first = run()
    module = root / "nn" / "module.py"
    module.write_text(module.read_text().replace("class Module:", "class Module:  # edited"))
    again = run()
    assert again.findings == first.findings
    assert again.files_checked - again.files_cached == 1  # module.py alone


def test_findings_that_rest_on_another_file_name_it():
    """The message says which def of which file the finding rests on, at the line that file has it."""
    messages = {}
    for name in ("trainer", "meters", "ctx_helper", "inherits", "kernels"):
        root = PROJECTS / name
        for f in _check(root, cwd=root):
            messages[(name, Path(f["filename"]).name, f["location"]["row"])] = f["message"]
    assert messages[("trainer", "train.py", 20)].startswith(
        "l2_penalty() (pkg/losses.py:8) gives a graph; penalties keeps every step's graph")
    assert messages[("trainer", "net.py", 14)].startswith(
        "self.last_hidden keeps a step's graph until the next: Net is an nn.Module by BaseModel (base.py:4)")
    assert messages[("meters", "train.py", 16)].startswith(
        "total chains every step's graph onto itself: regression_loss() (utils/losses.py:4) gives a graph")
    assert "onto meter.sum (utils/meters.py:11)" in messages[("meters", "train.py", 20)]
    assert messages[("meters", "train.py", 21)].startswith(
        "history.add() (utils/meters.py:24) keeps a graph-attached tensor in history.values")
    assert messages[("meters", "train.py", 22)].startswith(
        "remember() (utils/meters.py:28) keeps a graph-attached tensor in SEEN")
    assert messages[("ctx_helper", "scatter.py", 9)].startswith(
        "stash_inputs() (helpers.py:4) keeps tensors on ctx.src, ctx.index")
    assert messages[("ctx_helper", "scatter.py", 23)].startswith("stash_output() (helpers.py:9) keeps the output on ctx.out")
    assert messages[("ctx_helper", "nested.py", 11)].startswith(
        "stash_all() (helpers.py:22) keeps the output on ctx.out and 2 more tensors: a cycle only gc frees")
    assert messages[("ctx_helper", "nested.py", 24)].startswith(
        "helpers.Stash.output() (helpers.py:31) keeps the output on ctx.out")
    assert messages[("inherits", "lit_train.py", 18)].startswith(
        "super().training_step() (models/regressor.py:13) gives a graph; self.debug keeps every step's graph")
    # A one-step store whose full message would pass 120 characters drops "until the next".
    assert messages[("inherits", "probe.py", 17)] == (
        "self.last keeps a step's graph: Probe is an nn.Module by Regressor (models/regressor.py:6); store .detach()")
    assert (PROJECTS / "inherits/models/regressor.py").read_text().splitlines()[5].startswith("class Regressor(")
    assert messages[("kernels", "norm.py", 17)].startswith(
        "`_norm_bwd_dw_kernel` (triton_kernels.py:7) in backward: float tl.atomic_add varies gradients")
    assert messages[("kernels", "pool.py", 29)].startswith(
        "segment() (segment.py:5) runs `Tensor.index_add_`: atomicAdd on CUDA, gradients vary")
    assert messages[("kernels", "clamp.py", 13)].startswith(
        "input `x` changed in place by tensor_clamp_() (helpers.py:5) without mark_dirty")
    assert messages[("kernels", "clamp.py", 48)].startswith(
        "input `rows` changed in place by scale_rows_() (helpers.py:15) without mark_dirty")
    # Each line named is that def's own line in its file (below its decorators).
    for path, line in (("meters/app/utils/meters.py", 11), ("meters/app/utils/meters.py", 24),
                       ("meters/app/utils/meters.py", 28), ("meters/app/utils/losses.py", 4),
                       ("ctx_helper/ops/helpers.py", 4), ("ctx_helper/ops/helpers.py", 9),
                       ("ctx_helper/ops/helpers.py", 22), ("ctx_helper/ops/helpers.py", 31),
                       ("trainer/pkg/losses.py", 8), ("inherits/models/regressor.py", 13),
                       ("kernels/ops/triton_kernels.py", 7), ("kernels/ops/helpers.py", 5),
                       ("kernels/ops/helpers.py", 15), ("kernels/ops/segment.py", 5)):
        assert (PROJECTS / path).read_text().splitlines()[line - 1].lstrip().startswith("def "), (path, line)
    assert (PROJECTS / "trainer/pkg/models/base.py").read_text().splitlines()[3].startswith("class BaseModel(")
    assert all(len(message) <= 120 for message in messages.values()), messages


def test_two_projects_in_one_run_each_read_their_own_modules(tmp_path: Path):
    """Two projects with a package of the same name, checked in one process in either order:
    each file's imports resolve in its own project (they once resolved in whichever project was
    read first, so the findings depended on the order of the paths)."""
    from gradlint.check import CheckRequest, run_check

    for name, kept in (("leaky", "value * n"), ("clean", "float(value) * n")):
        project = tmp_path / name
        shutil.copytree(PROJECTS / "meters", project)
        (project / "pyproject.toml").write_text("[tool.gradlint]\n")
        meters = project / "app" / "utils" / "meters.py"
        meters.write_text(meters.read_text().replace("self.sum += value * n", f"self.sum += {kept}"))
    for order in (("leaky", "clean"), ("clean", "leaky")):
        result = run_check(CheckRequest(paths=[tmp_path / name for name in order], jobs=1, no_cache=True))
        meter = {Path(f.path).relative_to(tmp_path).parts[0] for f in result.findings if "meter.update()" in f.message}
        assert meter == {"leaky"}, order


def test_a_base_class_is_named_from_each_checked_file_whatever_was_checked_first(tmp_path: Path):
    """Two files in different folders subclass one base of the project: each message gives the
    base's path from its own file. The base's facts are kept for the run, and the path was fixed
    by whichever file asked first (botorch's `Model (model.py:44)` read
    `(../../botorch/models/model.py:44)` in another file, by worker order)."""
    from gradlint.check import CheckRequest, run_check

    (tmp_path / "pyproject.toml").write_text("[tool.gradlint]\n")
    (tmp_path / "pkg" / "deep").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "deep" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "base.py").write_text("import torch.nn as nn\n\n\nclass Model(nn.Module):\n    pass\n")
    subclass = ("import torch.nn as nn\n\nfrom {imp} import Model\n\n\nclass Net(Model):\n"
                "    def __init__(self):\n        super().__init__()\n        self.lin = nn.Linear(4, 4)\n\n"
                "    def forward(self, x):\n        self.h = self.lin(x)\n        return self.h\n")
    (tmp_path / "pkg" / "net.py").write_text(subclass.format(imp=".base"))
    (tmp_path / "pkg" / "deep" / "net.py").write_text(subclass.format(imp="..base"))
    expected = {"net.py": "Model (base.py:4)", "deep/net.py": "Model (../base.py:4)"}
    for order in (("net.py", "deep/net.py"), ("deep/net.py", "net.py")):
        result = run_check(CheckRequest(paths=[tmp_path / "pkg" / name for name in order], jobs=1, no_cache=True))
        named = {Path(f.path).relative_to(tmp_path / "pkg").as_posix(): f.message for f in result.findings}
        assert named.keys() == expected.keys(), (order, named)
        for name, base in expected.items():
            assert f"by {base};" in named[name], (order, named[name])


def _variants(source: str):
    """Edits of one module: ones that change no part another file reads (a comment or a def
    appended), one that moves every line, and each line deleted in turn or made a `pass` in place
    (a base class gone, a return changed, an import dropped, a syntax error; with and without the
    lines below moving). None: the module deleted."""
    yield "the module deleted", None
    yield "a comment appended", source + "\n# edited\n"
    yield "a def appended", source + "\n\ndef _appended_by_the_test(x):\n    return x\n"
    yield "a line inserted at the top", "\n" + source
    lines = source.splitlines(keepends=True)
    for number, line in enumerate(lines, 1):
        if line.strip() and not line.lstrip().startswith("#"):
            yield f"line {number} deleted", "".join(lines[:number - 1] + lines[number:])
            indent = line[:len(line) - len(line.lstrip())]
            yield f"line {number} made a pass", "".join(lines[:number - 1] + [f"{indent}pass\n"] + lines[number:])


@pytest.mark.parametrize("name", ["trainer", "meters", "ctx_helper", "inherits", "stars", "cycle", "kernels", "gated",
                                  "modes", "scripts", "native", "framework"])
def test_after_any_edit_of_a_module_the_cache_answers_as_a_fresh_run(tmp_path: Path, name: str):
    """A cached result outlives an edit of a module it read when the parts it read are unchanged
    (project.ModuleFacts.part). Whatever the edit, the cached run must give what a run without the
    cache gives; and the edits that change nothing read elsewhere re-check the edited file only."""
    from gradlint.check import CheckRequest, run_check

    project = tmp_path / name
    shutil.copytree(PROJECTS / name, project)
    (project / "pyproject.toml").write_text("[tool.gradlint]\n")

    def findings(**options) -> tuple[list[tuple], int]:
        outcome = run_check(CheckRequest(paths=[project], jobs=1, **options))
        return (sorted((f.path, f.line, f.column, f.code, f.message) for f in outcome.findings),
                outcome.files_checked - outcome.files_cached)

    baseline, _ = findings()  # the cache, made on the original project
    tried = quiet = 0
    for module in sorted(project.rglob("*.py")):
        original = module.read_text()
        for what, text in _variants(original):
            if text is None:
                module.unlink()
            else:
                module.write_text(text)
            cached, rechecked = findings()
            fresh, _ = findings(no_cache=True)
            assert cached == fresh, f"{module.relative_to(project)}: {what}"
            # A new def is a new name for a star import (the stars project's): its importer reads it.
            if what == "a comment appended" or (what == "a def appended" and name != "stars"):
                assert rechecked == 1, f"{module.relative_to(project)}: {what} re-checked {rechecked} files"
                quiet += 1
            tried += 1
            module.write_text(original)
            # The files re-checked against the variant are checked again, as the original reads.
            assert findings()[0] == baseline, f"{module.relative_to(project)}: {what}, then undone"
    assert tried > 3 * len(list(project.rglob("*.py"))) and quiet


@pytest.mark.parametrize("name", ["trainer", "meters", "inherits", "stars", "kernels"])
def test_the_editors_project_after_any_edit_answers_as_a_fresh_one(tmp_path: Path, name: str, monkeypatch):
    """The editor keeps one Project across lints (engine._project, refreshed before each): after
    any edit of a module on disk, every file must lint as with a Project made afresh, and an edit
    that changes nothing another module's answers read keeps that module's models."""
    import os

    from gradlint import engine
    from gradlint.config import Settings

    project = tmp_path / name
    shutil.copytree(PROJECTS / name, project)
    ruleset = engine.RuleSet.from_settings(Settings())
    files = sorted(project.rglob("*.py"))
    monkeypatch.setattr(engine, "_in_run", False)
    saved = [10**18]  # an editor's save: a new mtime every time, however fast the test writes

    def save(path: Path, text: str | None) -> None:
        if text is None:
            path.unlink()
            return
        path.write_text(text)
        saved[0] += 10**9
        os.utime(path, ns=(saved[0], saved[0]))

    def lint_all(kept):
        engine._project = kept  # None: a Project made afresh
        found = {path.name: sorted((f.line, f.column, f.code, f.message)
                                   for f in engine.lint_source(path.read_text(), str(path), ruleset).findings)
                 for path in files if path.exists()}
        return found, engine._project

    monkeypatch.setattr(engine, "_project", None)
    baseline, kept = lint_all(None)
    kept_models = 0
    for module in files:
        original = module.read_text()
        for what, text in _variants(original):
            others = {path: facts for path, facts in kept._loaded().items() if path != str(module)}
            save(module, text)
            warm, kept = lint_all(kept)
            fresh, _ = lint_all(None)
            assert warm == fresh, f"{module.relative_to(project)}: {what}"
            if what == "a comment appended":
                kept_models += sum(kept._loaded().get(path) is facts for path, facts in others.items())
            save(module, original)
            undone, kept = lint_all(kept)
            assert undone == baseline, f"{module.relative_to(project)}: {what}, then undone"
    assert kept_models


def test_a_module_with_form_feeds_between_its_statements_is_read_where_python_breaks_lines(tmp_path: Path):
    """A form feed (`^L`, a page break in older code) or a `\\x1c` is no line break to Python, but
    str.splitlines breaks there: every statement after it was cut at the wrong lines, the module
    did not parse, and its meter's keep went unreported (and a method's line was cited wrong)."""
    from gradlint.check import CheckRequest, run_check

    project = tmp_path / "meters"
    shutil.copytree(PROJECTS / "meters", project)
    (project / "pyproject.toml").write_text("[tool.gradlint]\n")
    meters = project / "app" / "utils" / "meters.py"
    text = meters.read_text()
    meters.write_text(text.replace("SEEN = []\n", "SEEN = []  # \x1c kept\n\x0c\n").replace("class History", "\x0c\nclass History"))
    result = run_check(CheckRequest(paths=[project / "app" / "train.py"], jobs=1, no_cache=True))
    messages = [f.message for f in result.findings]
    # The places cited count lines as Python does: the fixture's 11, 24 and 28, one and two down.
    assert any("meter.update() chains every step's graph onto meter.sum (utils/meters.py:12)" in message
               for message in messages), messages
    assert any("history.add() (utils/meters.py:26)" in message for message in messages), messages
    assert any("remember() (utils/meters.py:30)" in message for message in messages), messages


def test_a_file_its_precheck_turned_away_is_checked_again_when_the_def_it_calls_starts_keeping(tmp_path: Path):
    """GL103/GL104's precheck asks the project whether `remember(loss)` reaches a def that may keep
    its argument; where it says no, the file goes unanalysed, and that answer rests on the def.
    An edit making the def keep its argument must re-check the file, as a fresh run would."""
    from gradlint.check import CheckRequest, run_check

    (tmp_path / "pyproject.toml").write_text("[tool.gradlint]\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    utils = tmp_path / "app" / "utils.py"
    utils.write_text("SEEN = []\n\n\ndef remember(value):\n    print(value)\n")
    (tmp_path / "app" / "train.py").write_text(
        "import torch\nfrom app.utils import remember\n\nmodel = torch.nn.Linear(2, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in loader:\n    loss = model(x).sum()\n"
        "    loss.backward()\n    opt.step()\n    remember(loss)\n")

    def run():
        return run_check(CheckRequest(paths=[tmp_path / "app" / "train.py"], jobs=1))

    from gradlint.config import Settings
    from gradlint.engine import RuleSet, lint_source

    train = tmp_path / "app" / "train.py"
    alone = lint_source(train.read_text(), str(train), RuleSet.from_settings(Settings()))
    assert not alone.analyzed and str(utils) in alone.depends  # turned away: remember keeps nothing
    first = run()
    assert first.findings == []
    assert run().files_cached == 1
    utils.write_text("SEEN = []\n\n\ndef remember(value):\n    SEEN.append(value)\n")
    third = run()
    assert third.files_cached == 0
    assert [(f.code, f.line) for f in third.findings] == [("GL103", 10)]


@pytest.mark.parametrize("body, keeps", [
    ("SEEN.append(value)", True),  # a global's container
    ("global LAST\n    LAST = value", True),
    ("value.owner.last = value", True),  # an attribute of what it was given
    ("CACHE[len(CACHE)] = value", True),
    ("setattr(value, 'kept', value)", True),
    ("kept = []\n    kept.append(value)\n    return kept", False),  # its own list
    ("a, b = value, value\n    out = {}\n    out['a'] = a\n    return out", False),
    ("for item in value:\n        total = item\n    return total", False),  # a local bound in a loop
    ("return helper(value)", True),  # what it names of its module keeps
    ("def inner(v):\n        SEEN.append(v)\n    return inner", True),  # a nested def is asked too
    ("return list(map(lambda v: SEEN.append(v), value))", True),
    ("print(value)", False),
])
def test_whether_a_def_of_another_module_may_keep_its_argument_is_read_from_its_syntax(tmp_path: Path, body: str,
                                                                                       keeps: bool):
    """The precheck's question (prechecks.def_may_keep_arguments), as the project answers it: a store
    that may outlive the call (what FileModel.call_result keeps for the caller), never a local's."""
    from gradlint.project import Project

    (tmp_path / "pyproject.toml").write_text("[tool.gradlint]\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "utils.py").write_text(
        f"SEEN = []\nCACHE = {{}}\n\n\ndef helper(value):\n    SEEN.append(value)\n\n\ndef f(value):\n    {body}\n")
    (tmp_path / "app" / "train.py").write_text("")
    project = Project()
    project.begin(str(tmp_path / "app" / "train.py"))
    assert project.function_may_keep_arguments("app.utils.f") is keeps
    assert project.function_may_keep_arguments("app.utils.missing") is False
    assert project.function_may_keep_arguments("numpy.mean") is False


_KEEPS = "SEEN = []\n\n\ndef remember(value):\n    SEEN.append(value)\n"


@pytest.mark.parametrize("modules, imports, call, bottom", [
    pytest.param({"utils": "HISTORY = []\n\n\ndef _push(buf, item):\n    buf.append(item)\n\n\n"
                           "def remember(value, tag='loss'):\n    key, item = tag, value\n    _push(HISTORY, item)\n"},
                 "from app.utils import remember", "remember(loss)", "", id="a global handed to a helper"),
    pytest.param({"utils": _KEEPS}, "", "remember(loss)", "from app.utils import remember  # noqa: E402\n",
                 id="imported after the call"),
    pytest.param({"utils": _KEEPS}, "from app.utils import remember as Remember", "Remember(loss)", "",
                 id="a capitalized alias"),
    pytest.param({"utils": _KEEPS, "common": "from app import utils\n"}, "from app.common import *",
                 "utils.remember(loss)", "", id="a module bound by a star import"),
    pytest.param({"utils": _KEEPS, "utils2": "def remember(value):\n    print(value)\n"},
                 "from app.utils2 import remember\nfrom app.utils import *", "remember(loss)", "",
                 id="an import a star import rebinds"),
])
def test_the_precheck_turns_away_no_keep_of_another_modules_def(tmp_path: Path, monkeypatch, modules, imports, call,
                                                                 bottom):
    """Shapes a review found the precheck's question about other modules' defs missed (the analysis
    alone reported each): what it asks must be all the analysis can follow."""
    from gradlint import engine
    from gradlint.config import Settings
    from gradlint.engine import RuleSet, lint_source

    (tmp_path / "pyproject.toml").write_text("[tool.gradlint]\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    for name, text in modules.items():
        (tmp_path / "app" / f"{name}.py").write_text(text)
    train = tmp_path / "app" / "train.py"
    train.write_text(f"import torch\n{imports}\n\nmodel = torch.nn.Linear(2, 2)\n"
                     "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n\n\ndef train(loader):\n"
                     "    for x in loader:\n        loss = model(x).sum()\n        loss.backward()\n        opt.step()\n"
                     f"        {call}\n{bottom}")
    ruleset = RuleSet.from_settings(Settings())
    gated = [(f.code, f.line) for f in lint_source(train.read_text(), str(train), ruleset).findings]
    monkeypatch.setattr(engine, "_prechecked", lambda rules, tree: rules)
    alone = [(f.code, f.line) for f in lint_source(train.read_text(), str(train), ruleset).findings]
    assert alone and alone[0][0] == "GL103", alone  # the analysis follows the call into app/
    assert gated == alone


@pytest.mark.parametrize("statements, expected", [
    ('sys.path.append("..")', ["app"]),
    ('sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))', ["app/lib"]),
    ('HERE = os.path.dirname(os.path.abspath(__file__))\nsys.path.append(osp.join(HERE, "models"))', ["app/tools/models"]),
    ('ROOT = Path(__file__).resolve().parents[1]\nsys.path.append(str(ROOT / "src"))', ["app/src"]),
    ('if True:\n    sys.path.insert(0, str(Path(__file__).parent.parent))', ["app"]),
    ('sys.path.append(os.getcwd())', ["app/tools"]),
    ('sys.path.append(os.environ["ROOT"])', []),  # decided at run time: unknown
    ('ROOT = "../.."\nROOT = sys.argv[1]\nsys.path.append(ROOT)', []),  # rebound to something unknown
    ('paths.append("..")', []),  # not sys.path
    ('def main():\n    sys.path.append("..")', []),  # inside a def: not before the imports
])
def test_the_directories_a_script_puts_on_sys_path(tmp_path: Path, statements: str, expected: list[str]):
    import ast

    from gradlint.script_paths import added_directories

    script = tmp_path / "app" / "tools" / "train.py"
    found = added_directories(ast.parse(statements), str(script))
    assert [Path(d).relative_to(tmp_path).as_posix() for d in found] == expected


def test_an_edit_of_a_cuda_source_re_checks_the_op_that_calls_it(tmp_path: Path):
    """GL302 on `_ext.gather_points_grad(...)` rests on csrc/points_gpu.cu: once its add is of
    integers, the cached run answers as a fresh one (no finding), and an unrelated edit of the
    Python file keeps the answer."""
    from gradlint.check import CheckRequest, run_check

    project = tmp_path / "native"
    shutil.copytree(PROJECTS / "native", project)
    (project / "pyproject.toml").write_text("[tool.gradlint]\n")

    def codes(**options) -> list[tuple[str, int, str]]:
        outcome = run_check(CheckRequest(paths=[project], jobs=1, **options))
        return sorted((Path(f.path).name, f.line, f.code) for f in outcome.findings)

    others = [("functions.py", 44, "GL302"), ("functions.py", 57, "GL302")]
    assert codes() == [("functions.py", 20, "GL302"), *others]
    kernel = project / "ops" / "csrc" / "points_gpu.cu"
    kernel.write_text(kernel.read_text().replace("float *__restrict__ grad_points", "int *__restrict__ grad_points"))
    assert codes() == codes(no_cache=True) == others


def test_an_editor_session_reads_an_edited_cuda_source_again(tmp_path: Path):
    """The language server keeps one Project across edits (refresh between lints): an edited
    kernel is read again, an unchanged one is not."""
    import ast

    from gradlint.project import Project

    project_dir = tmp_path / "native"
    shutil.copytree(PROJECTS / "native", project_dir)
    (project_dir / "pyproject.toml").write_text("[tool.gradlint]\n")
    checked = project_dir / "ops" / "functions.py"
    project = Project()

    def asked() -> bool:
        project.refresh()
        project.begin(str(checked), ast.parse(checked.read_text()))
        return project.native_float_atomic_add("gather_points_grad") is not None

    assert asked()
    index = project._native[str(project_dir)]
    assert asked() and project._native[str(project_dir)] is index  # nothing edited: kept
    kernel = project_dir / "ops" / "csrc" / "points_gpu.cu"
    kernel.write_text(kernel.read_text().replace("float *__restrict__ grad_points", "int *__restrict__ grad_points"))
    assert not asked()
