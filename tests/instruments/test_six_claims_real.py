"""six_claims on programs in the shapes real code takes: correct programs get no FAIL (over seeds where cheap),
real bugs get the expected claim and kind, in the user's own names; what cannot be checked is SKIPPED or a note."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import six_claims
from firstdiv.instruments._core.closure import closure_state
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.six_claims import CLAIMS
from firstdiv.report import Report, Status

torch.set_num_threads(1)


def audit(model, batch, loss_fn, optimizer=None, **kw) -> Report:
    """Call the instrument; assert it left no trace (also on what train_step closes over) and the report round-trips."""
    step = kw.get("train_step")
    held = closure_state(step) if step is not None else []  # e.g. the two optimizers an EmbeddingBag loop steps
    before = Snapshot.take(model, optimizer, step, *held)
    report = six_claims(model, batch, loss_fn, optimizer, **kw)
    assert before.diff(Snapshot.take(model, optimizer, step, *held)) == []
    assert [f.where for f in report.findings] == list(CLAIMS)
    assert str(report) and Report.from_dict(report.to_dict()).to_dict() == report.to_dict()
    return report


def claim(report: Report, name: str):
    return next(f for f in report.findings if f.where == name)


def no_fail(report: Report) -> None:
    assert report.status is not Status.FAIL and report.first_divergence is None, str(report)


def data(seed: int, n: int = 64, d: int = 10):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


# ---- intentionally linear models ------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_linear_regression_is_a_note_not_a_fail(seed):
    torch.manual_seed(seed)
    x = data(seed)
    y = x @ torch.randn(10, 1) + 0.3 * torch.randn(64, 1)
    for model in (nn.Linear(10, 1), nn.Sequential(nn.Linear(10, 8), nn.Linear(8, 1))):
        report = audit(model, (x, y), F.mse_loss, torch.optim.SGD(model.parameters(), lr=0.05))
        no_fail(report)
        rep = claim(report, "REPRESENTATION")
        assert rep.status is Status.PASS and rep.message.startswith("note: output is affine in the input")
        assert "fine for a linear model" in rep.message and rep.message in report.details["notes"]


def test_logistic_regression_on_separable_labels_is_a_note():
    x = data(0)
    y = (x[:, 0] - x[:, 1] > 0).long()
    model = nn.Sequential(nn.Linear(10, 4), nn.Linear(4, 2))
    report = audit(model, (x, y), F.cross_entropy, torch.optim.Adam(model.parameters()))
    no_fail(report)
    assert claim(report, "REPRESENTATION").evidence["linear_fit"]["separable"] is True


def test_stacked_linear_layers_on_a_nonlinear_target_fail_representation():
    x = data(1)
    y = x[:, :1] ** 2  # needs a nonlinearity
    model = nn.Sequential(nn.Linear(10, 16), nn.Linear(16, 16), nn.Linear(16, 1))
    report = audit(model, (x, y), F.mse_loss, torch.optim.Adam(model.parameters()))
    div = report.first_divergence
    assert (div.where, div.kind) == ("REPRESENTATION", "claim.representation.affine")
    assert "collapse" in div.observed and "0, 1, 2" in div.observed  # the user's layer names
    xor = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).long()
    clf = nn.Sequential(nn.Linear(10, 16), nn.Linear(16, 2))
    report = audit(clf, (x, xor), F.cross_entropy, torch.optim.Adam(clf.parameters()))
    assert report.first_divergence.kind == "claim.representation.affine"
    assert "not linearly separable" in report.first_divergence.observed


def _deep(act: bool) -> nn.Module:
    torch.manual_seed(0)
    layers = [nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1)]
    return nn.Sequential(*(m for m in layers if act or not isinstance(m, nn.ReLU))).to(torch.bfloat16)


def test_bf16_tolerance_follows_the_dtype():
    x = data(2).bfloat16()
    y = (x[:, :1].float() ** 2).bfloat16()
    linear = audit(_deep(False), (x, y), F.mse_loss, torch.optim.SGD(_deep(False).parameters(), lr=0.1))
    ev = claim(linear, "REPRESENTATION").evidence
    assert linear.first_divergence.kind == "claim.representation.affine"
    assert ev["threshold"] == 4 * torch.finfo(torch.bfloat16).eps and ev["relative_error"] < ev["threshold"]
    relu = _deep(True)
    report = audit(relu, (x, y), F.mse_loss, torch.optim.SGD(relu.parameters(), lr=0.1))
    assert claim(report, "REPRESENTATION").status is Status.PASS
    assert "not affine" in claim(report, "REPRESENTATION").message


def test_autocast_train_step_with_manual_update_passes():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
    x, y = data(0), torch.randint(0, 3, (64,), generator=torch.Generator().manual_seed(0))

    def train_step():
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-0.1)
        return loss
    report = audit(model, (x, y), F.cross_entropy, None, train_step=train_step)
    assert report.status is Status.PASS, str(report)
    assert "train_step" in claim(report, "UPDATE").message and "restored" in report.side_effects


# ---- manual updates -----------------------------------------------------------------------------

def test_manual_update_that_rebinds_fails_update():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1))
    x = data(0)
    y = x[:, :1].abs()

    def train_step():  # the bug: `p = p - lr * p.grad` rebinds a local name, the parameters never change
        model.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            p = p - 0.1 * p.grad
        return loss
    report = audit(model, (x, y), F.mse_loss, None, train_step=train_step)
    div = report.first_divergence
    assert (div.where, div.kind) == ("UPDATE", "claim.update.not_updated") and "0.weight" in div.observed


def test_manual_update_that_skips_a_layer_names_it():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1))
    x = data(0)
    y = x[:, :1].abs()

    def train_step():
        model.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in model[2].parameters():  # the bug: only the head is updated
                p.add_(p.grad, alpha=-0.1)
        return loss
    report = audit(model, (x, y), F.mse_loss, None, train_step=train_step)
    assert report.first_divergence.kind == "claim.update.not_updated" and "first: 0.weight" in report.first_divergence.observed


def test_train_step_that_raises_skips_update():
    model = nn.Sequential(nn.Linear(10, 4), nn.ReLU(), nn.Linear(4, 1))
    x = data(0)

    def train_step():
        raise RuntimeError("CUDA out of memory\nsecond line")
    report = audit(model, (x, x[:, :1].abs()), F.mse_loss, None, train_step=train_step)
    upd = claim(report, "UPDATE")
    assert upd.status is Status.SKIPPED
    assert upd.message == "UPDATE could not be checked: train_step raised RuntimeError: CUDA out of memory"
    assert report.status is Status.WARN and report.details["warnings"] == [upd.message]


# ---- EVALUATION ---------------------------------------------------------------------------------

def _dropout_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))


def test_eval_fn_that_raises_is_reported_and_warns():
    model = _dropout_net()

    def eval_fn(m, batch):
        raise RuntimeError("metric server unreachable")
    x = data(0)
    report = audit(model, (x, torch.randint(0, 3, (64,))), F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1),
                   eval_fn=eval_fn)
    ev = claim(report, "EVALUATION")
    assert ev.status is Status.SKIPPED
    assert ev.message == "EVALUATION could not be checked: eval_fn raised RuntimeError: metric server unreachable"
    assert report.status is Status.WARN and report.details["warnings"] == [ev.message]


def _good_eval(m, batch):
    m.eval()
    with torch.no_grad():
        out = m(batch[0])
    m.train()
    return (out.argmax(-1) == batch[1]).float().mean().item()


def test_ema_eval_in_train_mode_fails_and_correct_eval_passes():
    from torch.optim.swa_utils import AveragedModel
    ema = AveragedModel(_dropout_net())
    x, y = data(0), torch.randint(0, 3, (64,), generator=torch.Generator().manual_seed(0))

    def via_module(m, batch):  # the bug: ema.module runs in whatever mode the EMA is in (train)
        with torch.no_grad():
            return m.module(batch[0]).argmax(-1)

    def via_train(m, batch):
        m.train()
        with torch.no_grad():
            return m(batch[0]).argmax(-1)
    for eval_fn in (via_module, via_train):
        report = audit(ema, (x, y), F.cross_entropy, torch.optim.SGD(ema.parameters(), lr=0.1), eval_fn=eval_fn)
        assert report.first_divergence.kind == "claim.evaluation.train_mode", eval_fn.__name__
        assert "module.2" in report.first_divergence.observed
    report = audit(ema, (x, y), F.cross_entropy, torch.optim.SGD(ema.parameters(), lr=0.1), eval_fn=_good_eval)
    assert claim(report, "EVALUATION").status is Status.PASS


def _vit():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.ViTConfig(image_size=8, patch_size=4, num_channels=1, hidden_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=32, num_labels=3, hidden_dropout_prob=0.1)
    torch.manual_seed(0)
    return transformers.ViTForImageClassification(cfg)


def test_hf_vit_eval_without_model_eval_fails():
    model = _vit()
    g = torch.Generator().manual_seed(0)
    batch = {"pixel_values": torch.randn(4, 1, 8, 8, generator=g), "labels": torch.randint(0, 3, (4,), generator=g)}

    def forgot_eval(m, b):
        with torch.no_grad():
            return m(pixel_values=b["pixel_values"]).logits.argmax(-1)

    def good(m, b):
        m.eval()
        with torch.no_grad():
            out = m(pixel_values=b["pixel_values"]).logits.argmax(-1)
        m.train()
        return out
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    report = audit(model, batch, lambda out, y: out.loss, opt, eval_fn=forgot_eval)
    assert report.first_divergence.kind == "claim.evaluation.train_mode"
    assert "vit.embeddings.dropout" in report.first_divergence.observed
    report = audit(model, batch, lambda out, y: out.loss, opt, eval_fn=good)
    no_fail(report)
    assert claim(report, "EVALUATION").status is Status.PASS


# ---- constant output ----------------------------------------------------------------------------

def test_single_unit_log_softmax_fails_naming_the_last_module():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.hidden, self.out = nn.Linear(10, 16), nn.Linear(16, 1)

        def forward(self, x):
            return F.log_softmax(self.out(F.relu(self.hidden(x))), dim=1)  # the bug: one output unit
    model = Net()
    x = data(0)
    y = torch.zeros(64, dtype=torch.long)
    report = audit(model, (x, y), F.nll_loss, torch.optim.SGD(model.parameters(), lr=0.1))
    div = report.first_divergence
    assert (div.where, div.kind) == ("REPRESENTATION", "claim.representation.constant_output")
    assert "outputs identical for every input" in div.observed and "`out`" in div.observed


def test_zero_initialized_head_is_not_a_constant_output_fail():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))
    nn.init.zeros_(model[2].weight)
    nn.init.zeros_(model[2].bias)
    report = audit(model, (data(0), torch.randint(0, 3, (64,))), F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1))
    no_fail(report)
    assert claim(report, "REPRESENTATION").status is Status.SKIPPED


# ---- real shapes: no raw exception, no FAIL -----------------------------------------------------

class Seq(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.rnn, self.head = nn.GRU(5, 8), nn.Linear(8, 3)

    def forward(self, x):  # x: [T, B, F]
        return self.head(self.rnn(x)[0][-1])


class VAE(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.enc, self.mu, self.logvar, self.dec = nn.Linear(10, 8), nn.Linear(8, 2), nn.Linear(8, 2), nn.Linear(2, 10)

    def forward(self, x):
        h = F.relu(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp() if self.training else mu
        return torch.sigmoid(self.dec(z)), mu, logvar


def vae_loss(out, x):
    recon, mu, logvar = out
    return F.binary_cross_entropy(recon, x, reduction="sum") - 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())


class GCN(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.gc1, self.gc2 = nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, inputs):
        features, adj = inputs
        h = F.relu(self.gc1(torch.sparse.mm(adj, features)))
        return F.log_softmax(torch.sparse.mm(adj, self.gc2(h)), dim=1)


class Bag(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.emb, self.fc = nn.EmbeddingBag(50, 8, sparse=True), nn.Linear(8, 2)

    def forward(self, tokens):
        return self.fc(self.emb(tokens))


def _program(kind: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    if kind == "seq_first":
        m = Seq(seed)
        return m, (torch.randn(7, 16, 5, generator=g), torch.randint(0, 3, (16,), generator=g)), F.cross_entropy, \
            torch.optim.Adam(m.parameters()), {"batch_axis": None}
    if kind == "vae":
        m, x = VAE(seed), torch.rand(32, 10, generator=g)
        return m, (x, x), vae_loss, torch.optim.Adam(m.parameters()), {}
    if kind == "gcn":
        n = 20
        idx = torch.randint(0, n, (2, 60), generator=g)
        adj = torch.sparse_coo_tensor(idx, torch.ones(60), (n, n)).coalesce()
        m = GCN(seed)
        return m, ((torch.randn(n, 6, generator=g), adj), torch.randint(0, 3, (n,), generator=g)), F.nll_loss, \
            torch.optim.Adam(m.parameters(), lr=0.01), {}
    if kind == "weight_norm":
        m = nn.Sequential(nn.utils.weight_norm(nn.Linear(10, 8)), nn.ReLU(), nn.utils.spectral_norm(nn.Linear(8, 3)))
        return m, (torch.randn(16, 10, generator=g), torch.randint(0, 3, (16,), generator=g)), F.cross_entropy, \
            torch.optim.Adam(m.parameters()), {}
    m = Bag(seed)
    tokens, labels = torch.randint(0, 50, (16, 5), generator=g), torch.randint(0, 2, (16,), generator=g)
    sparse, dense = torch.optim.SparseAdam(list(m.emb.parameters())), torch.optim.Adam(m.fc.parameters())

    def train_step():  # two optimizers: the user's own step
        sparse.zero_grad()
        dense.zero_grad()
        loss = F.cross_entropy(m(tokens), labels)
        loss.backward()
        sparse.step()
        dense.step()
        return loss
    return m, (tokens, labels), F.cross_entropy, None, {"train_step": train_step}


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("kind", ["seq_first", "vae", "gcn", "weight_norm", "embedding_bag"])
def test_real_shapes_raise_nothing_and_fail_nothing(kind, seed):
    model, batch, loss_fn, opt, kw = _program(kind, seed)
    start = time.perf_counter()
    report = audit(model, batch, loss_fn, opt, **kw)
    assert time.perf_counter() - start < 2.0  # well under 1 s on an idle core; margin for a shared CI
    no_fail(report)
    assert claim(report, "UPDATE").status is Status.PASS, str(report)
    if kind == "gcn":  # (features, sparse_adj): the features are mixed, the adjacency held fixed
        assert claim(report, "REPRESENTATION").status is Status.PASS


def test_identity_named_as_the_activation_is_evidence_of_a_removed_nonlinearity():
    class Net(nn.Module):
        def __init__(self, act: nn.Module, name: str) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.fc1, self.fc2 = nn.Linear(10, 16), nn.Linear(16, 2)
            setattr(self, name, act)
            self.name = name

        def forward(self, x):
            return self.fc2(getattr(self, self.name)(self.fc1(x)))
    x = data(0)
    xor = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).long()  # not linearly separable: the targets confirm the task needs more
    model = Net(nn.Identity(), "act")
    report = audit(model, (x, xor), F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1))
    assert report.first_divergence.kind == "claim.representation.affine" and "`act`" in report.first_divergence.observed
    # separable: the name alone does not confirm the activation was needed (it may be off on purpose): a WARN
    y = (x[:, 0] > 0).long()
    report = audit(model, (x, y), F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1))
    rep = claim(report, "REPRESENTATION")
    assert (rep.status, rep.check) == (Status.WARN, "claim.representation.affine") and "`act`" in rep.message
    assert "not confirmed that the task needs more" in rep.message and "linearly separable" in rep.message
    model = Net(nn.Identity(), "proj")  # an Identity that is not an activation: a linear model on separable labels
    no_fail(audit(model, (x, y), F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1)))


def test_hf_attention_dropout_applied_functionally_counts_as_mode_dependent():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.ViTConfig(image_size=8, patch_size=4, num_channels=1, hidden_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=32, num_labels=3, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.1)  # no nn.Dropout with p > 0 anywhere
    torch.manual_seed(0)
    model = transformers.ViTForImageClassification(cfg)
    g = torch.Generator().manual_seed(0)
    pix, labels = torch.randn(4, 1, 8, 8, generator=g), torch.randint(0, 3, (4,), generator=g)

    def forgot_eval(m, batch):
        with torch.no_grad():
            return m(batch[0]).logits.argmax(-1)
    report = audit(model, (pix, labels), lambda out, y: F.cross_entropy(out.logits, y),
                   torch.optim.AdamW(model.parameters(), lr=1e-3), eval_fn=forgot_eval)
    assert report.first_divergence.kind == "claim.evaluation.train_mode"
    assert "attention" in report.first_divergence.observed  # the HF module holding attention_dropout


def test_bad_batch_axis_is_a_one_line_error():
    from firstdiv.errors import InvalidArgument
    model = nn.Linear(3, 1)
    with pytest.raises(InvalidArgument, match=r"Expected `batch_axis` to be a non-negative int or None but got 'time'"):
        six_claims(model, (torch.zeros(4, 3), torch.zeros(4, 1)), F.mse_loss, torch.optim.SGD(model.parameters(), lr=0.1),
                   batch_axis="time")


class Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.attn, self.head = nn.MultiheadAttention(8, 2, dropout=0.2, batch_first=True), nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.attn(x, x, x, need_weights=False)[0].mean(1))


@pytest.mark.parametrize("forgets_eval", [True, False])
def test_multihead_attention_dropout_rate_is_mode_dependent(forgets_eval):
    model = Attn()
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(8, 5, 8, generator=g), torch.randint(0, 3, (8,), generator=g))

    def forgot(m, b):
        with torch.no_grad():
            return m(b[0]).argmax(-1)
    report = audit(model, batch, F.cross_entropy, torch.optim.Adam(model.parameters()),
                   eval_fn=forgot if forgets_eval else _good_eval)
    if forgets_eval:
        assert report.first_divergence.kind == "claim.evaluation.train_mode" and "attn" in report.first_divergence.observed
    else:
        no_fail(report)
        assert claim(report, "EVALUATION").status is Status.PASS


def test_gcn_without_its_activation_fails_representation():
    class LinearGCN(GCN):
        def forward(self, inputs):
            features, adj = inputs
            return torch.sparse.mm(adj, self.gc2(self.gc1(torch.sparse.mm(adj, features))))  # the bug: no ReLU
    g = torch.Generator().manual_seed(0)
    n = 40
    idx = torch.randint(0, n, (2, 120), generator=g)
    adj = torch.sparse_coo_tensor(idx, torch.ones(120), (n, n)).coalesce()
    model = LinearGCN(0)
    batch = ((torch.randn(n, 6, generator=g), adj), torch.randint(0, 3, (n,), generator=g))  # random labels: not separable
    report = audit(model, batch, F.cross_entropy, torch.optim.Adam(model.parameters(), lr=0.01))
    assert report.first_divergence.kind == "claim.representation.affine" and "gc1, gc2" in report.first_divergence.observed
