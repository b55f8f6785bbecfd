"""Cost of tracing one forward pass with tensor_trace, as a multiple of the bare forward pass, for the
small zoo references (mlp, cnn, transformer).

Target: the traced forward pass (module hooks + the TorchFunctionMode recording metadata at every
boundary and op, reshape check included) costs under 3x the bare forward. Also printed, for
information: the whole ``tensor_trace`` call without the layout probe (adds the leave-no-trace guard,
contract checks and the report) and with it (adds a deep copy and a second forward pass).

Bare and traced passes are interleaved in every repeat, so machine noise hits both alike; each
ratio is the median over repeats of (median traced time / median bare time) within the repeat.
No assertion: the printed ratios are the measurement.

    python benchmarks/trace_overhead.py [--repeats 7] [--calls 40]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from firstdiv.instruments._core.trace import Recorder, call_args
from firstdiv.instruments.tensor_trace import _ReshapeWatch, tensor_trace
from firstdiv.zoo import build

REFERENCES = ("mlp", "cnn", "transformer")


def traced_forward(model: Any, inputs: Any) -> None:
    """Exactly the recording tensor_trace does around the user's forward (no guard, no report)."""
    rec = Recorder(model)
    rec.watch = _ReshapeWatch(rec.rows).watch()
    args, kwargs = call_args(inputs)
    rec.run(model, args, kwargs)


def per_call(fn: Callable[[], Any], calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(name: str, repeats: int, calls: int) -> dict[str, float]:
    program = build(name, seed=0)
    model = program.model
    inputs = getattr(program, "inputs", None)
    if inputs is None:
        inputs = program.batch[0]
    variants = {
        "traced forward": lambda: traced_forward(model, inputs),
        "tensor_trace()": lambda: tensor_trace(model, inputs, layout_probe=False),
        "+ layout probe": lambda: tensor_trace(model, inputs, layout_probe=True),
    }
    bare_fn = lambda: model(inputs)
    for fn in (bare_fn, *variants.values()):  # warm-up
        fn()
    ratios: dict[str, list[float]] = {k: [] for k in variants}
    bare_times = []
    for _ in range(repeats):
        for key, fn in variants.items():
            bare = per_call(bare_fn, calls)
            bare_times.append(bare)
            ratios[key].append(per_call(fn, calls) / bare)
    out = {key: statistics.median(values) for key, values in ratios.items()}
    out["bare_us"] = statistics.median(bare_times) * 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: stable timings on a shared machine)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; ratios = traced / bare forward "
          f"(median of {args.repeats} interleaved repeats x {args.calls} calls)")
    print(f"{'reference':<12} {'bare forward':>13} {'traced forward':>15} {'tensor_trace()':>15} {'+ layout probe':>15}")
    for name in REFERENCES:
        r = measure(name, args.repeats, args.calls)
        verdict = "ok" if r["traced forward"] < 3.0 else "OVER TARGET"
        print(f"{name:<12} {r['bare_us']:>10.0f} us {r['traced forward']:>14.2f}x {r['tensor_trace()']:>14.2f}x "
              f"{r['+ layout probe']:>14.2f}x   {verdict} (target traced forward < 3x)")


if __name__ == "__main__":
    main()
