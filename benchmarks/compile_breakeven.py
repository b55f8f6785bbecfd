"""When does torch.compile pay for itself? Cold, warm-cache and steady-state times and break-even calls for a small
model with inductor, from one run of ``compile_ledger`` (its WORTH_IT link).

The model is a small pre-norm MLP block stack (LayerNorm -> Linear -> GELU -> Linear, residual): pointwise work
inductor can fuse. It runs in inference (``torch.no_grad()``) and with gradients enabled (the forward pass of a
training step, which compiles the backward graph too), each with:

- eager: median eager call;
- cold first call: the first compiled call of a fresh compile (dynamo traces, AOT autograd and inductor compile;
  with ``--fresh-cache`` (default) inductor's on-disk cache starts empty, so nothing is reused);
- warm-cache first call: a second fresh compile in the same process (dynamo traces again, inductor's FX graph
  cache and the AOT autograd cache now hit);
- steady state: median compiled call after compiling;
- break-even calls = (first call - eager) / (eager - steady), or "never" when steady >= eager.

No assertion: the printed numbers are the measurement (they depend on the machine, the thread count and the
cache state). The first mode measured also pays the process's one-time inductor start-up (imports, compiler
checks) in its cold call.

    python benchmarks/compile_breakeven.py [--repeats 50] [--batch 64] [--dim 256] [--blocks 2] [--threads 1]
                                           [--keep-cache]
"""

from __future__ import annotations

import argparse
import os
import tempfile


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=50, help="calls in the eager and steady-state medians")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default; 1 keeps a shared machine's "
                   "contention out of the medians)")
    p.add_argument("--keep-cache", action="store_true", help="use inductor's usual on-disk cache instead of a fresh one")
    return p.parse_args()


def main() -> None:
    args = _args()
    cache = None
    if not args.keep_cache:  # before anything compiles: inductor reads the variable on every cache access
        cache = tempfile.TemporaryDirectory(prefix="compile_breakeven_")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache.name

    import torch
    from torch import nn

    from firstdiv.instruments.compile_ledger import compile_ledger

    if args.threads:
        torch.set_num_threads(args.threads)

    class Block(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(dim)
            self.up, self.down = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    torch.manual_seed(0)
    model = nn.Sequential(*(Block(args.dim) for _ in range(args.blocks))).eval()
    x = torch.randn(args.batch, args.dim)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, model: {args.blocks} x "
          f"(LayerNorm, Linear {args.dim}->{2 * args.dim}, GELU, Linear, residual), input {list(x.shape)}, "
          f"inductor cache: {'fresh temporary directory' if cache else 'default (may already hold these graphs)'}")
    header = (f"{'mode':<10} {'eager ms':>9} {'cold s':>8} {'warm s':>8} {'steady ms':>10} {'speedup':>8} "
              f"{'break-even (cold)':>18} {'break-even (warm)':>18}  caches cold -> warm")
    print(header)
    for mode in ("inference", "grad"):
        ctx = torch.no_grad() if mode == "inference" else torch.enable_grad()
        with ctx:
            report = compile_ledger(model, [x], backend="inductor", repeats=args.repeats)
        worth = next(f for f in report.findings if f.where == "WORTH_IT")
        if not worth.evidence:
            print(f"{mode:<10} WORTH_IT not reached: {report.first_divergence}")
            continue
        ev = worth.evidence
        speed = ev["speedup"] if isinstance(ev["speedup"], str) else f"{ev['speedup']:.2f}x"
        print(f"{mode:<10} {ev['eager_s'] * 1e3:>9.3f} {ev['cold_first_call_s']:>8.2f} {ev['warm_cache_first_call_s']:>8.2f} "
              f"{ev['steady_s'] * 1e3:>10.3f} {speed:>8} {_calls(ev['break_even_calls']):>18} "
              f"{_calls(ev['break_even_calls_warm_cache']):>18}  {_caches(ev['cold_caches'])} -> {_caches(ev['warm_caches'])}")
    if cache is not None:
        cache.cleanup()


def _calls(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:,.0f} calls"


def _caches(counts: dict[str, int]) -> str:
    short = {"inductor.fxgraph_cache_hit": "fx hit", "inductor.fxgraph_cache_miss": "fx miss",
             "aot_autograd.autograd_cache_hit": "aot hit", "aot_autograd.autograd_cache_miss": "aot miss"}
    return ", ".join(f"{short[k]} {v}" for k, v in counts.items() if k in short) or "none"


if __name__ == "__main__":
    main()
