"""What public-18's and public-19's first contacts showed (tests/realworld/README.md, "What public-18 showed" and
"What public-19 showed"), confirmed on the program's own behaviour: a batch that starts far below the loss train_step
reports on its own batches can rise 10-fold without diverging; targets that are the whole sequence shifted are the
design's question; a loss reading its model through its closure reads the copy; a causal mask left off only in the
training loop's call is found on that call."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv

pytestmark = pytest.mark.usefixtures("one_thread")


def _stream(lr: float):
    """The declared batch is fitted almost exactly by the initial weights (loss ~1e-4); train_step steps on a stream
    of batches from another rule (loss ~1 there) and returns that loss, as most loops do."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1, bias=False)
    w_true = torch.tensor([[1.5, -2.0, 0.5, 1.0]])
    x = torch.randn(64, 4)
    with torch.no_grad():
        y = model(x) + 0.01 * torch.randn(64, 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(1)

    def train_step() -> float:
        xs = torch.randn(64, 4, generator=g)
        opt.zero_grad()
        loss = F.mse_loss(model(xs), xs @ w_true.T)
        loss.backward()
        opt.step()
        return loss.item()
    return model, (x, y), opt, train_step


def _update(lr: float) -> firstdiv.Finding:
    model, batch, opt, step = _stream(lr)
    r = firstdiv.learning_ledger(model, batch, F.mse_loss, opt, train_step=step, overfit_steps=0)
    return next(f for f in r.findings if f.where == "PARAMETER_UPDATE")


def test_an_easy_batch_rising_within_the_loss_train_step_reports_is_no_divergence() -> None:
    easy = _update(0.05)
    assert (easy.status.value, easy.check) == ("WARN", "update.diverges"), easy.message
    losses, reported = easy.evidence["losses_on_batch"], easy.evidence["train_step_reported"]
    assert max(losses) > 10 * losses[0] and max(losses) < 10 * reported[0], (losses, reported)
    assert "reports on its own batches" in easy.message


def test_a_step_size_that_blows_past_the_reported_loss_still_fails() -> None:
    blown = _update(3.0)
    assert (blown.status.value, blown.check) == ("FAIL", "update.diverges"), blown.message


class SequenceLatent(nn.Module):
    """NRI's shape: an encoder reads the whole trajectory into a latent, a decoder predicts each next state from the
    current one and the latent; its targets are the trajectory shifted by one step (``data[:, 1:]``)."""

    def __init__(self, steps: int = 12, dim: int = 3) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Flatten(), nn.Linear(steps * dim, 8))
        self.decoder = nn.Linear(dim + 8, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.encoder(x)[:, None].expand(-1, x.shape[1] - 1, -1)
        return self.decoder(torch.cat([x[:, :-1], 4 * z], -1))


def test_targets_that_are_the_whole_sequence_shifted_are_the_designs_question_not_a_leak() -> None:
    torch.manual_seed(0)
    data = torch.cumsum(0.1 * torch.randn(32, 12, 3), 1)
    model = SequenceLatent()
    r = firstdiv.learning_ledger(model, (data, data[:, 1:]), F.mse_loss, torch.optim.Adam(model.parameters(), 1e-3),
                                 overfit_steps=0)
    task = next(f for f in r.findings if f.where == "TASK")
    assert task.check != "task.target_in_input" and task.status.value != "FAIL", task.message  # FAILed before
    assert any("shifted by 1 along its axis 1" in n for n in r.details["notes"]), r.details["notes"]


class StoresPosterior(nn.Module):
    """A VAE whose forward stores its posterior on itself (``self.mu``, ``self.logvar``) for the loss to read, as
    VGAE and DiffPool do."""

    def __init__(self) -> None:
        super().__init__()
        self.enc, self.dec = nn.Linear(6, 4), nn.Linear(2, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.mu, self.logvar = self.enc(x).chunk(2, -1)
        return self.dec(self.mu + torch.randn_like(self.mu) * (0.5 * self.logvar).exp())


def test_a_loss_reading_its_model_through_the_closure_reads_the_copy_the_ledger_evaluates() -> None:
    torch.manual_seed(0)
    model, x = StoresPosterior(), torch.randn(32, 6)

    def loss_fn(recon: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        kl = -0.5 * (1 + model.logvar - model.mu.pow(2) - model.logvar.exp()).sum(-1).mean()
        return F.mse_loss(recon, target) + kl

    r = firstdiv.learning_ledger(model, (x, x), loss_fn, torch.optim.Adam(model.parameters(), 1e-3), overfit_steps=0)
    assert r.status.value != "SKIPPED", r.reason  # the user's model never ran: no model.mu to read
    assert not hasattr(model, "mu")


def test_only_the_module_a_copy_was_made_from_is_swapped_not_another_of_its_class() -> None:
    from firstdiv.instruments._core.copy_origin import reading
    from firstdiv.instruments._core.copying import model_copy

    student, teacher = StoresPosterior(), StoresPosterior()

    def loss_fn(out: torch.Tensor, target: torch.Tensor) -> tuple[nn.Module, nn.Module]:
        return student, teacher

    copy = model_copy(student)
    assert reading(loss_fn, copy)(None, None) == (copy, teacher)
    again = model_copy(copy)  # a copy of the copy: the loss already reading the first copy now reads this one
    assert reading(reading(loss_fn, copy), again)(None, None) == (again, teacher)
    assert reading(loss_fn, student) is loss_fn and reading(loss_fn, teacher) is loss_fn


class MaskedLM(nn.Module):
    """A decoder-only LM whose forward applies the causal mask unless told not to (``model(x, mask=False)``)."""

    def __init__(self, vocab: int = 12, dim: int = 16) -> None:
        super().__init__()
        self.emb, self.head = nn.Embedding(vocab, dim), nn.Linear(dim, vocab)
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)

    def forward(self, x: torch.Tensor, mask: bool = True) -> torch.Tensor:
        h = self.emb(x)
        causal = nn.Transformer.generate_square_subsequent_mask(x.shape[1]) if mask else None
        return self.head(h + self.attn(h, h, h, attn_mask=causal, need_weights=False)[0])


@pytest.mark.parametrize("masked_in_training", [True, False])
def test_a_causal_mask_left_off_only_in_the_training_loops_call_is_found_there(masked_in_training) -> None:
    torch.manual_seed(0)
    model = MaskedLM()
    data = torch.randint(0, 12, (16, 17))
    x, y = data[:, :-1], data[:, 1:]
    opt = torch.optim.Adam(model.parameters(), 1e-3)

    def train_step() -> float:
        opt.zero_grad()
        out = model(x) if masked_in_training else model(x, mask=False)
        loss = F.cross_entropy(out.reshape(-1, 12), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss.item()

    r = firstdiv.learning_ledger(model, (x, y), lambda o, t: F.cross_entropy(o.reshape(-1, 12), t.reshape(-1)), opt,
                                 train_step=train_step, overfit_steps=0)
    dep = next(f for f in r.findings if f.where == "DEPENDENCY")
    if masked_in_training:
        assert dep.status.value != "FAIL", dep.message
    else:
        assert (dep.status.value, dep.check) == ("FAIL", "dependency.future_visible"), dep.message
        assert "mask=False" in dep.message and dep.evidence["earlier_predictions_change"] > 0


class HamiltonianField(nn.Module):
    """HNN's shape: the model differentiates its scalar output with respect to its input, so the input requires grad
    (the original builds it with requires_grad=True)."""

    def __init__(self) -> None:
        super().__init__()
        self.h = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dh = torch.autograd.grad(self.h(x).sum(), x, create_graph=True)[0]
        return torch.stack([dh[:, 1], -dh[:, 0]], 1)


def test_a_batch_input_that_requires_grad_keeps_its_grad_through_every_instrument() -> None:
    torch.manual_seed(0)
    model = HamiltonianField()
    x = torch.randn(32, 2, requires_grad=True)
    y = torch.stack([x[:, 1], -x[:, 0]], 1).detach()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    for call in (lambda: firstdiv.learning_ledger(model, (x, y), F.mse_loss, opt, overfit_steps=5),
                 lambda: firstdiv.step_probe(model, (x, y), F.mse_loss, opt),
                 lambda: firstdiv.diagnose(model=model, batch=(x, y), loss_fn=F.mse_loss, optimizer=opt)):
        call()
        assert x.grad is None and x.is_leaf and x.requires_grad
