"""gradlint.integrations.lightning.LeakProbe inside a real `Trainer.fit` (tests/integration_targets/lit_modules.py)."""

from __future__ import annotations

import gc
import importlib.util
import logging
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning", reason="the Lightning integration needs lightning: pip install -e '.[test]'")
import lightning.pytorch as L  # noqa: E402
import torch  # noqa: E402

from gradlint.integrations.lightning import LeakError, LeakProbe  # noqa: E402
from gradlint.runtime_probe import Verdict  # noqa: E402

TARGETS = Path(__file__).parent / "integration_targets"
MODULES = TARGETS / "lit_modules.py"
ROOT = Path(__file__).parent.parent


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"integration_targets_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import would: the probe finds a class's source through it
    spec.loader.exec_module(module)
    return module


lit = _load(MODULES)


def line_of(text: str) -> int:
    return next(n for n, line in enumerate(MODULES.read_text().splitlines(), 1) if text in line)


@pytest.fixture
def fit(tmp_path):
    """Run `Trainer.fit` on a fresh module with the probe; return the trainer (CPU, nothing written but tmp)."""

    def run(module, probe, *, loader=None, **trainer_args):
        settings = dict(max_epochs=1, accelerator="cpu", devices=1, enable_progress_bar=False, logger=False,
                        enable_checkpointing=False, enable_model_summary=False, default_root_dir=tmp_path)
        settings.update(trainer_args)
        trainer = L.Trainer(callbacks=[probe], **settings)
        trainer.fit(module, loader or lit.regression_loader())
        return trainer

    yield run
    # Whatever the fit did, the probe gave the collector back and left the tracker.
    assert gc.isenabled()
    assert torch._C._len_torch_dispatch_stack() == 0


@pytest.fixture
def lightning_log():
    """What Lightning's console logger received (rank_zero_info goes to lightning.pytorch's handler)."""
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Keep(level=logging.INFO)
    logger = logging.getLogger("lightning.pytorch")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


def test_clean_module_is_clean_reported_through_lightning_and_the_fit_goes_on(fit, lightning_log):
    probe = LeakProbe(steps=30)
    trainer = fit(lit.Regressor(), probe)
    report = probe.report
    assert report.verdict is Verdict.CLEAN, report.reason
    assert report.steps_done == 30 and not report.holders
    assert report.name == "Regressor.training_step"
    # The probe measured the first 30 steps; the fit ran its whole epoch of 64 batches.
    assert trainer.global_step == 64
    (text,) = [m for m in lightning_log if m.startswith("gradlint probe:")]
    assert "gradlint probe: Regressor.training_step (30/30 steps" in text and "verdict: clean" in text


def test_loss_kept_with_its_graph_is_retained_and_held_by_the_modules_list(fit, lightning_log):
    probe = LeakProbe(steps=30)
    trainer = fit(lit.LossHistoryRegressor(), probe)
    report = probe.report
    assert report.verdict is Verdict.RETAINED, report.reason
    assert report.bytes_per_step > 0 and report.graph_nodes_per_step > 0
    holder = report.holders[0]
    assert holder.subject == "LossHistoryRegressor.outputs"
    # An instance attribute's holder points at its class (as for any module attribute the probe names).
    assert Path(holder.file).samefile(MODULES) and holder.line == line_of("class LossHistoryRegressor")
    assert holder.created_at[0].startswith(f"tests/integration_targets/lit_modules.py:{line_of('mse_loss(self.net(x), y)')} ")
    # on_leak="warn" (the default) reports and lets the fit finish.
    assert trainer.global_step == 64
    (text,) = [m for m in lightning_log if m.startswith("gradlint probe:")]
    assert "verdict: retained" in text and "held by LossHistoryRegressor.outputs" in text
    assert f"lit_modules.py:{line_of('class LossHistoryRegressor')}]" in text


def test_on_leak_stop_ends_the_fit_at_the_last_probed_step(fit):
    trainer = fit(lit.LossHistoryRegressor(), LeakProbe(steps=30, on_leak="stop"))
    assert trainer.global_step == 30


def test_on_leak_raise_fails_the_fit_with_the_report(fit):
    probe = LeakProbe(steps=30, on_leak="raise")
    with pytest.raises(LeakError) as failure:
        fit(lit.LossHistoryRegressor(), probe)
    message = str(failure.value)
    assert "verdict: retained" in message and "held by LossHistoryRegressor.outputs" in message
    assert failure.value.report is probe.report


def test_on_leak_stop_does_not_stop_a_clean_fit(fit):
    trainer = fit(lit.Regressor(), LeakProbe(steps=30, on_leak="stop"))
    assert trainer.global_step == 64


def test_stop_when_done_ends_the_fit_after_the_probed_steps_whatever_the_verdict(fit):
    probe = LeakProbe(steps=20, stop_when_done=True)
    trainer = fit(lit.Regressor(), probe)
    assert probe.report.ok and trainer.global_step == 20


def test_with_gradient_accumulation_a_probed_step_is_one_optimizer_step(fit):
    # 12 optimizer steps of 4 batches each: the probe's step count is Lightning's global_step, and
    # what leaks per batch leaks 4 times per probed step.
    per_batch = LeakProbe(steps=24, stop_when_done=True)
    fit(lit.LossHistoryRegressor(), per_batch)
    accumulated = LeakProbe(steps=24, stop_when_done=True)
    trainer = fit(lit.LossHistoryRegressor(), accumulated, loader=lit.regression_loader(batches=128),
                  accumulate_grad_batches=4)
    assert trainer.global_step == 24 and accumulated.report.steps_done == 24
    assert trainer.fit_loop.epoch_loop.batch_progress.total.completed == 96
    assert accumulated.report.verdict is Verdict.RETAINED
    assert accumulated.report.bytes_per_step == pytest.approx(4 * per_batch.report.bytes_per_step)


def test_accumulated_clean_module_is_clean(fit):
    probe = LeakProbe(steps=24, stop_when_done=True)
    fit(lit.Regressor(), probe, loader=lit.regression_loader(batches=128), accumulate_grad_batches=4)
    assert probe.report.verdict is Verdict.CLEAN, probe.report.reason


def test_with_manual_optimization_a_probed_step_is_one_batch(fit):
    probe = LeakProbe(steps=20, stop_when_done=True)
    trainer = fit(lit.ManualRegressor(), probe)
    assert probe.report.verdict is Verdict.CLEAN, probe.report.reason
    assert trainer.global_step == 20 and probe.report.steps_done == 20


def test_fit_shorter_than_the_probe_reports_the_steps_it_measured(fit):
    probe = LeakProbe(steps=30)
    fit(lit.Regressor(), probe, max_steps=8)
    report = probe.report
    assert report.steps_done == 8 and report.steps_requested == 30
    # All 8 fell within the 10 warm-up steps: neither clean nor a leak, and the report says why.
    assert report.verdict is Verdict.NOT_MEASURED and "8 of 30 steps ran" in report.reason


def test_a_step_that_raises_is_reported_and_the_fits_exception_goes_on(fit, lightning_log):
    probe = LeakProbe(steps=30)
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes"):
        fit(lit.FailingRegressor(), probe)
    report = probe.report
    assert report.verdict is Verdict.ERROR and report.error.step == 15
    assert any("step 15 raised" in m for m in lightning_log)


def test_a_second_fit_with_the_same_callback_gets_its_own_report(fit):
    probe = LeakProbe(steps=20, stop_when_done=True)
    fit(lit.LossHistoryRegressor(), probe)
    first = probe.report
    fit(lit.Regressor(), probe)
    assert first.verdict is Verdict.RETAINED and probe.report.verdict is Verdict.CLEAN


@pytest.mark.parametrize("arguments", [dict(on_leak="explode"), dict(steps=0), dict(warmup=-1), dict(track_every=0)])
def test_bad_arguments_fail_where_the_callback_is_made(arguments):
    with pytest.raises(ValueError, match="on_leak|at least"):
        LeakProbe(**arguments)


def test_without_lightning_the_import_says_which_extra_to_install():
    # sys.modules[name] = None makes `import name` fail as if the package were not installed.
    code = ("import sys; sys.modules['lightning'] = None; sys.modules['lightning.pytorch'] = None\n"
            "import gradlint.integrations.lightning")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last == ("ImportError: gradlint.integrations.lightning needs Lightning: "
                    "pip install 'torch-gradlint[lightning]'")
    assert _distribution_name() in last


def test_gradlint_check_and_import_gradlint_import_no_integration(tmp_path):
    target = tmp_path / "train.py"
    target.write_text("import torch\n\nlosses = []\n\ndef step(model, x):\n    loss = model(x).sum()\n"
                      "    losses.append(loss)\n    return loss\n")
    code = ("import sys, gradlint\nfrom gradlint.cli import main\n"
            f"try:\n    main(['check', {str(target)!r}])\nexcept SystemExit as stop:\n    print('exit', stop.code)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning', 'transformers'}),"
            " [m for m in sys.modules if m.startswith('gradlint.integrations')])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert "GL103" in result.stdout  # the check ran and found the appended loss
    assert result.stdout.strip().splitlines()[-1] == "[] []"


def _distribution_name() -> str:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
