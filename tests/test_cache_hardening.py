"""The result cache cannot be made to hang, exhaust memory, crash or hide a finding by what is in
its directory: entries are read as bounded regular files and bound to the user's key, which lives
outside every project. And it marks only directories it made itself (issue 16)."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gradlint.cache import ResultCache
from gradlint.config import Settings
from gradlint.engine import RuleSet, lint_bytes
from gradlint.source import DEFAULT_MAX_BYTES

FIXTURES = Path(__file__).parent / "fixtures"
RUN_KEY = "test-run-key"
FILE_KEY = "GL101,GL201;;1048576"
LEAKY = (FIXTURES / "leaky_op.py").read_bytes()
CLEAN = (FIXTURES / "clean_op.py").read_bytes()
GiB = 1 << 30


@pytest.fixture(autouse=True)
def user_cache(tmp_path_factory, monkeypatch) -> Path:
    """This user's cache folder, where the cache key lives (inherited by the CLI subprocesses)."""
    home = tmp_path_factory.mktemp("user-cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.delenv("GRADLINT_CACHE_DIR", raising=False)
    return home / "gradlint"


@pytest.fixture
def leaky(project: Path) -> Path:
    path = project / "leaky_op.py"
    path.write_bytes(LEAKY)
    return path


def cli_entry(project: Path, data: bytes) -> Path:
    """Where `gradlint check` in `project` (no config) looks for the entry of a file with `data`."""
    cache = ResultCache(project / ".gradlint_cache", ResultCache.build_key())
    return cache.entry_path(data, RuleSet.from_settings(Settings()).key(DEFAULT_MAX_BYTES))


def check(project: Path, timeout: float = 60, memory: int | None = None, env: dict | None = None):
    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    try:
        return subprocess.run([sys.executable, "-m", "gradlint", "check", "."],
                              cwd=project, capture_output=True, text=True, timeout=timeout, env=env,
                              preexec_fn=limit if memory else None)
    except subprocess.TimeoutExpired:
        pytest.fail(f"gradlint check did not finish in {timeout} s")


def assert_real_findings(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "leaky_op.py:" in proc.stdout and "GL101" in proc.stdout and "GL201" in proc.stdout


# ----- entries that are not regular files, or too big -------------------------------------


def test_a_fifo_entry_is_a_miss_and_the_run_does_not_hang(leaky, project):
    entry = cli_entry(project, LEAKY)
    os.mkfifo(entry)
    assert_real_findings(check(project, timeout=30))
    assert stat.S_ISREG(os.lstat(entry).st_mode)  # replaced by a real entry


def test_an_entry_linked_to_dev_zero_is_a_miss_and_reads_nothing(leaky, project):
    entry = cli_entry(project, LEAKY)
    os.symlink("/dev/zero", entry)
    # Under a 4 GiB address-space limit an unbounded read dies with MemoryError instead of
    # taking the machine's memory.
    assert_real_findings(check(project, timeout=60, memory=4 * GiB))


def test_a_huge_entry_is_a_miss_and_is_never_read_whole(leaky, project):
    entry = cli_entry(project, LEAKY)
    with open(entry, "wb") as sparse:  # 8 GiB, but sparse: no disk is used
        sparse.truncate(8 * GiB)
    assert_real_findings(check(project, timeout=60, memory=4 * GiB))


def test_entries_that_are_links_directories_or_fifos_are_misses_in_process(tmp_path):
    cache = ResultCache(tmp_path / "c", RUN_KEY)
    cache.put(CLEAN, FILE_KEY, [])
    genuine = cache.entry_path(CLEAN, FILE_KEY)
    assert cache.get(CLEAN, FILE_KEY, "clean.py") == []
    outside = tmp_path / "genuine-copy"
    shutil.copy(genuine, outside)
    genuine.unlink()
    genuine.symlink_to(outside)  # even a link to the right bytes: entries are never followed
    assert cache.get(CLEAN, FILE_KEY, "clean.py") is None
    genuine.unlink()
    os.mkfifo(genuine)
    assert cache.get(CLEAN, FILE_KEY, "clean.py") is None
    cache.put(CLEAN, FILE_KEY, [])
    assert cache.get(CLEAN, FILE_KEY, "clean.py") == []


def test_a_payload_over_the_entry_limit_is_not_stored(tmp_path, monkeypatch):
    import gradlint.cache as cache_module

    monkeypatch.setattr(cache_module, "ENTRY_LIMIT", 64)
    cache = ResultCache(tmp_path / "c", RUN_KEY)
    from gradlint.findings import Finding

    big = [Finding(path="p.py", line=1, column=1, code="GL101", name="n", message="m" * 200)]
    cache.put(LEAKY, FILE_KEY, big)
    assert not cache.entry_path(LEAKY, FILE_KEY).exists()
    cache.put(LEAKY, FILE_KEY, [])
    assert cache.get(LEAKY, FILE_KEY, "p.py") == []


# ----- entries not made under this user's key ---------------------------------------------


def test_a_no_findings_entry_made_elsewhere_does_not_hide_findings(leaky, project, tmp_path_factory, monkeypatch):
    """Someone else (another user, machine or a forger with their own key) writes a well-formed
    "no findings" entry for this very file, and the cache directory is copied into the project."""
    mine = os.environ["XDG_CACHE_HOME"]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("someone-else")))
    file_key = RuleSet.from_settings(Settings()).key(DEFAULT_MAX_BYTES)
    forged = ResultCache(project / "their-checkout" / ".gradlint_cache", ResultCache.build_key())
    forged.put(LEAKY, file_key, [])
    assert forged.get(LEAKY, file_key, "leaky_op.py") == []  # good enough for them
    shutil.copytree(project / "their-checkout" / ".gradlint_cache", project / ".gradlint_cache")
    shutil.rmtree(project / "their-checkout")
    monkeypatch.setenv("XDG_CACHE_HOME", mine)  # back to this user's own key
    assert_real_findings(check(project))


def test_a_no_findings_entry_forged_at_this_users_entry_name_does_not_hide_findings(leaky, project):
    cli_entry(project, LEAKY).write_bytes(b"[1,[]]")  # the layout of an untagged entry
    assert_real_findings(check(project))


def test_a_genuine_entry_of_a_clean_file_moved_to_a_leaky_files_name_does_not_hide_findings(leaky, project):
    file_key = RuleSet.from_settings(Settings()).key(DEFAULT_MAX_BYTES)
    cache = ResultCache(project / ".gradlint_cache", ResultCache.build_key())
    cache.put(CLEAN, file_key, lint_bytes(CLEAN, "clean_op.py", RuleSet.from_settings(Settings()), DEFAULT_MAX_BYTES).findings)
    assert cache.get(CLEAN, file_key, "clean_op.py") == []
    shutil.copy(cli_entry(project, CLEAN), cli_entry(project, LEAKY))
    assert_real_findings(check(project))


def test_a_well_formed_entry_with_text_that_cannot_be_printed_is_a_miss_not_a_traceback(leaky, project):
    # Valid JSON of the right shape, but a lone surrogate: printing it used to raise UnicodeEncodeError.
    cli_entry(project, LEAKY).write_bytes(b'[1,[[1,1,"GL101","\\ud800","n","error",1,1,"s",null]]]')
    assert_real_findings(check(project))


@pytest.mark.parametrize("damage", [
    lambda good: good[:16],  # a cut tag
    lambda good: good[:32],  # the tag alone
    lambda good: good[:32] + b"[1,[]]",  # the tag of a finding, the payload of none
    lambda good: good[:-1] + bytes([good[-1] ^ 1]),  # one bit of the payload
    lambda good: bytes([good[0] ^ 1]) + good[1:],  # one bit of the tag
    lambda good: good + b" ",
    lambda good: os.urandom(len(good)),
    lambda good: b"\0" * 4096,
], ids=["cut-tag", "tag-only", "tag-of-other-payload", "payload-bit", "tag-bit", "appended", "random", "zeros"])
def test_a_damaged_tagged_entry_is_a_miss_and_is_repaired(tmp_path, damage):
    from gradlint.findings import Finding

    finding = Finding(path="a.py", line=1, column=1, code="GL101", name="n", message="m")
    cache = ResultCache(tmp_path / "c", RUN_KEY)
    cache.put(LEAKY, FILE_KEY, [finding])
    entry = cache.entry_path(LEAKY, FILE_KEY)
    entry.write_bytes(damage(entry.read_bytes()))
    assert cache.get(LEAKY, FILE_KEY, "a.py") is None
    cache.put(LEAKY, FILE_KEY, [finding])
    assert cache.get(LEAKY, FILE_KEY, "a.py") == [finding]


@pytest.mark.parametrize("payload", [
    b"[1,[[1,1,\"GL101\",\"m\",\"n\",\"error\",1,1,\"s\",[\"f\",\"safe\",[[1,2]]]]]]",
    b"[1,[[1e999,1,\"GL101\",\"m\",\"n\",\"error\",1,1,\"s\",null]]]",
    b"[1,[[" + b"1" * 5000 + b",1,\"GL101\",\"m\",\"n\",\"error\",1,1,\"s\",null]]]",
    b"[1,[[1,1,\"GL101\",\"m\",\"n\",[\"error\"],1,1,\"s\",null]]]",
    b"[" * 100_000,
    b"\xff" * 100,
], ids=["short-edit", "float-line", "5000-digit-line", "list-severity", "deep", "not-utf8"])
def test_a_correctly_tagged_entry_of_the_wrong_shape_is_a_miss(tmp_path, payload):
    # Only this build writes tagged entries; should one still be wrong, it is a miss.
    cache = ResultCache(tmp_path / "c", RUN_KEY)
    cache.put(LEAKY, FILE_KEY, [])
    entry = cache.entry_path(LEAKY, FILE_KEY)
    entry.write_bytes(cache._tag(str(entry), payload) + payload)
    assert cache.get(LEAKY, FILE_KEY, "a.py") is None


# ----- the user's key -----------------------------------------------------------------------


def test_the_key_is_private_to_the_user_and_outside_the_project(user_cache, tmp_path):
    cache = ResultCache(tmp_path / "c", RUN_KEY)
    key = user_cache / "cache-key"
    info = os.lstat(key)
    assert stat.S_ISREG(info.st_mode) and info.st_size == 32 and stat.S_IMODE(info.st_mode) == 0o600
    assert not (tmp_path / "c").joinpath("cache-key").exists()
    assert ResultCache(tmp_path / "c", RUN_KEY).entry_path(LEAKY, FILE_KEY) == cache.entry_path(LEAKY, FILE_KEY)


def cache_within(seconds: float, unblock: Path, *args) -> ResultCache:
    """ResultCache(*args), failing the test (not hanging it) if that takes over `seconds`."""
    made: list[ResultCache] = []
    worker = threading.Thread(target=lambda: made.append(ResultCache(*args)), daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        os.close(os.open(unblock, os.O_RDWR | os.O_NONBLOCK))  # a FIFO opened read-write lets the reader go
        pytest.fail(f"opening the cache took over {seconds} s")
    return made[0]


@pytest.mark.parametrize("plant", ["fifo", "symlink", "short", "readable-by-others", "directory"])
def test_a_bad_key_file_is_replaced_or_turns_caching_off_never_hangs(user_cache, tmp_path, plant):
    user_cache.mkdir(parents=True)
    key = user_cache / "cache-key"
    if plant == "fifo":
        os.mkfifo(key)
    elif plant == "symlink":
        (user_cache / "elsewhere").write_bytes(b"k" * 32)
        key.symlink_to(user_cache / "elsewhere")
    elif plant == "short":
        key.write_bytes(b"k" * 5)
    elif plant == "readable-by-others":
        key.write_bytes(b"k" * 32)
        key.chmod(0o644)
    else:
        key.mkdir()
    cache = cache_within(10, key, tmp_path / "c", RUN_KEY)
    if plant == "directory":
        assert cache.disabled_reason is not None and "cache key" in cache.disabled_reason
        return
    assert cache.disabled_reason is None
    info = os.lstat(key)
    assert stat.S_ISREG(info.st_mode) and info.st_size == 32 and stat.S_IMODE(info.st_mode) == 0o600
    assert key.read_bytes() != b"k" * 32
    cache.put(LEAKY, FILE_KEY, [])
    assert ResultCache(tmp_path / "c", RUN_KEY).get(LEAKY, FILE_KEY, "a.py") == []


def test_no_usable_user_cache_folder_is_one_warning_and_the_run_goes_on(project, leaky, tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file" / "below"))
    proc = check(project)
    assert_real_findings(proc)
    assert [line for line in proc.stderr.splitlines()] == [line for line in proc.stderr.splitlines()
                                                            if line.startswith("gradlint: warning:")]
    assert len(proc.stderr.splitlines()) == 1 and "cache key" in proc.stderr
    assert not (project / ".gradlint_cache").exists()


def _entry_name(directory: str) -> str:
    return ResultCache(Path(directory), RUN_KEY).entry_path(LEAKY, FILE_KEY).name


def test_first_runs_at_once_agree_on_one_key(tmp_path):
    with multiprocessing.get_context("fork").Pool(6) as pool:
        names = pool.map(_entry_name, [str(tmp_path / f"c{i}") for i in range(24)])
    assert len(set(names)) == 1


# ----- where the markers go -----------------------------------------------------------------


def test_an_existing_directory_gets_no_markers_only_the_entries_folder_gradlint_made(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text("x = 1\n")
    cache = ResultCache(src, RUN_KEY)
    assert cache.disabled_reason is None
    assert sorted(p.name for p in src.iterdir()) == sorted(["model.py", cache.entries.name])
    assert (cache.entries / ".gitignore").read_text().splitlines()[-1] == "*"
    assert (cache.entries / "CACHEDIR.TAG").is_file()


def test_a_fresh_directory_is_marked_as_before(tmp_path):
    cache = ResultCache(tmp_path / "deep" / "cache", RUN_KEY)
    assert (tmp_path / "deep" / "cache" / ".gitignore").is_file()
    assert (tmp_path / "deep" / "cache" / "CACHEDIR.TAG").is_file()
    assert not (tmp_path / "deep" / ".gitignore").exists()
    assert cache.disabled_reason is None


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_cache_dir_naming_a_source_folder_keeps_it_visible_to_git(project, leaky):
    (project / "src").mkdir()
    shutil.move(leaky, project / "src" / "leaky_op.py")
    (project / "pyproject.toml").write_text('[tool.gradlint]\ncache-dir = "src"\n')
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    assert check(project).returncode == 1
    listed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=project,
                            capture_output=True, text=True, check=True).stdout
    assert "src/leaky_op.py" in listed and "pyproject.toml" in listed
    assert ".gitignore" not in listed and "format" not in listed


def test_an_entries_folder_that_is_a_symlink_turns_caching_off_and_writes_nothing_there(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    directory = tmp_path / "cache"
    directory.mkdir()
    probe = ResultCache(tmp_path / "probe", RUN_KEY)
    (directory / probe.entries.name).symlink_to(outside)  # as a checked-in link would be
    cache = ResultCache(directory, RUN_KEY)
    assert cache.disabled_reason is not None and "running without the cache" in cache.disabled_reason
    cache.put(LEAKY, FILE_KEY, [])
    assert list(outside.iterdir()) == []
