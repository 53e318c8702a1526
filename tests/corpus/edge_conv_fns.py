"""Edge convolution Functions (DGCNN) with a fused per-edge MLP, plus their test helpers."""
import torch
import torch.nn as nn


class EdgeMax(torch.autograd.Function):
    """out[i] = max over edges (j -> i) of x[j] - x[i]."""

    @staticmethod
    def forward(ctx, x, edge_index):
        src, dst = edge_index
        msg = x[src] - x[dst]
        out = x.new_full(x.shape, float("-inf"))
        out.scatter_reduce_(0, dst.unsqueeze(1).expand_as(msg), msg, reduce="amax", include_self=True)
        ctx.save_for_backward(edge_index)
        for _ in range(2 if x.dim() > 2 else 1):
            ctx.save_for_backward(edge_index, msg == out[dst])
        return out

    @staticmethod
    def backward(ctx, grad_out):
        edge_index, hit = ctx.saved_tensors
        src, dst = edge_index
        g = grad_out[dst] * hit
        return torch.zeros_like(grad_out).index_add_(0, src, g).index_add_(0, dst, -g), None


class EdgeConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, edge_index, weight):
        src, dst = edge_index
        feat = torch.cat([x[dst], x[src] - x[dst]], dim=1)
        out = torch.zeros(x.size(0), weight.size(1), device=x.device, dtype=x.dtype)
        out.index_add_(0, dst, feat @ weight)
        if ctx.needs_input_grad[2]:
            ctx.save_for_backward(x, edge_index)
            ctx.save_for_backward(x, edge_index, weight)
        else:
            ctx.save_for_backward(x, edge_index, weight)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, edge_index, weight = ctx.saved_tensors
        src, dst = edge_index
        g = grad_out[dst]
        feat = torch.cat([x[dst], x[src] - x[dst]], dim=1)
        g_feat = g @ weight.t()
        c = x.size(1)
        grad_x = torch.zeros_like(x).index_add_(0, dst, g_feat[:, :c] - g_feat[:, c:]).index_add_(0, src, g_feat[:, c:])
        return grad_x, None, feat.t() @ g


class FusedEdgeMLP(torch.autograd.Function):
    @staticmethod
    def forward(x, edge_index, *weights):
        h = EdgeMax.apply(x, edge_index)
        for w in weights:
            h = torch.relu(h @ w)
        return h

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, edge_index, *weights = inputs
        ctx.save_for_backward(x, edge_index)
        ctx.save_for_backward(x, edge_index, *weights)

    @staticmethod
    def backward(ctx, grad_out):
        return (None, None) + (None,) * (len(ctx.saved_tensors) - 2)


class DGCNNBlock(nn.Module):
    def __init__(self, dims, export_mode=False):
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(dims[:-1], dims[1:]))
        self.export_mode = export_mode

    def forward(self, x, edge_index):
        weights = [lin.weight.t() for lin in self.lins]
        if self.export_mode:
            return FusedEdgeMLP.forward(x, edge_index, *weights)
        if len(weights) == 1:
            return FusedEdgeMLP.apply(x, edge_index, weights)
        return FusedEdgeMLP.apply(x, edge_index, *weights)


class DGCNNBlockV2(DGCNNBlock):
    def forward(self, x, edge_index):
        return super().forward(x, edge_index) + x


def export_edge_max(x, edge_index):
    with torch.no_grad():
        return EdgeMax.forward(None, x, edge_index)


def check_edge_conv(x, edge_index, weight):
    x = x.double().requires_grad_(True)
    weight = weight.double().requires_grad_(True)
    assert torch.autograd.gradcheck(EdgeConv.apply, (x, edge_index, weight))
    ref = EdgeConv.forward(None, x, edge_index, weight)
    out = EdgeConv.apply(x, edge_index, weight)
    torch.testing.assert_close(out, ref)
    rel = EdgeMax.apply((x, x.abs()), edge_index)
    mlp = FusedEdgeMLP.apply(x, edge_index, [weight, weight.t()])
    packed = {"x": x, "edge_index": edge_index}
    return rel, mlp, EdgeConv.apply(packed, weight, None)
