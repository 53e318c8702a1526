"""The pytest plugin (entry point `pytest11: gradlint`): fail a test whose training step leaks.

    @pytest.mark.gradlint_probe(steps=30)
    def test_training_step_does_not_leak(model, batch):
        loss = model(batch).mean()          # the test's body is the step: it runs 30 times
        loss.backward()

    def test_my_loop_step(leak_probe):      # or probe a step of the test's own
        model = make_model()
        leak_probe(lambda: train_step(model), steps=30)

On a leak the test fails with the probe's report: the verdict, bytes/step and each holder with its
file:line. A step that raises fails the test with its own exception (and a note saying which
step). Each test gets a probe of its own that counts only the tensors its own steps make, so a
verdict does not depend on which tests ran before it or what they left alive.

Importing this module does not import torch (pytest loads it in every session of a project that
installs gradlint): the probe is imported when a marked test or the fixture runs.
"""

from __future__ import annotations

import inspect

import pytest

MARKER = "gradlint_probe"
DEFAULT_STEPS = 30
# The StepProbe settings a test may set; the rest of StepProbe's defaults apply.
OPTIONS = ("steps", "warmup", "gc_every", "track_every", "device")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(steps={DEFAULT_STEPS}, warmup=10, gc_every=10, track_every=None, device='auto'): run the test's "
        "body that many times as a training step and fail if memory it makes stays alive (gradlint's runtime probe)")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    marker = pyfuncitem.get_closest_marker(MARKER)
    if marker is None:
        return None
    options = _marker_options(marker)
    test = pyfuncitem.obj
    if inspect.iscoroutinefunction(test) or inspect.isasyncgenfunction(test) or inspect.isgeneratorfunction(test):
        pytest.fail(f"@pytest.mark.{MARKER}: {pyfuncitem.name} is not a plain function; the probe calls the "
                    "test's body as a step and a coroutine or generator runs none of it", pytrace=False)
    if "leak_probe" in pyfuncitem.fixturenames:
        pytest.fail(f"@pytest.mark.{MARKER} and the leak_probe fixture on one test: use one (the marker makes "
                    "the whole body the step; the fixture probes a step you pass it)", pytrace=False)
    # As pytest's own pytest_pyfunc_call calls the test: with the fixtures its signature names.
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    _probe_or_fail(lambda: test(**arguments), name=pyfuncitem.nodeid, **options)
    return True


@pytest.fixture
def leak_probe(request: pytest.FixtureRequest):
    """`leak_probe(step, steps=30, **options)`: run the zero-argument `step` that many times under the
    probe; fail the test on a leak (the report names the holder, bytes/step and line). Returns the report."""

    def probe(step, steps: int = DEFAULT_STEPS, **options):
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            pytest.fail(f"leak_probe: unknown option {', '.join(map(repr, unknown))} "
                        f"(use {', '.join(OPTIONS)})", pytrace=False)
        name = f"{request.node.nodeid}: {getattr(step, '__qualname__', 'step')}"
        return _probe_or_fail(step, name=name, steps=steps, **options)

    return probe


def _marker_options(marker: pytest.Mark) -> dict:
    if len(marker.args) > 1:
        pytest.fail(f"@pytest.mark.{MARKER} takes one positional argument (steps), got {len(marker.args)}",
                    pytrace=False)
    options = dict(marker.kwargs)
    if marker.args:
        options["steps"] = marker.args[0]
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        pytest.fail(f"@pytest.mark.{MARKER}: unknown option {', '.join(map(repr, unknown))} "
                    f"(use {', '.join(OPTIONS)})", pytrace=False)
    options.setdefault("steps", DEFAULT_STEPS)
    return options


def _probe_or_fail(step, *, name: str, steps: int, **options):
    from gradlint.runtime_probe import probe
    from gradlint.runtime_probe.session import render_text

    raised: list[BaseException] = []

    def one_step():
        try:
            step()
        except BaseException as exc:  # noqa: BLE001 - kept to re-raise as the test's own failure
            raised.append(exc)
            raise

    try:
        report = probe(one_step, steps, name=name, **options)
    except ValueError as bad:  # steps=0, device="tpu": the marker's arguments, not the probe
        refused = str(bad)
    else:
        refused = ""
    if refused:
        pytest.fail(f"{MARKER}: {refused}", pytrace=False)  # outside the except: no chained traceback
    if raised:
        # The test's own failure (an assert, pytest.skip, Ctrl-C), with its own traceback: the probe
        # stopped at that step and gave the collector back.
        exc = raised[0]
        if isinstance(exc, Exception) and hasattr(exc, "add_note"):
            exc.add_note(f"gradlint probe: raised on step {report.error.step if report.error else '?'} of {steps}")
        raise exc
    if report.is_leak:
        pytest.fail(render_text(report).rstrip("\n"), pytrace=False)
    return report
