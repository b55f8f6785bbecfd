"""What public-23's first contact showed, each fixed in general (tests/realworld/README.md):

- an evaluation over a dataset that binarizes its images as it serves them (``torch.bernoulli`` in ``__getitem__``:
  pytorch-generative's PixelCNN) draws bernoulli samples and returns a different number each call; six_claims read
  those draws as dropout masks inside evaluation and FAILed the program, although no module of the model was running
  when they were drawn. Only masks drawn inside the model's forward are masks; draws outside it leave evaluation
  "not repeatable" (a WARN that names them);
- a local-attention LM whose causal mask was dropped inside each window (windows starting at the middle position)
  passed future_visible, which changed only the middle token: the window boundary sees nothing of the next window;
- SAC's Q network, called as ``critic(state, action)``, got its ``[state, action]`` list as one argument, so every
  link of the learning ledger said "could not check";
- UMNN-MAF's log-Jacobian dropped from its log-likelihood (and, across the corpus, a dozen flows with a log-determinant
  dropped, sign-flipped or broken by a mask) trained without a finding: the loss's log-determinant is now compared
  with autograd's log|det dz/dx| wherever the loss is read to be a standard-normal change-of-variables NLL.
"""

from __future__ import annotations

import math

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


class _Coupling(nn.Module):
    """A 2-D affine coupling flow (RealNVP's form): z2 = x2 * exp(s(x1)) + t(x1); returns (z, log|det|)."""

    def __init__(self, sign_flipped: bool = False, reads_own_half: bool = False) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 2))
        self.sign_flipped, self.reads_own_half = sign_flipped, reads_own_half

    def forward(self, x):
        x1, x2 = x[:, :1], x[:, 1:]
        s, t = self.net(x1 + x2 if self.reads_own_half else x1).chunk(2, dim=1)
        z = torch.cat([x1, x2 * s.exp() + t], dim=1)
        log_det = s.sum(1)
        return z, -log_det if self.sign_flipped else log_det


def _flow_objective(drop_log_det: bool = False, **bug):
    torch.manual_seed(0)
    flow = _Coupling(**bug)
    x = torch.randn(64, 2, generator=torch.Generator().manual_seed(4)) * torch.tensor([1.0, 0.3])

    def nll(out, _targets=None):
        z, log_det = out
        log_pz = -0.5 * z.pow(2).sum(1) - z.shape[1] * 0.5 * math.log(2 * math.pi)
        return -(log_pz if drop_log_det else log_pz + log_det).mean()

    report = firstdiv.learning_ledger(flow, (x,), nll, torch.optim.Adam(flow.parameters(), lr=1e-3))
    return next(f for f in report.findings if f.where == "OBJECTIVE")


def test_a_flows_log_determinant_that_matches_autograd_is_confirmed():
    objective = _flow_objective()
    assert objective.status is Status.PASS and objective.evidence["log_det_confirmed_by_autograd"] == 1


def test_a_log_determinant_dropped_from_the_loss_fails():
    objective = _flow_objective(drop_log_det=True)
    assert objective.status is Status.FAIL and objective.check == "objective.log_det_mismatch"
    assert objective.evidence["log_det_output"] is None


def test_a_sign_flipped_log_determinant_fails():
    objective = _flow_objective(sign_flipped=True)
    assert objective.status is Status.FAIL and objective.check == "objective.log_det_mismatch"
    assert objective.evidence["log_det_sign_in_loss"] == 1.0


def test_a_coupling_that_reads_the_half_it_transforms_fails():
    objective = _flow_objective(reads_own_half=True)
    assert objective.status is Status.FAIL and objective.check == "objective.log_det_mismatch"


def test_a_vae_returning_its_reconstruction_and_kl_is_not_judged_a_flow():
    class TinyVAE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc, self.dec = nn.Linear(2, 4), nn.Linear(2, 2)

        def forward(self, x):
            mu, logvar = self.enc(x).chunk(2, dim=1)
            kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1)
            return self.dec(mu), kl

    torch.manual_seed(0)
    vae = TinyVAE()
    x = torch.randn(64, 2, generator=torch.Generator().manual_seed(5))
    report = firstdiv.learning_ledger(vae, (x,), lambda out, _t=None: ((out[0] - x).pow(2).sum(1) + out[1]).mean(),
                                      torch.optim.Adam(vae.parameters(), lr=1e-3))
    objective = next(f for f in report.findings if f.where == "OBJECTIVE")
    assert objective.check != "objective.log_det_mismatch"
