"""Bad input around the command line, driven through the real CLI in a subprocess: a file name that
is not UTF-8, stdin or stdout closed or full, paths below directories that cannot be searched,
directories that cannot be listed, control characters from file names and source. Each gets one
line on stderr and the documented exit code, never a traceback, and nothing from outside reaches
the terminal raw."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradlint.findings import Finding
from gradlint.reporters import github, printable, text

FIXTURES = Path(__file__).parent / "fixtures"
LEAKY = (FIXTURES / "leaky_op.py").read_bytes()
CLEAN = (FIXTURES / "clean_op.py").read_bytes()
# Strict UTF-8 on the child's stdout: a surrogate that reached it raw would raise, not pass as 0xff.
ENV = {**os.environ, "PYTHONIOENCODING": "utf-8"}


def gradlint(*args: str, cwd: Path, prefix: tuple[str, ...] = (), **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    return subprocess.run([*prefix, sys.executable, "-m", "gradlint", "check", "--isolated", "--no-cache", *args],
                          cwd=cwd, env=ENV, timeout=120, **kwargs)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    err = proc.stderr.decode("utf-8")
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err.rstrip("\n")


def assert_printable(output: str) -> None:
    """Only newlines ending records; no other C0/C1 control, bidi control or surrogate."""
    assert printable(output.replace("\n", "")) == output.replace("\n", ""), ascii(output)


# ----- 1. a file name that is not UTF-8 ------------------------------------------------------

@pytest.fixture
def bad_name(project: Path) -> Path:
    """`bad\\xff.py` with a GL101 in it; os.fsdecode gives Python the name as 'bad\\udcff.py'."""
    path = Path(os.fsdecode(os.fsencode(project) + b"/bad\xff.py"))
    try:
        path.write_bytes(LEAKY)
    except (OSError, UnicodeError):
        pytest.skip("this file system does not take a file name that is not UTF-8")
    return path


@pytest.mark.parametrize("output_format", ["text", "json", "github", "sarif"])
def test_a_file_name_that_is_not_utf8_is_reported_in_every_format(bad_name: Path, project: Path, output_format):
    proc = gradlint("--output-format", output_format, ".", cwd=project)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == b""
    out = proc.stdout.decode("utf-8")  # valid UTF-8 (strict), nothing raw from the name
    if output_format in ("text", "github"):
        assert_printable(out)
        assert "bad\\xff.py" in out and "GL101" in out
    elif output_format == "json":
        assert {r["filename"] for r in json.loads(out)} == {"bad\\xff.py"}
    else:
        results = json.loads(out)["runs"][0]["results"]
        assert results and {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
                            for r in results} == {"bad%FF.py"}


def test_an_absolute_non_utf8_path_outside_the_current_directory_is_a_percent_encoded_file_uri(
        bad_name: Path, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = gradlint("--output-format", "sarif", str(bad_name), cwd=elsewhere)
    assert proc.returncode == 1 and proc.stderr == b"", proc.stderr
    results = json.loads(proc.stdout)["runs"][0]["results"]
    uri = results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri.startswith("file:///") and uri.endswith("/bad%FF.py")


# ----- 2. stdin that cannot be read --------------------------------------------------------

def test_check_stdin_with_stdin_closed_is_one_line_and_exit_2(project: Path):
    proc = gradlint("-", cwd=project, prefix=("sh", "-c", 'exec "$@" 0<&-', "sh"))
    assert proc.returncode == 2
    assert one_error_line(proc) == "gradlint: error: cannot read stdin: it is closed"


def test_check_stdin_that_is_not_open_for_reading_is_one_line_and_exit_2(project: Path):
    with open(project / "write-only", "wb") as write_only:
        proc = gradlint("-", cwd=project, stdin=write_only)
    assert proc.returncode == 2
    assert one_error_line(proc) == "gradlint: error: cannot read stdin: Bad file descriptor"


# ----- 3. stdout that cannot be written ------------------------------------------------------

@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [("check", "op.py"), ("check", "--output-format", "sarif", "op.py"),
                                  ("rules",), ("rule", "GL101")])
def test_stdout_on_a_full_disk_is_one_line_and_exit_2(project: Path, args):
    (project / "op.py").write_bytes(LEAKY)
    with open("/dev/full", "wb") as full:
        proc = subprocess.run([sys.executable, "-m", "gradlint", *args], cwd=project, env=ENV, timeout=120,
                              stdout=full, stderr=subprocess.PIPE)
    assert proc.returncode == 2
    assert one_error_line(proc) == "gradlint: error: cannot write the output: No space left on device"


def test_stdout_closed_is_one_line_and_exit_2(project: Path):
    (project / "op.py").write_bytes(LEAKY)
    proc = gradlint("op.py", cwd=project, prefix=("sh", "-c", 'exec "$@" 1>&-', "sh"))
    assert proc.returncode == 2
    assert one_error_line(proc) == "gradlint: error: cannot write the output: stdout is closed"


def test_stdout_closed_with_nothing_to_print_is_no_error(project: Path):
    (project / "op.py").write_bytes(CLEAN)
    proc = gradlint("--quiet", "op.py", cwd=project, prefix=("sh", "-c", 'exec "$@" 1>&-', "sh"))
    assert (proc.returncode, proc.stderr) == (0, b"")


@pytest.mark.parametrize("args", [("op.py",), ("--diff", "op.py")])
def test_a_pipe_whose_reader_has_gone_exits_2_without_a_word(project: Path, args):
    (project / "op.py").write_bytes(LEAKY)
    reader, writer = os.pipe()
    os.close(reader)  # `| head -0`: every write gets EPIPE
    try:
        proc = gradlint(*args, cwd=project, stdout=writer)
    finally:
        os.close(writer)
    assert proc.returncode == 2
    assert proc.stderr == b""  # no message, no traceback, no "Exception ignored" at exit


# ----- 4. a path below a directory that cannot be searched ---------------------------------

_CAP_DROP = ("setpriv", "--bounding-set=-all", "--inh-caps=-all", "--")


def _unprivileged(tmp_path: Path) -> tuple[str, ...]:
    """A command prefix under which permission bits hold: none needed unless root; as root, root
    without its capabilities (CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH are what ignore the bits)."""
    if os.geteuid() != 0:
        return ()
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0o000)
    try:
        proc = subprocess.run([*_CAP_DROP, sys.executable, "-c", "import os, sys; os.listdir(sys.argv[1])",
                               str(probe)], capture_output=True, timeout=60)
    except OSError:
        proc = None
    finally:
        probe.chmod(0o700)
        probe.rmdir()
    if proc is None or b"PermissionError" not in proc.stderr:
        pytest.skip("running as root, and setpriv cannot drop the capabilities that ignore permission bits")
    return _CAP_DROP


@contextlib.contextmanager
def mode(path: Path, bits: int):
    path.chmod(bits)
    try:
        yield
    finally:
        path.chmod(0o755)  # so tmp_path can be cleaned up


@pytest.mark.parametrize("bits", [0o000, 0o600], ids=["mode-000", "read-no-search"])
def test_a_path_below_a_directory_that_cannot_be_searched_is_one_line_and_exit_2(project: Path, bits):
    prefix = _unprivileged(project)
    (project / "dir" / "sub").mkdir(parents=True)
    (project / "dir" / "sub" / "file.py").write_bytes(LEAKY)
    with mode(project / "dir", bits):
        proc = gradlint("dir/sub/file.py", cwd=project, prefix=prefix)
    assert proc.returncode == 2
    assert one_error_line(proc) == "gradlint: error: cannot check dir/sub/file.py: Permission denied"


def test_a_path_below_a_file_is_one_line_and_exit_2(project: Path):
    # ENOTDIR, the same failure at a path component, reproducible with any privileges.
    (project / "file.py").write_bytes(LEAKY)
    proc = gradlint("file.py/x.py", cwd=project)
    assert proc.returncode == 2
    assert one_error_line(proc) == "gradlint: error: cannot check file.py/x.py: Not a directory"


def test_a_config_file_below_a_directory_that_cannot_be_searched_is_one_line_and_exit_2(project: Path):
    prefix = _unprivileged(project)
    (project / "dir").mkdir()
    (project / "dir" / "pyproject.toml").write_text("[tool.gradlint]\n")
    (project / "op.py").write_bytes(CLEAN)
    with mode(project / "dir", 0o000):
        proc = subprocess.run([*prefix, sys.executable, "-m", "gradlint", "check", "--no-cache",
                               "--config", "dir/pyproject.toml", "op.py"],
                              cwd=project, env=ENV, timeout=120, capture_output=True)
    assert proc.returncode == 2
    assert one_error_line(proc) == \
        "gradlint: error: cannot read config file dir/pyproject.toml: Permission denied"


# ----- 5. a directory met during discovery that cannot be listed ------------------------------

@pytest.mark.parametrize("bits", [0o000, 0o100], ids=["mode-000", "search-no-read"])
def test_a_directory_that_cannot_be_listed_is_reported_and_exits_2(project: Path, bits):
    prefix = _unprivileged(project)
    (project / "pkg" / "locked").mkdir(parents=True)
    (project / "pkg" / "locked" / "hidden.py").write_bytes(LEAKY)
    (project / "pkg" / "op.py").write_bytes(LEAKY)
    (project / "clean.py").write_bytes(CLEAN)
    with mode(project / "pkg" / "locked", bits):
        proc = gradlint(".", cwd=project, prefix=prefix)
    assert proc.returncode == 2
    assert one_error_line(proc) == "gradlint: error: cannot read directory pkg/locked: Permission denied"
    out = proc.stdout.decode()
    assert "pkg/op.py:8:9: GL101" in out and "hidden.py" not in out  # the rest was checked and reported


def test_a_clean_tree_with_a_directory_that_cannot_be_listed_is_not_exit_0(project: Path):
    prefix = _unprivileged(project)
    (project / "locked").mkdir()
    (project / "locked" / "hidden.py").write_bytes(LEAKY)
    (project / "clean.py").write_bytes(CLEAN)
    with mode(project / "locked", 0o000):
        proc = gradlint("--exit-zero", ".", cwd=project, prefix=prefix)
    assert proc.returncode == 2  # --exit-zero is about findings, not about what was never read
    assert one_error_line(proc) == "gradlint: error: cannot read directory locked: Permission denied"


# ----- 6. control characters from file names and source --------------------------------------

HOSTILE_SOURCE = (
    "import torch\n\n\n"
    "class F(torch.autograd.Function):\n"
    "    @staticmethod\n"
    "    def forward(ctx, x):\n"
    "        out = x * 2\n"
    "        setattr(ctx, 'o\\x1b[31mu\\x9b\\u202et\\nfake.py:1:1: GL999 injected %0A::error ::x', out)\n"
    "        return out\n"
)
HOSTILE_NAME = "e\x1b]0;title\x07v\x7fil\nname\u2066.py"


@pytest.fixture
def hostile(project: Path) -> Path:
    (project / "a.py").write_text(HOSTILE_SOURCE, encoding="utf-8")
    try:
        (project / HOSTILE_NAME).write_bytes(LEAKY)
    except OSError:
        pytest.skip("this file system does not take control characters in file names")
    return project


def test_text_output_escapes_control_characters_from_names_and_source(hostile: Path):
    proc = gradlint(".", cwd=hostile)
    assert proc.returncode == 1 and proc.stderr == b""
    out = proc.stdout.decode("utf-8")
    assert_printable(out)
    assert "a.py:8:9: GL101 ctx.o\\x1b[31mu\\x9b\\u202et\\nfake.py:1:1: GL999 injected %0A::error ::x holds" in out
    assert "e\\x1b]0;title\\x07v\\x7fil\\nname\\u2066.py:8:9: GL101" in out
    assert not any(line.startswith("fake.py") for line in out.splitlines())


def test_github_output_escapes_control_characters_and_workflow_command_syntax(hostile: Path):
    proc = gradlint("--output-format", "github", ".", cwd=hostile)
    assert proc.returncode == 1 and proc.stderr == b""
    out = proc.stdout.decode("utf-8")
    assert_printable(out)
    lines = out.splitlines()
    assert len(lines) == 3 and all(line.startswith("::error title=gradlint (GL") for line in lines)
    assert "::GL101 ctx.o\\x1b[31mu\\x9b\\u202et\\nfake.py:1:1: GL999 injected %250A::error ::x holds" in out
    assert "file=e\\x1b]0;title\\x07v\\x7fil\\nname\\u2066.py,line=8," in out


@pytest.mark.parametrize("output_format", ["json", "sarif"])
def test_json_and_sarif_escape_control_characters_and_keep_the_text(hostile: Path, output_format):
    proc = gradlint("--output-format", output_format, ".", cwd=hostile)
    assert proc.returncode == 1 and proc.stderr == b""
    out = proc.stdout.decode("utf-8")
    assert out.isascii() and all(c >= " " or c == "\n" for c in out)  # json.dumps escaped it all
    log = json.loads(out)
    if output_format == "json":
        messages = {r["message"] for r in log}
        names = {r["filename"] for r in log}
    else:
        results = log["runs"][0]["results"]
        messages = {r["message"]["text"] for r in results}
        names = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results}
    assert any(m.startswith("ctx.o\x1b[31mu\x9b\u202et\nfake.py:1:1: GL999") for m in messages)
    if output_format == "json":
        assert names == {"a.py", HOSTILE_NAME}
    else:
        assert names == {"a.py", "e%1B%5D0%3Btitle%07v%7Fil%0Aname%E2%81%A6.py"}


def test_error_lines_escape_the_names_they_quote(project: Path):
    proc = gradlint("nope\x1b[2J\n.py", cwd=project)
    assert proc.returncode == 2
    assert one_error_line(proc) == "gradlint: error: path does not exist: nope\\x1b[2J\\n.py"


def test_printable_escapes_c0_del_c1_bidi_separators_and_surrogates():
    assert printable("a\tb\nc\rd\x00\x1b\x7f\x85\x9f") == "a\\tb\\nc\\rd\\x00\\x1b\\x7f\\x85\\x9f"
    assert printable("\u202a\u202e\u2066\u2069\u2028\u2029") == "\\u202a\\u202e\\u2066\\u2069\\u2028\\u2029"
    assert printable("bad\udcff.py \ud800") == "bad\\xff.py \\ud800"
    assert printable("ünïcode → fine, \u200b kept, \\ kept") == "ünïcode → fine, \u200b kept, \\ kept"


def test_reporters_escape_a_finding_made_by_hand():
    finding = Finding(path="x\n.py", line=1, column=1, code="GL101", message="m\x1b[0m%")
    assert text([finding]) == "x\\n.py:1:1: GL101 m\\x1b[0m%\n"
    assert github([finding]).endswith("::GL101 m\\x1b[0m%25\n") and "file=x\\n.py," in github([finding])
