"""The command line: argument parsing and exit codes over functions in `gradlint.check`.

Exit codes: 0 nothing found, 1 findings (GL000 syntax errors and GL001 unreadable files
included, as in ruff; with --fix, findings left after fixing; with --diff, fixes to apply),
2 usage, configuration or internal error, or a fixed file that could not be written.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import click

from gradlint import __version__, reporters, usage_errors
from gradlint.check import CheckRequest, run_check
from gradlint.config import ConfigError
from gradlint.fixes import split_lines
from gradlint.registry import all_rules, rule_by_code
from gradlint.runtime_probe.cli import probe  # imports torch only when the command runs


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
@click.option("--output-format", type=click.Choice(sorted(reporters.FORMATS)), default="text", show_default=True)
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
def check(paths, select, extend_select, ignore, output_format, statistics, exit_zero, quiet, jobs,
          stdin_filename, config_file, isolated, fix, unsafe_fixes, diff, no_cache) -> None:
    """Check PATHS (default: the current directory) for leaky autograd patterns."""
    from_stdin = list(paths) == [Path("-")]
    request = CheckRequest(
        paths=list(paths) or [Path(".")],
        select=_codes(select), extend_select=_codes(extend_select) or (), ignore=_codes(ignore) or (),
        jobs=jobs, stdin_filename=stdin_filename, config_file=config_file, isolated=isolated,
        stdin=sys.stdin.buffer if from_stdin else None,
        fix=fix, diff=diff, unsafe_fixes=unsafe_fixes, no_cache=no_cache,
    )
    try:
        outcome = run_check(request)
    except ConfigError as error:
        click.echo(f"gradlint: error: {error}", err=True)
        sys.exit(2)
    for warning in outcome.warnings:
        click.echo(f"gradlint: warning: {warning}", err=True)
    for path, problem in outcome.internal_errors:
        click.echo(f"gradlint: internal error while checking {path}: {problem} (please report it)", err=True)
    for path, problem in outcome.not_written:
        click.echo(f"gradlint: error: the fixes to {path} were not written: {problem}", err=True)
    if diff:
        _report_diff(outcome, quiet)
    else:
        _report(outcome, request, output_format, statistics, quiet, from_stdin and fix)
    if outcome.internal_errors or outcome.not_written:
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
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    to_stderr = fixed_stdin
    if statistics:
        click.echo(reporters.statistics(findings), nl=False, err=to_stderr)
    else:
        click.echo(reporters.render(output_format, findings, request.unsafe_fixes), nl=False, err=to_stderr)
    if not quiet and output_format == "text":
        click.echo(reporters.summary(findings, outcome.files_checked, outcome.fixed,
                                     len(outcome.changes), request.unsafe_fixes),
                   nl=False, err=statistics or to_stderr)


def _report_diff(outcome, quiet: bool) -> None:
    for change in outcome.changes:
        lines = difflib.unified_diff(split_lines(change.before), split_lines(change.after),
                                     fromfile=change.path, tofile=change.path)
        click.echo("".join(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n"
                           for line in lines), nl=False)
    if not quiet:
        files = len(outcome.changes)
        click.echo(f"Would fix {outcome.fixed} finding{'s' if outcome.fixed != 1 else ''} in {files} "
                   f"file{'s' if files != 1 else ''}." if files else "No fixes to apply.", err=True)


@main.command("rule", cls=usage_errors.Command)
@click.argument("code")
def rule_command(code: str) -> None:
    """Explain one rule: what it does, why it is bad, and what to write instead."""
    rule = rule_by_code(code)
    if rule is None:
        click.echo(f"gradlint: error: no rule {code!r} (see `gradlint rules`)", err=True)
        sys.exit(2)
    click.echo(f"# {rule.name} ({rule.code})\n\nDefault severity: {rule.severity.value}"
               f"{'' if rule.default_enabled else ' (off by default)'}\n"
               f"Fix: {rule.fix_safety or 'none'}\n\n{rule.doc.strip()}")


@main.command("rules", cls=usage_errors.Command)
def rules_command() -> None:
    """List every rule: code, name, default severity, fix safety (- for none), summary."""
    for rule in all_rules():
        off = "" if rule.default_enabled else " (off by default)"
        click.echo(f"{rule.code}  {rule.name:<38} {rule.severity.value:<8} {rule.fix_safety or '-':<14} "
                   f"{rule.summary}{off}")


main.add_command(probe)
