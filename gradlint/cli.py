"""The command line: argument parsing and exit codes over functions in `gradlint.check`.

Exit codes: 0 nothing found, 1 findings (GL000 syntax errors and GL001 unreadable files
included, as in ruff), 2 usage, configuration or internal error.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gradlint import __version__, reporters
from gradlint.check import CheckRequest, run_check
from gradlint.config import ConfigError
from gradlint.registry import all_rules, rule_by_code
from gradlint.runtime_probe.cli import probe  # imports torch only when the command runs


def _codes(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(c.strip() for c in value.split(",") if c.strip())


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="gradlint")
def main() -> None:
    """Find the PyTorch autograd patterns that make training memory climb."""


@main.command()
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
def check(paths, select, extend_select, ignore, output_format, statistics, exit_zero, quiet, jobs,
          stdin_filename, config_file, isolated) -> None:
    """Check PATHS (default: the current directory) for leaky autograd patterns."""
    request = CheckRequest(
        paths=list(paths) or [Path(".")],
        select=_codes(select), extend_select=_codes(extend_select) or (), ignore=_codes(ignore) or (),
        jobs=jobs, stdin_filename=stdin_filename, config_file=config_file, isolated=isolated,
        stdin=sys.stdin.buffer if list(paths) == [Path("-")] else None,
    )
    try:
        outcome = run_check(request)
    except ConfigError as error:
        click.echo(f"gradlint: error: {error}", err=True)
        sys.exit(2)
    findings = outcome.findings
    if statistics:
        click.echo(reporters.statistics(findings), nl=False)
    else:
        click.echo(reporters.FORMATS[output_format](findings), nl=False)
    for path, problem in outcome.internal_errors:
        click.echo(f"gradlint: internal error while checking {path}: {problem} (please report it)", err=True)
    if not quiet and output_format == "text":
        click.echo(reporters.summary(findings, outcome.files_checked), nl=False, err=statistics)
    if outcome.internal_errors:
        sys.exit(2)
    sys.exit(0 if exit_zero or not findings else 1)


@main.command("rule")
@click.argument("code")
def rule_command(code: str) -> None:
    """Explain one rule: what it does, why it is bad, and what to write instead."""
    rule = rule_by_code(code)
    if rule is None:
        click.echo(f"gradlint: error: no rule {code!r} (see `gradlint rules`)", err=True)
        sys.exit(2)
    click.echo(f"# {rule.name} ({rule.code})\n\nDefault severity: {rule.severity.value}"
               f"{'' if rule.default_enabled else ' (off by default)'}\n\n{rule.doc.strip()}")


@main.command("rules")
def rules_command() -> None:
    """List every rule: code, name, default severity, summary."""
    for rule in all_rules():
        off = "" if rule.default_enabled else " (off by default)"
        click.echo(f"{rule.code}  {rule.name:<28} {rule.severity.value:<8} {rule.summary}{off}")


main.add_command(probe)
