"""The learning ledger: each fault of the catalog's ledger rows (rebuilt inline, small) stops the walk at
the right link with the right kind; healthy classifiers, regressions and a tiny causal LM pass every
link over seeds 0, 1, 2; the user's objects and the global RNGs are untouched after every call, also
when user code raises half-way; misuse is a one-line InvalidArgument."""

from __future__ import annotations

import json
import math
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import InvalidArgument, learning_ledger
from firstdiv.instruments._core.state import Snapshot
from firstdiv.report import Report, Status

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread, no spin-waiting

K, FEATURES, N = 4, 16, 64
VOCAB, T = 16, 12
LINKS = ["TASK", "OBJECTIVE", "DEPENDENCY", "GRADIENT", "OPTIMIZER_OWNERSHIP", "PARAMETER_UPDATE", "CAPABILITY"]




# ---- small programs ----------------------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self, classes: int = K, softmax: bool = False, detach: bool = False) -> None:
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(FEATURES, 32), nn.Linear(32, 32), nn.Linear(32, classes)
        self.softmax, self.detach = softmax, detach

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        h = torch.relu(self.fc2(h.detach() if self.detach else h))
        out = self.head(h)
        return out.softmax(dim=1) if self.softmax else out


class Regressor(nn.Module):
    def __init__(self, features: int = 2, bias: bool = True, hidden: bool = True) -> None:
        super().__init__()
        self.net = (nn.Sequential(nn.Linear(features, 32, bias=bias), nn.ReLU(), nn.Linear(32, 32, bias=bias), nn.ReLU(),
                                  nn.Linear(32, 1, bias=bias)) if hidden else nn.Linear(features, 1, bias=bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TinyLM(nn.Module):
    def __init__(self, vocab: int = VOCAB, dim: int = 32, tied: bool = False) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, dim), nn.Parameter(torch.zeros(T, dim))
        self.block = nn.TransformerEncoderLayer(dim, 2, 64, dropout=0.0, batch_first=True)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        if tied:
            self.lm_head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        return self.lm_head(self.block(self.embed(ids) + self.pos[:t], src_mask=mask))


def teacher(seed: int):
    gen = torch.Generator().manual_seed(1000 + seed)
    w = torch.randn(FEATURES, K, generator=gen)
    return lambda x: (x @ w).argmax(dim=1)


def classification(seed: int = 0, opt: str = "sgd", **model_kw):
    torch.manual_seed(seed)
    model = MLP(**model_kw)
    rule = teacher(seed)
    x = torch.randn(N, FEATURES, generator=torch.Generator().manual_seed(seed))
    optimizer = {"sgd": lambda: torch.optim.SGD(model.parameters(), lr=0.1),
                 "adam": lambda: torch.optim.Adam(model.parameters(), lr=1e-3)}[opt]()
    return model, (x, rule(x)), F.cross_entropy, optimizer, rule


def regression(seed: int = 0, offset: float = 0.0, **model_kw):
    torch.manual_seed(seed)
    model = Regressor(**model_kw)
    gen = torch.Generator().manual_seed(seed)
    direction = torch.randn(2, 2, generator=gen)
    rule = lambda x: torch.sin(x @ direction[:, :1]) + 0.5 * (x @ direction[:, 1:]) + offset
    x = torch.randn(N, 2, generator=gen)
    return model, (x, rule(x)), F.mse_loss, torch.optim.SGD(model.parameters(), lr=0.1), rule


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


def language_model(seed: int = 0, tied: bool = False):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    successor = torch.cat([torch.zeros(1, dtype=torch.long), torch.randperm(VOCAB - 1, generator=gen) + 1])
    tokens = torch.empty(16, T + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(1, VOCAB, (16,), generator=gen)
    for t in range(T):
        tokens[:, t + 1] = successor[tokens[:, t]]
    inputs, targets = tokens[:, :-1], tokens[:, 1:].clone()
    targets[:, -2:] = -100  # some positions are not supervised
    model = TinyLM(tied=tied)
    return model, (inputs, targets), lm_loss, torch.optim.AdamW(model.parameters(), lr=1e-3), lambda ids: successor[ids]


def ledger(model, batch, loss_fn, optimizer, **kw) -> Report:
    """Call the ledger and assert it left no trace on the model, the optimizer and the global state."""
    before = Snapshot.take(model, optimizer)
    report = learning_ledger(model, batch, loss_fn, optimizer, **kw)
    assert before.diff(Snapshot.take(model, optimizer)) == []
    assert isinstance(report, Report) and report.instrument == "learning_ledger"
    assert Report.from_dict(json.loads(report.to_json())).to_json() == report.to_json()
    if report.status is not Status.SKIPPED:
        assert [f.where for f in report.findings] == LINKS
    return report


def stops_at(report: Report, link: str, kind: str) -> None:
    assert report.status is Status.FAIL, str(report)
    div = report.first_divergence
    assert (div.where, div.kind) == (link, kind), str(report)
    idx = LINKS.index(link)
    assert all(f.status is not Status.FAIL for f in report.findings[:idx])
    assert all(f.check == "not_reached" and "not reached" in f.message for f in report.findings[idx + 1:])


def warns_at(report: Report, link: str, kind: str) -> None:
    """A fault the ledger names without confirming it (evidence before FAIL): a WARN of that kind, never a FAIL."""
    assert report.status is not Status.FAIL, str(report)
    f = report.findings[LINKS.index(link)]
    assert (f.status, f.check) == (Status.WARN, kind), str(report)


def finding(report: Report, link: str):
    return report.findings[LINKS.index(link)]


# ---- healthy programs: no false alarm ------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("build", [lambda s: classification(s), lambda s: classification(s, opt="adam"),
                                   regression, language_model], ids=["mlp-sgd", "mlp-adam", "regression", "lm-adamw"])
def test_healthy_programs_pass_every_link(build, seed):
    model, batch, loss_fn, optimizer, rule = build(seed)
    report = ledger(model, batch, loss_fn, optimizer, task_probe=rule)
    assert report.status is Status.PASS, str(report)
    assert all(f.status is Status.PASS for f in report.findings)
    cap = finding(report, "CAPABILITY").evidence
    assert cap["steps"] <= 200 and (cap["final_accuracy"] == 1.0 or cap["final_loss"] <= 0.1 * cap["initial_loss"])


def test_task_is_inferred_and_said():
    for build, task in ((classification, "classification"), (regression, "regression"), (language_model, "language_model")):
        model, batch, loss_fn, optimizer, _ = build(0)
        report = ledger(model, batch, loss_fn, optimizer, overfit_steps=1)
        assert report.details["task"] == task
        assert "inferred" in finding(report, "TASK").evidence["inferred"]
        # without a probe, TASK is not verified: a note on a PASS (never WARN or FAIL) saying how to supply one
        task_finding = finding(report, "TASK")
        assert task_finding.status is Status.PASS and task_finding.message.startswith("note: ")
        assert "task_probe" in task_finding.message


def test_whole_ledger_is_fast_on_a_small_model():
    model, batch, loss_fn, optimizer, rule = classification(0)
    start = time.perf_counter()
    ledger(model, batch, loss_fn, optimizer, task_probe=rule)
    assert time.perf_counter() - start < 2.0


# ---- TASK ------------------------------------------------------------------------------------------

def test_permuted_labels_stop_at_task_with_the_mapping():
    model, (x, y), loss_fn, optimizer, rule = classification(0)
    mapping = torch.tensor([1, 2, 3, 0])
    report = ledger(model, (x, mapping[y]), loss_fn, optimizer, task_probe=rule)
    stops_at(report, "TASK", "task.label_mismatch")
    ev = finding(report, "TASK").evidence
    assert ev["agreement"] < 0.1 and ev["consistent_mapping"] is True
    assert sorted(map(tuple, ev["mapping"])) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert "->" in report.first_divergence.observed


def test_known_examples_probe():
    model, (x, y), loss_fn, optimizer, _ = classification(0)
    ok = ledger(model, (x, y), loss_fn, optimizer, task_probe=(x[:10], y[:10]), overfit_steps=1)
    assert finding(ok, "TASK").status is Status.PASS and finding(ok, "TASK").evidence["compared"] == 10
    bad = ledger(model, (x, (y + 1) % K), loss_fn, optimizer, task_probe=(x[:10], y[:10]), overfit_steps=1)
    stops_at(bad, "TASK", "task.label_mismatch")
    unseen = ledger(model, (x, y), loss_fn, optimizer, task_probe=(x[:10] + 100, y[:10]), overfit_steps=1)
    assert finding(unseen, "TASK").status is Status.WARN and "none of the" in finding(unseen, "TASK").message


def test_regression_probe_and_its_mismatch():
    model, (x, y), loss_fn, optimizer, rule = regression(0)
    assert finding(ledger(model, (x, y), loss_fn, optimizer, task_probe=rule, overfit_steps=1), "TASK").status is Status.PASS
    shuffled = y[torch.randperm(N, generator=torch.Generator().manual_seed(0))]
    stops_at(ledger(model, (x, shuffled), loss_fn, optimizer, task_probe=rule), "TASK", "task.label_mismatch")


def test_labels_out_of_range_stop_at_task_before_the_loss_crashes():
    model, (x, y), loss_fn, optimizer, _ = classification(0)
    y = y.clone()
    y[3] = 7
    report = ledger(model, (x, y), loss_fn, optimizer)
    stops_at(report, "TASK", "task.label_out_of_range")
    assert finding(report, "TASK").evidence["out_of_range_values"] == [7]


@pytest.mark.parametrize(("shift", "kind"), [(0, "task.target_not_shifted"), (2, "task.target_shifted_twice")])
def test_language_model_target_alignment(shift, kind):
    model, (ids, targets), loss_fn, optimizer, _ = language_model(0)
    wrong = torch.full_like(targets, -100)
    wrong[:, : T - shift] = ids[:, shift:]
    report = ledger(model, (ids, wrong), loss_fn, optimizer)
    if shift == 2:  # multi-token prediction on purpose looks the same: named, not a FAIL
        warns_at(report, "TASK", kind)
    else:
        stops_at(report, "TASK", kind)
    assert finding(report, "TASK").evidence[f"match_shift{shift}"] == 1.0


# ---- OBJECTIVE -------------------------------------------------------------------------------------

def test_softmax_before_cross_entropy():
    model, batch, loss_fn, optimizer, rule = classification(0, softmax=True)
    report = ledger(model, batch, loss_fn, optimizer, task_probe=rule)
    stops_at(report, "OBJECTIVE", "objective.probabilities_as_logits")
    assert finding(report, "OBJECTIVE").evidence["fed"] == "softmax"  # read from the loss's own graph


def test_probabilities_with_nll_of_their_log_are_fine():
    model, batch, _, optimizer, rule = classification(0, softmax=True)
    report = ledger(model, batch, lambda p, t: F.nll_loss(p.log(), t), optimizer, task_probe=rule, overfit_steps=1)
    assert finding(report, "OBJECTIVE").status is Status.PASS


def test_flipped_loss_sign():
    model, batch, _, optimizer, rule = classification(0)
    report = ledger(model, batch, lambda o, t: -F.cross_entropy(o, t), optimizer, task_probe=rule)
    stops_at(report, "OBJECTIVE", "objective.wrong_sign")
    assert finding(report, "OBJECTIVE").evidence["d_loss_toward_correct"] > 0


def test_sum_reduction_on_regression_and_classification():
    model, batch, _, optimizer, rule = regression(0)
    report = ledger(model, batch, lambda o, t: F.mse_loss(o, t, reduction="sum"), optimizer, task_probe=rule)
    warns_at(report, "OBJECTIVE", "objective.sum_reduction")
    assert finding(report, "OBJECTIVE").evidence["ratio_to_per_example_mean"] == pytest.approx(8, rel=1e-4)
    model, batch, _, optimizer, rule = classification(0)
    report = ledger(model, batch, lambda o, t: F.cross_entropy(o, t, reduction="sum"), optimizer, task_probe=rule)
    warns_at(report, "OBJECTIVE", "objective.sum_reduction")


def test_change_loss_mse_on_one_column_is_initial_loss_named_as_a_warn():
    model, batch, _, optimizer, rule = classification(0)
    report = ledger(model, batch, lambda o, t: F.mse_loss(o[:, 0], t.float()), optimizer, task_probe=rule)
    assert finding(report, "OBJECTIVE").check == "objective.initial_loss"
    assert finding(report, "OBJECTIVE").status is Status.WARN
    ev = finding(report, "OBJECTIVE").evidence
    assert ev["ln_k"] == pytest.approx(math.log(K)) and ev["example_library_loss"] != pytest.approx(ev["example_manual_ce"])


def test_manual_mismatch_when_close_to_cross_entropy_but_not_it():
    model, batch, _, optimizer, rule = classification(0)
    report = ledger(model, batch, lambda o, t: 1.05 * F.cross_entropy(o, t), optimizer, task_probe=rule)
    warns_at(report, "OBJECTIVE", "objective.manual_mismatch")


@pytest.mark.parametrize("loss_fn", [
    lambda o, t: F.cross_entropy(o, t, label_smoothing=0.1),
    lambda o, t: F.cross_entropy(o, t, weight=torch.tensor([1.0, 2.0, 0.5, 3.0])),
    nn.CrossEntropyLoss(),
], ids=["label-smoothing", "class-weights", "module"])
def test_legitimate_cross_entropy_variants_are_not_alarms(loss_fn):
    model, batch, _, optimizer, rule = classification(0)
    report = ledger(model, batch, loss_fn, optimizer, task_probe=rule)
    assert report.status is Status.PASS, str(report)


def test_empty_mask_all_ignored():
    model, (ids, targets), loss_fn, optimizer, rule = language_model(0)
    report = ledger(model, (ids, torch.full_like(targets, -100)), loss_fn, optimizer, task_probe=rule)
    stops_at(report, "OBJECTIVE", "objective.empty_mask")
    assert finding(report, "OBJECTIVE").evidence["supervised_elements"] == 0


@pytest.mark.parametrize("clamp", [False, True], ids=["nan", "clamped"])
def test_empty_mask_from_a_zero_mask(clamp):
    model, (ids, targets), _, optimizer, rule = language_model(0)
    mask = torch.zeros_like(targets, dtype=torch.float)

    def masked(logits, t):
        per_token = F.cross_entropy(logits.reshape(-1, VOCAB), t.reshape(-1).clamp_min(0), reduction="none")
        m = mask[: t.shape[0]].reshape(-1)
        return (per_token * m).sum() / (m.sum().clamp_min(1) if clamp else m.sum())

    report = ledger(model, (ids, targets), masked, optimizer, task_probe=rule)
    stops_at(report, "OBJECTIVE", "objective.empty_mask")


@pytest.mark.filterwarnings("ignore:Using a target size")  # torch warns about the very bug under test
def test_regression_broadcast_and_its_correct_form():
    model, (x, y), _, optimizer, _ = regression(0)
    report = ledger(model, (x, y.squeeze(1)), F.mse_loss, optimizer)
    stops_at(report, "OBJECTIVE", "objective.shape_broadcast")
    fixed = ledger(model, (x, y.squeeze(1)), lambda o, t: F.mse_loss(o.squeeze(1), t), optimizer, overfit_steps=1)
    assert finding(fixed, "OBJECTIVE").status is Status.PASS


def test_non_scalar_loss_is_the_evidence_not_a_failure_of_the_program():
    """A per-example loss says nothing of the program (its loop reduces it, or backward raises): SKIPPED, the fix named."""
    model, batch, _, optimizer, rule = classification(0)
    report = ledger(model, batch, lambda o, t: F.cross_entropy(o, t, reduction="none"), optimizer, task_probe=rule)
    assert report.status is Status.SKIPPED and report.first_divergence is None
    assert "shape (64,)" in report.reason and "reduce a per-example loss inside loss_fn" in report.reason


# ---- DEPENDENCY, GRADIENT --------------------------------------------------------------------------

def test_detach_stops_at_dependency_naming_the_parameters():
    model, batch, loss_fn, optimizer, rule = classification(0, detach=True)
    report = ledger(model, batch, loss_fn, optimizer, task_probe=rule)
    stops_at(report, "DEPENDENCY", "dependency.unreachable")
    assert finding(report, "DEPENDENCY").evidence["unreachable"] == ["fc1.weight", "fc1.bias"]


def test_frozen_model_has_nothing_to_learn():
    model, batch, loss_fn, optimizer, rule = classification(0)
    model.requires_grad_(False)
    report = ledger(model, batch, loss_fn, optimizer, task_probe=rule)
    stops_at(report, "DEPENDENCY", "dependency.no_trainable_parameters")


def test_partly_frozen_model_with_head_only_optimizer_passes():
    model, batch, loss_fn, _, rule = classification(0)
    model.fc1.requires_grad_(False)
    model.fc2.requires_grad_(False)
    optimizer = torch.optim.SGD(model.head.parameters(), lr=0.5)
    report = ledger(model, batch, loss_fn, optimizer, task_probe=rule)
    assert report.status is Status.PASS, str(report)
    assert finding(report, "DEPENDENCY").evidence["frozen"] == 4


def test_zero_and_nonfinite_gradients():
    model, batch, loss_fn, optimizer, rule = classification(0)
    with torch.no_grad():
        model.fc2.weight.zero_()
        model.head.weight.zero_()
    # a zeroed head: the loss does not depend on what comes before it at these weights (a counterfactual on a copy
    # shows it), so their zero gradient is not a confirmed defect: a WARN, not a FAIL
    report = ledger(model, batch, loss_fn, optimizer, task_probe=rule)
    assert finding(report, "GRADIENT").status is Status.WARN, str(report)
    assert "fc1.weight" in finding(report, "GRADIENT").evidence["loss_invariant_to"]

    class Sqrt(MLP):
        def __init__(self):
            super().__init__()
            self.gate = nn.Parameter(torch.zeros(1))

        def forward(self, x):
            return super().forward(x) + torch.sqrt(self.gate)  # d sqrt/dx at 0 is inf

    torch.manual_seed(0)
    model = Sqrt()
    report = ledger(model, batch, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1), task_probe=rule)
    stops_at(report, "GRADIENT", "gradient.nonfinite")
    assert finding(report, "GRADIENT").evidence["nonfinite"] == ["gate"]


# ---- OPTIMIZER_OWNERSHIP, PARAMETER_UPDATE ---------------------------------------------------------

def test_stale_optimizer_names_the_replaced_head():
    model, batch, loss_fn, _, rule = classification(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.head = nn.Linear(32, K)  # replaced after the optimizer was built
    report = ledger(model, batch, loss_fn, optimizer, task_probe=rule)
    stops_at(report, "OPTIMIZER_OWNERSHIP", "optimizer.stale_parameter")
    ev = finding(report, "OPTIMIZER_OWNERSHIP").evidence
    assert ev["stale_slots"] == ["head.weight", "head.bias"] and ev["stale_shapes"] == [[K, 32], [K]]
    assert "head.weight" in report.first_divergence.observed


def test_parameter_missing_from_the_optimizer():
    model, batch, loss_fn, _, rule = classification(0)
    optimizer = torch.optim.SGD([*model.fc2.parameters(), *model.head.parameters()], lr=0.1)
    report = ledger(model, batch, loss_fn, optimizer, task_probe=rule)
    stops_at(report, "OPTIMIZER_OWNERSHIP", "optimizer.missing_parameter")
    assert finding(report, "OPTIMIZER_OWNERSHIP").evidence["missing"] == ["fc1.weight", "fc1.bias"]


def test_several_param_groups_and_a_zero_lr_group():
    model, batch, loss_fn, _, rule = classification(0)
    groups = [{"params": model.fc1.parameters(), "lr": 0.05}, {"params": [*model.fc2.parameters(), *model.head.parameters()]}]
    healthy = ledger(model, batch, loss_fn, torch.optim.SGD(groups, lr=0.1), task_probe=rule)
    assert healthy.status is Status.PASS, str(healthy)
    assert finding(healthy, "CAPABILITY").evidence["lr"] == [0.05, 0.1]
    groups = [{"params": model.fc1.parameters(), "lr": 0.0}, {"params": [*model.fc2.parameters(), *model.head.parameters()]}]
    report = ledger(model, batch, loss_fn, torch.optim.SGD(groups, lr=0.1), task_probe=rule)
    # a group at lr 0 beside trained ones may be frozen by its lr on purpose: not confirmed, so a WARN of the kind
    warns_at(report, "PARAMETER_UPDATE", "update.not_moved")
    update = finding(report, "PARAMETER_UPDATE")
    assert update.evidence["not_moved"] == ["fc1.weight", "fc1.bias"]
    assert "because their param group's lr is 0" in update.message and "not confirmed that they are meant to train" in update.message


# ---- CAPABILITY ------------------------------------------------------------------------------------

def test_tiny_learning_rate_cannot_overfit():
    model, batch, loss_fn, _, rule = classification(0)
    report = ledger(model, batch, loss_fn, torch.optim.SGD(model.parameters(), lr=1e-7), task_probe=rule, overfit_steps=60)
    stops_at(report, "CAPABILITY", "capability.cannot_overfit")
    ev = finding(report, "CAPABILITY").evidence
    # every lr round (x1 .. x1000) was tried before the verdict, and the weights barely moved in any
    assert [r["scale"] for r in ev["rounds"]] == [1.0, 10.0, 100.0, 1000.0]
    assert ev["fell_by"] < 1e-3 and ev["parameter_change"] < 1e-3
    assert "learning rate" in report.first_divergence.hint


def test_linear_regression_without_bias_cannot_reach_an_offset():
    model, batch, loss_fn, optimizer, rule = regression(0, offset=20.0, bias=False, hidden=False)
    report = ledger(model, batch, loss_fn, optimizer, task_probe=rule)
    stops_at(report, "CAPABILITY", "capability.cannot_overfit")
    ev = finding(report, "CAPABILITY").evidence
    assert ev["initial_loss"] > 300 and ev["best_loss"] > 0.9 * ev["initial_loss"] and ev["examples"] == 8


def test_overfit_batch_and_zero_steps():
    model, (x, y), loss_fn, optimizer, rule = classification(0)
    report = ledger(model, (x, y), loss_fn, optimizer, task_probe=rule, overfit_batch=(x[:4], y[:4]))
    assert finding(report, "CAPABILITY").evidence["examples"] == 4
    skipped = ledger(model, (x, y), loss_fn, optimizer, task_probe=rule, overfit_steps=0)
    assert skipped.status is Status.WARN and finding(skipped, "CAPABILITY").status is Status.SKIPPED


# ---- shapes of evidence: dict batches, tied weights, integer targets --------------------------------

def test_dict_batches():
    model, (x, y), loss_fn, optimizer, rule = classification(0)
    for batch in ({"inputs": x, "labels": y}, {"x": x, "y": y}):
        assert ledger(model, batch, loss_fn, optimizer, task_probe=rule).status is Status.PASS

    class Keyword(MLP):
        def forward(self, features, mask=None):
            return super().forward(features * mask)

    torch.manual_seed(0)
    model = Keyword()
    report = ledger(model, {"features": x, "mask": torch.ones_like(x), "labels": y}, loss_fn,
                    torch.optim.SGD(model.parameters(), lr=0.1), task_probe=lambda inputs: rule(inputs["features"]))
    assert report.status is Status.PASS, str(report)


def test_tied_weights_language_model():
    model, batch, loss_fn, optimizer, rule = language_model(0, tied=True)
    report = ledger(model, batch, loss_fn, optimizer, task_probe=rule)
    assert report.status is Status.PASS, str(report)
    assert "lm_head.weight" not in finding(report, "GRADIENT").evidence["grad_norms"]  # one object, one name


def test_non_long_integer_targets():
    model, (x, y), _, optimizer, rule = classification(0)
    report = ledger(model, (x, y.to(torch.int32)), lambda o, t: F.cross_entropy(o, t.long()), optimizer, task_probe=rule)
    assert report.status is Status.PASS and report.details["task"] == "classification"
    raw = ledger(model, (x, y.to(torch.int32)), F.cross_entropy, optimizer, task_probe=rule)  # torch refuses int32
    assert raw.status in (Status.SKIPPED, Status.PASS)
    if raw.status is Status.SKIPPED:
        assert "loss_fn raised" in raw.reason


# ---- user code raising half-way, misuse --------------------------------------------------------------

@pytest.mark.parametrize("calls", [1, 2, 3, 12])
def test_no_trace_when_loss_fn_raises_half_way(calls):
    model, batch, _, optimizer, rule = classification(0)
    count = 0

    def flaky(o, t):
        nonlocal count
        count += 1
        if count >= calls:
            raise RuntimeError("injected")
        return F.cross_entropy(o, t)

    report = ledger(model, batch, flaky, optimizer, task_probe=rule)  # asserts no trace
    assert report.status in (Status.SKIPPED, Status.WARN)
    if calls == 1:
        assert "loss_fn raised RuntimeError: injected" in report.reason
    assert "injected" in str(report)


def test_no_trace_with_dropout_and_batchnorm_and_a_raising_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, K))
    _, batch, loss_fn, _, rule = classification(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    report = ledger(model, batch, loss_fn, optimizer, task_probe=rule)
    assert report.status is not Status.FAIL, str(report)

    class Broken(MLP):
        def forward(self, x):
            raise ValueError("bad forward")

    broken = Broken()
    report = ledger(broken, batch, loss_fn, torch.optim.SGD(broken.parameters(), lr=0.1))
    assert report.status is Status.SKIPPED and "ValueError: bad forward" in report.reason


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"model": 3}, "Expected `model` to be a torch.nn.Module but got int"),
    ({"optimizer": "sgd"}, "Expected `optimizer` to be a torch.optim.Optimizer but got str"),
    ({"loss_fn": None}, "Expected `loss_fn` to be callable but got None"),
    ({"batch": 5}, "Expected `batch` to be a tuple (inputs, targets) or a dict but got int"),
    ({"batch": (1, 2, 3)}, "of length 3"),
    ({"task": "vision"}, "Expected `task` to be one of"),
    ({"overfit_steps": -1}, "Expected `overfit_steps` to be an integer >= 0 but got -1"),
    ({"overfit_steps": True}, "Expected `overfit_steps`"),
    ({"task_probe": 5}, "Expected `task_probe` to be a callable"),
])
def test_misuse_is_a_one_line_invalid_argument(kwargs, message):
    model, batch, loss_fn, optimizer, _ = classification(0)
    args = {"model": model, "batch": batch, "loss_fn": loss_fn, "optimizer": optimizer, **kwargs}
    before = Snapshot.take(model, optimizer)
    with pytest.raises(InvalidArgument) as info:
        learning_ledger(args.pop("model"), args.pop("batch"), args.pop("loss_fn"), args.pop("optimizer"), **args)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert before.diff(Snapshot.take(model, optimizer)) == []


def test_explicit_task_overrides_inference():
    model, batch, loss_fn, optimizer, _ = classification(0)
    report = ledger(model, batch, loss_fn, optimizer, task="classification", overfit_steps=1)
    assert "given" in finding(report, "TASK").evidence["inferred"]
    model, batch, loss_fn, optimizer, _ = regression(0)
    report = ledger(model, batch, loss_fn, optimizer, task="classification", overfit_steps=1)
    assert "no class axis" in report.details["task_inferred"]


def test_binary_single_logit_is_not_a_one_class_classifier():
    model, (x, y), _, _, _ = classification(0, classes=1)
    binary = (y > 1).long()
    loss_fn = lambda o, t: F.binary_cross_entropy_with_logits(o.squeeze(1), t.float())
    report = ledger(model, (x, binary), loss_fn, torch.optim.SGD(model.parameters(), lr=0.1))
    assert "binary logit" in report.details["task_inferred"]
    assert report.status is not Status.FAIL, str(report)


def test_maximize_true_moves_up_the_loss():
    model, batch, loss_fn, _, rule = classification(0)
    report = ledger(model, batch, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1, maximize=True), task_probe=rule)
    warns_at(report, "PARAMETER_UPDATE", "update.wrong_direction")
    assert finding(report, "PARAMETER_UPDATE").evidence["update_dot_gradient"] > 0


def test_negated_regression_loss_has_the_wrong_sign():
    model, batch, _, optimizer, rule = regression(0)
    stops_at(ledger(model, batch, lambda o, t: -F.mse_loss(o, t), optimizer, task_probe=rule), "OBJECTIVE", "objective.wrong_sign")


def test_a_slow_learner_is_a_warning_not_an_alarm():
    model, batch, loss_fn, _, rule = regression(0)
    report = ledger(model, batch, loss_fn, torch.optim.SGD(model.parameters(), lr=0.05), task_probe=rule, overfit_steps=100)
    cap = finding(report, "CAPABILITY")
    assert report.status is Status.WARN and cap.status is Status.WARN, str(report)
    assert 0.25 <= cap.evidence["fell_by"] < 0.9 and "overfit_steps" in cap.message


def test_a_tiny_budget_is_inconclusive_unless_the_weights_are_stuck():
    model, batch, loss_fn, optimizer, rule = classification(0)
    short = ledger(model, batch, loss_fn, optimizer, task_probe=rule, overfit_steps=2)
    assert finding(short, "CAPABILITY").status is Status.WARN and "inconclusive" in finding(short, "CAPABILITY").message
    stuck = ledger(model, batch, loss_fn, torch.optim.SGD(model.parameters(), lr=1e-9), task_probe=rule, overfit_steps=2)
    assert finding(stuck, "CAPABILITY").status is Status.FAIL


def test_nan_targets_stop_at_task_not_at_an_empty_mask():
    model, (x, y), loss_fn, optimizer, _ = regression(0)
    y = y.clone()
    y[5] = float("nan")
    report = ledger(model, (x, y), loss_fn, optimizer)
    stops_at(report, "TASK", "task.nonfinite_targets")
    assert finding(report, "TASK").evidence["nonfinite_targets"] == 1


def test_a_loss_normalised_by_a_constant_batch_size_is_not_a_sum():
    model, batch, _, optimizer, rule = classification(0)
    report = ledger(model, batch, lambda o, t: F.cross_entropy(o, t, reduction="sum") / N, optimizer, task_probe=rule)
    assert report.status is not Status.FAIL and finding(report, "OBJECTIVE").status is Status.PASS, str(report)
    assert finding(report, "OBJECTIVE").evidence["reduction"] == "mean cross-entropy"


def _focal(out, y, gamma=2.0):
    logp = torch.nn.functional.log_softmax(out, 1).gather(1, y[:, None]).squeeze(1)
    return (-(1 - logp.exp()) ** gamma * logp).mean()


def test_intended_non_cross_entropy_objective_is_checked_against_reference_loss():
    from firstdiv import zoo

    p = zoo.build("mlp", seed=0)
    # a focal loss is a correct program: not cross-entropy, but it rewards the correct class on every example, so
    # without reference_loss OBJECTIVE is a note saying how to check it (it used to FAIL objective.initial_loss)
    flagged = firstdiv.learning_ledger(p.model, p.batch, _focal, p.optimizer, task_probe=p.task_probe)
    objective = flagged.findings[1]
    assert objective.status is Status.PASS and objective.message.startswith("note: ") and "reference_loss" in objective.message
    ok = firstdiv.learning_ledger(p.model, p.batch, _focal, p.optimizer, task_probe=p.task_probe, reference_loss=_focal)
    assert ok.status is not Status.FAIL, str(ok)
    wrong = firstdiv.learning_ledger(p.model, p.batch, _focal, p.optimizer, task_probe=p.task_probe,
                                     reference_loss=lambda o, y: _focal(o, y, gamma=0.5))
    assert (wrong.first_divergence.where, wrong.first_divergence.kind) == ("OBJECTIVE", "objective.manual_mismatch")
    assert "example 0" in wrong.first_divergence.observed
    with pytest.raises(firstdiv.InvalidArgument, match="reference_loss"):
        firstdiv.learning_ledger(p.model, p.batch, _focal, p.optimizer, reference_loss=3)
