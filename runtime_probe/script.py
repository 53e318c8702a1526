"""Script mode: `gradlint probe train.py [-- args...]` runs the training script unchanged and finds
its step boundaries itself; a thin driver over session.StepProbe.

The script runs as `python train.py args` would: as `__main__`, with `sys.argv` = [train.py, args],
`sys.path[0]` its directory, in the current directory. (`-m pkg.module`: as `python -m` would,
with the current directory first on sys.path.)

Where a step ends:
- after each `step()` of the first optimizer that steps (torch's global optimizer step post hook,
  `torch.optim.optimizer.register_optimizer_step_post_hook`): a GAN's second optimizer steps
  inside the same iteration, a gradient-accumulation loop's optimizer once per accumulated step;
- with no optimizer at all (a hand-written SGD update), after each `torch.autograd.backward` (what
  `loss.backward()` calls): decided once two backward passes ran and no optimizer was ever made.
  A loop that makes an optimizer but has not stepped it waits for it, up to 64 backward passes.

Step 1 begins when the script starts, so its set-up is warm-up. After `steps` steps the probe
decides while the script's frames are still alive (its loop's `losses` list is a local of a running
function), then stops the script by raising `ScriptStopped` (a BaseException: a script's
`except Exception:` does not swallow it) out of the hook.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from dataclasses import dataclass, field

from . import interrupt
from .probe_report import ProbeReport
from .session import StepProbe

# Backward passes to wait for an optimizer that was made but has not stepped yet.
WAIT_FOR_OPTIMIZER = 64


class ScriptError(Exception):
    """The script cannot be run (no such file, no such module, a syntax error): one line."""


class ScriptStopped(BaseException):
    """Raised out of a step-boundary hook to stop the script once the probe has its steps."""


@dataclass
class ScriptRun:
    report: ProbeReport
    file: str  # the script's source file
    ended: str  # "stopped" (the probe had its steps), "finished", "exit", "raised", "interrupted"
    exit_code: object = None  # the script's own sys.exit code, when it called sys.exit
    boundary: str = ""  # "optimizer step" or "backward"
    imported: list[str] = field(default_factory=list)  # the project's own files the script imported


def _load_code(target: str, as_module: bool):
    if as_module:
        try:
            spec = importlib.util.find_spec(target)
        except (ImportError, ValueError):
            raise ScriptError(f"no module named {target!r}") from None
        if spec is None:
            raise ScriptError(f"no module named {target!r}")
        if spec.submodule_search_locations is not None:  # a package: its __main__, as python -m does
            return _load_code(f"{target}.__main__", True)
        if spec.loader is None or not hasattr(spec.loader, "get_code"):
            raise ScriptError(f"{target} cannot be run as a script")
        try:
            code = spec.loader.get_code(spec.name)
        except SyntaxError as exc:
            raise ScriptError(f"{exc.filename}:{exc.lineno}: SyntaxError: {exc.msg}") from None
        if code is None:
            raise ScriptError(f"{target} has no code to run")
        return code, spec.origin or "", spec
    path = os.path.abspath(target)
    if not os.path.isfile(path):
        raise ScriptError(f"no such file: {target}")
    try:
        with open(path, "rb") as f:
            source = f.read()
        code = compile(source, path, "exec")
    except SyntaxError as exc:
        raise ScriptError(f"{target}:{exc.lineno}: SyntaxError: {exc.msg}") from None
    except (OSError, ValueError) as exc:
        raise ScriptError(f"cannot read {target}: {exc}") from None
    return code, path, None


class _Boundaries:
    """Turns the script's optimizer steps (or backward passes) into step_finished()/step_started()."""

    def __init__(self, probe: StepProbe, on_step) -> None:
        self.probe = probe
        self.on_step = on_step
        self.mode = ""  # "optimizer step" or "backward", once known
        self.first_optimizer = None
        self.backwards = 0
        self.optimizers_made = 0
        self.report: ProbeReport | None = None
        self._handles = []
        self._original_backward = None
        self._original_init = None

    def install(self) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handles.append(register_optimizer_step_post_hook(self._optimizer_stepped))
        self._original_backward = torch.autograd.backward
        original = self._original_backward

        def backward(*args, **kwargs):
            out = original(*args, **kwargs)
            self._backward_done()
            return out

        backward.__wrapped__ = original
        torch.autograd.backward = backward
        init = self._original_init = torch.optim.Optimizer.__init__

        def optimizer_init(opt, *args, **kwargs):
            self.optimizers_made += 1
            return init(opt, *args, **kwargs)

        torch.optim.Optimizer.__init__ = optimizer_init

    def remove(self) -> None:
        import torch

        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._original_backward is not None:
            torch.autograd.backward = self._original_backward
            self._original_backward = None
        if self._original_init is not None:
            torch.optim.Optimizer.__init__ = self._original_init
            self._original_init = None

    def _optimizer_stepped(self, optimizer, _args, _kwargs) -> None:
        if self.mode == "backward":
            return
        if self.first_optimizer is None:
            self.first_optimizer, self.mode = optimizer, "optimizer step"
        if optimizer is self.first_optimizer:
            self._boundary()

    def _backward_done(self) -> None:
        if self.mode:
            if self.mode == "backward":
                self._boundary()
            return
        self.backwards += 1
        if self.backwards >= 2 and (not self.optimizers_made or self.backwards > WAIT_FOR_OPTIMIZER):
            self.mode = "backward"
            self._boundary()

    def _boundary(self) -> None:
        probe = self.probe
        if self.report is not None:
            raise ScriptStopped  # the script caught the first one and went on
        if not probe.step_open:
            return
        done = probe.step_finished()
        if self.on_step is not None:
            self.on_step(probe.steps_done, probe)
        if done:
            # Decided here, with the script's frames alive: its loop's locals name the holders.
            self.report = probe.finish()
            raise ScriptStopped
        interrupt.check()
        probe.step_started()


def run_script(target: str, args: list[str], *, as_module: bool = False, steps: int = 100, warmup: int = 10,
               gc_every: int = 10, track_every: int | None = None, device: str = "auto", on_step=None,
               rank: int | None = None) -> ScriptRun:
    """Run the script as __main__ until it has made `steps` steps (or ended) and report."""
    code, file, spec = _load_code(target, as_module)
    name = f"-m {target}" if as_module else target
    probe = StepProbe(steps=steps, warmup=warmup, gc_every=gc_every, track_every=track_every, device=device,
                      name=name, rank=rank)
    module = types.ModuleType("__main__")
    module.__dict__.update({"__file__": file, "__builtins__": __builtins__, "__cached__": None,
                            "__loader__": spec.loader if spec else None, "__spec__": spec,
                            "__package__": spec.parent if spec else None})
    saved = sys.argv, sys.path[:], sys.modules.get("__main__")
    before = set(sys.modules)
    sys.argv = [file if as_module else target, *args]  # as python sets it: the path as given, -m: the full path
    sys.path.insert(0, os.getcwd() if as_module else os.path.dirname(file))
    sys.modules["__main__"] = module
    boundaries = _Boundaries(probe, on_step)
    ended, exit_code = "finished", None
    boundaries.install()
    try:
        probe.step_started()
        try:
            exec(code, module.__dict__)
        except ScriptStopped:
            ended = "stopped"
        except SystemExit as exc:
            exit_code = exc.code
            if exc.code in (None, 0):
                ended = "exit"
            else:
                ended = "raised"
                probe.step_failed(exc)
        except KeyboardInterrupt as stop:
            ended = "interrupted"
            probe.step_interrupted(stop)
        except BaseException as exc:  # noqa: BLE001 - the user's script: what it raises is a finding
            ended = "raised"
            probe.step_failed(exc)
        boundaries.remove()
        imported = _project_files(before, file)
        if boundaries.report is None:
            # The script ended on its own: its globals are still in `module` (named as __main__'s).
            probe.notes.extend(_end_notes(ended, exit_code, probe, boundaries))
            report = probe.finish()
        else:
            report = boundaries.report
    finally:
        boundaries.remove()
        sys.argv, sys.path[:] = saved[0], saved[1]
        if saved[2] is not None:
            sys.modules["__main__"] = saved[2]
    return ScriptRun(report, file, ended, exit_code, boundaries.mode, imported)


def _end_notes(ended: str, exit_code, probe: StepProbe, boundaries: _Boundaries) -> list[str]:
    done, asked = probe.steps_done, probe.steps
    if boundaries.mode == "" and ended in ("finished", "exit"):
        return [f"the script {'called sys.exit(' + repr(exit_code) + ')' if ended == 'exit' else 'ended'} with no "
                "step seen: no optimizer stepped and backward ran fewer than twice"]
    if ended == "finished":
        return [f"the script ended after {done} of the {asked} steps asked for"]
    if ended == "exit":
        return [f"the script called sys.exit({exit_code!r}) after {done} of the {asked} steps asked for"]
    return []


def _project_files(before: set[str], script: str) -> list[str]:
    """The user's own files the script imported: the cross-check reads them with the script."""
    from .places import is_user_file

    root = os.getcwd()
    here = os.path.dirname(os.path.abspath(script))
    files = set()
    for name in set(sys.modules) - before:
        module = sys.modules.get(name)
        file = vars(module).get("__file__") if isinstance(module, types.ModuleType) else None
        if isinstance(file, str) and file.endswith(".py") and is_user_file(file):
            path = os.path.abspath(file)
            if path.startswith((root + os.sep, here + os.sep)) and "gradlint" not in os.path.relpath(path, root).split(os.sep)[:1]:
                files.add(path)
    return sorted(files)
