"""Click usage errors as one line, in the form of gradlint's other errors.

Click prints a usage error as three lines (the usage, a hint, then the error); the rest of gradlint
reports bad input as `gradlint: error: ...` on one line, and the one-line form is what a
pre-commit or CI log shows well. The exit code stays click's 2.
"""

from __future__ import annotations

import click


def _command_path(ctx: click.Context | None) -> str:
    # Not ctx.command_path: its root is the program name as invoked (`python -m gradlint`, or the
    # command's own name when a test invokes `probe` directly).
    names = []
    while ctx is not None:
        if not isinstance(ctx.command, click.Group):
            names.append(ctx.command.name)
        ctx = ctx.parent
    return " ".join(["gradlint", *reversed(names)])


class OneLineUsageError(click.UsageError):
    def show(self, file=None) -> None:
        path = _command_path(self.ctx)
        message = self.format_message().rstrip().removesuffix(".")
        message = message[:1].lower() + message[1:]
        click.echo(f"{path}: error: {message} (see `{path} --help`)", file=file, err=file is None)


# Click 8.2+ raises this for a bare `gradlint`: its message is the help text, shown as it is.
_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _one_line(error: click.UsageError) -> click.UsageError:
    if isinstance(error, (OneLineUsageError, _HELP)):
        return error
    return OneLineUsageError(error.format_message(), error.ctx)


class _OneLine:
    """Parsing (make_context) and sub-command lookup (a group's invoke) are where click raises."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as error:
            raise _one_line(error) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as error:
            raise _one_line(error) from None


class Group(_OneLine, click.Group):
    pass


class Command(_OneLine, click.Command):
    pass
