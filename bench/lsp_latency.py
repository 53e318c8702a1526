"""Latency of `gradlint server`: from a didChange notification to the diagnostics for that version.

Generates a 1,000-line training script (model blocks, schedules, a custom autograd Function that
keeps its output on ctx, a training loop that sums the loss into a total), starts the server as
an editor would (`python -m gradlint.server` over stdio, driven by pygls' LanguageClient), opens
it, sends warm-up changes, then N changes one at a time, each waiting for the diagnostics of its
version. Every change edits one number in the middle of the file, so every lint is a real one
(different text) with the same findings. Prints the median and p90, and the time the same lint
takes in-process, which splits the latency into the lint itself and the server's share.

    python bench/lsp_latency.py [--changes 50] [--warmup 10] [--profile]

Target (issue 15): median under 50 ms after warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

LINES = 1000

HEADER = '''"""Training script: a transformer-ish model, a custom scatter op, and the loop."""
import math

import torch
from torch import nn
from torch.utils.data import DataLoader


class ScatterMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index, dim_size):
        out = src.new_zeros(dim_size, src.size(1)).index_add_(0, index, src)
        ctx.out = out
        ctx.save_for_backward(index)
        return out

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.index_select(0, index), None, None

'''

BLOCK = '''
class Block{i}(nn.Module):
    def __init__(self, dim, hidden={hidden}):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, dim)

    def forward(self, x):
        h = self.norm(x)
        h = torch.relu(self.proj(h))
        return x + self.out(h)


def schedule_{i}(step, warmup={warmup}):
    if step < warmup:
        return step / warmup
    return max(0.0, 0.5 * (1 + math.cos(math.pi * (step - warmup) / 10000)))

'''

TRAIN = '''
def train(model, loader: DataLoader, epochs=3, lr=1e-3):
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    criterion = nn.CrossEntropyLoss()
    total_loss = 0
    for epoch in range(epochs):
        for step, (inputs, targets) in enumerate(loader):
            optimizer.zero_grad()
            logits = model(inputs)
            loss = criterion(logits, targets)
            loss.backward()
            optimizer.step()
            total_loss += loss
            if step % 100 == 0:
                print(epoch, step, loss.item())
    return total_loss
'''


def generate(lines: int = LINES) -> str:
    """A training script of exactly `lines` lines."""
    parts = [HEADER]
    count = HEADER.count("\n") + TRAIN.count("\n")
    i = 0
    while count + BLOCK.count("\n") <= lines:
        block = BLOCK.format(i=i, hidden=256 + 32 * i, warmup=100 + 10 * i)
        parts.append(block)
        count += block.count("\n")
        i += 1
    parts.append(TRAIN)
    parts.append("".join(f"STEP_{n} = {n}\n" for n in range(lines - count)))
    text = "".join(parts)
    assert text.count("\n") == lines, text.count("\n")
    return text


def variant(text: str, n: int) -> str:
    """The text with one number in the middle of the file changed (warmup of the middle block)."""
    lines = text.split("\n")
    middle = next(i for i in range(len(lines) // 2, len(lines)) if "warmup=" in lines[i])
    head, _, _ = lines[middle].rpartition("warmup=")
    lines[middle] = f"{head}warmup={1000 + n}):"
    return "\n".join(lines)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def drive(path: Path, text: str, changes: int, warmup: int) -> tuple[list[float], list[str]]:
    client = LanguageClient("lsp-latency-bench", "1")
    arrived: dict[int, tuple[float, list]] = {}
    wanted: dict[int, asyncio.Future] = {}

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def published(params: types.PublishDiagnosticsParams):
        now = time.perf_counter()
        arrived[params.version] = (now, params.diagnostics)
        future = wanted.pop(params.version, None)
        if future is not None and not future.done():
            future.set_result(now)

    await client.start_io(sys.executable, "-m", "gradlint.server")
    await client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(), root_uri=path.parent.as_uri()))
    client.initialized(types.InitializedParams())
    uri = path.as_uri()
    loop = asyncio.get_running_loop()

    async def send(version: int, change: str | None) -> float:
        wanted[version] = loop.create_future()
        start = time.perf_counter()
        if change is None:
            client.text_document_did_open(types.DidOpenTextDocumentParams(
                types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))
        else:
            client.text_document_did_change(types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=change)]))
        end = await asyncio.wait_for(wanted[version], 60)
        return end - start

    first = await send(1, None)
    print(f"open (first lint, cold): {first * 1000:.1f} ms")
    latencies = []
    for n in range(warmup + changes):
        latency = await send(n + 2, variant(text, n))
        if n >= warmup:
            latencies.append(latency)
    codes = sorted(str(d.code) for d in arrived[warmup + changes + 1][1])
    await client.shutdown_async(None)
    client.exit(None)
    await client._server.wait()
    return latencies, codes


def in_process(path: Path, text: str, runs: int) -> tuple[list[float], list[float]]:
    """The same lint without the server: `lint_document`, the function the server runs. Wall
    and CPU time: on a shared machine the CPU time is what the lint would take on an idle one."""
    from gradlint import parse
    from gradlint.server import Projects, lint_document

    parse.keep(parse.EDITOR_KEPT_TEXT)  # as the server does
    projects = Projects(path.parent)
    wall, cpu = [], []
    for n in range(runs + 3):
        changed = variant(text, n)
        start, start_cpu = time.perf_counter(), time.process_time()
        lint_document(changed, path, projects)
        if n >= 3:
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
    return wall, cpu


def phases(text: str, runs: int = 5) -> None:
    """Where the lint's time goes: CPU time of its parts, median of `runs`."""
    import ast

    import libcst as cst

    from gradlint import deep, parse
    from gradlint.engine import lint_source
    from gradlint.server import Projects

    def cpu(function) -> float:
        """Each run on another change of the text, as in the editor."""
        times = []
        for n in range(runs):
            changed = variant(text, 100 + n)
            start = time.process_time()
            function(changed)
            times.append(time.process_time() - start)
        return statistics.median(times) * 1000

    def kept_parse(changed: str) -> None:
        tree = compile(changed, "train.py", "exec", ast.PyCF_ONLY_AST)
        deep.call(lambda: parse.parse_module(changed, tree), len(changed))

    parse.keep(parse.EDITOR_KEPT_TEXT)
    ruleset = Projects(Path.cwd()).for_path(None).ruleset
    print(f"CPU time, median of {runs}: CPython ast parse {cpu(lambda t: compile(t, 'train.py', 'exec', ast.PyCF_ONLY_AST)):.1f} ms, "
          f"libcst parse of the whole file {cpu(lambda t: deep.call(lambda: cst.parse_module(t), len(t))):.1f} ms, "
          f"of the changed statement (others kept, with the CPython parse) {cpu(kept_parse):.1f} ms, "
          f"whole lint {cpu(lambda t: lint_source(t, 'train.py', ruleset)):.1f} ms")


def profile(text: str) -> None:
    """cProfile of 5 lints. The lint runs on gradlint's deep-stack thread, which cProfile does not
    follow: here it runs inline (a 1,000-line file fits the main thread's stack)."""
    import cProfile
    import pstats

    from gradlint import deep, parse
    from gradlint.engine import lint_source
    from gradlint.server import Projects

    parse.keep(parse.EDITOR_KEPT_TEXT)  # as the server does
    ruleset = Projects(Path.cwd()).for_path(None).ruleset
    deep.call = lambda function, source_bytes=0: function()
    lint_source(text, "train.py", ruleset)
    profiler = cProfile.Profile()
    profiler.enable()
    for n in range(5):
        lint_source(variant(text, n), "train.py", ruleset)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--profile", action="store_true",
                        help="then show where the lint's time goes: its parts' CPU time, and cProfile of 5 lints")
    args = parser.parse_args()
    text = generate()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "train.py"
        path.write_text(text)
        latencies, codes = asyncio.run(drive(path, text, args.changes, args.warmup))
        lint, lint_cpu = in_process(path, text, args.changes)
    ms = [t * 1000 for t in latencies]
    lint_ms = [t * 1000 for t in lint]
    cpu_ms = [t * 1000 for t in lint_cpu]
    print(f"file: {text.count(chr(10))} lines, {len(text.encode())} bytes; findings: {', '.join(codes)}")
    print(f"didChange -> publishDiagnostics, {len(ms)} changes after {args.warmup} warm-up: "
          f"median {statistics.median(ms):.1f} ms, p90 {percentile(ms, 0.9):.1f} ms, "
          f"min {min(ms):.1f} ms, max {max(ms):.1f} ms")
    print(f"the lint alone (lint_document in-process), {len(lint_ms)} runs: "
          f"median {statistics.median(lint_ms):.1f} ms, p90 {percentile(lint_ms, 0.9):.1f} ms wall; "
          f"median {statistics.median(cpu_ms):.1f} ms CPU")
    print(f"load average while measuring: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"target: median under 50 ms: {'met' if statistics.median(ms) < 50 else 'NOT met'}")
    if args.profile:
        phases(text)
        profile(text)


if __name__ == "__main__":
    main()
