"""gradlint.integrations.huggingface.LeakProbeCallback inside a real `transformers.Trainer.train()`
(tests/integration_targets/hf_models.py: models built from configs in code, data in memory, CPU)."""

from __future__ import annotations

import gc
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the Hugging Face integration needs transformers: pip install -e '.[test]'")
pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate: pip install -e '.[test]'")
import torch  # noqa: E402
from transformers import Trainer  # noqa: E402

from gradlint.integrations.huggingface import LeakError, LeakProbeCallback  # noqa: E402
from gradlint.runtime_probe import Verdict  # noqa: E402

TARGETS = Path(__file__).parent / "integration_targets"
MODELS = TARGETS / "hf_models.py"
ROOT = Path(__file__).parent.parent


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"integration_targets_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import would: the probe finds a class's source through it
    spec.loader.exec_module(module)
    return module


hf = _load(MODELS)


def line_of(text: str) -> int:
    return next(n for n, line in enumerate(MODELS.read_text().splitlines(), 1) if text in line)


@pytest.fixture
def train(tmp_path):
    """Run `trainer_class(...).train()` with the probe; return the trainer (CPU, nothing written but tmp)."""

    def run(model, dataset, probe, *, trainer_class=Trainer, **overrides):
        trainer = trainer_class(model=model, args=hf.arguments(tmp_path, **overrides), train_dataset=dataset,
                                callbacks=[probe])
        trainer.train()
        return trainer

    yield run
    # Whatever the training did, the probe gave the collector back and left the tracker.
    assert gc.isenabled()
    assert torch._C._len_torch_dispatch_stack() == 0


def test_tiny_gpt2_training_is_clean_printed_and_goes_on(train, capsys):
    probe = LeakProbeCallback(steps=25)
    trainer = train(hf.tiny_gpt2(), hf.TokenDataset(), probe)
    report = probe.report
    assert report.verdict is Verdict.CLEAN, report.reason
    assert report.steps_done == 25 and not report.holders
    assert report.name == "GPT2LMHeadModel (Trainer.train)"
    assert trainer.state.global_step == 40  # measured the first 25 of max_steps=40, then went on
    out = capsys.readouterr().out
    assert "gradlint probe: GPT2LMHeadModel (Trainer.train) (25/25 steps" in out and "verdict: clean" in out


def test_model_outputs_kept_by_the_trainer_are_held_by_its_list_not_the_outputs_fields(train, capsys):
    probe = LeakProbeCallback(steps=25, on_leak="stop")
    trainer = train(hf.tiny_gpt2(), hf.TokenDataset(), probe, trainer_class=hf.OutputKeepingTrainer)
    report = probe.report
    assert report.verdict is Verdict.RETAINED, report.reason
    assert report.bytes_per_step > 0 and report.graph_nodes_per_step > 0
    holder = report.holders[0]
    # The root the user would clear: the list on the Trainer, not CausalLMOutputWithCrossAttentions.logits.
    assert holder.subject == "OutputKeepingTrainer.epoch_outputs"
    assert Path(holder.file).samefile(MODELS) and holder.line == line_of("class OutputKeepingTrainer")
    assert trainer.state.global_step == 25  # on_leak="stop": should_training_stop after the probed steps
    out = capsys.readouterr().out
    assert "verdict: retained" in out and "held by OutputKeepingTrainer.epoch_outputs" in out
    assert f"hf_models.py:{line_of('class OutputKeepingTrainer')}]" in out


def test_plain_module_returning_a_loss_dict_is_clean(train):
    probe = LeakProbeCallback(steps=30)
    train(hf.Regressor(), hf.RegressionDataset(), probe)
    assert probe.report.verdict is Verdict.CLEAN, probe.report.reason


def test_on_leak_raise_fails_the_training_with_the_report(train):
    probe = LeakProbeCallback(steps=30, on_leak="raise")
    with pytest.raises(LeakError) as failure:
        train(hf.Regressor(), hf.RegressionDataset(), probe, trainer_class=hf.OutputKeepingTrainer)
    message = str(failure.value)
    assert "verdict: retained" in message and "held by OutputKeepingTrainer.epoch_outputs" in message
    assert failure.value.report is probe.report


def test_stop_when_done_ends_a_clean_training_after_the_probed_steps(train):
    probe = LeakProbeCallback(steps=20, stop_when_done=True)
    trainer = train(hf.Regressor(), hf.RegressionDataset(), probe)
    assert probe.report.ok and trainer.state.global_step == 20


def test_with_gradient_accumulation_a_probed_step_is_one_optimizer_step(train):
    # 4 micro-batches per optimizer step: the probe counts global_step, and what leaks per
    # micro-batch leaks 4 times per probed step.
    per_batch = LeakProbeCallback(steps=24, stop_when_done=True)
    train(hf.Regressor(), hf.RegressionDataset(), per_batch, trainer_class=hf.OutputKeepingTrainer)
    accumulated = LeakProbeCallback(steps=24, stop_when_done=True)
    trainer = train(hf.Regressor(), hf.RegressionDataset(rows=512), accumulated,
                    trainer_class=hf.OutputKeepingTrainer, gradient_accumulation_steps=4)
    assert trainer.state.global_step == 24 and accumulated.report.steps_done == 24
    assert len(trainer.epoch_outputs) == 96
    assert accumulated.report.verdict is Verdict.RETAINED
    assert accumulated.report.bytes_per_step == pytest.approx(4 * per_batch.report.bytes_per_step)


def test_accumulated_clean_training_is_clean(train):
    probe = LeakProbeCallback(steps=24, stop_when_done=True)
    train(hf.Regressor(), hf.RegressionDataset(rows=512), probe, gradient_accumulation_steps=4)
    assert probe.report.verdict is Verdict.CLEAN, probe.report.reason


def test_training_shorter_than_the_probe_reports_the_steps_it_measured(train):
    probe = LeakProbeCallback(steps=30)
    train(hf.Regressor(), hf.RegressionDataset(), probe, max_steps=8)
    report = probe.report
    assert report.steps_done == 8 and report.steps_requested == 30
    assert report.verdict is Verdict.NOT_MEASURED and "8 of 30 steps ran" in report.reason


def test_a_step_that_raises_leaves_a_probe_that_finish_closes(tmp_path):
    # transformers has no callback event for an exception: the probe is still open after train()
    # raised, until finish() (or the next train()) closes it.
    probe = LeakProbeCallback(steps=30)
    trainer = Trainer(model=hf.FailingRegressor(), args=hf.arguments(tmp_path), train_dataset=hf.RegressionDataset(),
                      callbacks=[probe])
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes"):
        trainer.train()
    assert probe.report is None and not gc.isenabled()
    report = probe.finish()
    assert report.steps_done == 14 and report.verdict is Verdict.CLEAN, report.reason
    assert gc.isenabled() and torch._C._len_torch_dispatch_stack() == 0


def test_the_next_train_closes_a_probe_a_raised_train_left_open(tmp_path):
    probe = LeakProbeCallback(steps=20, stop_when_done=True)
    model = hf.FailingRegressor()
    trainer = Trainer(model=model, args=hf.arguments(tmp_path), train_dataset=hf.RegressionDataset(), callbacks=[probe])
    with pytest.raises(RuntimeError):
        trainer.train()
    trainer.train()  # the 15th forward is past: this one runs
    assert probe.report.steps_done == 20 and probe.report.ok
    assert gc.isenabled() and torch._C._len_torch_dispatch_stack() == 0


@pytest.mark.parametrize("arguments", [dict(on_leak="explode"), dict(steps=0), dict(gc_every=0), dict(track_every=0)])
def test_bad_arguments_fail_where_the_callback_is_made(arguments):
    with pytest.raises(ValueError, match="on_leak|at least"):
        LeakProbeCallback(**arguments)


def test_without_transformers_the_import_says_which_extra_to_install():
    # sys.modules[name] = None makes `import name` fail as if the package were not installed.
    code = "import sys; sys.modules['transformers'] = None\nimport gradlint.integrations.huggingface"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "ImportError: gradlint.integrations.huggingface needs transformers: pip install 'torch-gradlint[hf]'")
