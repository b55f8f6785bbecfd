"""Reparametrized models (legacy ``nn.utils.spectral_norm`` / ``weight_norm`` hooks, and
``torch.nn.utils.parametrize``): every instrument runs on them, returns a report, leaves no trace and
raises no FAIL on the correct program.

The programs are built like the zoo's and taken mid-training: one user step has run, so the legacy
hooks' ``module.weight`` is a non-leaf tensor (which ``copy.deepcopy`` refuses) and every instrument
that copies the model must still copy it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from harness import CALLS, assert_no_trace, watched
from torch import nn
from torch.nn.utils import parametrizations

import firstdiv
from firstdiv.instruments._core.copying import model_copy
from firstdiv.instruments.compare_outputs.variants import variants
from firstdiv.report import Report, Status
from firstdiv.zoo import models
from firstdiv.zoo import references as refs
from firstdiv.zoo._program import Feed, Program


def legacy_spectral_cnn() -> nn.Module:
    model = models.SmallCNN()
    for name in ("conv1", "conv2", "head"):
        nn.utils.spectral_norm(getattr(model, name))
    return model


def legacy_weight_norm_mlp() -> nn.Module:
    model = models.MLPClassifier()
    for name in ("fc1", "fc2", "fc3"):
        with pytest.warns(FutureWarning):  # deprecated, still written in practice
            nn.utils.weight_norm(getattr(model, name))
    return model


def parametrized_mlp() -> nn.Module:
    model = models.MLPClassifier(hidden=16)
    parametrizations.spectral_norm(model.fc1)
    parametrizations.orthogonal(model.fc2)
    parametrizations.weight_norm(model.fc3)
    return model


def parametrized_cnn() -> nn.Module:
    model = models.SmallCNN()
    parametrizations.weight_norm(model.conv1)
    parametrizations.spectral_norm(model.conv2)
    parametrizations.orthogonal(model.head)
    return model


BUILDERS = {"legacy_spectral_cnn": legacy_spectral_cnn, "legacy_weight_norm_mlp": legacy_weight_norm_mlp,
            "parametrized_mlp": parametrized_mlp, "parametrized_cnn": parametrized_cnn}


def build(kind: str, seed: int = 0, variants_builder: Callable[[], tuple] | None = None) -> Program:
    """The program as a user writes it (data, model, SGD with momentum, the standard step), after one step;
    ``variants_builder`` replaces the int8 variants (which are built on first access)."""
    cnn = kind.endswith("cnn")
    data = (refs.cnn_data if cnn else refs.mlp_data)(torch.Generator().manual_seed(seed))
    with torch.random.fork_rng(devices=[]):  # construction draws from the global RNG: leave it as it was
        torch.manual_seed(seed)
        model = BUILDERS[kind]()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if cnn:
        loader, batch = refs.cnn_loader(data, torch.Generator().manual_seed(seed + 1))
    else:
        loader, batch = None, (data.inputs, data.targets)
    feed = Feed(lambda: batch)
    train_step = refs.standard_step(model, optimizer, F.cross_entropy, feed)
    step = feed.step(train_step)
    perf = {"model": model, "optimizer": optimizer, "loss_fn": F.cross_entropy, "repeats": 3, "warmup": 1}
    features = model.head if cnn else model.fc3
    with torch.no_grad():
        captured: list[torch.Tensor] = []
        handle = features.register_forward_pre_hook(lambda m, args: captured.append(args[0]))
        model.eval()
        model(batch[0])
        model.train()
        handle.remove()
    with torch.random.fork_rng(devices=[]):
        train_step()  # mid-training: the legacy hooks' weight is now a non-leaf tensor
    return Program(kind, None, seed, model, optimizer, batch, F.cross_entropy, train_step, refs.evaluate_accuracy,
                   data.task_probe, loader, inputs=batch[0], features=captured[0],
                   loader_case=None if loader is None else (loader, step, {"batches": 4}),
                   perf_case=(step, batch, perf),
                   variants_builder=None if cnn else variants_builder or (lambda: _int8(model, batch[0])))


def _int8(model: nn.Module, inputs: torch.Tensor) -> tuple:
    built, tolerances = variants(model, kinds=("eager", "int8"))
    return built, inputs, {"tolerances": tolerances}


_BUILT = {kind: build(kind, variants_builder=lambda: ((), None, {})) for kind in BUILDERS}  # what applies, cheaply
CASES = [(name, kind) for kind, program in _BUILT.items() for name in sorted(CALLS) if CALLS[name].applies(program)]


def _derived(model: nn.Module) -> dict[str, torch.Tensor]:
    """The legacy hooks' derived attribute of every module that has one."""
    return {n: m.__dict__["weight"] for n, m in model.named_modules() if torch.is_tensor(m.__dict__.get("weight"))}


@pytest.mark.parametrize(("instrument", "kind"), CASES, ids=[f"{i}-{k}" for i, k in CASES])
def test_instrument_on_reparametrized_model(instrument, kind):
    program = build(kind)
    derived = _derived(program.model)
    out = assert_no_trace(lambda: CALLS[instrument](program), watched(program))
    assert isinstance(out, Report), f"{instrument} raised on {kind}: {out!r}"
    assert out.status is not Status.FAIL, f"{instrument} FAILs the correct {kind}: {out.first_divergence}"
    assert out.status is not Status.SKIPPED, f"{instrument} could not run on {kind}: {out.reason}"
    after = _derived(program.model)
    assert after.keys() == derived.keys()
    assert all(after[n] is t for n, t in derived.items()), f"{instrument} left module.weight a different tensor"


def test_every_reparametrization_meets_the_learning_instruments():
    covered = {kind for name, kind in CASES if name == "six_claims"} & {kind for name, kind in CASES if name == "performance_ledger"}
    assert covered == set(BUILDERS)


@pytest.mark.parametrize("kind", ["legacy_spectral_cnn", "legacy_weight_norm_mlp"])
def test_copy_of_a_model_mid_training(kind):
    """``copy.deepcopy`` refuses the legacy hooks' non-leaf weight; the instruments' copy gives the same
    outputs, trains on its own parameters, and leaves the original untouched."""
    program = build(kind)
    model = program.model
    with pytest.raises(RuntimeError, match="deepcopy"):
        copy.deepcopy(model)
    twin = model_copy(model)
    assert all(p is not q for p, q in zip(model.parameters(), twin.parameters()))
    model.eval()
    twin.eval()
    with torch.no_grad():
        assert torch.equal(model(program.batch[0]), twin(program.batch[0]))
    before = [p.detach().clone() for p in model.parameters()]
    twin.train()
    F.cross_entropy(twin(program.batch[0]), program.batch[1]).backward()
    assert all(q.grad is not None for q in twin.parameters())
    assert all(p.grad is None or p.grad is not q.grad for p, q in zip(model.parameters(), twin.parameters()))
    assert all(torch.equal(b, p) for b, p in zip(before, model.parameters()))


@pytest.mark.parametrize("kind", ["legacy_weight_norm_mlp", "parametrized_mlp"])
def test_int8_variant_of_a_reparametrized_model(kind):
    """The int8 variant folds the reparametrizations of its copy first; the user's model keeps its own class,
    parametrizations and hooks, and still runs."""
    program = build(kind)
    model, x = program.model, program.batch[0]
    classes = {n: type(m) for n, m in model.named_modules()}
    model.eval()
    with torch.no_grad():
        expected = model(x)
    built, _ = variants(model, kinds=("int8",))
    assert {n: type(m) for n, m in model.named_modules()} == classes
    with torch.no_grad():
        assert torch.equal(model(x), expected)
        error = (built["int8"](x) - expected).abs().max() / expected.abs().max()
    assert float(error) < 0.05


def test_model_stays_deep_copyable_after_an_instrument_ran_it():
    """Before any training forward the legacy hooks' weight is a leaf and the model deep-copies; an
    instrument that runs the model's forward must leave it so (not with a fresh non-leaf weight)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = legacy_spectral_cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    batch = (torch.randn(8, 1, 12, 12, generator=torch.Generator().manual_seed(0)), torch.arange(8) % 4)
    firstdiv.four_structures(model, optimizer, batch, F.cross_entropy)
    copy.deepcopy(model)


@pytest.mark.quality  # the whole ladder: ten to twenty seconds per model
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("kind", ["legacy_spectral_cnn", "parametrized_mlp"])
def test_diagnose_on_a_reparametrized_model(kind):
    program = build(kind)
    out = assert_no_trace(lambda: firstdiv.diagnose(**program.evidence()), watched(program))
    assert isinstance(out, Report), f"diagnose raised on {kind}: {out!r}"
    assert out.status is not Status.FAIL, out.first_divergence
