"""Verdicts that read the graph or the allocator: a Function's saved view in a graph backward
never ran is named by the Function; int64 indices saved until backward are reported with the
int32 figure (GL301's runtime side); on CUDA, an allocator that grew while allocated memory did
not is its own verdict, not a leak (decided from the series: tested on synthetic series here)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gradlint.runtime_probe import Verdict, probe, render_text
from gradlint.runtime_probe.crosscheck import (
    CONFIRMED,
    MEASURED,
    NOT_A_LEAK,
    STATIC_ONLY,
    cross_check,
    static_findings,
)
from gradlint.runtime_probe.decide import decide
from gradlint.runtime_probe.runner import Collection, Run
from gradlint.runtime_probe.target import load_target

CASES = Path(__file__).parent / "probe_targets" / "saved_cases.py"


def step(name: str):
    return load_target(f"{CASES}:{name}").step


def line_of(text: str) -> int:
    return next(n for n, line in enumerate(CASES.read_text().splitlines(), 1) if text in line)



def test_the_cross_check_checks_the_files_it_names_even_where_excludes_would_drop_them(tmp_path, monkeypatch):
    # A non-editable install in the project's own .venv puts the bundled scenarios under
    # .venv/.../site-packages: the default excludes dropped them and the self-test saw no finding.
    from gradlint.runtime_probe import scenarios

    installed = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages" / "pkg" / "output_on_ctx.py"
    installed.parent.mkdir(parents=True)
    installed.write_text((Path(scenarios.__file__).parent / "output_on_ctx.py").read_text())
    monkeypatch.chdir(tmp_path)
    assert [f.code for f in static_findings([str(installed)])] == ["GL101"]

def test_a_view_of_its_output_saved_where_backward_never_ran_is_named_by_the_function():
    report = probe(step("evaluate_under_grad"), steps=30, device="cpu")
    assert report.verdict is Verdict.RETAINED, report.reason
    (holder,) = report.holders
    assert holder.subject == "ScatterMean.saved_tensors" and holder.kind == "graph"
    assert holder.detail.startswith("ScatterMean saved a view of its own output; backward never ran")
    assert Path(holder.file).samefile(CASES) and holder.line == line_of("ctx.save_for_backward(index, counts")
    # The whole output and the counts it saved are this one holder's: nothing is left "(unnamed)".
    assert {site.split(" ")[0].rsplit(":", 1)[1] for site in holder.created_at} == {
        str(line_of("out = out / counts")), str(line_of("counts = torch.bincount"))}
    assert holder.bytes_per_step == pytest.approx(32 * 16 * 4 + 32 * 8)
    rows = cross_check(report, static_findings([str(CASES)]))
    (row,) = [r for r in rows if r.holder == "ScatterMean.saved_tensors"]
    assert row.agreement == CONFIRMED and row.static.startswith("GL107 at ")
    assert "(unnamed" not in render_text(report)


def test_int64_indices_saved_until_backward_are_reported_with_what_int32_would_hold():
    report = probe(step("train_with_saved_index"), steps=16, warmup=4, device="cpu")
    assert report.verdict is Verdict.CLEAN, report.reason
    (saved,) = report.saved_indices
    assert saved.subject == "GatherRows" and saved.bytes_per_step == 131072 * 8
    assert saved.line == line_of("ctx.save_for_backward(index)")
    assert ("note: this step saves 1.0 MiB of int64 indices until backward (GatherRows 1.0 MiB at "
            in render_text(report))
    assert "int32 would hold 512.0 KiB" in render_text(report)
    assert report.to_dict()["saved_indices"][0]["bytes_per_step"] == 131072 * 8


def test_the_same_index_as_int32_gets_no_note():
    report = probe(step("train_with_int32_index"), steps=16, warmup=4, device="cpu")
    assert report.verdict is Verdict.CLEAN and report.saved_indices == []
    assert "int64" not in render_text(report)


def test_the_cross_check_joins_gl301_to_the_bytes_measured_and_rules_that_claim_no_leak_say_what_they_are():
    report = probe(step("train_with_sorted_rows"), steps=12, warmup=4, device="cpu")
    rows = {r.static.split(" ")[0]: r for r in cross_check(report, static_findings([str(CASES)]))}
    gl301 = rows["GL301"]
    assert gl301.holder == "SortedRows" and gl301.agreement == MEASURED and gl301.bytes_per_step == 131072 * 8
    assert gl301.note == "this step saves 1.0 MiB of int64 until backward; int32 would hold 512.0 KiB"
    # GL302 (nondeterminism) is no leak claim: it does not read "no growth".
    assert rows["GL302"].agreement == NOT_A_LEAK and rows["GL302"].verdict == "nondeterminism"
    assert rows["GL302"].bytes_per_step is None
    # GL106 (empty_cache every step) claims a slowdown, not growth.
    assert rows["GL106"].agreement == NOT_A_LEAK and rows["GL106"].verdict == "slowdown"
    assert rows["GL106"].bytes_per_step is None and "not memory growth" in rows["GL106"].note
    # GL107 is a leak claim this step does not trigger (backward runs): static-only, no growth.
    assert rows["GL107"].agreement == STATIC_ONLY and rows["GL107"].verdict == "no growth"


def _cuda_run(reserved: list[int], allocated: list[int]) -> Run:
    run = Run(steps_requested=60, warmup=10, gc_every=10)
    run.live_bytes = [1000] * 60
    run.step_tracked = [True] * 60
    run.step_seconds = [0.01] * 60
    for i, (r, a) in enumerate(zip(reserved, allocated)):
        step = 10 + 10 * i
        run.collections.append(Collection(step, 1000, 1000, 0, step - 10, None, a, r))
    return run


MIB = 1 << 20


def test_an_allocator_that_grows_while_allocated_memory_does_not_is_its_own_verdict():
    decision = decide(_cuda_run([20 * MIB, 22 * MIB, 42 * MIB, 44 * MIB, 64 * MIB, 66 * MIB],
                                [10 * MIB, 10 * MIB + 512, 10 * MIB, 10 * MIB, 10 * MIB + 512, 10 * MIB]), "cuda")
    assert decision.verdict is Verdict.ALLOCATOR_GREW and not decision.verdict.is_leak
    assert decision.reason.startswith("the caching allocator grew, allocated memory did not: not a leak")
    assert "46.0 MiB" in decision.reason


@pytest.mark.parametrize("reserved, allocated, device", [
    # allocated grows with reserved: not the allocator's doing (and the tracker said clean: still clean)
    ([20 * MIB, 30 * MIB, 40 * MIB, 50 * MIB, 60 * MIB, 70 * MIB],
     [10 * MIB, 18 * MIB, 26 * MIB, 34 * MIB, 42 * MIB, 50 * MIB], "cuda"),
    # reserved steady: clean
    ([20 * MIB] * 6, [10 * MIB] * 6, "cuda"),
    # under one 2 MiB segment of rise: no trend
    ([20 * MIB, 20 * MIB, 21 * MIB, 21 * MIB, 21 * MIB, 21 * MIB], [10 * MIB] * 6, "cuda"),
    # on the CPU the CUDA series is not read
    ([20 * MIB, 22 * MIB, 42 * MIB, 44 * MIB, 64 * MIB, 66 * MIB], [10 * MIB] * 6, "cpu"),
])
def test_no_allocator_verdict_without_its_evidence(reserved, allocated, device):
    assert decide(_cuda_run(reserved, allocated), device).verdict is Verdict.CLEAN


def test_the_slope_of_a_long_series_takes_bounded_memory_and_stays_robust():
    import statistics
    import tracemalloc

    from gradlint.runtime_probe.verdict import MAX_SLOPE_POINTS, robust_slope

    def exact(xs, ys):
        return statistics.median((ys[j] - ys[i]) / (xs[j] - xs[i])
                                 for i in range(len(xs)) for j in range(i + 1, len(xs)))

    # Up to MAX_SLOPE_POINTS points it is Theil-Sen over all pairs.
    xs = list(range(0, 10 * MAX_SLOPE_POINTS, 10))
    ys = [(x * 7919) % 101 + 3 * x for x in xs]
    assert robust_slope(xs, ys) == exact(xs, ys)
    # 1000 collections (10000 steps at gc every 10): a 4 B/step rise with two one-off spikes still reads
    # 4 B/step, and the pairs it is taken over stay few (all 499500 of them took 16 MB).
    xs = list(range(10, 10010, 10))
    ys = [4 * x + (1 << 20 if x in (500, 5000) else 0) for x in xs]
    tracemalloc.start()
    try:
        slope = robust_slope(xs, ys)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert slope == pytest.approx(4.0)
    assert peak < 2_000_000, peak
