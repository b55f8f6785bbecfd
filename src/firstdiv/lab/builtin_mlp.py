"""Chapter 14's controlled workload: a random linear rule with label noise and a three-layer MLP.

The data is a pure function of ``data_seed`` (and the noise knobs); the run seed controls only
initialization, batch order and dropout masks, each through its own generator, so that a seed's
run never depends on what else consumed randomness in the process.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

DEFAULT_CONFIG: dict[str, Any] = {
    "n_train": 3000,
    "n_val": 1000,
    "in_dim": 32,
    "hidden": 32,
    "classes": 4,
    "noise": 0.30,
    "data_seed": 0,
    "epochs": 20,
    "batch_size": 128,
    "lr": 0.02,
    "weight_decay": 3e-3,
    "dropout": 0.3,
    "optimizer": "adamw",
}

#: Knobs the chapter's experiments need beyond DEFAULT_CONFIG. ``None`` for val_noise means
#: "same as noise".
EXTRA_CONFIG: dict[str, Any] = {
    "val_noise": None,
    "label_shift": 0,
    "eval_mode": "eval",
    "eval_subset": 0,
    "eval_input_scale": 1.0,
    "eval_reduction": "mean",
    "threads": 1,
    "device": "cpu",
}

#: Keys that define the measurement, not the trained system: they go into the eval fingerprint.
EVAL_KEYS = ("eval_mode", "eval_subset", "eval_input_scale", "eval_reduction")
#: Keys that change how the run executes, not what it computes: they go into the environment.
EXEC_KEYS = ("threads", "device")

CHOICES = {
    "optimizer": ("adamw", "adam", "sgd"),
    "eval_mode": ("eval", "train"),
    "eval_reduction": ("mean", "sum"),
}

# Offsets that make the three streams of one seed independent of each other.
_STREAM_INIT, _STREAM_ORDER, _STREAM_DROPOUT, _STREAM_EVAL = 0, 1, 2, 3


def validate(config: dict[str, Any]) -> None:
    """Raise ValueError naming the key when a value is outside what the workload supports."""
    if config["val_noise"] is not None and (isinstance(config["val_noise"], bool)
                                            or not isinstance(config["val_noise"], (int, float))):
        raise ValueError(f"`val_noise` must be a number in [0, 1) or null but got {config['val_noise']!r}")
    positive = ("n_train", "n_val", "in_dim", "hidden", "classes", "epochs", "batch_size")
    for key in positive:
        if config[key] < 1:
            raise ValueError(f"`{key}` must be >= 1 but got {config[key]}")
    if config["classes"] < 2:
        raise ValueError(f"`classes` must be >= 2 but got {config['classes']}")
    for key in ("noise", "val_noise", "dropout"):
        value = config[key]
        if value is not None and not 0.0 <= value < 1.0:
            raise ValueError(f"`{key}` must be in [0, 1) but got {value}")
    if config["lr"] <= 0:
        raise ValueError(f"`lr` must be > 0 but got {config['lr']}")
    if config["weight_decay"] < 0:
        raise ValueError(f"`weight_decay` must be >= 0 but got {config['weight_decay']}")
    if not 0 <= config["eval_subset"] <= config["n_val"]:
        raise ValueError(f"`eval_subset` must be in [0, n_val={config['n_val']}] but got {config['eval_subset']}")
    if config["device"] != "cpu" and not _device_available(config["device"]):
        raise ValueError(f"`device` {config['device']!r} is not available here (torch.cuda.is_available() is "
                         f"{torch.cuda.is_available()}); use device=cpu")
    if config["threads"] < 1:
        raise ValueError(f"`threads` must be >= 1 but got {config['threads']}")
    for key, allowed in CHOICES.items():
        if config[key] not in allowed:
            raise ValueError(f"`{key}` must be one of {', '.join(allowed)} but got {config[key]!r}")


def _device_available(device: str) -> bool:
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError):
        return False
    return True


@dataclass(frozen=True)
class Data:
    """The fixed task: float32 inputs, int64 labels (after label noise)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor

    def identity(self) -> str:
        """A content hash of every array, so any change to the data changes the identity."""
        h = hashlib.sha256()
        for t in (self.x_train, self.y_train, self.x_val, self.y_val):
            h.update(t.numpy().tobytes())
        return h.hexdigest()[:16]


def _noisy(rng: np.random.Generator, y: np.ndarray, noise: float, classes: int) -> np.ndarray:
    # Draws do not depend on `noise`, so lowering it flips a subset of the same examples.
    u = rng.random(y.shape[0])
    random_label = rng.integers(0, classes, size=y.shape[0])
    return np.where(u < noise, random_label, y)


def make_data(config: dict[str, Any]) -> Data:
    """Generate the task from ``data_seed``: x ~ N(0, I), label = argmax(x W + b) for a random
    linear rule (W ~ N(0, 1), intercepts b ~ N(0, 1.5^2), which makes the classes unequal in size).

    A fraction ``noise`` of labels is randomised (replaced by a uniform draw over all classes), so
    no model can drive validation loss to zero: there is a real floor.
    """
    rng = np.random.default_rng(config["data_seed"])
    n_train, n_val, d, k = config["n_train"], config["n_val"], config["in_dim"], config["classes"]
    w = rng.standard_normal((d, k))
    x = rng.standard_normal((n_train + n_val, d)).astype(np.float32)
    b = rng.standard_normal(k) * 1.5
    clean = np.argmax(x @ w + b, axis=1)
    y_train = _noisy(rng, clean[:n_train], config["noise"], k)
    val_noise = config["noise"] if config["val_noise"] is None else config["val_noise"]
    y_val = _noisy(rng, clean[n_train:], val_noise, k)
    return Data(
        torch.from_numpy(x[:n_train].copy()),
        torch.from_numpy(y_train.astype(np.int64)),
        torch.from_numpy(x[n_train:].copy()),
        torch.from_numpy(y_val.astype(np.int64)),
    )


def generators(seed: int) -> dict[str, torch.Generator]:
    """One torch generator per random stream of a run, derived from the run seed alone."""
    seq = np.random.SeedSequence(seed)
    states = seq.generate_state(4, dtype=np.uint64)
    names = {_STREAM_INIT: "init", _STREAM_ORDER: "order", _STREAM_DROPOUT: "dropout", _STREAM_EVAL: "eval"}
    return {name: torch.Generator().manual_seed(int(states[i]) & ((1 << 63) - 1)) for i, name in names.items()}


def init_params(config: dict[str, Any], gen: torch.Generator) -> list[torch.Tensor]:
    """nn.Linear's default init (uniform in +-1/sqrt(fan_in)), drawn from ``gen`` in a fixed order."""
    dims = [config["in_dim"], config["hidden"], config["hidden"], config["classes"]]
    params = []
    for fan_in, fan_out in zip(dims[:-1], dims[1:]):
        bound = 1.0 / math.sqrt(fan_in)
        w = (torch.rand(fan_out, fan_in, generator=gen) * 2 - 1) * bound
        b = (torch.rand(fan_out, generator=gen) * 2 - 1) * bound
        params += [w.requires_grad_(), b.requires_grad_()]
    return params


def forward(params: list[torch.Tensor], x: torch.Tensor, dropout: float, gen: torch.Generator | None) -> torch.Tensor:
    """Logits [B, classes] for inputs [B, in_dim]; dropout is applied when ``gen`` is given."""
    w1, b1, w2, b2, w3, b3 = params
    h = F.relu(F.linear(x, w1, b1))
    if gen is not None and dropout > 0:
        h = h * _mask(h.shape, dropout, gen, h.device)
    h = F.relu(F.linear(h, w2, b2))
    if gen is not None and dropout > 0:
        h = h * _mask(h.shape, dropout, gen, h.device)
    return F.linear(h, w3, b3)


def _mask(shape: torch.Size, p: float, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    # Drawn on the CPU generator on every device, so a seed's masks do not depend on the device.
    return ((torch.rand(shape, generator=gen) >= p).to(torch.float32) / (1.0 - p)).to(device)


def _optimizer(config: dict[str, Any], params: list[torch.Tensor]) -> torch.optim.Optimizer:
    lr, wd = config["lr"], config["weight_decay"]
    if config["optimizer"] == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd, foreach=False)
    if config["optimizer"] == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd, foreach=False)
    return torch.optim.SGD(params, lr=lr, weight_decay=wd, foreach=False)


def eval_contract(config: dict[str, Any]) -> dict[str, Any]:
    """The recorded measurement contract: what the eval fingerprint covers."""
    n = config["eval_subset"] or config["n_val"]
    indices = np.arange(n, dtype=np.int64)
    return {
        "eval_indices": hashlib.sha256(indices.tobytes()).hexdigest()[:16],
        "eval_count": int(n),
        "preprocessing": {"input_scale": float(config["eval_input_scale"])},
        "aggregation": {"loss": f"cross_entropy/{config['eval_reduction']}", "accuracy": "mean"},
        "model_mode": config["eval_mode"],
        "metric": "val_loss, val_acc",
    }


@torch.no_grad()
def evaluate(params: list[torch.Tensor], data: Data, config: dict[str, Any], gen: torch.Generator) -> dict[str, float]:
    """Validation loss and accuracy under the config's eval path (mode, subset, scale, reduction)."""
    n = config["eval_subset"] or config["n_val"]
    device = params[0].device
    x = data.x_val[:n].to(device) * config["eval_input_scale"]
    y = data.y_val[:n].to(device)
    train_mode = config["eval_mode"] == "train"
    logits = forward(params, x, config["dropout"], gen if train_mode else None)
    loss = F.cross_entropy(logits, y, reduction=config["eval_reduction"])
    acc = (logits.argmax(dim=1) == y).to(torch.float64).mean()
    return {"val_loss": float(loss), "val_acc": float(acc)}


def train(seed: int, config: dict[str, Any], rec: Any) -> None:
    """The workload protocol entry point: train one run, logging everything to ``rec``."""
    fit(seed, config, rec)


def fit(seed: int, config: dict[str, Any], rec: Any) -> tuple[list[torch.Tensor], Data]:
    """Train one run; logs per-epoch curves and grad norms to ``rec``.

    Returns the trained parameters (detached) and the data, so the eval path can be varied on one
    fixed model (chapter 14's E6).
    """
    data = make_data(config)
    rec.data_identity(data.identity())
    rec.eval_contract(eval_contract(config))
    gens = generators(seed)
    device = torch.device(config["device"])
    params = [p.detach().to(device).requires_grad_() for p in init_params(config, gens["init"])]
    opt = _optimizer(config, params)
    x, y = data.x_train.to(device), data.y_train.to(device)
    shift = config["label_shift"]
    if shift:
        y = torch.roll(y, -shift)  # each input paired with the label `shift` places later
    n, bs = x.shape[0], config["batch_size"]
    train_seconds = 0.0
    for epoch in range(config["epochs"]):
        t0 = time.perf_counter()
        order = torch.randperm(n, generator=gens["order"]).to(device)
        total, norms = 0.0, []
        for start in range(0, n, bs):
            idx = order[start : start + bs]
            logits = forward(params, x[idx], config["dropout"], gens["dropout"])
            loss = F.cross_entropy(logits, y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            norms.append(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))
            opt.step()
            total += float(loss.detach()) * idx.shape[0]
        train_seconds += time.perf_counter() - t0
        rec.grad_norms(torch.stack(norms).tolist())
        rec.log(epoch=epoch, train_loss=total / n, **evaluate(params, data, config, gens["eval"]))
    rec.throughput(examples=n * config["epochs"], seconds=train_seconds)
    rec.state([p.detach().cpu() for p in params])
    return [p.detach() for p in params], data
