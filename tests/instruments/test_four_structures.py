"""four_structures: Python object graph vs registered tree vs autograd graph vs optimizer, by identity."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import four_structures
from firstdiv.errors import InvalidArgument
from firstdiv.instruments._core.state import Snapshot
from firstdiv.report import Report, Status


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def audit(model: nn.Module, optimizer, batch=None, loss_fn=None, watch=()) -> Report:
    """Call the instrument; assert it left no trace on the model, optimizer and anything else watched."""
    before = Snapshot.take(model, optimizer, *watch)
    report = four_structures(model, optimizer, batch, loss_fn)
    assert before.diff(Snapshot.take(model, optimizer, *watch)) == []
    assert str(report)
    assert Report.from_dict(report.to_dict()).to_dict() == report.to_dict()
    return report


def statuses(report: Report) -> dict[str, Status]:
    return {f.where: f.status for f in report.findings}


class MLP(nn.Module):
    def __init__(self, seed: int = 0, classes: int = 3) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.fc1, self.fc2, self.fc3 = nn.Linear(6, 16), nn.Linear(16, 16), nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class FineTune(nn.Module):
    def __init__(self, seed: int = 0, classes: int = 3) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.backbone = nn.Sequential(nn.Linear(6, 16), nn.ReLU())
        self.head = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


class ScaledRegressor(nn.Module):
    """The plain_attribute_tensor fault: `scale` requires grad but is a plain attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 16), nn.Linear(16, 1)
        self.scale = torch.ones(1, requires_grad=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.fc2(torch.tanh(self.fc1(x))) * self.scale).squeeze(-1)


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.mix, self.norm = nn.Linear(width, width), nn.BatchNorm1d(width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + F.relu(self.norm(self.mix(h)))


class ListBlocks(nn.Module):
    """The modules_in_list fault: blocks in a plain Python list."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.out = nn.Linear(6, 8), nn.Linear(8, 3)
        self.blocks = [Block(8), Block(8)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h)


def data(seed: int = 0, n: int = 16, classes: int = 3):
    g = _gen(seed)
    return torch.randn(n, 6, generator=g), torch.randint(0, classes, (n,), generator=g)


# ---- the catalog's faults, inline -----------------------------------------------------------------

def test_optimizer_subset_names_the_missing_parameter():
    model = MLP()
    opt = torch.optim.SGD([*model.fc2.parameters(), *model.fc3.parameters()], lr=0.1)
    report = audit(model, opt, data(), F.cross_entropy)
    div = report.first_divergence
    assert report.status is Status.FAIL and (div.where, div.kind) == ("fc1.weight", "optimizer.missing_parameter")
    assert "optimizer owns 4 tensors, 0 of them no longer in the model" in div.observed
    missing = [f for f in report.findings if f.check == "optimizer.missing_parameter"]
    assert len(missing) == 1 and missing[0].evidence["missing"] == ["fc1.weight", "fc1.bias"]


@pytest.mark.parametrize("classes", [3, 5])
def test_stale_optimizer_after_head_replacement(classes):
    model = FineTune()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.head = nn.Linear(16, classes)  # replaced after the optimizer was built (same or new class count)
    report = audit(model, opt, data(classes=classes), F.cross_entropy)
    div = report.first_divergence
    assert (div.where, div.kind) == ("head.weight", "optimizer.stale_parameter")
    assert "optimizer owns 4 tensors, 2 of them no longer in the model" in div.observed
    stale = next(f for f in report.findings if f.where == "head.weight")
    assert stale.evidence["stale_tensors"] == 2 and stale.evidence["stale_shapes"] == [[3, 16], [3]]
    assert [f.where for f in report.findings if f.check == "optimizer.stale_parameter"] == ["head.weight"]
    assert stale.evidence["replaced"] == ["head.weight", "head.bias"]


def test_stale_parameter_matched_by_recorded_names():
    model = nn.Module()
    model.p, model.q = nn.Linear(3, 3), nn.Linear(3, 3)
    named = list(model.named_parameters())
    opt = torch.optim.SGD(named[2:] + named[:2], lr=0.1)  # q first; param groups record "param_names"
    model.p, model.q = nn.Linear(3, 3), nn.Linear(3, 3)  # same shapes: only the names tell the slots apart
    report = audit(model, opt)
    assert report.first_divergence.where == "p.weight"
    slots = {n: s for f in report.findings if f.check == "optimizer.stale_parameter" for n, s in f.evidence["stale_slots"].items()}
    assert slots == {"p.weight": [0, 2], "p.bias": [0, 3], "q.weight": [0, 0], "q.bias": [0, 1]}


def test_plain_attribute_tensor_comes_before_the_optimizer_problem_it_causes():
    model = ScaledRegressor()
    opt = torch.optim.SGD(list(model.fc2.parameters()), lr=0.1)  # fc1 also missing
    g = _gen()
    x, y = torch.randn(8, 6, generator=g), torch.randn(8, generator=g)
    report = audit(model, opt, (x, y), F.mse_loss)
    div = report.first_divergence
    assert (div.where, div.kind) == ("scale", "structure.unregistered_tensor")
    ev = next(f for f in report.findings if f.where == "scale").evidence
    assert ev["requires_grad"] is True and ev["owned_by_optimizer"] is False and ev["reached_by_autograd"] is True
    assert statuses(report)["fc1.weight"] is Status.FAIL  # still reported, after


def test_plain_attribute_tensor_owned_by_the_optimizer_is_still_unregistered():
    model = ScaledRegressor()
    opt = torch.optim.SGD([*model.parameters(), model.scale], lr=0.1)
    report = audit(model, opt)
    assert report.first_divergence.where == "scale"
    assert next(f for f in report.findings if f.where == "scale").evidence["owned_by_optimizer"] is True
    assert not any(f.check == "optimizer.stale_parameter" for f in report.findings)  # hidden, not stale


def test_modules_in_list_hides_parameters_and_batchnorm():
    model = ListBlocks()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    report = audit(model, opt, data(), F.cross_entropy, watch=model.blocks)
    div = report.first_divergence
    assert (div.where, div.kind) == ("blocks", "structure.unregistered_module")
    ev = next(f for f in report.findings if f.where == "blocks").evidence
    assert ev["modules"] == 2 and ev["parameters"] == 8 and ev["owned_by_optimizer"] == 0
    assert ev["reached_by_autograd"] == 8 and ev["mode_dependent_modules"] == 2
    assert ev["parameter_elements"] == 2 * (8 * 8 + 8 + 8 + 8)


def test_blocks_in_a_list_whose_parameters_a_parameter_list_registers_hide_nothing():
    """N-BEATS style: the blocks live in a plain list, their parameters are registered through a ParameterList, so
    parameters(), state_dict() and the optimizer carry them all; with no mode-dependent module nothing is hidden."""

    class Listed(nn.Module):
        def __init__(self, mode_dependent: bool) -> None:
            super().__init__()
            self.blocks = [nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.1) if mode_dependent else nn.ReLU())
                           for _ in range(2)]
            self.params = nn.ParameterList([p for b in self.blocks for p in b.parameters()])
            self.head = nn.Linear(6, 1)

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return self.head(x).squeeze(-1)

    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(8, 6, generator=g), torch.randn(8, generator=g))
    plain = Listed(False)
    report = audit(plain, torch.optim.Adam(plain.parameters(), 1e-3), batch, F.mse_loss)
    found = next(f for f in report.findings if f.where == "blocks")
    assert found.status is Status.PASS and found.evidence["registered_by_another_path"] == 4, str(report)
    assert report.first_divergence is None
    with_dropout = Listed(True)  # .train()/.eval() still miss the hidden dropout: the structure diverges
    report = audit(with_dropout, torch.optim.Adam(with_dropout.parameters(), 1e-3), batch, F.mse_loss)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("blocks", "structure.unregistered_module")
    assert next(f for f in report.findings if f.where == "blocks").evidence["parameters"] == 0


def test_nested_dict_and_list_paths_are_named_in_the_users_terms():
    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(4, 4)
            self.gate = torch.zeros(4, requires_grad=True)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = Encoder()
            self.heads = {"a": nn.Linear(4, 2)}
            self.weights = [torch.randn(2, requires_grad=True)]

    model = Model()
    report = audit(model, torch.optim.SGD(model.parameters(), lr=0.1))
    kinds = {f.where: f.check for f in report.findings}
    assert kinds["encoder.gate"] == "structure.unregistered_tensor"
    assert kinds["heads"] == "structure.unregistered_module"
    assert kinds["weights[0]"] == "structure.unregistered_tensor"
    assert report.details["python"] == ["heads", "weights[0]", "encoder.gate"]  # named_modules order, then attributes
    # no batch: whether the model uses them is not confirmed, and no optimizer owns them: named, not failed
    assert statuses(report)["heads"] is Status.WARN and statuses(report)["weights[0]"] is Status.WARN
    assert report.first_divergence is None

    class Used(Model):
        def forward(self, x):
            return self.heads["a"](self.encoder.proj(x)) * self.weights[0]

    model = Used()
    report = audit(model, torch.optim.SGD(model.parameters(), lr=0.1), (torch.randn(8, 4), torch.randn(8, 2)),
                   nn.functional.mse_loss)
    # the loss reaches the list's tensor and no optimizer owns it: a trainable tensor nothing trains, confirmed
    assert statuses(report)["weights[0]"] is Status.FAIL and statuses(report)["encoder.gate"] is Status.WARN


def test_aliases_constants_and_derived_tensors_are_not_alarms():
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.shortcut = [self.fc]  # alias of a registered module
            self.params_view = [self.fc.weight]  # alias of a registered parameter
            self.mask = torch.tril(torch.ones(4, 4))  # plain constant, same device
            self.cached = self.fc.weight * 2  # derived from registered parameters (weight_norm-style cache)
            self.acts = [nn.ReLU()]  # a list of modules that hide nothing: no alarm

    model = Model()
    report = audit(model, torch.optim.SGD(model.parameters(), lr=0.1))
    s = statuses(report)
    assert report.status is Status.PASS and report.first_divergence is None
    assert s["mask"] is Status.PASS and s["cached"] is Status.PASS and s["acts"] is Status.PASS
    assert "shortcut" not in s and "params_view" not in s
    assert next(f for f in report.findings if f.where == "PYTHON").evidence["aliases"] == 2


def test_constant_on_another_device_is_a_warning():
    model = MLP()
    model.table = torch.ones(3, device="meta")  # will not follow model.to(); already elsewhere
    report = audit(model, torch.optim.SGD(model.parameters(), lr=0.1))
    f = next(f for f in report.findings if f.where == "table")
    assert f.status is Status.WARN and f.evidence["device"] == "meta" and report.status is Status.WARN


# ---- healthy programs and edge cases: no false alarms -------------------------------------------

class TiedLM(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed, self.mix = nn.Embedding(11, 8), nn.Linear(8, 8)
        self.lm_head = nn.Linear(8, 11, bias=False)
        self.lm_head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.lm_head(torch.tanh(self.mix(self.embed(tokens))))


class SmallCNN(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Dropout(0.2))
        self.head = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def _healthy(kind: str, seed: int):
    g = _gen(seed)
    if kind == "mlp":
        m = MLP(seed)
        return m, torch.optim.SGD(m.parameters(), lr=0.1), data(seed), F.cross_entropy
    if kind == "cnn":
        m = SmallCNN(seed)
        batch = (torch.randn(8, 1, 8, 8, generator=g), torch.randint(0, 3, (8,), generator=g))
        return m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), batch, F.cross_entropy
    if kind == "groups":
        m = MLP(seed)
        opt = torch.optim.AdamW([{"params": m.fc1.parameters(), "lr": 1e-3},
                                 {"params": [*m.fc2.parameters(), *m.fc3.parameters()], "weight_decay": 0.0}], lr=1e-2)
        return m, opt, data(seed), F.cross_entropy
    if kind == "tied":
        m = TiedLM(seed)
        tokens = torch.randint(0, 11, (4, 6), generator=g)
        return m, torch.optim.Adam(m.parameters()), (tokens, tokens.roll(-1, 1)), \
            lambda out, t: F.cross_entropy(out.reshape(-1, 11), t.reshape(-1))
    m = FineTune(seed)  # frozen backbone, trainable head
    m.backbone.requires_grad_(False)
    return m, torch.optim.Adam(m.head.parameters()), data(seed), F.cross_entropy


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", ["mlp", "cnn", "groups", "tied", "frozen_backbone"])
def test_healthy_programs_raise_no_alarm(kind, seed):
    model, opt, batch, loss_fn = _healthy(kind, seed)
    report = audit(model, opt, batch, loss_fn)
    assert report.status is Status.PASS and report.first_divergence is None, str(report)
    if kind == "tied":
        registered = next(f for f in report.findings if f.where == "REGISTERED").evidence
        assert registered["tied"] == [["embed.weight", "lm_head.weight"]] and registered["parameters"] == 3
        assert registered["parameter_names"] == 4


def test_frozen_parameters_owned_by_the_optimizer_warn_only():
    model = MLP()
    model.requires_grad_(False)
    report = audit(model, torch.optim.SGD(model.parameters(), lr=0.1), data(), F.cross_entropy)
    assert report.status is Status.WARN and report.first_divergence is None
    f = next(f for f in report.findings if f.check == "optimizer.frozen_parameter")
    assert f.where == "fc1.weight" and f.evidence["count"] == 6


def test_parameter_free_model_and_external_optimizer_tensor():
    model = nn.ReLU()
    stray = torch.zeros(3, requires_grad=True)
    report = audit(model, torch.optim.SGD([stray], lr=0.1), (torch.randn(2, 3), None), lambda out, t: out.sum())
    assert report.status is Status.WARN
    f = next(f for f in report.findings if f.check == "optimizer.stale_parameter")
    assert f.where == "optimizer.param_groups[0][0]" and f.status is Status.WARN


def test_duplicate_in_optimizer():
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.param_groups[0]["params"].append(model.fc3.bias)
    report = audit(model, opt)
    div = report.first_divergence
    assert (div.where, div.kind) == ("fc3.bias", "structure.duplicate_in_optimizer")


def test_unreached_parameter_is_a_warning_with_its_name():
    class WithUnused(MLP):
        def __init__(self) -> None:
            super().__init__()
            self.aux = nn.Linear(16, 3)

    model = WithUnused()
    report = audit(model, torch.optim.SGD(model.parameters(), lr=0.1), data(), F.cross_entropy)
    f = next(f for f in report.findings if f.check == "structure.unreached_parameter")
    assert f.where == "aux.weight" and f.status is Status.WARN and f.evidence["unreached"] == ["aux.weight", "aux.bias"]
    assert report.first_divergence is None


def test_optimizer_state_on_another_device_fails():
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt.state[model.fc2.weight]["momentum_buffer"] = torch.zeros(16, 16, device="meta")
    before = Snapshot.take(model)  # meta tensors cannot be compared by value, so the model alone is watched
    report = four_structures(model, opt)
    assert before.diff(Snapshot.take(model)) == []
    assert (report.first_divergence.where, report.first_divergence.kind) == ("fc2.weight", "structure.device_mismatch")


def test_model_spanning_devices_warns():
    model = MLP()
    model.register_buffer("table", torch.zeros(2, device="meta"))
    report = four_structures(model, torch.optim.SGD(model.parameters(), lr=0.1))
    f = next(f for f in report.findings if f.check == "structure.device_mismatch")
    assert f.where == "table" and f.status is Status.WARN and f.evidence["devices"] == {"cpu": 6, "meta": 1}


def test_without_batch_the_autograd_structure_is_skipped_with_how_to():
    model = MLP()
    report = audit(model, torch.optim.SGD(model.parameters(), lr=0.1))
    f = next(f for f in report.findings if f.where == "AUTOGRAD")
    assert f.status is Status.SKIPPED and "batch and loss_fn" in f.message
    assert report.status is Status.PASS and report.side_effects == "none"


def test_optimizer_none_skips_the_optimizer_structure():
    report = audit(MLP(), None)
    assert next(f for f in report.findings if f.where == "OPTIMIZER").status is Status.SKIPPED


@pytest.mark.parametrize("fail_on", [1, 2])
def test_no_trace_when_loss_fn_raises(fail_on):
    model = ListBlocks()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    calls = []

    def loss_fn(out, t):
        calls.append(1)
        if len(calls) >= fail_on:
            raise RuntimeError("boom in loss_fn")
        return F.cross_entropy(out, t)

    for _ in range(fail_on):
        report = audit(model, opt, data(), loss_fn, watch=model.blocks)
    f = next(f for f in report.findings if f.where == "AUTOGRAD")
    assert f.status is Status.SKIPPED and "RuntimeError: boom in loss_fn" in f.message
    assert report.first_divergence.where == "blocks"  # the other structures still stand


@pytest.mark.parametrize(("args", "message"), [
    ((3, None), "Expected `model` to be a torch.nn.Module but got int"),
    ((nn.Linear(2, 2), "sgd"), "Expected `optimizer` to be a torch.optim.Optimizer but got str"),
    ((nn.Linear(2, 2), None, (torch.zeros(1, 2), None), 5), "Expected `loss_fn` to be callable but got int"),
    ((nn.Linear(2, 2), None, 7, F.mse_loss), "Expected `batch` to be a tuple (inputs, targets) or a dict but got int"),
])
def test_bad_inputs_are_one_line_errors(args, message):
    with pytest.raises(InvalidArgument) as err:
        four_structures(*args)
    assert str(err.value) == message and "\n" not in str(err.value)


def test_dict_batch_and_non_scalar_loss():
    model = MLP()
    x, y = data()
    report = audit(model, torch.optim.SGD(model.parameters(), lr=0.1), {"x": x, "y": y},
                   lambda out, t: F.cross_entropy(out, t, reduction="none"))
    assert next(f for f in report.findings if f.where == "AUTOGRAD").evidence["reached"] == 6


class _KernelTable(nn.Module):
    """A helper module that holds functions only (as libraries keep attention kernels): nothing to learn."""

    def __init__(self) -> None:
        super().__init__()
        self.funcs = {"eager": F.scaled_dot_product_attention}


class _StochasticDepth(nn.Module):
    """No parameter, no buffer, but its forward reads the train/eval flag."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (torch.rand(x.shape[0], 1) > self.p).float() / (1 - self.p) if self.training else x


class _HoldsOutside(MLP):
    def __init__(self, held: nn.Module, use: bool = False) -> None:
        super().__init__()
        object.__setattr__(self, "_helper", held)  # a plain attribute, outside the registry
        self.use = use

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        h = self._helper(h) if self.use else h
        return self.fc3(torch.relu(self.fc2(h)))


def test_a_helper_module_held_outside_the_registry_that_hides_nothing_is_no_alarm():
    model = _HoldsOutside(_KernelTable())
    report = audit(model, torch.optim.SGD(model.parameters(), lr=0.1), watch=(model._helper,))
    helper = next(f for f in report.findings if f.where == "_helper")
    assert helper.status is Status.PASS and "hide nothing" in helper.message
    assert report.status is Status.PASS and report.first_divergence is None


@pytest.mark.parametrize("held", [_StochasticDepth(0.2), nn.BatchNorm1d(16, affine=False), nn.Dropout(0.1)],
                         ids=["reads-train-flag", "buffers-only", "dropout"])
def test_a_module_outside_the_registry_that_the_forward_runs_is_a_divergence(held):
    model = _HoldsOutside(held, use=True)
    report = audit(model, torch.optim.SGD(model.parameters(), lr=0.1), data(), F.cross_entropy, watch=(held,))
    assert (report.first_divergence.where, report.first_divergence.kind) == ("_helper", "structure.unregistered_module")
    assert next(f for f in report.findings if f.where == "_helper").evidence["ran_in_forward"] is True


def test_a_copy_of_the_network_kept_aside_is_a_warning_not_a_divergence():
    """A framework keeping a deep copy of a submodule in a plain dict (saved hyperparameters): the forward never runs
    it, the loss never reaches it, no optimizer owns it. The premise of the FAIL does not hold."""
    import copy

    model = MLP()
    object.__setattr__(model, "_hparams_initial", {"net": copy.deepcopy(model.fc2)})
    report = audit(model, torch.optim.SGD(model.parameters(), lr=0.1), data(), F.cross_entropy)
    kept = next(f for f in report.findings if f.where == "_hparams_initial")
    assert kept.check == "structure.unregistered_module" and kept.status is Status.WARN
    assert "copy kept aside" in kept.message and kept.evidence["ran_in_forward"] is False
    assert report.first_divergence is None


def test_without_a_batch_a_hidden_module_that_nothing_owns_is_a_warning_naming_what_would_confirm_it():
    model = ListBlocks()
    report = audit(model, torch.optim.AdamW(model.parameters(), lr=1e-3), watch=model.blocks)
    blocks = next(f for f in report.findings if f.where == "blocks")
    assert blocks.status is Status.WARN and "pass batch and loss_fn" in blocks.message
    report = audit(model, torch.optim.AdamW(model.parameters(), lr=1e-3), data(), F.cross_entropy, watch=model.blocks)
    assert report.first_divergence.where == "blocks"  # confirmed by the forward pass
