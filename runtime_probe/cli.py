"""`gradlint probe`: argument parsing and exit codes over the probe's functions.

Importing this module must not import torch: `gradlint check` imports the CLI at start-up.
Exit codes: 0 no leak, 1 a leak or a failed step (a script that raised or exited non-zero),
2 usage error, 3 nothing measured (a script that never stepped, or ended before enough steps to
judge), 130 interrupted (Ctrl-C) and 143 stopped by SIGTERM with no leak seen.
"""

from __future__ import annotations

import os
import sys
import warnings

import click
from click.core import ParameterSource

from gradlint import usage_errors

from . import interrupt


def _fail(message: str) -> None:
    click.echo(f"gradlint probe: error: {message}", err=True)
    sys.exit(2)


def _one_line_fallback_warnings() -> None:
    """The bundled op's fallback warning as one line: Python would print its source line under it."""
    from gradlint.cuda_ext import ExtensionFallbackWarning

    shown = warnings.showwarning
    if getattr(shown, "one_line_fallback", False):
        return  # installed by an earlier call in this process (the API and tests call probe often)

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, ExtensionFallbackWarning):
            click.echo(f"gradlint probe: warning: {message}", err=True)
        else:
            shown(message, category, filename, lineno, file, line)

    show.one_line_fallback = True
    warnings.showwarning = show


def _check_output(option: str, path: str, suffix: str | None = None) -> None:
    """Fail now, not after the whole run, when PATH cannot be written."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(parent):
        _fail(f"{option} {path}: directory {parent} does not exist")
    if not os.path.isdir(parent):
        _fail(f"{option} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        _fail(f"{option} {path}: not writable")
    if suffix is not None and not path.lower().endswith(suffix):
        # matplotlib picks the format from the suffix: .txt raises after the run, and no suffix
        # writes PATH.png beside what was asked.
        _fail(f"{option} {path}: the plot is a PNG, name it *{suffix}")


def _progress(quiet: bool, total: int, label: str):
    """A step callback that shows steps done, elapsed time and live bytes on a terminal's stderr
    (None when quiet or when stderr is not a terminal: progress.py), and the Progress itself."""
    from .progress import Progress

    progress = Progress(total, label.strip(), stream=sys.stderr, quiet=quiet)
    if not progress.enabled:
        return None, progress

    def on_step(i: int, session=None) -> None:
        progress.update(i, session.live_bytes if session is not None else None)

    return on_step, progress


def _stride(_ctx, _param, value: str) -> int | None:
    if value == "auto":
        return None
    if value.isdigit() and int(value) >= 1:
        return int(value)
    raise click.BadParameter(f"{value!r} is not auto or a whole number of at least 1")


@click.command("probe", cls=usage_errors.Command)
@click.argument("target", required=False)
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("-m", "module", metavar="MODULE", help="Run MODULE as a script (as `python -m MODULE` would); "
              "arguments after -- are its own.")
@click.option("--steps", type=click.IntRange(min=1), default=100, show_default=True, help="Steps to run.")
@click.option("--warmup", type=click.IntRange(min=0), default=10, show_default=True, help="Unmeasured steps first.")
@click.option("--gc-every", type=click.IntRange(min=1), default=10, show_default=True,
              help="Run gc.collect() every K steps (the automatic collector is paused while measuring).")
@click.option("--track-every", "track_every", default="auto", show_default=True, callback=_stride,
              help="Track one step in K after warm-up. auto: every step unless tracking would more than double "
                   "a small step (timed in warm-up); 1 for leaks that happen only on some steps.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--json", "json_file", type=click.Path(dir_okay=False), help="Write the reports and the cross-check as JSON.")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False), help="Plot memory per step to a PNG (needs matplotlib).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar; print the verdict lines and the table only.")
def probe(target, script_args, module, steps, warmup, gc_every, track_every, device, json_file, plot_file,
          quiet) -> None:
    """Run TARGET STEPS times and report whether memory leaks, what holds it, and which static
    finding agrees. TARGET is a training script (train.py, run unchanged as `python train.py
    ARGS` would, its steps found at each optimizer step; arguments after -- are the script's),
    `-m package.module` likewise, or a zero-argument step function (FILE.py:FUNCTION or
    package.module:FUNCTION). Under torchrun each rank reports, and rank 0 sums up.

    With no TARGET, probe the bundled scenarios: the self-test of static rules against runtime.
    """
    # SIGTERM (a scheduler's time limit) stops the run like Ctrl-C, with the partial report. Caught
    # here is a stop outside the run (torch's import, the report's printing): one line, not click's
    # "Aborted!" and exit 1.
    with interrupt.handling():
        try:
            _probe(target, tuple(script_args), module, steps, warmup, gc_every, track_every, device, json_file,
                   plot_file, quiet)
        except KeyboardInterrupt as stop:
            _stopped(interrupt.signal_name(stop), "")


def _stopped(signal_name: str, where: str) -> None:
    click.echo(f"gradlint probe: {interrupt.describe(signal_name)}{where}", err=True)
    sys.exit(interrupt.exit_code(signal_name))


def _is_script(target: str | None) -> bool:
    """`train.py` (a script) and not `train.py:step` (a step function in it)."""
    if target is None:
        return False
    _, sep, name = target.rpartition(":")
    if sep and name.isidentifier():
        return False
    return target.endswith(".py") or os.path.isfile(target)


def _probe(target, script_args, module, steps, warmup, gc_every, track_every, device, json_file, plot_file,
           quiet) -> None:
    script = module is not None or _is_script(target)
    if module is not None and target is not None:
        script_args = (target, *script_args)  # `-m pkg.mod a b`: all of them the module's arguments
    if script_args and not script:
        _fail(f"arguments after the target ({' '.join(script_args)}) are for a script; {target or 'the self-test'} "
              "is not one (a step function takes none)")
    rank = _rank()
    if json_file:
        json_file = _per_rank(json_file, rank)
    if plot_file:
        plot_file = _per_rank(plot_file, rank)
    try:
        import torch  # noqa: F401
    except ImportError:
        _fail("the probe needs PyTorch: pip install 'torch-gradlint[torch]' (or pip install torch)")
    if plot_file:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            _fail("--plot needs matplotlib: pip install 'torch-gradlint[plot]' (or pip install matplotlib)")
        _check_output("--plot", plot_file, ".png")
    if json_file:
        _check_output("--json", json_file)
    _one_line_fallback_warnings()
    from . import report as render
    from .api import resolve_device

    try:
        device = resolve_device(device)
    except ValueError as why:
        _fail(str(why))
    if script:
        code, reports = _script(module or target, bool(module), script_args, steps, warmup, gc_every, track_every,
                                device, json_file, plot_file, quiet, render, rank)
    elif target is None:
        code, reports = _selftest(steps, warmup, gc_every, track_every, device, json_file, plot_file, quiet, render)
    else:
        code, reports = _target(target, steps, warmup, gc_every, track_every, device, json_file, plot_file, quiet,
                                render)
    # The default interval is adjusted quietly; one the user chose is worth a word when it changed.
    if click.get_current_context().get_parameter_source("gc_every") is not ParameterSource.DEFAULT:
        _note_gc_every(reports, gc_every)
    sys.exit(code)


def _target(spec, steps, warmup, gc_every, track_every, device, json_file, plot_file, quiet, render):
    from .api import probe as run_probe
    from .crosscheck import cross_check, files_involved, static_findings
    from .target import TargetError, load_target

    from . import threads

    threads.install()  # before the import: a producer thread it starts is seen
    on_step, progress = _progress(quiet, steps, "probing")
    progress.waiting(f"importing {spec.rpartition(':')[0]}")
    try:
        loaded = load_target(spec)
        interrupt.check()
    except TargetError as why:
        _fail(str(why))
    except KeyboardInterrupt as stop:
        _stopped(interrupt.signal_name(stop), f" while importing {spec.rpartition(':')[0]}: no step ran")
    finally:
        progress.done_waiting()
    try:
        report = run_probe(loaded.step, steps, warmup=warmup, gc_every=gc_every, device=device, name=spec,
                           on_progress=on_step, track_every=track_every)
    finally:
        progress.close()
    stopped = report.interrupted_by if report.interrupted else None
    try:
        if not report.interrupted:
            interrupt.check()  # a stop whose exception the final analysis lost
        rows = cross_check(report, static_findings(files_involved(report, loaded.file)))
    except KeyboardInterrupt as stop:
        # The measurement is done: the report is printed without the static side.
        rows, stopped = [], interrupt.signal_name(stop)
        skipped = True
    else:
        skipped = False
    click.echo(render.report_text(report), nl=False)
    if rows:
        click.echo("cross-check with gradlint check:")
        click.echo(render.table_text(rows), nl=False)
    if skipped:
        click.echo(f"gradlint probe: {interrupt.describe(stopped)} before the cross-check with gradlint check: "
                   "the report above has none", err=True)
    _outputs([report], rows, json_file, plot_file, render)
    if report.verdict.is_leak or report.error is not None:
        return 1, [report]
    return (interrupt.exit_code(stopped) if stopped is not None else 0), [report]


def _rank() -> int | None:
    """This process's torchrun rank (RANK), when it runs under torchrun with more than one."""
    world = os.environ.get("WORLD_SIZE", "")
    rank = os.environ.get("RANK", "")
    if rank.isdigit() and world.isdigit() and int(world) > 1:
        return int(rank)
    return None


def _per_rank(path: str, rank: int | None) -> str:
    """`{rank}` in a --json or --plot path is the rank; under torchrun without it, `.rankN` goes
    before the suffix: no two ranks write one file."""
    if "{rank}" in path:
        return path.replace("{rank}", str(rank if rank is not None else 0))
    if rank is None:
        return path
    stem, suffix = os.path.splitext(path)
    return f"{stem}.rank{rank}{suffix}"


def _script(target, as_module, script_args, steps, warmup, gc_every, track_every, device, json_file, plot_file,
            quiet, render, rank):
    from . import distributed
    from .crosscheck import cross_check, files_involved, static_findings
    from .script import ScriptError, run_script

    on_step, progress = _progress(quiet, steps, "probing")
    # The script's own set-up (imports, data) runs before its first step: the bar starts there.
    progress.waiting(f"running {'-m ' if as_module else ''}{target}, no step finished yet")
    try:
        try:
            ran = run_script(target, list(script_args), as_module=as_module, steps=steps, warmup=warmup,
                             gc_every=gc_every, track_every=track_every, device=device, on_step=on_step, rank=rank)
        except ScriptError as why:
            _fail(str(why))
    finally:
        progress.close()
    report = ran.report
    stopped = report.interrupted_by if report.interrupted else None
    try:
        if not report.interrupted:
            interrupt.check()
        files = sorted(set(files_involved(report, ran.file)) | set(ran.imported))
        rows = cross_check(report, static_findings(files))
    except KeyboardInterrupt as stop:
        rows, stopped = [], interrupt.signal_name(stop)
    click.echo(render.report_text(report), nl=False)
    click.echo(f"  script: {_script_line(ran, steps)}")
    if rows:
        click.echo("cross-check with gradlint check:")
        click.echo(render.table_text(rows), nl=False)
    _outputs([report], rows, json_file, plot_file, render)
    if rank is not None:
        summary = distributed.gather(report, rank)
        if summary:
            click.echo(summary, nl=False)
    if report.verdict.is_leak or report.error is not None:
        return 1, [report]
    if stopped is not None:
        return interrupt.exit_code(stopped), [report]
    if report.verdict.value == "not-measured":
        return 3, [report]
    return 0, [report]


def _script_line(ran, steps: int) -> str:
    how = {"optimizer step": "a step ends at each optimizer step",
           "backward": "no optimizer: a step ends at each backward()",
           "": "no step boundary was seen"}[ran.boundary]
    done = ran.report.steps_done
    end = {"stopped": f"stopped after {done} steps",
           "finished": f"it ended on its own after {done} of {steps} steps",
           "exit": f"it called sys.exit({ran.exit_code!r}) after {done} of {steps} steps",
           "raised": f"it raised in step {ran.report.error.step if ran.report.error else done}",
           "interrupted": f"interrupted after {done} steps"}[ran.ended]
    return f"ran as __main__; {how}; {end}"


def _selftest(steps, warmup, gc_every, track_every, device, json_file, plot_file, quiet, render):
    from .scenarios import NAMES
    from .selftest import run_scenario

    results = []
    interrupted = False
    for name in NAMES:
        on_step, progress = _progress(quiet, steps, f"{name:<20}")
        try:
            result = run_scenario(name, steps, warmup=warmup, gc_every=gc_every, device=device, on_step=on_step,
                                  track_every=track_every)
        finally:
            progress.close()
        results.append(result)
        if result.report.interrupted:
            interrupted = True
            break
    lines = []
    for r in results:
        mark = "ok  " if r.passed else "FAIL"
        growth = f"{render.human_bytes(r.report.bytes_per_step)}/step" if r.report.verdict.is_leak else ""
        if r.report.graph_nodes_per_step:
            growth += f" +{r.report.graph_nodes_per_step:.1f} nodes/step"
        codes = ",".join(r.static_codes) or "-"
        line = (f"{mark} {r.name:<19} {r.report.verdict.value:<13} (expected {r.expected_verdict:<12}) "
                f"static {codes:<6} (expected {','.join(r.expected_codes) or '-'}) {growth}")
        if r.comparison:
            line += "  peak/step " + ", ".join(f"{k} {render.human_bytes(v)}" for k, v in r.comparison.items())
        lines.append(line.rstrip())
    click.echo("\n".join(lines))
    backend = _bundled_op_backend()
    if backend is not None:
        click.echo(f"note: the scenarios ran scatter_add's pure-torch reference, not the compiled op ({backend})")
    rows = [row for r in results for row in r.rows]
    click.echo("\ncross-check (runtime vs gradlint check):")
    click.echo(render.table_text(rows, with_scenario=True), nl=False)
    _outputs([r.report for r in results], rows, json_file, plot_file, render)
    failed = [r.name for r in results if not r.passed]
    reports = [r.report for r in results]
    if interrupted:
        by = results[-1].report.interrupted_by
        click.echo(f"{interrupt.describe(by)}: {len(results)} of {len(NAMES)} scenarios ran", err=True)
        return interrupt.exit_code(by), reports
    click.echo(f"\n{len(results) - len(failed)} of {len(results)} scenarios match what they declare"
               + (f"; mismatched: {', '.join(failed)}" if failed else ""))
    return (1 if failed else 0), reports


def _bundled_op_backend() -> str | None:
    """Why the scenarios ran the reference op, or None when they ran the compiled one."""
    from gradlint import cuda_ext

    backend = cuda_ext.load()
    return backend.fallback_reason if backend.name == cuda_ext.REFERENCE else None


def _outputs(reports, rows, json_file, plot_file, render) -> None:
    # Checked before the run, but the disk can still fill or the directory go: the report is
    # already printed, so say what was not written in one line.
    if json_file:
        try:
            render.write_json(json_file, reports, rows)
        except OSError as why:
            _fail(f"--json {json_file}: {why.strerror or why}")
    if plot_file:
        try:
            render.write_plot(plot_file, reports)
        except render.PlotUnavailable as why:
            _fail(str(why))
        except OSError as why:
            _fail(f"--plot {plot_file}: {why.strerror or why}")


def _note_gc_every(reports, asked: int) -> None:
    """Say why the collection interval is not the one asked for (stride.StridePlan.decide)."""
    seen = set()
    for report in reports:
        actual = report.gc_every
        if actual == asked or actual in seen:
            continue
        seen.add(actual)
        measured = report.steps_requested - report.warmup
        reasons = []
        if asked > max(1, measured // 4):
            reasons.append(f"at most every {max(1, measured // 4)} steps, so the {measured} steps after warm-up "
                           f"have at least four collections to judge growth on")
        if report.track_every > 1:
            reasons.append(f"a multiple of the tracking stride {report.track_every}, so a tracked step "
                           f"comes before each collection")
        click.echo(f"gradlint probe: note: gc every {actual} steps, not {asked}: {'; '.join(reasons) or 'the stride plan moved it'}", err=True)
