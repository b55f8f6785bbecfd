"""The learning ledger's TASK and OBJECTIVE links on programs in the shapes real code takes: correct programs
(no task_probe, a toy energy without targets, a masked node-classification loss with a sparse adjacency, a VAE
returning a tuple, Hugging Face models computing their own loss, binary / multilabel BCE, sequence-first
batches, a focal loss) get no FAIL and no WARN from these links, only notes; real bugs (multilabel targets
behind a softmax, a softmax over one unit, log_softmax over the batch, a sigmoid fed to BCEWithLogitsLoss, a
double label shift) stop the walk at OBJECTIVE or TASK with a kind naming them."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import learning_ledger
from firstdiv.instruments._core.state import Snapshot
from firstdiv.report import Report, Status

pytestmark = pytest.mark.usefixtures("one_thread")

LINKS = ["TASK", "OBJECTIVE", "DEPENDENCY", "GRADIENT", "OPTIMIZER_OWNERSHIP", "PARAMETER_UPDATE", "CAPABILITY"]


def run(model, batch, loss_fn, optimizer=None, **kw) -> Report:
    optimizer = optimizer or torch.optim.Adam(model.parameters(), lr=1e-2)
    before = Snapshot.take(model, optimizer)
    report = learning_ledger(model, batch, loss_fn, optimizer, overfit_steps=kw.pop("overfit_steps", 0), **kw)
    assert before.diff(Snapshot.take(model, optimizer)) == []
    return report


def link(report: Report, name: str):
    return report.findings[LINKS.index(name)]


def healthy(report: Report, *names: str) -> None:
    """No FAIL and no WARN at TASK and OBJECTIVE; what was not verified is a note."""
    for name in names or ("TASK", "OBJECTIVE"):
        f = link(report, name)
        assert f.status is Status.PASS, str(report)


def warns(report: Report, where: str, kind: str) -> str:
    """Named without confirmation (evidence before FAIL): a WARN of that kind, never a FAIL."""
    assert report.status is not Status.FAIL, str(report)
    assert (link(report, where).status, link(report, where).check) == (Status.WARN, kind), str(report)
    return link(report, where).message


def stops(report: Report, where: str, kind: str) -> str:
    assert report.status is Status.FAIL, str(report)
    assert (report.first_divergence.where, report.first_divergence.kind) == (where, kind), str(report)
    assert all(f.status is not Status.FAIL for f in report.findings[:LINKS.index(where)])
    return link(report, where).message


def data(n=32, f=8, seed=0):
    return torch.randn(n, f, generator=torch.Generator().manual_seed(seed))


# ---- correct programs --------------------------------------------------------------------------------------

def test_no_task_probe_is_a_note_and_target_bugs_still_fail():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    x = data()
    report = run(model, (x, torch.randint(0, 3, (32,))), F.cross_entropy)
    task = link(report, "TASK")
    assert task.status is Status.PASS and task.message.startswith("note: ") and "task_probe" in task.message
    assert report.status is not Status.WARN or link(report, "TASK").status is Status.PASS
    stops(run(model, (x, torch.randint(0, 5, (32,))), F.cross_entropy), "TASK", "task.label_out_of_range")


def test_energy_without_targets_is_not_a_sum_reduction():
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    report = run(model, (data(),), lambda out, _: out.pow(2).sum())
    healthy(report)
    assert "not identified" in link(report, "OBJECTIVE").message


class GCN(nn.Module):
    def __init__(self, f=8, h=16, k=3):
        super().__init__()
        self.l1, self.l2 = nn.Linear(f, h), nn.Linear(h, k)

    def forward(self, inputs):
        x, adj = inputs
        return self.l2(torch.sparse.mm(adj, torch.relu(self.l1(torch.sparse.mm(adj, x)))))


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")
def test_masked_node_classification_with_a_sparse_adjacency():
    torch.manual_seed(0)
    n = 30
    edges = torch.randint(0, n, (2, 90), generator=torch.Generator().manual_seed(1))
    adj = torch.sparse_coo_tensor(torch.cat([edges, torch.arange(n).repeat(2, 1)], 1), torch.ones(90 + n), (n, n)).coalesce()
    labels = torch.randint(0, 3, (n,), generator=torch.Generator().manual_seed(2))
    train_mask = torch.zeros(n, dtype=torch.bool)
    train_mask[:10] = True
    report = run(GCN(), ((data(n), adj), labels), lambda o, t: F.cross_entropy(o[train_mask], t[train_mask]))
    healthy(report)
    assert "10 of 30 elements" in link(report, "OBJECTIVE").message
    wrong = run(GCN(), ((data(n), adj), labels), lambda o, t: 0.5 * F.cross_entropy(o[train_mask], t[train_mask]))
    assert link(wrong, "OBJECTIVE").status is not Status.FAIL  # not evaluable per example and not identified: a note
    assert link(wrong, "OBJECTIVE").message.startswith("note: ")


class VAE(nn.Module):
    def __init__(self, d=12, z=2):
        super().__init__()
        self.enc, self.mu, self.logvar, self.dec = nn.Linear(d, 16), nn.Linear(16, z), nn.Linear(16, z), nn.Linear(z, d)

    def forward(self, x):
        h = torch.relu(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return torch.sigmoid(self.dec(z)), mu, logvar


def elbo(out, x):
    recon, mu, logvar = out
    bce = F.binary_cross_entropy(recon, x, reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return (bce + kld) / x.shape[0]


@pytest.mark.parametrize("loss_fn", [elbo, lambda out, x: elbo(out, x) * x.shape[0]], ids=["per-example", "summed"])
def test_vae_tuple_outputs_are_a_note_not_a_warning(loss_fn):
    torch.manual_seed(0)
    x = torch.rand(16, 12, generator=torch.Generator().manual_seed(3))
    report = run(VAE(), (x, x), loss_fn)
    healthy(report)
    msg = link(report, "OBJECTIVE").message
    assert msg.startswith("note: objective not identified") and "depends on the outputs" in msg


def test_binary_and_multilabel_bce_are_classification():
    torch.manual_seed(0)
    x = data(32, 8)
    binary = (x[:, :1] > 0).float()
    multi = (x[:, :5] > 0.2).float()
    for targets, k in ((binary, 1), (multi, 5)):
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, k))
        report = run(model, (x, targets), nn.BCEWithLogitsLoss())
        healthy(report)
        assert report.details["task"] == "classification"
        assert "binary cross-entropy with logits" in link(report, "OBJECTIVE").message
    probs = nn.Sequential(nn.Linear(8, 5), nn.Sigmoid())
    healthy(run(probs, (x, multi), nn.BCELoss()))
    stops(run(nn.Sequential(nn.Linear(8, 5), nn.Sigmoid()), (x, multi), nn.BCEWithLogitsLoss()),
          "OBJECTIVE", "objective.probabilities_as_logits")
    summed = warns(run(nn.Linear(8, 5), (x, multi), nn.BCEWithLogitsLoss(reduction="sum")), "OBJECTIVE", "objective.sum_reduction")
    assert "summed" in summed


class SeqFirst(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.head = nn.GRU(4, 16), nn.Linear(16, 3)

    def forward(self, x):  # x: [T, B, F]
        return self.head(self.rnn(x)[0][-1])


def test_sequence_first_batches():
    torch.manual_seed(0)
    x = torch.randn(7, 12, 4, generator=torch.Generator().manual_seed(4))
    y = torch.randint(0, 3, (12,), generator=torch.Generator().manual_seed(5))
    report = run(SeqFirst(), (x, y), F.cross_entropy)
    healthy(report)
    assert report.details["task"] == "classification"
    warns(run(SeqFirst(), (x, y), lambda o, t: F.cross_entropy(o, t, reduction="sum")), "OBJECTIVE", "objective.sum_reduction")


def _focal(out, y, gamma=2.0):
    logp = F.log_softmax(out, 1).gather(1, y[:, None]).squeeze(1)
    return (-(1 - logp.exp()) ** gamma * logp).mean()


def test_focal_loss_is_a_note_and_mse_on_a_column_is_named_but_not_a_fail():
    """That cross-entropy is meant cannot be confirmed from the program (a metric-learning loss on embeddings with
    class labels looks the same): a WARN naming the assumption and reference_loss=, never a FAIL."""
    torch.manual_seed(0)
    x, y = data(), torch.randint(0, 4, (32,))
    report = run(nn.Linear(8, 4), (x, y), _focal)
    healthy(report)
    assert "reference_loss" in link(report, "OBJECTIVE").message
    report = run(nn.Linear(8, 4), (x, y), lambda o, t: F.mse_loss(o[:, 0], t.float()))
    assert report.status is not Status.FAIL
    assert link(report, "OBJECTIVE").check == "objective.initial_loss" and "reference_loss=" in link(report, "OBJECTIVE").message
    assert link(report, "OBJECTIVE").status is Status.WARN


# ---- Hugging Face models computing their own loss ---------------------------------------------------------

def _gpt2():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=1, n_head=2, bos_token_id=0,
                                     eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def _tokens(b=4, t=10):
    successor = torch.randperm(32, generator=torch.Generator().manual_seed(6))
    ids = torch.empty(b, t, dtype=torch.long)
    ids[:, 0] = torch.randint(0, 32, (b,), generator=torch.Generator().manual_seed(7))
    for i in range(1, t):
        ids[:, i] = successor[ids[:, i - 1]]
    return ids


@pytest.mark.filterwarnings("ignore")
def test_hf_causal_lm_labels_equal_input_ids_and_the_double_shift():
    model, ids = _gpt2(), _tokens()
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    report = run(model, batch, lambda out, labels: out.loss)
    healthy(report)
    assert report.details["task"] == "language_model"
    assert "shifted logits" in link(report, "OBJECTIVE").message
    shifted = torch.cat([ids[:, 1:], torch.full((ids.shape[0], 1), -100)], 1)  # shifted by hand, and again in the model
    twice = run(model, {**batch, "labels": shifted}, lambda out, labels: out.loss)
    assert "shifts them again" in stops(twice, "TASK", "task.target_shifted_twice")


@pytest.mark.filterwarnings("ignore")
def test_hf_sequence_classification_output():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, num_labels=3, max_position_embeddings=16)
    model = transformers.BertForSequenceClassification(config)
    ids = _tokens(6, 8)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([0, 1, 2, 1, 0, 2])}
    report = run(model, batch, lambda out, labels: out.loss)
    healthy(report)
    assert report.details["task"] == "classification" and "cross-entropy" in link(report, "OBJECTIVE").message


# ---- bugs ---------------------------------------------------------------------------------------------------

def test_multilabel_targets_behind_a_softmax_are_unreachable():
    torch.manual_seed(0)
    x = data(64, 8)
    targets = (torch.rand(64, 5, generator=torch.Generator().manual_seed(8)) < 0.5).float()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 5), nn.Softmax(dim=1))
    msg = stops(run(model, (x, targets), nn.MSELoss()), "OBJECTIVE", "objective.unreachable")
    assert "sum to 1" in msg and "targets' sum to 2." in msg
    one_hot = F.one_hot(torch.randint(0, 5, (64,)), 5).float()  # softmax + MSE on one-hot rows: reachable, no FAIL
    assert run(model, (x, one_hot), nn.MSELoss()).status is not Status.FAIL


@pytest.mark.parametrize("op, loss_fn, const", [
    (lambda z: F.log_softmax(z, dim=1), nn.BCEWithLogitsLoss(), "log_softmax over dimension 1 of size 1 is always 0"),
    (lambda z: F.softmax(z, dim=1), nn.BCELoss(), "softmax over dimension 1 of size 1 is always 1"),
], ids=["log_softmax", "softmax"])
def test_a_normalisation_over_one_unit_is_constant(op, loss_fn, const):
    torch.manual_seed(0)
    lin = nn.Linear(8, 1)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            return op(self.lin(x))

    x = data()
    msg = stops(run(Head(), (x, (x[:, :1] > 0).float()), loss_fn), "OBJECTIVE", "objective.constant_outputs")
    assert "do not depend on the inputs" in msg and const in msg


def test_log_softmax_over_the_batch_axis():
    torch.manual_seed(0)
    x, y = data(), torch.randint(0, 4, (32,))
    model = nn.Sequential(nn.Linear(8, 4), nn.LogSoftmax(dim=0))
    msg = stops(run(model, (x, y), nn.NLLLoss()), "OBJECTIVE", "objective.normalized_over_examples")
    assert "dimension 0" in msg
    healthy(run(nn.Sequential(nn.Linear(8, 4), nn.LogSoftmax(dim=1)), (x, y), nn.NLLLoss()))


def test_fast_on_a_tiny_model():
    torch.manual_seed(0)
    x = data(64, 8)
    targets = (x[:, :5] > 0).float()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 5))
    run(model, (x, targets), nn.BCEWithLogitsLoss())
    t0 = time.perf_counter()
    run(model, (x, targets), nn.BCEWithLogitsLoss())
    assert time.perf_counter() - t0 < 1.0


class TwoClassProb(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 2)

    def forward(self, x):
        return self.lin(x).softmax(dim=1)[:, 1]  # the probability of the positive class


def test_one_column_of_a_softmax_with_bce_is_fine():
    torch.manual_seed(0)
    x = data()
    report = run(TwoClassProb(), (x, (x[:, 0] > 0).float()), nn.BCELoss())
    healthy(report)
    assert report.details["task"] == "classification"


@pytest.mark.filterwarnings("ignore")
def test_hf_causal_lm_shifted_by_the_loss_fn_on_its_logits():
    model, ids = _gpt2(), _tokens()

    def next_token(out, targets):
        return F.cross_entropy(out.logits[:, :-1].reshape(-1, 32), targets[:, 1:].reshape(-1))

    report = run(model, ({"input_ids": ids}, ids), next_token)
    healthy(report)
    assert "shifted logits" in link(report, "OBJECTIVE").message


def test_policy_gradient_loss_is_a_note():
    torch.manual_seed(0)
    states = data(32, 8)
    actions = torch.randint(0, 4, (32,), generator=torch.Generator().manual_seed(9))
    returns = torch.randn(32, generator=torch.Generator().manual_seed(10))
    advantages = (returns - returns.mean()) / returns.std()

    def reinforce(logits, taken):
        logp = F.log_softmax(logits, dim=1).gather(1, taken[:, None]).squeeze(1)
        return -(logp * advantages[: taken.shape[0]]).mean()

    report = run(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)), (states, actions), reinforce)
    healthy(report)
    assert "weighted per example" in link(report, "OBJECTIVE").message


class Squeezed(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 1)

    def forward(self, x):
        return self.lin(x).squeeze(-1)


def test_integer_binary_targets_with_a_squeezed_logit():
    torch.manual_seed(0)
    x = data()
    y = (x[:, 0] > 0).long()
    report = run(Squeezed(), (x, y), lambda o, t: F.binary_cross_entropy_with_logits(o, t.float()))
    healthy(report)
    assert report.details["task"] == "classification" and "binary cross-entropy" in link(report, "OBJECTIVE").message


class Tagger(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.rnn, self.head = nn.GRU(4, 16), nn.Linear(16, k)

    def forward(self, x):  # [T, B, F] -> [T, B, K]
        return self.head(self.rnn(x)[0])


def test_sequence_first_tagging_reads_the_class_axis_last():
    from firstdiv.instruments._core.batch import split_batch
    from firstdiv.instruments._core.examples import batch_axis
    from firstdiv.instruments._core.task import Ctx, infer_task

    torch.manual_seed(0)
    b = k = 5  # the batch size equals the number of classes: only the batch axis tells the axes apart
    x = torch.randn(6, b, 4, generator=torch.Generator().manual_seed(11))
    y = torch.randint(0, k, (6, b), generator=torch.Generator().manual_seed(12))
    model, batch = Tagger(k), split_batch((x, y))
    ctx = Ctx(model=model, optimizer=None, work=model, work_opt=None, loss_fn=F.cross_entropy, batch=batch,
              outputs=model(x), batch_axis=batch_axis(batch, 1))
    infer_task(ctx)
    assert (ctx.task, ctx.class_dim, ctx.num_classes) == ("classification", 2, k)


@pytest.mark.parametrize("head, scale, fails", [(nn.Sigmoid(), 10.0, True), (nn.ReLU(), -3.0, True),
                                                (nn.Sigmoid(), 1.0, False), (nn.Identity(), 10.0, False)],
                         ids=["sigmoid-vs-0..10", "relu-vs-negative", "sigmoid-vs-0..1", "linear"])
def test_bounded_outputs_against_targets_outside_their_range(head, scale, fails):
    torch.manual_seed(0)
    x = data(32, 8)
    y = scale * torch.rand(32, 1, generator=torch.Generator().manual_seed(13))
    report = run(nn.Sequential(nn.Linear(8, 1), head), (x, y), nn.MSELoss())
    if fails:
        assert "targets range over" in stops(report, "OBJECTIVE", "objective.unreachable")
    else:
        healthy(report)


@pytest.mark.parametrize("task", ["auto", "classification"])
def test_a_softmax_over_multi_hot_targets_fails_only_when_each_label_is_declared_a_class(task):
    """A multinomial likelihood over multi-hot targets (a recommender's Mult-VAE: -sum(log_softmax(z) * x)) normalises
    over the labels by design; independent labels behind the same softmax are a bug. The shapes cannot tell them
    apart: the FAIL needs task='classification', else the finding is a WARN naming both readings."""
    torch.manual_seed(0)
    x = data(64, 8)
    targets = (torch.rand(64, 12, generator=torch.Generator().manual_seed(8)) < 0.3).float()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 12))
    loss_fn = lambda z, t: -(F.log_softmax(z, 1) * t).sum(-1).mean()
    report = run(model, (x, targets), loss_fn, task=task)
    objective = link(report, "OBJECTIVE")
    assert objective.check == "objective.unreachable", str(report)
    assert objective.status is (Status.FAIL if task == "classification" else Status.WARN), str(report)
    if task == "auto":
        assert "Mult-VAE" in objective.message and "task='classification'" in objective.message
