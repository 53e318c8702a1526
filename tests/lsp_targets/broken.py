import torch


class Broken(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x:
        return x * 2
