"""Chapter 14's controlled workload: a random linear rule with label noise and a three-layer MLP.

The data is a pure function of ``data_seed`` (and the noise knobs); the run seed controls only
initialization, batch order and dropout masks, each through its own generator, so that a seed's
run never depends on what else consumed randomness in the process.

Training is described once, as a :class:`~firstdiv.lab.functional.Functional` (:func:`spec`), and
always runs through the stacked loop: ``train``/``fit`` train a stack of one seed, the vectorized
backend a stack of many. One implementation is what keeps a seed's record independent of the backend.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import functional
from .builtin_checks import CHOICES, validate  # noqa: F401 (the workload's spec names them here)

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
    """One torch generator per random stream of a run (init, order, dropout, eval), from the run seed alone."""
    return functional.generators(seed)


def init_params(config: dict[str, Any], gen: torch.Generator) -> list[torch.Tensor]:
    """nn.Linear's default init (uniform in +-1/sqrt(fan_in)), drawn from ``gen`` in a fixed order."""
    dims = [config["in_dim"], config["hidden"], config["hidden"], config["classes"]]
    params = []
    for fan_in, fan_out in itertools.pairwise(dims):
        bound = 1.0 / math.sqrt(fan_in)
        w = (torch.rand(fan_out, fan_in, generator=gen) * 2 - 1) * bound
        b = (torch.rand(fan_out, generator=gen) * 2 - 1) * bound
        params += [w.requires_grad_(), b.requires_grad_()]
    return params


def forward(params: list[torch.Tensor], x: torch.Tensor, dropout: float, gen: torch.Generator | None) -> torch.Tensor:
    """Logits [B, classes] for inputs [B, in_dim]; dropout is applied when ``gen`` is given.

    One seed is a stack of one: this runs the same code as training and the vectorized backend.
    """
    hidden = params[0].shape[0]
    bits = _draw(gen, x.shape[0], hidden=hidden).unsqueeze(0) if gen is not None and dropout > 0 else None
    return _apply([p.unsqueeze(0) for p in params], x.unsqueeze(0), bits, hidden=hidden, p=dropout)[0]


def stacked_forward(params: list[torch.Tensor], x: torch.Tensor, keep: torch.Tensor | None = None,
                    scale: float = 1.0) -> torch.Tensor:
    """Logits [S, B, classes] for S seeds' params (w [S, out, in], b [S, out]) and inputs [S, B, in_dim].

    ``keep`` [S, B, 2 * hidden] holds the two layers' dropout decisions (1 kept, 0 dropped), or None;
    kept units are scaled by ``scale`` (1 / (1 - p)).
    """
    return _StackedMLP.apply(x, keep, scale, *params).transpose(1, 2)


class _StackedMLP(torch.autograd.Function):
    """The three-layer MLP over a stack of seeds with its backward written out: batched matmuls and
    per-seed sums only, so no value of one seed reaches another, in about a third of autograd's ops.

    Dropout multiplies by the 0/1 decisions and the scale 1 / (1 - p) rides on the next layer's
    matmul (``alpha``), which spares an elementwise pass in forward and two in backward. The logits
    come out as [S, classes, B] (w3 @ a2^T: a few classes make a far faster matmul as rows than as
    columns), which is also the layout cross-entropy reads.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, keep: torch.Tensor | None, scale: float, w1: torch.Tensor,
                b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor, w3: torch.Tensor,
                b3: torch.Tensor) -> torch.Tensor:
        hidden = w1.shape[1]
        k1, k2 = (None, None) if keep is None else (keep[..., :hidden], keep[..., hidden:])
        a1 = _relu_drop(torch.baddbmm(b1.unsqueeze(1), x, w1.transpose(1, 2)), k1)
        a2 = _relu_drop(torch.baddbmm(b2.unsqueeze(1), a1, w2.transpose(1, 2), alpha=scale), k2)
        ctx.save_for_backward(x, a1, a2, w2, w3)
        ctx.scale = scale
        return torch.baddbmm(b3.unsqueeze(2), w3, a2.transpose(1, 2), alpha=scale)

    @staticmethod
    def backward(ctx: Any, g3: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, a1, a2, w2, w3 = ctx.saved_tensors
        s = ctx.scale  # g3: [S, classes, B]
        # a = relu(z) * keep is > 0 exactly where the unit was kept and z > 0: the only places z gets a gradient.
        g2 = _relu_grad(_scaled_bmm(g3.transpose(1, 2), w3, s, like=a2), a2)
        g1 = _relu_grad(_scaled_bmm(g2, w2, s, like=a1), a1)
        return (None, None, None, torch.bmm(g1.transpose(1, 2), x), g1.sum(1),
                _scaled_bmm(g2.transpose(1, 2), a1, s, like=w2), g2.sum(1),
                _scaled_bmm(g3, a2, s, like=w3), g3.sum(2))


def _scaled_bmm(a: torch.Tensor, b: torch.Tensor, scale: float, *, like: torch.Tensor) -> torch.Tensor:
    """``scale * (a @ b)`` in one batched matmul (``like`` has the result's shape; beta=0 ignores its values)."""
    return torch.bmm(a, b) if scale == 1.0 else torch.baddbmm(like, a, b, beta=0.0, alpha=scale)


def _relu_drop(z: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    z = z.clamp_min_(0.0)
    return z if keep is None else z.mul_(keep)


def _relu_grad(grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.threshold_backward(grad, out, 0.0)


def _draw(gen: torch.Generator, n: int, *, hidden: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Raw dropout bits for n examples: [n, ceil(hidden / 2)] int64, four 16-bit decisions per value
    (written into ``out`` when given).

    One 64-bit draw serves four units (a float mask would take one 32-bit draw per unit, and the
    draws are most of what a seed adds to a stack). Drawn on the CPU generator on every device, so a
    seed's masks do not depend on the device.
    """
    bits = torch.empty(n, -(-hidden // 2), dtype=torch.int64) if out is None else out
    return bits.random_(-(2**63), None, generator=gen)


def _keep(bits: torch.Tensor, *, hidden: int, p: float) -> torch.Tensor:
    """Dropout decisions [..., 2 * hidden] (1.0 kept, 0.0 dropped) from raw bits [..., ceil(hidden / 2)].

    A unit is dropped when its 16-bit draw is below ceil(p * 2**16), so the drop probability is ``p``
    rounded up to a multiple of 2**-16 (0.3 -> 0.300003).
    """
    units = bits.view(torch.int16)[..., : 2 * hidden]
    keep = torch.empty(units.shape, dtype=torch.float32, device=units.device)
    return torch.ge(units, math.ceil(p * 65536) - 32768, out=keep)


def _apply(params: list[torch.Tensor], x: torch.Tensor, bits: torch.Tensor | None = None, *, hidden: int,
           p: float) -> torch.Tensor:
    """The Functional's apply: stacked logits, with the batch's dropout bits (None: no dropout)
    turned into decisions."""
    if bits is None or p == 0:
        return stacked_forward(params, x)
    return stacked_forward(params, x, _keep(bits, hidden=hidden, p=p), scale=1.0 / (1.0 - p))


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
    out = evaluate_stack([p.unsqueeze(0) for p in params], [gen], data=data, config=config)
    return {name: float(value[0]) for name, value in out.items()}


@torch.no_grad()
def evaluate_stack(params: list[torch.Tensor], gens: list[torch.Generator], *, data: Data,
                   config: dict[str, Any]) -> dict[str, torch.Tensor]:
    """:func:`evaluate` for S seeds at once: val_loss and val_acc, each a tensor [S]."""
    return _Evaluator(data, config)(params, gens)


class _Evaluator:
    """The stacked evaluation of one config, keeping the validation inputs laid out for the stack
    (a batched matmul copies a broadcast input on every call; one stack evaluates every epoch)."""

    def __init__(self, data: Data, config: dict[str, Any]) -> None:
        self.data, self.config = data, config
        self.n = config["eval_subset"] or config["n_val"]
        self._inputs: tuple[int, torch.device, torch.Tensor, torch.Tensor] | None = None

    def inputs(self, s: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs [S, n, in_dim] (contiguous) and labels [S, n] for a stack of ``s`` seeds."""
        if self._inputs is None or self._inputs[:2] != (s, device):
            x = self.data.x_val[: self.n].to(device) * self.config["eval_input_scale"]
            self._inputs = (s, device, x.expand(s, *x.shape).contiguous(),
                            self.data.y_val[: self.n].to(device).expand(s, self.n))
        return self._inputs[2], self._inputs[3]

    @torch.no_grad()
    def __call__(self, params: list[torch.Tensor], gens: list[torch.Generator]) -> dict[str, torch.Tensor]:
        config, n = self.config, self.n
        x, y = self.inputs(params[0].shape[0], params[0].device)
        hidden, p = config["hidden"], config["dropout"]
        bits = None
        if config["eval_mode"] == "train" and p > 0:
            bits = torch.stack([_draw(g, n, hidden=hidden) for g in gens]).to(x.device)
        logits = _apply(params, x, bits, hidden=hidden, p=p)
        loss = functional.losses("cross_entropy", logits, y, reduction=config["eval_reduction"])
        acc = (functional.predicted(logits) == y).to(torch.float64).mean(dim=1)
        return {"val_loss": loss, "val_acc": acc}


def spec(config: dict[str, Any], data: Data | None = None) -> functional.Functional:
    """The workload as a :class:`~firstdiv.lab.functional.Functional`: what every backend trains."""
    data = make_data(config) if data is None else data
    y = data.y_train
    if config["label_shift"]:
        y = torch.roll(y, -config["label_shift"])  # each input paired with the label `shift` places later
    p = config["dropout"]
    return functional.Functional(
        data=(data.x_train, y, data.x_val, data.y_val),
        init=functools.partial(init_params, config), stacked=True,
        apply=functools.partial(_apply, hidden=config["hidden"], p=p),
        draws=functools.partial(_draw, hidden=config["hidden"]) if p > 0 else None,
        epochs=config["epochs"], batch_size=config["batch_size"], lr=config["lr"], optimizer=config["optimizer"],
        weight_decay=config["weight_decay"], evaluate=_Evaluator(data, config),
        data_identity=data.identity(), eval_contract=eval_contract(config), device=config["device"])


#: The workload protocol entry point ``train(seed, config, rec)``: a stack of one seed. The vectorized
#: backend finds :func:`spec` on it and trains many seeds through the same loop.
train = functional.vectorizable(spec)


def fit(seed: int, config: dict[str, Any], rec: Any) -> tuple[list[torch.Tensor], Data]:
    """Train one run; logs per-epoch curves and grad norms to ``rec``.

    Returns the trained parameters (detached) and the data, so the eval path can be varied on one
    fixed model (chapter 14's E6).
    """
    data = make_data(config)
    params = functional.train_stack(spec(config, data), [seed], [rec])[0]
    return params, data
