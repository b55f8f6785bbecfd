"""The fault catalog: what each fault is, which reference it applies to, where it comes from, and
which instrument must localize it where (the issue 5, 6 and 7 tables, as data the catalog tests
assert). The data-pipeline faults are described by :mod:`firstdiv.zoo.pipeline` itself."""

from __future__ import annotations

from dataclasses import dataclass

from . import pipeline


@dataclass(frozen=True)
class Expect:
    """An instrument must report its first divergence at ``where`` with ``kind``.

    ``where`` is a parameter name, a module path, an attribute path, a ledger link / claim / check
    level name in CAPITALS, ``"vectors"`` (feature_space), a pipeline stage name, a loader phase
    (loader_timing), ``"step"`` (performance_ledger) or ``"<variant>:<module path>"`` (compare_outputs);
    ``kind`` is None where only the link or claim is fixed. ``status`` is "WARN" for a fault the instrument can
    name but not confirm as one (its evidence cannot tell it from a design: a branch that never runs).
    """

    instrument: str
    where: str
    kind: str | None = None
    status: str = "FAIL"


@dataclass(frozen=True)
class Fault:
    """One injectable bug. ``applies_to`` names the references it can be injected into."""

    name: str
    applies_to: tuple[str, ...]
    origin: str  # "deepcrime" (a DeepCrime mutation operator) or "book"
    description: str
    expected: tuple[Expect, ...]

    @property
    def reference(self) -> str:
        """The reference program the catalog injects this fault into (the first of ``applies_to``)."""
        return self.applies_to[0]


def _fault(name: str, on: str, origin: str, description: str, *expected: Expect) -> Fault:
    return Fault(name, (on,), origin, description, expected)


_STEP, _REACH, _FOUR, _SIX, _LEDGER = "step_probe", "reachability", "four_structures", "six_claims", "learning_ledger"
_TRACE, _SHAPE, _FEATURES, _ATTENTION = "tensor_trace", "shape_ledger", "feature_space", "attention_check"

_CATALOG = (
    _fault("missing_zero_grad", "mlp", "book", "train_step never calls optimizer.zero_grad(), so gradients accumulate.",
           Expect(_STEP, "fc1.weight", "step.grad_accumulation")),
    _fault("zero_grad_before_step", "mlp", "book", "optimizer.zero_grad() sits between backward() and step(), so step sees no gradient.",
           Expect(_STEP, "fc1.weight", "step.zero_grad_before_step")),
    _fault("detach", "mlp", "book", "forward calls .detach() on fc1's activation, cutting fc1 off the graph.",
           Expect(_REACH, "fc1.weight", "reachability.detached"), Expect(_LEDGER, "DEPENDENCY")),
    _fault("no_grad_region", "cnn", "book", "the first conv block runs under torch.no_grad() in forward.",
           Expect(_REACH, "conv1.weight", "reachability.no_grad")),
    _fault("integer_cast", "regression", "book", "forward rounds fc1's activation to integer levels (.long()), breaking the graph.",
           Expect(_REACH, "fc1.weight", "reachability.integer_cast")),
    _fault("unused_branch", "mlp", "book", "an auxiliary head `aux` is built but its branch only runs under a flag left False.",
           Expect(_REACH, "aux.weight", "reachability.not_executed", "WARN")),
    _fault("stale_optimizer", "finetune", "book", "the optimizer is built before the head is replaced, so it owns the old head.",
           Expect(_FOUR, "head.weight", "optimizer.stale_parameter"), Expect(_LEDGER, "OPTIMIZER_OWNERSHIP")),
    _fault("optimizer_subset", "mlp", "book", "the optimizer is given only fc2 and fc3 parameters; fc1 never moves.",
           Expect(_FOUR, "fc1.weight", "optimizer.missing_parameter"), Expect(_SIX, "UPDATE")),
    _fault("plain_attribute_tensor", "regression", "book", "an output `scale` is a plain tensor attribute, not an nn.Parameter.",
           Expect(_FOUR, "scale", "structure.unregistered_tensor")),
    _fault("modules_in_list", "transformer", "book", "the transformer blocks are kept in a Python list, so nothing registers them.",
           Expect(_FOUR, "blocks", "structure.unregistered_module")),
    _fault("remove_activation", "mlp", "deepcrime", "the ReLU activations are replaced by identity, leaving an affine model.",
           Expect(_SIX, "REPRESENTATION", "claim.representation.affine", "WARN")),
    _fault("zero_init", "mlp", "deepcrime", "fc1 and fc2 weights and biases are initialized to zero.",
           Expect(_SIX, "COMPUTATION", "claim.computation.zero_init")),
    _fault("symmetric_init", "mlp", "deepcrime", "fc1 and fc2 weights are initialized to one constant, so hidden units stay identical.",
           Expect(_SIX, "COMPUTATION", "claim.computation.symmetric_init")),
    _fault("eval_in_train_mode", "cnn", "book", "eval_fn never calls model.eval(), so BatchNorm evaluates with batch statistics.",
           Expect(_SIX, "EVALUATION", "claim.evaluation.train_mode")),
    _fault("softmax_before_ce", "mlp", "book", "the model ends with softmax and the loss is cross_entropy, which expects logits.",
           Expect(_LEDGER, "OBJECTIVE", "objective.probabilities_as_logits")),
    _fault("sum_reduction", "regression", "book", "the MSE loss sums over the batch of 64 instead of averaging.",
           Expect(_LEDGER, "PARAMETER_UPDATE", "update.diverges")),
    _fault("flipped_loss_sign", "mlp", "book", "loss_fn returns the negated cross-entropy, so training maximizes it.",
           Expect(_LEDGER, "OBJECTIVE", "objective.wrong_sign"), Expect(_SIX, "OBJECTIVE")),
    _fault("empty_mask", "transformer", "book", "an inverted padding test sets every target to ignore_index: the loss is NaN.",
           Expect(_LEDGER, "OBJECTIVE", "objective.empty_mask")),
    _fault("change_labels", "mlp", "deepcrime", "labels are stored through a shifted class mapping; task_probe knows the true rule.",
           Expect(_LEDGER, "TASK", "task.label_mismatch")),
    _fault("target_not_shifted", "transformer", "book", "the language model's targets are its inputs instead of the next tokens.",
           Expect(_LEDGER, "TASK", "task.target_not_shifted")),
    _fault("change_learning_rate", "mlp", "deepcrime", "the learning rate is 1e-7, too small to fit anything in a step budget.",
           Expect(_LEDGER, "CAPABILITY", "capability.cannot_overfit")),
    _fault("remove_bias", "regression", "deepcrime", "a bias-free linear model must fit targets offset by +20.",
           Expect(_LEDGER, "CAPABILITY", "capability.cannot_overfit")),
    _fault("change_loss", "mlp", "deepcrime", "the classifier is trained with MSE between its first logit and the class id.",
           Expect(_LEDGER, "OBJECTIVE", "objective.initial_loss", "WARN")),
)

_SHAPES = (
    _fault("merge_heads_view", "transformer", "book",
           "attention merges its heads with .reshape(B, T, E) straight from (B, H, T, Dh), without the transpose back.",
           Expect(_ATTENTION, "LEVEL_2", "attention.axis_semantics"),
           Expect(_TRACE, "blocks.0.attn", "layout.values_moved", "WARN")),
    _fault("missing_scale", "transformer", "book", "attention scores q @ k^T are not divided by sqrt(head_dim) before the softmax.",
           Expect(_ATTENTION, "LEVEL_4", "attention.reference_mismatch")),
    _fault("leaky_causal_mask", "transformer", "book", "the causal mask is triu(diagonal=2), so every position also sees the next one.",
           Expect(_ATTENTION, "LEVEL_3", "attention.forbidden_weight")),
    _fault("softmax_wrong_axis", "transformer", "book", "the attention softmax runs over the query axis (dim=-2) instead of the keys.",
           Expect(_ATTENTION, "LEVEL_3", "attention.rows_not_normalized")),
    _fault("batch_time_swap", "transformer", "book",
           "the embeddings are transposed to (T, B, D) before the batch-first blocks and back after them.",
           Expect(_TRACE, "blocks.0", "contract.axis_mismatch")),
    _fault("wrong_flatten", "cnn", "book",
           "conv2 is widened to 32 channels (culprit conv2) but the head still takes 16 * 3 * 3 inputs; the forward raises.",
           Expect(_SHAPE, "head", "shape.flatten_mismatch")),
)

#: the data-pipeline faults, as :mod:`firstdiv.zoo.pipeline` describes them (one sentence each); all localized by stage_trace
_PIPELINE = tuple(_fault(name, pipeline.REFERENCE, origin, description.rstrip(".") + ".", Expect("stage_trace", where, kind))
                  for name, (origin, description, where, kind) in pipeline.FAULTS.items())

_FEATURES_FAULTS = (
    _fault("dead_features", "finetune", "book",
           "init code sets the backbone's last bias to -1, so almost every ReLU feature the head sees is zero.",
           Expect(_FEATURES, "vectors", "features.collapse_zero")),
)

_SPEED = (
    _fault("sleeping_getitem", "cnn", "book",
           "the Dataset's __getitem__ decodes each example with a 20 ms pause in the main process, starving the training step.",
           Expect("loader_timing", "read_decode_transform", "loader.starved")),
    _fault("appended_loss", "mlp", "book",
           "train_step appends the loss tensor (not loss.item()) to a history list, keeping every step's graph alive.",
           Expect("performance_ledger", "step", "memory.growth")),
    _fault("recompiling_shapes", "transformer", "book",
           "the compiled language model serves batches of 4 to 12 tokens with dynamic=False: one recompilation per new length.",
           Expect("compile_ledger", "STABLE", "compile.recompiles")),
    _fault("int8_divergence", "regression", "book",
           "a feature recorded in kilometres gives fc1 weights 1000x the rest; per-tensor int8 rounds the others to zero.",
           Expect("compare_outputs", "int8:fc1", "outputs.diverged")),
)

#: fault name -> :class:`Fault`, in the issues' table order
FAULTS: dict[str, Fault] = {fault.name: fault for fault in (*_CATALOG, *_SHAPES, *_PIPELINE, *_FEATURES_FAULTS, *_SPEED)}
