#!/usr/bin/env python3
"""Leaks that land on some steps only: how many the default stride finds, and what it costs.

    python bench/probe_irregular_recall.py                         # 100 and 200 steps, floor as shipped
    python bench/probe_irregular_recall.py --steps 100 --min-tracked 16,8

The stride (runtime_probe/stride.py) tracks one step in K when the tracker would dominate the
step, and K is capped so that at least MIN_TRACKED steps after warm-up are tracked. A leak that
repeats every step is seen on any tracked step; one that lands every p-th step is seen only on the
tracked steps it lands on, so fewer tracked steps find fewer of those. This bench measures that
trade: --leaks leaks, each keeping one 1 KiB tensor in a list on the steps where
call % period == phase (period 2-16 and phase drawn with random.Random(--seed)), on the small step
of bench/probe_script_overhead.py (an MLP on a batch of 32, ~0.7 ms bare), each run through
probe() at the default stride (track_every=None, the CLI's setting); found = a leak verdict. The
same step without the leak runs --clean times: any leak verdict there is a false alarm.

--min-tracked sets stride.MIN_TRACKED for the run (a what-if: the shipped value is printed first).
Attribution is off (it names holders after the verdict and does not change it). K depends on the
warm-up's timing, so it is printed per row (median, min-max); the machine may be shared.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time


def _leaks(count: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        period = rng.randint(2, 16)
        out.append((period, rng.randrange(period)))
    return out


def _make_step(torch, period: int | None, phase: int):
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data, target = torch.randn(32, 64), torch.randn(32, 1)
    kept, calls = [], [0]

    def step():
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(data), target)
        loss.backward()
        optimizer.step()
        if period is not None and calls[0] % period == phase:
            kept.append(torch.randn(256))  # 1 KiB, kept for good
        calls[0] += 1

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default="100,200", help="comma-separated step counts")
    parser.add_argument("--min-tracked", default="", help="comma-separated MIN_TRACKED values to try (default: shipped)")
    parser.add_argument("--leaks", type=int, default=50)
    parser.add_argument("--clean", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch
    from gradlint.runtime_probe import probe, stride

    torch.set_num_threads(args.threads)
    shipped = stride.MIN_TRACKED
    floors = [int(v) for v in args.min_tracked.split(",") if v] or [shipped]
    leaks = _leaks(args.leaks, args.seed)
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"{args.leaks} leaks every 2-16 steps (seed {args.seed}, 1 KiB kept per landing), {args.clean} clean runs, "
          f"default stride, torch {torch.__version__}, MIN_TRACKED shipped {shipped}, load {' '.join(load)}")
    print(f"{'steps':>5} {'floor':>5} {'K median (min-max)':>19} {'found':>7} {'missed periods':<28} {'clean: leak':>11} {'s':>6}")
    for steps in [int(v) for v in args.steps.split(",")]:
        for floor in floors:
            stride.MIN_TRACKED = floor
            start = time.perf_counter()
            strides, found, missed = [], 0, []
            for period, phase in leaks:
                report = probe(_make_step(torch, period, phase), steps=steps, attribute=False, device="cpu")
                strides.append(report.track_every)
                if report.verdict.is_leak:
                    found += 1
                else:
                    missed.append(period)
            false_alarms = 0
            for _ in range(args.clean):
                report = probe(_make_step(torch, None, 0), steps=steps, attribute=False, device="cpu")
                strides.append(report.track_every)
                false_alarms += report.verdict.is_leak
            ks = f"{statistics.median(strides):g} ({min(strides)}-{max(strides)})"
            missed_text = ",".join(map(str, sorted(missed))) or "-"
            print(f"{steps:>5} {floor:>5} {ks:>19} {found:>3}/{len(leaks):<3} {missed_text[:28]:<28} "
                  f"{false_alarms:>5}/{args.clean:<5} {time.perf_counter() - start:6.1f}")
    stride.MIN_TRACKED = shipped


if __name__ == "__main__":
    main()
