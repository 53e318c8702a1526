#!/usr/bin/env python3
"""Script mode's overhead and the probe's own memory, measured.

    python bench/probe_script_overhead.py                  # both parts, 3 rounds
    python bench/probe_script_overhead.py --part script --rounds 5 --steps 300
    python bench/probe_script_overhead.py --part rss --rss-steps 5000
    python bench/probe_script_overhead.py --part script --steps 100 --min-tracked 8   # a what-if floor

--part script: one training script (written to a temporary folder) with a small step (an MLP on a
batch of 32) and a large one (a batch of 2048 through a wider MLP), run bare (`python train.py`
would: runpy, as __main__) and under `gradlint probe train.py` at the default stride (run_script,
the function the CLI calls), in the same process, alternating. The script times its own
iterations (what the user sees, the probe's hooks included) and the ratio is the mean measured
step under the probe over the mean bare step, per round, then the median over rounds. Both in the
thread's CPU time (what the probe adds, unmoved by other processes on the cores) and wall clock.
Goal (issue 18): <= 1.5x on both.

--part rss: the probe's own memory over --rss-steps steps of a tiny clean step (StepProbe, every
step tracked, collections as by default): VmRSS at step 100, at the last step and after finish()
(the decision is the probe's too), against the same loop run bare for as many steps. Goal: the
probe's growth from step 100 to after finish() under 5 MB.

Each part ends with a goal line (met / MISSED); the exit status is 1 when a goal was missed.
Prints the load average seen: the machine may be shared, so every figure is a median.
"""

from __future__ import annotations

import argparse
import builtins
import os
import runpy
import statistics
import sys
import tempfile
import textwrap
import time

RATIO_GOAL = 1.5  # script mode's mean step over the bare one, both steps (issue 18)
RSS_GOAL = 5e6  # the probe's own growth over --rss-steps steps, finish() included

SCRIPT = textwrap.dedent('''
    import argparse
    import builtins
    import time

    import torch
    from torch import nn

    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=["small", "large"], default="small")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    torch.manual_seed(0)
    width, batch = (64, 32) if args.size == "small" else (512, 2048)
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.randn(batch, width)
    target = torch.randn(batch, 1)
    times = getattr(builtins, "_bench_step_times", None)


    def main():
        for _ in range(args.steps):
            start, cpu = time.perf_counter(), time.thread_time()
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(data), target)
            loss.backward()
            optimizer.step()
            if times is not None:
                times.append((time.perf_counter() - start, time.thread_time() - cpu))


    if __name__ == "__main__":
        main()
''')


def _bare(path: str, size: str, steps: int) -> list[float]:
    builtins._bench_step_times = times = []
    saved = sys.argv
    sys.argv = [path, "--size", size, "--steps", str(steps)]
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv = saved
    return times


def _probed(path: str, size: str, steps: int, warmup: int):
    from gradlint.runtime_probe.script import run_script

    builtins._bench_step_times = times = []
    # The script runs more iterations than the probe measures: the probe stops it after `steps`.
    ran = run_script(path, ["--size", size, "--steps", str(steps + 50)], steps=steps, warmup=warmup, device="cpu")
    # The iteration that hit the last boundary is stopped inside optimizer.step(): not timed.
    return times, ran.report


def script_part(args) -> bool:
    import torch

    torch.set_num_threads(args.threads)
    folder = tempfile.mkdtemp(prefix="gl-probe-bench-")
    path = os.path.join(folder, "train.py")
    with open(path, "w") as f:
        f.write(SCRIPT)
    print(f"script mode: {args.steps} steps per run, {args.warmup} warm-up, default stride, "
          f"{args.rounds} rounds, {args.threads} thread(s), torch {torch.__version__}")
    print("cpu: this thread's CPU time per step (time.thread_time: what the probe adds, unmoved by other processes "
          "taking the cores); wall: perf_counter")
    print(f"{'step':<6} {'bare cpu':>10} {'probed cpu':>11} {'ratio':>6}  {'per round':<18} {'wall ratio':>10}  stride  verdict")
    worst = 0.0
    for size in args.sizes.split(","):
        _bare(path, size, 20)  # warm caches and the allocator before the first timed run
        rows = {k: [] for k in ("bare", "probed", "ratio", "wall")}
        strides, verdicts = [], set()
        for _ in range(args.rounds):
            bare = _bare(path, size, args.steps)[args.warmup:]
            times, report = _probed(path, size, args.steps, args.warmup)
            measured = times[args.warmup:]
            # Means: the tracked steps' cost is in them (a median would read an untracked step).
            b, p = (statistics.mean(t[1] for t in bare), statistics.mean(t[1] for t in measured))
            rows["bare"].append(b * 1000)
            rows["probed"].append(p * 1000)
            rows["ratio"].append(p / b)
            rows["wall"].append(statistics.mean(t[0] for t in measured) / statistics.mean(t[0] for t in bare))
            strides.append(report.track_every)
            verdicts.add(report.verdict.value)
        med = {k: statistics.median(v) for k, v in rows.items()}
        per_round = ", ".join(f"{r:.2f}" for r in rows["ratio"])
        print(f"{size:<6} {med['bare']:7.3f} ms {med['probed']:8.3f} ms {med['ratio']:5.2f}x  {'(' + per_round + ')':<18} "
              f"{med['wall']:9.2f}x  {','.join(map(str, strides)):<6}  {'/'.join(sorted(verdicts))}")
        worst = max(worst, med["ratio"])
    met = worst <= RATIO_GOAL
    print(f"goal: cpu ratio <= {RATIO_GOAL}x on every step: {'met' if met else 'MISSED'} (worst median {worst:.2f}x)")
    return met


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def rss_part(args) -> bool:
    import gc

    import torch
    from gradlint.runtime_probe import StepProbe

    torch.set_num_threads(args.threads)
    w = torch.randn(8, 8, requires_grad=True)
    x = torch.randn(4, 8)

    def step():
        (x @ w).pow(2).mean().backward()
        w.grad = None

    for _ in range(200):
        step()
    gc.collect()
    start = _rss()
    for _ in range(args.rss_steps):
        step()
    gc.collect()
    bare = _rss() - start
    probe = StepProbe(steps=args.rss_steps, warmup=10, device="cpu", name="tiny", track_every=1)
    at_warmup = None
    while True:
        probe.step_started()
        step()
        done = probe.step_finished()
        if probe.steps_done == 100:
            at_warmup = _rss()
        if done:
            break
    end = _rss()
    report = probe.finish()
    after_finish = _rss()
    print(f"probe RSS over {args.rss_steps} steps of a tiny clean step (every step tracked, gc every "
          f"{report.gc_every}): {report.verdict.value}")
    print(f"  bare loop      {bare / 1e6:+8.2f} MB over {args.rss_steps} steps")
    print(f"  under StepProbe {(end - at_warmup) / 1e6:+7.2f} MB from step 100 to step {args.rss_steps}"
          f"  ({(end - at_warmup) / max(1, args.rss_steps - 100):.0f} B/step: the per-step series); after finish() "
          f"{(after_finish - at_warmup) / 1e6:+.2f} MB")
    growth = after_finish - at_warmup
    met = growth < RSS_GOAL
    print(f"goal: the probe's growth through finish() under {RSS_GOAL / 1e6:.0f} MB: {'met' if met else 'MISSED'} "
          f"({growth / 1e6:+.2f} MB)")
    return met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["script", "rss", "all"], default="all")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rss-steps", type=int, default=5000)
    parser.add_argument("--sizes", default="small,large", help="which steps: small, large or both (comma-separated)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--min-tracked", type=int, help="what-if: stride.MIN_TRACKED for the probed runs "
                        "(bench/probe_irregular_recall.py measures what it costs in leaks found)")
    args = parser.parse_args()
    if args.min_tracked is not None:
        from gradlint.runtime_probe import stride

        print(f"MIN_TRACKED {stride.MIN_TRACKED} -> {args.min_tracked} (what-if)")
        stride.MIN_TRACKED = args.min_tracked
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores at start")
    started = time.perf_counter()
    met = True
    if args.part in ("script", "all"):
        met = script_part(args) and met
    if args.part == "rss":
        met = rss_part(args) and met
    elif args.part == "all":
        # In a process of its own: the script part's large step leaves ~100 MB for the allocator
        # to give back while the RSS part runs, which read as the probe's growth going negative.
        import subprocess

        command = [sys.executable, os.path.abspath(__file__), "--part", "rss", "--rss-steps", str(args.rss_steps),
                   "--threads", str(args.threads)]
        out = subprocess.run(command, capture_output=True, text=True, check=False)
        print("\n".join(line for line in out.stdout.splitlines() if not line.startswith("load average")))
        met = out.returncode == 0 and met
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end ({time.perf_counter() - started:.0f} s)")
    if not met:
        sys.exit(1)


if __name__ == "__main__":
    main()
