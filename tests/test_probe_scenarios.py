"""The bundled scenarios: each measured verdict and static codes match what the module declares."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from gradlint.runtime_probe.cli import probe  # noqa: E402
from gradlint.runtime_probe.crosscheck import LEAK_RULES  # noqa: E402
from gradlint.runtime_probe.scenarios import NAMES  # noqa: E402
from gradlint.runtime_probe.selftest import load_scenario, run_scenario  # noqa: E402


@pytest.mark.parametrize("name", NAMES)
def test_scenario_verdict_and_static_codes_match_its_declaration(name):
    result = run_scenario(name, steps=40)
    assert result.report.verdict.value == result.expected_verdict, result.report.reason
    assert result.static_codes == tuple(sorted(result.expected_codes))
    holder = load_scenario(name).HOLDER
    if holder:
        row = next(r for r in result.rows if r.holder == holder)
        if result.expected_verdict != "clean":
            assert row.agreement == "confirmed"
        elif "GL301" in result.expected_codes:  # the int64 bytes the steps saved, measured
            assert row.agreement == "measured"
        else:  # a leak claim that did not grow here; a rule that claims no leak says so
            assert row.agreement == ("static-only" if set(result.expected_codes) & LEAK_RULES else "not a leak claim")


def test_the_cycle_on_ctx_is_freed_by_collection_but_the_view_cycle_is_not():
    delayed = run_scenario("output_on_ctx", steps=40).report
    retained = run_scenario("view_on_ctx", steps=40).report
    assert delayed.verdict.value == "delayed-free" and retained.verdict.value == "retained"
    # Same [128, 16] float32 output per step; only the view's cycle survives gc.collect().
    assert delayed.bytes_per_step == retained.bytes_per_step == 128 * 16 * 4
    assert all(c.live_before > c.live_after for c in delayed.run.collections[1:])
    # The scenarios stand for user code: the creation line is the scenario's, not a caller's above.
    for report, name in ((delayed, "output_on_ctx"), (retained, "view_on_ctx")):
        sites = report.holders[0].created_at
        assert sites and all(f"scenarios/{name}.py:" in site for site in sites), sites


def test_int64_index_costs_twice_the_int32_bytes_per_step_but_does_not_grow():
    result = run_scenario("index_dtype", steps=30)
    edges = 128 * 8
    # Two saved indices of E entries each: 4 bytes more per entry as int64.
    assert result.comparison["int64"] - result.comparison["int32"] == 2 * edges * 4
    assert result.report.verdict.value == "clean"
    # What the sampled backward passes found saved: both indices, 8 bytes an entry, until backward.
    (saved,) = result.report.saved_indices
    assert (saved.subject, saved.bytes_per_step) == ("KNNPool64", 2 * edges * 8)


def test_no_target_runs_the_self_test_and_exits_0_when_all_scenarios_match():
    result = CliRunner().invoke(probe, ["--steps", "30", "--quiet"])
    assert result.exit_code == 0, result.output
    assert f"{len(NAMES)} of {len(NAMES)} scenarios match what they declare" in result.output
    assert "KNNMeanScatter.ctx.out" in result.output and "confirmed" in result.output


def test_the_self_test_still_matches_when_tracking_one_step_in_three():
    result = CliRunner().invoke(probe, ["--steps", "100", "--track-every", "3", "--quiet"])
    assert result.exit_code == 0, result.output
    assert f"{len(NAMES)} of {len(NAMES)} scenarios match what they declare" in result.output
