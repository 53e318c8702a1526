"""The pytest plugin (gradlint.integrations.pytest_plugin) in real inner pytest sessions (pytester)."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytest_plugins = ["pytester"]

SUITE = Path(__file__).parent / "integration_targets" / "pytest_suite" / "training_tests.py"
ROOT = Path(__file__).parent.parent
LEAKY, CLEAN = "test_step_keeping_every_loss", "test_step_keeping_loss_values"


def _entry_point_installed() -> bool:
    return any(ep.value == "gradlint.integrations.pytest_plugin"
               for ep in importlib.metadata.entry_points(group="pytest11"))


# Installed (pip install -e .), pytest loads the plugin by its entry point; from a bare checkout,
# by name. Naming it when the entry point has loaded it too would register it twice.
PLUGIN = [] if _entry_point_installed() else ["-p", "gradlint.integrations.pytest_plugin"]


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    # A process of its own, as a user's pytest runs: an in-process inner session forgets the modules
    # first imported inside it, and torch cannot import some twice (torch._dynamo registers a
    # TORCH_LIBRARY when the tracker first loads it).
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *PLUGIN, *args)


def suite_in_order(first: str, second: str) -> str:
    """training_tests.py with its two probed tests in the order given (pytest runs them as written)."""
    source = SUITE.read_text()
    head, _, tests = source.partition("@pytest.mark.gradlint_probe")
    blocks = {re.search(r"def (\w+)", block).group(1): "@pytest.mark.gradlint_probe" + block.rstrip() + "\n"
              for block in ("@pytest.mark.gradlint_probe" + tests).split("@pytest.mark.gradlint_probe")[1:]}
    return head + blocks[first] + "\n\n" + blocks[second]


def verdict_lines(result: pytest.RunResult) -> list[str]:
    return [line.strip() for line in result.outlines if line.strip().startswith(("verdict:", "held by"))]


def test_verdicts_do_not_depend_on_test_order(pytester):
    # The leaky test leaves 30 graphs alive after it ends, every teardown leaves a 1 MiB cycle the
    # next test's collections free, and a cache is filled by whichever test runs first: none of it
    # reaches the other test's verdict, in either order.
    seen = {}
    for order in ((LEAKY, CLEAN), (CLEAN, LEAKY)):
        pytester.makepyfile(test_training=suite_in_order(*order))
        result = run(pytester, "-v", "--strict-markers")
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines([f"*::{order[0]} *", f"*::{order[1]} *"])  # ran in the order written
        result.stdout.fnmatch_lines([f"*::{LEAKY} FAILED*"], consecutive=False)
        result.stdout.fnmatch_lines([f"*::{CLEAN} PASSED*"], consecutive=False)
        seen[order[0]] = verdict_lines(result)
    assert seen[LEAKY] == seen[CLEAN]
    assert seen[LEAKY][0].startswith("verdict: retained") and seen[LEAKY][1].startswith("held by LOSSES")


def test_leak_fails_the_test_with_holder_bytes_per_step_and_line(pytester):
    pytester.makepyfile(test_training=SUITE.read_text())
    result = run(pytester, "-k", "every_loss")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*gradlint probe: test_training.py::test_step_keeping_every_loss (30/30 steps, 10 warm-up, cpu*",
        # The 0-d float32 loss, 4 B, and its graph: what LOSSES keeps each step.
        "*verdict: retained  4 B/step +7.0 nodes/step*",
        "*held by LOSSES: module-level list 'LOSSES' in test_training [[]test_training.py:14[]]",
        "*4 B/step +7.0 nodes/step, retained",
        "*created at test_training.py:35 (mean.default)",
    ])
    assert SUITE.read_text().splitlines()[13].startswith("LOSSES = []")
    assert "loss = MODEL(features(16)).pow(2).mean()" in SUITE.read_text().splitlines()[34]
    # The report, not a traceback into the probe.
    assert "runtime_probe" not in result.stdout.str()


def test_probed_tests_keep_pytests_outcomes_and_leave_no_probe_behind(pytester):
    pytester.makepyfile(test_outcomes="""
        import gc, pytest, torch

        CALLS = []

        @pytest.mark.gradlint_probe(steps=30)
        def test_breaks_on_its_seventh_run():
            CALLS.append(1)
            assert len(CALLS) < 7, "the state this test mutates broke it"

        @pytest.mark.gradlint_probe
        def test_skips():
            pytest.skip("no GPU here")

        @pytest.mark.gradlint_probe
        @pytest.mark.xfail(reason="known", strict=True)
        def test_expected_failure():
            assert False

        @pytest.mark.gradlint_probe(steps=20)
        @pytest.mark.parametrize("width", [4, 8])
        def test_clean_with_a_parameter(width):
            w = torch.randn(width, width, requires_grad=True)
            (torch.randn(2, width) @ w).sum().backward()

        def test_after_them():
            # The probe gave the collector back and left the tracker, after a failure too.
            assert gc.isenabled()
            assert torch._C._len_torch_dispatch_stack() == 0
    """)
    result = run(pytester, "-v")
    result.assert_outcomes(passed=3, failed=1, skipped=1, xfailed=1)
    # A step that raises fails the test with its own error, its own traceback, and which step it was.
    result.stdout.fnmatch_lines(["*::test_breaks_on_its_seventh_run FAILED*"], consecutive=False)
    result.stdout.fnmatch_lines([">       assert len(CALLS) < 7, *", "E       AssertionError: the state this test mutates broke it",
                                 "*", "*", "E       gradlint probe: raised on step 7 of 30", "",
                                 "test_outcomes.py:8: AssertionError"], consecutive=True)
    assert "runtime_probe" not in result.stdout.str()


def test_leak_probe_fixture_probes_a_step_the_test_passes_it(pytester):
    pytester.makepyfile(test_fixture="""
        import pytest, torch

        def test_clean(leak_probe):
            w = torch.randn(8, 8, requires_grad=True)
            def step():
                (torch.randn(4, 8) @ w).sum().backward()
                w.grad = None
            report = leak_probe(step, steps=30)
            assert report.ok and report.steps_done == 30

        def test_leaky(leak_probe):
            w = torch.randn(8, 8, requires_grad=True)
            kept = []
            def step():
                kept.append((torch.randn(4, 8) @ w).sum())
            leak_probe(step, steps=30)

        def test_unknown_option(leak_probe):
            leak_probe(lambda: None, stpes=30)

        @pytest.mark.gradlint_probe
        def test_marker_and_fixture(leak_probe):
            pass
    """)
    result = run(pytester, "-v")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(["*::test_clean PASSED*", "*::test_leaky FAILED*"], consecutive=False)
    result.stdout.fnmatch_lines(["*gradlint probe: test_fixture.py::test_leaky: test_leaky.<locals>.step (30/30 steps*",
                                 "*verdict: retained*", "*held by *kept*test_fixture.py:*"], consecutive=False)
    result.stdout.fnmatch_lines(["*leak_probe: unknown option 'stpes' (use steps, warmup, gc_every, track_every, device)",
                                 "*@pytest.mark.gradlint_probe and the leak_probe fixture on one test: use one*"],
                                consecutive=False)


def test_bad_marker_arguments_fail_with_one_line_each(pytester):
    pytester.makepyfile(test_bad="""
        import pytest

        @pytest.mark.gradlint_probe(stpes=30)
        def test_misspelt():
            pass

        @pytest.mark.gradlint_probe(0)
        def test_no_steps():
            pass

        @pytest.mark.gradlint_probe(30, 10)
        def test_two_positionals():
            pass

        @pytest.mark.gradlint_probe(device="tpu")
        def test_unknown_device():
            pass

        @pytest.mark.gradlint_probe
        async def test_coroutine():
            pass
    """)
    result = run(pytester, "-p", "no:asyncio", "-p", "no:anyio")
    result.assert_outcomes(failed=5)
    result.stdout.fnmatch_lines([
        "*_ test_misspelt _*",
        "@pytest.mark.gradlint_probe: unknown option 'stpes' (use steps, warmup, gc_every, track_every, device)",
        "*_ test_no_steps _*",
        "gradlint_probe: steps must be at least 1",
        "*_ test_two_positionals _*",
        "@pytest.mark.gradlint_probe takes one positional argument (steps), got 2",
        "*_ test_unknown_device _*",
        "gradlint_probe: unknown device 'tpu': use auto, cpu or cuda",
        "*_ test_coroutine _*",
        ("@pytest.mark.gradlint_probe: test_coroutine is not a plain function; the probe calls the test's body as a step"
         " and a coroutine or generator runs none of it"),
        "*short test summary info*",
    ], consecutive=True)
    assert "Traceback" not in result.stdout.str()


def test_marker_is_registered(pytester):
    # In-process: listing the markers imports neither the probe nor torch.
    result = pytester.runpytest("-p", "no:cacheprovider", *PLUGIN, "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.gradlint_probe(steps=30, *): run the test's body that many times*"])


def test_importing_the_plugin_does_not_import_torch():
    code = ("import sys, gradlint.integrations.pytest_plugin\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'lightning', 'transformers')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert result.stdout.strip() == "[]"


def test_pyproject_registers_the_plugin_as_a_pytest11_entry_point():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["pytest11"] == {"gradlint": "gradlint.integrations.pytest_plugin"}


@pytest.mark.skipif(not _entry_point_installed(), reason="the project is not installed with its pytest11 entry point "
                                                         "(pip install -e .)")
def test_installed_plugin_loads_without_being_named(pytester):
    pytester.makepyfile(test_training=SUITE.read_text())
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(passed=1, failed=1)
