"""Load the user's step: `path/to/train.py:step` or `package.module:step`.

The module is imported once; its import runs the set-up (model, optimizer, data).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass


class TargetError(Exception):
    """The target cannot be loaded: the message is the one line the user sees."""


@dataclass
class Target:
    spec: str
    step: Callable[[], object]
    file: str  # the module's source file ("" when unknown)


def parse_spec(spec: str) -> tuple[str, str]:
    module, sep, name = spec.rpartition(":")
    if not sep or not module or not name:
        raise TargetError(f"target {spec!r} must be FILE.py:FUNCTION or package.module:FUNCTION")
    return module, name


def _is_path(module: str) -> bool:
    return module.endswith(".py") or os.sep in module or "/" in module


def load_target(spec: str) -> Target:
    module_ref, name = parse_spec(spec)
    if _is_path(module_ref):
        path = os.path.abspath(module_ref)
        if not os.path.isfile(path):
            raise TargetError(f"no such file: {module_ref}")
        module = _import_file(path, module_ref)
    else:
        module = _import_module(module_ref)
    if not hasattr(module, name):
        raise TargetError(f"{module_ref} has no attribute {name!r}")
    step = getattr(module, name)
    if not callable(step):
        raise TargetError(f"{module_ref}:{name} is not callable (it is a {type(step).__name__})")
    _check_takes_no_arguments(spec, step)
    kind = runs_nothing(step)
    if kind is not None:
        raise TargetError(f"{spec} is a {kind}: calling it runs none of its body; probe a plain function "
                          "that runs one step")
    return Target(spec, step, getattr(module, "__file__", "") or "")


def runs_nothing(step: Callable) -> str | None:
    """What kind of function only builds an object when called (a generator, a coroutine), if so."""
    if inspect.isgeneratorfunction(step):
        return "generator function"
    if inspect.iscoroutinefunction(step):
        return "coroutine function (async def)"
    if inspect.isasyncgenfunction(step):
        return "async generator function"
    return None


def _check_takes_no_arguments(spec: str, step: Callable) -> None:
    # Called with arguments it would fail at step 1 with a TypeError and the verdict "error":
    # a mistake in the command, not a finding about the step.
    try:
        params = inspect.signature(step).parameters.values()
    except (ValueError, TypeError):  # some builtins and C callables have no signature: let them run
        return
    required = [p.name for p in params
                if p.default is inspect.Parameter.empty
                and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if required:
        raise TargetError(f"{spec} takes arguments ({', '.join(required)}): the probe calls it with none")


def _import_module(module_ref: str):
    # The console script's sys.path[0] is its bin directory, not the current one, so a package in
    # the project root would not be found; `python -m` and pytest's rootdir insertion put it first.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return _user_import(lambda: importlib.import_module(module_ref), module_ref)
    except (TargetError, KeyboardInterrupt):
        raise
    except ModuleNotFoundError as exc:
        if exc.name and module_ref.startswith(exc.name):
            raise TargetError(f"no module named {module_ref!r}") from None
        raise TargetError(f"importing {module_ref} raised {type(exc).__name__}: {exc}") from None
    except BaseException as exc:  # noqa: BLE001 - the user's import: report it in one line
        raise TargetError(f"importing {module_ref} raised {type(exc).__name__}: {exc}") from None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # argparse colours its usage on a terminal (Python 3.14)


class _ImportStderr:
    """The import's stderr, written through as it comes (a long set-up's progress shows while it
    runs), with its tail kept for the error line of an import that exits. Held back is only what
    argparse prints before it exits, from its "usage:" line on: gradlint's error names it in one
    line instead. Anything else (an attribute, isatty, fileno) is the real stream's."""

    _TAIL = 4096

    def __init__(self, stream) -> None:
        self._stream = stream
        self.tail = ""
        self.held = ""
        self.importing = True
        self._line_start = True

    def write(self, text: str) -> int:
        if not self.importing:  # a logging handler made at import keeps this object: pass it all on
            return self._stream.write(text)
        self.tail = (self.tail + text)[-self._TAIL:]
        if self.held or (self._line_start and _ANSI.sub("", text).startswith("usage:")):
            self.held += text
        else:
            self._stream.write(text)
            self._stream.flush()
        if text:
            self._line_start = text.endswith("\n")
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def release(self) -> None:
        """The import went on or failed otherwise: what was held is the user's output after all."""
        self.importing = False
        if self.held:
            self._stream.write(self.held)
            self._stream.flush()
            self.held = ""

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _line_buffered_stdout():
    """A print at import shows when made, also when stdout is a pipe or a batch log."""
    out = sys.stdout
    if getattr(out, "line_buffering", True) or not hasattr(out, "reconfigure"):
        yield
        return
    try:
        out.reconfigure(line_buffering=True)
    except (ValueError, OSError):  # detached or closed: leave it
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(ValueError, OSError):
            out.reconfigure(line_buffering=False)


def _user_import(load: Callable[[], object], shown: str):
    """Run the import with its stderr streamed through; argparse's usage lines are held back: when
    the import exits, gradlint's error is the one line. (A long import's notice is the CLI's
    progress: progress.py.)"""
    stderr = _ImportStderr(sys.stderr)
    try:
        with contextlib.redirect_stderr(stderr), _line_buffered_stdout():
            module = load()
    except SystemExit as exc:
        message = _exit_at_import(shown, exc, stderr.held or stderr.tail)
        stderr.held = ""  # named in the message
        raise TargetError(message) from None
    finally:
        stderr.release()
    return module


def _exit_at_import(shown: str, exc: SystemExit, said: str) -> str:
    said = _ANSI.sub("", said)
    called = "sys.exit()" if exc.code is None else f"sys.exit({exc.code!r})"
    last = next((line.strip() for line in reversed(said.splitlines()) if line.strip()), "")
    message = f"importing {shown} called {called}" + (f" after printing {last!r}" if last else "")
    if said.lstrip().startswith("usage:"):
        message += ("; argparse at import time sees gradlint's own arguments: "
                    "parse them under `if __name__ == \"__main__\":`")
    return message


def _import_file(path: str, shown: str):
    directory = os.path.dirname(path)
    name = os.path.splitext(os.path.basename(path))[0]
    # Sibling imports in the user's file work as they do under `python train.py`.
    if directory not in sys.path:
        sys.path.insert(0, directory)
    module_name = name if name not in sys.modules else f"_gradlint_probe_{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TargetError(f"cannot import {shown}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look the module up by name
    try:
        _user_import(lambda: spec.loader.exec_module(module), shown)
    except (TargetError, KeyboardInterrupt):  # Ctrl-C or a stop signal: the CLI says so in one line
        sys.modules.pop(module_name, None)
        raise
    except BaseException as exc:  # noqa: BLE001 - the user's import: report it in one line
        sys.modules.pop(module_name, None)
        raise TargetError(f"importing {shown} raised {type(exc).__name__}: {exc}") from None
    return module
