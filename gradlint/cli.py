"""The command line: argument parsing and exit codes over functions in `gradlint.check`.

Exit codes: 0 nothing found, 1 findings (GL000 syntax errors and GL001 unreadable files
included, as in ruff; with --fix, findings left after fixing, including those in files the fixes
were refused for; with --diff, fixes to apply), 2 usage, configuration, input/output or internal
error: a path or stdin that cannot be read, a directory met during discovery that cannot be
listed, stdout that cannot be written (a full disk; a closed pipe exits 2 without a message),
or a fixed file that could not be written.

Every message is one line on stderr, and text from outside (file names, strings from the checked
source) is shown through `reporters.printable`, so it cannot add lines or terminal escapes.
"""

from __future__ import annotations

import difflib
import errno
import functools
import os
import sys
from pathlib import Path

import click

from gradlint import __version__, reporters, ruledocs, usage_errors
from gradlint.check import CheckRequest, run_check
from gradlint.config import ConfigError
from gradlint.source import split_lines
from gradlint.registry import all_rules
from gradlint.reporters import printable
from gradlint.runtime_probe.cli import probe  # imports torch only when the command runs
from gradlint.server import server  # imports pygls only when the command runs


class _OutputFailed(Exception):
    """stdout could not be written (closed, a full disk, a pipe whose reader has gone)."""

    def __init__(self, error: OSError):
        super().__init__(error)
        self.error = error


def _write(text: str, err: bool = False) -> None:
    """Write to stdout (or stderr) and flush, raising _OutputFailed when stdout cannot take it.
    A stderr that cannot be written is given up on: there is nowhere left to say so."""
    if not text:
        return
    stream = sys.stderr if err else sys.stdout
    if stream is None:  # the descriptor was closed when Python started
        if err:
            return
        raise _OutputFailed(OSError(errno.EBADF, "stdout is closed"))
    try:
        try:
            stream.write(text)
        except UnicodeEncodeError:  # an encoding that lacks a character (PYTHONIOENCODING=ascii)
            encoding = stream.encoding or "utf-8"
            stream.write(text.encode(encoding, "backslashreplace").decode(encoding, "replace"))
        stream.flush()
    except OSError as error:
        if not err:
            raise _OutputFailed(error) from None


def _write_bytes(data: bytes) -> None:
    if sys.stdout is None:
        raise _OutputFailed(OSError(errno.EBADF, "stdout is closed"))
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except OSError as error:
        raise _OutputFailed(error) from None


def _error(message: str) -> None:
    _write(f"gradlint: error: {printable(message)}\n", err=True)


def _silence_stdout() -> None:
    """Point stdout's descriptor at /dev/null, so the flush at exit of what could not be written
    succeeds instead of printing `Exception ignored ... BrokenPipeError` (Python's own advice)."""
    try:
        descriptor = sys.stdout.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (AttributeError, OSError, ValueError):  # closed, or not a real file (click's test runner)
        return
    os.dup2(devnull, descriptor)
    os.close(devnull)


def _output_errors_exit_2(command):
    """stdout that cannot be written is an I/O error: one line on stderr and exit 2, never a
    traceback. A closed pipe (`gradlint check | head -1`) is the reader having what it wants, so
    it gets no message, only exit 2: the output is incomplete."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except _OutputFailed as failure:
            _silence_stdout()
            if failure.error.errno != errno.EPIPE:
                _error(f"cannot write the output: {failure.error.strerror or failure.error}")
            sys.exit(2)

    return wrapper


def _codes(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(c.strip() for c in value.split(",") if c.strip())


@click.group(cls=usage_errors.Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="gradlint")
def main() -> None:
    """Find the PyTorch autograd patterns that make training memory climb."""


@main.command(cls=usage_errors.Command)
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--select", help="Rule codes or prefixes to enable, instead of the defaults (comma-separated; ALL).")
@click.option("--extend-select", help="Rule codes or prefixes to enable on top of the selection.")
@click.option("--ignore", help="Rule codes or prefixes to disable.")
@click.option("--output-format", type=click.Choice(sorted([*reporters.FORMATS, *reporters.ALIASES])),
              default="concise", show_default=True,
              help="concise: one line per finding; full: also the source line, a caret and the fix (text is concise).")
@click.option("--statistics", is_flag=True, help="Print the number of findings per rule instead of the findings.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("-q", "--quiet", is_flag=True, help="Print the findings and nothing else.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), help="Worker processes (default: all cores).")
@click.option("--stdin-filename", help="The file name to report for source read from stdin (`-`).")
@click.option("--config", "config_file", type=click.Path(path_type=Path, dir_okay=False),
              help="Use this pyproject.toml instead of the nearest one.")
@click.option("--isolated", is_flag=True, help="Ignore every configuration file.")
@click.option("--fix", is_flag=True, help="Apply the safe fixes to the files (atomically).")
@click.option("--unsafe-fixes", is_flag=True,
              help="Also apply (with --fix, --diff) or count as fixable the unsafe fixes, which may change behaviour.")
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff and write nothing; exit 1 if there are any.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache (.gradlint_cache).")
@click.option("--baseline", type=click.Path(path_type=Path, dir_okay=False),
              help="Report only findings not in this file; when it does not exist, write it with the current findings.")
@click.option("--add-noqa", is_flag=True, help="Write `# noqa: CODE` on the line of each finding, to silence them all.")
@_output_errors_exit_2
def check(paths, select, extend_select, ignore, output_format, statistics, exit_zero, quiet, jobs,
          stdin_filename, config_file, isolated, fix, unsafe_fixes, diff, no_cache, baseline, add_noqa) -> None:
    """Check PATHS (default: the current directory) for leaky autograd patterns."""
    from_stdin = list(paths) == [Path("-")]
    if from_stdin and sys.stdin is None:  # the descriptor was closed when Python started
        _error("cannot read stdin: it is closed")
        sys.exit(2)
    conflict = _conflicting_options(from_stdin, fix, diff, baseline, add_noqa)
    if conflict:
        _write(f"gradlint check: error: {conflict} (see `gradlint check --help`)\n", err=True)
        sys.exit(2)
    request = CheckRequest(
        paths=list(paths) or [Path(".")],
        select=_codes(select), extend_select=_codes(extend_select) or (), ignore=_codes(ignore) or (),
        jobs=jobs, stdin_filename=stdin_filename, config_file=config_file, isolated=isolated,
        stdin=sys.stdin.buffer if from_stdin else None,
        fix=fix, diff=diff, unsafe_fixes=unsafe_fixes, no_cache=no_cache,
        baseline=baseline, add_noqa=add_noqa,
    )
    try:
        outcome = run_check(request)
    except ConfigError as error:  # check.InputError too: a path or stdin that cannot be read
        _error(str(error))
        sys.exit(2)
    for warning in outcome.warnings:
        _write(f"gradlint: warning: {printable(warning)}\n", err=True)
    for path, problem in outcome.unreadable_dirs:
        _error(f"cannot read directory {path}: {problem}")
    for path, problem in outcome.internal_errors:
        _write(f"gradlint: internal error while checking {printable(path)}: {printable(problem)} "
               f"(please report it)\n", err=True)
    for path, problem in outcome.not_written:
        _error(f"the fixes to {path} were not written: {problem}")
    for path, problem in outcome.not_fixed:
        _write(f"gradlint: not {'changed' if add_noqa else 'fixed'}: {printable(path)}: {printable(problem)}\n", err=True)
    for finding, why in outcome.noqa_skipped:
        _write(f"gradlint: noqa not added: {printable(finding.path)}:{finding.line}:{finding.column}: "
               f"{finding.code}: {printable(why)}\n", err=True)
    if outcome.baseline_written is not None:
        _write(f"gradlint: wrote baseline {printable(str(baseline))} with {_plural(outcome.baseline_written, 'finding')}; "
               f"later runs with --baseline report only new findings\n", err=True)
    if diff:
        _report_diff(outcome, quiet)
    else:
        _report(outcome, request, output_format, statistics, quiet, from_stdin and fix)
    if outcome.internal_errors or outcome.not_written or outcome.unreadable_dirs:
        sys.exit(2)
    if diff:
        sys.exit(1 if outcome.changes and not exit_zero else 0)
    sys.exit(0 if exit_zero or not outcome.findings else 1)


def _report(outcome, request: CheckRequest, output_format: str, statistics: bool, quiet: bool,
            fixed_stdin: bool) -> None:
    findings = outcome.findings
    # ruff's convention for `--fix -`: the fixed source on stdout, the findings on stderr.
    if fixed_stdin:
        # Unchanged input goes back byte for byte, even when it did not decode.
        data = outcome.stdin_data
        if outcome.changes:
            bom = b"\xef\xbb\xbf" if data.startswith(b"\xef\xbb\xbf") else b""
            data = bom + outcome.changes[0].after.encode("utf-8")
        _write_bytes(data)
    to_stderr = fixed_stdin
    if statistics:
        _write(reporters.statistics(findings), err=to_stderr)
    else:
        stdin = {_stdin_name(request): outcome.stdin_text} if request.stdin is not None and outcome.stdin_text else None
        _write(reporters.render(output_format, findings, request.unsafe_fixes, stdin), err=to_stderr)
    if not quiet and reporters.ALIASES.get(output_format, output_format) in reporters.TEXT_FORMATS:
        summary = reporters.summary(findings, outcome.files_checked, outcome.fixed,
                                    len(outcome.changes), request.unsafe_fixes)
        if request.add_noqa:
            summary = f"Added {_plural(outcome.noqa_added, 'noqa directive')} in {_plural(outcome.noqa_files, 'file')}.\n" \
                + (summary if findings else "")
        elif request.baseline is not None and outcome.baseline_written is None and outcome.baseline_hidden:
            gone = f"; {outcome.baseline_gone} of its entries match nothing now" if outcome.baseline_gone else ""
            summary += f"{_plural(outcome.baseline_hidden, 'finding')} in the baseline not shown{gone}.\n"
        _write(summary, err=statistics or to_stderr)


def _stdin_name(request: CheckRequest) -> str:
    return request.stdin_filename or "-"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _conflicting_options(from_stdin: bool, fix: bool, diff: bool, baseline, add_noqa: bool) -> str | None:
    if add_noqa and (fix or diff):
        return "--add-noqa cannot be combined with --fix or --diff: fix first, then add noqa for what is left"
    if add_noqa and from_stdin:
        return "--add-noqa writes files; it cannot read stdin (`-`)"
    if baseline is not None and diff:
        return "--baseline cannot be combined with --diff"
    return None


def _report_diff(outcome, quiet: bool) -> None:
    for change in outcome.changes:
        # The header names the file through printable(); the lines are the source's own, as in any diff.
        name = printable(change.path)
        lines = difflib.unified_diff(split_lines(change.before), split_lines(change.after),
                                     fromfile=name, tofile=name)
        _write("".join(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n"
                       for line in lines))
    if not quiet:
        files = len(outcome.changes)
        _write((f"Would fix {outcome.fixed} finding{'s' if outcome.fixed != 1 else ''} in {files} "
                f"file{'s' if files != 1 else ''}." if files else "No fixes to apply.") + "\n", err=True)


@main.command("rule", cls=usage_errors.Command)
@click.argument("code")
@_output_errors_exit_2
def rule_command(code: str) -> None:
    """Explain one rule: what it does, why it is bad, and what to write instead."""
    page = ruledocs.page_by_code(code)
    if page is None:
        _error(f"no rule {code!r} (see `gradlint rules`)")
        sys.exit(2)
    _write(f"# {page.name} ({page.code})\n\nDefault severity: {page.severity}"
           f"{'' if page.default_enabled else ' (off by default)'}\n"
           f"Fix: {page.fix_safety or 'none'}\nDocs: {ruledocs.rule_url(page.code)}\n\n{page.doc.strip()}\n")


@main.command("rules", cls=usage_errors.Command)
@_output_errors_exit_2
def rules_command() -> None:
    """List every rule: code, name, default severity, fix safety (- for none), summary."""
    _write("".join(f"{rule.code}  {rule.name:<38} {rule.severity.value:<8} {rule.fix_safety or '-':<14} "
                   f"{rule.summary}{' (off by default)' if not rule.default_enabled else ''}\n"
                   for rule in all_rules()))


main.add_command(probe)
main.add_command(server)
