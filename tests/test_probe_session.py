"""StepProbe: a run whose steps the caller drives (its own loop, a framework's callbacks)."""

from __future__ import annotations

import gc
import re

import pytest

torch = pytest.importorskip("torch")

from gradlint.runtime_probe import ProbeReport, StepProbe, Verdict, render_text  # noqa: E402


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def _train(steps: int, keep: list | None, probe: StepProbe) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        probe.step_started()
        x = torch.randn(8, 16)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if keep is not None:
            keep.append(loss)  # the graph and the loss stay: the classic leak
        if probe.step_finished():
            break


def test_a_loop_that_keeps_its_losses_is_retained_and_names_the_list():
    kept: list = []
    probe = StepProbe(steps=60, device="cpu", name="loop")
    _train(1000, kept, probe)
    assert probe.done and len(kept) == 60  # step_finished() said stop at the 60th step
    report = probe.finish()
    assert isinstance(report, ProbeReport)
    assert report.verdict is Verdict.RETAINED and report.is_leak and not report.ok
    assert report.graph_nodes_per_step > 0
    assert report.holders and report.holders[0].subject == "kept"
    assert "held by kept" in render_text(report)
    assert report.to_dict()["verdict"] == "retained"


def test_the_same_loop_without_keeping_is_clean():
    probe = StepProbe(steps=60, device="cpu")
    _train(1000, None, probe)
    report = probe.finish()
    assert report.verdict is Verdict.CLEAN and report.ok, report.reason


def test_finish_before_any_measured_step_says_nothing_was_measured():
    probe = StepProbe(steps=100, warmup=10, device="cpu", name="short")
    _train(3, None, probe)
    report = probe.finish()
    assert report.verdict is Verdict.NOT_MEASURED and not report.ok and not report.is_leak
    assert report.steps_done == 3
    assert "3 of 100 steps ran, all within the 10 warm-up steps" in report.reason
    assert probe.finish() is report  # idempotent


def test_finish_with_no_step_at_all():
    report = StepProbe(steps=10, device="cpu").finish()
    assert report.verdict is Verdict.NOT_MEASURED and report.steps_done == 0
    assert "no step ran" in report.reason
    # No step time or peak is shown for steps that never ran ("median 0.00 ms, 0 B" read as measured).
    text = render_text(report)
    assert "step:" not in text and "ms under the probe" not in text, text
    # A first step that raised ran no measured step either: its line says where it raised.
    probe = StepProbe(steps=10, device="cpu")
    probe.step_started()
    probe.step_failed(ValueError("bad batch"))
    failed = render_text(probe.finish())
    assert "step 1 raised at" in failed and "ms under the probe" not in failed, failed
    # Once a step ran, its time is shown, also within warm-up.
    probe = StepProbe(steps=10, device="cpu")
    probe.step_started()
    probe.step_finished()
    assert "step: median" in render_text(probe.finish())


def test_a_failed_step_gives_an_error_verdict_over_the_steps_before_it():
    kept: list = []
    probe = StepProbe(steps=100, device="cpu")
    model = _model()
    with pytest.raises(ValueError):
        for i in range(100):
            probe.step_started()
            try:
                loss = model(torch.randn(4, 16)).sum()
                loss.backward()
                kept.append(loss)
                if i == 50:
                    raise ValueError("bad batch")
            except ValueError as exc:
                probe.step_failed(exc)
                raise
            probe.step_finished()
    report = probe.finish()
    assert report.verdict is Verdict.ERROR and report.error.step == 51
    assert "ValueError: bad batch" in report.error.exception
    assert report.measured_verdict is Verdict.RETAINED


def test_the_collector_is_paused_during_the_run_and_restored_by_finish():
    assert gc.isenabled()
    probe = StepProbe(steps=30, device="cpu")
    probe.step_started()
    assert not gc.isenabled()
    probe.step_finished()
    probe.finish()
    assert gc.isenabled()


def test_steps_must_alternate():
    probe = StepProbe(steps=5, device="cpu")
    with pytest.raises(RuntimeError, match="without step_started"):
        probe.step_finished()
    probe.step_started()
    with pytest.raises(RuntimeError, match="twice"):
        probe.step_started()
    probe.finish()
    assert gc.isenabled()


@pytest.mark.parametrize("kwargs", [{"steps": 0}, {"track_every": 0}, {"gc_every": 0}, {"warmup": -1},
                                    {"device": "tpu"}])
def test_bad_options_are_a_value_error(kwargs):
    with pytest.raises(ValueError):
        StepProbe(**kwargs)


def test_a_collector_off_or_frozen_before_the_run_is_said_and_given_back_so():
    """A framework that turned the collector off, or froze its objects, before the first step:
    a delayed-free cycle then never frees, and the report says so; the probe gives the collector
    back as it found it."""
    gc.disable()
    gc.freeze()
    try:
        probe = StepProbe(steps=40, device="cpu")
        _train(1000, None, probe)
        notes = "\n".join(probe.finish().notes)
        assert "the cyclic collector was off when the run began (gc.disable())" in notes
        assert re.search(r"[\d,]+ objects were frozen \(gc\.freeze\(\)\) before the run", notes)
        assert not gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.enable()


def test_a_collector_turned_off_during_the_run_is_said_with_its_step():
    probe = StepProbe(steps=40, device="cpu")
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        for step in range(1000):
            probe.step_started()
            if step == 19:
                gc.disable()  # a framework's, at fit time
            model(torch.randn(8, 16)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            if probe.step_finished():
                break
        notes = "\n".join(probe.finish().notes)
        assert "the process turned the cyclic collector off (gc.disable()) in step 20" in notes
        assert not gc.isenabled()
    finally:
        gc.enable()
