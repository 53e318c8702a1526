"""Benchmark gradlint.cuda_ext.scatter_add against torch's index_add_.

    python bench/scatter.py                 # CPU, 2 threads: the issue's targets
    python bench/scatter.py --device cuda   # also checks correctness on the GPU, prints GB/s

Cases: N rows x D float32 into T targets (default 1e6 x 64 into 1e5), the same with D = 1, and a
skewed index (target = floor(T * u**4), u uniform: the hottest target gets ~(1/T)**0.25 of the
rows, 5.6% at T = 1e5). Variants run round-robin, one rep of each per round, so a noisy
neighbour slows them alike, in a new (seeded) order each round; each timed rep runs right after an
untimed one of the same variant. Times are medians; the target ratios are medians of per-round
ratios, with their quartiles in brackets, all from the same run.

Targets (issue 3). CPU: deterministic with int64 no slower than index_add_ int64, and int32 no
slower than int64. CUDA: deterministic within 1.3x of atomic, atomic at >= 60% of the memory
bandwidth, measured here as a device-to-device copy.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable

import torch
from gradlint.cuda_ext import scatter_add

from gradlint import cuda_ext


def make_cases(rows: int, dim: int, targets: int, device: str, gen: torch.Generator) -> dict[str, tuple]:
    src = torch.randn(rows, dim, generator=gen).to(device)
    uniform = torch.randint(0, targets, (rows,), generator=gen).to(device)
    skewed = (torch.rand(rows, generator=gen) ** 4 * targets).long().clamp_(max=targets - 1).to(device)
    return {
        f"uniform D={dim}": (src, uniform),
        "uniform D=1": (src[:, 0].contiguous(), uniform),
        f"skewed D={dim}": (src, skewed),
    }


def index_add(src: torch.Tensor, index: torch.Tensor, targets: int) -> torch.Tensor:
    return torch.zeros((targets, *src.shape[1:]), dtype=src.dtype, device=src.device).index_add_(0, index, src)


def variants(src, index, targets, device) -> dict[str, Callable[[], torch.Tensor]]:
    i64, i32 = index, index.int()
    found = {
        "index_add_ int64": lambda: index_add(src, i64, targets),
        "deterministic int64": lambda: scatter_add(src, i64, targets, deterministic=True),
        "deterministic int32": lambda: scatter_add(src, i32, targets, deterministic=True),
        "atomic int64": lambda: scatter_add(src, i64, targets, deterministic=False),
    }
    if device == "cuda":
        found["atomic int32"] = lambda: scatter_add(src, i32, targets, deterministic=False)
    return found


def timed(fn: Callable[[], torch.Tensor], device: str) -> float:
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def sample(fns: dict[str, Callable[[], torch.Tensor]], reps: int, device: str) -> dict[str, list[float]]:
    """Per variant, one time per round (ms), rounds in the same order for every variant."""
    for fn in fns.values():  # warm-up: first touch of pages, allocator, sort scratch
        fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    # A variant's time depended on which one ran before it: right after index_add_, whose frees
    # let glibc trim the heap, a 25 MB output page-faulted afresh (6,218 faults, +10 ms), and the
    # next variant reused those pages (0 faults); in a fixed order the same variant paid every
    # round. An untimed run of the same variant first leaves each timed one the heap its own
    # previous call left, and the shuffle keeps what remains of position effects from always
    # landing on the same variant.
    order = list(fns)
    shuffle = random.Random(0).shuffle
    for _ in range(reps):
        shuffle(order)
        for name in order:
            fns[name]()
            samples[name].append(timed(fns[name], device))
    return samples


def paired(samples: dict[str, list[float]], num: str, den: str) -> tuple[float, float, float]:
    """Median and quartiles of num/den taken round by round: both ran in the same round, so a slow
    spell of the machine moves both. The quartiles say how far apart two runs of the bench can land."""
    ratios = sorted(a / b for a, b in zip(samples[num], samples[den]))
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    return statistics.median(ratios), quartiles[0], quartiles[2]


def check_correct(src, index, targets, fns) -> list[str]:
    """Problems found, compared with index_add_ in float64; empty when all agree."""
    expected = index_add(src.double(), index, targets)
    problems = []
    for name, fn in fns.items():
        out = fn()
        if not torch.allclose(out.double(), expected, rtol=1e-4, atol=1e-3):
            problems.append(f"{name}: max abs error {(out.double() - expected).abs().max().item():.3g}")
        if name.startswith("deterministic") and not torch.equal(fn(), out):
            problems.append(f"{name}: two runs differ bitwise")
    return problems


def bytes_moved(name: str, src: torch.Tensor, index: torch.Tensor, targets: int) -> int:
    """The traffic an algorithm cannot avoid, the denominator of GB/s.

    atomic: read src and index, zero the output, write it back once.
    deterministic: read the index, radix-sort (key, int32 position) pairs with 8-bit digits
    (read + write per pass), read the sorted positions and gather src, write the output.
    index_add_: as atomic.
    """
    value = src.element_size() * src.numel()
    index_bytes = 4 if name.endswith("int32") else 8
    n = index.numel()
    out = src.element_size() * targets * (src.shape[1] if src.dim() == 2 else 1)
    if name.startswith("deterministic"):
        passes = -(-max(1, (targets - 1).bit_length()) // 8)
        return n * index_bytes + passes * 2 * n * (index_bytes + 4) + n * 4 + value + out
    return value + n * index_bytes + 2 * out


def copy_bandwidth(device: str) -> float:
    """GB/s of a 1 GiB device-to-device copy (read + write): the bandwidth one can reach."""
    a = torch.empty(1 << 28, device=device)
    b = torch.empty_like(a)
    ms = statistics.median(timed(lambda: b.copy_(a), device) for _ in range(10))
    return 2 * a.numel() * 4 / (ms * 1e6)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--threads", type=int, default=2, help="CPU intra-op threads (default 2)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--targets", type=float, default=1e5)
    args = parser.parse_args(argv)
    rows, targets, device = int(args.rows), int(args.targets), args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    backend = cuda_ext.load()
    print(f"torch {torch.__version__}, backend {backend.name}"
          + (f" ({backend.fallback_reason})" if backend.fallback_reason else "")
          + f", device {device}, {torch.get_num_threads()} threads, median of {args.reps}")
    print(f"N = {rows:,} rows into T = {targets:,} targets, float32")

    bandwidth = copy_bandwidth(device) if device == "cuda" else None
    if bandwidth:
        print(f"device-to-device copy: {bandwidth:,.0f} GB/s")
    header = f"{'case':<16} {'variant':<22} {'median ms':>10} {'vs index_add_ int64':>20}"
    if bandwidth:
        header += f" {'GB/s':>8} {'% copy':>7}"
    print(header)
    failures = []
    summary = {}
    for case, (src, index) in make_cases(rows, args.dim, targets, device, torch.Generator().manual_seed(0)).items():
        fns = variants(src, index, targets, device)
        failures += [f"{case}: {p}" for p in check_correct(src, index, targets, fns)]
        samples = sample(fns, args.reps, device)
        times = {name: statistics.median(values) for name, values in samples.items()}
        base = times["index_add_ int64"]
        for name, ms in times.items():
            line = f"{case:<16} {name:<22} {ms:>10.3f} {ms / base:>20.2f}"
            if bandwidth:
                gbs = bytes_moved(name, src, index, targets) / (ms * 1e6)
                line += f" {gbs:>8.0f} {100 * gbs / bandwidth:>6.0f}%"
            print(line)
        atomic_share = (
            bytes_moved("atomic int64", src, index, targets) / (times["atomic int64"] * 1e6) / bandwidth
            if bandwidth else None
        )
        summary[case] = (times, atomic_share, samples)

    print()
    for case, (t, atomic_share, samples) in summary.items():
        if device == "cpu":
            det, det_lo, det_hi = paired(samples, "deterministic int64", "index_add_ int64")
            i32, i32_lo, i32_hi = paired(samples, "deterministic int32", "deterministic int64")
            print(f"{case}: deterministic int64 / index_add_ int64 = {det:.2f} [{det_lo:.2f}-{det_hi:.2f}] "
                  f"(target <= 1), int32 / int64 = {i32:.2f} [{i32_lo:.2f}-{i32_hi:.2f}] (target <= 1)")
        else:
            print(f"{case}: deterministic / atomic (int64) = "
                  f"{t['deterministic int64'] / t['atomic int64']:.2f} (target <= 1.3), "
                  f"atomic int64 at {100 * atomic_share:.0f}% of copy bandwidth (target >= 60%)")
    print("correctness:", "all variants agree with index_add_" if not failures else "; ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
