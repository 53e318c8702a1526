from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project directory, the current directory for the test."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def leaky_file(project: Path) -> Path:
    return Path(shutil.copy(FIXTURES / "leaky_op.py", project / "leaky_op.py"))


@pytest.fixture
def clean_file(project: Path) -> Path:
    return Path(shutil.copy(FIXTURES / "clean_op.py", project / "clean_op.py"))


@pytest.fixture(autouse=True, scope="session")
def _user_cache_folder(tmp_path_factory: pytest.TempPathFactory):
    """The cache's per-user key (gradlint/cache.py) goes to a folder of the test session's own,
    for the CLI runs in subprocesses too: the suite never writes into the real ~/.cache/gradlint."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        yield


@pytest.fixture(autouse=True, scope="session")
def _one_extension_build(_user_cache_folder, tmp_path_factory: pytest.TempPathFactory):
    """Every load of the bundled op in the session, whatever test comes first, uses the one build
    directory test_cuda_ext*'s checks expect (cuda_ext_session.py): a probe test loading the op
    first built it elsewhere, and test_second_load_in_a_new_process_does_not_recompile failed when
    test_probe_* ran before test_cuda_ext*."""
    from cuda_ext_session import session_cache

    session_cache(tmp_path_factory)
    yield


@pytest.fixture(autouse=True)
def _statements_kept_by_one_test_only():
    """The language server keeps parsed statements for its next lint (gradlint/parse.py) and
    freezes the heap between lints (gc.freeze); a test that starts one in-process must not leave
    either for the tests after it."""
    yield
    import gc

    from gradlint import parse

    parse.keep(0)
    gc.unfreeze()

