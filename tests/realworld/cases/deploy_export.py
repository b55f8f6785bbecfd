"""Deployment corpus, plain torch: a CNN with BatchNorm against its user-written conv+bn fold, torch.export of a
CNN, dynamic int8 quantization of an MLP, a fresh-process reload through the deployment script's factory, and
the deployment bugs users ship: a fold that drops the running mean, a checkpoint converter that renames a key
and loads with strict=False, a reload that loses a buffer set after construction, an export of a model that
branches on a value."""

from __future__ import annotations

import io

import torch
from _cases import Case
from _deploy_common import MLP, folded_cnn, mlp, program, trained_cnn
from torch import nn

from firstdiv import compare_outputs
from firstdiv.instruments.compare_outputs.variants import variants


def _images(seed, n=4):
    return torch.randn(n, 3, 8, 8, generator=torch.Generator().manual_seed(100 + seed))


def _features(seed, n=6):
    return torch.randn(n, 16, generator=torch.Generator().manual_seed(200 + seed))


def _cnn(seed):
    return program(trained_cnn(seed), _images(seed))


def _cnn_and_fold(use_mean):
    def build(seed):
        model = trained_cnn(seed)
        return program(model, _images(seed), folded=folded_cnn(model, use_mean))
    return build


def _fold_compare(p):
    return compare_outputs({"eager": p.model, "folded": p.folded}, p.inputs, rtol=1e-4, atol=1e-5)


def _kinds(kinds, **kw):
    def call(p):
        built, tols = variants(p.model, kinds, example_inputs=p.inputs if "export" in kinds else None, **kw)
        return compare_outputs(built, p.inputs, tolerances=tols)
    return call


def _mlp(seed):
    return program(mlp(seed), _features(seed))


# --- a checkpoint converter that renames a key and loads with strict=False ----------------------------------------

def _converted(seed):
    p = _mlp(seed)
    buffer = io.BytesIO()
    state = {k.replace("out.", "classifier."): v for k, v in p.model.state_dict().items()}  # an old checkpoint layout
    torch.save(state, buffer)
    buffer.seek(0)
    reloaded = MLP()
    reloaded.load_state_dict(torch.load(buffer, weights_only=True), strict=False)  # "ignore the unexpected keys"
    p.reloaded = reloaded.eval()
    return p


def _trained_vs_reloaded(p):
    return compare_outputs({"trained": p.model, "reloaded": p.reloaded}, p.inputs)


# --- a buffer set after construction, outside the state_dict -------------------------------------------------------

class Standardized(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(16), persistent=False)
        self.register_buffer("std", torch.ones(16), persistent=False)
        self.net = MLP()

    def forward(self, x):
        return self.net((x - self.mean) / self.std)


def _standardized(seed):
    torch.manual_seed(seed)
    model = Standardized()
    data = _features(seed + 50, 64) * 3 + 1
    model.mean.copy_(data.mean(0))  # statistics of the training set, computed once
    model.std.copy_(data.std(0))
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    reloaded = Standardized()
    reloaded.load_state_dict(torch.load(buffer, weights_only=True))
    return program(model.eval(), _features(seed) * 3 + 1, reloaded=reloaded.eval())


# --- an export of a model that branches on a value -----------------------------------------------------------------

class Gated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(16, 16)
        self.small, self.large = nn.Linear(16, 4), nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.encoder(x))
        if h.mean() > 0.2:  # a Python branch on a tensor's value
            return self.large(h)
        return self.small(h)


def _gated(seed):
    torch.manual_seed(seed)
    return program(Gated().eval(), _features(seed))


CASES = [
    Case("cnn_bn_folded", "compare_outputs", _cnn_and_fold(True), _fold_compare),
    Case("cnn_export_and_fresh_process_reload", "compare_outputs", _cnn,
         _kinds(("eager", "reloaded", "export"), factory="_deploy_common:make_cnn")),
    Case("mlp_int8_dynamic_and_export", "compare_outputs", _mlp, _kinds(("eager", "int8", "export"))),
    Case("cnn_fold_drops_running_mean", "compare_outputs", _cnn_and_fold(False), _fold_compare, bug=True,
         where=("folded", "features.0"), kind="outputs.diverged"),
    Case("checkpoint_key_renamed_strict_false", "compare_outputs", _converted, _trained_vs_reloaded, bug=True,
         where=("reloaded", "out"), kind="outputs.diverged"),
    Case("reload_loses_buffer_set_after_construction", "compare_outputs", _standardized, _trained_vs_reloaded,
         bug=True, where=("reloaded", "net.fc1"), kind="outputs.diverged"),
    Case("export_branches_on_a_value", "compare_outputs", _gated, _kinds(("eager", "export")), bug=True,
         where=("export",), kind="outputs.raised"),
]
