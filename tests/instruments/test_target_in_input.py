"""``task.target_in_input``: targets found value for value in an input the model reads for them (a forecast horizon
inside the input window, the label among a row's fields), confirmed on the ledger's copy by changing that input alone;
reconstructions, shifted sequences a causal model cannot see ahead in, copies the model never reads and values that
match by chance give no finding."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv

pytestmark = __import__("pytest").mark.usefixtures("one_thread")

WINDOW, HORIZON = 24, 6


def _series(n: int, length: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    t = torch.arange(length, dtype=torch.float32)
    phase = torch.rand(n, 1, generator=gen) * 6.28
    return torch.sin(0.3 * t + phase) + 0.1 * torch.randn(n, length, generator=gen)


def _task(model: nn.Module, batch, loss_fn) -> firstdiv.Finding:
    r = firstdiv.learning_ledger(model, batch, loss_fn, torch.optim.Adam(model.parameters(), 1e-3), overfit_steps=0)
    return next(f for f in r.findings if f.where == "TASK")


def _forecaster() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(WINDOW, 32), nn.ReLU(), nn.Linear(32, HORIZON))


def test_horizon_inside_the_window_fails():
    s = _series(32, WINDOW + HORIZON)
    x, y = s[:, :WINDOW], s[:, WINDOW - HORIZON:WINDOW]  # the horizon sliced from inside the window
    f = _task(_forecaster(), (x, y), F.mse_loss)
    assert f.check == "task.target_in_input", f.message
    assert f.status.name == "FAIL"
    assert f.evidence["target_in_input"]["copied"] == HORIZON


def test_horizon_after_the_window_passes():
    s = _series(32, WINDOW + HORIZON)
    f = _task(_forecaster(), (s[:, :WINDOW], s[:, WINDOW:]), F.mse_loss)
    assert f.check != "task.target_in_input", f.message


class _Fields(nn.Module):
    """Embedding-bag over categorical fields (one table, field offsets added inside), logit out."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.offsets = torch.tensor([0, 2, 12, 22])
        self.emb = nn.Embedding(32, 8)
        self.out = nn.Linear(8 * 4, 1)

    def forward(self, fields: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(fields + self.offsets).flatten(1)).squeeze(1)


def _rows(n: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    fields = torch.stack([torch.randint(0, 2, (n,), generator=gen)] + [torch.randint(0, 10, (n,), generator=gen)
                                                                       for _ in range(3)], 1)
    label = ((fields[:, 1] + fields[:, 2]) > 9).float()
    return fields, label


def test_label_among_the_fields_fails():
    fields, label = _rows()
    fields[:, 0] = label.long()  # the label written into the first field
    f = _task(_Fields(), (fields, label), F.binary_cross_entropy_with_logits)
    assert f.check == "task.target_in_input" and f.status.name == "FAIL", f.message


def test_fields_without_the_label_pass():
    fields, label = _rows()
    f = _task(_Fields(), (fields, label), F.binary_cross_entropy_with_logits)
    assert f.check != "task.target_in_input", f.message


class _CausalLM(nn.Module):
    def __init__(self, vocab: int = 50) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(vocab, 16)
        self.rnn = nn.GRU(16, 16, batch_first=True)
        self.head = nn.Linear(16, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.emb(ids))[0])


def test_next_token_labels_of_a_causal_model_pass():
    ids = torch.randint(0, 50, (16, 13), generator=torch.Generator().manual_seed(0))
    x, y = ids[:, :-1], ids[:, 1:]  # y[t] == x[t + 1]: a copy the model cannot see from position t
    f = _task(_CausalLM(), (x, y), lambda o, t: F.cross_entropy(o.flatten(0, 1), t.flatten()))
    assert f.check != "task.target_in_input", f.message


def test_reconstruction_passes():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 4), nn.ReLU(), nn.Linear(4, 20))
    x = torch.randn(32, 20)
    f = _task(model, (x, x.clone()), F.mse_loss)
    assert f.check != "task.target_in_input", f.message


class _IgnoresSecond(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(WINDOW, HORIZON)

    def forward(self, past: torch.Tensor, future: torch.Tensor) -> torch.Tensor:
        return self.net(past)  # the future is handed over (for plotting) but never read


def test_copy_the_model_never_reads_passes():
    s = _series(32, WINDOW + HORIZON)
    past, future = s[:, :WINDOW], s[:, WINDOW:]
    f = _task(_IgnoresSecond(), ((past, torch.cat([past[:, HORIZON:], future], 1)), future), F.mse_loss)
    assert f.check != "task.target_in_input", f.message


def test_values_that_match_by_chance_pass():
    gen = torch.Generator().manual_seed(1)
    fields = torch.randint(0, 2, (8, 4), generator=gen)
    label = fields[:, 0].float()  # binary over 8 examples: 8 bits, a coincidence any column could show
    f = _task(_Fields(), (fields, label), F.binary_cross_entropy_with_logits)
    assert f.check != "task.target_in_input", f.message
