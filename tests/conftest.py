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
