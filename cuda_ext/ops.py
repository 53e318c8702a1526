"""torch.library wiring for gradlint::scatter_add: the fake function and autograd.

The C++ library points torch here (`m.set_python_module("gradlint.cuda_ext.ops")`), so this is
the one module that may register them.
"""

from __future__ import annotations

import torch

OP_NAME = "gradlint::scatter_add"
_registered = False


def register() -> None:
    """Register once, after the library that defines the op is loaded."""
    global _registered
    if _registered:
        return
    torch.library.register_fake(OP_NAME)(_fake)
    torch.library.register_autograd(OP_NAME, _backward, setup_context=_setup_context)
    _registered = True


def _fake(src, index, dim_size, deterministic=True, check_index=True):
    torch._check(src.dim() in (1, 2), lambda: f"gradlint::scatter_add: src must be [N] or [N, D], got {src.dim()}-D")
    torch._check(index.dim() == 1, lambda: "gradlint::scatter_add: index must be 1-D")
    return src.new_empty((dim_size, *src.shape[1:]))


def _setup_context(ctx, inputs, output):
    _, index, *_ = inputs
    ctx.save_for_backward(index)


def _backward(ctx, grad_out):
    # out[index[i]] += src[i], so d out / d src[i] picks row index[i] of grad_out: a gather,
    # with no atomics, deterministic on every device.
    (index,) = ctx.saved_tensors
    grad_src = grad_out.index_select(0, index) if ctx.needs_input_grad[0] else None
    return grad_src, None, None, None, None
