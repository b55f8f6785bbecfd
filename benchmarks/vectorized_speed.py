"""The 12-seed noise floor of builtin:mlp at one thread: serial backend vs vectorized backend, and how
close the vectorized sweep comes to the arithmetic limit of the workload.

Targets (issue 4): vectorized at least 8x faster than serial, about one second of wall time. Every
number comes from this one run of the script, with the backends' repetitions interleaved, so machine
noise affects numerator and denominator alike.

    python benchmarks/vectorized_speed.py [--repeats 3] [--seeds 12] [--no-reference]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import firstdiv
from firstdiv.lab import builtin_mlp as mlp
from firstdiv.lab.workload import resolve


def sweep_seconds(backend: str, seeds: int, store: Path) -> tuple[float, dict]:
    t0 = time.perf_counter()
    res = firstdiv.sweep("builtin:mlp", f"0-{seeds - 1}", store=store, backend=backend)
    wall = time.perf_counter() - t0
    assert not res.failed and len(res.ran) == seeds, res.failed
    return wall, res.summary()


def reference_seconds(seeds: int) -> float:
    """The per-seed loop builtin:mlp ran before it shared the stacked loop (nn.functional layers,
    torch.optim.AdamW, masks drawn per step): what 'serial takes about 6 s' in the issue measured."""
    cfg = resolve("builtin:mlp").config()
    data = mlp.make_data(cfg)
    t0 = time.perf_counter()
    for seed in range(seeds):
        gens = mlp.generators(seed)
        params = [p.detach().requires_grad_() for p in mlp.init_params(cfg, gens["init"])]
        opt = torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"], foreach=False)
        for _ in range(cfg["epochs"]):
            order = torch.randperm(cfg["n_train"], generator=gens["order"])
            for start in range(0, cfg["n_train"], cfg["batch_size"]):
                idx = order[start : start + cfg["batch_size"]]
                loss = F.cross_entropy(_old_forward(params, data.x_train[idx], cfg["dropout"], gens["dropout"]),
                                       data.y_train[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))
                opt.step()
                float(loss.detach())
            with torch.no_grad():
                logits = _old_forward(params, data.x_val, cfg["dropout"], None)
                float(F.cross_entropy(logits, data.y_val)), float((logits.argmax(1) == data.y_val).double().mean())
    return time.perf_counter() - t0


def _old_forward(params, x, p, gen):
    w1, b1, w2, b2, w3, b3 = params
    h = F.relu(F.linear(x, w1, b1))
    if gen is not None:
        h = h * ((torch.rand(h.shape, generator=gen) >= p).float() / (1 - p))
    h = F.relu(F.linear(h, w2, b2))
    if gen is not None:
        h = h * ((torch.rand(h.shape, generator=gen) >= p).float() / (1 - p))
    return F.linear(h, w3, b3)


def workload_flops(cfg: dict, seeds: int) -> float:
    """Floating-point operations of forward + backward + AdamW for every step, plus each epoch's evaluation."""
    d, h, c, b = cfg["in_dim"], cfg["hidden"], cfg["classes"], cfg["batch_size"]
    matmul = d * h + h * h + h * c  # multiply-adds per example through the three layers
    elementwise_fwd = (2 * h + c) + 2 * h + 2 * h + 4 * c  # bias adds, relus, dropout, log-softmax + nll
    elementwise_bwd = 2 * h + 2 * h + (2 * h + c) + 3 * c  # dropout, relu masks, bias grads, softmax grad
    train_example = 2 * matmul + 2 * matmul + 2 * (h * h + h * c) + elementwise_fwd + elementwise_bwd
    eval_example = 2 * matmul + (2 * h + c) + 2 * h + 4 * c
    n_params = sum(p.numel() for p in mlp.init_params(cfg, torch.Generator()))
    steps = math.ceil(cfg["n_train"] / b)
    adamw = 14 * n_params + 2 * n_params  # the update, and the gradient norm's square-and-add
    per_epoch = cfg["n_train"] * train_example + cfg["n_val"] * eval_example + steps * adamw
    return float(seeds * cfg["epochs"] * per_epoch)


def matmul_rate(shape: tuple[int, ...], repeats: int) -> float:
    """Single-thread FLOP/s of a float32 (batched) matmul of the given [S, M, K, N] shape."""
    s, m, k, n = shape
    a, b = torch.randn(s, m, k), torch.randn(s, k, n)
    torch.bmm(a, b)
    t0 = time.perf_counter()
    for _ in range(repeats):
        torch.bmm(a, b)
    return 2 * s * m * k * n * repeats / (time.perf_counter() - t0)


def draws_seconds(cfg: dict, seeds: int) -> float:
    """The dropout draws alone: one 64-bit mt19937 draw per four units per example per epoch, per seed."""
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    for _ in range(seeds * cfg["epochs"]):
        mlp._draw(gen, cfg["n_train"], hidden=cfg["hidden"])
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--no-reference", action="store_true", help="skip timing the pre-change per-seed loop")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = resolve("builtin:mlp").config()
    times: dict[str, list[float]] = {"serial": [], "vectorized": []}
    with tempfile.TemporaryDirectory() as tmp:
        sweep_seconds("vectorized", 2, Path(tmp) / "warm.db")  # imports and first-call costs, for neither side
        summaries = {}
        for i in range(args.repeats):
            for backend, walls in times.items():
                wall, summaries[backend] = sweep_seconds(backend, args.seeds, Path(tmp) / f"{backend}{i}.db")
                walls.append(wall)
    serial, vec = statistics.median(times["serial"]), statistics.median(times["vectorized"])
    gap = max(abs(summaries["serial"][m]["median"] - summaries["vectorized"][m]["median"])
              for m in ("train_loss", "val_loss", "val_acc"))
    print(f"builtin:mlp noise floor, {args.seeds} seeds, 1 thread, whole sweep (identity, training, store), "
          f"median of {args.repeats}")
    print(f"  serial backend                {serial:8.3f} s   (runs: {', '.join(f'{t:.2f}' for t in times['serial'])})")
    print(f"  vectorized backend            {vec:8.3f} s   (runs: {', '.join(f'{t:.2f}' for t in times['vectorized'])})")
    print(f"  speed-up serial / vectorized  {serial / vec:8.2f} x   (target >= 8x; about 1 s vectorized)")
    print(f"  noise-floor medians differ by {gap:.1e} (train_loss, val_loss, val_acc)")
    if not args.no_reference:
        ref = reference_seconds(args.seeds)
        print(f"  reference: the per-seed loop builtin:mlp ran before the shared engine {ref:.3f} s "
              f"= {ref / vec:.2f}x the vectorized sweep")
    flops = workload_flops(cfg, args.seeds)
    peak = matmul_rate((1, 1024, 1024, 1024), 10)
    own = matmul_rate((args.seeds, cfg["batch_size"], cfg["in_dim"], cfg["hidden"]), 2000)
    draws = draws_seconds(cfg, args.seeds)
    print(f"arithmetic limit: {flops / 1e9:.2f} GFLOP (forward + backward + AdamW, every step; eval every epoch)")
    print(f"  at the peak single-thread matmul rate   {peak / 1e9:7.1f} GFLOP/s -> {flops / peak:.3f} s "
          f"= {flops / peak / vec:6.1%} of the vectorized sweep's time")
    print(f"  at the workload's own bmm shape rate    {own / 1e9:7.1f} GFLOP/s -> {flops / own:.3f} s "
          f"= {flops / own / vec:6.1%}")
    print(f"  drawing the dropout bits alone (mt19937, not arithmetic): {draws:.3f} s = {draws / vec:.1%}")


if __name__ == "__main__":
    main()
