import torch


class ScatterMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index, dim_size):
        out = src.new_zeros(dim_size, src.size(1)).index_add_(0, index, src)
        ctx.out = out
        ctx.save_for_backward(index)
        return out

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.index_select(0, index)
