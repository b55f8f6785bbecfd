"""The fault catalog: clean references learn, every fault builds and shows its mechanism (and the clean
reference does not), builds are deterministic and leave the global RNG alone, the catalog matches the
issue 5 table, and bad names are clear errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from firstdiv import zoo
from firstdiv.errors import InvalidArgument

SEEDS = (0, 1, 2)

# The issue 5 table, verbatim: fault | reference | instrument -> where (kind); ...
SPEC_TABLE = """
missing_zero_grad | mlp | step_probe -> fc1.weight (step.grad_accumulation)
zero_grad_before_step | mlp | step_probe -> fc1.weight (step.zero_grad_before_step)
detach | mlp | reachability -> fc1.weight (reachability.detached); learning_ledger -> DEPENDENCY
no_grad_region | cnn | reachability -> conv1.weight (reachability.no_grad)
integer_cast | regression | reachability -> fc1.weight (reachability.integer_cast)
unused_branch | mlp | reachability -> aux.weight (reachability.not_executed)
stale_optimizer | finetune | four_structures -> head.weight (optimizer.stale_parameter); learning_ledger -> OPTIMIZER_OWNERSHIP
optimizer_subset | mlp | four_structures -> fc1.weight (optimizer.missing_parameter); six_claims -> UPDATE
plain_attribute_tensor | regression | four_structures -> scale (structure.unregistered_tensor)
modules_in_list | transformer | four_structures -> blocks (structure.unregistered_module)
remove_activation | mlp | six_claims -> REPRESENTATION (claim.representation.affine)
zero_init | mlp | six_claims -> COMPUTATION (claim.computation.zero_init)
symmetric_init | mlp | six_claims -> COMPUTATION (claim.computation.symmetric_init)
eval_in_train_mode | cnn | six_claims -> EVALUATION (claim.evaluation.train_mode)
softmax_before_ce | mlp | learning_ledger -> OBJECTIVE (objective.probabilities_as_logits)
sum_reduction | regression | learning_ledger -> OBJECTIVE (objective.sum_reduction)
flipped_loss_sign | mlp | learning_ledger -> OBJECTIVE (objective.wrong_sign); six_claims -> OBJECTIVE
empty_mask | transformer | learning_ledger -> OBJECTIVE (objective.empty_mask)
change_labels | mlp | learning_ledger -> TASK (task.label_mismatch)
target_not_shifted | transformer | learning_ledger -> TASK (task.target_not_shifted)
change_learning_rate | mlp | learning_ledger -> CAPABILITY (capability.cannot_overfit)
remove_bias | regression | learning_ledger -> CAPABILITY (capability.cannot_overfit)
change_loss | mlp | learning_ledger -> OBJECTIVE (objective.initial_loss)
"""
DEEPCRIME = {"remove_activation", "change_learning_rate", "change_loss", "zero_init", "symmetric_init",
             "remove_bias", "change_labels"}
LINKS_AND_CLAIMS = {"TASK", "OBJECTIVE", "DEPENDENCY", "GRADIENT", "OPTIMIZER_OWNERSHIP", "PARAMETER_UPDATE",
                    "CAPABILITY", "REPRESENTATION", "COMPUTATION", "DIFFERENTIATION", "UPDATE", "EVALUATION"}
ALL_PROGRAMS = [(ref, None) for ref in zoo.REFERENCES] + [(f.reference, name) for name, f in zoo.FAULTS.items()]


def _parse_expect(text: str) -> zoo.Expect:
    instrument, rest = (part.strip() for part in text.split("->"))
    where, _, kind = rest.partition(" (")
    return zoo.Expect(instrument, where, kind.rstrip(")") or None)


def test_catalog_matches_the_issue_table():
    rows = [line.split(" | ") for line in SPEC_TABLE.strip().splitlines()]
    assert list(zoo.FAULTS) == [name for name, _, _ in rows]
    for name, reference, expected in rows:
        fault = zoo.FAULTS[name]
        assert fault.name == name and fault.applies_to == (reference,) and fault.reference == reference
        assert fault.expected == tuple(_parse_expect(part) for part in expected.split("; "))
        assert fault.origin == ("deepcrime" if name in DEEPCRIME else "book")
        assert fault.description.endswith(".") and "\n" not in fault.description
    assert zoo.REFERENCES == ("mlp", "cnn", "finetune", "transformer", "regression")


@pytest.mark.parametrize("name", list(zoo.FAULTS))
def test_expected_where_names_exist_in_the_faulty_program(name):
    fault = zoo.FAULTS[name]
    model = zoo.build(fault.reference, fault=name, seed=0).model
    params = dict(model.named_parameters())
    for expect in fault.expected:
        if expect.where.isupper():
            assert expect.where in LINKS_AND_CLAIMS
        elif expect.where not in params:  # an attribute path Python reaches but the registry does not (scale, blocks)
            obj = model
            for part in expect.where.split("."):
                obj = getattr(obj, part)
            assert expect.where not in dict(model.named_modules())


# ---- clean references -----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("reference", zoo.REFERENCES)
def test_clean_reference_learns(reference, seed):
    program = zoo.build(reference, seed=seed)
    losses = program.train(steps=60)
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < 0.7 * losses[0], f"{reference} seed {seed}: {losses[0]:.4f} -> {losses[-1]:.4f}"


@pytest.mark.parametrize("reference", zoo.REFERENCES)
def test_clean_reference_evidence_and_task_probe(reference):
    program = zoo.build(reference, seed=1)
    evidence = program.evidence()
    assert set(evidence) == {"model", "batch", "loss_fn", "optimizer", "train_step", "eval_fn", "task_probe"} | (
        {"loader"} if reference == "cnn" else set())
    inputs, targets = program.batch
    assert torch.equal(program.task_probe(inputs), targets)  # the labelling rule agrees with every label
    loss = program.loss_fn(program.model(inputs), targets)
    assert loss.dim() == 0 and math.isfinite(loss.item())
    assert isinstance(program.train_step(), float)


@pytest.mark.parametrize("reference", zoo.REFERENCES)
def test_clean_eval_fn_runs_in_eval_mode_and_restores_the_mode(reference):
    program = zoo.build(reference, seed=0)
    for training in (True, False):
        modes = _modes_during_eval(program, training)
        assert modes and not any(modes)
        assert all(m.training == training for m in program.model.modules())


def _modes_during_eval(program: zoo.Program, training: bool) -> list[bool]:
    """The ``training`` flag of every module as eval_fn's forward reaches it."""
    seen: list[bool] = []
    hooks = [m.register_forward_pre_hook(lambda mod, args: seen.append(mod.training)) for m in program.model.modules()]
    program.model.train(training)
    try:
        program.eval_fn(program.model, program.batch)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def test_cnn_has_batchnorm_and_a_shuffling_loader():
    program = zoo.build("cnn", seed=0)
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in program.model.modules())
    inputs, _ = next(iter(program.loader))
    assert inputs.shape == (32, 1, 12, 12) and program.batch[0].shape == inputs.shape
    assert not torch.equal(inputs, program.batch[0])  # shuffled, not the dataset's first 32


def test_transformer_targets_are_next_tokens_and_the_mask_is_causal():
    program = zoo.build("transformer", seed=0)
    inputs, targets = program.batch
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    model = program.model
    model.eval()
    changed = inputs.clone()
    changed[:, -1] = (changed[:, -1] % 15) + 1  # change only the last token
    with torch.no_grad():
        assert torch.allclose(model(inputs)[:, :-1], model(changed)[:, :-1], atol=1e-5)
    assert isinstance(model.blocks, torch.nn.ModuleList) and len(model.blocks) == 2


# ---- faults: each shows its mechanism, the clean reference does not ------------------------------

def _param(program: zoo.Program, name: str) -> torch.nn.Parameter | None:
    return dict(program.model.named_parameters()).get(name)


def _accumulates(p: zoo.Program) -> bool:
    p.train_step()
    weight = p.model.fc1.weight
    first = weight.grad.clone()
    inputs, targets = p.batch
    fresh, = torch.autograd.grad(p.loss_fn(p.model(inputs), targets), weight)
    p.train_step()
    return torch.allclose(weight.grad, first + fresh, atol=1e-6)


def _nothing_moves(p: zoo.Program) -> bool:
    before = [q.detach().clone() for q in p.model.parameters()]
    p.train_step()
    return all(torch.equal(b, q) for b, q in zip(before, p.model.parameters()))


def _no_grad_for(name: str):
    def shows(p: zoo.Program) -> bool:
        p.train_step()
        param = _param(p, name)
        return param is not None and param.grad is None and any(q.grad is not None for q in p.model.parameters())
    return shows


def _stale_head(p: zoo.Program) -> bool:
    owned = [q for group in p.optimizer.param_groups for q in group["params"]]
    in_model = {id(q) for q in p.model.parameters()}
    stale = [q for q in owned if id(q) not in in_model]
    head = p.model.head.weight
    return all(q is not head for q in owned) and [q.shape for q in stale] == [head.shape, p.model.head.bias.shape]


def _not_owned(name: str):
    def shows(p: zoo.Program) -> bool:
        owned = {id(q) for group in p.optimizer.param_groups for q in group["params"]}
        return id(_param(p, name)) not in owned
    return shows


def _plain_scale(p: zoo.Program) -> bool:
    scale = vars(p.model).get("scale")
    if not isinstance(scale, torch.Tensor) or "scale" in dict(p.model.named_parameters()):
        return False
    p.train_step()
    return scale.grad is not None and scale.grad.abs().item() > 0 and scale.item() == 1.0  # gradient, no update


def _blocks_in_list(p: zoo.Program) -> bool:
    blocks = p.model.blocks
    owned = {id(q) for group in p.optimizer.param_groups for q in group["params"]}
    p.train_step()
    block_params = [q for block in blocks for q in block.parameters()]
    return (isinstance(blocks, list) and not any(n.startswith("blocks.") for n, _ in p.model.named_parameters())
            and all(q.grad is not None and id(q) not in owned for q in block_params))


def _affine(p: zoo.Program) -> bool:
    inputs = p.batch[0]
    a, b = inputs[:32], inputs[32:]
    with torch.no_grad():
        mixed, separate = p.model(0.3 * a + 0.7 * b), 0.3 * p.model(a) + 0.7 * p.model(b)
    return torch.allclose(mixed, separate, atol=1e-5)


def _zero_hidden(p: zoo.Program) -> bool:
    p.train(steps=3)
    return all(layer.weight.abs().max().item() == 0 for layer in (p.model.fc1, p.model.fc2))


def _identical_units(p: zoo.Program) -> bool:
    p.train(steps=5)
    weight = p.model.fc1.weight
    return (weight - weight[:1]).abs().max().item() < 1e-6


def _eval_in_train_mode(p: zoo.Program) -> bool:
    return any(_modes_during_eval(p, training=True))


def _outputs_are_probabilities(p: zoo.Program) -> bool:
    with torch.no_grad():
        outputs = p.model(p.batch[0])
    return bool((outputs >= 0).all()) and torch.allclose(outputs.sum(dim=1), torch.ones(len(outputs)))


def _loss_is_batch_sum(p: zoo.Program) -> bool:
    inputs, targets = p.batch
    outputs = p.model(inputs)
    return math.isclose(p.loss_fn(outputs, targets).item(), len(targets) * F.mse_loss(outputs, targets).item(), rel_tol=1e-4)


def _negative_and_falling(p: zoo.Program) -> bool:
    losses = p.train(steps=5)
    return losses[0] < 0 and losses[-1] < losses[0]


def _nan_loss_nothing_supervised(p: zoo.Program) -> bool:
    return bool((p.batch[1] == -100).all()) and math.isnan(p.train_step())


def _labels_disagree_with_rule(p: zoo.Program) -> bool:
    inputs, targets = p.batch
    return bool((p.task_probe(inputs) != targets).all())


def _targets_are_inputs(p: zoo.Program) -> bool:
    return torch.equal(p.batch[0], p.batch[1])


def _loss_flat(p: zoo.Program) -> bool:
    losses = p.train(steps=60)
    return losses[-1] > 0.99 * losses[0]


def _cannot_fit_offset(p: zoo.Program) -> bool:
    losses = p.train(steps=60)
    return min(losses) > 100 and all(getattr(m, "bias", 0) is None for m in p.model.modules() if isinstance(m, torch.nn.Linear))


def _initial_loss_far_from_ln_k(p: zoo.Program) -> bool:
    return abs(p.train_step() - math.log(4)) > 0.5 * math.log(4)


SYMPTOMS = {
    "missing_zero_grad": _accumulates,
    "zero_grad_before_step": _nothing_moves,
    "detach": _no_grad_for("fc1.weight"),
    "no_grad_region": _no_grad_for("conv1.weight"),
    "integer_cast": _no_grad_for("fc1.weight"),
    "unused_branch": _no_grad_for("aux.weight"),
    "stale_optimizer": _stale_head,
    "optimizer_subset": _not_owned("fc1.weight"),
    "plain_attribute_tensor": _plain_scale,
    "modules_in_list": _blocks_in_list,
    "remove_activation": _affine,
    "zero_init": _zero_hidden,
    "symmetric_init": _identical_units,
    "eval_in_train_mode": _eval_in_train_mode,
    "softmax_before_ce": _outputs_are_probabilities,
    "sum_reduction": _loss_is_batch_sum,
    "flipped_loss_sign": _negative_and_falling,
    "empty_mask": _nan_loss_nothing_supervised,
    "change_labels": _labels_disagree_with_rule,
    "target_not_shifted": _targets_are_inputs,
    "change_learning_rate": _loss_flat,
    "remove_bias": _cannot_fit_offset,
    "change_loss": _initial_loss_far_from_ln_k,
}


def test_every_fault_has_a_symptom_check():
    assert set(SYMPTOMS) == set(zoo.FAULTS)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", list(zoo.FAULTS))
def test_fault_shows_its_mechanism_and_the_clean_reference_does_not(name, seed):
    reference = zoo.FAULTS[name].reference
    faulty = zoo.build(reference, fault=name, seed=seed)
    assert faulty.fault == name and faulty.reference == reference
    assert SYMPTOMS[name](faulty), f"{name} seed {seed}: mechanism not visible"
    assert not SYMPTOMS[name](zoo.build(reference, seed=seed)), f"clean {reference} seed {seed} shows {name}"
    faulty.train_step()  # still runs after the check


# ---- determinism, RNG, errors ---------------------------------------------------------------------

def _fingerprint(program: zoo.Program, steps: int = 2) -> tuple:
    state = {k: v.clone() for k, v in program.model.state_dict().items()}
    batch = tuple(t.clone() for t in program.batch)
    return state, batch, [float.hex(loss) for loss in program.train(steps)]


@pytest.mark.parametrize(("reference", "fault"), ALL_PROGRAMS)
def test_build_is_deterministic_and_leaves_the_global_rng_alone(reference, fault):
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    first = zoo.build(reference, fault=fault, seed=3)
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(99)  # a different global state must not change the program
    second = zoo.build(reference, fault=fault, seed=3)
    (state1, batch1, losses1), (state2, batch2, losses2) = _fingerprint(first), _fingerprint(second)
    assert state1.keys() == state2.keys() and all(torch.equal(state1[k], state2[k]) for k in state1)
    assert all(torch.equal(a, b) for a, b in zip(batch1, batch2)) and losses1 == losses2


@pytest.mark.parametrize("reference", zoo.REFERENCES)
def test_different_seeds_give_different_programs(reference):
    a, b = zoo.build(reference, seed=0), zoo.build(reference, seed=1)
    assert not torch.equal(a.batch[0], b.batch[0])
    assert not all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))


@pytest.mark.parametrize(("args", "needle"), [
    (("resnet",), "mlp, cnn, finetune, transformer, regression"),
    (("mlp", "nope"), "missing_zero_grad, zero_grad_before_step"),
    (("cnn", "detach"), "faults for cnn: no_grad_region, eval_in_train_mode"),
    ((["mlp"],), "but got ['mlp']"),
    (("mlp", None, -1), "non-negative int"),
    (("mlp", None, True), "non-negative int"),
])
def test_bad_names_are_one_line_invalid_argument(args, needle):
    with pytest.raises(InvalidArgument) as info:
        zoo.build(*args)
    assert needle in str(info.value) and "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_train_rejects_bad_steps_and_repr_is_short():
    program = zoo.build("mlp", fault="detach", seed=0)
    with pytest.raises(InvalidArgument, match="steps"):
        program.train(steps=-1)
    assert program.train(0) == []
    assert repr(program) == "Program('mlp', fault='detach', seed=0)"
