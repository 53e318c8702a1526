"""Run as `python -m mypkg.train --keep`: an argparse module that keeps outputs when asked."""

import argparse

import torch

from mypkg.model import Net


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for _ in range(1000):
        loss = net(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.keep:
            net.seen.append(loss)


if __name__ == "__main__":
    main()
