"""Tracking one step in K: which steps run under the tracker, and that the verdicts hold with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradlint.runtime_probe.stride import MIN_TRACKED, StridePlan


def calibrated(tracked_s: float, bare_s: float, steps: int = 100, warmup: int = 10) -> StridePlan:
    plan = StridePlan(steps, warmup, None)
    for i in range(1, warmup + 1):
        on = plan.tracked(i)
        plan.observe(i, on, tracked_s if on else bare_s)
    return plan


def test_warm_up_is_tracked_except_the_alternating_calibration_steps():
    plan = StridePlan(100, 10, None)
    assert [plan.tracked(i) for i in range(1, 11)] == [True] * 4 + [False, True] * 3
    # Explicit stride, or too short a warm-up to time: every warm-up step is tracked.
    assert all(StridePlan(100, 10, 3).tracked(i) for i in range(1, 11))
    assert all(StridePlan(100, 6, None).tracked(i) for i in range(1, 7))


def test_tracked_steps_are_counted_between_any_two_steps_as_the_run_grows():
    from gradlint.runtime_probe.runner import Run

    pattern = [True, False, False, True, True, False, True, False, True, True, False, True]
    run = Run(steps_requested=len(pattern), warmup=2, gc_every=4)
    for done, on in enumerate(pattern, 1):
        run.step_tracked.append(on)
        for first in range(-1, done + 2):
            for last in range(-1, done + 2):
                expected = sum(1 for s in range(1, done + 1) if pattern[s - 1] and first < s <= last)
                assert run.tracked_between(first, last) == expected, (done, first, last)


def test_the_stride_brings_the_mean_step_under_the_target():
    plan = calibrated(tracked_s=2.6e-3, bare_s=1.0e-3, steps=400)
    assert plan.decide(10) == 6 and plan.every == 6  # 1 + 1.6/6 = 1.27x; collections every 6 steps
    # At 100 steps the stride is capped to leave MIN_TRACKED tracked steps: 1 + 1.6/5 = 1.32x.
    capped = calibrated(tracked_s=2.6e-3, bare_s=1.0e-3)
    assert capped.decide(10) == 10 and capped.every == (100 - 10 - 2) // MIN_TRACKED == 5
    cheap = calibrated(tracked_s=1.3e-3, bare_s=1.0e-3)
    assert cheap.decide(10) == 10 and cheap.every == 1


def test_on_a_loaded_machine_the_tracker_cost_is_read_in_cpu_time():
    # Waiting for a core stretches both steps' wall clock alike (1.2x apart) while the tracker's
    # own work triples the step's CPU time: the stride follows the CPU time.
    plan = StridePlan(400, 10, None)
    for i in range(1, 11):
        on = plan.tracked(i)
        plan.observe(i, on, 12e-3 if on else 10e-3, 3e-3 if on else 1e-3)
    plan.decide(10)
    assert plan.every == 7  # ceil((3 - 1) / (1.3 - 1))
    wall_only = StridePlan(400, 10, None)
    for i in range(1, 11):
        on = wall_only.tracked(i)
        wall_only.observe(i, on, 12e-3 if on else 10e-3)
    wall_only.decide(10)
    assert wall_only.every == 1


def test_the_stride_leaves_enough_tracked_steps_and_collections_land_on_tracked_steps():
    plan = calibrated(tracked_s=50e-3, bare_s=1.0e-3, steps=100)
    interval = plan.decide(10)
    assert plan.every == (100 - 10 - 2) // MIN_TRACKED
    assert interval % plan.every == 0
    measured = [i for i in range(11, 101) if plan.tracked(i)]
    assert len(measured) >= MIN_TRACKED
    collections = [i for i in range(11, 101) if plan.collects(i)]
    assert all(plan.tracked(i) for i in collections)
    assert len(collections) >= 4  # the graph is judged on the collected series
    assert all(interval - plan.every < b - a < interval + plan.every for a, b in zip(collections, collections[1:]))
    assert plan.tracked(99) and plan.tracked(100)  # the last two: the final graph count sees them
    short = calibrated(tracked_s=50e-3, bare_s=1.0e-3, steps=40)
    short.decide(10)
    assert short.every == 1


@pytest.mark.parametrize("every", [2, 3, 4, 5])
def test_one_step_of_each_block_is_tracked_and_which_one_moves(every):
    plan = StridePlan(400, 10, every)
    plan.decide(10)
    positions = []
    for block in range((400 - 10 - 2) // every):
        first = 11 + block * every
        on = [i - first for i in range(first, first + every) if plan.tracked(i)]
        assert len(on) == 1
        positions.append(on[0])
    # A fixed position aliases with a leak every `every` steps; every position is used about alike.
    counts = [positions.count(p) for p in range(every)]
    assert min(counts) >= 0.6 * len(positions) / every


torch = pytest.importorskip("torch")

from gradlint.runtime_probe import Verdict, probe  # noqa: E402
from gradlint.runtime_probe.target import load_target  # noqa: E402

STEPS = Path(__file__).parent / "probe_targets" / "train_steps.py"


def step(name: str):
    return load_target(f"{STEPS}:{name}").step


def test_with_a_stride_a_leak_is_still_measured_per_step_exactly():
    report = probe(step("keep_losses"), steps=100, track_every=3)
    assert report.track_every == 3 and report.gc_every == 9
    assert report.verdict is Verdict.RETAINED
    assert report.bytes_per_step == pytest.approx(4.0)
    assert [h.subject for h in report.holders] == ["losses"]
    # Each kept loss holds its own graph; only tracked steps' nodes are counted, per tracked step.
    assert report.graph_nodes_per_step == probe(step("keep_losses"), steps=100, track_every=1).graph_nodes_per_step > 0
    tracked = report.run.step_tracked
    assert tracked[10:].count(True) == 30 + 1  # steps 13, 16, ..., 100 and step 99


def test_with_a_stride_the_cycle_is_delayed_free_and_the_view_retained_at_their_true_size():
    cycle = probe(step("output_on_ctx"), steps=100, track_every=3)
    assert cycle.verdict is Verdict.DELAYED_FREE
    assert cycle.bytes_per_step == pytest.approx(8 * 4 * 4, rel=0.1)
    assert cycle.holders[0].subject == "ScatterMean.ctx.out"
    view = probe(step("view_on_ctx"), steps=100, track_every=3)
    assert view.verdict is Verdict.RETAINED
    assert view.bytes_per_step == pytest.approx(8 * 4 * 4)


def test_with_a_stride_a_growing_graph_is_still_seen():
    report = probe(step("accumulate_loss"), steps=100, track_every=4)
    assert report.verdict is Verdict.RETAINED
    # One chain through every step: still counted per step, not four steps' worth per tracked step.
    assert report.graph_nodes_per_step == probe(step("accumulate_loss"), steps=100, track_every=1).graph_nodes_per_step >= 5
    assert [h.subject for h in report.holders] == ["total_loss"]


def carried_state_step():
    """A state carried into the next step without .detach(), backward(retain_graph=True): each
    backward runs through every earlier step's tanh node and unpacks the output it saved (512 B)."""
    torch.manual_seed(0)
    weight = torch.randn(16, 16, requires_grad=True)
    state = [torch.zeros(8, 16)]

    def carry_state():
        state[0] = torch.tanh(state[0] @ weight + torch.randn(8, 16))
        state[0].sum().backward(retain_graph=True)
    return carry_state


def test_with_a_stride_a_graph_chained_across_steps_is_measured_at_its_true_size():
    # Unpacking a saved output in backward runs aten::detach under the mode: on a tracked step it
    # met the skipped steps' tanh outputs and charged them to itself (K x 512 B/step).
    every_step = probe(carried_state_step(), steps=60, track_every=1)
    assert every_step.verdict is Verdict.RETAINED and every_step.bytes_per_step == pytest.approx(512)
    for every in (3, 5):
        strided = probe(carried_state_step(), steps=60, track_every=every)
        assert strided.verdict is Verdict.RETAINED
        assert strided.bytes_per_step == pytest.approx(512), every
        assert sum(h.bytes_per_step for h in strided.holders) == pytest.approx(512), every


def test_with_a_stride_clean_code_stays_clean_over_repeated_runs():
    clean = step("clean_step")
    for every in (2, 3, 5):
        report = probe(clean, steps=100, track_every=every)
        assert report.verdict is Verdict.CLEAN, (every, report.reason)
        assert not report.holders


def test_track_every_must_be_positive():
    with pytest.raises(ValueError, match="track_every"):
        probe(step("clean_step"), steps=12, track_every=0)


@pytest.mark.parametrize("phase", [0, 1, 2])
def test_a_leak_every_third_step_is_measured_on_every_phase_with_a_stride_of_three(phase):
    # With the tracked step always last in its block this read 4.0 KiB/step on one phase and
    # clean on the other two; the true rate is 1024 B every third step.
    kept = []
    counter = [0]

    def every_third():
        counter[0] += 1
        if counter[0] % 3 == phase:
            kept.append(torch.zeros(256))

    report = probe(every_third, steps=100, track_every=3)
    assert report.verdict is Verdict.RETAINED
    assert report.bytes_per_step == pytest.approx(1024 / 3, rel=0.5)
