"""What the first contact of batch public-35 showed (the new-behaviour tests fail on the code that measured it):

- an energy-based model trained with SGD at ``lr * eps**2 / 2`` (8e-4): its last bias got a gradient of 2e-6, an update
  of 1.5e-9, under half a float32 step of the bias -- the step is real and leaves it bit-identical, and UPDATE FAILed
  ``claim.update.not_updated`` ("its param group has lr=0.00078"). A parameter the optimizer owns at a positive lr that
  one more step of its copy at a raised lr moves is held only by the size of the update (a note); one that does not move
  even then (not owned) still FAILs;
- TD7's critic target ``reward + not_done * gamma * Q.clamp(min_target, max_target)`` while the clamp range is still
  [0, 0] (before the first target update): flipping ``not_done`` leaves the loss bit-identical, and TASK FAILed
  ``task.mask_unread``. The mask is read, through a factor that is zero at this state: filled with NaN it carries the
  NaN into the loss. A mask the loss never touches still FAILs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import Status


class _TinyBias(nn.Module):
    """A regressor whose bias enters the output scaled by 1e-5 (a bias deep in a network, after a saturated unit)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)
        self.deep_bias = nn.Parameter(torch.tensor([0.5]))

    def forward(self, x):
        return self.lin(x) + 1e-5 * self.deep_bias


def _tiny_bias_program(own_bias: bool = True):
    torch.manual_seed(0)
    model, x = _TinyBias(), torch.randn(32, 4)
    y = x.sum(1, keepdim=True)
    params = model.parameters() if own_bias else model.lin.parameters()
    return model, (x, y), F.mse_loss, torch.optim.SGD(params, lr=1e-3)


def _update(report):
    return next(f for f in report.findings if f.check.startswith("claim.update"))


def test_an_update_below_float32_resolution_is_a_note_not_a_stuck_parameter():
    model, batch, loss_fn, opt = _tiny_bias_program()
    report = firstdiv.six_claims(model, batch, loss_fn, opt)
    update = _update(report)
    assert update.status is Status.PASS, update.message
    assert "deep_bias" in update.message and "resolution" in update.message


def test_a_parameter_the_optimizer_does_not_own_still_fails_update():
    model, batch, loss_fn, opt = _tiny_bias_program(own_bias=False)
    report = firstdiv.six_claims(model, batch, loss_fn, opt)
    update = _update(report)
    assert update.status is Status.FAIL and update.check == "claim.update.not_updated", update.message


class _Critic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, s):
        return self.q(s)


def _td_program(read_mask: bool, clamp_hi: float):
    torch.manual_seed(0)
    critic, target = _Critic(), _Critic()
    s, s2 = torch.randn(64, 3), torch.randn(64, 3)
    reward, not_done = torch.randn(64, 1), (torch.rand(64, 1) > 0.1).float()

    def loss_fn(q, targets):
        next_s, r, nd = targets
        with torch.no_grad():
            bootstrap = target(next_s).clamp(0.0, clamp_hi)  # TD7's value clipping: [0, 0] before the first update
            y = r + (nd if read_mask else 1.0) * 0.99 * bootstrap
        return F.smooth_l1_loss(q, y)

    return critic, (s, (s2, reward, not_done)), loss_fn, torch.optim.Adam(critic.parameters(), lr=3e-4)


def _task(report):
    return next(f for f in report.findings if f.check.startswith("task.mask") or f.where == "TASK")


def test_a_mask_read_through_a_factor_zero_at_this_state_is_no_unread_mask():
    model, batch, loss_fn, opt = _td_program(read_mask=True, clamp_hi=0.0)
    report = firstdiv.learning_ledger(model, batch, loss_fn, opt)
    assert not any(f.check == "task.mask_unread" for f in report.findings), report.render()
    assert report.status is not Status.FAIL or report.first_divergence.kind != "task.mask_unread"


def test_a_mask_the_loss_never_reads_still_fails():
    model, batch, loss_fn, opt = _td_program(read_mask=False, clamp_hi=10.0)
    report = firstdiv.learning_ledger(model, batch, loss_fn, opt)
    assert report.status is Status.FAIL and report.first_divergence.kind == "task.mask_unread", report.render()


class _HiddenAndLogits(nn.Module):
    """A causal LM returning ``(last_hidden_states, logits)``, its hidden size below the vocabulary (SimCTG's model)."""

    def __init__(self, vocab: int = 40, hidden: int = 8) -> None:
        super().__init__()
        self.emb, self.head = nn.Embedding(vocab, hidden), nn.Linear(hidden, vocab)

    def forward(self, input_ids, labels=None):
        h = self.emb(input_ids)
        return h, self.head(h)


def _lm_program(shifted: bool):
    torch.manual_seed(0)
    model, tokens = _HiddenAndLogits(), torch.randint(10, 40, (16, 13))
    ids, labels = (tokens[:, :-1], tokens[:, 1:]) if shifted else (tokens[:, :-1], tokens[:, :-1])

    def loss_fn(outputs, labels):
        _, logits = outputs
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))

    return model, {"input_ids": ids, "labels": labels.clone()}, loss_fn, torch.optim.Adam(model.parameters(), 1e-3)


def test_a_model_returning_hidden_states_before_its_logits_gets_its_task_checked():
    model, batch, loss_fn, opt = _lm_program(shifted=True)
    report = firstdiv.learning_ledger(model, batch, loss_fn, opt, task="language_model")
    task = next(f for f in report.findings if f.where == "TASK")
    assert task.status is not Status.SKIPPED and "raised" not in task.message, task.message


def test_unshifted_labels_of_such_a_model_fail_target_not_shifted():
    model, batch, loss_fn, opt = _lm_program(shifted=False)
    report = firstdiv.learning_ledger(model, batch, loss_fn, opt, task="language_model")
    assert report.status is Status.FAIL and report.first_divergence.kind == "task.target_not_shifted", str(report)
