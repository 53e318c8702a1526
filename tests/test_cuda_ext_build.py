"""Building, caching and falling back: what a user sees the first time, the second time, and on a
machine that cannot compile.

Load and fallback behaviour is per process (the library stays loaded), so those tests run a fresh
interpreter with the environment the case needs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cuda_ext_session import compiled_extension, session_cache

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "cuda_ext" / "csrc" / "scatter_add_kernels.cu"

# Loads the op in a fresh interpreter, runs it once against index_add_, reports as JSON.
PROBE = textwrap.dedent(
    """
    import json, time, torch
    start = time.perf_counter()
    import gradlint.cuda_ext as ext
    backend = ext.load()
    seconds = time.perf_counter() - start
    src = torch.randn(300, 4, dtype=torch.float64)
    index = torch.randint(0, 9, (300,), dtype=torch.int32)
    out = ext.scatter_add(src, index, 9)
    expected = torch.zeros(9, 4, dtype=torch.float64).index_add_(0, index, src)
    library = backend.library
    print(json.dumps({
        "backend": ext.BACKEND,
        "reason": ext.fallback_reason,
        "built_now": library.built_now if library else None,
        "library": str(library.path) if library else None,
        "seconds": seconds,
        "matches_index_add": bool(torch.allclose(out, expected)),
    }))
    """
)


def run_probe(cache: Path, before: str = "", **env_changes: str) -> tuple[dict, list[str]]:
    env = {**os.environ, "GRADLINT_EXT_CACHE": str(cache), **env_changes}
    done = subprocess.run([sys.executable, "-c", before + PROBE], capture_output=True, text=True, env=env, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr.splitlines()


def our_warnings(stderr_lines: list[str]) -> list[str]:
    return [line for line in stderr_lines if "gradlint.cuda_ext:" in line]


def assert_fell_back_with_one_warning(report: dict, stderr_lines: list[str], *reason_words: str) -> None:
    assert report["backend"] == "reference", report
    assert report["matches_index_add"], report
    for word in reason_words:
        assert word in report["reason"], report["reason"]
    warned = our_warnings(stderr_lines)
    assert len(warned) == 1, "\n".join(stderr_lines)
    assert report["reason"] in warned[0] and "pure-torch reference" in warned[0], warned[0]
    # Nothing else on stderr: torch's own build chatter stays out of a failed build.
    assert [line for line in stderr_lines if line.strip()] == warned, "\n".join(stderr_lines)


def test_cache_root_is_GRADLINT_EXT_CACHE_when_set(monkeypatch, tmp_path):
    from gradlint.cuda_ext import build

    monkeypatch.setenv("GRADLINT_EXT_CACHE", str(tmp_path / "mine"))
    assert build.cache_root() == tmp_path / "mine"


def test_cache_root_defaults_under_the_user_cache(monkeypatch, tmp_path):
    from gradlint.cuda_ext import build

    monkeypatch.delenv("GRADLINT_EXT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.cache_root() == tmp_path / "xdg" / "gradlint" / "cuda_ext"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert build.cache_root() == tmp_path / "home" / ".cache" / "gradlint" / "cuda_ext"


def test_build_key_changes_with_torch_version_compiler_and_sources(monkeypatch):
    import torch
    from gradlint.cuda_ext import build

    base = build.Toolchain("/usr/bin/c++", "c++ (GCC) 12.2.0", "/usr/bin/ninja", None, "", "no GPU")
    key = build.build_key(base)
    assert key == build.build_key(base)
    assert torch.__version__ in key
    other_compiler = build.build_key(build.Toolchain("/usr/bin/clang++", "clang 17", "/usr/bin/ninja", None, "", "no GPU"))
    with_nvcc = build.build_key(build.Toolchain("/usr/bin/c++", "c++ (GCC) 12.2.0", "/usr/bin/ninja", "/cuda/bin/nvcc", "V13.0", None))
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    other_torch = build.build_key(base)
    monkeypatch.undo()
    monkeypatch.setattr(build, "source_digest", lambda: "edited")
    other_source = build.build_key(base)
    assert len({key, other_compiler, with_nvcc, other_torch, other_source}) == 5


@pytest.mark.slow
def test_second_load_in_a_new_process_does_not_recompile(tmp_path_factory):
    ext = compiled_extension(tmp_path_factory)
    library = ext.load().library.path
    objects = {p: p.stat().st_mtime_ns for p in library.parent.glob("*.o")} | {library: library.stat().st_mtime_ns}

    report, stderr_lines = run_probe(session_cache(tmp_path_factory))

    assert report["backend"] == ext.BACKEND and report["matches_index_add"], report
    assert report["library"] == str(library)
    assert report["built_now"] is False, report
    assert {p: p.stat().st_mtime_ns for p in objects} == objects, "the second load rewrote build outputs"
    assert not our_warnings(stderr_lines)


@pytest.mark.slow
def test_a_library_whose_errors_end_the_process_is_not_used(tmp_path_factory, tmp_path):
    # What a C++ runtime linked into the library does (seen on an H200 machine): the check's call
    # with bad arguments dies instead of raising. Here the check itself is made to die that way,
    # on a copy of this session's library that was never checked.
    ext = compiled_extension(tmp_path_factory)
    built = ext.load().library.path.parent
    assert (built / "raises-checked").exists()
    copy = tmp_path / "cache" / built.name
    shutil.copytree(built, copy)
    (copy / "raises-checked").unlink()
    dies = "import gradlint.cuda_ext.build as b; b.RAISE_CHECK = 'import os, signal; os.kill(os.getpid(), signal.SIGSEGV)'\n"
    report, stderr_lines = run_probe(tmp_path / "cache", before=dies)
    assert_fell_back_with_one_warning(report, stderr_lines, "cannot raise errors into torch", "died of SIGSEGV",
                                      "set CXX to another compiler")
    assert not (copy / "raises-checked").exists()

    # A check that cannot run at all (here: it exits 1, as an interpreter finding no torch would)
    # proves nothing either way: the library is used, and checked again next time.
    cannot = "import gradlint.cuda_ext.build as b; b.RAISE_CHECK = 'import sys; sys.exit(1)'\n"
    report, stderr_lines = run_probe(tmp_path / "cache", before=cannot)
    assert report["backend"] == ext.BACKEND and report["matches_index_add"] and not our_warnings(stderr_lines), report
    assert not (copy / "raises-checked").exists()


@pytest.mark.slow
def test_without_a_compiler_scatter_add_falls_back_to_the_reference(tmp_path):
    report, stderr_lines = run_probe(tmp_path / "cache", CXX=str(tmp_path / "no-such-c++"))
    assert_fell_back_with_one_warning(report, stderr_lines, "no C++ compiler", "no-such-c++")


@pytest.mark.slow
def test_the_probe_self_test_says_in_one_line_each_that_it_ran_the_reference(tmp_path):
    env = {**os.environ, "GRADLINT_EXT_CACHE": str(tmp_path / "cache"), "CXX": str(tmp_path / "no-such-c++")}
    done = subprocess.run([sys.executable, "-m", "gradlint", "probe", "--steps", "40", "--quiet"], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    warned = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(warned) == 1 and warned[0].startswith("gradlint probe: warning: gradlint.cuda_ext: no C++ compiler"), warned
    assert "note: the scenarios ran scatter_add's pure-torch reference, not the compiled op (no C++ compiler" in done.stdout


@pytest.mark.slow
def test_without_ninja_scatter_add_falls_back_to_the_reference(tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    assert compiler, "this test needs a C++ compiler to show that ninja alone is missing"
    (tools / "c++").symlink_to(compiler)
    report, stderr_lines = run_probe(tmp_path / "cache", PATH=str(tools), CXX="c++")
    assert_fell_back_with_one_warning(report, stderr_lines, "ninja is not on PATH")


@pytest.mark.slow
def test_a_failing_build_falls_back_and_names_the_compiler_error(tmp_path):
    if shutil.which("ninja") is None:
        pytest.fail("ninja is not on PATH: this test needs it to reach the compile step")
    # A compiler that answers torch's version probes but fails every compile, as a broken
    # toolchain or a missing header would.
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    assert compiler, "this test needs a C++ compiler to answer torch's version probes"
    broken = tmp_path / "broken-c++"
    broken.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do\n'
        '  [ "$arg" = "-c" ] && { echo "scatter_add_cpu.cpp:1: fatal error: simulated compiler failure" >&2; exit 1; }\n'
        "done\n"
        f'exec "{compiler}" "$@"\n'
    )
    broken.chmod(0o755)
    cache = tmp_path / "cache"
    report, stderr_lines = run_probe(cache, CXX=str(broken))
    assert_fell_back_with_one_warning(report, stderr_lines, "building the C++ extension failed", "simulated compiler failure")
    logs = list(cache.glob("*/build-error.log"))
    assert len(logs) == 1 and str(logs[0]) in report["reason"]
    assert not list(cache.glob("*/*.so"))


# Torch builds extensions as C++20 from 2.12 on (2.13 here) and as C++17 before: 2.11 on a GPU
# machine failed on std::atomic_ref, which no build here could see. Users keep the torch they have.
STANDARDS = ["-std=c++17", "-std=c++20"]


@pytest.mark.parametrize("standard", STANDARDS)
@pytest.mark.parametrize("source", ["scatter_add_op.cpp", "scatter_add_cpu.cpp"])
def test_cpu_sources_compile_as_both_standards_torch_builds_with(source, standard):
    from torch.utils import cpp_extension

    from gradlint.cuda_ext import build

    assert source in build.CPU_SOURCES
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler is None:
        pytest.fail("this test needs a C++ compiler")
    includes = [flag for path in cpp_extension.include_paths() for flag in ("-isystem", path)]
    python_include = subprocess.run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                                    capture_output=True, text=True, check=True).stdout.strip()
    done = subprocess.run(
        [compiler, standard, "-fsyntax-only", *includes, "-isystem", python_include, str(build.CSRC / source)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("standard", STANDARDS)
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_cuda_kernels_compile_with_nvcc_and_no_torch_headers(tmp_path, standard):
    # The flags torch's build passes (no half operators or conversions), but no include path to
    # torch: the kernels must stand alone, as torch here may be a CPU-only build.
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    done = subprocess.run(
        ["nvcc", *COMMON_NVCC_FLAGS, standard, "-O3", "-c", str(KERNELS), "-o", str(tmp_path / "kernels.o")],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "kernels.o").stat().st_size > 0


def fake_cuda(monkeypatch, cuda_home):
    import torch
    from torch.utils import cpp_extension

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", cuda_home)


def test_with_a_gpu_but_no_toolkit_the_cuda_kernels_are_skipped_with_the_reason(monkeypatch, tmp_path):
    from gradlint.cuda_ext import build

    fake_cuda(monkeypatch, None)
    toolchain = build.find_toolchain()
    assert toolchain.nvcc is None and "no CUDA toolkit was found (set CUDA_HOME)" in toolchain.cuda_skip_reason
    fake_cuda(monkeypatch, str(tmp_path))
    toolchain = build.find_toolchain()
    assert toolchain.nvcc is None and toolchain.cuda_skip_reason == f"no nvcc at {tmp_path / 'bin' / 'nvcc'}"


def test_with_a_gpu_and_nvcc_the_cuda_sources_join_the_build(monkeypatch, tmp_path):
    from torch.utils import cpp_extension

    from gradlint.cuda_ext import build

    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.48'\n")
    nvcc.chmod(0o755)
    fake_cuda(monkeypatch, str(tmp_path / "cuda"))
    toolchain = build.find_toolchain()
    assert toolchain.nvcc == str(nvcc) and toolchain.cuda_skip_reason is None
    assert toolchain.nvcc_version == "Cuda compilation tools, release 13.0, V13.0.48"

    asked = {}

    def load(**kwargs):
        asked.update(kwargs)
        raise RuntimeError("stopped before compiling")

    monkeypatch.setattr(cpp_extension, "load", load)
    monkeypatch.setenv("GRADLINT_EXT_CACHE", str(tmp_path / "cache"))
    with pytest.raises(build.BuildUnavailable, match="stopped before compiling"):
        build.build_and_load(toolchain)
    assert asked["with_cuda"] is True
    assert sorted(Path(s).name for s in asked["sources"]) == sorted(build.CPU_SOURCES + build.CUDA_SOURCES)
    assert any(s.endswith(".cu") for s in asked["sources"])
    assert "-cuda-" in Path(asked["build_directory"]).name
