"""What public-13's first contact showed (tests/realworld/README.md, "What public-13 showed"), each confirmed on the
program's own behaviour: a batch that is the model's positional arguments, padding whose perturbation must stay in
the loss's domain, padding that ends only some rows, and a second view of the images that is no target map."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv

pytestmark = pytest.mark.usefixtures("one_thread")


class JointTagger(nn.Module):
    """A model that computes its own loss from five positional tensors, as a TensorDataset batch hands them."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.intent, self.slot = nn.Embedding(20, 8), nn.Linear(8, 3), nn.Linear(8, 4)

    def forward(self, input_ids, attention_mask, token_type_ids, intent_label_ids, slot_labels_ids):
        h = self.emb(input_ids) * attention_mask[..., None] + 0 * token_type_ids[..., None]
        loss = F.cross_entropy(self.intent(h.mean(1)), intent_label_ids)
        loss = loss + F.cross_entropy(self.slot(h).flatten(0, 1), slot_labels_ids.flatten())
        return loss, self.intent(h.mean(1))


def test_a_list_batch_of_the_models_positional_arguments_is_accepted_and_a_list_that_is_not_is_refused() -> None:
    torch.manual_seed(0)
    model = JointTagger()
    batch = [torch.randint(0, 20, (8, 6)), torch.ones(8, 6), torch.zeros(8, 6, dtype=torch.long),
             torch.randint(0, 3, (8,)), torch.randint(0, 4, (8, 6))]
    r = firstdiv.step_probe(model, batch, lambda outputs, _t: outputs[0], torch.optim.SGD(model.parameters(), 0.1))
    assert r.status.value != "SKIPPED", r.reason
    with pytest.raises(firstdiv.InvalidArgument, match="of length 3"):
        lin = nn.Linear(2, 2)
        firstdiv.step_probe(lin, [torch.ones(1, 2)] * 3, lambda o, t: o.sum(), torch.optim.SGD(lin.parameters(), 0.1))


def _copying(v: int = 9, rows_padded: int = 5):
    """A copy-generator's shape: the model gives probabilities (a softmax), the loss takes -log p[target]; targets end
    with a run of the pad id 0 in ``rows_padded`` of 8 rows."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(v, 16, padding_idx=1), nn.Linear(16, v), nn.Softmax(-1))  # inputs pad with 1
    t = torch.randint(1, v, (8, 7))
    for i in range(rows_padded):
        t[i, 7 - (i % 3 + 2):] = 0
    return model, ((t + 1) % v, t)


def _objective(model, batch, loss_fn) -> firstdiv.Finding:
    r = firstdiv.learning_ledger(model, batch, loss_fn, torch.optim.SGD(model.parameters(), 0.1), overfit_steps=0)
    return next(f for f in r.findings if f.where == "OBJECTIVE")


def _nll_of_probs(mask_padding: bool):
    def loss_fn(probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        step_loss = -torch.log(torch.gather(probs, 2, target[..., None]).squeeze(-1) + 1e-12)
        if mask_padding:
            step_loss = step_loss * (target != 0)
        return step_loss.sum() / target.numel()
    return loss_fn


def test_padding_perturbed_with_real_predictions_keeps_probabilities_valid() -> None:
    """Probabilities perturbed by noise turn the log NaN: the old check read that as 'the loss moved'. A masked loss
    now passes (a masked NLL of probabilities is not cross-entropy of them as logits either), an unmasked one still
    fails."""
    model, batch = _copying(rows_padded=7)
    masked = _objective(model, batch, _nll_of_probs(mask_padding=True))
    assert masked.status.value == "PASS", masked.message  # nor read as logits: the masked NLL is a form of its own
    unmasked = _objective(model, batch, _nll_of_probs(mask_padding=False))
    assert unmasked.check == "objective.padding_in_loss", unmasked.message


def test_padding_that_ends_five_of_eight_rows_is_read_as_padding() -> None:
    model, batch = _copying(rows_padded=5)
    assert _objective(model, batch, _nll_of_probs(mask_padding=False)).check == "objective.padding_in_loss"


def test_a_second_view_of_the_images_is_no_target_map() -> None:
    """Two augmented views (one flipped at random): the second is encoded, never compared with a dense output."""
    torch.manual_seed(0)
    x1 = torch.zeros(8, 1, 16, 16)
    for k in range(8):
        x1[k, 0, k:k + 4, 2:6] = 1.0
    x2 = x1.clone()
    x2[::2] = x2[::2].flip(-1)
    enc = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Flatten(), nn.Linear(4 * 16 * 16, 8))

    def loss_fn(q: torch.Tensor, view: torch.Tensor) -> torch.Tensor:
        k = enc(view).detach()
        return F.cross_entropy(F.normalize(q, dim=1) @ F.normalize(k, dim=1).T / 0.1, torch.arange(len(q)))
    r = firstdiv.learning_ledger(enc, (x1, x2), loss_fn, torch.optim.SGD(enc.parameters(), 0.1), overfit_steps=0)
    task = next(f for f in r.findings if f.where == "TASK")
    assert task.check != "task.target_misaligned", task.message


def _smoothing(with_log_softmax: bool):
    def loss_fn(scores: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        soft = torch.full_like(scores, 0.1 / (scores.shape[1] - 1)).scatter(1, y[:, None], 0.9)
        z = scores.log_softmax(-1) if with_log_softmax else scores
        return -(soft * z).sum(-1).mean()
    return loss_fn


def test_label_smoothing_written_on_raw_scores_has_no_minimum_and_on_log_softmax_passes() -> None:
    torch.manual_seed(0)
    model, x, y = nn.Linear(6, 5), torch.randn(32, 6), torch.randint(0, 5, (32,))
    raw = _objective(model, (x, y), _smoothing(with_log_softmax=False))
    assert (raw.status.value, raw.check) == ("FAIL", "objective.unbounded_in_scores"), raw.message
    proper = _objective(model, (x, y), _smoothing(with_log_softmax=True))
    assert proper.status.value == "PASS", proper.message
