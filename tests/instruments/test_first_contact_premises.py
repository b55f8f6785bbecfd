"""Premises read from the program before a FAIL, each from a false FAIL a correct public program met at first contact
(batch public-6): a clip of a second network, gradients written by a custom autograd function's own backward, a loss
linear in a flow's log-determinant, the mode the model was handed over in, a blow-up on one batch sequence only, a
model whose forward takes the batch's tuple as its arguments (also behind a wrapper), and a warmup that starts at lr 0."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv


def _data(n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g)


def _kinds(r: firstdiv.Report) -> dict[str, str]:
    return {f.check: f.status.value for f in r.findings}


def test_clipping_a_second_networks_gradients_after_the_first_ones_step_is_no_clip_finding() -> None:
    torch.manual_seed(0)
    value, policy = nn.Linear(4, 1), nn.Linear(4, 1)
    opt_v, opt_p = torch.optim.Adam(value.parameters(), 1e-3), torch.optim.Adam(policy.parameters(), 1e-3)
    x, y = _data()

    def train_step() -> torch.Tensor:  # a PPO update: the value net, then the policy net clipped before its own step
        opt_v.zero_grad()
        v_loss = F.mse_loss(value(x), y)
        v_loss.backward()
        opt_v.step()
        opt_p.zero_grad()
        policy(x).pow(2).mean().backward()
        nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt_p.step()
        return v_loss
    r = firstdiv.step_probe(value, (x, y), F.mse_loss, opt_v, train_step=train_step)
    assert "step.clip_after_step" not in _kinds(r), r


class _Recompute(torch.autograd.Function):
    """A layer that runs its forward without a graph and rebuilds it in backward (reversible layers, checkpointing):
    the parameter's gradient is written to .grad by the nested backward, never returned."""

    @staticmethod
    def forward(ctx, x, layer):
        ctx.save_for_backward(x)
        ctx.layer = layer
        with torch.no_grad():
            return layer(x)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            out = ctx.layer(x)
            torch.autograd.backward(out, dy)
        return x.grad, None


class Reversible(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner, self.head = nn.Linear(4, 4), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(_Recompute.apply(x.requires_grad_(True) if not x.requires_grad else x, self.inner))


def test_parameters_a_custom_function_updates_in_its_own_backward_are_reached() -> None:
    torch.manual_seed(0)
    model, (x, y) = Reversible(), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = (x.clone(), y)
    assert _kinds(firstdiv.reachability(model, batch, F.mse_loss)).get("reachability.no_grad") is None
    assert "FAIL" not in _kinds(firstdiv.reachability(model, batch, F.mse_loss)).values()
    ledger = firstdiv.learning_ledger(model, batch, F.mse_loss, opt, overfit_steps=0)
    assert next(f for f in ledger.findings if f.where == "DEPENDENCY").status.value == "PASS"
    assert firstdiv.step_probe(model, batch, F.mse_loss, opt).status.value != "FAIL"


class Flow(nn.Module):
    """A one-layer affine flow: (z, log|det J|); the loss is the negative log-likelihood, linear in log|det J|."""

    def __init__(self) -> None:
        super().__init__()
        self.log_scale, self.shift = nn.Parameter(torch.zeros(4)), nn.Parameter(torch.zeros(4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = (x - self.shift) * torch.exp(-self.log_scale)
        return z, (-self.log_scale).sum().expand(x.shape[0])


def _nll(out: tuple[torch.Tensor, torch.Tensor], _t: object) -> torch.Tensor:
    z, logdet = out
    return -(-0.5 * z.pow(2).sum(-1) - 0.5 * 4 * math.log(2 * math.pi) + logdet).mean()


def test_a_flows_likelihood_linear_in_its_log_determinant_is_not_a_wrong_sign() -> None:
    torch.manual_seed(0)
    model, (x, _) = Flow(), _data()
    r = firstdiv.learning_ledger(model, (x, torch.zeros(32)), _nll, torch.optim.Adam(model.parameters(), 1e-2),
                                 overfit_steps=0)
    objective = next(f for f in r.findings if f.where == "OBJECTIVE")
    assert objective.status.value != "FAIL", objective.message


def test_batch_norm_handed_over_in_eval_mode_is_judged_on_the_mode_train_step_sets() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    model.eval()  # left by an evaluation before the step is probed
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _data()

    def train_step() -> torch.Tensor:
        model.train()
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss
    r = firstdiv.step_probe(model, (x, y), F.mse_loss, opt, train_step=train_step)
    assert "step.norm_statistics_never_estimated" not in _kinds(r), r


def test_a_blow_up_on_one_sequence_of_batches_only_is_a_warn() -> None:
    torch.manual_seed(0)
    model, (x, y) = nn.Linear(4, 1), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    stream = {"calls": 0}

    def train_step() -> torch.Tensor:  # a stream whose 2nd and 3rd batches are wild: a blow-up on those batches only
        stream["calls"] += 1
        scale = 300.0 if stream["calls"] in (2, 3) else 1.0
        opt.zero_grad()
        loss = F.mse_loss(model(x * scale), y)
        loss.backward()
        opt.step()
        return loss
    r = firstdiv.learning_ledger(model, (x, y), F.mse_loss, opt, train_step=train_step, overfit_steps=0)
    update = next(f for f in r.findings if f.where == "PARAMETER_UPDATE")
    assert (update.status.value, update.check) == ("WARN", "update.diverges"), update.message


class Score(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net, self.emb = nn.Linear(4, 4), nn.Embedding(10, 4)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.net(x) + self.emb(labels)


class Wrapper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.module = Score()

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.module(*args)


def test_the_geometry_instruments_take_the_batch_tuple_as_the_arguments_its_forward_takes() -> None:
    x, labels = torch.randn(8, 4), torch.randint(0, 10, (8,))
    ws = firstdiv.diagnose(model=Score(), batch=((x, labels), torch.randn(8, 4)), loss_fn=F.mse_loss,
                           stop_at_first=False)
    for name in ("shape_ledger", "tensor_trace"):
        assert ws.report_of(name).status.value != "FAIL", ws.report_of(name)


def test_a_wrappers_child_that_cannot_bind_firstdivs_inputs_is_not_checked_not_failed() -> None:
    r = firstdiv.tensor_trace(Wrapper(), (torch.randn(8, 4),))
    assert r.status.value == "SKIPPED" or "trace.inputs_refused" in _kinds(r), r


def test_a_warmup_that_holds_lr_at_zero_through_the_watched_steps_is_not_a_stuck_update() -> None:
    torch.manual_seed(0)
    model, (x, y) = nn.Linear(4, 1), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.0 if step < 10 else 1.0)

    def train_step() -> torch.Tensor:
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        return loss
    r = firstdiv.step_probe(model, (x, y), F.mse_loss, opt, train_step=train_step)
    assert "step.not_updated" not in {k for k, v in _kinds(r).items() if v == "FAIL"}, r


def test_eval_mode_dropout_is_named_at_the_first_layer_in_forward_order() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.Linear(8, 8), nn.Dropout(0.1), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = _data()

    def train_step() -> torch.Tensor:
        model.eval()
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss
    r = firstdiv.step_probe(model, (x, y), F.mse_loss, opt, train_step=train_step)
    # the backward reaches the last dropout first; the report names the first the data passes
    assert (r.first_divergence.where, r.first_divergence.kind) == ("1", "step.trained_in_eval_mode"), r


class FeedDict(nn.Module):
    """A recommender whose forward takes the whole feed dict as its one argument (and computes what it needs)."""

    def __init__(self) -> None:
        super().__init__()
        self.users, self.items = nn.Embedding(10, 4), nn.Embedding(20, 4)

    def forward(self, feed_dict: dict) -> torch.Tensor:
        return (self.users(feed_dict["user_id"])[:, None] * self.items(feed_dict["item_id"])).sum(-1)


def test_a_dict_batch_is_the_one_argument_of_a_forward_that_takes_a_feed_dict() -> None:
    g = torch.Generator().manual_seed(0)
    batch = {"user_id": torch.randint(0, 10, (8,), generator=g), "item_id": torch.randint(0, 20, (8, 2), generator=g)}
    model = FeedDict()

    def bpr(scores: torch.Tensor, _t: object) -> torch.Tensor:
        return -F.logsigmoid(scores[:, 0] - scores[:, 1]).mean()
    r = firstdiv.learning_ledger(model, batch, bpr, torch.optim.Adam(model.parameters(), 1e-2), overfit_steps=0)
    assert r.status.value != "SKIPPED", r.reason


def test_a_one_tuple_holding_a_dict_is_the_one_argument_of_a_forward_that_takes_a_batch() -> None:
    """A CLIP-style batch ``(batch_dict,)`` into ``forward(self, batch)``: the dict is the argument, not keywords."""
    g = torch.Generator().manual_seed(0)
    batch = {"user_id": torch.randint(0, 10, (8,), generator=g), "item_id": torch.randint(0, 20, (8, 2), generator=g)}
    model = FeedDict()

    def bpr(scores: torch.Tensor, _t: object) -> torch.Tensor:
        return -F.logsigmoid(scores[:, 0] - scores[:, 1]).mean()
    r = firstdiv.learning_ledger(model, (batch,), bpr, torch.optim.Adam(model.parameters(), 1e-2), overfit_steps=0)
    assert r.status.value != "SKIPPED", r.reason


class IdsAndLength(nn.Module):
    """A text classifier whose forward takes the token ids and their lengths (a fixed signature)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.out = nn.Embedding(30, 8), nn.Linear(8, 2)

    def forward(self, ids: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
        mask = torch.arange(ids.shape[1])[None] < length[:, None]
        return self.out((self.emb(ids) * mask[..., None]).sum(1) / length[:, None])


@pytest.mark.parametrize("target_key", ["label", "sentiment"])
def test_a_dict_key_a_fixed_forward_does_not_take_is_the_target_not_a_keyword(target_key: str) -> None:
    """``{"ids", "length", "label"}`` into ``forward(self, ids, length)``: the key the forward cannot take is the
    loss's target (one such key, no targets key), never a keyword that makes the model raise."""
    g = torch.Generator().manual_seed(0)
    batch = {"ids": torch.randint(0, 30, (16, 6), generator=g), "length": torch.randint(1, 7, (16,), generator=g)}
    batch[target_key] = (batch["ids"][:, 0] % 2).long()
    model = IdsAndLength()
    r = firstdiv.learning_ledger(model, batch, F.cross_entropy, torch.optim.Adam(model.parameters(), 1e-2),
                                 overfit_steps=0)
    assert r.status.value != "SKIPPED", r.reason
    assert "raised" not in " ".join(f.message for f in r.findings)


def test_the_ledger_does_not_call_parameters_stuck_while_a_warmup_holds_their_lr_at_zero() -> None:
    torch.manual_seed(0)
    model, (x, y) = nn.Linear(4, 1), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.0 if step < 10 else 1.0)

    def train_step() -> torch.Tensor:
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        return loss
    r = firstdiv.learning_ledger(model, (x, y), F.mse_loss, opt, train_step=train_step, overfit_steps=0)
    update = next(f for f in r.findings if f.where == "PARAMETER_UPDATE")
    assert update.status.value == "PASS" and "lr 0" in update.message, update.message


def test_a_controlled_step_that_diverges_where_the_programs_clipped_steps_do_not_is_a_warn() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    x, y = _data()
    x = x * 50
    opt = torch.optim.SGD(model.parameters(), lr=1.0)

    def train_step() -> torch.Tensor:
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
        opt.step()
        return loss
    r = firstdiv.step_probe(model, (x, y), F.mse_loss, opt, train_step=train_step)
    assert _kinds(r).get("step.diverges") == "WARN", r


class CachingCritic(nn.Module):
    """A critic that keeps its last outputs for logging (``self.outputs['q'] = q``), as RL code does."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.outputs = nn.Linear(4, 1), {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.q(x)
        self.outputs["q"] = q
        return q


def test_a_forward_that_caches_its_outputs_on_the_module_gets_its_cache_back() -> None:
    from firstdiv.instruments._core.state import guarded

    model, (x, _) = CachingCritic(), _data()
    cache = model.outputs
    with guarded(model):
        model(x)
    assert model.outputs is cache and cache == {}
    model(x)
    kept = model.outputs["q"]
    with guarded(model):
        model(x * 2)
    assert model.outputs["q"] is kept


def test_a_warmup_schedulers_after_scheduler_is_restored_in_place() -> None:
    from firstdiv.instruments._core.state import guarded

    class Warmup(torch.optim.lr_scheduler.LRScheduler):
        def __init__(self, optimizer: torch.optim.Optimizer, after: torch.optim.lr_scheduler.LRScheduler) -> None:
            self.after_scheduler = after
            super().__init__(optimizer)

        def get_lr(self) -> list[float]:
            return [g["initial_lr"] for g in self.optimizer.param_groups]

        def step(self, epoch: int | None = None) -> None:
            super().step(epoch)
            self.after_scheduler.step()

    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    after = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    warm = Warmup(opt, after)
    epoch = after.last_epoch
    with guarded(model, opt, warm):
        for _ in range(3):
            warm.step()
    assert warm.after_scheduler is after and after.last_epoch == epoch


class BatchForward(nn.Module):
    """A LightningModule-style model whose forward takes the whole batch: firstdiv cannot call it as read."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.fc = nn.Linear(4, 8), nn.Linear(8, 1)

    def forward(self, batch: tuple) -> torch.Tensor:
        x, _y = batch
        return self.fc(torch.relu(self.body(x)))


def test_parameters_no_optimizer_owns_are_confirmed_by_train_step_when_the_model_cannot_be_called() -> None:
    torch.manual_seed(0)
    model, (x, y) = BatchForward(), _data()
    opt = torch.optim.SGD(model.fc.parameters(), lr=0.1)  # the body left out

    def train_step() -> torch.Tensor:
        opt.zero_grad()
        loss = F.mse_loss(model((x, y)), y)
        loss.backward()
        opt.step()
        return loss
    r = firstdiv.four_structures(model, opt, (x, y), F.mse_loss, train_step=train_step)
    assert (r.first_divergence.where, r.first_divergence.kind) == ("body.weight", "optimizer.missing_parameter"), r


def test_an_sgd_subclass_or_a_step_hook_that_changes_the_update_is_not_held_to_plain_sgds_rule() -> None:
    class ClippedSGD(torch.optim.SGD):  # its own step: an update clipped element-wise
        @torch.no_grad()
        def step(self, closure=None):
            for g in self.param_groups:
                for p in g["params"]:
                    if p.grad is not None:
                        p.add_(p.grad.clamp(-1e-3, 1e-3), alpha=-g["lr"])

    torch.manual_seed(0)
    model, (x, y) = nn.Linear(4, 1), _data()
    r = firstdiv.step_probe(model, (x, y), F.mse_loss, ClippedSGD(model.parameters(), lr=0.1))
    assert "step.update_rule" not in {k for k, v in _kinds(r).items() if v == "FAIL"}, r
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.register_step_post_hook(lambda o, *_: [p.mul_(0.999) for g in o.param_groups for p in g["params"]])
    r = firstdiv.step_probe(model, (x, y), F.mse_loss, opt)
    assert "step.update_rule" not in {k for k, v in _kinds(r).items() if v == "FAIL"}, r
