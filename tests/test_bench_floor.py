"""bench/speed_floor.py runs: a script nobody runs in CI rots silently. Its figures are not
checked here (timings belong to bench/, never to assertions)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_speed_floor_reports_its_parts_on_a_small_corpus(tmp_path):
    corpus = tmp_path / "pkg"
    corpus.mkdir()
    (corpus / "train.py").write_text(
        "import torch\nlosses = []\nfor x in range(3):\n    loss = model(x)\n    loss.backward()\n"
        "    losses.append(loss)\n")
    (corpus / "plain.py").write_text("def f(a):\n    return a + 1\n")
    (corpus / "broken.py").write_text("def f(:\n")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "speed_floor.py"), "--corpus", str(corpus)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "-> 3 .py files" in done.stdout
    assert "libcst parse of the 1 files analysed" in done.stdout
    assert "CPython parse of all 3 files" in done.stdout


def test_speed_floor_refuses_a_corpus_it_cannot_read(tmp_path):
    for corpus, said in ((tmp_path / "missing", "is not a directory"), (tmp_path, "no .py files under")):
        done = subprocess.run([sys.executable, str(ROOT / "bench" / "speed_floor.py"), "--corpus", str(corpus)],
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr
