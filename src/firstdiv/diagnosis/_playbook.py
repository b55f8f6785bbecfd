"""The worksheet's playbook: for each kind of first divergence (by its most specific known prefix),
the hypotheses consistent with it, the experiment that tells them apart, and what MUST CHANGE and
MUST NOT CHANGE if the diagnosis is right. Data, read by :mod:`.worksheet`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def prefixes(kind: str) -> list[str]:
    parts = kind.split(".")
    return [".".join(parts[:n]) for n in range(len(parts), 0, -1)]


@dataclass(frozen=True)
class Play:
    """What the worksheet proposes for one kind of divergence; ``{where}`` stands for the divergence's place."""

    hypotheses: tuple[str, ...]
    experiment: str
    must_change: tuple[str, ...]
    must_not_change: tuple[str, ...]

    def at(self, where: str) -> dict[str, Any]:
        def fill(text: str) -> str:
            return text.replace("{where}", where)
        return {"hypotheses": [fill(h) for h in self.hypotheses], "distinguishing_experiment": fill(self.experiment),
                "must_change": [fill(m) for m in self.must_change], "must_not_change": [fill(m) for m in self.must_not_change]}


_NONE_OR_ZERO = ("set {where}.grad = None, run one backward pass on the fixed batch, and read {where}.grad: None means "
                 "no dependency path was recorded (A); a zero tensor means the path exists and its derivative is zero (B)")
_PATH_KEEPS = ("the loss value of the forward on the fixed batch (cutting or restoring a path does not change values)",
               "the gradients of the parameters that were already reached")
_NOT_OWNED_NOR_MOVED = ("check whether id({where}) is in any optimizer param group and what that group's lr is, then take "
                        "one controlled step with a nonzero gradient: not owned -> ownership (A/C); owned with lr > 0 and "
                        "still unmoved -> the step itself (B)")

_PLAYS: dict[str, Play] = {
    # -- tensor facts -------------------------------------------------------------------------------------------
    "facts.nonfinite_loss": Play(
        ("no supervised element: every target is ignore_index or the mask is empty, so the mean divides 0 by 0",
         "the forward overflows: non-finite inputs or parameters, or logits too large for the dtype",
         "the loss takes log of 0: probabilities (not logits) or an unclamped log inside loss_fn"),
        "count the supervised elements of the fixed batch (targets != ignore_index, mask.sum()) and check torch.isfinite on "
        "the inputs, the parameters and the outputs of the same forward: zero supervised elements -> A; non-finite outputs "
        "from finite inputs and parameters -> B; finite outputs and a non-finite loss -> C",
        ("the loss on the fixed batch is finite", "the supervised-element count of the batch is > 0"),
        ("the model's outputs on the fixed batch", "the targets of the elements that were supervised")),
    # -- known-sample contract (stage_trace) --------------------------------------------------------------------
    "stage.structure": Play(
        ("the stage reshapes/views where it meant to permute (HWC -> CHW by .reshape): same shape, moved values",
         "the stage permutes in the wrong order, or squeezes/unsqueezes an axis it did not name"),
        "run stage {where} alone on a torch.arange sample of the same shape: a permutation keeps every value and only moves "
        "whole axes (A fails this), a wrong permutation order keeps the values but puts a different axis first (B)",
        ("stage {where}'s output is an axis permutation of its input on the known sample",),
        ("the output shape of stage {where}", "every earlier stage's output on the known sample (byte-identical)")),
    "stage.numeric": Play(
        ("the stage rescales values that were already rescaled (normalize or /255 twice)",
         "the stage reads the dtype wrongly (uint8 treated as float in [0, 1], or the reverse)"),
        "print min/max/mean of the known sample before and after stage {where}: twice-normalized values have mean ~ -mean/std "
        "of the statistics (A); a dtype mix-up shows a range off by 255 (B)",
        ("the known sample's value range after stage {where} matches the declared range",),
        ("the shapes and dtypes after every stage", "the earlier stages' outputs")),
    "stage.semantics": Play(
        ("channels are read in the file's order (BGR) but used as RGB", "the label mapping or class ids changed at this stage"),
        "feed a sample whose meaning is known by hand (a pure red patch, a known label) through stage {where} and inspect "
        "the channel that holds red and the label that comes out",
        ("the known red patch is red (channel 0) after stage {where}",),
        ("the tensor's shape, dtype and range after stage {where}",)),
    "stage.relationships": Play(
        ("an augmentation transforms the image but not its mask/label/boxes",
         "two keys of the sample are transformed with different random draws"),
        "run stage {where} under a fixed seed on a sample whose mask equals a known region of the image, and compare the "
        "region the mask marks with where that region ended up in the image",
        ("after stage {where} the mask still marks the same pixels as the image region it labels",),
        ("the image output of stage {where} for the same seed",)),
    "stage.provenance": Play(
        ("normalization statistics were fitted on the validation (or test) split",
         "a fitted artifact (tokenizer, statistics, vocabulary) comes from a different version of the data"),
        "record where stage {where}'s fitted values came from (split name, data version) and recompute them on the training "
        "split: different values -> A/B",
        ("stage {where}'s fitted statistics come from the training split",),
        ("the pipeline's output shapes and dtypes", "the validation examples themselves")),
    "stage.raised": Play(
        ("the stage receives a sample of a different structure than it was written for",
         "the stage has a bug independent of its input"),
        "call stage {where} directly on the sample the previous stage returned, printing that sample's keys, shapes and dtypes",
        ("stage {where} runs on the known sample",), ("the earlier stages' outputs",)),
    # -- ownership (four_structures) ------------------------------------------------------------------------------
    "optimizer.stale_parameter": Play(
        ("the head (the module holding {where}) was replaced after the optimizer was built",
         "the parameters were re-created by .to()/re-assignment into new objects after the optimizer was built",
         "the optimizer was built from a different model instance (a copy, or an earlier build)"),
        "record id() of {where}'s module and of {where} right after building the optimizer and again just before the first "
        "step: the module's id changed -> A; same module, new parameter object -> B; the ids never matched, even right after "
        "construction -> C",
        ("{where} moves after one optimizer step", "the optimizer owns {where} (its id is in a param group)"),
        ("the update of the parameters the optimizer already owned (e.g. the backbone) over one step",
         "the loss value of the forward on the fixed batch")),
    "optimizer.missing_parameter": Play(
        ("the optimizer was given a subset of the parameters (a list of some modules' parameters)",
         "{where} was added to the model after the optimizer was built",
         "parameters were filtered by requires_grad when the optimizer was built, while {where} was frozen"),
        "compare the ids in optimizer.param_groups with model.named_parameters() right after the optimizer is built and "
        "again before the first step: absent at construction -> A or C (C if {where}.requires_grad was False then); present "
        "then and absent now -> B",
        ("the optimizer owns {where}", "{where} moves after one optimizer step"),
        ("the other parameters' updates over one step", "the loss value of the forward on the fixed batch")),
    "structure.unregistered_tensor": Play(
        ("{where} is a plain tensor attribute, not an nn.Parameter or a registered buffer",
         "{where} is re-created inside forward on every call"),
        "check '{where}' in dict(model.named_parameters()) | dict(model.named_buffers()) and whether id(model.{where}) is the "
        "same before and after one forward: never registered and stable -> A; a new object per call -> B",
        ("{where} appears in named_parameters() (or named_buffers()) and state_dict()",
         "model.to(...) moves {where}; the optimizer owns it if it is trainable"),
        ("the forward output on the fixed batch before any step",)),
    "structure.unregistered_module": Play(
        ("the modules under {where} are kept in a plain Python list/dict, not nn.ModuleList/nn.ModuleDict",
         "the modules are attached in a way that bypasses nn.Module.__setattr__ (object.__setattr__, a property)"),
        "compare the parameters reachable through model.{where} with model.parameters(): none registered -> A or B; then "
        "type(model.{where}) tells which",
        ("the parameters of {where} appear in model.parameters(), state_dict() and the optimizer",),
        ("the forward output on the fixed batch", "the parameter values of {where} (wrapping must not re-initialize them)")),
    "structure": Play(
        ("an object the failing operation needs is missing from one of the four structures (Python, registered, autograd, "
         + "optimizer)", "the object is in the structure but as a different identity (a copy)"),
        "for {where}, list membership in each structure by id(): the first structure that lacks it is the boundary",
        ("{where} is present, by identity, in every structure the failing operation traverses",),
        ("the forward output on the fixed batch",)),
    "optimizer": Play(
        ("the optimizer's param groups do not match the model's parameters by identity",
         "the optimizer was built before the model reached its final form"),
        _NOT_OWNED_NOR_MOVED,
        ("the optimizer owns exactly the model's trainable parameters",), ("the loss value of the forward on the fixed batch",)),
    # -- graph (reachability) ---------------------------------------------------------------------------------------
    "reachability.detached": Play(
        ("the forward calls .detach() (or uses .data) on an activation upstream of the loss",
         "the activation leaves the graph through numpy/Python numbers and comes back as a new tensor",
         "the path exists but its local derivative is zero"),
        _NONE_OR_ZERO + "; if None, print grad_fn of the boundary module's output: None there and below -> A or B",
        ("{where}.grad is a tensor (not None) after one backward pass", "reachability reaches {where}"),
        _PATH_KEEPS),
    "reachability.no_grad": Play(
        ("part of the forward runs under torch.no_grad()/inference_mode()", "a submodule's forward is decorated with @torch.no_grad",
         "grad mode was switched off with torch.set_grad_enabled(False) and not restored"),
        "register a forward pre-hook on the boundary module that records torch.is_grad_enabled(), run one forward: False "
        "inside only that module -> A or B (a decorator shows in the source), False everywhere -> C",
        ("{where}.grad is a tensor after one backward pass", "grad mode is on inside the boundary module"),
        _PATH_KEEPS),
    "reachability.integer_cast": Play(
        ("the forward casts an activation to an integer dtype (.long(), .int(), argmax, round + cast)",
         "a quantization/bucketing step without a straight-through estimator"),
        "print the dtype of every intermediate output on the path (tensor_trace ledger) and find the first integer dtype",
        ("{where}.grad is a tensor after one backward pass",), _PATH_KEEPS),
    "reachability.not_executed": Play(
        ("the branch that calls the module of {where} sits behind a flag that is False", "the module is built but never called in forward",
         "control flow depends on the input or on train/eval mode"),
        "count calls with a forward hook on the module of {where} over one forward in train mode and one in eval mode, "
        "with the flag printed: zero calls in both -> A or B; calls in one mode only -> C",
        ("the module of {where} runs in the forward that computes the loss, and {where}.grad is a tensor",),
        ("the outputs of the modules that already ran",)),
    "reachability.unused": Play(
        ("the module runs but its forward ignores {where} (a functional call with other weights)",
         "{where} is replaced by another tensor inside forward"),
        _NONE_OR_ZERO, ("{where}.grad is a tensor after one backward pass",), _PATH_KEEPS),
    "reachability.zero_gradient": Play(
        ("the path exists but the local derivative is zero: dead ReLUs (all pre-activations negative)",
         "zero-initialized weights downstream multiply the gradient by zero",
         "a mask or ignore_index removes every element that depends on {where}"),
        "keep the batch and read the pre-activations after {where}'s module and the downstream weights: all pre-activations "
        "<= 0 -> A; downstream weights all zero -> B; neither -> count the supervised elements (C)",
        ("{where}.grad has a nonzero norm after one backward pass",),
        ("the graph path (reachability keeps reaching {where})", "the loss value on the fixed batch")),
    "reachability": Play(
        ("the dependency path from the loss to {where} is cut in the forward", "the path exists but its derivative is zero"),
        _NONE_OR_ZERO, ("{where}.grad is a nonzero tensor after one backward pass",), _PATH_KEEPS),
    "dependency": Play(
        ("the forward cuts the path to the unreachable parameters (detach, no_grad, integer cast)",
         "the module holding them never runs"),
        "run firstdiv.reachability(model, batch, loss_fn): it names the parameter, the module boundary and the cause",
        ("the loss depends on every trainable parameter",), _PATH_KEEPS),
    # -- controlled one-step probe (step_probe) --------------------------------------------------------------------------
    "step.grad_accumulation": Play(
        ("train_step never calls optimizer.zero_grad()/model.zero_grad()",
         "zero_grad is called on a different optimizer or model than the one that steps",
         "gradient accumulation is intended but the optimizer steps on every micro-batch"),
        "run train_step twice on the same fixed batch from .grad = None and compare {where}.grad after the second backward with "
        "one backward's gradient: 2x -> nothing cleared it (A, or B if a zero_grad call exists in the code); equal -> cleared",
        ("{where}.grad at step 2 equals one backward's gradient, not the sum of two",),
        ("the loss and the update of the first step",)),
    "step.zero_grad_before_step": Play(
        ("optimizer.zero_grad() sits between loss.backward() and optimizer.step()",
         "a hook or callback clears gradients before the step"),
        "read {where}.grad immediately before optimizer.step() inside train_step: None or zero there -> something between "
        "backward and step cleared it; then search that span for zero_grad (A) or registered hooks (B)",
        ("{where}.grad is nonzero when optimizer.step() runs, and {where} moves",),
        ("the loss value of each step's forward",)),
    "step.not_updated": Play(
        ("the optimizer does not own {where} (stale or missing parameter)", "the learning rate of {where}'s group is 0",
         "the step is skipped (an AMP GradScaler found inf, or step() is never called)"),
        _NOT_OWNED_NOR_MOVED, ("{where} moves after one step with a nonzero gradient",),
        ("{where}'s gradient on the fixed batch", "the loss value of the forward")),
    "step.update_rule": Play(
        ("the optimizer has momentum, weight decay or nesterov enabled", "a scheduler or another group changed {where}'s lr",
         "maximize=True or a custom step rule"),
        "take one step on a copy with plain SGD(lr) and one with the user's optimizer, same gradient: the plain step matches "
        "-lr * grad -> the optimizer's configuration (A/C); neither matches -> the lr actually used (B)",
        ("delta({where}) == -lr * grad({where}) under a plain SGD step",), ("{where}'s gradient on the fixed batch",)),
    "step.no_gradient": Play(
        ("the dependency path from the loss to {where} is cut in the forward", "the module holding {where} never runs"),
        _NONE_OR_ZERO, ("{where}.grad is a tensor after one backward pass",), _PATH_KEEPS),
    "step.zero_gradient": Play(
        ("dead units: every pre-activation downstream of {where} is negative", "zero-initialized weights downstream of {where}"),
        _NONE_OR_ZERO + "; then read the downstream weights and pre-activations",
        ("{where}.grad has a nonzero norm after one backward pass",), _PATH_KEEPS),
    "step.nonfinite_loss": Play(
        ("no supervised element (an empty mask) makes a mean of nothing", "the forward overflows (inputs, parameters, dtype)",
         "the learning rate blows the parameters up within a few steps"),
        "check torch.isfinite on the inputs, parameters and outputs of the first forward, and count supervised elements: "
        "non-finite at step 1 -> A or B; finite at step 1 and non-finite later -> C",
        ("the loss and gradients are finite on the fixed batch",), ("the model's outputs on the fixed batch",)),
    "step": Play(
        ("the training step does not do forward, backward, update and clearing in the intended order",
         "train_step steps a different model or optimizer than the one given"),
        "print, inside train_step, id() of the model and optimizer it uses and the order of zero_grad/backward/step calls",
        ("one train_step call does exactly one forward, one backward, one update of {where}",), ("the loss value of the forward",)),
    # -- tiny-batch capability (learning_ledger, six_claims) ----------------------------------------------------------------
    "task.label_mismatch": Play(
        ("the targets go through a shifted or permuted class mapping", "inputs and targets were shuffled separately",
         "the task probe encodes a different rule than the labels (the probe is wrong)"),
        "tabulate task_probe(inputs) against the stored targets on the fixed batch: a constant offset or a fixed permutation "
        "-> A; no structure -> B; agreement on hand-checked examples decides between the data and the probe (C)",
        ("the stored targets agree with the task probe on every example of the batch",),
        ("the inputs of the batch", "the model and the loss")),
    "task.label_out_of_range": Play(
        ("class ids start at 1 (or use a sentinel) while the model has K outputs indexed from 0",
         "the model's output width is smaller than the number of classes"),
        "print targets.min(), targets.max() and the output width K: max == K -> off by one (A); more distinct ids than K -> B",
        ("every target lies in [0, K) or equals ignore_index",), ("the inputs", "the model's output width if it is right")),
    "task.target_not_shifted": Play(
        ("the language model's targets are its inputs (the shift was forgotten)",
         "the shift is done by the loss but the data already returns the inputs as targets"),
        "compare targets[:, :-1] with inputs[:, 1:] and with inputs[:, :-1] on the fixed batch: equal to the inputs -> not "
        "shifted; then look for the shift in the data code (A) or the loss code (B)",
        ("targets[:, t] == inputs[:, t + 1] for every position",), ("the inputs", "the vocabulary size")),
    "task.target_shifted_twice": Play(
        ("the data shifts the targets and the loss shifts them again", "the collate function and the dataset both shift"),
        "compare targets with inputs shifted by 1 and by 2: equal at 2 -> shifted twice; then find which two places shift",
        ("targets[:, t] == inputs[:, t + 1] for every position",), ("the inputs",)),
    "task": Play(
        ("the targets no longer describe the inputs (mapping, alignment, shift)", "the task probe is wrong"),
        "compare the task probe with the targets on hand-checked examples", ("targets agree with the task rule",), ("the inputs",)),
    "objective.probabilities_as_logits": Play(
        ("the model ends in softmax and the loss is cross_entropy, which applies log_softmax again",
         "sigmoid outputs go into BCEWithLogitsLoss", "log_softmax outputs go into a loss that expects raw logits"),
        "check on the fixed batch whether the outputs are non-negative and each row sums to 1 (A), lie in [0, 1] per element "
        "(B) or are <= 0 with logsumexp 0 (C)",
        ("the outputs reaching the loss are raw logits (rows do not sum to 1)",
         "the initial loss is close to ln K for a fresh initialization"),
        ("the predictions (argmax: softmax is monotonic)", "the targets")),
    "objective.initial_loss": Play(
        ("the loss is not the one the task needs (MSE on class ids instead of cross_entropy)",
         "the initialization makes the logits large (scale or temperature)",
         "the outputs and targets are paired wrongly (axes or broadcasting)"),
        "compute the initial cross_entropy on a fresh initialization and one example's loss by hand: the library matches by "
        "hand but is far from ln K -> B; the loss_fn is not cross_entropy -> A; shapes differ -> C",
        ("the initial loss is close to ln K",), ("the model's outputs on the fixed batch",)),
    "objective.sum_reduction": Play(
        ("the loss uses reduction='sum' where the learning rate assumes a mean", "the loss sums per-example losses by hand"),
        "evaluate the loss on the full fixed batch and on its first half: the ratio is ~2 for a sum, ~1 for a mean",
        ("the loss does not scale with the batch size (full/half ratio ~1)",),
        ("the gradient direction (cosine between the summed and the averaged gradient is 1)",)),
    "objective.empty_mask": Play(
        ("the padding test is inverted, so every target becomes ignore_index",
         "the batch really contains no supervised element (all padding)"),
        "count targets != ignore_index on the fixed batch and on the raw example before masking: zero after and nonzero "
        "before -> A; zero before too -> B",
        ("the batch has supervised elements and the loss is finite",), ("the inputs and the model's outputs",)),
    "objective.log_det_mismatch": Play(
        ("a layer's log-determinant term has the wrong sign",
         "a layer's term is not accumulated into the total, or the total never reaches the loss",
         "a mask lets an output read the input it transforms (the diagonal no longer gives the determinant)"),
        "on a copy, compare each layer's own log-determinant with autograd's log|det| of that layer alone: the first that "
        "differs -> A or B (read its formula); equal per layer but not in total -> B; a layer whose Jacobian is not "
        "triangular under its mask's ordering -> C",
        ("the total log-determinant the loss adds equals autograd's log|det dz/dx|",), ("the base distribution's term",)),
    "objective.adversarial_direction": Play(
        ("the discriminator's targets (or signs) for real and generated inputs are the same or swapped",
         "the generator's loss uses the fake target (or a dropped or doubled minus sign)"),
        "read the report's pushes: the discriminator's loss pushes real and generated the same way -> A; it pushes "
        "them apart but the generator's loss pushes its samples like the discriminator's generated ones -> B, or A if "
        "the discriminator's signs are the ones flipped (compare with the loss the paper writes)",
        ("the discriminator scores real and generated inputs apart",), ("the generator's architecture",)),
    "objective.target_out_of_range": Play(
        ("padded or unlabelled positions keep a marker label (-1) and the mask that drops them is gone",
         "the labels are in another encoding ({-1, 1}, class ids) than the probabilities the loss expects"),
        "count the out-of-range targets per batch: they sit at the padded positions -> A (restore the mask or weight "
        "them 0); they are spread over every position -> B (map the labels to [0, 1])",
        ("every target the binary cross-entropy counts lies in [0, 1]",), ("the model's outputs",)),
    "objective.wrong_sign": Play(
        ("loss_fn returns the negated loss", "the optimizer has maximize=True", "a reward or score is minimized as if it were a loss"),
        "take one small plain-SGD step on a copy: the loss rises -> it is maximized; then read loss_fn's sign (A) and the "
        "optimizer's maximize flag (B)",
        ("the loss falls after one small step on the fixed batch",), ("the gradient magnitude (only its sign flips)",)),
    "objective": Play(
        ("the outputs are not in the representation the loss expects", "the loss is not the intended one"),
        "compare one example's loss computed by hand with loss_fn's value",
        ("the manual loss of one example equals loss_fn's",), ("the model's outputs",)),
    "gradient": Play(
        ("the dependency path is cut (None)", "the path exists but its derivative is zero (zero tensor)",
         "the forward overflows (non-finite gradient)"),
        _NONE_OR_ZERO, ("{where} gets a finite nonzero gradient",), _PATH_KEEPS),
    "update": Play(
        ("the optimizer does not own the parameter", "the learning rate is 0 or the step is skipped"),
        _NOT_OWNED_NOR_MOVED, ("the parameter moves after one step",), ("its gradient on the fixed batch",)),
    "capability.cannot_overfit": Play(
        ("the learning rate is too small (or too large) for the step budget",
         "the model cannot represent the fixed batch: a missing bias or nonlinearity, too little capacity",
         "the initialization prevents learning: zero or symmetric weights, dead units"),
        "rerun the tiny-batch test with the learning rate x10 and x0.1 and run firstdiv.six_claims on the same evidence: "
        "the loss responds monotonically to lr with every claim passing -> A; a failing REPRESENTATION claim -> B; a failing "
        "COMPUTATION claim or collapsed features -> C",
        ("the loss on the tiny fixed batch falls far below its initial value within the step budget",),
        ("the TASK and OBJECTIVE links (they pass now)", "the batch itself")),
    "claim.representation": Play(
        ("the activations were removed or replaced by identity", "the nonlinearity runs but its result is discarded"),
        "check f(a x1 + (1 - a) x2) == a f(x1) + (1 - a) f(x2) with a forward hook listing which nonlinearities ran: none ran "
        "-> A; they ran -> B",
        ("the model's output is not affine in its input",), ("the parameter count and output shape",)),
    "claim.computation": Play(
        ("custom initialization sets the weights to one constant (symmetric) or to zero",
         "one row is copied to every unit (weights tied by construction)"),
        "count the distinct rows of each hidden layer's weight right after initialization: 1 distinct row -> A or B; then "
        "all-zero values -> zero init",
        ("hidden units have distinct weights after initialization",), ("the architecture and the loss",)),
    "claim.objective": Play(
        ("the outputs are not in the representation the loss expects (probabilities as logits)", "the loss sign or reduction is wrong"),
        "compare one example's loss by hand with loss_fn's value, and whether one small step lowers the loss",
        ("the loss falls after one small step",), ("the predictions (argmax)",)),
    "claim.differentiation": Play(
        ("the dependency path to the parameter is cut", "the path exists but the derivative is zero"),
        _NONE_OR_ZERO, ("the parameter gets a gradient",), _PATH_KEEPS),
    "claim.update": Play(
        ("the optimizer does not own the parameter", "its group's lr is 0 or the step is skipped"),
        _NOT_OWNED_NOR_MOVED, ("the parameter moves after one step",), ("its gradient",)),
    "claim.evaluation.train_mode": Play(
        ("eval_fn never calls model.eval()", "eval_fn calls model.train() (or a submodule forces training mode)"),
        "record module.training for every Dropout/BatchNorm module through forward pre-hooks during eval_fn: all True -> A "
        "or B (look for .train( in eval_fn)",
        ("every Dropout/BatchNorm module runs with training False during eval_fn", "two eval_fn calls give the same metric"),
        ("the training loss curve", "the parameter values")),
    # -- hooks and activations -----------------------------------------------------------------------------------------------
    "shape.flatten_mismatch": Play(
        ("an upstream layer (the culprit) changed C, H or W and the Linear's in_features was derived for the old geometry",
         "the input resolution differs from the one in_features was computed for"),
        "derive C*H*W at the flatten from the culprit's intended configuration and from the actual input size: matches with "
        "the intended culprit -> A; matches only with another input size -> B",
        ("the flattened feature count equals {where}.in_features",),
        ("{where}.in_features, unless the upstream change was intended", "the geometry of the layers before the culprit")),
    "shape": Play(
        ("a layer's stride/padding/kernel differs from the one the design assumed", "the input size differs from the assumed one"),
        "derive the expected output of {where} from its declared configuration and the observed input: disagreement -> A; "
        "agreement with a different input -> B",
        ("derived and observed geometry agree at {where}",), ("the channel counts (C_out is declared)",)),
    "layout.values_moved": Play(
        ("a reshape/view is used where a permute/transpose is needed (e.g. merging heads without transposing back)",
         "the permute order is wrong"),
        "run {where} on a torch.arange input and check that merge(split(x)) == x: values land elsewhere with the same shape -> A",
        ("the arange probe's values come back at their positions through {where}",), ("the output shape",)),
    "contract.axis_mismatch": Play(
        ("two axes are swapped (batch and time) before a batch-first module", "a batch_first flag disagrees with the data layout"),
        "encode the batch index in the values (x[b] = b) and read which axis carries it at {where}",
        ("the declared named axes hold at {where}",), ("the output shape of the model",)),
    "layout": Play(
        ("a reshape/view moved values where a permute was meant", "the module returns a non-contiguous layout a later view scrambles"),
        "run {where} on a torch.arange input and compare where each value lands with the intended permutation",
        ("values keep their intended positions through {where}",), ("the output shape",)),
    "contract": Play(
        ("the named axes at {where} are not the declared ones (a swap or a merge)", "the declared contract is stale"),
        "encode each axis's index in the values (x[b, t] = 1000 b + t) and read them back at {where}",
        ("the declared named axes hold at {where}",), ("the output shape of the model",)),
    "trace.forward_raised": Play(
        ("a layer receives a geometry its configuration cannot take (an upstream change)", "the input shape is not the assumed one"),
        "run firstdiv.shape_ledger(model, inputs): it derives every layer's geometry and names the culprit",
        ("the forward runs on the fixed inputs",), ("the layers' declared channel counts",)),
    "attention.axis_semantics": Play(
        ("the heads are merged with reshape from (B, H, T, Dh) without transposing back",
         "the heads are split along the wrong axis (view(B, H, T, Dh) instead of view(B, T, H, Dh))",
         "q, k and v are chunked in a different order than the projection writes them"),
        "feed torch.arange hidden states and check merge(split(x)) == x with the module's own split and merge: fails at merge "
        "-> A; fails at split -> B; both pass -> compare the projections' chunks (C)",
        ("merge(split(x)) == x and LEVEL_2 passes",), ("the output shape [B, T, E] (LEVEL_1)",)),
    "attention.rows_not_normalized": Play(
        ("softmax runs over the query axis (dim=-2) instead of the keys", "the mask is added after the softmax"),
        "sum the attention weights over Tk and over Tq: rows sum to 1 over Tq -> A; neither -> B",
        ("each valid query row sums to 1 over Tk",), ("the scores' shape [B, Nh, Tq, Tk]",)),
    "attention.forbidden_weight": Play(
        ("the causal mask has the wrong diagonal (triu(diagonal=2) lets each position see the next)",
         "the boolean mask is inverted", "the mask is applied after the softmax"),
        "print the mask for T = 4 and the largest weight above the diagonal: one extra diagonal allowed -> A; only the "
        "diagonal allowed -> B; weights renormalized wrongly -> C",
        ("every forbidden weight is exactly 0",), ("rows still normalize over Tk",)),
    "attention.causality": Play(
        ("the causal mask is missing or misaligned", "a layer mixes positions outside attention (a norm over time)"),
        "change one future token and compare the prefix logits with the mask printed: mask wrong -> A; mask right -> B",
        ("changing a future token leaves every earlier position's output unchanged",), ("outputs on unchanged inputs",)),
    "attention.reference_mismatch": Play(
        ("the scores are not scaled by 1/sqrt(Dh)", "a different scale (1/Dh) or temperature",
         "a bias or mask term differs from the reference"),
        "compare with F.scaled_dot_product_attention on the same q, k, v with scale=None and with scale=1: matches scale=1 -> "
        "A; matches another scale -> B; neither -> C",
        ("the module agrees with the trusted reference within tolerance (LEVEL_4)",),
        ("LEVEL_1 to LEVEL_3 (shapes, axes, normalization)",)),
    "attention": Play(
        ("the attention computation deviates at the reported level", "the inputs or options given to the check are not the module's"),
        "rerun attention_check with the options read from the module and compare with scaled_dot_product_attention",
        ("the reported level passes",), ("the earlier levels",)),
    "features.collapse_zero": Play(
        ("the units feeding the features are dead (a negative bias or a large update pushed them below zero)",
         "zero initialization of the layer that produces the features"),
        "print the pre-activation mean and the bias of the layer producing the features: negative bias with nonzero weights "
        "-> A; zero weights -> B",
        ("most feature vectors have a nonzero norm",), ("the feature dimension and the model's output shape",)),
    "features.collapse_direction": Play(
        ("symmetric initialization makes every unit identical", "a normalization removes the informative directions"),
        "count the distinct rows of the producing layer's weight and compare pairwise cosines before and after its norm",
        ("pairwise cosines of the feature vectors spread below 1",), ("the feature dimension",)),
    "features": Play(
        ("the vectors do not represent what the downstream operation assumes", "one coordinate dominates (unit mismatch)"),
        "name what one vector represents and check the per-coordinate scales",
        ("the reported feature statistic is back in range",), ("the feature axis and count",)),
    # -- profiler / allocator / compiler ------------------------------------------------------------------------------------
    "loader.starved": Play(
        ("producing one batch is slower than consuming it at {where} (decode, I/O or a transform in the main process)",
         "worker processes start for every epoch (process start-up)", "workers compete with the consumer for the same CPU"),
        "measure batch wait separately from post-batch work, then time dataset[i] alone and sweep num_workers 0, 1, 2, 4: wait "
        "falls with workers and work is unchanged -> A; wait is concentrated in each epoch's first batch -> B; wait falls "
        "while work rises and examples/s stays flat -> C",
        ("median batch wait falls below half the step's work", "examples/s rises"),
        ("the examples each batch contains (same sampler, same seed)", "the training step's own work time")),
    "memory.growth": Play(
        ("the step appends the loss tensor (not loss.item()) to a history, keeping every step's graph alive",
         "outputs or logits are kept across steps", "a hook or closure holds tensors from each step"),
        "replace the history's loss with loss.item() and rerun the identical iterations: live bytes per iteration fall to 0 "
        "-> A; otherwise list the surviving tensors' shapes (logits-shaped -> B)",
        ("live-tensor bytes stay flat across identical iterations",), ("the loss value of every step",)),
    "loader": Play(
        ("the producer (reading, decoding, transforming, collating) is the limit", "the consumer's own work is the limit"),
        "measure batch wait separately from post-batch work",
        ("median batch wait falls below half the step's work",), ("the examples each batch contains",)),
    "memory": Play(
        ("a phase allocates more than the device holds (activations, optimizer state, a cache)",
         "tensors from earlier steps stay alive"),
        "run the step inside firstdiv.memory_phases(model, optimizer) and read the phase and the live bytes per iteration",
        ("peak memory of the failing phase falls below the limit",), ("the loss value of every step",)),
    "compile.recompiles": Play(
        ("a shape guard fails for every new sequence length (dynamic=False)", "a Python scalar argument is specialized",
         "the dtype or device changes between calls"),
        "capture recompile logs (TORCH_LOGS=recompiles) on the real varying workload and time a repeated fixed-shape steady "
        "state: the failed guard names the dimension (size -> A, value -> B, dtype/device -> C)",
        ("recompilations after warm-up stop (or stay bounded by the shape buckets)",),
        ("compiled outputs equal eager within the stated tolerance",)),
    "compile.incorrect": Play(
        ("the compiled graph differs numerically beyond the tolerance (reduced precision, fused ops)", "the eager path is nondeterministic"),
        "run eager twice and compiled twice on the same input: eager differs from itself -> B; otherwise -> A",
        ("compiled equals eager within tolerance",), ("the eager output",)),
    "compile": Play(
        ("the compiler assumption at {where} stopped holding", "the workload varies on a guarded dimension"),
        "capture compiler logs for the exact call (fullgraph=True as a capture test)",
        ("the {where} link passes",), ("compiled outputs equal eager within tolerance",)),
    "outputs.diverged": Play(
        ("per-tensor quantization rounds small weights to zero when one feature's scale dominates the layer",
         "the exported/compiled variant traced a different branch (train mode, a flag)", "reduced precision overflows at {where}"),
        "compare the variants layer by layer from the reference and inspect {where}'s weight range per channel: one channel "
        "1000x the rest -> A; outputs differ before {where} -> B; non-finite at {where} -> C",
        ("the variant agrees with the reference within tolerance at {where} and at the output",),
        ("the reference variant's outputs",)),
    "outputs.fed_differently": Play(
        ("the variants receive differently preprocessed inputs (tokenizer, normalization)", "different generation settings"),
        "feed every variant the identical tensor and compare again: agreement -> A or B",
        ("identical inputs reach every variant",), ("each variant's weights",)),
    "outputs": Play(
        ("the variant differs from the reference at {where}", "the variants are not fed the same inputs"),
        "compare intermediate stages in order, starting from identical inputs", ("the variants agree within tolerance",),
        ("the reference's outputs",)),
}

_PLAYS["step.nonfinite_gradient"] = _PLAYS["step.nonfinite_loss"]

_GENERIC = Play(
    ("the mechanism the instrument checks at {where} is not the intended one",
     "the evidence given does not describe the failing system (a different batch, model instance or configuration)"),
    "repeat the instrument on a second known batch: the divergence stays at {where} -> the first hypothesis; it moves -> "
    "the second",
    ("the instrument passes at {where}",), ("the loss value of the forward on the fixed batch",))


def play_for(kind: str, where: str) -> dict[str, Any]:
    """Hypotheses, experiment, MUST CHANGE and MUST NOT CHANGE for the most specific known prefix of ``kind``."""
    for prefix in prefixes(kind):
        if prefix in _PLAYS:
            return {"playbook_key": prefix, **_PLAYS[prefix].at(where)}
    return {"playbook_key": None, **_GENERIC.at(where)}
