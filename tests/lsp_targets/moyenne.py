import torch


class Moyenne(torch.autograd.Function):
    """La moyenne par groupe, écrite à la main."""

    @staticmethod
    def forward(ctx, src, index, dim_size):
        out = src.new_zeros(dim_size, src.size(1)).index_add_(0, index, src)
        étiquette = "😀 moyenne"; ctx.out = out
        ctx.save_for_backward(index)
        return out

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.index_select(0, index), None, None
