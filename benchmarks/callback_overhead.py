"""Wall time of a tiny Lightning ``fit`` with and without ``firstdiv.integrations.lightning.FirstdivCallback``
(recording only, and recording with the watch at the default interval).

Target: the run with the callback is at most 3% slower (ratio <= 1.03). Plain and instrumented fits alternate
in one process (one thread, the order reversed every other round); times are this process's CPU seconds (so
other processes on a shared machine count less), and the ratio printed is the median over rounds of
instrumented time / plain time. Per-step cost in milliseconds is printed too.

    python benchmarks/callback_overhead.py [--rounds 7] [--steps 100]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

try:
    import pytorch_lightning as pl
except ImportError:
    raise SystemExit("needs Lightning: pip install 'firstdiv[lightning]'") from None

from firstdiv.integrations.lightning import FirstdivCallback


class Net(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], i: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], i: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def fit(steps: int, callbacks: list[pl.Callback]) -> float:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(steps * 64, 64, generator=g), torch.randint(0, 10, (steps * 64,), generator=g)
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         callbacks=callbacks)
    model = Net()
    t0 = time.process_time()
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=64),
                DataLoader(TensorDataset(x[:256], y[:256]), batch_size=64))
    return time.process_time() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    times: dict[str, list[float]] = {"plain": [], "record": [], "watch": []}
    makers = {"plain": list, "record": lambda: [FirstdivCallback()],
              "watch": lambda: [FirstdivCallback(watch=True, every=50, show=False)]}
    for make in makers.values():  # warm-up: first-call costs (imports) belong to no side
        fit(args.steps, make())
    for r in range(args.rounds):
        for label in (list(makers) if r % 2 == 0 else list(makers)[::-1]):
            times[label].append(fit(args.steps, makers[label]()))
    plain, recorded, watched = times["plain"], times["record"], times["watch"]
    for label, times in (("record", recorded), ("record + watch every=50", watched)):
        ratio = statistics.median(t / p for t, p in zip(times, plain, strict=True))
        per_step = (statistics.median(times) - statistics.median(plain)) / args.steps * 1e3
        print(f"{label:>24}: ratio {ratio:.3f} (target <= 1.03), {per_step:+.3f} ms/step; "
              f"plain fit {statistics.median(plain):.3f} s for {args.steps} steps")


if __name__ == "__main__":
    main()
