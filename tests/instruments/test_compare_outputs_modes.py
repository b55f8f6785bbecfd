"""compare_outputs beyond one eval call: the reference run twice without reseeding (an eval path that still
drops out is FAILed at the module that drops out), mode='train' (an eager and a compiled training forward and
backward, gradients per parameter name), and the inputs and outputs real code hands over (sparse, nested,
bf16/fp16, channels_last, torch.compile'd modules) -- a correct comparison or a SKIPPED finding, never a raw
exception."""

import copy

import pytest
import torch
import torch.nn.functional as F
from harness import assert_no_trace
from torch import nn

from firstdiv import InvalidArgument, Status, compile_ledger
from firstdiv.instruments.compare_outputs import compare_outputs
from firstdiv.instruments.compare_outputs.variants import variants

pytestmark = pytest.mark.usefixtures("one_thread")


class Net(nn.Module):
    def __init__(self, hard_dropout=False, dropout_p_attn=0.0):
        super().__init__()
        self.hard, self.attn_p = hard_dropout, dropout_p_attn
        self.fc1, self.fc2, self.out = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 3)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if self.hard:
            h = F.dropout(h, 0.2)  # training=True by default: drops out in eval too
        h = self.fc2(h)
        if self.attn_p:
            q = h.view(h.shape[0], 1, 4, 4)
            h = F.scaled_dot_product_attention(q, q, q, dropout_p=self.attn_p).reshape(h.shape)
        return self.out(torch.relu(h))


class Wrapper(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.body = Net(**kw)

    def forward(self, x):
        return self.body(self.encoder(x))


def _x(n=5, d=8, seed=3):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


def _model(seed=0, **kw):
    torch.manual_seed(seed)
    return Wrapper(**kw).eval()


def _finding(report, check):
    return next(f for f in report.findings if f.check == check)


# --- eval-mode randomness -------------------------------------------------------------------------------------------

def test_hard_coded_functional_dropout_in_eval_fails_at_the_module_that_calls_it():
    model = _model(hard_dropout=True)
    built, tols = variants(model, ("eager", "reloaded"))
    report = assert_no_trace(lambda: compare_outputs(built, _x(), tolerances=tols), [model])
    assert report.status is Status.FAIL
    div = report.first_divergence
    assert div.kind == "outputs.nondeterministic_eval" and div.where == "eager:body", div
    assert _finding(report, "outputs.nondeterministic_eval").evidence["active_ops"][0]["op"] == "F.dropout"
    # the reseeded comparison alone would have passed: the variants agree with each other
    assert _finding(report, "outputs.diverged").status is Status.PASS


def test_sdpa_dropout_p_outside_training_is_named():
    report = compare_outputs({"a": _model(dropout_p_attn=0.3), "b": _model(dropout_p_attn=0.3)}, _x())
    assert report.first_divergence.where == "a:body"
    assert "scaled_dot_product_attention" in report.first_divergence.observed


class _UnusedDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        F.dropout(x, 0.5)  # drawn and thrown away: random numbers in eval, with no effect on the output
        return self.fc(x)


def test_an_active_dropout_without_effect_is_a_warning_at_its_module():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), _UnusedDropout()).eval()
    report = compare_outputs({"a": model, "b": copy.deepcopy(model)}, _x())
    assert report.status is Status.WARN, report
    warn = next(f for f in report.findings if f.status is Status.WARN)
    assert (warn.where, warn.check) == ("a:1", "outputs.stochastic_in_eval")


def test_deterministic_eval_and_dropout_modules_in_eval_pass():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 2)).eval()
    report = compare_outputs({"eager": model, "copy": copy.deepcopy(model)}, _x())
    assert report.status is Status.PASS
    assert _finding(report, "outputs.nondeterministic_eval").status is Status.PASS


class _Counting(nn.Module):
    """Keeps state between calls (a step counter buffer), deterministically."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        self.steps += 1
        return self.fc(x) * self.steps


def test_a_model_that_keeps_state_between_calls_is_not_called_random():
    torch.manual_seed(0)
    model = _Counting().eval()
    report = assert_no_trace(lambda: compare_outputs({"a": model, "b": copy.deepcopy(model)}, _x()), [model])
    assert report.status is Status.PASS, report
    assert float(model.steps) == 0


# --- mode="train" ---------------------------------------------------------------------------------------------------

def _loss(out):
    return out.square().mean()


def test_train_mode_compares_an_eager_and_a_compiled_training_step_per_parameter():
    model = _model().train()
    compiled = torch.compile(copy.deepcopy(model), backend="aot_eager")
    report = assert_no_trace(lambda: compare_outputs({"eager": model, "compiled": compiled}, _x(), mode="train",
                                                     loss=_loss), [model])
    assert report.status is Status.PASS, report
    grads = _finding(report, "outputs.gradient_diverged")
    assert grads.status is Status.PASS and grads.evidence["compared"] == len(list(model.parameters()))
    assert all(p.grad is None for p in model.parameters()) and model.training
    assert report.details["mode"] == "train"


class _WrongBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x > 0) * 2  # twice the gradient


class _CustomRelu(nn.Module):
    def forward(self, x):
        return _WrongBackward.apply(x)


def test_train_mode_names_the_first_parameter_whose_gradient_differs():
    model = _model().train()
    twin = copy.deepcopy(model)
    twin.encoder[1] = _CustomRelu()  # same forward, wrong backward
    report = compare_outputs({"eager": model, "custom": twin}, _x(), mode="train", loss=_loss)
    assert report.status is Status.FAIL
    div = report.first_divergence
    assert div.kind == "outputs.gradient_diverged" and div.where == "custom:encoder.0.weight", div
    assert _finding(report, "outputs.diverged").status is Status.PASS  # the forward agrees


def test_train_mode_with_dropout_is_never_a_false_alarm_and_eager_copies_are_judged():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.Linear(16, 2)).train()
    report = compare_outputs({"eager": model, "copy": copy.deepcopy(model),
                              "compiled": torch.compile(copy.deepcopy(model), backend="eager")},
                             _x(), mode="train", loss=_loss)
    assert report.status is not Status.FAIL, report
    by = {(f.where, f.check): f for f in report.findings}
    assert by[("copy", "outputs.diverged")].status is Status.PASS
    assert by[("copy", "outputs.gradient_diverged")].status is Status.PASS


def test_train_mode_arguments():
    model = _model()
    with pytest.raises(InvalidArgument, match="mode"):
        compare_outputs({"a": model, "b": model}, _x(), mode="training")
    with pytest.raises(InvalidArgument, match="loss"):
        compare_outputs({"a": model, "b": model}, _x(), loss=_loss)


# --- inputs and outputs real code hands over ----------------------------------------------------------------------

class SparseIn(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Linear(5, 3)

    def forward(self, adj, x):
        h = torch.sparse.mm(adj, x)
        return {"dense": self.w(h), "sparse": h.to_sparse(), "nested": (h.sum(0), [h.mean()])}


def test_sparse_inputs_and_sparse_nested_outputs_are_compared():
    torch.manual_seed(0)
    model = SparseIn().eval()
    adj = (torch.rand(4, 4) > 0.5).float().to_sparse()
    inputs = (adj, torch.randn(4, 5))
    built, tols = variants(model, ("eager", "reloaded", "int8"))
    report = compare_outputs(built, inputs, tolerances=tols)
    assert report.status is Status.PASS, report
    perturbed = copy.deepcopy(model)
    with torch.no_grad():
        perturbed.w.bias.add_(1.0)
    report = compare_outputs({"eager": model, "perturbed": perturbed}, inputs)
    assert report.first_divergence.where == "perturbed:w"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_models_skip_int8_and_compare_the_rest(dtype):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).to(dtype).eval()
    x = _x().to(dtype)
    built, tols = variants(model, ("eager", "reloaded", "int8"))
    report = compare_outputs(built, x, tolerances=tols)
    assert report.status is Status.PASS, report
    int8 = next(f for f in report.findings if f.where == "int8")
    assert int8.status is Status.SKIPPED and "float32" in int8.message


def test_channels_last_inputs_through_eager_reloaded_and_export():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
    x = torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last)
    built, tols = variants(model, ("eager", "reloaded", "export"), example_inputs=x)
    report = assert_no_trace(lambda: compare_outputs(built, x, tolerances=tols), [model, x])
    assert report.status is Status.PASS, report


def test_a_compiled_module_as_variant_and_as_compile_ledger_fn():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh()).eval()
    compiled = torch.compile(copy.deepcopy(model), backend="eager")
    report = compare_outputs({"eager": model, "compiled": compiled}, _x())
    assert report.status is Status.PASS, report
    ledger = compile_ledger(compiled, [_x()], backend="eager", repeats=1)
    assert ledger.status is not Status.FAIL and hasattr(ledger, "findings")


def test_sparse_output_through_compile_ledger_is_a_graph_break_not_an_exception():
    class ToSparse(nn.Module):
        def forward(self, x):
            return x.relu().to_sparse()

    report = compile_ledger(ToSparse(), [_x()], backend="eager", repeats=1)
    assert report.status in (Status.PASS, Status.WARN), report
    correct = next(f for f in report.findings if f.where == "CORRECT")
    assert correct.status is Status.PASS
