"""How long a container or accumulator outlives the step that stores into it.

Shared by the rules about keeping graph-attached values (GL103, GL104): storing into something
that outlives one training step keeps that step's autograd graph alive.
"""

from __future__ import annotations

from gradlint.flow import Walk, Where


def outlives_step(scope: str, name: str | None, where: Where) -> str | None:
    """Why the target outlives the step, in words, or None when it does not (as far as we know)."""
    if scope == "global":
        return "a module-level global"
    if scope == "closure":
        return "a variable of the enclosing function"
    if scope == "param":
        return "a parameter (the caller's object)"
    if scope in ("attribute", "self-attribute"):
        return "an attribute"
    if scope == "local":
        # A local built across a loop that is not a training loop (collecting per-layer outputs
        # to concatenate) is consumed within the step: not reported.
        # Only loops inside the innermost one that rebinds the name each iteration matter:
        # an outer epoch loop does not make a per-batch variable outlive its batch.
        loops = where.loops
        fresh_in = [i for i, loop in enumerate(loops) if name in loop.fresh_names]
        inner = loops[fresh_in[-1] + 1:] if fresh_in else loops
        training = [loop for loop in inner if loop.is_step_loop]
        if training and training[-1].per_epoch:
            return None  # stored once per epoch, between the epochs' steps: no per-step accumulation
        if training:
            return "a variable created before the training loop"
        if any(loop.is_rollout for loop in inner):
            return "a variable created before the rollout loop, which keeps every environment step's graph"
    return None


def holder_name(walk: Walk, name: str | None) -> str:
    """`self.history` inside class Trainer -> `Trainer.history`; other names as they are."""
    if not name:
        return ""
    head, _, rest = name.partition(".")
    if rest and head == walk.role.self_name and walk.role.owner_class:
        return f"{walk.role.owner_class}.{rest}"
    return name
