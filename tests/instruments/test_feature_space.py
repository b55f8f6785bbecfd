"""feature_space: no false alarms on healthy features (Gaussian, trained ReLU activations), the collapses,
dominant coordinates, non-finite values, invariances; the tensor and the encoder left untouched."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from firstdiv import InvalidArgument, Report, Status, feature_space, zoo
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.feature_space import dominant_threshold


def inspected(vectors, *objects, **kwargs) -> Report:
    """feature_space, asserting the vectors, the given objects and the global state are exactly as before."""
    kept = vectors.clone() if isinstance(vectors, torch.Tensor) else np.array(vectors, copy=True)
    before = Snapshot.take(*objects)
    report = feature_space(vectors, **kwargs)
    assert before.diff(Snapshot.take(*objects)) == []
    if isinstance(vectors, torch.Tensor):
        assert torch.equal(vectors.isnan(), kept.isnan()) and torch.equal(vectors.nan_to_num(), kept.nan_to_num())
    else:
        assert np.array_equal(vectors, kept)
    return report


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def relu_features(seed: int, steps: int = 60) -> torch.Tensor:
    """Penultimate ReLU activations (fc2 -> ReLU) of the zoo's small MLP after training."""
    p = zoo.build("mlp", seed=seed)
    p.train(steps=steps)
    with torch.no_grad():
        return torch.relu(p.model.fc2(torch.relu(p.model.fc1(p.batch[0]))))


def first(report: Report) -> tuple[str, str]:
    return report.first_divergence.where, report.first_divergence.kind


# ---- healthy features: no alarms ------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", [(200, 16), (8, 32), (1000, 4), (600, 128), (4, 10, 64)])
def test_gaussian_features_pass(seed, shape):
    report = inspected(torch.randn(*shape, generator=gen(seed)))
    assert report.status is Status.PASS, str(report)
    assert report.details["vectors"] == int(np.prod(shape[:-1])) and report.details["coordinates"] == shape[-1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_trained_relu_features_pass_although_their_cosine_is_high(seed):
    feats = relu_features(seed)
    report = inspected(feats)
    assert report.status is Status.PASS, str(report)
    assert 0.3 < report.details["cosine"]["mean_cos"] < 0.95  # non-negative features: naturally similar
    assert report.details["energy_share"]["max"] < dominant_threshold(feats.shape[1])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_zoo_reference_features_pass_and_dead_features_collapse(seed):
    for reference in ("mlp", "cnn", "finetune", "transformer"):
        report = inspected(zoo.build(reference, seed=seed).features)
        assert report.status is Status.PASS, (reference, str(report))
    report = inspected(zoo.build("finetune", fault="dead_features", seed=seed).features)
    assert first(report) == ("vectors", "features.collapse_zero"), str(report)


# ---- the failures -----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dead_relu_layer_is_collapse_zero(seed):
    layer = nn.Linear(16, 32)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(32, 16, generator=gen(seed)) * 0.25)
        layer.bias.fill_(-4.0)  # a large negative bias: almost every unit is off for almost every input
        feats = torch.relu(layer(torch.randn(256, 16, generator=gen(seed + 10))))
    report = inspected(feats)
    assert first(report) == ("vectors", "features.collapse_zero"), str(report)
    assert report.findings[2].evidence["fraction"] > 0.9
    assert first(inspected(torch.zeros(50, 8))) == ("vectors", "features.collapse_zero")


def test_mostly_zero_is_a_warning_not_a_failure():
    feats = torch.randn(100, 8, generator=gen(0))
    feats[:70] = 0
    report = inspected(feats)
    assert report.status is Status.WARN and report.findings[2].check == "features.collapse_zero"


@pytest.mark.parametrize("signs", [False, True])
def test_constant_direction_is_collapse_direction(signs):
    u = torch.randn(32, generator=gen(1))
    scale = torch.rand(300, 1, generator=gen(2)) + 0.5
    if signs:
        scale = scale * torch.where(torch.rand(300, 1, generator=gen(3)) < 0.5, -1.0, 1.0)
    feats = scale * u + 1e-4 * torch.randn(300, 32, generator=gen(4))
    report = inspected(feats)
    assert first(report) == ("vectors", "features.collapse_direction"), str(report)
    assert float(report.first_divergence.observed) > 0.99


def test_shared_offset_with_rich_variation_is_only_anisotropic():
    u = torch.randn(32, generator=gen(1))
    feats = 40 * u + torch.randn(300, 32, generator=gen(2))
    report = inspected(feats)
    assert report.status is Status.WARN, str(report)
    row = next(f for f in report.findings if f.check == "features.collapse_direction")
    assert row.status is Status.WARN and "center" in row.message


def test_dominant_coordinate_names_the_coordinate_on_its_axis():
    feats = torch.randn(64, 24, 5, generator=gen(0))  # [B, D, T]: coordinates on axis 1
    feats[:, 7, :] *= 30
    report = inspected(feats, axis=1)
    # from the vectors alone a dominant coordinate may be the design (massive activations): a WARN naming the coordinate
    row = next(f for f in report.findings if f.check == "features.dominant_coordinate")
    assert report.status is Status.WARN and row.status is Status.WARN and row.where == "coordinate 7", str(report)
    assert "not a FAIL: one coordinate holding most of the energy may be the design" in row.message
    assert report.details["vectors"] == 64 * 5 and report.details["coordinates"] == 24


def test_one_outlying_vector_does_not_make_the_rest_a_zero_collapse():
    feats = torch.randn(200, 8, generator=gen(0)) * 1e-3  # small but distinct representations
    feats[17] = 1e6  # one outlier: every other vector is below 1e-6 of its norm
    report = inspected(feats)
    row = report.findings[2]
    assert row.check == "features.collapse_zero" and row.status is Status.WARN, str(report)
    assert "not a FAIL: against the 99th-percentile norm" in row.message and report.status is not Status.FAIL


def test_padding_positions_passed_as_vectors_are_not_a_zero_collapse():
    feats = torch.randn(4, 50, 8, generator=gen(0))  # [B, T, D]: 3 real positions per sequence, then padding
    feats[:, 3:] = 0
    report = inspected(feats)
    row = report.findings[2]
    assert row.check == "features.collapse_zero" and row.status is Status.WARN, str(report)
    assert "contiguous head or tail" in row.message and row.evidence["padding_like_axis"] == 1


def test_scattered_zero_vectors_on_a_grid_still_collapse():
    feats = torch.randn(4, 50, 8, generator=gen(0))
    keep = torch.rand(4, 50, generator=gen(1)) < 0.05
    feats[~keep] = 0  # dead everywhere but a few scattered positions
    assert first(inspected(feats)) == ("vectors", "features.collapse_zero")


def test_nonfinite_values_first_and_the_rest_inspected():
    feats = torch.randn(50, 8, generator=gen(0))
    feats[3, 2] = float("nan")
    feats[10, 0] = float("inf")
    report = inspected(feats)
    assert first(report) == ("vectors", "features.nonfinite")
    ev = report.findings[0].evidence
    assert (ev["nan"], ev["inf"], ev["first"], ev["vectors_affected"]) == (1, 1, {"vector": 3, "coordinate": 2}, 2)
    assert report.details["norms"]["max"] > 0  # the finite vectors were still inspected


def test_numpy_and_integer_vectors_are_accepted():
    assert inspected(np.random.default_rng(0).normal(size=(40, 6))).status is Status.PASS
    assert inspected(torch.randint(-5, 6, (40, 6), generator=gen(0))).status is Status.PASS


# ---- invariances ----------------------------------------------------------------------------------

def test_invariance_holds_or_breaks_by_the_named_quantity():
    inputs = torch.randn(20, 6, generator=gen(0))
    no_bias = nn.Linear(6, 4, bias=False)
    with_bias = nn.Linear(6, 4)
    feats = no_bias(inputs).detach()
    rescale = {"rescale input": lambda x: 2 * x}
    assert inspected(feats, no_bias, encoder=no_bias, inputs=inputs, invariances=rescale).status is Status.PASS
    report = inspected(feats, with_bias, encoder=with_bias, inputs=inputs, invariances=rescale)
    assert first(report) == ("invariance:rescale input", "features.invariance_broken"), str(report)
    # the dot-product values are not invariant to rescaling even without a bias: name the quantity
    report = inspected(feats, no_bias, encoder=no_bias, inputs=inputs,
                       invariances={"rescale input": (lambda x: 2 * x, "value"), "argmax": (lambda x: 3 * x, "argmax"),
                                    "norm": (lambda x: -x, "norm"), "top": (lambda x: 2 * x, lambda f: f.argsort(-1))})
    assert [(f.where, f.status.value) for f in report.findings if f.where.startswith("invariance:")] == [
        ("invariance:rescale input", "FAIL"), ("invariance:argmax", "PASS"), ("invariance:norm", "PASS"), ("invariance:top", "PASS")]


def test_encoder_runs_in_its_mode_with_the_same_randomness_and_is_restored():
    encoder = nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.5), nn.ReLU()).train()
    inputs = torch.randn(10, 6, generator=gen(0))
    calls = []
    encoder.register_forward_pre_hook(lambda m, a: calls.append((m.training, torch.is_grad_enabled())))
    report = inspected(torch.randn(10, 16, generator=gen(1)), encoder, encoder=encoder, inputs=inputs,
                       invariances={"identity": lambda x: x})
    assert report.status is Status.PASS, str(report)
    assert calls == [(True, False), (True, False)] and encoder.training
    assert "guarded" in report.side_effects


def test_encoder_or_transform_raising_is_reported_not_raised():
    class Flaky(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.calls = nn.Linear(4, 3), 0

        def forward(self, x):
            self.calls += 1
            if self.calls >= 2:
                raise RuntimeError("second call fails")
            return self.lin(x)

    enc = Flaky()
    report = inspected(torch.randn(5, 3, generator=gen(0)), enc, encoder=enc, inputs=torch.randn(5, 4, generator=gen(1)),
                       invariances={"shift": lambda x: x + 1})
    row = report.findings[-1]
    assert row.where == "invariance:shift" and row.status is Status.WARN and "second call fails" in row.message
    inputs = {"x": torch.randn(5, 4, generator=gen(1))}
    lin = nn.Linear(4, 3)
    report = inspected(torch.randn(5, 3, generator=gen(0)), lin, encoder=lambda x: lin(x), inputs=inputs,
                       invariances={"bad": lambda d: d["missing"]})
    assert report.findings[-1].status is Status.WARN and "KeyError" in report.findings[-1].message
    assert torch.equal(inputs["x"], torch.randn(5, 4, generator=gen(1)))


# ---- misuse, empty input, rendering ----------------------------------------------------------------

@pytest.mark.parametrize("args, kwargs, match", [
    (([1.0, 2.0],), {}, "Expected `vectors`"),
    ((torch.ones(5),), {}, "at least 2 dims"),
    ((torch.ones(3, 2, dtype=torch.complex64),), {}, "real-valued"),
    ((np.array([["a", "b"]]),), {}, "numeric array"),
    ((torch.ones(3, 2), 2), {}, "Expected `axis`"),
    ((torch.ones(3, 2), True), {}, "Expected `axis`"),
    ((torch.ones(3, 2),), {"invariances": {"x": lambda v: v}}, "encoder"),
    ((torch.ones(3, 2),), {"invariances": {}, "encoder": abs, "inputs": 1}, "non-empty dict"),
    ((torch.ones(3, 2),), {"invariances": {"x": (lambda v: v, "dot")}, "encoder": abs, "inputs": 1}, "quantity"),
    ((torch.ones(3, 2),), {"invariances": {"x": (lambda v: v, "cosine", -1)}, "encoder": abs, "inputs": 1}, "tolerance"),
    ((torch.ones(3, 2),), {"invariances": {"x": 3}, "encoder": abs, "inputs": 1}, "transform"),
])
def test_bad_arguments_are_one_line_errors(args, kwargs, match):
    with pytest.raises(InvalidArgument, match=match) as err:
        feature_space(*args, **kwargs)
    assert "\n" not in str(err.value)


def test_empty_vectors_are_skipped_with_a_reason():
    report = feature_space(torch.ones(0, 4))
    assert report.status is Status.SKIPPED and "no values" in report.reason


def test_report_renders_and_round_trips():
    report = feature_space(torch.zeros(20, 4))
    text = str(report)
    assert "FEATURE_SPACE" in text and "FIRST DIVERGENCE at vectors  [features.collapse_zero]" in text
    assert Report.from_dict(json.loads(report.to_json())).to_dict() == report.to_dict()
