"""stage_trace: the first preprocessing stage where a contract category fails, on the zoo's pipeline
reference and on hand-written pipelines; no trace on the sample or the global RNGs."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from firstdiv import InvalidArgument, Report, Status, stage_trace
from firstdiv.instruments._core.state import Snapshot
from firstdiv.zoo import pipeline

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one intra-op thread
CATEGORIES = ["structure", "numeric", "semantics", "relationships", "provenance"]


def _copy(obj):
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    return obj


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def traced(sample, stages, **kwargs) -> Report:
    """stage_trace, asserting the sample and the global RNGs/grad mode are exactly as before."""
    kept, before = _copy(sample), Snapshot.take()
    report = stage_trace(sample, stages, **kwargs)
    assert _same(sample, kept), "stage_trace changed the sample"
    assert before.diff(Snapshot.take()) == []
    return report


def run(seed: int, fault: str | None) -> Report:
    b = pipeline.build(seed, fault)
    return traced(b["sample"], b["stages"], probes=b["probes"], contracts=b["contracts"], seed=seed)


def image_sample(seed: int = 0, h: int = 10, w: int = 14) -> dict:
    """A textured RGB uint8 HWC image with a red box at [1, 4, 2, 6], an asymmetric mask, and meta."""
    g = torch.Generator().manual_seed(seed)
    image = torch.randint(30, 220, (h, w, 3), generator=g, dtype=torch.uint8)
    image[1:4, 2:6] = torch.tensor([255, 0, 0], dtype=torch.uint8)
    mask = torch.zeros(h, w, dtype=torch.uint8)
    mask[5:9, 1:3] = 1
    mask[7:9, 1:8] = 1
    return {"image": image, "mask": mask, "label": 3,
            "meta": {"channel_order": "RGB", "known_colour": {"box": [1, 4, 2, 6], "rgb": [255, 0, 0]}}}


def to_float(s):
    return {**s, "image": s["image"].float() / 255}


# ---- the zoo reference ----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_pipeline_passes_with_every_category_checked(seed):
    report = run(seed, None)
    assert report.status is Status.PASS, str(report)
    assert report.details["unverified"] == []
    assert all(report.details["checked"][c] for c in CATEGORIES)
    assert report.details["checked"]["semantics"] == ["decode", "to_float", "flip"]
    assert [r["stage"] for r in report.details["trace"]] == ["(input)", "decode", "to_float", "flip", "normalize", "to_chw"]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("fault", sorted(pipeline.FAULTS))
def test_each_pipeline_fault_is_localized(fault, seed):
    origin, description, where, kind = pipeline.FAULTS[fault]
    report = run(seed, fault)
    assert origin == "book" and description
    assert report.status is Status.FAIL
    assert (report.first_divergence.where, report.first_divergence.kind) == (where, kind), str(report)
    # the only FAIL is where the fault is: later stages inherit it as WARN at most
    assert [(f.where, f.check) for f in report.findings if f.status is Status.FAIL] == [(where, kind)]


def test_pipeline_build_is_deterministic_and_faults_touch_one_thing():
    a, b = pipeline.build(1, None), pipeline.build(1, None)
    assert _same(a["sample"], b["sample"]) and [n for n, _ in a["stages"]] == [n for n, _ in b["stages"]]
    assert [n for n, _ in pipeline.build(0, "double_normalization")["stages"]][-1] == "model_normalize"
    assert pipeline.build(0, "val_statistics")["stages"][3][1].fitted_on == "val"
    assert pipeline.REFERENCE == "pipeline"
    with pytest.raises(KeyError):
        pipeline.build(0, "no_such_fault")


def test_flip_draws_from_the_global_rng_and_the_trace_restores_it():
    b = pipeline.build(0, None)
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    report = stage_trace(b["sample"], b["stages"], seed=7)
    assert report.status is Status.PASS
    assert torch.equal(torch.rand(3), expected_next)


# ---- built-in probes on hand-written pipelines -----------------------------------------------------

def test_reshape_instead_of_permute_on_a_bare_tensor_and_unverified_categories():
    image = torch.randint(0, 256, (8, 12, 3), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    good = [("to_float", lambda x: x.float() / 255), ("to_chw", lambda x: x.permute(2, 0, 1))]
    bad = [("to_float", lambda x: x.float() / 255), ("to_chw", lambda x: x.reshape(3, 8, 12))]
    ok = traced(image, good)
    assert ok.status is Status.PASS
    assert ok.details["unverified"] == ["semantics", "relationships", "provenance"]
    assert [f.check for f in ok.findings if f.status is Status.SKIPPED] == ["stage.unverified"] * 3
    report = traced(image, bad)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("to_chw", "stage.structure")
    assert "reshape" in report.first_divergence.observed


def test_stage_adding_a_batch_axis_is_a_permutation_not_a_scramble():
    stages = [("to_float", to_float), ("to_chw", lambda s: {**s, "image": s["image"].permute(2, 0, 1)}),
              ("batch", lambda s: {**s, "image": s["image"].unsqueeze(0)})]
    report = traced(image_sample(), stages)
    assert report.status is Status.PASS, str(report)
    assert report.details["trace"][-1]["image"]["layout"] == "NCHW"


def test_numpy_sample_to_float_without_division():
    image = np.random.default_rng(0).integers(0, 256, (6, 9, 3), dtype=np.uint8)
    to_float = ("to_float", lambda x: x.astype(np.float32))
    # nothing after it reads the image as 0..1: a pipeline may keep 0..255 floats on purpose, so a WARN of the kind
    report = traced(image, [to_float])
    numeric = next(f for f in report.findings if f.check == "stage.numeric")
    assert report.status is Status.WARN and numeric.status is Status.WARN and numeric.evidence["to_float"]["max"] > 1
    assert "not confirmed: no later stage declares the mean/std" in numeric.message and "'range': (0, 1)" in numeric.message

    def normalize(mean, std):
        def norm(x):  # declares its statistics by closure variables mean/std
            return (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
        return norm

    imagenet = ("normalize", normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]))
    report = traced(image, [to_float, imagenet])  # statistics on the 0..1 scale read it: confirmed
    assert (report.first_divergence.where, report.first_divergence.kind) == ("to_float", "stage.numeric")
    numeric = next(f for f in report.findings if f.check == "stage.numeric")
    assert "the normalization after it declares mean up to 0.485, the 0..1 scale" in numeric.message
    mmdet = ("normalize", normalize([123.675, 116.28, 103.53], [58.395, 57.12, 57.375]))  # statistics on 0..255
    assert next(f for f in traced(image, [to_float, mmdet]).findings if f.check == "stage.numeric").status is Status.PASS


def test_nonfinite_values_appearing_are_numeric():
    stages = [("to_float", to_float), ("log", lambda s: {**s, "image": torch.log(s["image"] - 0.5)})]
    report = traced(image_sample(), stages)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("log", "stage.numeric")


def test_rotation_of_image_and_mask_keeps_box_and_alignment():
    rot = ("rotate", lambda s: {**s, "image": s["image"].rot90(1, (0, 1)), "mask": s["mask"].rot90(1, (0, 1))})
    report = traced(image_sample(), [("to_float", to_float), rot])
    assert report.status is Status.PASS, str(report)
    assert report.details["checked"]["semantics"] == ["to_float", "rotate"]  # the box followed the rotation
    assert report.details["trace"][-1]["image_transform"] == ["rot90"]
    only_image = ("rotate", lambda s: {**s, "image": s["image"].rot90(1, (0, 1)), "mask": s["mask"]})
    report = traced(image_sample(), [("to_float", to_float), only_image])
    assert (report.first_divergence.where, report.first_divergence.kind) == ("rotate", "stage.relationships")


def test_large_images_are_matched_on_pooled_views():
    g = torch.Generator().manual_seed(1)
    sample = {"image": torch.rand(150, 210, 3, generator=g), "mask": (torch.rand(150, 210, generator=g) > 0.6).to(torch.uint8)}
    both = ("flip", lambda s: {**s, "image": s["image"].flip(1), "mask": s["mask"].flip(1)})
    assert traced(sample, [both]).status is Status.PASS
    assert traced(sample, [both]).details["trace"][-1]["image_transform"] == ["flip-h"]
    image_only = ("flip", lambda s: {**s, "image": s["image"].flip(0)})
    report = traced(sample, [image_only])
    assert (report.first_divergence.where, report.first_divergence.observed) == ("flip", "mask: identity")


def test_low_precision_permute_is_still_a_permutation():
    image = torch.rand(9, 11, 3, generator=torch.Generator().manual_seed(0))
    ok = traced(image, [("to_chw_bf16", lambda x: x.bfloat16().permute(2, 0, 1))])
    assert ok.status is Status.PASS and ok.details["checked"]["structure"] == ["to_chw_bf16"]
    bad = traced(image, [("to_chw_bf16", lambda x: x.bfloat16().reshape(3, 9, 11))])
    assert bad.first_divergence.kind == "stage.structure"


def test_crop_of_the_image_only_breaks_the_relationship():
    report = traced(image_sample(), [("crop", lambda s: {**s, "image": s["image"][:8, :12]})])
    assert (report.first_divergence.where, report.first_divergence.kind) == ("crop", "stage.relationships")
    assert report.first_divergence.observed == "image [8, 12], mask [10, 14]"


def test_channel_order_contract_bgr():
    sample = image_sample()
    sample["meta"]["channel_order"] = "BGR"  # the model expects BGR, the decoder keeps RGB
    report = traced(sample, [("to_float", to_float)])
    assert (report.first_divergence.where, report.first_divergence.kind) == ("to_float", "stage.semantics")
    assert report.first_divergence.observed.startswith("RGB")


def test_provenance_from_meta_and_from_a_bound_method():
    class Stats:
        fitted_on = "train+val"

        def apply(self, s):
            return {**s, "image": (s["image"] - 0.5) / 0.25}

    report = traced(image_sample(), [("to_float", to_float), ("normalize", Stats().apply)])
    assert (report.first_divergence.where, report.first_divergence.kind) == ("normalize", "stage.provenance")
    sample = image_sample()
    sample["meta"]["provenance"] = {"normalize": {"fitted_on": "test"}}
    report = traced(sample, [("to_float", to_float), ("normalize", lambda s: {**s, "image": s["image"] - 0.5})])
    assert (report.first_divergence.where, report.first_divergence.kind) == ("normalize", "stage.provenance")
    sample["meta"]["provenance"] = {"normalize": "train"}
    assert traced(sample, [("to_float", to_float), ("normalize", lambda s: {**s, "image": s["image"] - 0.5})]).ok


# ---- the trace itself: copies, randomness, raising, None -------------------------------------------

def test_in_place_stages_do_not_corrupt_the_sample_or_the_trace():
    def brighten(s):
        s["image"].mul_(2)  # in place on what it was given
        return s

    def flip_in_place(s):
        s["image"] = s["image"].flip(1)
        s["mask"] = s["mask"].flip(1)
        return s

    sample = image_sample()
    report = traced(sample, [("to_float", to_float), ("flip", flip_in_place), ("brighten", brighten)])
    rows = report.details["trace"]
    assert rows[2]["image"]["max"] == pytest.approx(1.0) and rows[3]["image"]["max"] == pytest.approx(2.0)


def test_random_augmentation_is_reproducible_under_seed_and_leaves_the_global_rng():
    def jitter(s):
        noise = torch.rand(s["image"].shape) * 0.01 + float(np.random.rand()) * 0.01 + random.random() * 0.01
        return {**s, "image": s["image"] + noise}

    stages = [("to_float", to_float), ("jitter", jitter)]
    a, b = traced(image_sample(), stages, seed=3), traced(image_sample(), stages, seed=3)
    c = traced(image_sample(), stages, seed=4)
    assert a.details["trace"] == b.details["trace"] and a.details["trace"] != c.details["trace"]


def test_a_stage_that_raises_is_the_divergence_with_the_trace_up_to_it():
    def broken(s):
        torch.rand(5)  # consumes global randomness before failing
        raise RuntimeError("size mismatch in resize")

    sample = image_sample()
    report = traced(sample, [("to_float", to_float), ("resize", broken), ("never", to_float)])
    d = report.first_divergence
    assert (d.where, d.kind) == ("resize", "stage.raised") and "size mismatch" in d.observed
    assert [r["stage"] for r in report.details["trace"]] == ["(input)", "to_float", "resize"]
    raised = next(f for f in report.findings if f.check == "stage.raised")
    assert raised.evidence["input"]["interpretation"] == "float 0..1" and raised.evidence["exception"] == "RuntimeError"


def test_a_stage_that_returns_none_is_structure():
    def forgot_return(s):
        s["image"] = s["image"].float() / 255

    report = traced(image_sample(), [("to_float", forgot_return), ("next", to_float)])
    assert (report.first_divergence.where, report.first_divergence.kind) == ("to_float", "stage.structure")
    assert [r["stage"] for r in report.details["trace"]] == ["(input)", "to_float"]


# ---- user probes and contracts -----------------------------------------------------------------------

def test_user_probes_with_and_without_category():
    def label_kept(before, after, stage):
        return None if before["label"] == after["label"] else f"label {before['label']} -> {after['label']}"

    def mutating_probe(before, after, stage):
        after["image"].zero_()  # gets a copy: cannot change the trace

    def broken_probe(before, after, stage):
        raise ValueError("probe bug")

    stages = [("to_float", to_float), ("relabel", lambda s: {**s, "label": 0})]
    report = traced(image_sample(), stages, probes={"zero": mutating_probe, "label": ("relationships", label_kept),
                                                    "broken": ("Numeric Interpretation", broken_probe)})
    assert (report.first_divergence.where, report.first_divergence.kind) == ("relabel", "stage.relationships")
    assert report.first_divergence.observed == "label 3 -> 0"
    assert report.details["trace"][1]["image"]["max"] > 0
    assert any("probe bug" in n for n in report.details["trace"][1]["notes"])
    ok = traced(image_sample(), stages[:1], probes={"always": lambda b, a, s: "always fails"})
    assert (ok.first_divergence.where, ok.first_divergence.kind) == ("to_float", "stage.semantics")
    verdicts = traced(image_sample(), stages[:1], probes={"true": ("provenance", lambda b, a, s: np.bool_(True)),
                                                          "tensor": ("provenance", lambda b, a, s: torch.ones(2))})
    assert verdicts.status is Status.PASS and verdicts.details["checked"]["provenance"] == ["to_float"]
    assert any("returned Tensor" in n for n in verdicts.details["trace"][1]["notes"])
    false = traced(image_sample(), stages[:1], probes={"false": ("structure", lambda b, a, s: False)})
    assert (false.first_divergence.kind, false.first_divergence.observed) == ("stage.structure", "returned False")


def test_contracts_dtype_shape_layout_range():
    stages = [("to_float", to_float), ("to_chw", lambda s: {**s, "image": s["image"].permute(2, 0, 1)})]
    good = {"to_chw": {"image": {"dtype": torch.float32, "shape": [3, None, -1], "layout": "CHW", "range": (0, 1)},
                       "mask": {"dtype": "int", "shape": [10, 14]}}}
    assert traced(image_sample(), stages, contracts=good).status is Status.PASS
    wrong_layout = {"to_float": {"image": {"layout": "CHW"}}}
    report = traced(image_sample(), stages, contracts=wrong_layout)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("to_float", "stage.structure")
    wrong_range = {"to_chw": {"image": {"dtype": np.float32, "range": (-1, 0.5)}}}
    report = traced(image_sample(), stages, contracts=wrong_range)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("to_chw", "stage.numeric")
    missing = {"to_chw": {"depth": {"dtype": "float"}}}
    assert traced(image_sample(), stages, contracts=missing).first_divergence.kind == "stage.structure"


# ---- misuse and rendering ---------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    ({"sample": "raw text"}, "Expected `sample`"),
    ({"sample": None}, "Expected `sample`"),
    ({"fields": ("image", "image")}, "Expected `fields`"),
    ({"class_to_idx": ["cat"]}, "Expected `class_to_idx`"),
    ({"label_rule": 3}, "Expected `label_rule`"),
    ({"augmentations": "to_float"}, "Expected `augmentations`"),
    ({"augmentations": {"flip"}, "eval_stages": [("to_float", to_float)]}, "Expected `augmentations` among"),
    ({"eval_stages": []}, "Expected `stages`"),
    ({"meta": "RGB"}, "Expected `meta`"),
    ({"contracts": {"to_float": {"image": {"normalized": {"mean": [0.5]}}}}}, "normalized"),
    ({"stages": []}, "Expected `stages`"),
    ({"stages": [("a", 3)]}, "Expected each stage"),
    ({"stages": [("a", to_float), ("a", to_float)]}, "unique stage names"),
    ({"probes": {"p": ("colour", lambda b, a, s: None)}}, "Expected probe 'p'"),
    ({"probes": [lambda b, a, s: None]}, "Expected `probes`"),
    ({"contracts": {"nope": {"image": {"dtype": "float32"}}}}, "Expected contract stages"),
    ({"contracts": {"to_float": {"image": {"colour": "red"}}}}, "keys among"),
    ({"contracts": {"to_float": {"image": {"dtype": "floaty"}}}}, "dtype"),
    ({"contracts": {"to_float": {"image": {"range": (1, 0)}}}}, "range"),
    ({"contracts": {"to_float": {"image": {"layout": "WHC"}}}}, "layout"),
    ({"seed": -1}, "Expected `seed`"),
    ({"seed": 1.5}, "Expected `seed`"),
])
def test_bad_arguments_are_one_line_errors(kwargs, match):
    args = {"sample": image_sample(), "stages": [("to_float", to_float)], **kwargs}
    with pytest.raises(InvalidArgument, match=match) as err:
        stage_trace(args.pop("sample"), args.pop("stages"), **args)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("meta", [{"channel_order": "RGBA"}, {"known_colour": {"box": [3, 1, 0, 2], "rgb": [1, 2, 3]}},
                                  {"known_colour": {"box": [0, 1, 0, 2], "rgb": [300, 0, 0]}}, {"provenance": "train"}])
def test_malformed_meta_is_invalid_argument(meta):
    sample = {**image_sample(), "meta": meta}
    with pytest.raises(InvalidArgument):
        stage_trace(sample, [("to_float", to_float)])


def test_report_renders_and_round_trips():
    report = run(0, "chw_view")
    text = str(report)
    assert "STAGE_TRACE" in text and "FIRST DIVERGENCE at to_chw  [stage.structure]" in text
    assert Report.from_dict(json.loads(report.to_json())).to_dict() == report.to_dict()
    clean = str(run(0, None))
    assert "PASS" in clean and "side effects" in clean
