"""The instrument routing table as data: appendix "Which instrument should I reach for first?" plus chapter 31.

Each :class:`RouteSpec` is one symptom family: the symptom in the book's words, more ways a user types it,
the FIRST CONTRACT to check (the incident worksheet's list), the instruments by their public firstdiv names
(first = the one to run first), what to look at in its report, the evidence packet to capture before the
first fix, the distinguishing experiment (two hypotheses and the experiment that forces them apart), when to
stop (from the section), and the exact call. :mod:`.route` matches free text against ``phrasings``.

This module is long because it is a table; the matching logic lives in :mod:`.route`, and the book's
vocabulary (contracts, packets, the escalation ladder) in :mod:`firstdiv._book`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._book import CONTRACTS, ESCALATION, PACKETS, STOP_DEBUGGING
from .._registry import SPECS

__all__ = ["CONTRACTS", "ESCALATION", "INSTRUMENTS", "PACKETS", "ROUTES", "STOP_DEBUGGING", "SYNONYMS", "RouteSpec"]

#: public firstdiv names a route may name: the instruments, then the regression lab
INSTRUMENTS = ("step_probe", "reachability", "four_structures", "six_claims", "learning_ledger", "evidence_packet",
               "tensor_trace", "shape_ledger", "feature_space", "attention_check", "stage_trace", "loader_timing",
               "performance_ledger", "memory_phases", "compile_ledger", "compare_outputs", "DiagnosticSet",
               "sweep", "compare", "bisect", "factorial", "Gate", "determinism", "rng_audit")


@dataclass(frozen=True)
class RouteSpec:
    """One row of the routing table (see the module docstring)."""

    id: str
    section: str
    symptom: str
    phrasings: tuple[str, ...]
    contract: str
    instruments: tuple[str, ...]
    focus: str
    packet: str
    hypotheses: tuple[str, str]
    experiment: str
    stop_when: str
    call: str
    command: str = ""


# --- when to stop, per section ---------------------------------------------------------------------------------------
_STOP = {
    "1": ("You can separately prove: the forward calculation is the intended one, backward produced the expected "
          "derivative, the intended parameter object moved, and old gradients are not contaminating the next step."),
    "2": ("You have found the first boundary where observed tensor facts or axis semantics stop matching the expected "
          "contract. Repair there."),
    "3": "You can point to the first operation or branch after which the intended dependency no longer exists.",
    "4": ("You can say which claim the evidence supports and which claim is still unsupported; do not use evidence "
          "for one claim as proof of another."),
    "5": ("You can reconcile what Python can reach, what PyTorch registered, what autograd reached and what the "
          "optimizer owns, for every object relevant to the failure."),
    "6": ("You can name the actual limiting resource or phase (read, decode, transform, collate, process startup, "
          "CPU contention, host-to-device transfer, consumer compute). Then repair that mechanism."),
    "7": ("You have identified the earliest stage where one of the five contract categories (structure, numeric "
          "interpretation, semantics, relationships, provenance) fails. Only then reintroduce batching, workers and "
          "performance complexity."),
    "8": "Derived and observed geometry agree at every shape-changing operation up to the failing boundary.",
    "9": ("You can state what one vector represents, which axis holds its coordinates, what operation acts on those "
          "coordinates, what numerical quantity came out, and which invariances that quantity has."),
    "10": "You know the earliest correctness level and stage that fails.",
    "11": ("You find the first expected consequence that fails to appear. Debug there. Do not tune learning rate, "
           "architecture, precision or regularization while an earlier link remains unsupported."),
    "12": ("You can state the metric that matters, the phase/resource that dominates it, the mechanism hypothesis, the "
           "one intervention that tests it, the correctness property that must remain unchanged, and the "
           "uninstrumented before/after result."),
    "13": ("You can name the compiler assumption that stopped holding, or establish that compilation is stable and "
           "the remaining problem is ordinary workload economics."),
    "14": ("Repeated evidence establishes a difference worth explaining and the measurement contract is known to be "
           "comparable. Only then investigate the mechanism."),
    "oom": ("You can name the phase that runs out of memory (loading, forward, backward, first optimizer step, "
            "evaluation, export) and the cost that fills it, confirmed by one measurement before changing a setting."),
    "export": ("The deployed variants (checkpoint, merged, quantized, exported) agree with the reference on the same "
               "fixed inputs within a stated tolerance, fed identically and in eval mode, or you have named the first "
               "variant and layer that leaves tolerance. A successful conversion is not a quality test."),
    "input": ("You have printed the exact input the model received and it is the intended one: the model may be "
              "responding correctly to an unintended input."),
    "overfit": ("You know the form of the gap (duplicates, too little or unrepresentative data, inconsistent labels, a "
                "memorized identifier, train/validation preprocessing that differs, a distribution shift) from "
                "individual errors and slices, not from the average curve."),
    "memorized": ("Prompts designed to separate the intended concept from accidental correlations pass, and they pass "
                  "across seeds, not on one flattering seed."),
    "diagset": ("Every example of the diagnostic set (ordinary, boundary, missing input, abstention) gives its known "
                "answer again, or you have named the first example whose output changed and the change behind it."),
    "observe": ("The final verification was rerun without the instrument, and the result did not depend on what the "
                "instrument changed merely by being present."),
}

# --- distinguishing experiments: the appendix's four examples, then the sections' own ---------------------------------
_EXP_MISSING_GRAD = (("graph path is broken", "path exists but local derivative is zero"),
                     "clear grad to None, run one backward pass, inspect whether grad remains None or becomes a zero tensor")
_EXP_LOW_GPU = (("input pipeline is starving the device", "model/host execution is the bottleneck"),
                "measure batch wait separately from post-batch work")
_EXP_COMPILED_SLOW = (("steady-state kernel is slower", "recurring recompilation dominates"),
                      "measure a repeated fixed-shape steady state; capture recompile logs on the real varying workload")
_EXP_REGRESSION = (("model behavior changed", "ordinary seed variation explains the observation"),
                   "run both versions on shared seeds and inspect paired deltas")
_EXP_SGD = (("the update rule is the one you think", "something else changes (or fails to change) the parameter"),
            "one controlled plain-SGD step (no momentum, no weight decay): delta must equal -learning_rate * gradient")
_EXP_ACCUM = (("old gradients are carried into the next step", "each step's own gradient is simply large"),
              "two backward passes on the same batch: is the grad after the second equal to grad1 + grad2?")
_EXP_ARANGE = (("a reshape/transpose/permute moved values to the wrong positions", "the values are right; the contract is wrong"),
               "feed torch.arange(...) small enough to print through the operation and see where each value lands")
_EXP_CAPABILITY = ((("an earlier link of the learning chain is broken (task, objective, dependency, gradient, "
                    "ownership, update)"), "the mechanics work and the problem is capacity, data or tuning"),
                   "try to overfit one tiny fixed batch: a working system drives its loss near zero")
_EXP_OWNERSHIP = (("the optimizer owns stale parameter objects (the head was replaced after it was built)",
                   "the optimizer owns the head but the update is zero or skipped"),
                  ("compare id(p) of the head's parameters with the optimizer's param groups, then take one controlled "
                  "step and measure the head's parameter delta"))
_EXP_STAGE = (("an early preprocessing stage broke the contract", "the sample is right and the model is wrong"),
              ("walk one known sample (one process, no batching, controlled randomness) stage by stage and check "
              "each contract category after each stage"))
_EXP_GEOMETRY = (("an upstream layer changed C, H or W unintentionally", ("the architecture intends the new shape and "
                  "only the consumer is stale")),
                 ("derive every layer's expected output shape before it runs and compare with the observed one; the "
                 "first disagreement is the boundary"))
_EXP_CAUSAL = (("the mask lets later positions reach earlier queries", ("the mask is right and another path leaks "
                "(a shifted target, a bidirectional layer)")),
               "change only a future token and check that every earlier position's output is unchanged within tolerance")
_EXP_ATTN_INV = (("softmax runs over the wrong axis or the mask is applied after it", ("the weights are right and the "
                  "values or the head merge are wrong")),
                 ("inspect one valid query row: its weights must sum to 1 over Tk, be exactly 0 at forbidden keys, and be "
                 "finite"))
_EXP_ATTN_REF = (("a numerical step differs (missing 1/sqrt(Dh) scaling, softmax axis)", ("the implementation "
                  "matches and the difference is upstream")),
                 "run the same q, k, v through torch.nn.functional.scaled_dot_product_attention and compare stage by stage")
_EXP_OOM = (("the phase's transient cost (activations, saved tensors, optimizer state) exceeds memory",
             "memory leaks across steps (retained graphs, kept logits)"),
            "run under memory_phases with a cap: which phase raises, and does memory at the start of each step rise?")
_EXP_NONFINITE = (("the forward/loss produces the first non-finite value", "backward or the update produces it"),
                  "one controlled step: is the loss finite? then which parameter's gradient is the first non-finite one?")
_EXP_TASK = (("the target no longer describes the input (shifted, remapped, misaligned)", ("the target is right and "
              "the objective or model is wrong")),
             "check known inputs against the ground-truth labelling rule (task_probe) before the loss sees them")
_EXP_OBJECTIVE = ((("outputs are not in the representation the loss expects (probabilities as logits, wrong sign, "
                   "wrong reduction)"), "the objective is right and initialization or scale is off"),
                  ("reproduce the loss by hand for one example and compare with the library loss and with the value "
                  "the declared initialization predicts (about ln(C) for C balanced classes)"))
_EXP_CLAIMS = ((("one of the six claims (representation, computation, objective, differentiation, update, evaluation) "
                "fails"), "all six hold and the failure is elsewhere (data, task)"),
               "audit each claim with its own evidence; do not use evidence for one claim as proof of another")
_EXP_EVAL_MODE = (("evaluation runs with dropout/BatchNorm in training mode", ("evaluation mode is right and the data "
                   "or model differs")),
                  ("evaluate the same batch twice: outputs that differ between calls (or change with model.eval()) "
                  "mean train-mode evaluation"))
_EXP_REGISTER = (("the tensor/layer is reachable from Python but not registered", ("it is registered but replaced or "
                  "rebuilt later")),
                 "list named_parameters(), named_buffers() and state_dict() keys, then look for the object by identity")
_EXP_WORKERS = (("more workers overlap waiting", "workers compete with the consumer for the same CPU"),
                ("sweep num_workers = 0, 1, 2, 4, 8 one control at a time, recording examples/s, batch-wait "
                "distribution and post-batch work time"))
_EXP_TAIL = (("occasional slow batches starve the consumer (tail wait)", "every step is uniformly slow"),
             "record batch wait median, p95 and maximum, not only the mean")
_EXP_LAUNCH = (("the device waits on many small kernel launches (launch-bound)", "input delivery starves the device"),
               "with batch wait near zero, time the step at 2x batch size: a launch-bound step barely slows down")
_EXP_PERF = (("one phase (input wait, transfer, forward, loss, backward, optimizer, logging) dominates",
              "the measurement itself is wrong (no warmup, no synchronization boundary)"),
             "time each phase with a synchronization boundary after warmup, then intervene on the dominant one only")
_EXP_MEASURE = (("the benchmark measures submission, warmup or instrumentation", "the workload itself varies"),
                "repeat the measurement with warmup, a synchronization boundary and no profiler; compare the spread")
_EXP_GROWTH = (("the set of live allocations grows (a retained graph, kept logits)", ("the allocator pool grew but "
                "live tensors did not")),
               "compare memory_allocated() at the start of otherwise identical steps with memory_reserved()")
_EXP_COMPILE_STAGE = (("compilation changed the result or failed", "eager is already wrong"),
                      "run the exact call eagerly first; if eager is wrong compilation is not the first problem")
_EXP_CAPTURE = (("the hot region breaks into several graphs", "it is captured and the cost is elsewhere"),
                "run the exact call with fullgraph=True as a capture test and read the graph-break reasons")
_EXP_COLD = (("cold compilation cost is not amortized over the calls you make", "steady-state calls are slow"),
             "separate cold first call, warm-cache first call and steady-state call; compute the break-even call count")
_EXP_MEASUREMENT = (("the evaluation path changed (split, preprocessing, aggregation, model mode)", "the system changed"),
                    "fingerprint the evaluation contract of both runs and compare before comparing metrics")
_EXP_BISECT = (("one change causes the regression", "changes interact"),
               "bisect the changes at shared seeds, then apply the implicated change alone and confirm the effect")
_EXP_FACTORIAL = (("the effects add", "the changes interact"),
                  "run base, A, B and A+B at shared seeds and estimate both main effects and the interaction")
_EXP_DETERMINISM = (("something in the run is not controlled by the seed", ("the seed controls everything and only "
                     "the environment changed")),
                    "run the same seed twice under fixed conditions, then change one condition at a time")
_EXP_RNG = (("worker processes share or reset an RNG stream", "the pipeline is seeded correctly"),
            "draw the same items twice per num_workers setting and compare torch, numpy and random streams")
_EXP_GATE = (("the threshold separates regressions from seed noise", "it fires on healthy runs"),
             "calibrate the threshold on healthy seeds and measure its false-alarm rate on held-out healthy seeds")
_EXP_EXPORT = (("the variant was fed differently (tokenizer, template, preprocessing, generation settings, mode)",
                "the converted model computes differently"),
               "run the training checkpoint and every deployed variant on the same fixed inputs and compare layer by layer")
_EXP_DIAGSET = (("the change altered behavior on known cases", "behavior on known cases is unchanged"),
                "rerun the stored diagnostic set (ordinary, boundary, missing-input, abstention) and compare outputs")
_EXP_INPUT = (("the model received an unintended input (truncated, swapped channels, resampled, wrong template)",
               "the input is right and the model is wrong"),
              "print the exact input the model received for one failing example and compare with the intended one")
_EXP_OVERFIT = (("train and validation differ in preprocessing or distribution", ("the model memorizes (duplicates, "
                 "identifiers, too little data)")),
                ("run one validation sample through the training pipeline and the validation pipeline; then look at "
                "per-slice errors"))
_EXP_MEMORIZED = (("the model binds to accidental correlations (background, phrasing, a repeated segment)", ("it "
                   "learned the intended concept")),
                  "evaluate prompts that separate the concept from its context (new scene, new topic), at several seeds")
_EXP_FEATURES = (("the quantity is named wrongly (it changes under a transformation that should not matter)",
                  "the representation itself is degenerate"),
                 "rescale one vector, scale w and b together, change one coordinate's units: check which quantities move")
_EXP_PACKET = (("the failure is in training mechanics", "the failure is in data or evaluation"),
               "capture the minimum evidence packet first, then run the cheapest instrument that separates the two")
_EXP_OBSERVE = (("the instrument changed the system (hooks, .item() syncs, prints in compiled code, profiler)",
                 "the effect is real without the instrument"),
                "rerun the final verification with the instrument removed")

_EXP_ASCENT = (("the step goes up the gradient (a sign error: (-loss).backward(), an update with +lr*grad)",
                "the step size overshoots (the lr or its parameter group is too large for this loss scale)"),
               ("run your own train_step once on the known batch and compare the parameter move with -grad: its sign, "
               "then its size relative to the parameters"))
_EXP_PRECISION = (("a reduced-precision op overflows or underflows (fp16 range, bf16 rounding of a sum)",
                   "the fp32 program is already wrong and autocast only exposes it"),
                  "run the same batch eager in fp32 and under autocast; compare the loss and the first layer that differs")
_EXP_GENERATION = (("the variants are fed different generation settings (eos_token_id, pad_token_id, max_new_tokens)",
                    "the model's own end-of-sequence probability is wrong (it never learned to stop)"),
                   "generate from the same prompt with the settings printed; compare the eos/pad ids with the tokenizer's")
_EXP_BATCH = (("an op mixes examples (a reduction or normalization over the batch axis, a batch-first mix-up)",
               "the per-example computation is right and only the batch layout passed to the instruments is wrong"),
              ("run one example alone and inside a batch of 32: the per-example outputs must agree; then check "
              "batch_first and the batch_axis"))

# --- the exact calls ---------------------------------------------------------------------------------------------------
_CALL = {
    **{s.name: s.call for s in SPECS if s.public},  # the instruments, from their registry
    "sweep_compare": ('firstdiv.compare(firstdiv.sweep(target, "0-11", name="baseline"), '
                      'firstdiv.sweep(target, "0-11", sets=["key=value"], name="candidate"))'),
    "bisect": 'firstdiv.bisect(target, ["key=old"], ["key=new,other=new"], "0-7")',
    "factorial": 'firstdiv.factorial(target, "a_key=value", "b_key=value", "0-11")',
    "determinism": "firstdiv.determinism(target, seed=0)",
    "rng_audit": "firstdiv.rng_audit(loader, num_workers=(0, 2))",
    "Gate": 'firstdiv.Gate.calibrate("baseline", holdout="20-59").check(new_runs)',
}
_CMD = {
    "sweep_compare": ("firstdiv sweep TARGET --seeds 0-11 --name baseline && firstdiv sweep TARGET --seeds 0-11 "
                      "--set key=value --name candidate && firstdiv compare baseline candidate"),
    "bisect": "firstdiv bisect TARGET --base key=old --candidate key=new,other=new --seeds 0-7",
    "factorial": "firstdiv factorial TARGET --a a_key=value --b b_key=value --seeds 0-11",
    "determinism": "firstdiv determinism TARGET --seed 0",
    "rng_audit": "firstdiv rng-audit path/to/file.py:make_loader --workers 0,2",
    "Gate": "firstdiv gate calibrate baseline --holdout-seeds 20-59 -o gate.json && firstdiv gate check gate.json candidate",
}


def _r(id: str, section: str, contract: str, instruments: tuple[str, ...], focus: str, packet: str,
       experiment: tuple[tuple[str, str], str], symptom: str, *phrasings: str, stop: str | None = None,
       call: str | None = None) -> RouteSpec:
    key = call or instruments[0]
    return RouteSpec(id=id, section=section, symptom=symptom, phrasings=(symptom, *phrasings), contract=contract,
                     instruments=instruments, focus=focus, packet=packet, hypotheses=experiment[0],
                     experiment=experiment[1], stop_when=_STOP[stop or section.split()[-1]],
                     call=_CALL.get(key, key), command=_CMD.get(key, ""))


_T, _P, _R = "training", "performance", "regression"
_A, _C31 = "appendix", "chapter 31"

ROUTES: tuple[RouteSpec, ...] = (
    # 1. The training loop: forward / backward / update
    _r("loop.update", f"{_A} 1", "learning chain", ("step_probe",), "step.update_rule / step.not_updated / step.moved", _T,
       _EXP_SGD, "Parameters do not change as expected after optimizer.step()",
       "loss.backward() does not update my parameters", "optimizer.step() does nothing",
       "the weights are identical before and after the step", "the update is not minus learning rate times gradient",
       "parameter update has the wrong size", "optimizer step is never called"),
    _r("loop.zero_grad", f"{_A} 1", "learning chain", ("step_probe",), "step.grad_accumulation / step.zero_grad_before_step",
       _T, _EXP_ACCUM, "Old gradients contaminate the next step",
       "I forgot optimizer.zero_grad()", "gradients accumulate across iterations", "gradients keep growing every step",
       "zero_grad is called between backward and step", "gradients are cleared before the optimizer step",
       "zeroing gradients happens at the wrong point"),
    # 2. Tensors
    _r("tensor.layout", f"{_A} 2", "tensor", ("tensor_trace",), "layout probe (torch.arange) / trace.forward", _T,
       _EXP_ARANGE, "Values land in the wrong place after reshape, transpose or permute",
       "reshape scrambles my data", "same shape but the values moved", "view after transpose gives garbage",
       "permute versus reshape mix-up", "the tensor has the right shape but the values are in the wrong order"),
    _r("tensor.facts", f"{_A} 2", "tensor", ("tensor_trace", "four_structures"), "dtype / device / stride / contiguity rows",
       _T, _EXP_ARANGE, "A tensor has the wrong dtype, device or stride",
       "expected scalar type Float but found Long", "dtype mismatch", "Expected all tensors to be on the same device",
       "tensors on different devices cuda:0 and cpu", "view size is not compatible with input tensor's size and stride",
       "the tensor is not contiguous"),
    _r("tensor.axes", f"{_A} 2", "tensor", ("tensor_trace",), "named-axis contracts (B T D)", _T, _EXP_ARANGE,
       "The axes hold the wrong meaning although the shape is legal",
       "batch and time axes are swapped", "batch_first mix-up", "my [B, T, D] tensor is really [T, B, D]",
       "height and width are swapped", "axis semantics are wrong but the shape is right"),
    _r("tensor.false_repair", f"{_A} 2", "tensor", ("tensor_trace", "shape_ledger"), "the first boundary whose contract fails",
       _T, _EXP_ARANGE, "I reshaped until the exception disappeared",
       "I squeezed dimensions until it ran", "I added a reshape to make the error go away",
       "changed in_channels to match an NHWC batch"),
    # 3. Autograd
    _r("graph.grad_none", f"{_A} 3", "graph", ("reachability",), "reachability.boundary / step.no_gradient", _T,
       _EXP_MISSING_GRAD, "A parameter's gradient is None",
       "grad is None", "my layer gets no gradient", "the parameter never receives a gradient",
       "detach() cuts the graph", "torch.no_grad() around part of the forward", "a branch did not execute",
       "parameter was not used in the forward pass", "find_unused_parameters error in DDP", "missing gradient"),
    _r("graph.grad_zero", f"{_A} 3", "graph", ("reachability",), "reachability.zero_gradient / step.zero_gradient", _T,
       _EXP_MISSING_GRAD, "A parameter's gradient is all zeros",
       "gradient is exactly zero", "the grads are zero tensors", "vanishing gradients", "dead ReLU gives zero gradient"),
    _r("graph.no_grad_fn", f"{_A} 3", "graph", ("reachability",), "reachability.loss_graph", _T, _EXP_MISSING_GRAD,
       "The loss has no grad_fn",
       "element 0 of tensors does not require grad and does not have a grad_fn", "loss.requires_grad is False",
       "loss.grad_fn is None", "backward fails because the loss does not require grad"),
    # 4. Six claims
    _r("claims.representation", f"{_A} 4", "learning chain", ("six_claims",), "REPRESENTATION (claim.representation.affine)",
       _T, _EXP_CLAIMS, "The network is effectively linear (missing nonlinearity)",
       "I forgot the activation between layers", "the deep network is no better than a linear model",
       "the model cannot fit XOR", "stacked linear layers without ReLU"),
    _r("claims.computation", f"{_A} 4", "learning chain", ("six_claims",),
       "COMPUTATION (claim.computation.symmetric_init / zero_init)", _T, _EXP_CLAIMS,
       "Hidden units are identical (symmetric or zero initialization)",
       "I initialized all weights to zero", "all neurons learn the same thing", "every hidden unit has the same weights",
       "symmetric initialization", "constant initialization"),
    _r("claims.objective", f"{_A} 4", "learning chain", ("six_claims", "learning_ledger"),
       "OBJECTIVE (claim.objective.probabilities_as_logits / wrong_sign)", _T, _EXP_OBJECTIVE,
       "Wrong objective: softmax before a loss that expects raw logits, or a loss with the wrong sign",
       "I applied softmax before CrossEntropyLoss", "loss goes up when the predictions get better",
       "the loss is negative", "maximizing instead of minimizing", "wrong objective",
       "output passed through softmax before a loss expecting raw logits"),
    _r("claims.evaluation", f"{_A} 4", "run comparison", ("six_claims", "compare_outputs"),
       "EVALUATION (claim.evaluation.train_mode / outputs.train_mode)", _T, _EXP_EVAL_MODE,
       "Evaluation runs in training mode (dropout or BatchNorm active)",
       "accuracy is worse in eval", "I forgot model.eval()", "evaluation results change every time I run them",
       "dropout is active at test time", "predictions differ between two evaluations of the same batch",
       "batchnorm running stats update during validation",
       "batchnorm behaves differently in eval mode", "train-mode evaluation"),
    _r("claims.gradients_fine", f"{_A} 4", "learning chain", ("six_claims",), "the first failing claim", _T, _EXP_CLAIMS,
       "The gradients look fine but the network still fails",
       "gradient norms are healthy but the model does not learn", "gradients look fine but accuracy is bad"),
    # 5. Four structures
    _r("ownership.head", f"{_A} 15", "ownership", ("four_structures", "step_probe"),
       "OPTIMIZER_OWNERSHIP (structure.optimizer) + parameter delta (step.not_updated)", _T, _EXP_OWNERSHIP,
       "Gradients are finite but the head never moves",
       "I replaced the head after creating the optimizer", "I swapped the head and now it does not learn",
       "the new classifier layer does not train",
       "the head weights stay the same after training", "the last layer is frozen", "a healthy gradient but the "
       "parameter never updates", "is this still the same parameter object", stop="5"),
    _r("ownership.registered", f"{_A} 5", "ownership", ("four_structures",),
       "structure.registered / structure.unregistered_tensor / structure.unregistered_module", _T, _EXP_REGISTER,
       "A tensor or layer is not registered (missing from state_dict, not moved by model.to)",
       "layers in a Python list are not in model.parameters()", "a parameter is missing from the state_dict",
       "the checkpoint does not save my layer", "model.to('cuda') leaves a tensor on the CPU",
       "submodule is not registered", "a tensor attribute should be a buffer"),
    _r("ownership.optimizer", f"{_A} 5", "ownership", ("four_structures",),
       "structure.optimizer (stale / missing / duplicate parameters)", _T, _EXP_OWNERSHIP,
       "The optimizer owns stale parameters or misses the model's",
       "the optimizer was built before the model was rebuilt", "optimizer param groups do not contain my new layer",
       "a parameter appears twice in the optimizer", "the optimizer does not see the new parameters",
       "the optimizer owns old parameters no longer in the model"),
    # 6. DataLoader and input delivery
    _r("loader.gpu_idle", f"{_A} 6", "performance", ("loader_timing", "performance_ledger"), "loader.wait vs loader.work",
       _P, _EXP_LOW_GPU, "Low GPU utilization",
       "the GPU is idle", "GPU utilization is low", "training is slow, GPU at 30%", "the dataloader is slow",
       "the training loop waits for batches", "input pipeline bottleneck", "the GPU is mostly idle",
       "data loading is the bottleneck", "tokenization, image decoding or augmentation is slow",
       "disk access is slow"),
    _r("loader.workers", f"{_A} 6", "performance", ("loader_timing",), "loader.sweep / loader.cpu_contention", _P,
       _EXP_WORKERS, "More DataLoader workers do not speed it up",
       "increasing num_workers does not help", "more workers but the same throughput", "the CPU is saturated",
       "workers compete with the training loop for CPU"),
    _r("loader.stalls", f"{_A} 6", "performance", ("loader_timing",), "batch wait median / p95 / max", _P, _EXP_TAIL,
       "Training stalls periodically waiting for the next batch",
       "every few batches training pauses", "occasional long waits for the next batch", "spiky step times"),
    _r("perf.launch_bound", f"{_C31}: GPU mostly idle", "performance", ("performance_ledger",), "perf.phase_time / perf.overhead",
       _P, _EXP_LAUNCH, "A tiny model leaves the GPU idle (launch-bound)",
       "small model GPU underutilized even with data preloaded", "many tiny kernels", "python overhead dominates",
       stop="12"),
    # 7. Transforms and preprocessing
    _r("input.channels", f"{_A} 7", "input representation", ("stage_trace",), "SEMANTICS (stage.semantics)", _T, _EXP_STAGE,
       "RGB channels were interpreted as BGR",
       "the colors look wrong", "the image channels are swapped", "BGR from OpenCV fed as RGB", "wrong channel order"),
    _r("input.numeric", f"{_A} 7", "input representation", ("stage_trace",), "NUMERIC INTERPRETATION (stage.numeric)", _T,
       _EXP_STAGE, "The input values have the wrong range or normalization",
       "images normalized twice", "pixel values 0-255 fed to a model expecting 0-1", "wrong mean and std",
       "normalization is wrong", "inputs are not normalized"),
    _r("input.provenance", f"{_A} 7", "input representation", ("stage_trace",), "PROVENANCE (stage.provenance)", _T,
       _EXP_STAGE, "Normalization statistics were fitted on validation data",
       "the scaler was fitted on the test set", "statistics computed on the whole dataset", "data leakage"),
    _r("input.relationships", f"{_A} 7", "input representation", ("stage_trace",), "RELATIONSHIPS (stage.relationships)",
       _T, _EXP_STAGE, "The augmentation invalidated the label or the mask no longer aligns with the image",
       "random flip applied to the image but not the mask", "the segmentation mask is misaligned after cropping",
       "bounding boxes are wrong after augmentation", "segmentation mask does not match the transformed image"),
    _r("input.structure", f"{_A} 7", "input representation", ("stage_trace",), "STRUCTURE (stage.structure)", _T,
       _EXP_STAGE, "A preprocessing stage scrambles the layout",
       "HWC image reshaped to CHW instead of permuted", "the image looks like noise after preprocessing",
       "a transform produces a legal tensor with the wrong meaning"),
    _r("input.serving", f"{_A} 7", "input representation", ("compare_outputs", "stage_trace"), "outputs.fed_differently", _R,
       _EXP_EXPORT, "The serving tokenizer differs from training",
       "special tokens differ at inference", "chat template differs between training and serving",
       "different preprocessing in production"),
    _r("input.wrong_answer", f"{_C31}: first wrong boundary", "input representation", ("stage_trace", "DiagnosticSet"),
       "the exact input the model received", _T, _EXP_INPUT, "The model's answer is wrong",
       "the relevant text was truncated", "audio was resampled incorrectly", "a label id is mapped to the wrong name",
       "the instruction template adds a different generation prefix", "the model responds to an unintended input",
       "all metadata checks pass but the input is still wrong", stop="input"),
    # 8. CNN geometry
    _r("geometry.matmul", f"{_A} 8", "geometry", ("shape_ledger",), "shape.flatten_mismatch (the flatten culprit)", _T,
       _EXP_GEOMETRY, "mat1 and mat2 shapes cannot be multiplied",
       "shape mismatch at the final Linear", "size mismatch in the fc layer", "in_features does not match the flattened size",
       "I changed in_features to match the tensor"),
    _r("geometry.channels", f"{_A} 8", "geometry", ("shape_ledger", "tensor_trace"), "CHANNEL QUESTION (shape.mismatch)", _T,
       _EXP_GEOMETRY, "A conv layer receives the wrong number of channels",
       "expected input to have 3 channels, but got 224 channels instead", "Given groups=1, weight of size [64, 3, 7, 7]",
       "NHWC batch fed to a conv that expects NCHW", "channels last versus channels first"),
    _r("geometry.spatial", f"{_A} 8", "geometry", ("shape_ledger",), "SPATIAL QUESTION (shape.derived vs observed)", _T,
       _EXP_GEOMETRY, "The spatial size differs from the derived one",
       "the feature map is smaller than expected", "output size is too small",
       "kernel size can't be greater than actual input size", "wrong padding or stride in a conv layer"),
    # 9. Feature space
    _r("features.collapse", f"{_A} 9", "tensor", ("feature_space",), "features.collapse_direction / collapse_zero / cosine",
       _T, _EXP_FEATURES, "Representations collapse",
       "all embeddings are identical", "cosine similarity between all pairs is near 1", "the features collapse to zero",
       "the vectors all point in the same direction", "embedding norms explode"),
    _r("features.axis", f"{_A} 9", "tensor", ("feature_space", "tensor_trace"), "which axis holds the coordinates", _T,
       _EXP_FEATURES, "A Linear acts on the wrong axis ([B, T, D] -> [B, T, 1] is one score per position)",
       "I got one score per token instead of one per example", "which axis holds the features",
       "what does one D-vector represent"),
    _r("features.invariance", f"{_A} 9", "tensor", ("feature_space",),
       "features.invariance_broken / dominant_coordinate / coordinate_scales", _T, _EXP_FEATURES,
       "A quantity changes under a transformation that should not matter",
       "the similarity changes when I rescale a vector", "dot product versus cosine similarity confusion",
       "one feature coordinate dominates", "features on wildly different scales", "distance changes when units change"),
    # 10. Attention
    _r("attention.causal", f"{_A} 15", "attention", ("attention_check",), "LEVEL_4 (attention.causality)", _T, _EXP_CAUSAL,
       "A future token changes an earlier logit",
       "causal leak", "the model can see the future", "the causal mask is not applied",
       "language model validation loss is suspiciously low", "future-token intervention changes the prefix", stop="10"),
    _r("attention.invariants", f"{_A} 10", "attention", ("attention_check",),
       "LEVEL_3 (attention.rows_not_normalized / forbidden_weight / nonfinite / blocked_query)", _T, _EXP_ATTN_INV,
       "Attention weights do not normalize over keys or forbidden weights are nonzero",
       "attention rows do not sum to 1", "softmax over the wrong dimension in attention",
       "padding tokens receive attention", "NaN from fully masked rows in attention"),
    _r("attention.shape", f"{_A} 10", "attention", ("attention_check",), "LEVEL_1 / LEVEL_2 (attention.shape / axis_semantics)",
       _T, _EXP_ARANGE, "Attention scores or heads have the wrong shape or axes",
       "scores shape is not [B, heads, Tq, Tk]", "splitting heads scrambles values", "merge(split(x)) is not x",
       "the merged layout does not restore [B, Tq, E]"),
    _r("attention.reference", f"{_A} 10", "attention", ("attention_check",), "LEVEL_4 (attention.reference_mismatch)", _T,
       _EXP_ATTN_REF, "My attention disagrees with scaled_dot_product_attention",
       "missing 1/sqrt(d) scaling", "forgot to scale scores by sqrt(d_k)", "manual attention versus sdpa differ"),
    # 11. The learning chain
    _r("learning.flat", f"{_A} 11", "learning chain", ("learning_ledger", "step_probe"),
       "the first failing link (CAPABILITY: overfit a tiny batch)", _T, _EXP_CAPABILITY, "The loss is flat",
       "my loss won't go down", "the model is not learning", "loss doesn't decrease", "loss is stuck at ln(num_classes)",
       "training runs without errors but the model is useless", "tuning the learning rate does not help",
       "loss does not fall", "the loss plateaus from the start",
       "training accuracy is stuck", "the loss never changes"),
    _r("learning.task", f"{_A} 15", "learning chain", ("learning_ledger",), "TASK (target alignment)", _T, _EXP_TASK,
       "Generated text is nonsense but training loss is excellent",
       "the loss falls but the model did not learn the intended task", "low training loss but the predictions are garbage",
       "targets are shifted twice", "the labels are misaligned with the inputs", "the logits are compared with the same "
       "input token instead of the next token", "the model optimizes the wrong task",
       "the model predicts the current token instead of the next one", stop="11"),
    _r("learning.objective_init", f"{_A} 15", "learning chain", ("learning_ledger",), "OBJECTIVE (initialization contract)",
       _T, _EXP_OBJECTIVE, "Initial loss is wildly inconsistent with the declared initialization",
       "the first loss is 50 on a 10-class problem", "initial loss much higher than ln(num_classes)",
       "the loss at step 0 is far from log(C)", stop="11"),
    _r("learning.objective_scale", f"{_C31}: loss does not fall", "learning chain", ("learning_ledger",),
       "OBJECTIVE (supervised-token count, reduction)", _T, _EXP_OBJECTIVE, "A mean over an empty mask",
       "no supervised tokens in the batch", "all labels are -100", "loss summed over very different lengths",
       "the loss scale is wrong", stop="11"),
    _r("learning.reference_loss", f"{_A}: known-good references", "learning chain", ("learning_ledger",),
       "OBJECTIVE with reference_loss=", _T, _EXP_OBJECTIVE, "My manual loss disagrees with F.cross_entropy",
       "manual loss versus library loss differ", "hand-computed loss does not match", stop="11",
       call="firstdiv.learning_ledger(model, batch, loss_fn, optimizer, reference_loss=manual_loss)"),
    _r("learning.capability", f"{_A} 11", "learning chain", ("learning_ledger",), "CAPABILITY", _T, _EXP_CAPABILITY,
       "The model cannot overfit a tiny fixed batch",
       "can't overfit a single batch", "loss does not go to zero on one batch", "cannot memorize one batch"),
    _r("learning.labels", f"{_C31}: loss does not fall", "learning chain", ("learning_ledger",), "TASK / OBJECTIVE", _T,
       _EXP_TASK, "Label IDs do not match the output dimension or the class mapping",
       "num_classes differs from the number of labels", "class indices are off by one", "the class mapping is wrong",
       stop="11"),
    _r("learning.nonfinite", f"{_A} 11", "learning chain", ("step_probe", "learning_ledger"),
       "step.nonfinite_loss / step.nonfinite_gradient (GRADIENT link)", _T, _EXP_NONFINITE, "The loss becomes NaN",
       "loss is nan", "gradients explode", "loss becomes inf after a few steps", "non-finite gradients",
       "training diverges to NaN"),
    _r("learning.ascends", f"{_A} 11", "learning chain", ("step_probe", "learning_ledger"),
       "step.train_step_ascends / step.diverges (your train_step, run and restored)", _T, _EXP_ASCENT,
       "The loss goes up instead of down", "loss increases every step", "the loss rises as training goes on",
       "training makes the loss worse", "loss explodes after a few steps", "the loss grows instead of shrinking",
       "my training diverges", stop="11"),
    _r("precision.autocast", f"{_A} 11", "learning chain", ("step_probe", "compare_outputs"),
       "step.nonfinite_loss under autocast; the eager fp32 variant against the autocast one", _T, _EXP_PRECISION,
       "Results change under autocast or mixed precision", "bf16 autocast gives different results",
       "fp16 training diverges with GradScaler", "GradScaler skips every step", "the loss scale keeps shrinking",
       "mixed precision makes the loss NaN", "half precision training is unstable", "amp gives worse accuracy",
       "the model is worse with torch.autocast", stop="11"),
    _r("generation.length", f"{_C31}: exported model differs", "run comparison", ("compare_outputs", "stage_trace"),
       "the generation settings each variant was fed (eos/pad token ids, max_new_tokens, template)", _R, _EXP_GENERATION,
       "Generated sequences have the wrong length", "generation stops early", "generated text is too short",
       "the model never stops generating", "the model generates until max_length", "generation ignores the eos token",
       "outputs are cut off after a few tokens", "generate returns only the prompt", stop="export"),
    _r("batch.shape", f"{_A} 2", "tensor", ("tensor_trace", "shape_ledger", "learning_ledger"),
       "named-axis contracts (B T D); the batch axis the learning instruments use (batch_axis=)", _T, _EXP_BATCH,
       "The result depends on the batch size or the batch layout", "works with batch size 1 but not with 32",
       "the batch shape is wrong", "changing the batch size changes the predictions",
       "the sequence-first batch is sliced along time", "my batch is [T, B] not [B, T]", "examples in a batch leak "
       "into each other", "the last batch has a different size and fails", stop="2"),
    # 12. Performance
    _r("perf.throughput", f"{_A} 15", "performance", ("performance_ledger",), "perf.dominant_phase", _P, _EXP_PERF,
       "Training is correct but throughput is low",
       "training is slow", "low samples per second", "the step time is too high", "which phase dominates the step",
       "the optimization made latency better but throughput worse", stop="12"),
    _r("perf.measurement", f"{_A} 12", "performance", ("performance_ledger",), "measurement contract (warmup, sync, repeats)",
       _P, _EXP_MEASURE, "The benchmark numbers are unreliable",
       "timings vary a lot between runs", "CUDA timing without synchronize", "the profiler says one thing and the "
       "benchmark another", "the first iteration is much slower", "tokens per second counts padded tokens",
       "images per second at different resolutions are compared"),
    _r("perf.memory_growth", f"{_A} 12", "performance", ("memory_phases", "performance_ledger"), "memory.growth", _P,
       _EXP_GROWTH, "memory_allocated() grows across otherwise identical iterations",
       "memory keeps growing every step", "memory leak", "appending the loss to a list retains the graph",
       "memory rises every iteration", "keeping generated logits for every batch",
       "a steadily rising memory curve"),
    _r("perf.reserved", f"{_A} 12", "performance", ("performance_ledger", "memory_phases"), "allocated vs reserved vs peak",
       _P, _EXP_GROWTH, "Reserved memory is high",
       "nvidia-smi shows much more memory than allocated", "reserved memory is much larger than allocated memory",
       "is high reserved memory a leak"),
    _r("perf.oom", f"{_C31}: GPU runs out of memory", "performance", ("memory_phases",), "memory.oom (where = the phase)", _P,
       _EXP_OOM, "CUDA out of memory",
       "OOM during the backward pass", "out of memory at the first optimizer step", "runs out of memory during evaluation",
       "OOM when loading the model", "out of memory during export or merge", "OutOfMemoryError", stop="oom"),
    _r("observe.instrumented", f"{_A}: observation and intervention", "performance", ("performance_ledger", "compile_ledger"),
       "the uninstrumented before/after result", _P, _EXP_OBSERVE,
       "The bug disappears or timing changes when I add instrumentation",
       "adding a print changes the behavior", "the bug disappears when I add a print",
       "the profiler changes the timing", ".item() synchronizes CUDA",
       "hooks change the result", stop="observe"),
    # 13. torch.compile
    _r("compile.recompile", f"{_A} 15", "compiler", ("compile_ledger",), "STABLE (compile.recompiles: the failed guard)", _P,
       _EXP_COMPILED_SLOW, "Compiled model pauses on new sequence lengths",
       "torch.compile keeps recompiling", "recompilation on every batch", "guard failures", "cache size limit reached, "
       "falls back to eager", "dynamic shapes recompile", stop="13"),
    _r("compile.slower", f"{_A} 13", "compiler", ("compile_ledger",), "WORTH_IT (compile.not_worth_it)", _P,
       _EXP_COMPILED_SLOW, "The compiled model is slower than eager",
       "torch.compile made it slower", "compiled slowdown", "no speedup from torch.compile",
       "throughput dropped after torch.compile"),
    _r("compile.graph_break", f"{_A} 13", "compiler", ("compile_ledger",), "CAPTURED (compile.graph_break)", _P, _EXP_CAPTURE,
       "Graph breaks: the hot region was not captured",
       "fullgraph=True fails", "a print inside compiled code creates a graph break", "dynamo graph breaks"),
    _r("compile.incorrect", f"{_A} 13", "compiler", ("compile_ledger", "compare_outputs"), "CORRECT (compile.incorrect)", _P,
       _EXP_COMPILE_STAGE, "The compiled output differs from eager",
       "torch.compile gives different results", "compiled and eager outputs disagree"),
    _r("compile.cold", f"{_A} 13", "compiler", ("compile_ledger",), "WORTH_IT (cold vs warm vs steady; break-even)", _P,
       _EXP_COLD, "Compilation takes too long",
       "the first compiled call takes minutes", "cold start cost of torch.compile", "compile time is not amortized"),
    _r("compile.fails", f"{_A} 13", "compiler", ("compile_ledger",), "RUNS (compile.compiled_raised / eager_raised)", _P,
       _EXP_COMPILE_STAGE, "torch.compile raises an error",
       "torch.compile crashes", "inductor error", "compilation fails"),
    # 14. Regressions
    _r("regression.small_gain", f"{_A} 15", "run comparison", ("sweep", "compare"), "noise floor + paired deltas", _R,
       _EXP_REGRESSION, "New configuration improves one run by 0.001",
       "is this improvement real or noise", "the metric improved slightly", "is the difference significant",
       "one seed looks better", stop="14", call="sweep_compare"),
    _r("regression.worse", f"{_A} 14", "run comparison", ("sweep", "compare"), "verdict: MEASUREMENT_CHANGED / "
       "NOT_RESOLVED / SYSTEM_CHANGED", _R, _EXP_REGRESSION, "A new metric is worse", "regression",
       "accuracy dropped after my change", "the validation loss went up after the update", "apparent regression",
       "the new version is worse than the baseline", call="sweep_compare"),
    _r("regression.measurement", f"{_A} 14", "run comparison", ("compare", "sweep"), "MEASUREMENT_CHANGED (eval fingerprint)",
       _R, _EXP_MEASUREMENT, "The evaluation changed, not the model",
       "the validation split changed", "the metric is computed differently now", "different checkpoint selection rule",
       "same validation examples, same preprocessing, same aggregation?", call="sweep_compare"),
    _r("regression.bisect", f"{_A} 14", "run comparison", ("bisect",), "the culprit change, confirmed alone", _R, _EXP_BISECT,
       "Several changes at once: which one caused the regression",
       "which commit caused the regression", "many changes between the good and the bad run", "find the culprit change"),
    _r("regression.interaction", f"{_A} 14", "run comparison", ("factorial",), "main effects and the interaction", _R,
       _EXP_FACTORIAL, "Changes interact",
       "each change helps alone but together they are worse", "two changes interact"),
    _r("regression.nondeterminism", f"{_A} 14", "run comparison", ("determinism", "rng_audit"), "same seed twice: bit-identical?",
       _R, _EXP_DETERMINISM, "The same seed gives different results",
       "the run is not reproducible", "nondeterministic training", "results change between identical runs",
       "two runs with the same seed disagree",
       "results differ between CPU and GPU"),
    _r("regression.rng_workers", f"{_A} 14", "run comparison", ("rng_audit",), "which RNG streams reproduce per num_workers",
       _R, _EXP_RNG, "Results change with num_workers",
       "augmentations repeat across workers", "random augmentation is identical in every worker",
       "not reproducible with num_workers > 0"),
    _r("regression.gate", f"{_A} 14", "run comparison", ("Gate",), "threshold and held-out false-alarm rate", _R, _EXP_GATE,
       "I need a CI regression threshold that does not false-alarm",
       "the CI gate is flaky", "false alarms from the regression check", "what threshold should fail the build"),
    # Chapter 31
    _r("ch31.overfit", f"{_C31}: training improves, validation worsens", "input representation",
       ("stage_trace", "DiagnosticSet"), "train vs validation pipeline; per-slice errors", _T, _EXP_OVERFIT,
       "Training improves and validation worsens",
       "overfitting", "the validation loss rises while the training loss falls", "big gap between train and validation",
       "duplicates between train and validation", stop="overfit"),
    _r("ch31.memorized", f"{_C31}: memorized or repetitive", "run comparison", ("DiagnosticSet", "sweep"),
       "designed prompts across seeds", _R, _EXP_MEMORIZED, "Outputs look memorized or repetitive",
       "the model repeats the same phrases", "the generated text copies the training data", "the adapter binds the "
       "subject to its background", stop="memorized"),
    _r("ch31.export", f"{_C31}: exported model differs", "run comparison", ("compare_outputs",),
       "outputs.fed_differently / outputs.train_mode / outputs.diverged (first diverging layer)", _R, _EXP_EXPORT,
       "The exported model differs",
       "the quantized model gives different answers", "the quantized model's accuracy dropped",
       "the ONNX model outputs differ", "merged adapter differs from "
       "the unmerged one", "fresh-process inference differs from in-process output", "the reloaded checkpoint "
       "predicts differently", stop="export"),
    _r("ch31.after_change", f"{_C31}: diagnostic dataset", "run comparison", ("DiagnosticSet", "compare_outputs"),
       "diagnostic.changed", _R, _EXP_DIAGSET, "Outputs changed after a dependency upgrade",
       "answers changed after changing preprocessing", "behavior changed after a library update",
       "known examples give different answers now", stop="diagset"),
    # Start here
    _r("start.packet", f"{_A}: the minimum evidence packet", "learning chain", ("evidence_packet",),
       "the packet's fields", _T, _EXP_PACKET, "Something is wrong and I don't know where to start",
       "what should I record before changing code", "several things are broken at once",
       "the model fails and I don't know why", stop="1"),
)

# --- the matching vocabulary ------------------------------------------------------------------------------------------
#: (replacement concept tokens, regex patterns) applied IN ORDER to the lower-cased text, so specific phrasings are
#: consumed before general ones ("not finite" before "finite", "zero_grad" before "zero"). Concept tokens are upper
#: case so later (lower-case) patterns can never match inside them. Words no pattern covers are stemmed and kept.
SYNONYMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # verbatim error messages and very specific phrasings
    ("OOM", (r"out[\s_-]?of[\s_-]?memory", r"\boom\b", r"outofmemoryerror", r"ran out of (?:gpu |cuda |device )?(?:memory|vram)",
             r"runs? out of (?:gpu |cuda )?(?:memory|vram)", r"memory (?:error|exhausted|exhaustion)",
             r"not enough (?:gpu |cuda )?memory", r"(?:allocation|failed to allocate)")),
    ("MATMUL", (r"mat1 and mat2(?: shapes)?", r"can ?not be multiplied", r"\bmatmul\b", r"matrix multipl\w*")),
    ("FLATTEN", (r"\bin_?features\b", r"\bin features\b", r"flatten\w*")),
    ("CONV CHANNEL DIFFER", (r"expected input(?:\[[^\]]*\])? to have \d+ channels", r"groups ?= ?1,? weight of size")),
    ("CONV CHANNEL", (r"\bin_?channels\b",)),
    ("AUTOGRAD NOGRADFN", (r"does not require grad and does not have a grad_?fn", r"(?:has )?no grad_?fn",
                           r"grad_?fn (?:is |== ?)?none", r"requires_?grad (?:is |= ?|== ?)?false",
                           r"does not require grad")),
    # attention
    ("CAUSAL", (r"causal\w*", r"future[\s-](?:token|position|word|step)s?", r"look[\s-]?ahead", r"\bsees? (?:the )?future",
                r"(?:peek\w*|leak\w*) (?:at |from |into )?(?:the )?future", r"attends? to (?:the )?(?:future|later)",
                r"autoregressive mask", r"triangular mask", r"\btril\b|\btriu\b", r"\bthe future\b")),
    ("ATTN REFERENCE", (r"scaled_?dot_?product_?attention", r"\bsdpa\b", r"flash[\s-]?attention")),
    ("SQRT", (r"1 ?/ ?sqrt\s*\(?\s*\w*\s*\)?", r"sqrt\s*\(?\s*d\w*\s*\)?", r"\bd_k\b")),
    ("ATTN ATTNWEIGHT", (r"attention (?:weights?|probs?|probabilit\w*|scores?|matri\w+|maps?|rows?|logits)",)),
    ("HEADS LAYOUT", (r"(?:split\w*|merg\w*) (?:into |the )?heads?", r"head[\s-](?:split\w*|merg\w*)",
                      r"merge\s*\(\s*split")),
    ("ATTN", (r"self[\s-]?attention", r"multi[\s-]?head(?:ed)?(?: attention)?", r"\bmha\b", r"attention\w*", r"\battn\b")),
    ("HEADS", (r"\bheads\b", r"num_?heads", r"per[\s-]head")),
    ("ROWSUM", (r"sums? to (?:one|1)\b", r"rows? (?:do not |does not )?sums?", r"normali[sz]\w* over (?:the )?(?:keys?|tk)",
                r"(?:over|along) the wrong (?:dim\w*|axis)")),
    ("MASKED", (r"padding (?:masks?|tokens?)", r"key_?padding_?mask", r"pad tokens?", r"fully (?:masked|blocked)",
                r"masked (?:positions?|tokens?|keys?|rows?)")),
    # compiler
    ("RECOMPILE", (r"re[\s-]?compil\w*", r"guards? (?:fail\w*|miss\w*)", r"fail\w* guards?", r"cache[_\s]?(?:size[_\s]?)?limit",
                   r"recompile_limit", r"f[ae]ll\w* back to eager")),
    ("GRAPHBREAK", (r"graph[\s_-]?breaks?", r"fullgraph", r"not (?:fully )?captured", r"break\w* the graph")),
    ("COMPILE COLD", (r"compil\w* (?:takes?|took|is taking) (?:too long|forever|minutes|ages|long)",)),
    ("COMPILE", (r"torch\.compile\w*", r"\bcompil\w*", r"\bdynamo\b", r"\binductor\b", r"torchinductor")),
    ("VARYSHAPE", ((r"(?:new|different|varying|variable|changing|dynamic|unseen) (?:input |sequence |seq |batch |prompt )?"
                   r"(?:lengths?|shapes?|sizes?|seq[\s_]?lens?)"), r"sequence lengths?", r"seq[\s_]?lens?")),
    ("PAUSE", (r"paus\w*", r"stall\w*", r"hiccups?", r"stutter\w*", r"hitch\w*", r"spik\w*")),
    # export, deployment, reload
    ("CONFIG", (r"\bconfig\w*", r"hyper[\s-]?param\w*", r"\bsettings?\b")),
    ("EXPORT", (r"export\w*", r"\bonnx\w*", r"torchscript", r"torch\.jit", r"\bjit\b", r"tflite", r"core ?ml", r"tensorrt",
                r"\bgguf\b", r"llama\.cpp", r"deploy\w*", r"serving", r"\bserved\b", r"production", r"inference server")),
    ("QUANT", (r"quanti[sz]\w*", r"\bint[48]\b", r"\bfp8\b", r"\bgptq\b", r"\bawq\b", r"bitsandbytes")),
    ("ADAPTER", (r"\blora\b", r"adapters?", r"\bunmerged\b", r"merg\w* (?:the )?(?:adapter|weights|lora)\w*")),
    ("RELOAD", (r"fresh[\s-]process", r"in[\s-]process", r"new process", (r"(?:re)?load\w* (?:the )?(?:saved )?"
                r"(?:checkpoint|model|weights|state_?dict)"), r"after (?:re)?loading", r"reloaded")),
    ("STATEDICT", (r"state_?dict", r"checkpoints?", r"torch\.save", r"sav\w* (?:the |my )?(?:model|weights|layer)")),
    # text inputs and labels
    ("TOKENIZER", (r"tokeni[sz]\w*", r"special tokens?", r"\bbos\b|\beos\b", r"vocab\w*", r"\bbpe\b", r"sentencepiece")),
    ("TEMPLATE", (r"(?:chat|prompt|instruction) templates?", r"generation prefix", r"system prompt")),
    ("TRUNCATE", (r"truncat\w*", r"cut off", r"max_?length")),
    ("RESAMPLE", (r"re[\s-]?sampl\w*", r"sampl\w* rates?", r"\bkhz\b")),
    ("LABELMAP", (r"label (?:ids?|index|indices|mapping|map|names?)", r"class (?:mapping|map|names?|ids?|index|indices|order)",
                  r"id2label|label2id", r"num_?classes (?:differs?|does not match|is wrong)")),
    ("EMPTYMASK", (r"empty mask", r"no supervised tokens?",
                   r"all (?:the )?(?:labels|targets|tokens) (?:are )?(?:masked|-100|ignored)",
                   r"ignore_?index", r"supervised[\s-]tokens? count", r"number of supervised tokens")),
    ("LOSSREDUCE", (r"summ?ed over (?:\w+ )?(?:different|variable|varying) lengths", r"sum instead of (?:the )?mean",
                    r"reduction ?= ?.?sum.?", r"loss scale", r"scale of the loss")),
    ("INITLOSS", (r"initial loss", r"(?:first|starting|untrained|initial) loss", (r"loss (?:at|before) (?:the )?"
                  r"(?:start|step ?0|init\w*|first step|training starts)"), r"loss before training", r"step ?0",
                  r"\bln ?\(\s*\w+\s*\)", r"\blog ?\(\s*(?:num_?classes|\d+|c|k|v|vocab\w*)\s*\)",
                  r"log of (?:the )?(?:number of )?(?:num_?)?classes")),
    ("OVERFITBATCH", ((r"(?:over[\s-]?fit|memori[sz]e) (?:a |one |the |even a |even one )?(?:single |tiny |small |fixed |one )*"
                      r"(?:batch|example|sample|subset)\w*"), r"(?:single|tiny|one) (?:fixed )?batch")),
    ("OVERFIT", (r"over[\s-]?fit\w*", r"generali[sz]\w*", r"gap between train\w* and val\w*")),
    ("MEMORIZE", (r"memori[sz]\w*", r"repetitiv\w*", r"repeats? (?:itself|the same)", r"regurgitat\w*", r"verbatim",
                  r"copies (?:the )?training (?:data|examples)")),
    ("NONSENSE", (r"nonsense", r"gibberish", r"garbage", r"\bjunk\b", r"meaningless", r"word salad", r"incoherent")),
    ("ALIGN", (r"off[\s-]by[\s-]one", r"shift\w*(?: twice)?", r"misalign\w*", r"\balign\w*", r"next[\s-]token")),
    ("LABEL", (r"\blabels?\b", r"\btargets?\b", r"ground[\s-]truth", r"annotations?")),
    ("SOFTMAX", (r"log_?softmax", r"softmax\w*", r"probabilit\w*", r"sigmoid")),
    ("LOSSFN", (r"cross[\s_-]?entropy\w*", r"\bnll\w*", r"\bbce\w*", r"\bmse\w*", r"loss[\s_]?(?:function|fn)", r"criterion",
                r"library loss")),
    ("LOGIT", (r"logits?",)),
    ("WRONGSIGN", (r"wrong sign", r"negative loss", r"loss (?:is |goes |becomes )?negative", r"maximi[sz]\w*",
                   r"gradient ascent", r"loss (?:goes up|increases|rises|grows) (?:as|when|while)")),
    ("OBJECTIVE", (r"objective\w*", r"wrong loss")),
    # non-finite values
    ("NAN", (r"non[\s-]?finite", r"not finite", r"\bnans?\b", r"\binf(?:s|inity|inite)?\b", r"overflow\w*")),
    ("EXPLODE", (r"explod\w*", r"blows? up", r"blew up", r"blowing up")),
    ("FINITE", (r"\bfinite\b",)),
    # initialization and the raw network
    ("ZEROINIT", (r"zeros?[\s-]init\w*", r"initiali[sz]\w* (?:\w+ )?(?:\w+ )?(?:to|with|at|as) (?:all )?zeros?",
                  r"weights (?:are |set to )?(?:all )?zeros?\b", r"nn\.init\.zeros_")),
    ("SYMMETRIC", (r"symmetr\w*", r"(?:hidden units|neurons|units) (?:are |all |look |stay )*(?:the same|identical)",
                   r"learn the same (?:thing|features|function)", r"(?:same|identical) weights?", r"constant init\w*")),
    ("INIT", (r"initiali[sz]\w*", r"\binit\b", r"xavier", r"kaiming")),
    ("NONLINEAR", (r"(?:no|missing|forgot\w*(?: the)?|without(?: an?| any)?) (?:activation|non[\s-]?linearit|relu|gelu|tanh)\w*",
                   r"(?:effectively|just|purely|only|basically) (?:a )?linear", r"linear model", r"\bxor\b",
                   r"stack\w* linear layers")),
    ("UNIT", (r"hidden (?:units?|neurons?)", r"neurons?", r"\bunits?\b(?! change)")),
    # evaluation mode
    ("TRAINMODE", (r"train(?:ing)?[\s-]mode", r"model\.train\(\)", (r"(?:without|forgot\w*(?: to call)?|missing|no) "
                   r"model\.?eval(?:\(\))?"), r"dropout (?:is )?(?:still )?(?:active|on|enabled)",
                   r"(?:batch ?norm|bn) (?:running )?(?:stats|statistics)", r"running (?:mean|var|stats)")),
    ("DROPOUT", (r"dropout", r"batch[\s-]?norm\w*", r"\bbn\b")),
    ("EVALPATH", (r"eval(?:uation)? (?:contract|path|code|script|pipeline|split|protocol|harness)",
                  r"(?:validation|val|test|eval) (?:split|set|examples) (?:changed|differs?|is different)",
                  r"different (?:validation|val|eval|test) (?:split|set|examples|data)", r"aggregat\w*",
                  r"checkpoint[\s-]selection", r"computed differently",
                  r"different (?:validation |val |eval |test )?(?:split|subset|examples)", r"(?:split|examples) changed",
                  r"metric (?:definition|computation|code)",
                  r"fingerprint\w*")),
    ("PROVENANCE", (r"(?:fitted|fit|computed|calculated|estimated) on (?:the )?(?:validation|val|test|whole|full|entire|all)",
                    r"provenance", r"data leak\w*", r"leak\w* between train\w* and (?:val|test)\w*")),
    ("DUPLICATE", (r"duplicat\w*", r"overlap between train\w* and")),
    ("VAL", (r"\bval(?:idation|id)?\b", r"\bval_", r"dev set", r"held[\s-]out", r"test set", r"holdout")),
    ("EVAL", (r"model\.eval\(?\)?", r"\beval(?:uat\w*)?\b", r"\binference\b", r"test[\s-]time", r"\bat test\b")),
    ("METRIC", (r"accura\w*", r"\bacc\b", r"\bf1\b", r"\bbleu\b", r"\bauc\b", r"perplexity", r"\bmetrics?\b", r"\bwer\b")),
    # regressions and the lab
    ("SMALLDIFF", (r"[+-]?\b0?\.0+\d+", r"[+-]?\b0?\.\d+ ?%",
                   r"\btiny (?:improvement|gain|difference|change|increase|decrease|drop)",
                   r"\bslight\w*", r"marginal\w*", r"small (?:improvement|gain|difference|change|increase|drop|decrease|boost)",
                   r"a (?:tiny|little) (?:bit )?better")),
    ("NOISE", (r"\bnois\w*", r"\bluck\w*", r"\bfluke\b", r"run[\s-]to[\s-]run", r"seed (?:variation|variance|noise|spread)",
               r"random (?:variation|chance|fluctuation)", r"significan\w*", r"is (?:it|this|that) real",
               r"real (?:improvement|effect|difference|gain|change)", r"statistic\w*", r"\bvarian\w*", r"p[\s-]?value")),
    ("ONERUN", (r"(?:one|a single|single|1) (?:run|seed|trial)s?\b",)),
    ("SEED", (r"\bseeds?\b", r"random state")),
    ("NONDET", (r"non[\s-]?determinis\w*", r"(?:not |ir|non[\s-]?)?reproduc\w*", r"determinis\w*", r"bit[\s-]?identical",
                r"(?:between|across) identical runs",
                r"different (?:results?|numbers|outputs|curves) (?:each|every) (?:time|run)",
                r"use_deterministic_algorithms", r"cudnn\.benchmark")),
    ("WORKERS MORE", (r"more (?:data ?loader )?(?:workers|threads|processes)",
                      r"increas\w* (?:the )?(?:num_?workers|workers|number of workers)", r"adding (?:more )?workers")),
    ("WORKERS", (r"num_?workers", r"\bworkers?\b", r"worker processes")),
    ("NOHELP", (r"(?:does|did|do|will) not (?:help|speed (?:it |things )?up|make (?:it |things )?faster|change anything)",
                r"no (?:speed ?up|faster|effect|improvement|difference)", r"makes? no difference", r"not any faster",
                r"the same (?:throughput|speed)")),
    ("LOADER", (r"data ?loader\w*", r"data[\s-]?loading", r"input pipeline", r"data pipeline", r"\bloader\b",
                r"next\(iter\w*\)", r"collat\w*", r"prefetch\w*", r"pin_?memory",
                r"(?:for|on) (?:the )?(?:next )?batch(?:es)?\b")),
    ("IO", (r"(?:image |jpe?g |png |video |audio )?decod\w*", r"disk(?: access| io| reads?)?", r"\bi/o\b", r"reading files",
            r"file reads?")),
    ("PREPROC", (r"augment\w*", r"random (?:crop|flip|rotation|resize)\w*", r"\btransforms?\b", r"transformation\w*",
                 r"pre[\s-]?process\w*", r"to_?tensor", r"resiz\w*")),
    ("CPUBOUND", (r"cpu (?:is )?(?:saturated|maxed|at 100|pegged|busy|bound|contention|limited)", r"cpu[\s-]bound",
                  r"compet\w* (?:with|for) (?:the )?(?:training loop|consumer|cpu)\w*")),
    ("LAUNCH", (r"launch[\s-]?bound", r"kernel launch\w*", r"(?:small|tiny) (?:kernels|ops|operations)", r"overhead[\s-]bound",
                r"python overhead", r"(?:tiny|small) model")),
    ("TRANSFER", (r"host[\s-]to[\s-]device", r"\bh2d\b", r"(?:cpu|host)[\s-]to[\s-](?:gpu|cuda)", r"copy\w* to (?:the )?gpu",
                  r"transfer\w*")),
    ("MOVETO", (r"\.to\s*\(", r"\.cuda\s*\(\)", r"move\w* (?:the )?(?:model )?to (?:the )?(?:gpu|cuda|device)")),
    ("DEVICE", (r"same device", r"different devices?", r"cuda:\d and cpu", r"\bdevices?\b", r"on (?:the )?cpu")),
    ("GPU IDLE", ((r"(?:gpu|cuda|device|card)(?: util\w*| usage| load)?(?: is| at| around| only| about| stays?| sits?| hover\w*|"
                  r" of| below| under| barely| ~)* ?\d{1,2} ?%"), r"\d{1,2} ?% (?:gpu|cuda) (?:util\w*|usage)")),
    ("GPU", (r"\bgpus?\b", r"\bcuda\b", r"nvidia[\s-]smi", r"\b[avh]100\b", r"accelerator", r"graphics card")),
    ("IDLE", (r"\bidle\b", r"under[\s-]?utili[sz]\w*", r"(?:low|poor) (?:gpu |device )?utili[sz]\w*",
              r"utili[sz]ation (?:is )?(?:low|poor|bad|terrible)", r"starv\w*",
              r"wait\w* (?:for|on) (?:the )?(?:data|batch\w*|input\w*|loader|next batch)",
              r"not (?:fully )?(?:utili[sz]ed|busy|saturated)")),
    ("UTIL", (r"utili[sz]ation", r"\butil\b")),
    ("PERF SLOW", (r"(?:low|poor|bad) (?:throughput|speed)", r"throughput (?:is )?(?:low|poor|bad)")),
    ("PERF", (r"throughput", r"\bit/s\b", r"iter(?:ation)?s?/s(?:ec)?", (r"(?:samples|images|tokens|examples|steps|iterations|"
              r"batches|items|sequences) (?:per |/ ?)(?:s|sec|second)\b"), r"latency", r"step[\s-]times?", (r"time per "
              r"(?:step|batch|iteration)"), r"speed\b", r"\bfps\b", r"wall[\s-]?clock", r"performance")),
    ("COLD", (r"warm[\s-]?up", r"cold[\s-]?start", r"first (?:\w+ )?(?:call|iteration)s?\b",
              r"first (?:step|batch|epoch) (?:is|takes|was) (?:much |very )?(?:slow\w*|long)")),
    ("SLOW", (r"slow\w*", r"sluggish", r"takes? (?:forever|ages|too long|long|minutes|hours)", r"too long", r"crawl\w*",
              r"bottleneck\w*")),
    ("BENCH", (r"benchmark\w*", r"timings?\b", r"perf_?counter", r"time\.time\(\)")),
    ("PROFILE", (r"profil\w*",)),
    ("SYNC", (r"synchroni[sz]\w*", r"\.item\(\)", r"async\w*")),
    ("RETAINGRAPH", (r"append\w* (?:the |my )?loss(?:es)?(?: tensors?)? to a (?:python )?list", r"retain\w* (?:the )?graphs?",
                     r"keep\w* (?:the )?(?:generated )?logits")),
    ("MEMORY ALLOCATED", (r"memory_?allocated\w*(?:\(\))?", r"allocated memory", r"than allocated")),
    ("MEMORY RESERVED", (r"memory_?reserved\w*(?:\(\))?", r"reserved memory", r"memory reserved", r"cach\w* allocator",
                         r"\ballocator\b")),
    ("MEMORY", (r"\bvram\b", r"\bmemory\b", r"\bram\b", r"\bmem\b")),
    ("GROW", (r"(?<=MEMORY)\s+(?:rises|rising|rose|increas\w*|goes up|went up|going up)", r"\bgrow\w*", r"climb\w*", r"creep\w*",
              r"keeps? (?:increasing|rising|going up)", r"steadily (?:increas|ris)\w*", r"balloon\w*")),
    ("UP", (r"increas\w*", r"\brises\b|\brising\b|\brose\b", r"go(?:es)? up|went up|going up", r"\bhigher\b")),
    # the learning chain and the update
    ("FLAT", (r"flat(?:line\w*)?\b", r"plateau\w*", r"\bstuck\b", r"stagnat\w*",
              r"(?:will|does|did|do|is|are|was|has|have) not (?:go(?:ing)?|come|went|gone) (?:down|to zero|lower)",
              (r"(?:will|does|did|do|is|are|was|has|have|can) not (?:be )?"
               r"(?:decreas|fall|drop|improv|reduc|declin|shrink|lower)\w*"),
              r"never (?:decreas|improv|drop|fall|go(?:es)? down|went down)\w*",
              r"not (?:decreas|fall|drop|improv|reduc|declin)\w*",
              r"barely (?:mov|chang|decreas|drop)\w*", r"(?:stays?|remains?) (?:at|around|near|high)")),
    ("DOWN", (r"decreas\w*", r"go(?:es)? down|went down|going down", r"\bdrop\w*", r"\bfell\b|\bfalls?\b|falling",
              r"\blower\b")),
    ("ZEROGRAD", (r"zero_?grad\w*(?:\s*\(\))?", r"zero(?:ing|ed|s)? (?:out )?(?:the )?grad(?:ient)?s", (r"clear\w* (?:the )?"
                  r"(?:old )?grad(?:ient)?s"), r"set_to_none", r"reset\w* (?:the )?grad(?:ient)?s")),
    ("ACCUM", (r"accumulat\w*", r"carr(?:y|ied|ies) over", r"contaminat\w*", r"add(?:s|ed)? up", r"pil\w* up",
               r"keeps? (?:getting )?(?:bigger|larger|growing)")),
    ("GRAD NONE", (r"grad(?:ient)?s? (?:is |are |=|==|stays? |remains? |of |equal to )?none", r"\.grad (?:is )?none",
                   r"\bno grad(?:ient)?s?\b",
                   r"(?:missing|without) (?:a |any )?grad(?:ient)?s?",
                   (r"(?:never|not) (?:gets?|receives?|got|getting|receiving) "
                   r"(?:a |any )?grad(?:ient)?s?"), r"gets? no grad(?:ient)?s?", r"find_unused_parameters",
                   r"unused param\w*", r"(?:was|were|is|are) not used")),
    ("GRAD ZERO", (r"grad(?:ient)?s? (?:is |are |=|==|stays?|remains?)? ?(?:all |exactly |identically )?(?:zeros?|0)\b",
                   r"zero grad(?:ient)?s?", r"all[\s-]zeros? grad\w*", r"vanish\w*", r"dead relus?", r"zero tensors?")),
    ("DETACH", (r"detach\w*", r"no_?grad\b", r"inference_?mode", r"\.data\b", (r"branch (?:did not|does not|never) "
                r"(?:execut|run)\w*"), r"rebind\w*|rebound")),
    ("AUTOGRAD", (r"autograd", r"grad_?fn", r"requires_?grad", r"computation(?:al)? graph", r"is_?leaf")),
    ("GRAD", (r"\bgrad(?:ient)?s?\b", r"\.grad\b", r"derivatives?", r"backprop\w*")),
    ("BACKWARD", (r"\bbackward\w*",)),
    ("HEALTHY", (r"(?:look|looks|seem|seems|are|is) (?:fine|ok|okay|healthy|normal|reasonable)", r"healthy")),
    ("REGISTER", (r"(?:not|never) regist\w*", r"unregist\w*", r"python list", r"plain list", r"list of (?:layers|modules)",
                  r"not in (?:model\.)?(?:parameters|named_parameters|state_dict|modules)\w*", r"modulelist",
                  r"register_(?:buffer|parameter)", r"\bbuffers?\b", r"\bregist\w*")),
    ("STALE OPTIM", (r"(?:before|after) (?:creating|building|constructing|making|defining) (?:the )?optimi[sz]er",
                     r"optimi[sz]er (?:was |is )?(?:built|created|constructed) before", r"\bstale\b",
                     r"old param\w*|no longer in the model")),
    ("REPLACE HEAD", ((r"(?:swap\w*|replac\w*|chang\w*) (?:out )?(?:the |my )?"
                      r"(?:classifier|head|(?:last|final|output) layer)\b"),)),
    ("REPLACE", (r"replac\w*", r"reassign\w*", r"swapped out", r"re-?creat\w*", r"rebuil\w*")),
    ("IDENTITY", (r"same (?:parameter )?object", r"object identity", r"\bid\(", r"identit\w*")),
    ("OPTIM", (r"optimi[sz]er\w*(?:\.step(?:\(\))?)?", r"\boptim\b", r"\badam\w*", r"\bsgd\b", r"param(?:eter)?[\s_]groups?",
               r"\.step\(\)", r"lr[\s_]?schedul\w*")),
    ("LR", (r"learning[\s-]rates?", r"\blrs?\b")),
    ("NOCHANGE", (r"never (?:mov|chang|updat|budg|train)\w*", (r"(?:does|did|do|will|is|are|was|were|has|have) not (?:be )?"
                  r"(?:mov|chang|updat|budg|train)\w*"), r"not (?:being )?(?:mov|chang|updat)\w*",
                  (r"(?:stays?|remains?|stay\w*) "
                  r"(?:the )?same"), r"unchang\w*", r"frozen", r"no change", r"identical before and after", r"does nothing",
                  r"constant")),
    ("NOTLEARN", (r"not (?:learn|converg|fit|train)\w*", r"never (?:learn|converg)\w*", r"fails? to (?:learn|converg|fit)\w*",
                  r"no learning", r"learns? nothing", r"useless")),
    ("BROKEN", (r"(?:does|do|did|is|are) not work\w*", r"\bbroken\b", r"something is wrong", r"do not know (?:why|where)")),
    ("IMPROVE", (r"improv\w*", r"\bbetter\b", r"\bgains?\b", r"boost\w*")),
    ("WORSE", (r"wors\w*", r"degrad\w*", r"deteriorat\w*", r"\bhurts?\b", r"regress\w*")),
    ("DIFFER", (r"differ\w*", r"disagree\w*", r"mismatch\w*", r"(?:does|do|did) not match", r"discrepan\w*", r"deviat\w*",
                r"not the same", r"inconsisten\w*", r"diverg\w*", r"not equal", r"!=", r"\bis not\b")),
    ("BISECT", (r"bisect\w*", r"culprit", r"which (?:of the |one of the )?(?:\w+ )?(?:changes?|commits?)",
                r"(?:several|many|multiple|\d+) (?:changes|commits|edits)", (r"between (?:the )?(?:good|working) and (?:the )?"
                r"(?:bad|broken)"))),
    ("INTERACT", (r"interact\w*", r"together (?:they )?(?:are |is |get |got )?(?:worse|hurt)", (r"each (?:change |one )?"
                  r"(?:helps|improves|works|is fine) (?:alone|on its own|separately|individually)"), r"combined",
                  r"two changes", r"2x2|factorial")),
    ("GATE", (r"\bci\b", r"continuous integration", r"\bgates?\b", r"threshold\w*", r"false alarm\w*", r"false positive\w*",
              r"fail (?:the )?(?:build|pipeline)")),
    ("UPGRADE", (r"upgrad\w*", r"dependenc\w*", r"(?:library|package) (?:update|version)\w*", (r"(?:new|newer|updated) "
                 r"(?:torch|pytorch|cuda|transformers|numpy|driver) version"), r"pip install", r"after updating")),
    ("DIAGSET", (r"diagnostic (?:set|dataset|examples)", r"known (?:examples|cases|answers)", r"golden (?:set|examples|outputs)",
                 r"(?:edge|boundary) cases?", r"abstain\w*|abstention")),
    ("WRONGANSWER", (r"wrong (?:answer|prediction|output|class)s?", r"answers? (?:is |are )?wrong", r"predicts? (?:the )?wrong",
                     r"misclassif\w*")),
    ("INPUT", (r"\binputs?\b",)),
    ("CHANNEL ORDER", (r"\bbgr\b|\brgb\b", r"channel order", r"opencv|cv2",
                       r"(?:look|looks|appear\w*|are|is) (?:too |all )?(?:blue|bluish|purple|orange|reddish)\b")),
    ("CHANNEL LAYOUT", (r"channels?[\s_-]?(?:last|first)", r"\bnhwc\b|\bnchw\b|\bhwc\b|\bchw\b")),
    ("CHANNEL", (r"colou?rs?\b", r"channels?\b")),
    ("NORMALIZE TWICE", (r"normali[sz]\w* twice", r"double[\s-]normali[sz]\w*")),
    ("LAYERNORM", (r"layer ?norm\w*", r"rms ?norm\w*")),
    ("NORMALIZE", (r"(?:mean|std) (?:and|&|/) (?:std|mean)", r"imagenet (?:mean|stats|statistics)", r"standardi[sz]\w*",
                   r"normali[sz]\w*", r"\b0 ?(?:-|to|\.\.) ?255\b", r"\b0 ?(?:-|to|\.\.) ?1\b", r"\[0 ?, ?1\]",
                   r"pixel (?:range|values?)", r"(?:value|input) range", r"divid\w* by 255", r"\bscaler\b",
                   r"statistics")),
    ("MASK", (r"segmentation (?:masks?|labels?)", r"\bmasks?\b", r"bounding box\w*", r"\bbboxes?\b", r"keypoints?")),
    ("IMAGE", (r"\bimages?\b", r"pictures?", r"photos?", r"\bpixels?\b")),
    ("SPATIALAUG", (r"\bflip\w*", r"\bcrop\w*", r"rotat\w*")),
    ("LAYOUT", (r"size and stride", r"reshap\w*", r"\.view\b|\bview\b", r"transpos\w*", r"permut\w*", r"swapaxes|movedim",
                r"einsum|rearrang\w*", r"squeez\w*|unsqueez\w*", r"(?:non[\s-]?)?contiguous")),
    ("CONVPARAM", (r"\bstrides?\b", r"\bpadding\b", r"dilation", r"kernel[\s_]size")),
    ("SCRAMBLE", (r"scrambl\w*", r"garbl\w*", r"jumbl\w*", r"mix\w* up|mix-up|mixup",
                  r"(?:in )?the wrong (?:place|order|position)s?",
                  r"\bmoved\b", r"swapped", r"\bswap\w*")),
    ("SPATIAL AXIS", (r"height and width|width and height|\bh and w\b",)),
    ("PERPOSITION", (r"one score per (?:\w+ )?(?:position|token|time ?step)", r"per (?:token|position) instead of",
                     r"\[b, ?t, ?1\]")),
    ("AXIS", (r"\bax[ie]s\b", r"\bdim(?:ension)?s?\b", r"batch[\s_]first", r"\[\s*[bt]\s*,\s*[tb]\s*,\s*d\s*\]")),
    ("SPATIAL", (r"spatial", r"feature[\s-]?maps?", r"resolutions?", r"output size", r"input size")),
    ("SHAPE DIFFER", (r"size mismatch", r"shape mismatch")),
    ("SHAPE", (r"\bshapes?\b", r"\bsizes?\b")),
    ("DTYPE", (r"expected scalar type", r"\bdtypes?\b", r"\bfloat(?:16|32|64)?\b", r"\bhalf\b", r"bfloat16|\bbf16\b|\bfp16\b",
               r"\bdouble\b", r"\blong\b", r"\bint(?:64|32)\b", r"(?:long|float|int|double|half)tensor")),
    ("CONV", (r"\bconv(?:olution\w*|\dd|s|net\w*)?\b", r"\bcnns?\b", r"\bkernels?\b", r"\bpool\w*", r"resnet\w*|vgg\w*")),
    ("HEAD", (r"classifier(?: layer)?", r"(?:last|final|output|top|new) layer", r"\bhead\b")),
    ("LINEARLAYER", (r"nn\.linear", r"linear layers?", r"\bfc(?: layer)?\b", r"fully[\s-]connected", r"dense layer",
                     r"final linear")),
    ("FEATURE", (r"embeddings?\b", r"representations?\b", r"feature vectors?", r"\bfeatures?\b", r"hidden states?",
                 r"\blatents?\b", r"\bvectors?\b", r"d-vector")),
    ("COLLAPSE", (r"collaps\w*", r"(?:all|every)(?: the)? (?:same|identical)", (r"(?:are|is|look|become) (?:all )?(?:identical|"
                  r"the same)"), r"same direction", r"degenerat\w*")),
    ("SIMILARITY", (r"cosine\w*", r"dot[\s-]?products?", r"similarit\w*", r"distances?", r"euclidean")),
    ("INVARIANT", (r"invarian\w*", r"rescal\w*", r"units? changes?|chang\w* units|different units")),
    ("DOMINANT", (r"dominat\w*",)),
    ("SCALES", (r"(?:different|wildly different|varying) scales?", r"per[\s-]coordinate scales?")),
    ("NORMS", (r"\bnorms?\b",)),
    ("GENERATE", (r"generat\w*", r"completions?")),
    ("TEXT", (r"\btext\b", r"sentences?", r"\bwords?\b", r"\bprompts?\b", r"\bllms?\b", r"language models?", r"\bgpt\w*",
              r"phrases?")),
    ("LOSS", (r"\blosses\b|\bloss\b",)),
    ("GOOD", (r"excellent", r"\bgreat\b", r"very low", r"really low", r"near zero", r"close to zero", r"perfect",
              r"suspiciously (?:low|good)", r"too good", r"\bgood\b", r"\blow\b")),
    ("TRAIN", (r"\btrain\w*",)),
)
