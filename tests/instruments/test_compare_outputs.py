"""compare_outputs and variants: the same fixed inputs through eager, compiled, reloaded, exported and int8
variants; fed-differently before diverged, train mode reported not fixed, the first diverging layer named."""

import copy
import json
import os
import sys

import pytest
import torch
from _paths import TESTS
from torch import nn

from firstdiv import InvalidArgument, Report, Status
from firstdiv.instruments._core.outputs import Tolerance, compare, split_inputs
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.compare_outputs import compare_outputs, fingerprint
from firstdiv.instruments.compare_outputs import variants as variants_module
from firstdiv.instruments.compare_outputs.variants import Unavailable, variants

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread, no spin-waiting

TESTS = str(TESTS)




class MLP(nn.Module):
    def __init__(self, dropout=0.0):
        super().__init__()
        self.fc1 = nn.Linear(4, 16)
        self.act = nn.ReLU()
        self.body = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
        self.drop = nn.Dropout(dropout)
        self.fc3 = nn.Linear(16, 2)

    def forward(self, x):
        return self.fc3(self.drop(self.body(self.act(self.fc1(x)))))


class Regressor(nn.Module):
    """The zoo's regression shape: fc1 -> ReLU -> fc2 -> ReLU -> fc3."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3, self.act = nn.Linear(2, 32), nn.Linear(32, 32), nn.Linear(32, 1), nn.ReLU()

    def forward(self, x):
        return self.fc3(self.act(self.fc2(self.act(self.fc1(x)))))


def _mlp(seed=0, **kw):
    torch.manual_seed(seed)
    return MLP(**kw).eval()


def _x(seed=1, n=16, d=4):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


def _perturbed(model, path="body.0", scale=0.1):
    twin = copy.deepcopy(model)
    weight = dict(twin.named_modules())[path].weight
    with torch.no_grad():
        weight.add_(scale * torch.randn(weight.shape, generator=torch.Generator().manual_seed(7)))
    return twin


# --- healthy variants -----------------------------------------------------------------------------------------------

def test_identical_variants_pass_and_leave_no_trace():
    model, x = _mlp(), _x()
    before = Snapshot.take(model)
    built, tols = variants(model, kinds=("eager", "compiled", "reloaded", "export", "int8"), example_inputs=(x,),
                           compile_backend="eager")
    assert before.diff(Snapshot.take(model)) == []
    assert list(built) == ["eager", "compiled", "reloaded", "export", "int8"]
    assert tols["int8"] == Tolerance(5e-2, 1e-5, "scale") and tols["export"] == Tolerance(1e-4, 1e-5)
    report = compare_outputs(built, x, tolerances=tols)
    assert report.status is Status.PASS, str(report)
    assert before.diff(Snapshot.take(model)) == []
    per = report.details["variants"]
    assert per["compiled"]["max_abs_error"] == 0.0 and per["export"]["max_abs_error"] == 0.0
    assert per["reloaded"]["max_abs_error"] == 0.0 and "in this process" in per["reloaded"]["description"]
    assert 0 < per["int8"]["max_abs_error"] and per["int8"]["tolerance_ratio"] < 1
    checks = [(f.where, f.check) for f in report.findings]
    assert checks.index(("eager", "outputs.train_mode")) < checks.index(("compiled", "outputs.diverged"))
    assert {w for w, c in checks if c == "outputs.diverged"} == {"compiled", "reloaded", "export", "int8"}
    text = str(report)
    assert "COMPARE_OUTPUTS" in text and "PASS" in text
    again = Report.from_dict(json.loads(report.to_json()))
    assert again.details == report.details and again.findings == report.findings


def test_variants_copies_keep_the_users_mode_and_never_touch_the_model():
    model = _mlp(dropout=0.5).train()
    before = Snapshot.take(model)
    built, _ = variants(model, kinds=("eager", "reloaded", "int8"))
    assert all(m.training for m in built["eager"].modules())
    assert built["int8"].training and built["int8"].drop.training  # quantize_dynamic's eval() undone
    assert built["eager"] is not model and before.diff(Snapshot.take(model)) == []


# --- the first diverging layer --------------------------------------------------------------------------------------

def test_perturbed_layer_is_named_in_module_compiled_and_exported_variants():
    model, x = _mlp(), _x()
    bad = _perturbed(model)
    compiled = torch.compile(copy.deepcopy(bad), backend="aot_eager")
    exported = torch.export.export(copy.deepcopy(bad), (x,)).module()
    watched = Snapshot.take(model, bad)
    report = compare_outputs({"eager": model, "perturbed": bad, "compiled": compiled, "export": exported,
                              "fn": lambda t: bad(t)}, x)
    assert report.status is Status.FAIL
    assert report.first_divergence.where == "perturbed:body.0"
    assert report.first_divergence.kind == "outputs.diverged"
    failed = {f.where for f in report.findings if f.status is Status.FAIL}
    assert failed == {"perturbed:body.0", "compiled:body.0", "export:body.0", "fn"}
    ev = next(f.evidence for f in report.findings if f.where == "perturbed:body.0")
    assert ev["last_agreeing_layer"] == "act" and ev["layer_max_abs_error"] > ev["max_abs_error"] * 0  # numbers present
    assert "no named modules" in next(f.evidence["layers"] for f in report.findings if f.where == "fn")
    assert watched.diff(Snapshot.take(model, bad)) == []
    assert not any(m._forward_hooks for m in compiled._orig_mod.modules())


def test_layers_false_reports_at_the_variant():
    model, x = _mlp(), _x()
    report = compare_outputs({"eager": model, "perturbed": _perturbed(model)}, x, layers=False)
    assert report.first_divergence.where == "perturbed"


def test_int8_with_a_weight_outlier_diverges_at_the_first_linear():
    torch.manual_seed(0)
    model = Regressor().eval()
    x = torch.randn(64, 2, generator=torch.Generator().manual_seed(3))
    clean, tols = variants(model, kinds=("eager", "int8"))
    healthy = compare_outputs(clean, x, tolerances=tols)
    assert healthy.status is Status.PASS, str(healthy)
    assert healthy.details["variants"]["int8"]["tolerance_ratio"] < 0.8  # clean int8 error well inside 5% of scale
    with torch.no_grad():
        model.fc1.weight[:, 1] *= 1000.0  # the second feature recorded in kilometres: weights 1000x the rest
    x = x * torch.tensor([1.0, 1e-3])  # same function as before, in eager
    built, tols = variants(model, kinds=("eager", "int8"))
    report = compare_outputs(built, x, tolerances=tols)
    div = report.first_divergence
    assert (div.where, div.kind) == ("int8:fc1", "outputs.diverged"), str(report)
    ev = report.findings[-1].evidence
    assert ev["layer_tolerance_ratio"] > 5 and ev["variant_module"] == "DynamicQuantizedLinear"
    assert ev["weight_range_ratio"] > 100 and "per-channel" in div.hint


# --- fed differently, train mode ------------------------------------------------------------------------------------

def test_fed_differently_is_reported_before_any_output_divergence():
    model, x = _mlp(), _x()
    variants_ = {"eager": model, "export": _perturbed(model)}
    pre = {"eager": {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "resize": 224},
           "export": {"mean": [0.5, 0.5, 0.5], "std": [0.229, 0.224, 0.225], "resize": 224}}
    gen = {"eager": {"temperature": 0.0, "stop": {"eos": 2}}, "export": {"temperature": 0.0, "stop": {"eos": 3}}}
    report = compare_outputs(variants_, x, preprocessing=pre, generation=gen)
    div = report.first_divergence
    assert (div.where, div.kind) == ("export", "outputs.fed_differently")
    kinds = [f.check for f in report.findings if f.status is Status.FAIL]
    assert kinds == ["outputs.fed_differently", "outputs.fed_differently", "outputs.diverged"]
    assert report.findings[0].evidence["differing_keys"] == ["mean"]
    assert report.findings[1].evidence["differing_keys"] == ["stop.eos"]
    assert report.details["preprocessing"]["fingerprints"]["eager"] == fingerprint(pre["eager"])
    same = compare_outputs({"eager": model, "copy": copy.deepcopy(model)}, x,
                           preprocessing={"eager": {"a": 1, "b": [1, 2]}, "copy": {"b": [1, 2], "a": 1}})
    assert same.status is Status.PASS and fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})


def test_a_variant_left_in_train_mode_is_reported_not_fixed():
    model, x = _mlp(dropout=0.5), _x()
    served = copy.deepcopy(model).train()  # forgot .eval() before serving
    before = Snapshot.take(model, served)
    report = compare_outputs({"eager": model, "served": served}, x)
    div = report.first_divergence
    assert (div.where, div.kind) == ("served", "outputs.train_mode")
    assert "drop (Dropout(p=0.5))" in report.findings[1].evidence["train_mode_modules"]
    assert served.training and served.drop.training  # compared in its own mode, not silently switched
    assert any(f.check == "outputs.diverged" and f.status is Status.FAIL for f in report.findings)
    assert before.diff(Snapshot.take(model, served)) == []


def test_exported_in_train_mode_is_seen_in_the_graph():
    model, x = _mlp(dropout=0.5).train(), _x()
    exported = torch.export.export(copy.deepcopy(model), (x,)).module()
    report = compare_outputs({"eager": _mlp(), "export": exported}, x)
    assert report.first_divergence.kind == "outputs.train_mode" and report.first_divergence.where == "export"
    assert "drop" in report.findings[1].message


# --- the fresh-process reload ---------------------------------------------------------------------------------------

def test_fresh_process_reload_gives_identical_outputs_and_loses_state_outside_the_state_dict(monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    from _compare_factories import make_net

    torch.manual_seed(0)
    model, x = make_net().eval(), _x()
    built, tols = variants(model, kinds=("eager", "reloaded"), factory="_compare_factories:make_net")
    assert "fresh Python process" in built["reloaded"].firstdiv_description
    report = compare_outputs(built, x, tolerances=tols)
    assert report.status is Status.PASS, str(report)
    assert report.details["variants"]["reloaded"]["max_abs_error"] == 0.0
    assert "1 fresh Python process" in report.side_effects

    model.head.scale = torch.tensor(3.0)  # a plain attribute: the checkpoint cannot carry it
    built, tols = variants(model, kinds=("eager", "reloaded"), factory="_compare_factories:make_net")
    report = compare_outputs(built, x, tolerances=tols)
    assert report.first_divergence.where == "reloaded:head", str(report)
    assert "four_structures" in report.first_divergence.hint


def test_fresh_process_failure_is_a_finding_with_the_childs_error(monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    from _compare_factories import make_net

    model = make_net().eval()
    built, _ = variants(model, kinds=("eager", "reloaded"), factory="_compare_factories:make_wrong")
    report = compare_outputs(built, _x())
    div = report.first_divergence
    assert (div.where, div.kind) == ("reloaded", "outputs.raised")
    assert "load_state_dict" in div.observed or "state_dict" in div.observed


# --- what cannot run ------------------------------------------------------------------------------------------------

class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: torch.export refuses it
            return self.fc(x)
        return -self.fc(x)


def test_export_that_fails_and_int8_unavailable(monkeypatch):
    x = _x()
    built, _ = variants(Branchy().eval(), kinds=("eager", "export"), example_inputs=(x,))
    assert isinstance(built["export"], Unavailable) and built["export"].failed
    report = compare_outputs(built, x)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("export", "outputs.raised")

    monkeypatch.setattr(variants_module, "_quantize_dynamic", lambda: None)
    built, tols = variants(_mlp(), kinds=("eager", "reloaded", "int8"))
    assert isinstance(built["int8"], Unavailable) and not built["int8"].failed
    report = compare_outputs(built, x, tolerances=tols)
    assert report.status is Status.PASS
    skipped = [f for f in report.findings if f.status is Status.SKIPPED]
    assert [(f.where, f.check) for f in skipped] == [("int8", "outputs.unavailable")] and "torchao" in skipped[0].message
    only = compare_outputs({"eager": _mlp(), "int8": built["int8"]}, x)
    assert only.status is Status.SKIPPED and "int8" in only.reason


class Flaky(nn.Module):
    """Counts its calls in a buffer, then raises: the count must be restored."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        raise RuntimeError("serving runtime rejects this input")


def test_variant_or_reference_that_raises_leaves_no_trace():
    model, flaky, x = _mlp(), Flaky(), _x()
    before = Snapshot.take(model, flaky)
    report = compare_outputs({"eager": model, "served": flaky}, x)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("served", "outputs.raised")
    assert "serving runtime rejects" in report.first_divergence.observed
    reversed_ = compare_outputs({"served": flaky, "eager": model}, x)
    assert reversed_.status is Status.SKIPPED and "reference variant 'served' raised" in reversed_.reason
    assert before.diff(Snapshot.take(model, flaky)) == []


# --- outputs leaf by leaf, tolerances, inputs -----------------------------------------------------------------------

def test_nested_outputs_leaf_by_leaf_and_keyword_inputs():
    model = _mlp()

    def ref(x, scale=1.0):
        return {"logits": model(x) * scale, "aux": (model(x).sum(), 3)}

    def var(x, scale=1.0):
        return {"logits": model(x) * scale, "aux": (model(x).sum() + 1.0, 3)}

    report = compare_outputs({"ref": ref, "var": var}, {"x": _x(), "scale": 2.0})
    assert report.first_divergence.where == "var"
    assert report.details["variants"]["var"]["worst_leaf"] == "output['aux'][0]"
    assert report.details["variants"]["var"]["elements"] == 34
    shape = compare_outputs({"ref": ref, "short": lambda x, scale=1.0: {"logits": model(x)[:3]}}, {"x": _x()})
    assert "structure" in shape.first_divergence.observed


def test_tolerance_rules():
    r = torch.tensor([100.0, 0.001])
    v = torch.tensor([100.0, 0.5])
    assert not compare(r, v, Tolerance(5e-2, 0.0)).ok  # element-relative: 0.5 vs 0.001 fails
    assert compare(r, v, Tolerance(5e-2, 0.0, "scale")).ok  # 0.5 <= 5% of max|r| = 5
    nan = torch.tensor([float("nan"), 1.0])
    assert compare(nan, nan.clone(), Tolerance()).ok
    assert not compare(torch.tensor([1.0, 1.0]), nan, Tolerance()).ok
    per = compare_outputs({"a": lambda x: x, "b": lambda x: x * 1.01}, torch.ones(3), tolerances={"b": (2e-2, 0.0)})
    assert per.status is Status.PASS and per.details["variants"]["b"]["tolerance"]["rtol"] == 2e-2
    assert split_inputs((1, 2)) == ((1, 2), {}) and split_inputs({"a": 1}) == ((), {"a": 1})


def test_reference_can_be_chosen():
    model, x = _mlp(), _x()
    report = compare_outputs({"perturbed": _perturbed(model), "eager": model}, x, reference="eager")
    assert report.details["reference"] == "eager" and report.first_divergence.where == "perturbed:body.0"


@pytest.mark.parametrize("call, message", [
    (lambda m, x: compare_outputs([m, m], x), "Expected `variants` to be a dict"),
    (lambda m, x: compare_outputs({"a": m}, x), "at least two variants"),
    (lambda m, x: compare_outputs({"a": m, "b": 3}, x), "Expected variant 'b' to be an nn.Module or a callable but got int"),
    (lambda m, x: compare_outputs({"a": m, "b": m}, x, reference="c"), "Expected `reference` to be one of"),
    (lambda m, x: compare_outputs({"a": m, "b": m}, x, tolerances={"c": (1, 1)}), "Expected `tolerances` keys"),
    (lambda m, x: compare_outputs({"a": m, "b": m}, x, tolerances={"b": 0.1}), "Expected tolerance for 'b'"),
    (lambda m, x: compare_outputs({"a": m, "b": m}, x, rtol=-1), "Expected `rtol` to be a finite number >= 0"),
    (lambda m, x: compare_outputs({"a": m, "b": m}, x, preprocessing={"z": {}}), "Expected `preprocessing` keys"),
    (lambda m, x: compare_outputs({"a": m, "b": m}, x, generation={"a": 1}), "Expected `generation` to be a dict"),
    (lambda m, x: variants(3), "Expected `model` to be a torch.nn.Module but got int"),
    (lambda m, x: variants(m, kinds=("eager", "onnx")), "Expected `kinds` to be among"),
    (lambda m, x: variants(m, kinds=("eager", "export")), "Expected `example_inputs`"),
    (lambda m, x: variants(m, kinds=("reloaded",), factory="nomodule"), "Expected `factory` to be 'module.path:function'"),
    (lambda m, x: variants(m, kinds=("reloaded",), factory="no_such_module_xyz:make"), "to be importable"),
])
def test_bad_arguments_are_one_line_errors(call, message):
    with pytest.raises(InvalidArgument) as info:
        call(_mlp(), _x())
    assert message in str(info.value) and "\n" not in str(info.value)


def test_child_process_environment_carries_sys_path(monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    built, _ = variants(_mlp(), kinds=("reloaded",), factory="_compare_factories:make_net")
    env = built["reloaded"]._env()
    assert TESTS in env["PYTHONPATH"].split(os.pathsep) and sys.executable


# --- slower: the real compiler, and CUDA -----------------------------------------------------------------------------

@pytest.mark.quality
def test_inductor_variant_agrees_with_eager():
    model, x = _mlp(), _x()
    built, tols = variants(model, kinds=("eager", "compiled"))
    report = compare_outputs(built, x, tolerances=tols)
    assert report.status is Status.PASS, str(report)
    assert "inductor" in report.details["variants"]["compiled"]["description"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: eager, compiled and fresh-process variants on GPU")
def test_cuda_variants_agree(monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    from _compare_factories import make_net

    torch.manual_seed(0)
    model, x = make_net().eval().cuda(), _x().cuda()
    built, tols = variants(model, kinds=("eager", "compiled", "reloaded", "export"), example_inputs=(x,),
                           factory="_compare_factories:make_net")
    tols["compiled"] = Tolerance(1e-3, 1e-4)  # TF32 and fused kernels on GPU
    report = compare_outputs(built, x, tolerances=tols)
    assert report.status is Status.PASS, str(report)
