"""Step time of a hand-written training loop with and without ``firstdiv.watch`` at the default interval, on a
small MLP and a small CNN.

Target: the watched loop is at most 3% slower (ratio <= 1.03). Plain and watched steps alternate one by one in
one process (one thread); each window of ``every`` step pairs holds exactly one check step, and the ratio printed
is the median over windows of watched time / plain time, so machine noise affects numerator and denominator
alike.

    python benchmarks/watch_overhead.py [--windows 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import firstdiv
from firstdiv.instruments.watch import Watch


def mlp() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    return model, torch.randn(128, 64), torch.randint(0, 10, (128,))


def cnn() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(32, 10))
    return model, torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))


def one_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
             w: Watch | None) -> float:
    """Seconds for one step of the loop the docs show (the watch's ``step`` included when watched)."""
    t0 = time.perf_counter()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    if w is not None:
        w.step(loss)
    return time.perf_counter() - t0


def measure(make, windows: int) -> tuple[float, float, float, str]:
    """Plain and watched steps alternate one by one; per window of ``every`` steps (exactly one check step) the
    ratio of the watched time to the plain time; the median window ratio and the median times per step."""
    torch.manual_seed(0)
    plain_model, x, y = make()
    watched_model, _, _ = make()
    watched_model.load_state_dict(plain_model.state_dict())
    plain_opt = torch.optim.Adam(plain_model.parameters(), lr=1e-3)
    watched_opt = torch.optim.Adam(watched_model.parameters(), lr=1e-3)
    ratios, plain, watched = [], [], []
    with firstdiv.watch(watched_model, watched_opt) as w:
        every = w.every
        for _ in range(every // 2):  # warm-up
            one_step(plain_model, plain_opt, x, y, None)
            one_step(watched_model, watched_opt, x, y, w)
        for _ in range(windows):
            p = q = 0.0
            for _ in range(every):
                p += one_step(plain_model, plain_opt, x, y, None)
                q += one_step(watched_model, watched_opt, x, y, w)
            plain.append(p / every)
            watched.append(q / every)
            ratios.append(q / p)
    return statistics.median(plain), statistics.median(watched), statistics.median(ratios), w.report.status.value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=15, help="windows of `every` (default 50) steps each")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'model':6} {'plain ms/step':>14} {'watched ms/step':>16} {'ratio':>7}  report   (target ratio <= 1.03)")
    for name, make in (("mlp", mlp), ("cnn", cnn)):
        plain, watched, ratio, status = measure(make, args.windows)
        print(f"{name:6} {plain * 1e3:14.3f} {watched * 1e3:16.3f} {ratio:7.3f}  {status}")


if __name__ == "__main__":
    main()
