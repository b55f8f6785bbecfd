"""stage_trace on image classification pipelines: a folder-like Dataset's (image, class name) tuples through
user-written transforms; correct pipelines (train, train vs eval, a BGR decoder converted once, a stained-tissue
dataset with its own statistics, dict samples cast to channels_last bfloat16) and the bugs such pipelines carry."""

from __future__ import annotations

from functools import partial

import torch
from _cases import Case
from _pipelines_image import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    KNOWN_RED,
    STAIN_MEAN,
    STAIN_STD,
    AddGaussianNoise,
    Brightness,
    CenterCrop,
    EncodeLabel,
    FromOpenCV,
    Normalize,
    NormalizeByMean,
    RandomResizedCrop,
    Resize,
    ToTensor,
    listing_order_classes,
    program,
    sorted_classes,
    train_stages,
)

from firstdiv import stage_trace

FIELDS = ("image", "label")


def trace(p, **kw):
    return stage_trace(p.sample, p.stages, fields=FIELDS, class_to_idx=p.class_to_idx, seed=0, **kw)


def trace_eval(p):
    return trace(p, eval_stages=p.eval_stages, augmentations={"random_flip"})


def eval_stages(seed, data, size=(32, 32), normalize=True):
    c2i = sorted_classes(data.paths)
    stages = [("to_tensor", ToTensor()), ("resize", Resize(size))]
    stages += [("normalize", Normalize(IMAGENET_MEAN, IMAGENET_STD))] if normalize else []
    return stages + [("encode_label", EncodeLabel(c2i))]


def with_stage(name, stage, after):
    """The train stages with ``(name, stage)`` inserted after ``after`` (or replacing ``name``)."""
    def build(seed, data):
        stages = train_stages(seed, sorted_classes(data.paths))
        names = [n for n, _ in stages]
        if name in names:
            stages[names.index(name)] = (name, stage)
        else:
            stages.insert(names.index(after) + 1, (name, stage))
        return stages
    return build


def crop_train(seed, data):
    return [("to_tensor", ToTensor()), ("random_resized_crop", RandomResizedCrop((28, 28), seed=seed)),
            ("brightness", Brightness(seed=seed)), ("noise", AddGaussianNoise(seed=seed)),
            ("normalize", Normalize(IMAGENET_MEAN, IMAGENET_STD)), ("encode_label", EncodeLabel(sorted_classes(data.paths)))]


def crop_eval(seed, data):
    return [("to_tensor", ToTensor()), ("resize", Resize((32, 32))), ("center_crop", CenterCrop((28, 28))),
            ("normalize", Normalize(IMAGENET_MEAN, IMAGENET_STD)), ("encode_label", EncodeLabel(sorted_classes(data.paths)))]


def trace_crops(p):
    return trace(p, eval_stages=p.eval_stages, augmentations={"random_resized_crop", "brightness", "noise"})


def opencv_stages(seed, data):
    return [("from_opencv", FromOpenCV())] + train_stages(seed, sorted_classes(data.paths))


def stain_stages(seed, data):
    return with_stage("normalize", Normalize(STAIN_MEAN, STAIN_STD), "resize")(seed, data)


class DictImages:
    """The same images as a dict dataset: {"pixel_values", "label"} (as HF-style collators expect)."""

    def __init__(self, base):
        self.base = base

    def __getitem__(self, i):
        image, label = self.base[i]
        return {"pixel_values": image, "label": label}


def _dict_stage(fn, sample):
    image, label = fn((sample["pixel_values"], sample["label"]))
    return {"pixel_values": image, "label": label}


def dict_program(seed):
    p = program(seed, index=seed)
    p.sample = DictImages(p.dataset)[seed % len(p.dataset)]
    c2i = p.class_to_idx
    p.stages = [(n, partial(_dict_stage, fn)) for n, fn in train_stages(seed, c2i)[:-1]] + [
        ("channels_last_bf16", lambda s: {**s, "pixel_values": s["pixel_values"][None].to(torch.bfloat16)
                                          .contiguous(memory_format=torch.channels_last)}),
        ("encode_label", lambda s: {**s, "label": c2i[s["label"]]})]
    return p


CASES = [
    Case("folder_tuple_train", "stage_trace", lambda s: program(s, index=s), trace),
    Case("folder_train_vs_eval", "stage_trace", lambda s: program(s, index=s + 1, eval_stages=eval_stages), trace_eval),
    Case("known_colour_rgb", "stage_trace", lambda s: program(s, red_box=True), lambda p: trace(p, meta=KNOWN_RED)),
    Case("bgr_decoder_converted_once", "stage_trace", lambda s: program(s, bgr=True, red_box=True, stages=opencv_stages),
         lambda p: trace(p, meta=KNOWN_RED)),
    Case("stained_tissue_rgb", "stage_trace", lambda s: program(s, mean=STAIN_MEAN, std=STAIN_STD, stages=stain_stages), trace),
    Case("dict_channels_last_bf16", "stage_trace", dict_program,
         lambda p: stage_trace(p.sample, p.stages, class_to_idx=p.class_to_idx)),
    Case("random_crop_jitter_noise_vs_center_crop", "stage_trace",
         lambda s: program(s, index=s, stages=crop_train, eval_stages=crop_eval), trace_crops),
    # bugs
    Case("eval_center_crop_without_normalize", "stage_trace",
         lambda s: program(s, stages=crop_train, eval_stages=lambda seed, d: [t for t in crop_eval(seed, d) if t[0] != "normalize"]),
         trace_crops, bug=True, where=("normalize",), kind="train_eval"),
    Case("opencv_port_on_rgb_decoder", "stage_trace", lambda s: program(s, red_box=True, stages=opencv_stages),
         lambda p: trace(p, meta=KNOWN_RED), bug=True, where=("from_opencv",), kind="semantics"),
    Case("stained_tissue_bgr_decoder", "stage_trace",
         lambda s: program(s, mean=STAIN_MEAN, std=STAIN_STD, bgr=True, stages=stain_stages), trace,
         bug=True, where=("normalize",), kind="channel_order"),
    Case("normalize_divides_by_mean", "stage_trace",
         lambda s: program(s, stages=with_stage("normalize", NormalizeByMean(IMAGENET_MEAN, IMAGENET_STD), "resize")), trace,
         bug=True, where=("normalize",), kind="normalization"),
    Case("normalized_twice", "stage_trace",
         lambda s: program(s, stages=with_stage("model_preprocess", Normalize(IMAGENET_MEAN, IMAGENET_STD), "normalize")), trace,
         bug=True, where=("model_preprocess",), kind="numeric"),
    Case("normalize_with_0_255_statistics", "stage_trace",
         lambda s: program(s, stages=with_stage("normalize", Normalize([123.675, 116.28, 103.53], [58.395, 57.12, 57.375]),
                                                "resize")), trace,
         bug=True, where=("normalize",), kind="normalization"),
    Case("label_map_in_listing_order", "stage_trace",
         lambda s: program(s, stages=lambda seed, d: with_stage("encode_label", EncodeLabel(listing_order_classes(d.paths)),
                                                                 "normalize")(seed, d)), trace,
         bug=True, where=("encode_label",), kind="label_map"),
    Case("label_map_one_based", "stage_trace",
         lambda s: program(s, index=1, stages=lambda seed, d: with_stage("encode_label", EncodeLabel(
             {c: i + 1 for c, i in sorted_classes(d.paths).items()}), "normalize")(seed, d)), trace,
         bug=True, where=("encode_label",), kind="label_map"),
    Case("eval_forgets_normalize", "stage_trace",
         lambda s: program(s, eval_stages=partial(eval_stages, normalize=False)), trace_eval,
         bug=True, where=("normalize",), kind="train_eval"),
    Case("eval_resizes_differently", "stage_trace",
         lambda s: program(s, eval_stages=partial(eval_stages, size=(36, 36))), trace_eval,
         bug=True, where=("eval:resize",), kind="train_eval"),
]
