"""The result cache gives back exactly what was stored, or a miss: never a stale, partial or
foreign result, and never an exception, whatever the directory or other processes do."""

from __future__ import annotations

import errno
import multiprocessing
import os
import pickle
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradlint.cache import CACHEDIR_TAG, FORMAT, ResultCache
from gradlint.config import Settings
from gradlint.engine import RuleSet, lint_bytes
from gradlint.findings import Applicability, Edit, Finding, Fix, Severity

FIXTURES = Path(__file__).parent / "fixtures"
RULESET = RuleSet.from_settings(Settings())
RUN_KEY = ResultCache.build_key() + "|settings-digest"
FILE_KEY = "GL101,GL201|severity:|max=1048576"

KNN_LAYER = b"""import torch

class KnnGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        out = x.topk(k).values
        ctx.out = out
        return out
"""


def fixed_finding(path: str = "knn.py") -> Finding:
    return Finding(
        path=path, line=7, column=9, code="GL101", name="ctx-tensor-attribute",
        message="ctx.out holds its own output \u2014 a reference cycle; use ctx.save_for_backward(...)",
        severity=Severity.NOTE, end_line=7, end_column=16, subject="KnnGather.ctx.out",
        fix=Fix("save the output with ctx.save_for_backward", Applicability.UNSAFE, (
            Edit(120, 134, "ctx.save_for_backward(out)", 7, 9, 7, 23),
            Edit(140, 140, "# saved\n", 8, 1, 8, 1),
        )))


def everything(finding: Finding) -> tuple:
    """Finding's == ignores severity, subject and fix; the cache must keep those too."""
    return (finding, finding.path, finding.severity, finding.subject, finding.fix, finding.end_line,
            finding.end_column, finding.name)


@pytest.fixture(autouse=True)
def user_cache(tmp_path_factory, monkeypatch) -> Path:
    """The user's cache folder (where the cache key lives), away from the real home folder and
    outside tmp_path, which some tests make read-only."""
    home = tmp_path_factory.mktemp("user-cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home / "gradlint"


@pytest.fixture
def cache(tmp_path: Path) -> ResultCache:
    cache = ResultCache(tmp_path / ".gradlint_cache", RUN_KEY)
    assert cache.disabled_reason is None
    return cache


# ----- what comes back --------------------------------------------------------------------


def test_findings_with_a_fix_come_back_whole_at_the_path_asked_for(cache):
    cache.put(KNN_LAYER, FILE_KEY, [fixed_finding("old/place.py")])
    got = cache.get(KNN_LAYER, FILE_KEY, "layers/knn.py")
    assert got is not None
    assert [everything(f) for f in got] == [everything(fixed_finding("layers/knn.py"))]


def test_real_engine_findings_round_trip(cache):
    data = (FIXTURES / "leaky_op.py").read_bytes()
    findings = lint_bytes(data, "leaky_op.py", RULESET, 1 << 20).findings
    assert {f.code for f in findings} == {"GL101", "GL201"}
    cache.put(data, FILE_KEY, findings)
    assert [everything(f) for f in cache.get(data, FILE_KEY, "leaky_op.py")] == [everything(f) for f in findings]


def test_a_clean_file_is_a_hit_with_no_findings_not_a_miss(cache):
    cache.put(b"import torch\n", FILE_KEY, [])
    assert cache.get(b"import torch\n", FILE_KEY, "clean.py") == []


text = st.text(st.characters(blacklist_categories=()), max_size=40)  # lone surrogates included
ints = st.integers(min_value=0, max_value=2**40)
edits = st.builds(Edit, ints, ints, text, ints, ints, ints, ints)
fixes = st.none() | st.builds(Fix, text, st.sampled_from(Applicability), st.tuples(edits) | st.tuples(edits, edits))
findings = st.builds(Finding, path=st.just("p.py"), line=ints, column=ints, code=text.filter(lambda c: c not in ("GL000", "GL001")),
                     message=text, name=text, severity=st.sampled_from(Severity), end_line=ints, end_column=ints,
                     subject=text, fix=fixes)


@settings(max_examples=60, deadline=None)
@given(st.lists(findings, max_size=3))
def test_any_finding_text_round_trips_exactly(tmp_path_factory, stored):
    cache = ResultCache(tmp_path_factory.mktemp("cache"), RUN_KEY)
    cache.put(b"x = 1\n", FILE_KEY, stored)
    assert [everything(f) for f in cache.get(b"x = 1\n", FILE_KEY, "p.py")] == [everything(f) for f in stored]


# ----- what is a miss ---------------------------------------------------------------------


def test_an_edited_file_is_a_miss(cache):
    cache.put(KNN_LAYER, FILE_KEY, [fixed_finding()])
    assert cache.get(KNN_LAYER.replace(b"ctx.out = out", b"ctx.save_for_backward(out)"), FILE_KEY, "knn.py") is None


def test_another_rule_set_for_the_file_is_a_miss(cache):
    cache.put(KNN_LAYER, FILE_KEY, [fixed_finding()])
    assert cache.get(KNN_LAYER, "GL101|severity:GL101=warning|max=1048576", "knn.py") is None


def test_another_build_or_config_is_a_miss(tmp_path):
    ResultCache(tmp_path, RUN_KEY).put(KNN_LAYER, FILE_KEY, [fixed_finding()])
    assert ResultCache(tmp_path, RUN_KEY).get(KNN_LAYER, FILE_KEY, "knn.py") is not None
    assert ResultCache(tmp_path, RUN_KEY + "-other-settings").get(KNN_LAYER, FILE_KEY, "knn.py") is None


def test_keys_are_framed_so_moving_text_between_them_is_a_miss(tmp_path):
    ResultCache(tmp_path, "ab").put(KNN_LAYER, "c", [fixed_finding()])
    assert ResultCache(tmp_path, "a").get(KNN_LAYER, "bc", "knn.py") is None


def test_syntax_errors_are_not_cached_so_a_fixed_file_is_checked_again(cache):
    broken = b"import torch\n\nclass F(torch.autograd.Function):\n    def forward(ctx, x:\n"
    findings = lint_bytes(broken, "broken.py", RULESET, 1 << 20).findings
    assert [f.code for f in findings] == ["GL000"]
    cache.put(broken, FILE_KEY, findings)
    assert cache.get(broken, FILE_KEY, "broken.py") is None


def test_unreadable_files_are_not_cached_so_a_raised_limit_takes_effect(cache):
    findings = lint_bytes(KNN_LAYER, "knn.py", RULESET, 10).findings
    assert [f.code for f in findings] == ["GL001"]
    cache.put(KNN_LAYER, FILE_KEY, findings + [fixed_finding()])
    assert cache.get(KNN_LAYER, FILE_KEY, "knn.py") is None


def good_entry(cache: ResultCache) -> bytes:
    cache.put(KNN_LAYER, FILE_KEY, [fixed_finding()])
    return cache.entry_path(KNN_LAYER, FILE_KEY).read_bytes()


@pytest.mark.parametrize("damage", [
    lambda good: good[: len(good) // 2],
    lambda good: good[:-1],
    lambda good: b"",
    lambda good: os.urandom(64),
    lambda good: b"\xff\xfe" + good,
    lambda good: b"[" * 100_000 + b"]" * 100_000,
    lambda good: good.replace(b"[%d," % FORMAT, b"[%d," % (FORMAT + 1), 1),
    lambda good: good.replace(b'"note"', b'"fatal"'),
    lambda good: good.replace(b'"unsafe"', b'"maybe"'),
    lambda good: good.replace(b"[7,9,", b"[true,9,", 1),
    lambda good: good.replace(b"[7,9,", b'["7",9,', 1),
    lambda good: b'{"format": 1, "findings": []}',
    lambda good: b'[1, "GL101"]',
    lambda good: b"[1, [[7, 9]]]",
    lambda good: b"null",
], ids=["half", "last-byte-cut", "empty", "random", "not-utf8", "deep-nesting", "other-format",
        "unknown-severity", "unknown-applicability", "bool-for-int", "str-for-int", "object", "str-rows",
        "short-row", "null"])
def test_a_damaged_entry_is_a_miss(cache, damage):
    path = cache.entry_path(KNN_LAYER, FILE_KEY)
    path.write_bytes(damage(good_entry(cache)))
    assert cache.get(KNN_LAYER, FILE_KEY, "knn.py") is None
    cache.put(KNN_LAYER, FILE_KEY, [fixed_finding()])  # the next run repairs it
    assert cache.get(KNN_LAYER, FILE_KEY, "knn.py") == [fixed_finding()]


def test_a_directory_where_an_entry_should_be_is_a_miss_and_put_does_not_raise(cache):
    cache.entry_path(KNN_LAYER, FILE_KEY).mkdir()
    assert cache.get(KNN_LAYER, FILE_KEY, "knn.py") is None
    cache.put(KNN_LAYER, FILE_KEY, [fixed_finding()])
    assert cache.get(KNN_LAYER, FILE_KEY, "knn.py") is None
    assert cache.disabled_reason is None
    assert not [p for p in cache.entries.iterdir() if p.name.startswith(".tmp-")]


def test_a_cache_sent_to_a_worker_process_finds_the_same_entries(cache):
    cache.put(KNN_LAYER, FILE_KEY, [fixed_finding()])
    in_worker = pickle.loads(pickle.dumps(cache))
    assert in_worker.get(KNN_LAYER, FILE_KEY, "knn.py") == [fixed_finding()]
    assert in_worker.entry_path(KNN_LAYER, "other") == cache.entry_path(KNN_LAYER, "other")


# ----- many processes at once -------------------------------------------------------------


def expected_for(data: bytes) -> list[Finding]:
    """Large, data-dependent findings: a torn or mixed-up write could not pass for the right one."""
    count = data[0] % 4
    return [Finding(path="f.py", line=n + 1, column=1, code="GL101", name="ctx-tensor-attribute",
                    message=data.hex() * 300, subject=f"{data.hex()}:{n}", end_line=n + 1, end_column=9,
                    fix=Fix("fix", Applicability.SAFE, (Edit(n, n + 1, data.hex(), 1, 1, 1, 2),)))
            for n in range(count + 1)]


def hammer(job: tuple[str, int]) -> list[str]:
    directory, worker = job
    cache = ResultCache(Path(directory), RUN_KEY)
    if cache.disabled_reason:
        return [cache.disabled_reason]
    shared = [bytes([n]) * 8 for n in range(6)]
    problems = []
    for round_ in range(40):
        for data in (shared[round_ % len(shared)], bytes([worker, round_]) * 8):
            expected = [everything(f) for f in expected_for(data)]
            before = cache.get(data, FILE_KEY, "f.py")
            if before is not None and [everything(f) for f in before] != expected:
                problems.append(f"worker {worker}: wrong result before put")
            cache.put(data, FILE_KEY, expected_for(data))
            after = cache.get(data, FILE_KEY, "f.py")
            if after is None or [everything(f) for f in after] != expected:
                problems.append(f"worker {worker}: missing or wrong result after put")
    return problems


def test_concurrent_writers_never_give_a_wrong_or_partial_result(tmp_path):
    directory = tmp_path / ".gradlint_cache"
    with multiprocessing.get_context("fork").Pool(8) as pool:
        problems = pool.map(hammer, [(str(directory), worker) for worker in range(16)])
    assert [p for worker in problems for p in worker] == []
    entries = ResultCache(directory, RUN_KEY).entries
    assert not [p for p in entries.iterdir() if p.name.startswith(".tmp-")]
    assert sorted(p.name for p in entries.iterdir() if len(p.name) != 64) == [".gitignore", "CACHEDIR.TAG"]
    assert len(list(entries.iterdir())) == 6 + 16 * 40 + 2


# ----- the directory ----------------------------------------------------------------------


def test_first_use_marks_the_directory_for_git_and_backup_tools(tmp_path):
    directory = tmp_path / "deep" / ".gradlint_cache"
    cache = ResultCache(directory, RUN_KEY)
    assert "*" in (directory / ".gitignore").read_text().splitlines()
    assert (directory / "CACHEDIR.TAG").read_bytes().startswith(b"Signature: 8a477f597d28d172789f06886806bc55")
    assert (directory / "CACHEDIR.TAG").read_text() == CACHEDIR_TAG
    cache.put(KNN_LAYER, FILE_KEY, [])
    entry = cache.entry_path(KNN_LAYER, FILE_KEY)
    assert entry.is_file() and entry.parent.parent == directory and entry.parent.name.startswith("0.")


def test_a_users_gitignore_is_kept_and_other_versions_are_left_alone(tmp_path):
    (tmp_path / ".gitignore").write_text("*\n!keep\n")
    old = tmp_path / "0.0.1-format1" / "entry"
    old.parent.mkdir()
    old.write_text("[1,[]]")
    ResultCache(tmp_path, RUN_KEY).put(KNN_LAYER, FILE_KEY, [])
    assert (tmp_path / ".gitignore").read_text() == "*\n!keep\n"
    assert old.read_text() == "[1,[]]"


def assert_disabled(cache: ResultCache, mentioning: str) -> None:
    assert cache.disabled_reason is not None and mentioning in cache.disabled_reason
    cache.put(KNN_LAYER, FILE_KEY, [fixed_finding()])
    assert cache.get(KNN_LAYER, FILE_KEY, "knn.py") is None


def test_a_file_where_the_cache_directory_should_be_disables_caching(tmp_path):
    (tmp_path / ".gradlint_cache").write_text("not a directory")
    assert_disabled(ResultCache(tmp_path / ".gradlint_cache", RUN_KEY), ".gradlint_cache")
    assert_disabled(ResultCache(tmp_path / ".gradlint_cache" / "inner", RUN_KEY), "inner")


def test_a_read_only_filesystem_disables_caching_even_with_the_layout_in_place(tmp_path, monkeypatch):
    good = ResultCache(tmp_path, RUN_KEY)
    good.put(KNN_LAYER, FILE_KEY, [fixed_finding()])

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    assert_disabled(ResultCache(tmp_path, RUN_KEY), os.strerror(errno.EROFS))


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes through permissions")
def test_a_directory_without_write_permission_disables_caching(tmp_path):
    ResultCache(tmp_path, RUN_KEY)
    for folder in (tmp_path, *tmp_path.iterdir()):
        if folder.is_dir():
            folder.chmod(0o500)
    try:
        assert_disabled(ResultCache(tmp_path, RUN_KEY), "Permission denied")
    finally:
        for folder in (tmp_path, *tmp_path.iterdir()):
            folder.chmod(0o700)


def test_a_cache_removed_mid_run_turns_off_without_raising(cache):
    for entry in cache.entries.iterdir():
        entry.unlink()
    cache.entries.rmdir()
    cache.put(KNN_LAYER, FILE_KEY, [fixed_finding()])
    assert cache.disabled_reason is not None
    assert cache.get(KNN_LAYER, FILE_KEY, "knn.py") is None


# ----- the build key ----------------------------------------------------------------------


def write_package(root: Path) -> Path:
    (root / "rules").mkdir(parents=True)
    (root / "__init__.py").write_text('__version__ = "0.1.0"\n')
    (root / "rules" / "ctx_attribute.py").write_text('MESSAGE = "ctx.out holds its own output"\n')
    return root / "rules" / "ctx_attribute.py"


def test_build_key_changes_when_a_rule_source_changes_even_with_size_and_mtime_kept(tmp_path):
    rule = write_package(tmp_path / "gradlint")
    before = ResultCache.build_key([tmp_path / "gradlint"])
    assert ResultCache.build_key([tmp_path / "gradlint"]) == before
    stat = rule.stat()
    rule.write_text('MESSAGE = "ctx.out holds its own inputs"\n')
    os.utime(rule, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert rule.stat().st_size == stat.st_size
    assert ResultCache.build_key([tmp_path / "gradlint"]) != before


def test_build_key_changes_when_a_rule_is_added_but_not_for_bytecode(tmp_path):
    write_package(tmp_path / "gradlint")
    before = ResultCache.build_key([tmp_path / "gradlint"])
    (tmp_path / "gradlint" / "rules" / "__pycache__").mkdir()
    (tmp_path / "gradlint" / "rules" / "__pycache__" / "ctx_attribute.cpython-311.pyc").write_bytes(b"\0" * 16)
    assert ResultCache.build_key([tmp_path / "gradlint"]) == before
    (tmp_path / "gradlint" / "rules" / "backward_count.py").write_text("")
    assert ResultCache.build_key([tmp_path / "gradlint"]) != before


def test_build_key_counts_a_nested_root_once(tmp_path):
    write_package(tmp_path / "gradlint")
    alone = ResultCache.build_key([tmp_path / "gradlint"])
    assert ResultCache.build_key([tmp_path / "gradlint", tmp_path / "gradlint" / "rules"]) == alone


def test_the_installed_build_key_names_the_version_and_covers_every_rule_module():
    import gradlint.rules
    from gradlint import __version__
    from gradlint.cache import _package_roots, _source_files

    assert ResultCache.build_key().startswith(f"gradlint-{__version__}-")
    digested = {name.rsplit("/", 1)[-1] for name, _ in _source_files(_package_roots())}
    rule_modules = {p.name for folder in gradlint.rules.__path__ for p in Path(folder).glob("*.py")}
    assert rule_modules and rule_modules <= digested


# ----- the cache as `gradlint check` uses it -------------------------------------------------

def _cli(*args: str, cwd: Path, env: dict | None = None):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "gradlint", "check", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env=env)


def _outcome(project: Path, **kwargs):
    from gradlint.check import CheckRequest, run_check

    return run_check(CheckRequest(paths=[project], jobs=1, **kwargs))


def test_second_run_is_answered_from_the_cache_with_the_same_output(leaky_file: Path, clean_file: Path, project: Path):
    first, second = _cli("--output-format", "json", ".", cwd=project), _cli("--output-format", "json", ".", cwd=project)
    assert first.stdout == second.stdout and first.returncode == second.returncode == 1
    assert (project / ".gradlint_cache" / ".gitignore").is_file()
    assert _outcome(project).files_cached == 2
    assert _outcome(project, no_cache=True).files_cached == 0


def test_no_cache_writes_nothing(leaky_file: Path, project: Path):
    assert _cli("--no-cache", ".", cwd=project).returncode == 1
    assert not (project / ".gradlint_cache").exists()


def test_an_edited_file_and_a_changed_config_are_checked_again(leaky_file: Path, project: Path):
    assert _outcome(project).files_cached == 0
    assert _outcome(project).files_cached == 1
    leaky_file.write_text(leaky_file.read_text() + "\n# edited\n")
    assert _outcome(project).files_cached == 0
    (project / "pyproject.toml").write_text('[tool.gradlint]\nignore = ["GL101"]\n')
    outcome = _outcome(project)
    assert outcome.files_cached == 0 and "GL101" not in {f.code for f in outcome.findings}
    assert _outcome(project).files_cached == 1


def test_syntax_errors_are_never_cached(project: Path):
    (project / "broken.py").write_text("def f(:\n    pass\n")
    for _ in range(2):
        outcome = _outcome(project)
        assert [f.code for f in outcome.findings] == ["GL000"] and outcome.files_cached == 0


def test_fix_neither_reads_nor_writes_the_cache(leaky_file: Path, project: Path):
    _outcome(project)
    outcome = _outcome(project, fix=True)
    assert outcome.files_cached == 0 and outcome.fixed > 0


def test_cache_dir_from_config_and_environment(leaky_file: Path, project: Path, tmp_path_factory):
    import os

    elsewhere = tmp_path_factory.mktemp("cache")
    _cli(".", cwd=project, env={**os.environ, "GRADLINT_CACHE_DIR": str(elsewhere)})
    # The directory was there already: the markers go into the entries folder gradlint made in it.
    assert not (project / ".gradlint_cache").exists() and not (elsewhere / "CACHEDIR.TAG").exists()
    assert [p.parent for p in elsewhere.glob("*/CACHEDIR.TAG")] == [ResultCache(elsewhere, "").entries]
    (project / "pyproject.toml").write_text('[tool.gradlint]\ncache-dir = "build/lint-cache"\n')
    _cli(".", cwd=project)
    assert (project / "build" / "lint-cache" / "CACHEDIR.TAG").is_file()


def test_an_unusable_cache_is_one_warning_line_and_the_run_goes_on(leaky_file: Path, project: Path):
    (project / ".gradlint_cache").write_text("not a directory")
    proc = _cli(".", cwd=project)
    assert proc.returncode == 1 and "GL101" in proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("gradlint: warning:")]
    assert len(warnings) == 1 and "Traceback" not in proc.stderr


def test_concurrent_runs_agree(leaky_file: Path, clean_file: Path, project: Path):
    import subprocess
    import sys

    for i in range(12):
        (project / f"copy_{i}.py").write_text(leaky_file.read_text())
    command = [sys.executable, "-m", "gradlint", "check", "--output-format", "json", "--exit-zero", "-j", "2", "."]
    runs = [subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    assert all(run.returncode == 0 for run in runs)
    assert len(set(outputs)) == 1
    assert _outcome(project).files_cached == 14
    assert [p.name for p in (project / ".gradlint_cache").rglob("*") if p.name.startswith("tmp")] == []
