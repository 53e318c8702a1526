#!/usr/bin/env python3
"""Probe overhead: the same training step bare and under `gradlint probe`, in the same run.

    python bench/probe_overhead.py                      # the bundled clean k-NN scenario
    python bench/probe_overhead.py --steps 200 --rounds 5 --scenario module_activations
    python bench/probe_overhead.py --points 4096         # a bigger cloud: more work per op

Each round runs a bare block of --steps steps, then probe(step, steps) twice: with the default
stride (track_every=None: every step unless the tracker would more than double the step, then one
in K, chosen from the warm-up's timing) and with every step tracked. Medians over the rounds of:
  step ratio  mean time of a measured step under the probe / mean bare step time (what measuring
              costs per step, tracked and untracked steps together);
  run ratio   the probe() call's whole wall time / (steps x mean bare step), which also pays for
              the warm-up, the gc.collect() every K steps, the graph count and the attribution.
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
    from gradlint.runtime_probe.tracker import _skip_dynamo

    class Empty(TorchDispatchMode):
        ops = 0

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # The same one-time Dynamo skip as the tracker, so the floor is like for like.
            return not _skip_dynamo(cls.__dict__["__torch_dispatch__"].__code__)

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
    rows: dict[str, list[float]] = {k: [] for k in ("bare", "bare_median", "empty", "auto", "every", "tracked_median",
                                                   "auto_run", "stride", "fixed", "bare_cpu", "auto_cpu", "every_cpu")}
    cpu: list[float] = []

    def cpu_timed():
        # The driving thread's CPU time inside the step: what the tracker adds to it, unmoved by
        # other processes taking the cores (on a loaded machine the wall clock of a 1 ms step is
        # mostly waiting for one: per-round wall ratios of 0.2x and 45x were seen in one run).
        start = time.thread_time()
        step()
        cpu.append(time.thread_time() - start)
    for _ in range(args.rounds):
        with Empty():
            rows["empty"].append(statistics.median(_time(step, args.steps)))
        cpu.clear()
        bare = _time(cpu_timed, args.steps)
        rows["bare_cpu"].append(statistics.mean(cpu))
        rows["bare"].append(statistics.mean(bare))
        rows["bare_median"].append(statistics.median(bare))
        for key, track_every in (("auto", None), ("every", 1)):
            start = time.perf_counter()
            cpu.clear()
            report = probe(cpu_timed, args.steps, gc_every=args.gc_every, device="cpu", track_every=track_every)
            rows[f"{key}_cpu"].append(statistics.mean(cpu[report.run.warmup:]))
            wall = time.perf_counter() - start
            run = report.run
            # The measured steps only: warm-up is tracked throughout and times the calibration.
            measured = run.step_seconds[run.warmup:]
            rows[key].append(statistics.mean(measured))
            if key == "auto":
                rows["auto_run"].append(wall / (args.steps * statistics.mean(bare)))
                rows["stride"].append(report.track_every)
                rows["fixed"].append(wall - sum(run.step_seconds))
            else:
                rows["tracked_median"].append(statistics.median(measured))
    med = {k: statistics.median(v) for k, v in rows.items()}
    bare = med["bare"]
    print(f"scenario {args.scenario}: {common.POINTS} points, {args.steps} steps x {args.rounds} rounds, "
          f"{args.threads} thread(s), gc every {args.gc_every}, torch {torch.__version__}")
    print(f"bare step        mean {bare * 1000:8.3f} ms   ({ops_per_step} aten ops per step)")
    print(f"empty mode     median {med['empty'] * 1000:8.3f} ms   {med['empty'] / med['bare_median']:5.2f}x  "
          f"({(med['empty'] - med['bare_median']) / ops_per_step * 1e6:.1f} us/op: the floor of any dispatch-mode tracker)")
    print(f"tracked step   median {med['tracked_median'] * 1000:8.3f} ms   {med['tracked_median'] / med['bare_median']:5.2f}x  "
          f"({(med['tracked_median'] - med['bare_median']) / ops_per_step * 1e6:.1f} us/op)")
    print(f"every step tracked    {med['every'] * 1000:8.3f} ms   {med['every'] / bare:5.2f}x   "
          f"(per-round: {_ratios(rows['every'], rows['bare'])})")
    strides = ", ".join(str(int(k)) for k in rows["stride"])
    print(f"auto (1 step in {strides}) {med['auto'] * 1000:8.3f} ms   {med['auto'] / bare:5.2f}x   "
          f"(per-round: {_ratios(rows['auto'], rows['bare'])})  <- the default")
    print(f"cpu time per step     bare {med['bare_cpu'] * 1000:.3f} ms; every step tracked {med['every_cpu'] / med['bare_cpu']:.2f}x "
          f"(per-round: {_ratios(rows['every_cpu'], rows['bare_cpu'])}); auto {med['auto_cpu'] / med['bare_cpu']:.2f}x "
          f"(per-round: {_ratios(rows['auto_cpu'], rows['bare_cpu'])})  <- the thread's CPU time, steady under load")
    print(f"run ratio (auto)      {med['auto_run']:6.2f}x   (whole probe() call incl. warm-up, collections and attribution)")
    print(f"outside the steps     {med['fixed'] * 1000:8.1f} ms a probe() call (the gc.collect() every K steps, one of them "
          "over every Python object, the graph counts, the attribution): a fixed cost, not per step")


def _time(step, n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def _ratios(probed: list[float], bare: list[float]) -> str:
    return ", ".join(f"{p / b:.2f}" for p, b in zip(probed, bare))

if __name__ == "__main__":
    main()
