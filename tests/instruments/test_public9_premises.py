"""Premises read from the program before a FAIL, each from a false FAIL a correct public program met at first contact
(batch public-9): a loss_fn that squeezes ``[B, 1]`` outputs against ``[B]`` 0/1 targets (each output meets only its
own target), a train_step that steps on other batches whose gradient points against the probe batch's at
initialization (equal losses, ln 2, are no evidence of the same batch), and a one-layer LSTM built with ``dropout=``
(which torch applies only between layers: no mode to get wrong)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv


def _fails(r: firstdiv.Report) -> dict[str, str]:
    return {f.check: f.message for f in r.findings if f.status.value == "FAIL"}


def _binary(n: int = 64, seed: int = 0, label: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    y = (x[:, 0] > 0).float() if label is None else torch.full((n,), label)
    return x, y


def test_a_loss_fn_that_lines_up_b1_outputs_with_b_targets_is_no_shape_broadcast() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = _binary()

    def squeezed(out: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(out.squeeze(), t)
    assert "objective.shape_broadcast" not in _fails(firstdiv.learning_ledger(model, (x, y), squeezed, opt))

    def broadcast(out: torch.Tensor, t: torch.Tensor) -> torch.Tensor:  # [B, 1] against [B]: [B, B]
        return F.mse_loss(out, t)
    r = firstdiv.learning_ledger(model, (x, y), broadcast, opt)
    assert (r.first_divergence.where, r.first_divergence.kind) == ("OBJECTIVE", "objective.shape_broadcast")


def test_a_step_on_other_batches_whose_gradient_points_against_the_probe_batch_is_not_shown_ascent() -> None:
    model = nn.Linear(6, 1)
    nn.init.zeros_(model.weight)
    nn.init.zeros_(model.bias)  # every batch starts at loss ln 2
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    probe = _binary(label=1.0)
    streams = [_binary(seed=s, label=0.0) for s in (1, 2)]  # the loop's own batches: other labels
    state = {"i": 0}

    def loss_fn(out: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(out.squeeze(-1), t)

    def train_step() -> torch.Tensor:
        x, y = streams[state["i"] % 2]
        state["i"] += 1
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    r = firstdiv.step_probe(model, probe, loss_fn, opt, train_step=train_step)
    assert "step.train_step_ascends" not in _fails(r), r
    assert any(f.check == "step.train_step_ascends" and f.status.value == "WARN" for f in r.findings)


@pytest.mark.filterwarnings("ignore:dropout option adds dropout")
def test_a_one_layer_lstm_built_with_dropout_has_no_mode_for_evaluation_to_get_wrong() -> None:
    for layers, fails in ((1, False), (2, True)):
        torch.manual_seed(0)

        class Net(nn.Module):
            def __init__(self, layers: int) -> None:
                super().__init__()
                self.lstm = nn.LSTM(6, 8, num_layers=layers, dropout=0.3, batch_first=True)
                self.head = nn.Linear(8, 2)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.head(self.lstm(x)[0][:, -1])
        model = Net(layers)
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(16, 5, 6, generator=g), torch.randint(0, 2, (16,), generator=g)

        def eval_fn(m: nn.Module, batch: tuple) -> float:  # no m.eval(): the model stays in train mode
            with torch.no_grad():
                return float((m(batch[0]).argmax(1) == batch[1]).float().mean())
        r = firstdiv.six_claims(model, (x, y), F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1),
                                eval_fn=eval_fn)
        assert ("claim.evaluation.train_mode" in _fails(r)) is fails, (layers, r)


def test_a_loss_that_differentiates_inside_itself_is_judged_not_blamed_on_the_program() -> None:
    torch.manual_seed(0)
    critic = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    real, fake = torch.randn(32, 6, generator=g) + 1.0, torch.randn(32, 6, generator=g)

    def loss_fn(out: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:  # WGAN-GP's critic loss, penalty inside
        x = (0.5 * real + 0.5 * fake).requires_grad_(True)
        (grad,) = torch.autograd.grad(critic(x).sum(), x, create_graph=True)
        return 0.5 * critic(fake).mean() - out.mean() + 10 * ((grad.norm(2, dim=1) - 1) ** 2).mean()

    def train_step() -> torch.Tensor:
        loss = loss_fn(critic(real), fake)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    r = firstdiv.learning_ledger(critic, (real, fake), loss_fn, opt, train_step=train_step)
    assert not any("could not judge the update" in f.message for f in r.findings), r
    assert any(f.where == "PARAMETER_UPDATE" and f.status.value == "PASS" for f in r.findings), r


def test_inner_loop_gradients_from_autograd_grad_are_no_backward_of_the_step() -> None:
    """public-10: MAML's inner loop takes ``torch.autograd.grad`` of the weights before the meta step's zero_grad;
    those gradients never reach ``.grad``, so they are not the previous call's gradient left in it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 6, generator=g), torch.randint(0, 2, (32,), generator=g)

    def train_step() -> torch.Tensor:
        params = list(model.parameters())
        inner = torch.autograd.grad(F.cross_entropy(model(x), y), params)  # before zero_grad, as MAML does
        fast = [p - 0.1 * g for p, g in zip(params, inner, strict=True)]
        h = torch.tanh(F.linear(x, fast[0], fast[1]))
        loss = F.cross_entropy(F.linear(h, fast[2], fast[3]), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    r = firstdiv.step_probe(model, (x, y), F.cross_entropy, opt, train_step=train_step)
    assert "step.grad_accumulation" not in _fails(r), r


def _alternating(owned_by_decoder_opt: bool):
    """RecVAE's schedule (public-10): encoder epochs, then decoder epochs, each with its own optimizer; the calls
    watched fall in an encoder phase, where the decoder's gradients pile up unused and its optimizer clears them
    before its own phase."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))
    enc = torch.optim.Adam(model[0].parameters(), lr=1e-3)
    dec = torch.optim.Adam(model[2].parameters() if owned_by_decoder_opt else model[0].parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 6, generator=g), torch.randint(0, 2, (32,), generator=g)
    state = {"i": 0}

    def train_step() -> torch.Tensor:
        opt = enc if (state["i"] // 6) % 2 == 0 else dec  # 6 encoder calls, then 6 decoder calls
        state["i"] += 1
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return model, enc, (x, y), train_step


def test_parameters_another_optimizer_trains_in_other_calls_are_not_stuck_or_accumulating() -> None:
    for probe in (firstdiv.step_probe, firstdiv.six_claims,
                  lambda *a, **k: firstdiv.learning_ledger(*a, **k, overfit_steps=0)):
        model, enc, batch, train_step = _alternating(owned_by_decoder_opt=True)  # each from the encoder phase
        r = probe(model, batch, F.cross_entropy, enc, train_step=train_step)
        assert not {"step.not_updated", "step.grad_accumulation", "update.not_moved",
                    "claim.update.not_updated"} & set(_fails(r)), r
    model, enc, batch, train_step = _alternating(owned_by_decoder_opt=False)  # no optimizer owns the decoder
    r = firstdiv.learning_ledger(model, batch, F.cross_entropy, enc, train_step=train_step, overfit_steps=0)
    assert "optimizer.missing_parameter" in _fails(r), r


class _EMACodebook(nn.Module):
    """zalandoresearch's VectorQuantizerEMA (public-10): the forward rebinds its codebook as new parameters (an EMA
    update written by the program), and the reconstruction reaches the encoder by the straight-through copy only."""

    def __init__(self) -> None:
        super().__init__()
        self.enc, self.dec = nn.Linear(6, 4), nn.Linear(4, 6)
        self.embedding = nn.Parameter(torch.randn(8, 4))
        self.ema_w = nn.Parameter(self.embedding.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.enc(x)
        codes = torch.cdist(z, self.embedding).argmin(1)
        q = self.embedding[codes]
        if self.training:
            onehot = F.one_hot(codes, 8).float()
            self.ema_w = nn.Parameter(0.99 * self.ema_w + 0.01 * onehot.t() @ z)
            self.embedding = nn.Parameter(self.ema_w / 1.0)
        q = z + (q - z).detach()
        return self.dec(q) + 0.0 * F.mse_loss(q.detach(), z)


def test_a_codebook_the_forward_rebinds_is_the_programs_own_update_not_a_broken_link() -> None:
    torch.manual_seed(0)
    model = _EMACodebook()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(32, 6, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(x)  # the program has trained: the optimizer still holds the codebook's first objects
    ledger = firstdiv.learning_ledger(model, (x, x), F.mse_loss, opt)
    assert "optimizer.stale_parameter" not in _fails(ledger), ledger
    before = dict(model.named_parameters())
    reach = firstdiv.reachability(model, (x, x), F.mse_loss)  # runs the forward on the model itself, guarded
    assert "reachability.detached" not in _fails(reach), reach
    assert all(p is before[n] for n, p in model.named_parameters()), "the rebound codebook is put back"
