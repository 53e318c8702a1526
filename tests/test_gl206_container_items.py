"""GL206 and a forward input annotated as a container: the annotation (`new_shape: tuple`) says
the input is a container, not that it holds tensors. A shape list handed to such an input
(mmcv's `NewEmptyTensorOp.apply(x, out_shape)`, forward doing `x.new_empty(new_shape)`) is no
loss of gradient; a container of tensors still is, whatever forward's annotation."""

from __future__ import annotations

import textwrap

import pytest

from gradlint.config import Settings
from gradlint.engine import RuleSet, lint_source


def gl206_lines(source: str) -> list[int]:
    result = lint_source(textwrap.dedent(source), "t.py", RuleSet.from_settings(Settings()))
    assert result.internal_error is None
    return [f.line for f in result.findings if f.code == "GL206"]


# Reduced from mmcv/cnn/bricks/wrappers.py: out_shape holds the batch size and Python ints.
NEW_EMPTY = """
import torch
import torch.nn as nn


class NewEmptyTensorOp(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x: torch.Tensor, new_shape: {annotation}) -> torch.Tensor:
        ctx.shape = x.shape
        return x.new_empty(new_shape)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple:
        shape = ctx.shape
        return NewEmptyTensorOp.apply(grad, shape), None


class Conv2d(nn.Conv2d):

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() == 0:
            out_shape = [x.shape[0], self.out_channels]
            for i, k, p, s, d in zip(x.shape[-2:], self.kernel_size,
                                     self.padding, self.stride, self.dilation):
                o = (i + 2 * p - (d * (k - 1) + 1)) // s + 1
                out_shape.append(o)
            empty = NewEmptyTensorOp.apply(x, out_shape)
            return empty
        return super().forward(x)


def empty_batch(x):
    return NewEmptyTensorOp.apply(x, [x.shape[0], 3])
"""


@pytest.mark.parametrize("annotation", ["tuple", "list", "Sequence[int]", "tuple[int, ...]", "List[int]"])
def test_a_shape_list_for_an_input_annotated_as_a_container_is_not_reported(annotation):
    source = NEW_EMPTY.format(annotation=annotation)
    if annotation[0].isupper():
        source = "from typing import List, Sequence\n" + source
    assert gl206_lines(source) == []


def test_a_shape_list_for_an_unannotated_input_is_not_reported():
    assert gl206_lines(NEW_EMPTY.replace("new_shape: {annotation}", "new_shape")) == []


def test_a_container_annotated_as_holding_tensors_is_reported():
    assert gl206_lines("""
        import torch
        from typing import List

        class Gather(torch.autograd.Function):
            @staticmethod
            def forward(ctx, index, feats: List[torch.Tensor]):
                return index
            @staticmethod
            def backward(ctx, g):
                return None, None

        def run(index, a, b):
            feats = [a.shape[0], b]
            return Gather.apply(index, feats)
    """) == [15]


def test_a_container_annotated_as_a_tuple_whose_items_forward_uses_as_tensors_is_reported():
    assert gl206_lines("""
        import torch

        class Pair(torch.autograd.Function):
            @staticmethod
            def forward(ctx, xs: tuple):
                return xs[0].contiguous() + xs[1].contiguous()
            @staticmethod
            def backward(ctx, g):
                return None

        def run(a, b):
            pair = [a.shape[0], b]
            return Pair.apply(pair)
    """) == [14]


def test_a_tensor_placed_in_a_list_for_an_input_annotated_as_a_tuple_is_reported():
    assert gl206_lines("""
        import torch

        class Op(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, extra: tuple):
                return x.new_empty(extra)
            @staticmethod
            def backward(ctx, g):
                return g, None

        def run(x, w):
            return Op.apply(x, [w, w.t()])
    """) == [13]
