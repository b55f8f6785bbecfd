"""stage_trace on Dataset-shaped samples: (input, target) tuples and nested containers, unreadable leaves, the
declared-normalization probe, the label probe and the train vs eval comparison."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from firstdiv import InvalidArgument, Status, stage_trace
from firstdiv.instruments._core.state import Snapshot

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one intra-op thread
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
FIELDS = ("image", "label")
CLASSES = {"bird": 0, "cat": 1, "dog": 2}


def _copy(obj):
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_copy(v) for v in obj)
    return obj


def _dense(t):
    t = t.dequantize() if t.is_quantized else t
    return t.to_dense() if t.layout != torch.strided else t


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.layout == b.layout and torch.equal(_dense(a), _dense(b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a is b or a == b


def traced(sample, stages, **kwargs):
    kept, before = _copy(sample), Snapshot.take()
    report = stage_trace(sample, stages, **kwargs)
    assert _same(sample, kept), "stage_trace changed the sample"
    assert before.diff(Snapshot.take()) == []
    return report


def image(seed=0, h=24, w=28, mean=MEAN, std=STD):
    g = torch.Generator().manual_seed(seed)
    x = torch.tensor(mean).view(3, 1, 1) + torch.tensor(std).view(3, 1, 1) * torch.randn(3, h, w, generator=g)
    return (x.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).contiguous()  # HWC uint8


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def __call__(self, sample):
        x, y = sample
        return (x - torch.tensor(self.mean).view(-1, 1, 1)) / torch.tensor(self.std).view(-1, 1, 1), y


class DivideByMean(Normalize):
    def __call__(self, sample):
        x, y = sample
        return (x - torch.tensor(self.mean).view(-1, 1, 1)) / torch.tensor(self.mean).view(-1, 1, 1), y


def to_tensor(sample):
    x, y = sample
    return x.permute(2, 0, 1).float() / 255, y


def encode(mapping):
    return lambda s: (s[0], mapping[s[1]])


def stages(norm=None, label_map=CLASSES):
    return [("to_tensor", to_tensor), ("normalize", norm or Normalize(MEAN, STD)), ("encode_label", encode(label_map))]


def fails(report, where, kind):
    div = report.first_divergence
    assert report.status is Status.FAIL and div is not None, str(report)
    assert div.where == where and kind in div.kind, (div.where, div.kind, div.observed)
    return div


# ---- tuples, datasets, nested and unusual leaves ----------------------------------------------------

class Pairs(Dataset):
    def __init__(self, as_dict=False):
        self.as_dict = as_dict

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return {"image": image(i), "label": "dog"} if self.as_dict else (image(i), "dog")


def test_dataset_tuple_item_is_traced_with_field_names():
    report = traced(Pairs()[1], stages(), fields=("image", "label"), class_to_idx=CLASSES)
    assert report.status is Status.PASS, str(report)
    trace = report.details["trace"]
    assert trace[0]["image"]["key"] == "image" and trace[1]["image"]["layout"] == "CHW"
    checked = report.details["checked"]
    assert "normalize" in checked["numeric"] and "encode_label" in checked["semantics"]


def test_tuple_elements_are_named_by_position_without_fields():
    report = traced(Pairs()[0], stages())
    assert report.status is Status.PASS and report.details["trace"][0]["image"]["key"] == "0"


def test_dataset_dict_item_and_list_sample():
    dict_stages = [("to_tensor", lambda s: {**s, "image": s["image"].permute(2, 0, 1).float() / 255}),
                   ("encode_label", lambda s: {**s, "label": CLASSES[s["label"]]})]
    assert traced(Pairs(as_dict=True)[2], dict_stages, class_to_idx=CLASSES).status is Status.PASS
    assert traced(list(Pairs()[0]), [("to_tensor", lambda s: list(to_tensor(s)))]).status is Status.PASS


def test_nested_containers_strings_and_ints_are_read_or_passed_over():
    sample = {"inputs": {"image": image(), "extra": (3, "note", None)}, "label": ("dog", 2), "id": 7}
    report = traced(sample, [("to_tensor", lambda s: {**s, "inputs": {**s["inputs"], "image": s["inputs"]["image"]
                                                                      .permute(2, 0, 1).float() / 255}})])
    assert report.status is Status.PASS
    assert report.details["trace"][1]["image"]["key"] == "inputs.image"
    assert "to_tensor" in report.details["checked"]["structure"]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("leaf", ["coo", "csr", "quantized"])
def test_unreadable_tensors_are_skipped_findings_with_the_reason(leaf):
    t = torch.eye(4)
    t = {"coo": t.to_sparse(), "csr": t.to_sparse_csr(), "quantized": torch.quantize_per_tensor(t, 0.1, 0, torch.quint8)}[leaf]
    report = traced((image(), t), [("to_tensor", lambda s: (to_tensor(s)[0], s[1]))], eval_stages=[("same", lambda s: s)])
    skipped = [f for f in report.findings if f.check == "stage.unread"]
    assert report.status is not Status.FAIL or report.first_divergence.kind == "stage.train_eval", str(report)
    assert len(skipped) == 1 and skipped[0].status is Status.SKIPPED and skipped[0].where == "(input)"
    assert ("sparse" if leaf != "quantized" else "quantized") in skipped[0].message
    bare = traced(t, [("id", lambda s: s)])
    assert any(f.check == "stage.unread" and f.status is Status.SKIPPED for f in bare.findings) and bare.status is not Status.FAIL


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_channels_last_output_passes_the_normalization_check(dtype):
    cast = ("to_model", lambda s: (s[0][None].to(dtype).contiguous(memory_format=torch.channels_last), s[1]))
    norm = ("normalize", lambda s: (((s[0].float() - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1))
                                    .to(dtype).contiguous(memory_format=torch.channels_last), s[1]))
    norm[1].mean, norm[1].std = MEAN, STD
    report = traced((image(), 1), [("to_tensor", to_tensor), cast, norm])
    assert report.status is Status.PASS, str(report)
    assert any("matches (x - mean) / std" in f.message for f in report.findings if f.where == "normalize")


# ---- declared normalization ---------------------------------------------------------------------------

def test_divide_by_mean_fails_at_the_stage_naming_a_channel():
    div = fails(traced((image(), "dog"), stages(DivideByMean(MEAN, STD))), "normalize", "stage.numeric.normalization")
    assert "channel" in div.expected and "std" in div.observed


def _normalize_with(sample, mean, std):
    return (sample[0] - torch.tensor(mean).view(-1, 1, 1)) / torch.tensor(std).view(-1, 1, 1), sample[1]


def _ignores_std(sample, mean, std):
    return _normalize_with(sample, mean, mean)


@pytest.mark.parametrize("how", ["closure", "partial", "contract"])
def test_statistics_declared_by_closure_partial_or_contract(how):
    mean, std = MEAN, STD
    kw = {}
    if how == "closure":  # a lambda named "normalize" that captured mean and std
        ok_fn, bad_fn = (lambda s: _normalize_with(s, mean, std)), (lambda s: _normalize_with(s, mean, [v * 2 for v in std]))
    elif how == "partial":
        ok_fn, bad_fn = functools.partial(_normalize_with, mean=MEAN, std=STD), functools.partial(_ignores_std, mean=MEAN, std=STD)
    else:  # the contract is the truth: the stage's own keywords (the wrong std) do not excuse it
        kw = {"contracts": {"normalize": {"0": {"normalized": {"mean": MEAN, "std": STD}}}}}
        ok_fn, bad_fn = functools.partial(_normalize_with, mean=MEAN, std=STD), functools.partial(_normalize_with, mean=MEAN, std=[0.5] * 3)
    good = traced((image(), 1), [("to_tensor", to_tensor), ("normalize", ok_fn)], **kw)
    assert good.status is Status.PASS, str(good)
    assert any("matches" in f.message for f in good.findings if f.where == "normalize")
    fails(traced((image(), 1), [("to_tensor", to_tensor), ("normalize", bad_fn)], **kw), "normalize", "normalization")


def test_statistics_on_the_wrong_scale_fail():
    big = Normalize([123.675, 116.28, 103.53], [58.395, 57.12, 57.375])
    div = fails(traced((image(), 1), stages(big)[:2]), "normalize", "normalization")
    assert "0..255" in div.observed
    raw = [("normalize", lambda s: Normalize(MEAN, STD)((s[0].permute(2, 0, 1).float(), s[1])))]
    raw[0][1].mean, raw[0][1].std = MEAN, STD
    assert "/255 is missing" in fails(traced((image(), 1), raw), "normalize", "normalization").observed


def test_normalize_that_also_scales_an_integer_image_passes():
    fused = Normalize(MEAN, STD)
    stage = ("to_tensor_normalize", lambda s: fused((s[0].permute(2, 0, 1).float() / 255, s[1])))
    stage[1].mean, stage[1].std = MEAN, STD
    assert traced((image(), 1), [stage]).status is Status.PASS


def test_channel_order_from_per_channel_statistics():
    mean, std = [0.75, 0.45, 0.15], [0.12, 0.12, 0.10]
    rgb = image(mean=mean, std=std)
    good = traced((rgb, 1), stages(Normalize(mean, std))[:2])
    assert good.status is Status.PASS, str(good)
    div = fails(traced((rgb.flip(-1), 1), stages(Normalize(mean, std))[:2]), "normalize", "stage.semantics.channel_order")
    assert "BGR" in div.observed


# ---- labels --------------------------------------------------------------------------------------------

def test_label_map_mismatch_fails_at_the_label_stage():
    unsorted = {"dog": 0, "cat": 1, "bird": 2}
    div = fails(traced((image(), "dog"), stages(label_map=unsorted), class_to_idx=CLASSES), "encode_label", "label_map")
    assert div.expected.startswith("class 2") and div.observed == "class 0"


def test_label_rule_one_hot_and_unknown_class():
    rule = lambda record: 2
    one_hot = [("to_tensor", to_tensor), ("one_hot", lambda s: (s[0], torch.nn.functional.one_hot(torch.tensor(2), 3).float()))]
    assert traced((image(), "dog"), one_hot, label_rule=rule).status is Status.PASS
    fails(traced((image(), "dog"), one_hot, label_rule=lambda r: 1), "one_hot", "label_map")
    unknown = traced((image(), "wolf"), stages(label_map={"wolf": 0}), class_to_idx=CLASSES)
    assert unknown.status is Status.PASS and any("not in class_to_idx" in f.message for f in unknown.findings)
    mapped = traced((image(), 2), stages()[:2], class_to_idx=CLASSES)
    assert any(f.check == "stage.label" and f.status is Status.SKIPPED and "label_rule" in f.message for f in mapped.findings)
    broken = traced((image(), "dog"), stages(), label_rule=lambda r: r["missing"])
    assert broken.status is Status.PASS and any("label_rule raised" in f.message for f in broken.findings)


def test_label_scaled_like_a_feature_fails():
    row = {"age": 41.0, "churned": 1}
    scale = [("standardize", lambda r: {k: (v - 0.3) / 0.46 for k, v in r.items()})]
    fails(traced(row, scale, label_key="churned"), "standardize", "label_changed")


# ---- train vs eval -------------------------------------------------------------------------------------

def flip(sample):
    return sample[0].flip(-1), sample[1]


def train():
    return [("to_tensor", to_tensor), ("random_flip", flip), ("normalize", Normalize(MEAN, STD)), ("encode_label", encode(CLASSES))]


def test_eval_pipeline_agrees_except_declared_augmentations():
    evals = [("to_tensor", to_tensor), ("normalize", Normalize(MEAN, STD)), ("encode_label", encode(CLASSES))]
    ok = traced((image(), "dog"), train(), eval_stages=evals, augmentations={"random_flip"})
    assert ok.status is Status.PASS, str(ok)
    assert next(f for f in ok.findings if f.check == "stage.train_eval").status is Status.PASS
    fails(traced((image(), "dog"), train(), eval_stages=evals), "random_flip", "train_eval")  # the flip not declared


def random_crop(sample):  # a random augmentation: where it crops depends on the global RNG
    top, left = (int(v) for v in torch.randint(0, 5, (2,)))
    return sample[0][:, top:top + 20, left:left + 24], sample[1]


def test_an_undeclared_stage_that_is_random_is_a_warn_asking_for_augmentations():
    crop = [("to_tensor", to_tensor), ("random_crop", random_crop), ("normalize", Normalize(MEAN, STD))]
    center = [("to_tensor", to_tensor), ("center_crop", lambda s: (s[0][:, 2:22, 2:26], s[1])),
              ("normalize", Normalize(MEAN, STD))]
    report = traced((image(), "dog"), crop, eval_stages=center, seed=3)
    found = next(f for f in report.findings if f.check == "stage.train_eval")
    assert report.status is not Status.FAIL and found.status is Status.WARN, str(report)
    assert "'random_crop' are random" in found.message and "name them in augmentations=" in found.message
    assert found.evidence["random_stages"] == ["random_crop"]
    declared = traced((image(), "dog"), crop, eval_stages=center, seed=3, augmentations={"random_crop"})
    assert next(f for f in declared.findings if f.check == "stage.train_eval").status is Status.PASS
    # the eval pipeline forgets the normalization: it parts from train even with the crop compared as an augmentation
    fails(traced((image(), "dog"), crop, eval_stages=center[:2], seed=3), "normalize", "train_eval")


def test_eval_pipeline_missing_or_changing_a_stage_fails_where_they_part():
    evals = [("to_tensor", to_tensor), ("encode_label", encode(CLASSES))]
    div = fails(traced((image(), "dog"), train(), eval_stages=evals, augmentations={"random_flip"}), "normalize", "train_eval")
    assert "skips" in div.observed
    short = [("to_tensor", to_tensor)]
    fails(traced((image(), "dog"), train(), eval_stages=short, augmentations={"random_flip"}), "normalize", "train_eval")
    plain = [t for t in train() if t[0] != "random_flip"]
    other = [("to_tensor", lambda s: (s[0].permute(2, 0, 1).float() / 256, s[1]))] + plain[1:]
    fails(traced((image(), "dog"), plain, eval_stages=other), "eval:to_tensor", "train_eval")


def test_eval_stage_raising_is_a_finding_not_an_exception():
    def boom(sample):
        raise ValueError("eval transform broke")

    div = fails(traced((image(), "dog"), train(), eval_stages=[("to_tensor", boom)]), "eval", "train_eval")
    assert "eval transform broke" in div.observed
    stopped = traced((image(), "dog"), [("to_tensor", boom)], eval_stages=[("to_tensor", to_tensor)])
    assert any(f.check == "stage.train_eval" and f.status is Status.SKIPPED for f in stopped.findings)


def test_bad_declarations_are_one_line_errors():
    for kwargs, match in [({"fields": "image"}, "Expected `fields`"), ({"label_key": 1}, "Expected `label_key`"),
                          ({"class_to_idx": {"a": "0"}}, "Expected `class_to_idx`")]:
        with pytest.raises(InvalidArgument, match=match) as err:
            stage_trace((image(), 1), stages(), **kwargs)
        assert "\n" not in str(err.value)


def test_noise_stage_with_mean_and_std_is_not_a_normalization():
    class AddGaussianNoise:
        def __init__(self, mean=0.0, std=0.05):
            self.mean, self.std = mean, std

        def __call__(self, sample):
            g = torch.Generator().manual_seed(0)
            return sample[0] + self.mean + self.std * torch.randn(sample[0].shape, generator=g), sample[1]

    report = traced((image(), 1), [("to_tensor", to_tensor), ("augment", AddGaussianNoise())])
    assert report.status is Status.PASS and not any("mean) / std" in f.message for f in report.findings)
    renamed = traced((image(), 1), [("to_tensor", to_tensor), ("normalize", AddGaussianNoise())])
    fails(renamed, "normalize", "normalization")  # named a normalization: its mean/std are held to it


def test_eval_intermediate_stage_rejoins_the_train_chain():
    def resize(size):
        return lambda s: (torch.nn.functional.interpolate(s[0][None], size=size, mode="bilinear")[0], s[1])

    def crop(s):
        return s[0][:, 4:20, 4:20], s[1]

    train_stages = [("to_tensor", to_tensor), ("random_crop", lambda s: (s[0][:, 2:18, 5:21], s[1])), ("normalize", Normalize(MEAN, STD))]
    evals = [("to_tensor", to_tensor), ("resize", resize((24, 24))), ("center_crop", crop), ("normalize", Normalize(MEAN, STD))]
    ok = traced((image(h=24, w=28), 1), train_stages, eval_stages=evals, augmentations={"random_crop"})
    assert ok.status is Status.PASS, str(ok)
    bad = evals[:2] + [("center_crop", lambda s: (s[0][:, 2:22, 2:22], s[1]))] + evals[3:]
    fails(traced((image(h=24, w=28), 1), train_stages, eval_stages=bad, augmentations={"random_crop"}), "eval:resize", "train_eval")


def test_token_sequences_after_an_augmentation_must_mostly_agree():
    words = ["aa", "bb", "cc", "dd", "ee", "ff", "gg", "hh", "ii", "jj"]
    vocab = {w: i + 2 for i, w in enumerate(words)}
    to_ids = ("to_ids", lambda r: {"input_ids": torch.tensor([vocab.get(t, 1) for t in r["text"].split(" ")]), "label": r["label"]})
    drop = ("token_drop", lambda r: {**r, "input_ids": torch.where(torch.arange(len(r["input_ids"])) % 5 == 0, 1, r["input_ids"])})
    record = {"text": " ".join(words), "label": 1}
    ok = traced(record, [to_ids, drop], eval_stages=[to_ids], augmentations={"token_drop"})
    assert ok.status is Status.PASS, str(ok)
    chars = ("to_ids", lambda r: {"input_ids": torch.tensor([vocab.get(c, 1) for c in r["text"].replace(" ", "")]), "label": r["label"]})
    fails(traced(record, [to_ids, drop], eval_stages=[chars], augmentations={"token_drop"}), "eval:to_ids", "train_eval")


def test_pil_image_in_a_tuple_is_read_as_an_array():
    pil = pytest.importorskip("PIL.Image")
    sample = (pil.fromarray(image().numpy()), "dog")
    to_t = ("to_tensor", lambda s: (torch.from_numpy(np.asarray(s[0]).copy()).permute(2, 0, 1).float() / 255, s[1]))
    report = traced(sample, [to_t, ("normalize", Normalize(MEAN, STD))], fields=FIELDS)
    assert report.status is Status.PASS and report.details["trace"][0]["image"]["dtype"] == "uint8"
    assert "to_tensor" in report.details["checked"]["structure"] and "normalize" in report.details["checked"]["numeric"]


def test_declared_augmentation_may_move_the_label():
    mix = ("mixup", lambda s: (s[0], torch.tensor([0.6, 0.0, 0.4])))
    soft = [("to_tensor", to_tensor), ("encode_label", lambda s: (s[0], torch.nn.functional.one_hot(torch.tensor(2), 3).float())), mix]
    assert traced((image(), "dog"), soft, class_to_idx=CLASSES, augmentations={"mixup"}).status is Status.PASS
    fails(traced((image(), "dog"), soft, class_to_idx=CLASSES), "mixup", "label_map")


IMAGENET_MEAN, IMAGENET_STD = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)


def test_lambda_reading_global_statistics_is_checked():
    good = ("normalize", lambda s: ((s[0] - IMAGENET_MEAN) / IMAGENET_STD, s[1]))
    variance = ("normalize", lambda s: ((s[0] - IMAGENET_MEAN) / IMAGENET_STD.pow(2), s[1]))
    ok = traced((image(), 1), [("to_tensor", to_tensor), good])
    assert ok.status is Status.PASS and any("globals mean/std" in f.message for f in ok.findings)
    fails(traced((image(), 1), [("to_tensor", to_tensor), variance]), "normalize", "normalization")
    by_mean = ("normalize", lambda s: ((s[0] - IMAGENET_MEAN) / IMAGENET_MEAN, s[1]))  # reads no std: declares nothing
    assert traced((image(), 1), [("to_tensor", to_tensor), by_mean]).status is Status.PASS
    declared = {"normalize": {"0": {"normalized": {"mean": MEAN, "std": STD}}}}
    fails(traced((image(), 1), [("to_tensor", to_tensor), by_mean], contracts=declared), "normalize", "normalization")


def test_brightness_augmentation_is_no_missing_normalization():
    def brightness(s):
        return (s[0] * 0.6).clamp(0, 1), s[1]

    train_stages = [("to_tensor", to_tensor), ("brightness", brightness), ("normalize", Normalize(MEAN, STD))]
    evals = [("to_tensor", to_tensor), ("normalize", Normalize(MEAN, STD))]
    assert traced((image(), 1), train_stages, eval_stages=evals, augmentations={"brightness"}).status is Status.PASS
    fails(traced((image(), 1), train_stages, eval_stages=evals[:1], augmentations={"brightness"}), "normalize", "train_eval")


def test_known_colour_box_follows_a_resize():
    meta = {"channel_order": "RGB", "known_colour": {"box": [4, 16, 6, 18], "rgb": [255, 0, 0]}}
    red = image(h=32, w=40).clone()
    red[4:16, 6:18] = torch.tensor([255, 0, 0], dtype=torch.uint8)

    def resize(s):
        return torch.nn.functional.interpolate(s[0][None], size=(24, 30), mode="bilinear", align_corners=False)[0], s[1]

    ok = traced((red, 1), [("to_tensor", to_tensor), ("resize", resize)], meta=meta)
    assert ok.status is Status.PASS and "resize" in ok.details["checked"]["semantics"], str(ok)
    swap = ("to_bgr", lambda s: (s[0].flip(0), s[1]))
    div = fails(traced((red, 1), [("to_tensor", to_tensor), ("resize", resize), swap], meta=meta), "to_bgr", "stage.semantics")
    assert "BGR" in div.observed
    crop = ("crop", lambda s: (s[0][:, 10:30, 0:20], s[1]))  # not a resize: the box is not followed
    assert traced((red, 1), [("to_tensor", to_tensor), crop], meta=meta).status is Status.PASS


def test_leaves_that_refuse_comparison_are_skipped_not_raised():
    class Opaque:
        def __eq__(self, other):
            raise TypeError("no comparison")

        def __repr__(self):
            raise RuntimeError("no repr")

        __hash__ = object.__hash__

    sample = (image(), Opaque())
    report = traced(sample, [("to_tensor", lambda s: (to_tensor(s)[0], s[1]))], eval_stages=[("to_tensor", lambda s: s)],
                    label_key="1")
    assert report.status is Status.PASS, str(report)
    skipped = {f.check for f in report.findings if f.status is Status.SKIPPED and "no repr" in f.message}
    assert skipped == {"stage.train_eval", "stage.label"}, str(report)


def _with_extra(fn, sample):
    return (*fn(sample[:2]), sample[2])


def test_reports_with_the_new_probes_round_trip_as_json():
    import json

    from firstdiv import Report

    evals = [("to_tensor", to_tensor), ("encode_label", encode(CLASSES))]
    sample = (image(), "dog", torch.eye(3).to_sparse())
    run = [("to_tensor", lambda s: (*to_tensor(s[:2]), s[2])), ("normalize", lambda s: (*Normalize(MEAN, STD)(s[:2]), s[2])),
           ("encode_label", lambda s: (s[0], CLASSES[s[1]], s[2]))]
    report = traced(sample, run, fields=("image", "label", "extra"), class_to_idx=CLASSES,
                    eval_stages=[(n, functools.partial(_with_extra, f)) for n, f in evals])
    assert report.status is Status.FAIL and report.first_divergence.where == "normalize"
    assert Report.from_dict(json.loads(report.to_json())).to_dict() == report.to_dict()
    assert "FIRST DIVERGENCE at normalize" in str(report)


def test_normalize_of_another_key_is_not_held_against_the_image():
    depth_norm = Normalize([2.0], [0.5])
    stage = ("normalize", lambda s: {**s, "depth": (s["depth"] - 2.0) / 0.5})
    stage[1].mean, stage[1].std = depth_norm.mean, depth_norm.std
    sample = {"image": image().permute(2, 0, 1).float() / 255, "depth": torch.rand(1, 24, 28) * 4}
    report = traced(sample, [stage])
    assert report.status is Status.PASS, str(report)
    forgot = ("normalize", lambda s: s)  # declares statistics and changes nothing
    forgot[1].mean, forgot[1].std = MEAN, STD
    fails(traced({"image": sample["image"]}, [forgot]), "normalize", "normalization")


def test_statistics_jumping_after_normalization_fail_only_as_a_second_normalization():
    base = [("to_tensor", to_tensor), ("normalize", Normalize(MEAN, STD))]
    noise = ("add_noise", lambda s: (s[0] + 3 * torch.randn(s[0].shape), s[1]))  # an augmentation after normalizing
    report = traced((image(), "dog"), [*base, noise])
    numeric = next(f for f in report.findings if f.check == "stage.numeric" and f.where == "add_noise")
    assert report.status is not Status.FAIL and numeric.status is Status.WARN, str(report)
    assert "not a per-channel affine map of its input" in numeric.message and "augmentations=" in numeric.message
    assert traced((image(), "dog"), [*base, noise], augmentations={"add_noise"}).status is Status.PASS
    again = ("normalize_again", lambda s: ((s[0] - 0.45) / 0.226, s[1]))  # the same normalization twice: affine
    fails(traced((image(), "dog"), [*base, again]), "normalize_again", "stage.numeric")


def test_a_float_target_resized_apart_from_the_image_is_a_warn_a_label_map_a_fail():
    hr = to_tensor((image(h=24, w=28), None))[0]
    downsample = ("downsample", lambda s: {**s, "image": s["image"][:, ::2, ::2]})  # super-resolution input
    report = traced({"image": hr, "target": hr.clone()}, [downsample])  # the target image stays at full size
    rel = next(f for f in report.findings if f.check == "stage.relationships")
    assert report.status is not Status.FAIL and rel.status is Status.WARN, str(report)
    assert "target is a float map, not a label map" in rel.message and "('relationships', fn)" in rel.message
    labels = (hr[0] > 0.5).long()  # a segmentation map under a target key: it must follow the image
    fails(traced({"image": hr, "target": labels}, [downsample]), "downsample", "stage.relationships")
