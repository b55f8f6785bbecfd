"""The real-program corpus: training programs in the shapes real code takes, written here (never taken from
the pytorch/examples repository or a published silent-bug suite, which are kept as independent checks).

Each module in ``programs/`` defines

- ``build(seed: int) -> Program``: the correct program, everything created from ``seed`` (random weights
  from config, small synthetic data shaped like the real thing), ready to train;
- ``BUGS: list[Bug]``: mutations of that program (the fault classes of the learning-chain issue and
  DeepCrime's operators), each with the instrument that must catch it and the place its first
  divergence must name.

Programs are plain user code: they import torch (and transformers where a real library model fits), never
firstdiv. The gates in ``test_corpus.py`` run the learning-chain instruments on every program at three
seeds (0 FAIL) and on every bug (localized).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import nn


@dataclasses.dataclass
class Program:
    """What a user has at hand for one training program.

    ``train_step`` is one full step of the user's own loop on their own objects (zero arguments, returns the
    loss); ``optimizer`` is None for manual updates (``p.data.add_(p.grad, alpha=-lr)``). ``eval_fn(model,
    batch)`` is the user's evaluation. ``task_probe`` is the labelling rule ``inputs -> targets`` (or a
    ``(known_inputs, known_targets)`` pair); ``task`` the declared task ("auto" to let the instruments infer).
    ``frozen`` names the parameters frozen on purpose (fnmatch patterns on ``named_parameters()`` names);
    ``batch_axis`` the axis of the batch's examples (1 for sequence-first ``[T, B]`` inputs).
    ``warns`` maps an instrument to the reason a user would agree with for the WARN it may give.
    """

    name: str
    model: nn.Module
    batch: Any
    loss_fn: Callable[[Any, Any], torch.Tensor]
    optimizer: torch.optim.Optimizer | None
    train_step: Callable[[], Any] | None = None
    eval_fn: Callable[[nn.Module, Any], Any] | None = None
    task_probe: Any = None
    task: str = "auto"
    frozen: tuple[str, ...] = ()
    batch_axis: int = 0
    loader: Any = None
    warns: dict[str, str] = dataclasses.field(default_factory=dict)

    def evidence(self) -> dict[str, Any]:
        """The keyword arguments of ``firstdiv.diagnose`` for this program (None and defaults left out)."""
        ev = {k: getattr(self, k) for k in ("model", "batch", "loss_fn", "optimizer", "train_step", "eval_fn",
                                             "task_probe", "loader")}
        ev = {k: v for k, v in ev.items() if v is not None}
        if self.task != "auto":
            ev["task"] = self.task
        if self.frozen:
            ev["frozen"] = self.frozen
        if self.batch_axis != 0:
            ev["batch_axis"] = self.batch_axis
        return ev


@dataclasses.dataclass(frozen=True)
class Bug:
    """One mutation of a program: ``build(seed)`` returns the buggy program; ``instrument`` must not PASS on it
    (FAIL, or WARN where the instrument cannot know more) and its first divergence's ``where`` must contain
    every string of ``where`` (the user's names: a parameter, a module path, a link, a claim);
    ``kind`` (optional) a substring of the divergence's kind."""

    name: str
    build: Callable[[int], Program]
    instrument: str
    where: tuple[str, ...]
    kind: str = ""
    status: str = "FAIL"


PROGRAMS_DIR = __import__("pathlib").Path(__file__).resolve().parent / "programs"


def load_programs() -> dict[str, Any]:
    """Every ``programs/*.py`` module (files starting with ``_`` are helpers), by file stem, imported by path."""
    return load_dir(PROGRAMS_DIR, "realworld_programs")


def load_dir(directory: Any, prefix: str) -> dict[str, Any]:
    """Every ``*.py`` module of ``directory`` not starting with ``_``, by file stem, imported by path once (as
    ``{prefix}_{stem}`` in ``sys.modules``)."""
    import importlib.util
    import sys

    out = {}
    for path in sorted(directory.glob("*.py")):
        if path.name.startswith("_"):
            continue
        name = f"{prefix}_{path.stem}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        out[path.stem] = sys.modules[name]
    return out


def self_check(program: Program, steps: int = 30) -> tuple[float, float]:
    """The program's own loop run ``steps`` times on a deep copy-free fresh build is the caller's job; this runs
    ``program.train_step`` ``steps`` times (mutating the program) and returns (first loss, last loss): a correct
    program must reduce its loss."""
    losses = [float(torch.as_tensor(program.train_step()).detach()) for _ in range(steps)]
    return losses[0], min(losses[-3:])
