"""Packaging: the wheel and the editable install both give one `gradlint` package that works.

`rules/`, `runtime_probe/` and `cuda_ext/` sit at the top of the checkout and install as
`gradlint.rules`, `gradlint.runtime_probe`, `gradlint.cuda_ext` through setuptools' package-dir
mapping: site-packages must get `gradlint` only. Each install goes into a fresh venv in tmp_path
that sees neither this project's venv nor torch, which also proves that `gradlint check` needs
libcst and click only. The last test proves, with `python -X importtime`, that `gradlint check`
never imports torch even where torch is installed.

The installs take libcst and click from the configured package index (a local mirror here).
The checkout is copied to tmp first, so building never writes build/ or *.egg-info into it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
CODES = ("GL101", "GL102", "GL103", "GL104", "GL201", "GL301")
SUBPACKAGES = ("rules", "runtime_probe", "cuda_ext", "integrations")
# Nothing but `gradlint` may land at the top of site-packages.
FORBIDDEN_TOP_LEVEL = ("rules", "runtime_probe", "cuda_ext", "integrations", "tests", "examples", "bench")
# The distribution's name: `gradlint` on PyPI is another project; the import package stays `gradlint`.
DISTRIBUTION = "torch-gradlint"

BAD = (Path(__file__).parent / "fixtures" / "square_leaky.py").read_text()

CLEAN = (Path(__file__).parent / "fixtures" / "square_clean.py").read_text()

_COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "venv", ".tox", ".nox", "build", "dist", "*.egg-info", "__pycache__",
    ".pytest_cache", ".ruff_cache", ".mypy_cache", ".gradlint_cache", "*.so", "*.pyc",
)


def copy_checkout(dest: Path) -> Path:
    """Copy the working tree (tracked and untracked, minus what .gitignore ignores) to dest."""
    files: list[str] | None = None
    if shutil.which("git") and (REPO / ".git").exists():
        proc = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True, check=False,
        )
        if proc.returncode == 0:
            files = [f for f in proc.stdout.decode().split("\0") if f]
    if files is None:
        shutil.copytree(REPO, dest, ignore=_COPY_IGNORE, symlinks=True)
        return dest
    dest.mkdir(parents=True)
    for rel in files:
        src = REPO / rel
        if not src.is_file():  # deleted in the working tree but still in the index
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
    return dest


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


def run(cmd: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
    start = time.perf_counter()
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env or clean_env(),
                          capture_output=True, text=True, timeout=timeout, check=False)
    took = time.perf_counter() - start
    print(f"[{took:5.1f}s] rc={proc.returncode} {' '.join(map(str, cmd))[:160]}")
    if check and proc.returncode != 0:
        pytest.fail(f"command failed (rc={proc.returncode}): {cmd}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc


def _outer_pip_can_target() -> bool:
    """pip >= 22.3 in this interpreter can install into another one with `--python`."""
    try:
        import pip
    except ImportError:
        return False
    major, minor = (int(p) for p in re.findall(r"\d+", pip.__version__)[:2])
    return (major, minor) >= (22, 3)


class Venv:
    """A fresh venv built on the base interpreter: it does not see this project's venv."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fast = _outer_pip_can_target()
        # Without pip is 40x quicker to create; this interpreter's pip then installs into it.
        run([sys.executable, "-m", "venv", *(["--without-pip"] if self.fast else []), path])
        self.python = path / "bin" / "python"
        self.bin = path / "bin"

    def pip_install(self, *args: str | Path) -> None:
        if self.fast:
            cmd = [sys.executable, "-m", "pip", "--python", self.python, "install", *args]
        else:
            cmd = [self.python, "-m", "pip", "install", *args]
        run(cmd)

    def site_packages(self) -> Path:
        out = run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout
        return Path(out.strip())

    def gradlint(self, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
        return run([self.bin / "gradlint", *args], cwd=cwd, check=False, timeout=120)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_checkout(tmp_path_factory.mktemp("checkout") / "gradlint-src")


@pytest.fixture(scope="module")
def wheel(checkout: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheelhouse")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", out, checkout]
    if importlib.util.find_spec("setuptools") is not None:
        cmd.insert(4, "--no-build-isolation")  # use this venv's setuptools: quicker, no index needed
    run(cmd)
    wheels = sorted(out.glob(f"{DISTRIBUTION.replace('-', '_')}-*.whl"))
    assert len(wheels) == 1, f"expected one {DISTRIBUTION} wheel, got {sorted(out.iterdir())}"
    return wheels[0]


@pytest.fixture()
def samples(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "bad.py").write_text(BAD)
    (work / "clean.py").write_text(CLEAN)
    return work


def assert_check_works(venv: Venv, work: Path) -> None:
    bad = venv.gradlint("check", "bad.py", cwd=work)
    assert bad.returncode == 1, f"expected exit 1 on a GL101 file\n{bad.stdout}\n{bad.stderr}"
    assert "GL101" in bad.stdout, bad.stdout + bad.stderr
    assert re.search(r"bad\.py:8:\d+: GL101 ", bad.stdout), f"expected `bad.py:8:COL: GL101 ...`\n{bad.stdout}"
    clean = venv.gradlint("check", "clean.py", cwd=work)
    assert clean.returncode == 0, f"expected exit 0 on a clean file\n{clean.stdout}\n{clean.stderr}"
    assert "GL1" not in clean.stdout and "GL2" not in clean.stdout and "GL3" not in clean.stdout, clean.stdout
    rules = venv.gradlint("rules", cwd=work)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    missing = [c for c in CODES if c not in rules.stdout]
    assert not missing, f"`gradlint rules` lacks {missing}:\n{rules.stdout}"
    version = run([venv.python, "-m", "gradlint", "--version"], cwd=work, check=False)
    assert version.returncode == 0 and "0." in version.stdout + version.stderr, version.stdout + version.stderr


def test_wheel_holds_gradlint_only(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        top = {n.split("/")[0] for n in names}
        entry_points = next((zf.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")), "")
    assert top - {"gradlint"} <= {t for t in top if t.endswith(".dist-info")}, f"unexpected top-level entries: {sorted(top)}"
    assert all(not t.endswith(".data") for t in top), f"wheel installs data outside the package: {sorted(top)}"
    for sub in SUBPACKAGES:
        assert any(n.startswith(f"gradlint/{sub}/") for n in names), (
            f"wheel has no gradlint/{sub}/ (is {sub}/ empty or missing __init__.py?)"
        )
    assert any(n.startswith("gradlint/rules/") and n.endswith(".py") and not n.endswith("__init__.py") for n in names), \
        "wheel has no rule modules under gradlint/rules/"
    # The op compiles from these on the user's machine: a wheel without them can only fall back.
    sources = {p.name for p in (REPO / "cuda_ext" / "csrc").iterdir() if p.is_file()}
    assert sources and sources <= {n.rsplit("/", 1)[1] for n in names if n.startswith("gradlint/cuda_ext/csrc/")}, sources
    assert re.search(r"^gradlint\s*=\s*gradlint\.cli:main\s*$", entry_points, re.MULTILINE), entry_points


def test_wheel_metadata_names_our_distribution_and_no_torch_dependency(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        metadata = next(zf.read(n).decode() for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    assert re.search(rf"^Name: {DISTRIBUTION}$", metadata, re.MULTILINE), metadata[:400]
    requires = re.findall(r"^Requires-Dist: (.*)$", metadata, re.MULTILINE)
    # `pip install torch-gradlint` must leave the user's torch alone: torch comes only with [torch].
    torch_lines = [r for r in requires if re.match(r"torch\b", r)]
    assert torch_lines and all("extra ==" in r and "torch" in r.split("extra ==")[1] for r in torch_lines), requires
    for extra in ("torch", "plot", "lightning", "hf", "lsp", "test"):
        assert re.search(rf"^Provides-Extra: {extra}$", metadata, re.MULTILINE), extra


def test_wheel_install(wheel: Path, samples: Path, tmp_path: Path) -> None:
    venv = Venv(tmp_path / "v")
    venv.pip_install(wheel)  # dependencies from the wheel's metadata: libcst and click
    site = venv.site_packages()
    entries = {p.name for p in site.iterdir()}
    assert (site / "gradlint" / "__init__.py").is_file()
    for sub in SUBPACKAGES:
        assert (site / "gradlint" / sub).is_dir(), f"site-packages lacks gradlint/{sub}: {sorted(entries)}"
        assert (site / "gradlint" / sub / "__init__.py").is_file(), f"gradlint/{sub} has no __init__.py"
    leaked = [e for e in entries for bad in FORBIDDEN_TOP_LEVEL if e == bad or e == f"{bad}.py"]
    assert not leaked, f"top-level packages leaked into site-packages: {leaked}"
    # This venv has no torch: `gradlint check` must work on libcst and click alone.
    no_torch = run([venv.python, "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"])
    assert no_torch.stdout.strip() == "True"
    assert_check_works(venv, samples)


def test_editable_install(checkout: Path, samples: Path, tmp_path: Path) -> None:
    venv = Venv(tmp_path / "v")
    venv.pip_install("-e", checkout)  # dependencies from the project's metadata (libcst, click, ...)
    site = venv.site_packages()
    leaked = [e.name for e in site.iterdir() for bad in FORBIDDEN_TOP_LEVEL if e.name in (bad, f"{bad}.py")]
    assert not leaked, f"top-level packages leaked into site-packages: {leaked}"
    # Run from outside the source tree, so nothing is found through the current directory:
    # `gradlint rules` then proves gradlint.rules resolves to <checkout>/rules via package-dir.
    where = run(
        [venv.python, "-c", "import gradlint, gradlint.rules as r; print(gradlint.__file__); print(r.__file__)"],
        cwd=samples,
    ).stdout.split()
    assert Path(where[0]).resolve().is_relative_to(checkout / "gradlint"), where
    assert Path(where[1]).resolve().is_relative_to(checkout / "rules"), where
    for sub in SUBPACKAGES[1:]:
        run([venv.python, "-c", f"import gradlint.{sub}"], cwd=samples)
    assert_check_works(venv, samples)


def _parse_importtime(stderr: str) -> list[tuple[int, int, int, str]]:
    """(self us, cumulative us, nesting depth (1 = imported at top level), module) per import."""
    rows = []
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( +)(\S+)", line)
        if m:
            rows.append((int(m.group(1)), int(m.group(2)), (len(m.group(3)) + 1) // 2, m.group(4)))
    return rows


def test_check_never_imports_torch(tmp_path: Path) -> None:
    """`gradlint check` in this project's venv (where torch is installed) imports no torch module."""
    if importlib.util.find_spec("gradlint.cli") is None:
        pytest.fail("gradlint is not installed in this interpreter: run `pip install -e . --no-deps` first")
    torch_installed = importlib.util.find_spec("torch") is not None
    src = tmp_path / "src"
    src.mkdir()
    (src / "bad.py").write_text(BAD)
    for i in range(9):  # ten files: enough for the engine to use its worker pool (--jobs 2)
        (src / f"clean_{i}.py").write_text(CLEAN)
    # -X importtime as asked; PYTHONPROFILEIMPORTTIME also reaches worker processes.
    env = clean_env(PYTHONPROFILEIMPORTTIME="1")
    env.pop("PYTHONDONTWRITEBYTECODE")
    proc = run([sys.executable, "-X", "importtime", "-m", "gradlint", "check", "--jobs", "2", "src"],
               cwd=tmp_path, env=env, check=False)
    assert proc.returncode == 1 and "GL101" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    rows = _parse_importtime(proc.stderr)
    assert rows, f"no importtime output:\n{proc.stderr[-2000:]}"
    torch_mods = sorted({name for *_, name in rows if name == "torch" or name.startswith("torch.")})
    assert not torch_mods, f"`gradlint check` imported torch modules: {torch_mods[:20]}"

    def ours(name: str) -> bool:
        return name == "gradlint" or name.startswith("gradlint.")

    own_self_ms = sum(s for s, _, _, n in rows if ours(n)) / 1000
    # Top-level gradlint imports, cumulative: gradlint plus what it pulls in (libcst, click, stdlib).
    with_deps_ms = sum(c for _, c, depth, n in rows if depth == 1 and ours(n)) / 1000
    deps = {dep: max((c for _, c, _, n in rows if n == dep), default=0) / 1000 for dep in ("libcst", "click")}
    total_ms = sum(s for s, *_ in rows) / 1000
    print(f"torch installed here: {torch_installed}; torch modules imported by `gradlint check`: 0")
    print(f"gradlint's own modules ({sum(ours(n) for *_, n in rows)}): {own_self_ms:.1f} ms self time; "
          f"with what they import {with_deps_ms:.1f} ms (libcst {deps['libcst']:.1f} ms, click {deps['click']:.1f} ms); "
          f"all imports of the process {total_ms:.1f} ms")
    # Every module of the package (the CLI and all rules, not only the ones one run touches) too.
    probe = run([sys.executable, "-c", (
        "import importlib, pkgutil, sys, gradlint, gradlint.rules\n"
        "for pkg in (gradlint, gradlint.rules):\n"
        "    for m in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if m.name not in ('gradlint.runtime_probe', 'gradlint.cuda_ext', 'gradlint.__main__'):\n"
        "            importlib.import_module(m.name)\n"
        "print(sorted(n for n in sys.modules if n == 'torch' or n.startswith('torch.'))[:10])\n"
    )], cwd=tmp_path)
    assert probe.stdout.strip() == "[]", f"importing gradlint's CLI and rules imports torch: {probe.stdout}"
