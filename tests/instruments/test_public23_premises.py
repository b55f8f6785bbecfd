"""What public-23's first contact showed, each fixed in general (tests/realworld/README.md):

- an evaluation over a dataset that binarizes its images as it serves them (``torch.bernoulli`` in ``__getitem__``:
  pytorch-generative's PixelCNN) draws bernoulli samples and returns a different number each call; six_claims read
  those draws as dropout masks inside evaluation and FAILed the program, although no module of the model was running
  when they were drawn. Only masks drawn inside the model's forward are masks; draws outside it leave evaluation
  "not repeatable" (a WARN that names them).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.report import Status


class _Binarized(torch.utils.data.Dataset):
    """Images binarized afresh each time they are served (dynamic binarization)."""

    def __init__(self, n: int) -> None:
        self.probs = torch.rand(n, 12, generator=torch.Generator().manual_seed(1))
        self.g = torch.Generator().manual_seed(2)

    def __len__(self) -> int:
        return len(self.probs)

    def __getitem__(self, i):
        return torch.bernoulli(self.probs[i], generator=self.g)


def _program(dropout_in_forward: bool = False):
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 12))

        def forward(self, x):
            h = self.body(x)
            return F.dropout(h, 0.3) if dropout_in_forward else h  # F.dropout's default is training=True

    model = Net()
    test = torch.utils.data.DataLoader(_Binarized(16), batch_size=8)

    def loss_fn(logits, x):
        return F.binary_cross_entropy_with_logits(logits, x)

    @torch.no_grad()
    def eval_fn(m, _batch):
        m.eval()
        total = sum(float(loss_fn(m(x), x)) for x in test)
        m.train()
        return total

    x = torch.bernoulli(torch.rand(16, 12, generator=torch.Generator().manual_seed(3)))
    return model, (x, x), loss_fn, torch.optim.Adam(model.parameters(), lr=1e-3), eval_fn


def _evaluation(report):
    return next(f for f in report.findings if f.where == "EVALUATION")


def test_bernoulli_draws_of_the_evaluation_data_are_no_dropout_mask():
    model, batch, loss_fn, opt, eval_fn = _program()
    report = firstdiv.six_claims(model, batch, loss_fn, opt, eval_fn=eval_fn)
    evaluation = _evaluation(report)
    assert evaluation.status is Status.WARN and evaluation.check == "claim.evaluation.not_repeatable"
    assert evaluation.evidence["random_draws_outside_model"] > 0 and "outside the model's forward" in evaluation.message
    assert report.status is not Status.FAIL


def test_a_functional_dropout_inside_the_forward_still_fails():
    model, batch, loss_fn, opt, eval_fn = _program(dropout_in_forward=True)
    evaluation = _evaluation(firstdiv.six_claims(model, batch, loss_fn, opt, eval_fn=eval_fn))
    assert evaluation.status is Status.FAIL and evaluation.check == "claim.evaluation.random_masks"


class _WindowedLM(nn.Module):
    """A language model whose attention stays inside windows of ``window`` tokens (a local attention), causal inside
    each window unless ``causal`` is False (the mask dropped)."""

    def __init__(self, vocab: int = 24, dim: int = 16, window: int = 8, causal: bool = True) -> None:
        super().__init__()
        self.window, self.causal = window, causal
        self.emb = nn.Embedding(vocab, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, ids):
        b, t = ids.shape
        q, k, v = self.qkv(self.emb(ids)).view(b, t // self.window, self.window, -1).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        if self.causal:
            above = torch.ones(self.window, self.window, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(above, float("-inf"))
        return self.out((scores.softmax(-1) @ v).reshape(b, t, -1))


def _lm_dependency(causal: bool):
    torch.manual_seed(0)
    model = _WindowedLM(causal=causal)
    ids = torch.randint(0, 24, (4, 33), generator=torch.Generator().manual_seed(1))
    report = firstdiv.learning_ledger(model, (ids[:, :-1], ids[:, 1:]),
                                      lambda logits, y: F.cross_entropy(logits.transpose(1, 2), y),
                                      torch.optim.Adam(model.parameters(), lr=1e-3))
    return next(f for f in report.findings if f.where == "DEPENDENCY")


def test_a_causal_mask_dropped_inside_local_windows_is_seen_off_the_window_boundary():
    # 32 positions in windows of 8: the middle (16) starts a window, which sees nothing of the window before it
    dependency = _lm_dependency(causal=False)
    assert dependency.status is Status.FAIL and dependency.check == "dependency.future_visible"
    assert dependency.evidence["changed_position"] == 17


def test_a_local_attention_causal_inside_its_windows_passes():
    assert _lm_dependency(causal=True).status is Status.PASS


class _Critic(nn.Module):
    """A Q network called as ``critic(state, action)``."""

    def __init__(self) -> None:
        super().__init__()
        self.value = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, state, action=None):
        return self.value(torch.cat([state, action], dim=1)).squeeze(1)


def test_a_list_of_a_several_argument_forwards_arguments_is_spread():
    torch.manual_seed(0)
    critic = _Critic()
    g = torch.Generator().manual_seed(2)
    state, action = torch.randn(32, 3, generator=g), torch.randn(32, 2, generator=g)
    target = state.sum(1) - action[:, 0]
    report = firstdiv.learning_ledger(critic, ([state, action], target), F.mse_loss,
                                      torch.optim.Adam(critic.parameters(), lr=1e-3))
    assert all(f.status is not Status.SKIPPED for f in report.findings), [f.message for f in report.findings]
    assert report.status is Status.PASS


def test_a_list_into_a_one_parameter_forward_stays_one_argument():
    class Pyramid(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(4, 1)

        def forward(self, levels):
            return self.head(sum(levels)).squeeze(1)

    torch.manual_seed(0)
    model = Pyramid()
    g = torch.Generator().manual_seed(3)
    levels = [torch.randn(16, 4, generator=g) for _ in range(3)]
    report = firstdiv.learning_ledger(model, (levels, sum(levels).sum(1)), F.mse_loss,
                                      torch.optim.Adam(model.parameters(), lr=1e-2))
    assert all(f.status is not Status.SKIPPED for f in report.findings), [f.message for f in report.findings]
