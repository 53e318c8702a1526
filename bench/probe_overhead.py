#!/usr/bin/env python3
"""Probe overhead: the same training step bare and under `gradlint probe`, in the same run.

    python bench/probe_overhead.py                      # the bundled clean k-NN scenario
    python bench/probe_overhead.py --steps 200 --rounds 5 --scenario module_activations
    python bench/probe_overhead.py --points 4096         # a bigger cloud: more work per op

Rounds alternate a bare block of --steps steps and a probed block (probe(step, steps)), so both
see the same machine load. Two ratios, medians over the rounds:
  step ratio  median step time under the probe / median bare step time (what measuring costs
              each step: the dispatch mode's bookkeeping per aten op);
  run ratio   the probe() call's whole wall time / (steps x median bare step), which also pays
              for the gc.collect() every K steps, the graph count and the holder attribution.
Goal from issue 4: under 2x while measuring. --threads sets torch's intra-op threads (default 1:
on a shared 2-core machine the OpenMP spin-wait otherwise dominates small steps).

The probe's cost is per aten op, not per byte, so the ratio depends on how much work each op does.
The script also times the step under an empty TorchDispatchMode (the floor any dispatch-mode
tracker pays) and prints the per-op cost of both, so a ratio can be read against that floor.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="clean")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--gc-every", type=int, default=10)
    parser.add_argument("--points", type=int, help="points in the scenario's cloud (default: the scenario's 128)")
    args = parser.parse_args()

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from gradlint.runtime_probe import probe
    from gradlint.runtime_probe.scenarios import common

    class Empty(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Empty.ops += 1
            return func(*args, **(kwargs or {}))

    torch.set_num_threads(args.threads)
    if args.points:
        common.POINTS = args.points
    module = importlib.import_module(f"gradlint.runtime_probe.scenarios.{args.scenario}")
    step = module.make_step("cpu")
    for _ in range(10):
        step()  # build the extension, fill caches, create optimizer state
    with Empty():
        step()
    ops_per_step, Empty.ops = Empty.ops, 0
    bare_steps, probe_steps, run_ratios, empty_steps = [], [], [], []
    for _ in range(args.rounds):
        with Empty():
            times = []
            for _ in range(args.steps):
                start = time.perf_counter()
                step()
                times.append(time.perf_counter() - start)
        empty_steps.append(statistics.median(times))
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        bare = statistics.median(times)
        start = time.perf_counter()
        report = probe(step, args.steps, gc_every=args.gc_every, device="cpu")
        wall = time.perf_counter() - start
        bare_steps.append(bare)
        probe_steps.append(report.median_step_ms / 1000)
        run_ratios.append(wall / (args.steps * bare))
    bare, probed = statistics.median(bare_steps), statistics.median(probe_steps)
    empty = statistics.median(empty_steps)
    print(f"scenario {args.scenario}: {common.POINTS} points, {args.steps} steps x {args.rounds} rounds, "
          f"{args.threads} thread(s), gc every {args.gc_every}, torch {torch.__version__}")
    print(f"bare step   median {bare * 1000:8.3f} ms   ({ops_per_step} aten ops per step)")
    print(f"empty mode  median {empty * 1000:8.3f} ms   {empty / bare:5.2f}x  ({(empty - bare) / ops_per_step * 1e6:.1f} us/op: "
          "the floor of any dispatch-mode tracker)")
    print(f"probed step median {probed * 1000:8.3f} ms   ({(probed - bare) / ops_per_step * 1e6:.1f} us/op)")
    print(f"step ratio  {probed / bare:6.2f}x   (per-round: {', '.join(f'{p / b:.2f}' for p, b in zip(probe_steps, bare_steps))})")
    print(f"run ratio   {statistics.median(run_ratios):6.2f}x   (whole probe() call incl. collections and attribution)")


if __name__ == "__main__":
    main()
