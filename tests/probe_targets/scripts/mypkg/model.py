import torch


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 1)
        self.seen = []  # losses kept for a plot, with their graphs

    def forward(self, x):
        return self.fc(x)
