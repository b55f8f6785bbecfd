"""Evidence before FAIL: each premise a check used to assume is now asked of the program, with a counterfactual on
copies of its objects. Every case here is a shape of correct public code that used to FAIL (or make firstdiv raise)
at first contact, next to the defect the same check must still catch."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import Status
from firstdiv.instruments._core.state import Snapshot


def _data(n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    return x, (x[:, 0] > 0).long()


def _mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))


def _fails(report):
    return [(f.where, f.check) for f in report.findings if f.status is Status.FAIL]


# ---- batches that are mappings but not dicts (a tokenizer's BatchEncoding) -------------------------------------

class Encoding(collections.UserDict):
    """A mapping with the extras a tokenizer's output has: attribute access and ``.to(device)``."""

    def to(self, device):
        return self

    def __getattr__(self, name):
        if name != "data" and "data" in vars(self) and name in self.data:
            return self.data[name]
        raise AttributeError(name)


class TokenClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.head = nn.Embedding(20, 8), nn.Linear(8, 2)

    def forward(self, input_ids, labels=None):
        logits = self.head(self.emb(input_ids).mean(1))
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


def test_a_mapping_batch_that_is_not_a_dict_is_read_like_one_and_the_user_keeps_its_type():
    torch.manual_seed(0)
    model = TokenClassifier()
    ids = torch.randint(0, 20, (16, 5))
    batch = Encoding(input_ids=ids, labels=(ids[:, 0] > 9).long())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    seen = []

    def eval_fn(m, b):
        seen.append(type(b))
        b.to("cpu")  # the user's own evaluation uses the batch's own methods
        return float(m(**b)["loss"])

    ws = firstdiv.diagnose(model=model, batch=batch, loss_fn=lambda out, _t: out["loss"], optimizer=opt,
                           eval_fn=eval_fn, stop_at_first=False)
    assert ws.status is not Status.FAIL, str(ws)
    assert not [r for r in ws.details["reports"].values() if r.get("status") == "RAISED"]
    assert seen and set(seen) == {Encoding}


# ---- a framework's optimizer wrapper (Accelerate's AcceleratedOptimizer) -------------------------------------------

class Wrapped(torch.optim.Optimizer):
    """Like accelerate's AcceleratedOptimizer: never calls Optimizer.__init__ (no hook tables of its own), forwards
    param_groups, state, step and zero_grad to the optimizer it wraps."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    @property
    def defaults(self):
        return self.optimizer.defaults

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        self.optimizer.step(closure)

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state)

    def __getstate__(self):  # as accelerate's: the wrapped optimizer travels with a copy
        return dict(self.__dict__)

    def __setstate__(self, state):
        self.__dict__.update(state)


def test_a_wrapped_optimizer_and_the_one_it_wraps_are_one_update_not_two_owners():
    model, (x, y) = _mlp(), _data()
    inner = torch.optim.AdamW(model.parameters(), lr=1e-2)
    opt = Wrapped(inner)

    def train_step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    before = Snapshot.take(model, inner)
    for report in (firstdiv.four_structures(model, opt, (x, y), F.cross_entropy, train_step=train_step),
                   firstdiv.step_probe(model, (x, y), F.cross_entropy, opt, train_step=train_step),
                   firstdiv.six_claims(model, (x, y), F.cross_entropy, opt, train_step=train_step)):
        assert not _fails(report), str(report)
    assert before.diff(Snapshot.take(model, inner)) == []


def test_two_distinct_optimizers_over_the_same_parameters_still_fail():
    model, (x, y) = _mlp(), _data()
    opt, other = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.Adam(model.parameters(), lr=1e-3)

    def train_step():
        opt.zero_grad()
        other.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        other.step()

    report = firstdiv.four_structures(model, opt, (x, y), F.cross_entropy, train_step=train_step)
    assert any(kind == "optimizer.multiple_owners" for _, kind in _fails(report)), str(report)


# ---- gradients thrown away between the backward passes of one update ---------------------------------------------

def _accumulating(model, opt, x, y, zero_every_micro_batch=False, micro=4):
    chunks = list(zip(x.chunk(micro), y.chunk(micro), strict=True))

    def train_step():
        for i, (xb, yb) in enumerate(chunks):
            if zero_every_micro_batch:
                opt.zero_grad()
            (F.cross_entropy(model(xb), yb) / micro).backward()
            if i == micro - 1:
                opt.step()
                opt.zero_grad()
        return torch.tensor(0.0)
    return train_step


@pytest.mark.parametrize("wrap", [False, True], ids=["adamw", "wrapped"])
def test_zero_grad_every_micro_batch_is_caught_and_once_per_update_passes(wrap):
    model, (x, y) = _mlp(), _data()
    inner = torch.optim.AdamW(model.parameters(), lr=1e-2)
    opt = Wrapped(inner) if wrap else inner
    bad = firstdiv.step_probe(model, (x, y), F.cross_entropy, opt,
                              train_step=_accumulating(model, opt, x, y, zero_every_micro_batch=True))
    assert (bad.first_divergence.where, bad.first_divergence.kind) == ("0.weight", "step.gradient_discarded"), str(bad)
    good = firstdiv.step_probe(model, (x, y), F.cross_entropy, opt, train_step=_accumulating(model, opt, x, y))
    assert "step.gradient_discarded" not in [k for _, k in _fails(good)], str(good)


class SkipsWhileAccumulating(Wrapped):
    """Accelerate's AcceleratedOptimizer under ``accumulate``: step and zero_grad do nothing until the last of
    ``micro`` micro-batches (its gradient sync)."""

    def __init__(self, optimizer, micro):
        super().__init__(optimizer)
        self.micro, self.calls = micro, 0

    def syncing(self):
        return self.calls % self.micro == self.micro - 1

    def zero_grad(self, set_to_none=True):
        if self.syncing():
            self.optimizer.zero_grad(set_to_none=set_to_none)
        self.calls += 1

    def step(self, closure=None):
        if self.syncing():
            self.optimizer.step(closure)


def _accelerate_style(model, opt, x, y, model_zero_grad, micro=2):
    chunks = list(zip(x.chunk(micro), y.chunk(micro), strict=True))

    def train_step():
        for xb, yb in chunks:  # the loop body under accelerator.accumulate: every call steps and clears
            if model_zero_grad:
                model.zero_grad()
            (F.cross_entropy(model(xb), yb) / micro).backward()
            opt.step()
            opt.zero_grad()
        return torch.tensor(0.0)
    return train_step


def test_a_model_zero_grad_per_micro_batch_under_a_wrapper_that_skips_while_accumulating_is_caught():
    """The wrapper's zero_grad that leaves the gradient in place while accumulating erased nothing: the model's own
    zero_grad at the next micro-batch is the one that throws the first micro-batch away."""
    model, (x, y) = _mlp(), _data()
    opt = SkipsWhileAccumulating(torch.optim.AdamW(model.parameters(), lr=1e-2), micro=2)
    bad = firstdiv.step_probe(model, (x, y), F.cross_entropy, opt, train_step=_accelerate_style(model, opt, x, y, True))
    assert (bad.first_divergence.where, bad.first_divergence.kind) == ("0.weight", "step.gradient_discarded"), str(bad)
    good = firstdiv.step_probe(model, (x, y), F.cross_entropy, opt, train_step=_accelerate_style(model, opt, x, y, False))
    assert "step.gradient_discarded" not in [k for _, k in _fails(good)], str(good)


def test_gradients_erased_by_design_are_not_discarded_micro_batches():
    """A GAN that steps the generator first (its loss reaches the discriminator, whose zero_grad then opens its own
    update) and a sharpness-aware step (the weights move between its two backward passes)."""
    torch.manual_seed(0)
    disc, gen = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)), nn.Linear(3, 4)
    opt_d, opt_g = torch.optim.Adam(disc.parameters(), 1e-3), torch.optim.Adam(gen.parameters(), 1e-3)
    real, z = torch.randn(16, 4), torch.randn(16, 3)
    bce = F.binary_cross_entropy_with_logits
    ones, zeros = torch.ones(16, 1), torch.zeros(16, 1)

    def gan_step():
        opt_g.zero_grad()
        bce(disc(gen(z)), ones).backward()
        opt_g.step()
        opt_d.zero_grad()
        loss = bce(disc(real), ones) + bce(disc(gen(z).detach()), zeros)
        loss.backward()
        opt_d.step()
        return loss

    batch = (torch.cat([real, gen(z).detach()]), torch.cat([ones, zeros]))
    report = firstdiv.step_probe(disc, batch, bce, opt_d, train_step=gan_step)
    assert "step.gradient_discarded" not in [k for _, k in _fails(report)], str(report)

    model, (x, y) = _mlp(), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def sam_step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            eps = [0.05 * p.grad / (p.grad.norm() + 1e-12) for p in model.parameters()]
            for p, e in zip(model.parameters(), eps, strict=True):
                p.add_(e)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p, e in zip(model.parameters(), eps, strict=True):
                p.sub_(e)
        opt.step()
        return loss

    report = firstdiv.step_probe(model, (x, y), F.cross_entropy, opt, train_step=sam_step)
    assert "step.gradient_discarded" not in [k for _, k in _fails(report)], str(report)


# ---- parameters the loss does not depend on ------------------------------------------------------------------

class PairwiseScores(nn.Module):
    """BPR: score = user . item + user bias + item bias; the user bias cancels in positive - negative."""

    def __init__(self):
        super().__init__()
        self.users, self.items = nn.Embedding(10, 4), nn.Embedding(12, 4)
        self.user_bias, self.item_bias = nn.Embedding(10, 1), nn.Embedding(12, 1)
        nn.init.zeros_(self.user_bias.weight)
        nn.init.zeros_(self.item_bias.weight)

    def forward(self, user, item):
        return (self.users(user) * self.items(item)).sum(1) + self.user_bias(user).squeeze(1) + self.item_bias(item).squeeze(1)


def test_a_parameter_that_cancels_in_the_objective_is_not_an_update_that_skips_it():
    torch.manual_seed(0)
    model = PairwiseScores()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    users = torch.randint(0, 10, (16,), generator=g)
    pos, neg = torch.randint(0, 12, (16,), generator=g), torch.randint(0, 12, (16,), generator=g)
    batch = ({"user": torch.cat([users, users]), "item": torch.cat([pos, neg])}, None)

    def loss_fn(scores, _t):
        return -F.logsigmoid(scores[:16] - scores[16:]).mean()

    def train_step():
        opt.zero_grad()
        loss = -F.logsigmoid(model(users, pos) - model(users, neg)).mean()
        loss.backward()
        opt.step()
        return loss

    report = firstdiv.learning_ledger(model, batch, loss_fn, opt, train_step=train_step)
    assert not _fails(report), str(report)


def test_an_unused_head_is_a_warning_and_a_detached_trunk_is_a_failure():
    class TwoHeads(nn.Module):
        def __init__(self, detach=False):
            super().__init__()
            self.trunk, self.head, self.aux = nn.Linear(6, 16), nn.Linear(16, 2), nn.Linear(16, 3)
            self.detach = detach

        def forward(self, x):
            h = torch.relu(self.trunk(x))
            self.aux(h)  # computed, never used by this objective
            return self.head(h.detach() if self.detach else h)

    x, y = _data()
    for detach, status in ((False, Status.WARN), (True, Status.FAIL)):
        torch.manual_seed(0)
        model = TwoHeads(detach)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        report = firstdiv.six_claims(model, (x, y), F.cross_entropy, opt)
        diff = next(f for f in report.findings if f.where == "DIFFERENTIATION")
        assert diff.status is status, str(report)
        assert ("trunk.weight" in diff.evidence["cut"]) is detach
        assert "aux.weight" in diff.evidence["unused"]


# ---- CAPABILITY on the program as it runs ------------------------------------------------------------------------

class FixedGraph(nn.Module):
    """A GNN-like model whose forward needs every node of its graph: it refuses a subset of the batch."""

    def __init__(self, n):
        super().__init__()
        self.adj = torch.eye(n) + torch.ones(n, n) / n
        self.lin = nn.Linear(6, 2)

    def forward(self, x):
        return self.adj @ self.lin(x)


def test_capability_overfits_the_whole_batch_of_a_program_that_refuses_a_subset():
    x, y = _data(24)
    torch.manual_seed(0)
    model = FixedGraph(24)
    report = firstdiv.learning_ledger(model, (x, y), F.cross_entropy, torch.optim.Adam(model.parameters(), 5e-2))
    cap = next(f for f in report.findings if f.where == "CAPABILITY")
    assert cap.status is not Status.SKIPPED and cap.evidence["examples"] == 24, str(report)
    assert any("does not run on the first 8 examples" in n for n in report.details.get("notes", []))


def test_a_stochastic_objective_is_asked_to_learn_not_to_reach_its_floor():
    x, y = _data(32)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Dropout(0.6), nn.Linear(32, 2))
    report = firstdiv.learning_ledger(model, (x, y), F.cross_entropy, torch.optim.Adam(model.parameters(), 1e-2))
    cap = next(f for f in report.findings if f.where == "CAPABILITY")
    assert cap.status is Status.PASS and cap.evidence["floor_known"] is False, str(report)
    assert any("objective is stochastic" in n for n in report.details.get("notes", []))


# ---- outputs of the shape real models return ---------------------------------------------------------------------

def test_a_loss_fn_that_takes_the_first_item_of_a_tuple_output_is_applied_to_it():
    class WithAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 2)

        def forward(self, x):
            return self.lin(x), torch.softmax(x @ x.T, -1)

    x, y = _data()
    torch.manual_seed(0)
    model = WithAttention()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for report in (firstdiv.evidence_packet(model=model, batch=(x, y), loss_fn=nn.CrossEntropyLoss(), optimizer=opt),
                   firstdiv.learning_ledger(model, (x, y), nn.CrossEntropyLoss(), opt)):
        assert report.status is Status.PASS, str(report)


# ---- what the loss is fed, wherever the activation sits ----------------------------------------------------------

@pytest.mark.parametrize(("loss_fn", "kind"), [
    (lambda o, t: F.binary_cross_entropy_with_logits(torch.sigmoid(o), t), "objective.probabilities_as_logits"),
    (lambda o, t: F.nll_loss(o, t.argmax(1)), "objective.nll_of_raw_scores"),
], ids=["sigmoid_inside_loss_fn", "nll_of_raw_scores"])
def test_a_loss_fed_what_it_cannot_use_fails_where_the_graph_and_the_values_show_it(loss_fn, kind):
    x, y = _data()
    targets = F.one_hot(y, 2).float()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    report = firstdiv.learning_ledger(model, (x, targets), loss_fn, torch.optim.SGD(model.parameters(), 0.1))
    assert (report.first_divergence.where, report.first_divergence.kind) == ("OBJECTIVE", kind), str(report)


def test_the_same_losses_fed_right_pass():
    x, y = _data()
    targets = F.one_hot(y, 2).float()
    for loss_fn in (lambda o, t: F.binary_cross_entropy_with_logits(o, t),
                    lambda o, t: F.nll_loss(F.log_softmax(o, 1), t.argmax(1)),
                    lambda o, t: F.binary_cross_entropy(torch.sigmoid(o), t)):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
        report = firstdiv.learning_ledger(model, (x, targets), loss_fn, torch.optim.SGD(model.parameters(), 0.1))
        assert next(f for f in report.findings if f.where == "OBJECTIVE").status is Status.PASS, str(report)


def test_a_loss_fn_that_ignores_the_outputs_it_is_handed_is_not_read_as_an_objective():
    """A loss the model stored (llama2.c's last_loss): no output-reading check can say anything about it; only its
    own autograd graph can (a softmax fed to cross_entropy shows there, wherever the loss was computed)."""
    class StoresLoss(nn.Module):
        def __init__(self, wrong):
            super().__init__()
            self.lin, self.last, self.wrong = nn.Linear(6, 2), None, wrong

        def forward(self, x, y):
            logits = self.lin(x)
            self.last = F.cross_entropy(torch.softmax(logits, 1) if self.wrong else logits, y)
            return logits

    x, y = _data()
    for wrong in (False, True):
        torch.manual_seed(0)
        model = StoresLoss(wrong)
        model(x, y)  # the program's loop ran: the model holds its last loss
        report = firstdiv.learning_ledger(model, ({"x": x, "y": y}, None), lambda _out, _t, m=model: m.last,
                                          torch.optim.SGD(model.parameters(), 0.1))
        objective = next(f for f in report.findings if f.where == "OBJECTIVE")
        if wrong:
            assert objective.check == "objective.probabilities_as_logits" and objective.status is Status.FAIL
        else:
            assert objective.status is Status.PASS and "same loss" in objective.message, str(report)
            assert objective.evidence["loss_reads_outputs"] is False


def test_targets_mostly_following_the_rule_are_not_wrong_targets():
    x, y = _data(64)
    noisy = y.clone()
    noisy[::8] = 1 - noisy[::8]  # 12.5% flipped: label noise, or an approximate rule
    torch.manual_seed(0)
    model = _mlp()
    rule = lambda inputs: (inputs[:, 0] > 0).long()
    report = firstdiv.learning_ledger(model, (x, noisy), F.cross_entropy, torch.optim.SGD(model.parameters(), 0.1),
                                      task_probe=rule)
    task = next(f for f in report.findings if f.where == "TASK")
    assert task.status is Status.WARN and task.evidence["chance_agreement"] < 0.7, str(report)
    shuffled = y[torch.randperm(64, generator=torch.Generator().manual_seed(1))]
    report = firstdiv.learning_ledger(model, (x, shuffled), F.cross_entropy, torch.optim.SGD(model.parameters(), 0.1),
                                      task_probe=rule)
    assert report.first_divergence.kind == "task.label_mismatch", str(report)


# ---- next-token prediction that sees the future -----------------------------------------------------------------

class TinyLM(nn.Module):
    def __init__(self, causal: bool, vocab: int = 11, dim: int = 16):
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, dim), nn.Parameter(torch.randn(1, 32, dim) * 0.1)
        self.block = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.0, batch_first=True)
        self.head, self.causal = nn.Linear(dim, vocab), causal

    def forward(self, ids):
        n = ids.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(n) if self.causal else None
        return self.head(self.block(self.emb(ids) + self.pos[:, :n], src_mask=mask, is_causal=self.causal))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "sees_ahead"])
def test_next_token_prediction_that_sees_the_token_it_predicts_fails_dependency(causal):
    g = torch.Generator().manual_seed(0)
    seq = torch.randint(0, 11, (8, 13), generator=g)
    ids, targets = seq[:, :-1], seq[:, 1:]
    torch.manual_seed(0)
    model = TinyLM(causal)
    loss_fn = lambda out, t: F.cross_entropy(out.reshape(-1, 11), t.reshape(-1))
    report = firstdiv.learning_ledger(model, (ids, targets), loss_fn, torch.optim.Adam(model.parameters(), 1e-3),
                                      overfit_steps=0)
    dep = next(f for f in report.findings if f.where == "DEPENDENCY")
    if causal:
        assert dep.status is Status.PASS and dep.evidence["earlier_predictions_change"] == 0.0, str(report)
    else:
        assert (report.first_divergence.where, report.first_divergence.kind) == ("DEPENDENCY",
                                                                                  "dependency.future_visible"), str(report)


# ---- random masks drawn during evaluation ------------------------------------------------------------------------

class FunctionalDropout(nn.Module):
    def __init__(self, honours_mode: bool | str):
        super().__init__()
        self.fc1, self.fc2, self.honours_mode = nn.Linear(6, 32), nn.Linear(32, 2), honours_mode

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if self.honours_mode == "written":  # Tacotron 2's prenet: dropout on in evaluation too, as written
            h = F.dropout(h, p=0.5, training=True)
        elif self.honours_mode == "written_positional":
            h = nn.functional.dropout(h,
                                      0.5, True)
        elif self.honours_mode == "variable":  # True from a variable: not read as written intent
            on = not self.honours_mode
            h = F.dropout(h, 0.5, training=not on)
        else:
            h = F.dropout(h, 0.5, training=self.training) if self.honours_mode else F.dropout(h, 0.5)  # default: True
        return self.fc2(h)


@pytest.mark.parametrize("honours_mode", [True, False, "variable"],
                         ids=["training=self.training", "default_training", "training_from_a_variable"])
def test_a_functional_dropout_that_ignores_eval_mode_fails_evaluation(honours_mode):
    x, y = _data(64)
    torch.manual_seed(0)
    model = FunctionalDropout(honours_mode)

    def eval_fn(m, batch):
        m.eval()
        with torch.no_grad():
            return float(F.cross_entropy(m(batch[0]), batch[1]))

    report = firstdiv.six_claims(model, (x, y), F.cross_entropy, torch.optim.SGD(model.parameters(), 0.1), eval_fn=eval_fn)
    evaluation = next(f for f in report.findings if f.where == "EVALUATION")
    if honours_mode is True:
        assert evaluation.status is Status.PASS and evaluation.evidence["random_masks_drawn"] == 0, str(report)
    else:
        assert (evaluation.status, evaluation.check) == (Status.FAIL, "claim.evaluation.random_masks"), str(report)


@pytest.mark.parametrize("form", ["written", "written_positional"])
def test_a_dropout_written_with_training_true_is_stochastic_evaluation_by_design_not_a_fail(form):
    """The call's default is training=True, so a literal True the program wrote (Tacotron 2's always-on prenet, Monte
    Carlo dropout) is its design: WARN, naming the line, never a FAIL; the default and a variable still FAIL above."""
    x, y = _data(64)
    torch.manual_seed(0)
    model = FunctionalDropout(form)

    def eval_fn(m, batch):
        m.eval()
        with torch.no_grad():
            return float(F.cross_entropy(m(batch[0]), batch[1]))

    report = firstdiv.six_claims(model, (x, y), F.cross_entropy, torch.optim.SGD(model.parameters(), 0.1), eval_fn=eval_fn)
    evaluation = next(f for f in report.findings if f.where == "EVALUATION")
    assert (evaluation.status, evaluation.check) == (Status.WARN, "claim.evaluation.random_masks"), str(report)
    (site,) = evaluation.evidence["dropout_written_on"]
    assert site.startswith("test_evidence_before_fail.py:") and "training=True written" in evaluation.message


# ---- padding that reaches the loss -------------------------------------------------------------------------------

@pytest.mark.parametrize("ignored", [True, False], ids=["pad_ignored", "pad_in_loss"])
def test_padding_positions_that_move_the_loss_fail_objective(ignored):
    g = torch.Generator().manual_seed(0)
    lengths = [12, 9, 7, 11, 5, 10, 8, 12]
    seq = torch.randint(1, 11, (8, 13), generator=g)
    for i, n in enumerate(lengths):
        seq[i, n + 1:] = 0  # pad id 0 after each sequence
    ids, targets = seq[:, :-1], seq[:, 1:]
    torch.manual_seed(0)
    model = TinyLM(causal=True)
    model.pad_idx = 0  # the model holds its pad id (the padding is the program's own, not a design)
    pad = 0 if ignored else -100
    loss_fn = lambda out, t: F.cross_entropy(out.reshape(-1, 11), t.reshape(-1), ignore_index=pad)
    report = firstdiv.learning_ledger(model, (ids, targets), loss_fn, torch.optim.Adam(model.parameters(), 1e-3),
                                      overfit_steps=0)
    objective = next(f for f in report.findings if f.where == "OBJECTIVE")
    if ignored:
        assert objective.status is Status.PASS, str(report)
    else:
        assert (objective.status, objective.check) == (Status.FAIL, "objective.padding_in_loss"), str(report)
