"""Whether the loss depends on given parameters, asked of the program itself: a counterfactual on a copy.

A parameter that gets no gradient (or one that does not move) is a bug only if the objective depends on it. That is
the premise of every "no gradient" and "not updated" finding, and it is confirmed here rather than assumed: the
user's model is copied, the user's ``loss_fn`` is computed on the user's batch with the RNG fixed, then again with
the parameters of one module perturbed (noise of half their spread, at least 0.1). A loss that moves depends on
them (the gradient path is cut, or the update skips them: a FAIL has its evidence); a loss that stays put to float
precision does not (a head the objective never uses, a bias that cancels in a pairwise difference: by design, not a
FAIL). Anything that stops the counterfactual (an uncopyable model, a forward that raises) leaves the premise
unconfirmed (``None``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
from torch import nn

from .batch import compute_loss
from .copying import model_copy

#: at most this many modules are perturbed one by one; the rest stay unconfirmed
MAX_GROUPS = 16
_SEED = 20261205


def _loss(model: nn.Module, batch: Any, loss_fn: Callable[..., Any]) -> float | None:
    """The loss with every RNG a program draws from (torch, Python's, numpy's) seeded alike and restored after."""
    py, np_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(_SEED)
            random.seed(_SEED)
            np.random.seed(_SEED % 2**32)
            loss = compute_loss(model, batch, loss_fn)[1]
    finally:
        random.setstate(py)
        np.random.set_state(np_state)
    if not torch.is_tensor(loss) or loss.numel() != 1 or not bool(torch.isfinite(loss).all()):
        return None
    return float(loss.detach().double())


def _perturbed(params: list[torch.Tensor], generator: torch.Generator) -> list[torch.Tensor]:
    saved = [p.detach().clone() for p in params]
    with torch.no_grad():
        for p in params:
            if p.is_floating_point() and not p.is_sparse:
                spread = float(p.detach().float().std()) if p.numel() > 1 else 0.0
                noise = torch.randn(p.shape, generator=generator, dtype=torch.float32).to(p.dtype)
                p.add_(noise * max(0.5 * spread, 0.1))
    return saved


def loss_depends(model: nn.Module, batch: Any, loss_fn: Callable[..., Any], names: Iterable[str]) -> dict[str, bool | None]:
    """For each parameter name of ``model`` in ``names``: True when perturbing its module's named parameters on a
    copy moves the loss, False when the loss stays put, None when that could not be checked."""
    wanted = list(dict.fromkeys(names))
    out: dict[str, bool | None] = dict.fromkeys(wanted)
    if not wanted:
        return out
    try:
        work = model_copy(model)
        by_name = dict(work.named_parameters(remove_duplicate=False))
        base, again = _loss(work, batch, loss_fn), _loss(work, batch, loss_fn)
    except Exception:  # noqa: BLE001 - the counterfactual could not run: the premise stays unconfirmed
        return out
    if base is None or again is None:
        return out
    noise = abs(base - again)
    tol = max(1e-6 * max(1.0, abs(base)), 10 * noise)
    groups: dict[str, list[str]] = {}
    for name in wanted:
        groups.setdefault(name.rpartition(".")[0], []).append(name)
    generator = torch.Generator().manual_seed(_SEED)
    for _module, members in list(groups.items())[:MAX_GROUPS]:
        params = [by_name[n] for n in members if n in by_name]
        if not params:
            continue
        saved = _perturbed(params, generator)
        try:
            moved = _loss(work, batch, loss_fn)
        except Exception:  # noqa: BLE001
            moved = None
        finally:
            with torch.no_grad():
                for p, s in zip(params, saved, strict=True):
                    p.copy_(s)
        for n in members:
            out[n] = None if moved is None else abs(moved - base) > tol
    return out


def sort_gradless(model: nn.Module, batch: Any, loss_fn: Callable[..., Any],
                  names: Iterable[str]) -> tuple[list[str], list[str], list[str]]:
    """``(cut, unused, unknown)``: of the parameters without a gradient, those the loss depends on (the gradient
    path is cut: a confirmed defect), those it does not depend on (unused by this objective: by design or a module
    left out, which only the user knows), and those the counterfactual could not decide."""
    names = list(names)
    depends = loss_depends(model, batch, loss_fn, names)
    return ([n for n in names if depends[n] is True], [n for n in names if depends[n] is False],
            [n for n in names if depends[n] is None])


def unused_message(unused: list[str], unknown: list[str]) -> str:
    """One sentence on parameters without a gradient that are not confirmed to matter to the loss."""
    parts = []
    if unused:
        parts.append(f"{len(unused)} trainable parameters get no gradient and the loss does not depend on them "
                     f"(perturbing them on a copy leaves it unchanged; first: {unused[0]}): unused by this objective, "
                     "a head it never reads or a module left out of forward")
    if unknown:
        parts.append(f"{len(unknown)} get no gradient and whether the loss depends on them could not be checked "
                     f"(first: {unknown[0]})")
    return "; ".join(parts) + ("; declare them with frozen=[...] if that is by design" if parts else "")
