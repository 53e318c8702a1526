"""Tracking one step in K: which steps run under the tracker, and that the verdicts hold with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradlint.runtime_probe.stride import DENSE_SETTLE, MIN_JUDGED, MIN_TRACKED, StridePlan


def calibrated(tracked_s: float, bare_s: float, steps: int = 100, warmup: int = 10) -> StridePlan:
    plan = StridePlan(steps, warmup, None)
    for i in range(1, warmup + 1):
        on = plan.tracked(i)
        plan.observe(i, on, tracked_s if on else bare_s)
    return plan


def test_warm_up_is_tracked_except_the_untracked_steps_of_the_timing_blocks():
    # Two tracked steps (set-up, lazy state), then blocks of three untracked and one tracked.
    plan = StridePlan(100, 10, None)
    assert [plan.tracked(i) for i in range(1, 11)] == [True] * 2 + [False, False, False, True] * 2
    assert [plan.calibrating(i) for i in range(1, 11)] == [False] * 2 + [True] * 8
    # A warm-up of 8 or 9 has room for one block; a long one for at most four.
    assert [StridePlan(100, 8, None).tracked(i) for i in range(1, 9)] == [True] * 4 + [False] * 3 + [True]
    assert [StridePlan(100, 9, None).tracked(i) for i in range(1, 10)] == [True] * 5 + [False] * 3 + [True]
    long = StridePlan(200, 30, None)
    assert sum(long.calibrating(i) for i in range(1, 31)) == 16
    assert [long.tracked(i) for i in range(15, 31)] == [False, False, False, True] * 4
    assert all(long.tracked(i) for i in range(1, 15))
    # Explicit stride, or too short a warm-up to time: every warm-up step is tracked.
    assert all(StridePlan(100, 10, 3).tracked(i) for i in range(1, 11))
    assert all(StridePlan(100, 7, None).tracked(i) for i in range(1, 8))


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
    assert plan.decide(10) == 8 and plan.every == 8  # 1 + 1.6/8 = 1.2x; collections every 8 steps
    # At 100 steps the stride is capped to leave MIN_TRACKED tracked steps: 1 + 1.6/5 = 1.32x.
    capped = calibrated(tracked_s=2.6e-3, bare_s=1.0e-3)
    assert capped.decide(10) == 10 and capped.every == (100 - 10 - 2) // MIN_TRACKED == 5
    cheap = calibrated(tracked_s=1.2e-3, bare_s=1.0e-3)
    assert cheap.decide(10) == 10 and cheap.every == 1


def test_on_a_loaded_machine_the_tracker_cost_is_read_in_cpu_time():
    # Waiting for a core stretches both steps' wall clock alike (1.2x apart) while the tracker's
    # own work triples the step's CPU time: the stride follows the CPU time.
    plan = StridePlan(400, 10, None)
    for i in range(1, 11):
        on = plan.tracked(i)
        plan.observe(i, on, 12e-3 if on else 10e-3, 3e-3 if on else 1e-3)
    plan.decide(10)
    assert plan.every == 10  # ceil((3 - 1) / (1.2 - 1))
    wall_only = StridePlan(400, 10, None)
    for i in range(1, 11):
        on = wall_only.tracked(i)
        wall_only.observe(i, on, 12e-3 if on else 10e-3)
    wall_only.decide(10)
    assert wall_only.every == 1


def test_a_tracked_step_is_charged_the_time_it_adds_to_the_untracked_steps_after_it():
    # The bench's small step, in thread CPU time (ms): a tracked step 0.80, the untracked steps after
    # it 0.33 and 0.29, the third 0.27. Its cost is 0.53 + 0.06 + 0.02 = 0.61 ms, 3.26 untracked
    # steps' worth: K = ceil(2.26 / 0.2) = 12. Timed alternating (every untracked step right after
    # a tracked one) it read 0.80 / 0.33 = 2.4, and the run landed at 1.6x.
    def plan_for(times):
        plan = StridePlan(400, 10, None)
        for i in range(1, 11):
            on = plan.tracked(i)
            distance = (10 - i) % 4
            plan.observe(i, on, times[distance] * 1e-3, times[distance] * 1e-3)
        plan.decide(10)
        return plan

    assert plan_for({0: 0.80, 3: 0.33, 2: 0.29, 1: 0.27}).every == 12
    # Without a hangover only the tracked step's own excess counts: 0.80 / 0.27 = 2.96x, K = 10.
    assert plan_for({0: 0.80, 3: 0.27, 2: 0.27, 1: 0.27}).every == 10
    # A large step: the tracker's cost vanishes in it, whatever the noise on the steps after.
    assert plan_for({0: 54.4, 3: 54.0, 2: 53.6, 1: 53.9}).every == 1
    # Waiting for a core only adds time: one stretched sample (a 54 ms step read 100 ms by the
    # wall clock) does not make the tracker look expensive, as the mean of two samples did (K = 3).
    plan = StridePlan(400, 10, None)
    for i in range(1, 11):
        wall = 100.0 if i == 3 else 54.0
        plan.observe(i, plan.tracked(i), wall * 1e-3, 53.0e-3)
    plan.decide(10)
    assert plan.every == 1


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

from gradlint.runtime_probe import Verdict, probe, render_text  # noqa: E402
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


def test_densify_tracks_every_step_from_then_on_only_with_a_chosen_stride():
    plan = calibrated(tracked_s=3.0e-3, bare_s=1.0e-3, steps=200)
    plan.decide(10)
    assert plan.every == 10 and plan.may_densify(60)
    assert not all(plan.tracked(i) for i in range(11, 60))
    plan.densify(60)
    assert plan.dense_from == 60 and not plan.may_densify(61)
    assert all(plan.tracked(i) for i in range(60, 201))
    assert all(plan.tracked(i) for i in range(11, 201) if plan.collects(i))
    plan.densify(90)  # once only
    assert plan.dense_from == 60
    # Collections as often as before (every 10 steps), each on a tracked step.
    assert [i for i in range(60, 201) if plan.collects(i)] == list(range(69, 200, 10))
    # Too late to leave MIN_JUDGED steps after settling: the stride stays.
    late = calibrated(tracked_s=3.0e-3, bare_s=1.0e-3, steps=200)
    late.decide(10)
    assert late.may_densify(200 - MIN_JUDGED - DENSE_SETTLE + 1) and not late.may_densify(200 - MIN_JUDGED - DENSE_SETTLE + 2)
    asked = StridePlan(200, 10, 10)
    asked.decide(10)
    asked.densify(60)  # a stride asked for is kept
    assert asked.dense_from is None and sum(asked.tracked(i) for i in range(61, 101)) == 4


@pytest.fixture
def chosen_stride_of_10(monkeypatch):
    """Warm-up timing that reads a tracked step 3x an untracked one: K = 10 at 200 steps."""
    from gradlint.runtime_probe import stride

    monkeypatch.setattr(stride.StridePlan, "_ratio", lambda self: 3.0)


def kept_every(period: int, phase: int):
    counter, kept = [0], []
    weight = torch.randn(16, 16, requires_grad=True)

    def step():
        counter[0] += 1
        (torch.randn(8, 16) @ weight).pow(2).mean().backward()
        weight.grad = None
        if counter[0] % period == phase:
            kept.append(torch.zeros(256))  # 1 KiB

    return step


@pytest.mark.parametrize("phase", [0, 1, 2, 3, 4])
def test_with_a_chosen_stride_a_leak_on_some_steps_is_tracked_on_every_step_once_seen(chosen_stride_of_10, phase):
    # One step in 10 tracked would see a leak every 5th step on a fifth of them (or none, on a bad
    # phase): once a collection sees a survivor every step is tracked, and the rate is exact.
    report = probe(kept_every(5, phase), steps=200, device="cpu")
    assert report.track_every == 10 and report.dense_from is not None and report.dense_from < 100
    assert all(report.run.step_tracked[report.dense_from - 1:])
    assert report.verdict is Verdict.RETAINED, report.reason
    assert report.bytes_per_step == pytest.approx(1024 / 5, rel=0.1)
    assert f"tracking 1 step in 10, every step from step {report.dense_from} (growth seen)" in render_text(report)
    assert report.to_dict()["dense_from"] == report.dense_from
    # The header's gc interval after the switch is the one the collections kept (the last one ends the run).
    after = [c.step for c in report.run.collections if report.dense_from <= c.step < report.steps_done]
    assert len(after) >= 6 and {b - a for a, b in zip(after, after[1:])} == {report.dense_gc_every}
    assert report.to_dict()["dense_gc_every"] == report.dense_gc_every
    if report.dense_gc_every != report.gc_every:
        assert f"(growth seen), gc every {report.dense_gc_every} from then)" in render_text(report)


def test_after_the_switch_the_header_gives_the_gc_interval_the_collections_kept(chosen_stride_of_10):
    # Was: the header still read "gc every 40" when the steps judged were collected every 16.
    report = probe(kept_every(5, 0), steps=200, device="cpu", gc_every=40)
    assert report.gc_every == 40 and report.dense_from is not None
    after = [c.step for c in report.run.collections if report.dense_from <= c.step < report.steps_done]
    assert {b - a for a, b in zip(after, after[1:])} == {report.dense_gc_every} and report.dense_gc_every < 40
    assert f"gc every 40, tracking 1 step in 10, every step from step {report.dense_from} (growth seen), " \
           f"gc every {report.dense_gc_every} from then)" in render_text(report)


def test_with_a_chosen_stride_a_clean_step_keeps_it_and_a_stride_asked_for_is_kept(chosen_stride_of_10):
    clean = probe(kept_every(10**6, -1), steps=200, device="cpu")
    assert clean.verdict is Verdict.CLEAN and clean.track_every == 10 and clean.dense_from is None
    assert sum(clean.run.step_tracked[10:]) < 25
    assert "every step from" not in render_text(clean)
    asked = probe(kept_every(5, 0), steps=200, device="cpu", track_every=10)
    assert asked.track_every == 10 and asked.dense_from is None
    assert sum(asked.run.step_tracked[10:]) < 25


# The held-out clean-but-tricky script: losses kept for an epoch of 6 steps, then cleared.
EPOCH_LOSSES = Path(__file__).parent / "heldout_probe" / "train_epoch_losses_cleared.py"


def test_once_every_step_is_tracked_the_run_is_judged_on_those_steps(chosen_stride_of_10):
    # Losses (graph attached) kept for an epoch of 6 steps, then cleared: bounded. One step in 8
    # tracked held one epoch's graph or none, every step tracked holds up to six: judged over the
    # whole run that read "retained" (43 B/step since step 145); judged on the steps after the
    # switch and DENSE_SETTLE more, it is level.
    from gradlint.runtime_probe.script import run_script

    report = run_script(str(EPOCH_LOSSES), [], steps=150, device="cpu").report
    assert report.track_every == (150 - 10 - 2) // MIN_TRACKED and report.dense_from is not None
    assert report.verdict is Verdict.CLEAN, report.reason
    first = report.dense_from + DENSE_SETTLE
    assert (f"every step was tracked from step {report.dense_from} on, and the run judged on the steps "
            f"from step {first}") in render_text(report)
