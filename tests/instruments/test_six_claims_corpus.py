"""six_claims' EVALUATION claim on evaluation code in the shapes real programs take: an EMA copy evaluated through the
eval_fn's closure, a padding mask that turns eval-mode attention into NaN, a metric that is NaN, and an evaluation
that is random with every module in eval mode."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

import firstdiv


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _evaluation(report):
    return next(f for f in report.findings if f.check.startswith("claim.evaluation"))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 3))

    def forward(self, x):
        return self.body(x)


def _ema_program(forget_eval: bool):
    torch.manual_seed(0)
    x, y = torch.randn(24, 8), torch.randint(0, 3, (24,))
    model = Classifier()
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.99))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def validate(_model, batch):  # evaluates the EMA weights, as EMA training loops do
        inputs, targets = batch
        ema.train() if forget_eval else ema.eval()
        with torch.no_grad():
            return F.cross_entropy(ema(inputs), targets).item()
    return model, ema, opt, (x, y), validate


def test_ema_copy_evaluated_in_train_mode_fails_naming_the_ema_module():
    model, ema, opt, batch, validate = _ema_program(forget_eval=True)
    ema.eval()
    before = {k: v.clone() for k, v in ema.state_dict().items()}
    report = firstdiv.six_claims(model, batch, F.cross_entropy, opt, eval_fn=validate)
    f = _evaluation(report)
    assert f.status == firstdiv.Status.FAIL and f.check == "claim.evaluation.train_mode"
    assert "ema.module.body.2" in f.message and "EMA copy" in f.message
    assert f.evidence["repeat_differs"] is not None  # dropout on: two calls on the same batch disagree
    assert not ema.training  # the user's EMA is left in the mode it was in, with its values
    assert all(torch.equal(before[k], v) for k, v in ema.state_dict().items())


def test_ema_copy_evaluated_in_eval_mode_passes():
    model, _ema, opt, batch, validate = _ema_program(forget_eval=False)
    f = _evaluation(firstdiv.six_claims(model, batch, F.cross_entropy, opt, eval_fn=validate))
    assert f.status == firstdiv.Status.PASS and f.evidence["ran_in_eval_mode"] == 1


class PaddedEncoder(nn.Module):
    def __init__(self, invert: bool):
        super().__init__()
        self.invert = invert
        self.embed = nn.Embedding(20, 16, padding_idx=0)
        layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(16, 2)

    def forward(self, tokens):
        mask = tokens != 0 if self.invert else tokens == 0
        h = self.encoder(self.embed(tokens), src_key_padding_mask=mask)
        return self.head(h.mean(1))


def _padded_batch():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(1, 20, (6, 7), generator=g)
    tokens[1:, 4:] = 0  # the first sentence is the longest: no pad in its row
    return tokens, torch.randint(0, 2, (6,), generator=g)


def _accuracy(model, batch):
    tokens, labels = batch
    model.eval()
    with torch.no_grad():
        acc = (model(tokens).argmax(-1) == labels).float().mean().item()
    model.train()
    return acc


@pytest.mark.parametrize("invert", [True, False])
def test_eval_mode_nan_from_an_inverted_padding_mask_fails(invert):
    torch.manual_seed(0)
    model = PaddedEncoder(invert)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    f = _evaluation(firstdiv.six_claims(model, _padded_batch(), F.cross_entropy, opt, eval_fn=_accuracy))
    if invert:  # accuracy stays finite (argmax of NaN), the eval-mode logits do not
        assert f.status == firstdiv.Status.FAIL and f.check == "claim.evaluation.non_finite"
        assert "encoder" in f.message and f.evidence["non_finite_outputs"] > 0
    else:
        assert f.status == firstdiv.Status.PASS


def test_non_finite_metric_fails():
    torch.manual_seed(0)
    model = Classifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def rare_class_loss(m, batch):  # the loss on class 2 only: the batch has none, the mean of nothing is NaN
        inputs, targets = batch
        m.eval()
        with torch.no_grad():
            keep = targets == 2
            out = F.cross_entropy(m(inputs)[keep], targets[keep]).item()
        m.train()
        return {"rare_loss": out}
    batch = (torch.randn(8, 8), torch.randint(0, 2, (8,)))
    f = _evaluation(firstdiv.six_claims(model, batch, F.cross_entropy, opt, eval_fn=rare_class_loss))
    assert f.status == firstdiv.Status.FAIL and f.check == "claim.evaluation.non_finite" and "nan" in f.message


def test_random_evaluation_with_modules_in_eval_mode_warns_and_leaves_the_rng():
    torch.manual_seed(0)
    model = Classifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def noisy_eval(m, batch):  # test-time augmentation drawn from the global RNG
        m.eval()
        with torch.no_grad():
            out = F.cross_entropy(m(batch[0] + 0.5 * torch.randn_like(batch[0])), batch[1]).item()
        m.train()
        return out
    batch = (torch.randn(8, 8), torch.randint(0, 3, (8,)))
    rng = torch.get_rng_state()
    f = _evaluation(firstdiv.six_claims(model, batch, F.cross_entropy, opt, eval_fn=noisy_eval))
    assert f.status == firstdiv.Status.WARN and f.check == "claim.evaluation.not_repeatable"
    assert torch.equal(rng, torch.get_rng_state())


def test_a_semi_gradient_objective_is_recognised_by_its_off_graph_reads():
    """An actor-critic advantage R - value.item() takes a value off the graph: -grad is not the gradient of the loss
    it reports, so a rise along -grad is no evidence of a broken gradient there."""
    from firstdiv.instruments._core.batch import split_batch
    from firstdiv.instruments.six_claims._objective_probes import _off_graph_reads

    torch.manual_seed(0)
    net = nn.Linear(4, 2)
    x, returns = torch.randn(8, 4), torch.randn(8)

    def actor_critic_loss(out, r):
        value = out[:, 1]
        advantage = r - torch.tensor([v.item() for v in value])
        return -(out[:, 0] * advantage).mean() + torch.nn.functional.smooth_l1_loss(value, r)

    assert _off_graph_reads(net, split_batch((x, returns)), actor_critic_loss) == ["item()"]
    assert _off_graph_reads(net, split_batch((x, returns)), lambda out, r: (out[:, 1] - r).pow(2).mean()) == []
