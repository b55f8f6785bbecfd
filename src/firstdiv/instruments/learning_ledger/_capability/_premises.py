"""CAPABILITY's premises and its working copy. Whether "fitted" has a meaning: an objective of a known form (a class
objective, a regression loss starting at or above 0) and a deterministic one (the same batch gives the same loss twice
with the weights fixed); whether the program's optimizer can be escalated at all; whether the loss reads the program's
own model (no copy can lower that part); and the trained copy one round steps."""

from __future__ import annotations

import math

import torch

from ..._core.batch import Batch, compute_loss
from ..._core.copying import model_copy, restarting
from ..._core.lr import lr_of, step_at_base_lr
from ..._core.state import detached_copy
from ..._core.task import Ctx
from .._common import g4


def known_floor(ctx: Ctx) -> bool:
    """Whether "fitted" has a meaning: a class objective (accuracy) or a regression loss that starts >= 0, and an
    objective OBJECTIVE identified (a VAE's ELBO or an RL loss has no floor the ledger knows)."""
    if ctx.notes.get("objective_identified") is False:
        return False
    if ctx.task in ("classification", "language_model") and ctx.class_dim is not None:
        return True
    loss = ctx.loss
    return ctx.task == "regression" and torch.is_tensor(loss) and loss.numel() == 1 and float(loss.detach()) >= 0


def stochastic(ctx: Ctx, tiny: Batch) -> tuple[float, float] | None:
    """Two losses of the same batch with the weights fixed (a copy, no step between), when they differ: dropout,
    sampled negatives, augmentation or noise drawn inside forward/loss_fn make the objective stochastic, and the
    floor a memorized batch would reach is not zero-noise. None when they agree or could not be computed."""
    try:
        work = model_copy(ctx.model)
        with torch.no_grad():
            a, b = (float(compute_loss(work, tiny, ctx.loss_fn)[1].detach().double()) for _ in range(2))
    except Exception:  # noqa: BLE001 - the rounds below report a program that does not run
        return None
    return (a, b) if math.isfinite(a) and math.isfinite(b) and abs(a - b) > 1e-6 * max(1.0, abs(a)) else None


def floor(ctx: Ctx, tiny: Batch) -> bool:
    """Whether the objective has a floor a memorized batch reaches: a known form, and deterministic."""
    noisy = stochastic(ctx, tiny)
    if noisy is not None:
        ctx.notes["stochastic_objective"] = True
        ctx.report_notes.append(f"note: the loss of the same batch changes between two forwards with the weights fixed "
                                f"({g4(noisy[0])} vs {g4(noisy[1])}): the objective is stochastic (dropout, sampling, "
                                "augmentation), so CAPABILITY asks for learning, not for reaching the floor, and a "
                                "plateau is not read as a model that cannot fit")
    return known_floor(ctx) and noisy is None


def untestable(opt: torch.optim.Optimizer) -> str:
    """Why overfitting with the program's optimizer says nothing: loss_fn climbed (maximize=True), or every group's
    lr 0 with no schedule's initial_lr to start from (escalating 0 stays 0); "" when it can run."""
    if any(g.get("maximize") for g in opt.param_groups):
        return "a param group has maximize=True (loss_fn is climbed)"
    if all(not float(g.get("lr") or 0.0) and not float(g.get("initial_lr") or 0.0) for g in opt.param_groups):
        return ("the program's lr is 0 in every param group at this step and no base lr is known (no schedule's "
                "initial_lr): escalating 0 stays 0")
    return ""


def relative_change(before: list[torch.Tensor], after: list[torch.Tensor]) -> float:
    """The parameters' relative change from ``before`` to ``after`` (one norm over all of them)."""
    num = sum(float((a.float() - b.float()).pow(2).sum()) for a, b in zip(after, before))
    den = sum(float(b.float().pow(2).sum()) for b in before)
    return math.sqrt(num) / max(math.sqrt(den), 1e-12)


def reads_own_model(ctx: Ctx, tiny: Batch) -> bool:
    """Whether the loss of the ledger's copy reaches the parameters of the program's own model, or other tensors the
    program's optimizer trains: a ``loss_fn`` that computes part of its loss from the model it closes over (a physics
    residual, a discriminator's score), not from the outputs it is given, or from a second network trained beside the
    model (a pose network whose motion a depth network's photometric loss reads). No training of a copy of the model
    can lower that part: the copy's optimizer steps copies of those tensors that the loss never reads."""
    from .._dependency import reached_leaves

    try:
        loss = compute_loss(ctx.work, tiny, ctx.loss_fn)[1]
    except Exception:  # noqa: BLE001 - user code: the rounds report it
        return False
    if not torch.is_tensor(loss) or loss.grad_fn is None:
        return False
    own = {id(p) for p in ctx.model.parameters() if p.requires_grad}
    if ctx.optimizer is not None:  # a second network the program trains beside the model (SfMLearner's pose net)
        own |= {id(p) for g in ctx.optimizer.param_groups for p in g["params"] if p.requires_grad}
    return bool(reached_leaves(loss)[0] & own)


def trained_copy(ctx: Ctx, scale: float, plain_lr: float) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Deep copies of the model and optimizer for one CAPABILITY round (plain SGD at ``plain_lr`` without a torch.optim
    optimizer), every group's lr scaled by ``scale``. The optimizer's state is reset, except where its step reads
    state its constructor made (a shared RMSprop's ``square_avg``: ``ctx.notes["capability_keep_state"]``). A group's lr
    starts from ``ctx.notes["capability_base_lr"]`` where that is higher (the program's scheduled lr: ``_schedule``)."""
    model, opt = detached_copy(ctx.model, ctx.optimizer)
    restarting(model)
    if opt is None:
        opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=plain_lr)
    if not ctx.notes.get("capability_keep_state"):
        opt.state.clear()
    step_at_base_lr(opt)  # a warmup schedule's lr 0: escalating 0 stays 0
    base = ctx.notes.get("capability_base_lr") or []  # a warmup's start: the lr the program's schedule reaches
    for i, g in enumerate(opt.param_groups):
        if i < len(base) and not torch.is_tensor(g["lr"]) and base[i] > lr_of(g):
            g["lr"] = base[i]
        g["lr"] = g["lr"] * scale
    return model, opt
