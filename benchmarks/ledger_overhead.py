"""The instruments' own overhead, as ratios measured in one run, on a small MLP training step (CPU or CUDA).

Printed:

- performance_ledger timing overhead: an empty step timed with the ledger's own loop and synchronization
  boundary, as a fraction of the median step (what the ledger adds to every number it reports);
- performance_ledger whole-call cost: wall time of one ``performance_ledger(...)`` call divided by
  (number of step calls it made x bare step median) -- the price of the contract, the phase run on a copy,
  the growth watch (a TorchDispatchMode over 6 calls) and the report;
- memory_phases: a training loop inside ``memory_phases(model, optimizer)`` vs the same loop bare (on CPU the
  live-tensor TorchDispatchMode sees every operator; on CUDA only hooks and a TorchFunctionMode run), and with
  ``cap_bytes`` set. On CPU most of that cost is Python dispatch itself: a TorchDispatchMode that only calls
  ``func`` already costs about 2.5x on this step (measured 1.35 -> 3.40 ms); counting adds ~0.4 ms.

Bare and instrumented loops are interleaved in every repeat so machine noise hits both alike; each ratio is the
median over repeats. No assertion: the printed ratios are the measurement.

    python benchmarks/ledger_overhead.py [--repeats 5] [--steps 30] [--device cpu|cuda] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from firstdiv.instruments.memory_phases import memory_phases
from firstdiv.instruments.performance_ledger import performance_ledger


def build(device: str) -> tuple[nn.Module, torch.optim.Optimizer, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batch = (torch.randn(64, 32, device=device), torch.randint(0, 10, (64,), device=device))
    return model, optimizer, batch


def make_step(model: nn.Module, optimizer: torch.optim.Optimizer, counter: list[int]) -> Callable:
    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        counter[0] += 1
        x, y = batch
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()
    return step


def loop_seconds(step: Callable, batch: tuple, steps: int, sync: Callable[[], None]) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step(batch)
    sync()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, optimizer, batch = build(args.device)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    counter = [0]
    step = make_step(model, optimizer, counter)
    loop_seconds(step, batch, 10, sync)  # warm-up: lazy initialization, allocator pools
    rows: dict[str, list[float]] = {"timing": [], "call": [], "phases": [], "phases+cap": []}
    for _ in range(args.repeats):
        bare = loop_seconds(step, batch, args.steps, sync) / args.steps
        counter[0] = 0
        t0 = time.perf_counter()
        report = performance_ledger(step, batch, model=model, optimizer=optimizer, loss_fn=F.cross_entropy)
        call, calls = time.perf_counter() - t0, counter[0]
        rows["timing"].append(report.details["overhead"]["fraction_of_step"])
        rows["call"].append(call / (calls * bare))
        with memory_phases(model, optimizer):
            inside = loop_seconds(step, batch, args.steps, sync) / args.steps
        rows["phases"].append(inside / bare)
        with memory_phases(model, optimizer, cap_bytes=2**40):
            capped = loop_seconds(step, batch, args.steps, sync) / args.steps
        rows["phases+cap"].append(capped / bare)
    print(f"device {args.device}, threads {args.threads}, MLP 32-128-128-10, batch 64, bare step "
          f"{bare * 1e3:.3f} ms (last repeat), {args.repeats} repeats")
    print(f"performance_ledger timing overhead (empty step / median step): {statistics.median(rows['timing']):.5f}")
    print(f"performance_ledger whole call / (step calls x bare step):      {statistics.median(rows['call']):.2f}x "
          f"({calls} step calls, {report.details['phases']['forward']['n']} timed phase iterations on a copy)")
    print(f"memory_phases loop / bare loop:                                {statistics.median(rows['phases']):.2f}x")
    print(f"memory_phases(cap_bytes=...) loop / bare loop:                 {statistics.median(rows['phases+cap']):.2f}x")


if __name__ == "__main__":
    main()
