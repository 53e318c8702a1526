import torch
from torch import nn
from torch_geometric.nn import MessagePassing


class GatherRows(torch.autograd.Function):
    """x[edge_index[0]] with a hand-written backward (memory friendlier than autograd's)."""

    @staticmethod
    def forward(ctx, x, edge_index):
        src = edge_index[0].contiguous()
        ctx.edge_index = edge_index
        ctx.num_nodes = x.size(0)
        return x.index_select(0, src)

    @staticmethod
    def backward(ctx, grad_msg):
        src = ctx.edge_index[0]
        grad_x = grad_msg.new_zeros(ctx.num_nodes, grad_msg.size(1))
        grad_x.index_add_(0, src, grad_msg)
        return grad_x, None


class EdgeGatedConv(MessagePassing):
    def __init__(self, in_dim, out_dim):
        super().__init__(aggr="add")
        self.lin = nn.Linear(in_dim, out_dim)
        self.gate = nn.Linear(2 * in_dim, 1)

    def forward(self, x, edge_index):
        h = self.lin(x)
        return self.propagate(edge_index, x=x, h=h)

    def message(self, x_i, x_j, h_j):
        g = torch.sigmoid(self.gate(torch.cat([x_i, x_j], dim=-1)))
        return g * h_j

    def gather_messages(self, h, edge_index):
        return GatherRows.apply(h, edge_index)


class GNN(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.convs = nn.ModuleList(EdgeGatedConv(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x, edge_index):
        for conv in self.convs[:-1]:
            x = torch.relu(conv(x, edge_index))
        return self.convs[-1](x, edge_index)


def train(model, loader, epochs=10):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(epochs):
        for data in loader:
            opt.zero_grad()
            out = model(data.x, data.edge_index)
            loss = torch.nn.functional.cross_entropy(out[data.train_mask], data.y[data.train_mask])
            loss.backward()
            opt.step()
