"""Load the user's step: `path/to/train.py:step` or `package.module:step`.

The module is imported once; its import runs the set-up (model, optimizer, data).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import io
import os
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
    except TargetError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name and module_ref.startswith(exc.name):
            raise TargetError(f"no module named {module_ref!r}") from None
        raise TargetError(f"importing {module_ref} raised {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the user's import: report it in one line
        raise TargetError(f"importing {module_ref} raised {type(exc).__name__}: {exc}") from None


def _user_import(load: Callable[[], object], shown: str):
    """Run the import with its stderr held back and replayed once it succeeds: when it fails,
    gradlint's error is the one line (argparse's usage lines would come before it)."""
    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            module = load()
    except SystemExit as exc:
        raise TargetError(_exit_at_import(shown, exc, held.getvalue())) from None
    if held.getvalue():
        sys.stderr.write(held.getvalue())
        sys.stderr.flush()
    return module


def _exit_at_import(shown: str, exc: SystemExit, said: str) -> str:
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
    except TargetError:
        sys.modules.pop(module_name, None)
        raise
    except Exception as exc:  # noqa: BLE001 - the user's import: report it in one line
        sys.modules.pop(module_name, None)
        raise TargetError(f"importing {shown} raised {type(exc).__name__}: {exc}") from None
    return module
