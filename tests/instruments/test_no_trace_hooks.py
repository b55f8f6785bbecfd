"""User hooks during instruments: kept (they are part of the user's computation), put back as the very
objects they were, and reported: after every instrument the user's counting hooks either did not move,
or the report's ``side_effects`` names each hook and exactly how many times it ran."""

from __future__ import annotations

import re
from collections import Counter

import pytest
import torch
from harness import CALLS, Injected, assert_no_trace, failing, watched

import firstdiv
from firstdiv import zoo
from firstdiv.instruments._core.copying import model_copy
from firstdiv.report import Report, Status

#: references with a model, in the order a case is looked for (the first that carries the evidence)
_REFERENCES = ("mlp", "cnn", "regression", "transformer")


def _case(instrument: str) -> str | None:
    return next((ref for ref in _REFERENCES if CALLS[instrument].applies(zoo.build(ref, seed=0))), None)


def _param(instrument: str, reference: str) -> object:
    slow = instrument == "compile_ledger"  # compiles the transformer: about ten seconds
    return pytest.param(instrument, reference, id=f"{instrument}-{reference}",
                        marks=[pytest.mark.quality] if slow else [])


CASES = [_param(name, ref) for name in sorted(CALLS) if (ref := _case(name)) is not None]


class Counted:
    """A user's counting forward hook and full backward hook, on the model's first layer and on the model."""

    def __init__(self, program: zoo.Program) -> None:
        self.counts: Counter[str] = Counter()
        self.layer, module = next(iter(program.model.named_children()))
        self.forward = lambda m, args, out: self.counts.update(["forward"])
        self.backward = lambda m, grad_in, grad_out: self.counts.update(["backward"])
        self.handles = [module.register_forward_hook(self.forward),
                        program.model.register_full_backward_hook(self.backward)]
        self.dicts = [(module._forward_hooks, self.forward), (program.model._backward_hooks, self.backward)]

    def labels(self) -> dict[str, int]:
        return {f"{self.layer} forward hook": self.counts["forward"], "(root) backward hook": self.counts["backward"]}

    def still_registered(self) -> bool:
        """The user's own hook objects, under their own keys."""
        return all(hooks.get(h.id) is fn for (hooks, fn), h in zip(self.dicts, self.handles))

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _assert_reported(out: Report, hooks: Counted, counted: bool = True) -> None:
    for label, n in hooks.labels().items():
        if n and counted:
            assert re.search(rf"(^|\W){re.escape(label)} {n}x\b", out.side_effects), \
                f"{label} ran {n}x but side_effects says: {out.side_effects}"
        elif n:
            assert label in out.side_effects, f"{label} ran {n}x but side_effects says: {out.side_effects}"


@pytest.mark.parametrize(("instrument", "reference"), CASES)
@pytest.mark.filterwarnings("ignore:Full backward hook")
def test_user_hooks_that_ran_are_named_with_their_counts(instrument, reference):
    program = zoo.build(reference, seed=0)
    hooks = Counted(program)
    try:
        out = assert_no_trace(lambda: CALLS[instrument](program), watched(program))
        assert isinstance(out, Report), f"{instrument} raised: {out!r}"
        assert hooks.still_registered()
        _assert_reported(out, hooks, counted=instrument != "compile_ledger")
    finally:
        hooks.remove()


@pytest.mark.filterwarnings("ignore:Full backward hook")
def test_diagnose_names_the_hooks_its_instruments_ran():
    program = zoo.build("mlp", seed=0)
    hooks = Counted(program)
    try:
        out = firstdiv.diagnose(**program.evidence())
        assert sum(hooks.counts.values()) > 10  # the ladder runs the model many times
        assert hooks.still_registered()
        _assert_reported(out, hooks)
    finally:
        hooks.remove()


@pytest.mark.parametrize("calls", [1, 2])
def test_hooks_put_back_when_user_code_raises_half_way(calls):
    program = zoo.build("mlp", seed=0)
    hooks = Counted(program)
    try:
        with failing(program, calls) as broken:
            out = assert_no_trace(lambda: CALLS["learning_ledger"](broken), watched(broken))
        assert isinstance(out, (Report, Injected))
        assert hooks.still_registered()
    finally:
        hooks.remove()


def test_a_hook_that_changes_the_output_stays_part_of_the_computation():
    """Hooks are not removed from copies: a forward hook that zeroes the logits is the user's program, and
    six_claims (which works on copies) finds what it does: no gradient reaches the weights below it (the
    same program without the hook passes every claim)."""
    program = zoo.build("mlp", seed=0)
    handle = program.model.fc3.register_forward_hook(lambda m, args, out: out * 0.0)
    try:
        twin = model_copy(program.model)
        with torch.no_grad():
            assert torch.count_nonzero(twin(program.batch[0])) == 0
        out = firstdiv.six_claims(program.model, program.batch, program.loss_fn, program.optimizer)
        differentiation = next(f for f in out.findings if f.where == "DIFFERENTIATION")
        assert (differentiation.status, differentiation.check) == (Status.WARN, "claim.differentiation.zero_gradient")
        assert re.search(r"fc3 forward hook \d+x", out.side_effects)
    finally:
        handle.remove()


def test_a_stateful_hook_object_is_copied_with_the_model():
    """A hook object (not a function) is deep-copied with a copy, as without firstdiv: its copy's calls
    touch nothing of the user's, so the user's object does not move and is not reported."""

    class Calls:
        def __init__(self) -> None:
            self.n = 0

        def __call__(self, module: object, args: object, out: object) -> None:
            self.n += 1

    program = zoo.build("mlp", seed=0)
    counter = Calls()
    handle = program.model.fc1.register_forward_hook(counter)
    try:
        out = firstdiv.six_claims(program.model, program.batch, program.loss_fn, program.optimizer)
        assert counter.n == 0
        assert "fc1 forward hook" not in out.side_effects
        assert program.model.fc1._forward_hooks[handle.id] is counter
    finally:
        handle.remove()


@pytest.mark.parametrize("instrument", ["reachability", "step_probe", "learning_ledger"])
def test_global_and_gradient_hooks_are_named_with_their_counts(instrument):
    """A global module hook runs for every module (firstdiv's copies too: said so); a gradient hook on a
    parameter runs on the user's tensor only (a deep copy drops tensor hooks)."""
    from torch.nn.modules.module import register_module_forward_hook

    program = zoo.build("mlp", seed=0)
    counts: Counter[str] = Counter()
    handles = [register_module_forward_hook(lambda m, args, out: counts.update(["global"])),
               program.model.fc1.weight.register_hook(lambda grad: counts.update(["grad"]))]
    try:
        out = assert_no_trace(lambda: CALLS[instrument](program), watched(program))
    finally:
        for handle in handles:
            handle.remove()
    assert counts["global"] > 0
    assert re.search(rf"global forward hook {counts['global']}x\b", out.side_effects), out.side_effects
    assert "global hooks run for every module" in out.side_effects
    assert counts["grad"] > 0 or instrument == "learning_ledger"  # step_probe and reachability backward on the user's
    if counts["grad"]:
        assert re.search(rf"parameter fc1\.weight gradient hook {counts['grad']}x\b", out.side_effects), out.side_effects
