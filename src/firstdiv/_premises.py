"""Evidence before FAIL (DESIGN "Trust: what a FAIL means"): for every check kind an instrument can FAIL, what it
assumes the program means (the premise), how it confirms that on the program's own behaviour before it FAILs, and
what it reports when it cannot.

A declared data table (exempt from the 400-line module limit), keyed by check kind (the ``check`` of a Finding, the
``kind`` of a Divergence; an f-string kind is listed once per value). :mod:`firstdiv._registry` serves it
(``premise(kind)``) and :func:`write_checks_md` writes ``docs/checks.md`` from it::

    python -c "import firstdiv._premises as p; p.write_checks_md('docs/checks.md')"

``confirmed=False`` marks a kind whose FAIL rests, on at least one path, on a premise the code does not confirm
yet; its ``unconfirmed`` says which path and what a correct program that FAILs there looks like. Imports nothing
heavy: ``import firstdiv`` reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OTHER_INSTRUMENTS", "PREMISES", "REGENERATE", "RULE", "Premise", "render_checks_md", "unconfirmed_kinds",
           "write_checks_md"]


@dataclass(frozen=True)
class Premise:
    """One check kind that can FAIL: the instrument that emits it (and any other that emits the same kind), what it
    assumes the program means, how that is confirmed before the FAIL, what happens when it cannot be, and whether
    every FAIL path of the kind is confirmed today."""

    instrument: str
    premise: str
    confirmation: str
    unconfirmed: str
    confirmed: bool = True
    also: tuple[str, ...] = ()

    @property
    def instruments(self) -> tuple[str, ...]:
        return (self.instrument, *self.also)


#: instruments that emit FAIL findings without an InstrumentSpec in the registry: name -> the module ``firstdiv``
#: loads it from (watch is a live-run instrument, the other two belong to the lab)
OTHER_INSTRUMENTS = {"watch": "firstdiv.instruments.watch", "rng_audit": "firstdiv.lab.rng_audit",
                     "determinism": "firstdiv.lab.determinism"}

#: the rule this table answers to, quoted from DESIGN.md ("Trust: what a FAIL means")
RULE = ("A check that can FAIL states its premise (what it assumes the program means) and confirms it on the program's "
        "own behaviour before it FAILs, with a counterfactual on copies of the user's objects: which targets the user's "
        "loss really ignores, whether the objective can reach the floor the check expects, how many distinct updates one "
        "step really applies, whether moved values are a permutation of the input. An unconfirmed premise gives a note "
        "or WARN that names the assumption and the argument that declares it, never a FAIL. The premise and its "
        "confirmation live with the check kind in the registry and in `docs/checks.md`.")

#: the command that rewrites docs/checks.md from this table
REGENERATE = "PYTHONPATH=src python -c \"import firstdiv._premises as p; p.write_checks_md('docs/checks.md')\""

_ALWAYS = "always confirmed: "
_OTHER = ("; a parameter the declared optimizer does not own and another optimizer train_step steps does (lr "
          "above 0), or one both own where the other finds a gradient on it when it steps (one call of train_step "
          "watched, everything restored), is trained by another objective: a note (_core.elsewhere)")
_DEPENDS = ("on another deep copy, with every RNG seeded alike, perturbing the parameters of its module (noise of half "
            "their spread, at least 0.1) moves the loss beyond its run-to-run noise (_core.invariance.loss_depends; a "
            "loss_fn reading the model through its closure, directly or one attribute down (t.D), reads the copy)")

PREMISES: dict[str, Premise] = {
    # ---- tensor_facts -------------------------------------------------------------------------------------------
    "facts.nonfinite_loss": Premise(
        "tensor_facts", "the loss on the known batch is finite",
        "the evidence packet's loss value is NaN or infinite",
        _ALWAYS + "a non-finite loss is the divergence whatever the program means"),
    # ---- stage_trace --------------------------------------------------------------------------------------------
    "stage.structure": Premise(
        "stage_trace", "each stage returns the next sample, and a stage that keeps the values but changes the shape "
        "only permutes (or flips) axes; declared dtype/shape/layout contracts and user structure probes hold",
        "the stage ran on a copy of the known sample: it returned None; or the output holds the input's values (z-scored, "
        "sorted) in a shape with the same axis sizes, and no axis permutation with flips of the input places them where "
        "they are (a reshape where a transpose was meant); contracts and probes are the user's declarations",
        "a shape change that alters the values, or sizes that are not a permutation of the input's, is not judged; a "
        "probe failing again after an earlier stage is a WARN (still failing since ...)"),
    "stage.numeric": Premise(
        "stage_trace", "the image's numeric interpretation (uint8 0..255, float 0..1, normalized ~N(0,1)) changes only "
        "as the stage's name says; declared range contracts and user numeric probes hold",
        "observed on the sample before and after the stage: non-finite values appear; or an integer image turned float "
        "with max > 1 (min >= 0) by a stage named like float/tensor, and the next stage declaring normalization "
        "statistics has them on the 0..1 scale (statistics on the 0..255 scale: the scale is meant, a PASS); or an "
        "already normalized image whose std changes more than x2 or mean more than 1 std, its output a per-channel affine "
        "map of its input (normalized twice); contracts and probes are declarations",
        "WARN of the same kind when no later stage declares normalization statistics (contracts range declares it), "
        "or when the jump is not a per-channel affine map (added noise, mixing); a stage named in augmentations= is "
        "exempt from the renormalized rule"),
    "stage.numeric.normalization": Premise(
        "stage_trace", "a stage that declares mean/std (a normalization, or the `normalized` contract) outputs "
        "(x - mean) / std of its input, per channel, with statistics on the input's scale",
        "the stage's own declared mean/std applied to its input on the copy is compared with its output per channel",
        "statistics that do not fit the sample (count, layout) leave the probe not applicable (no finding)"),
    "stage.semantics": Premise(
        "stage_trace", "the known-colour box declared in the sample's meta keeps its colour in the declared "
        "channel_order (default RGB); user semantics probes hold",
        "after each stage whose image has 3 channels in a display range, the box (moved along with flips, rotations "
        "and resizes) reads a mean colour within 64 of the declared one; a channel permutation that fits is named",
        "no known colour declared, the box outside the image or lost after a resize: not checked (no finding)"),
    "stage.semantics.channel_order": Premise(
        "stage_trace", "a normalization stage with declared mean/std receives channels in the order its statistics are "
        "written for",
        "after that stage the channel means are far from 0 and a permutation of the channels explains them (the "
        "declared statistics applied to swapped channels)",
        "no permutation explains them: reported as stage.numeric.normalization instead"),
    "stage.semantics.label_changed": Premise(
        "stage_trace", "a class label (declared by class_to_idx / label_rule / label_key) stays an integral class index "
        "through every stage not declared in augmentations=",
        "the label leaf read after each stage is a non-integral number",
        "stages named in augmentations= (mixup, label smoothing) are exempt; no declaration: not checked"),
    "stage.semantics.label_map": Premise(
        "stage_trace", "the stage that changes the label gives the class the declared mapping (class_to_idx / "
        "label_rule) says",
        "the class index after that stage differs from the declared one",
        "no expected class declared: a SKIPPED note, never a FAIL"),
    "stage.relationships": Premise(
        "stage_trace", "a spatial target stored beside the image (keys mask/masks/segmentation/seg, or label/target/y "
        "when spatial) is aligned with it, so every spatial transform of the image applies to it too",
        "the image's transform is identified among identity, flips, rot90/180/270 and transpose (up to a per-channel "
        "affine change of values) and the mask's likewise: they share none; or both had the same spatial size and only "
        "the image's changed; and the target must stay pixel-aligned: it is held under a mask's key or is a label map "
        "(integral values, at most 256 distinct); user relationship probes are declarations",
        "WARN of the same kind for a float target under label/target/y (a super-resolution target kept at full size "
        "looks the same; a ('relationships', fn) probe declares it); a transform that is not identified is no "
        "finding"),
    "stage.provenance": Premise(
        "stage_trace", "statistics a stage applies were fitted on the training split",
        "the stage callable (its object, or a partial's function) declares fitted_on / provenance, or "
        "meta['provenance'][stage] does, and the split named is val/valid/validation/dev/test/eval/holdout/trainval/"
        "all/full",
        "nothing declared: no finding (the category is listed as SKIPPED when no probe applied)"),
    "stage.train_eval": Premise(
        "stage_trace", "the evaluation pipeline (eval_stages=) runs the train pipeline's deterministic stages; only the "
        "stages named in augmentations= may differ",
        "both pipelines run on copies of the sample with the same seed; each eval output must equal (after a declared "
        "augmentation: agree in shapes, dtypes and coarse statistics with) a train output at or after the one the "
        "previous eval stage matched; before it FAILs, each undeclared train stage runs again on its own input under 8 "
        "other seeds, and the ones whose output changes (random) are compared as augmentations: the FAIL stands only if "
        "the pipelines still part; the eval pipeline raising or returning None also FAILs",
        "WARN of the same kind when the difference goes away once the random undeclared stages are compared as "
        "augmentations (the message names them and asks for augmentations=)"),
    "stage.raised": Premise(
        "stage_trace", "every stage runs on the known sample",
        "the stage raised on a copy of the sample (the trace up to it is kept)",
        _ALWAYS + "a stage that raises on a known sample is the divergence"),
    # ---- four_structures ----------------------------------------------------------------------------------------
    "structure.python": Premise(
        "four_structures", "summary row of the PYTHON structure: FAILs exactly when an item below it FAILs "
        "(structure.unregistered_tensor or structure.unregistered_module, which is the divergence)",
        "that of the failing item (both confirm that the program uses what is hidden before they FAIL)",
        "that of the failing item: each is a WARN when its premise is not confirmed, and the row is then a WARN"),
    "structure.unregistered_tensor": Premise(
        "four_structures", "a tensor with requires_grad=True held as a plain module attribute (outside _parameters, "
        "not computed from registered parameters) is meant to be a parameter of the model",
        "the registry walk finds it outside parameters()/state_dict(), and the program is seen to use it: an optimizer "
        "owns it, or the loss reaches it (one forward and loss on the user's model inside a guard)",
        "WARN: nothing owns it and the loss does not reach it (a stale copy of a parameter a wrapper replaced), or no "
        "batch/loss_fn was given to check; a tensor derived from registered parameters is a PASS"),
    "structure.unregistered_module": Premise(
        "four_structures", "the program uses the modules it holds outside the registry (a plain list/dict of modules), "
        "so their parameters, buffers and train/eval flags are meant to follow parameters(), .to(), .train() and "
        "state_dict()",
        "confirmed when the forward pass (one forward and loss on the user's model inside a guard) runs one of them, "
        "the loss's graph reaches one of their tensors, or an optimizer owns one",
        "WARN naming what would confirm it (a copy kept aside, e.g. a saved hyperparameter; or no batch/loss_fn given: "
        "pass them); modules that hide no parameter, buffer or mode-dependent module are a PASS (a Dropout with p = 0 or a "
        "norm without running statistics reads its flag but computes the same in both modes)"),
    "frozen.requires_grad": Premise(
        "four_structures", "parameters declared frozen (frozen=) are not trained",
        "the declaration against requires_grad=True on those parameters now, and a step of the program is seen to "
        "train them: an optimizer the step steps owns them and the loss's graph reaches them (one forward and loss on "
        "the user's model inside a guard), so their gradient is applied",
        "WARN of the same kind naming what is missing: no optimizer passed, no optimizer owns them (a hand-written "
        "update could), no batch/loss_fn to see the loss reach them, or the loss does not reach them; without frozen= "
        "not checked (requires_grad=False parameters no pattern names are a WARN frozen.undeclared)"),
    "frozen.undeclared": Premise(
        "four_structures", "with frozen= declared, a parameter no pattern names is meant to train",
        "it has requires_grad=False, no frozen= pattern names it, the optimizer passed owns it, and " + _DEPENDS,
        "without frozen= not checked; not owned by the optimizer, no batch/loss_fn, or the loss not shown to depend on "
        "it: WARN of the same kind"),
    "frozen.unfrozen_by_train": Premise(
        "four_structures", "parameters declared frozen (frozen=) stay frozen across model.train() / model.eval()",
        "on the user's model inside a guard, each declared parameter is set requires_grad=False, then model.train() and "
        "model.eval() are called: some have requires_grad=True again (a train() override); and a step would train "
        "them: an optimizer owns them and, after model.train(), the loss's graph reaches them (one forward and loss in "
        "the guard)",
        "WARN of the same kind when no optimizer owns them, no batch/loss_fn was given or the loss does not reach them; "
        "without frozen= not checked; train()/eval() raising is a note"),
    "structure.frozen": Premise(
        "four_structures", "summary row of the FROZEN structure: FAILs exactly when frozen.requires_grad or "
        "frozen.unfrozen_by_train FAILs (that item is the divergence)",
        "that of the failing item", "that of the failing item: each is a WARN when no step is seen to train the "
        "declared parameters"),
    "optimizer.owns_only_frozen": Premise(
        "four_structures", "the optimizer passed is meant to train the model's trainable parameters",
        "every model tensor it owns has requires_grad=False while trainable tensors exist that it does not own: its step "
        "can change nothing",
        _ALWAYS + "an optimizer that owns only frozen tensors beside unowned trainable ones updates nothing, whatever "
        "the program means", also=("learning_ledger",)),
    "optimizer.stale_parameter": Premise(
        "four_structures", "a tensor the optimizer owns that is not in the model is an old parameter of a module replaced "
        "after the optimizer was built",
        "it is paired with a current trainable parameter the optimizer does not own: four_structures by the group's "
        "param_names, else the same shape, else the same rank; learning_ledger by the same shape, unless one training "
        "forward of a copy rebinds that parameter (an EMA codebook the program writes: the optimizer's slot is its first "
        "object by design)",
        "a stale tensor with no unowned trainable parameter to pair with (a tensor trained on purpose outside the model: "
        "a learnable temperature, the parameters of a loss module) is a WARN of the same kind in both; watch reports "
        "it as WARN ownership.foreign", also=("learning_ledger",)),
    "optimizer.missing_parameter": Premise(
        "four_structures", "every parameter with requires_grad=True is meant to be owned by an optimizer the step steps",
        "the param groups of the optimizer passed and of every other optimizer train_step reaches (closure, globals) do "
        "not hold it, the program computes its gradient (four_structures: the loss's graph reaches it, one forward and "
        "loss on the user's model inside a guard, or when the model cannot be called as read from the batch, one call of "
        "train_step leaves it a nonzero .grad; learning_ledger: the GRADIENT link's backward on its copy gave it "
        "one), and with train_step, one call of it on the user's objects (every value restored) does not move it in "
        "another way (a hand-written update, then a note)",
        "WARN of the same kind when the loss does not reach it, no batch/loss_fn was given (four_structures), or "
        "train_step raised; a parameter left out on purpose while autograd still computes its gradient FAILs: "
        "requires_grad_(False) or frozen= declares it", also=("learning_ledger",)),
    "optimizer.multiple_owners": Premise(
        "four_structures", "each parameter is updated by one optimizer per step",
        "the owners are the optimizer passed and every optimizer train_step reaches through its closure or globals; two "
        "of them that wrap each other or share param groups or state are one update; one call of train_step on the "
        "user's objects (inside a guard, every value restored) shows two distinct owners stepping while the shared "
        "parameter holds a gradient (a step pre-hook on each), and two of those owners own exactly the same tensors "
        "(two optimizers over one list, a GAN's generator optimizer built over the discriminator's parameters)",
        "WARN of the same kind when that call steps only one of them (owners stepped in different phases or calls), "
        "train_step raised, each owner has parameters of its own beside the shared ones (a shared encoder trained on "
        "two objectives), or one owner's tensors are a part of the other's (an extra optimizer for a shared part, as "
        "SAC-AE's encoder optimizer beside the critic's, or an optimizer built over more than its own network)"),
    "structure.duplicate_in_optimizer": Premise(
        "four_structures", "each tensor is owned once by an optimizer",
        "the same tensor object sits in two slots of one optimizer's param groups",
        _ALWAYS + "a tensor in two slots is updated twice per step by the same rule"),
    "structure.device_mismatch": Premise(
        "four_structures", "a parameter's optimizer state lives on the parameter's device",
        "a tensor in optimizer.state[p] (dim > 0) is on another device than p",
        _ALWAYS + "torch.optim's update reads the parameter and its state together; registered tensors spread over "
        "devices are only a WARN"),
    "structure.optimizer": Premise(
        "four_structures", "summary row of the OPTIMIZER structure: FAILs exactly when an item below it FAILs (that item "
        "is the divergence)",
        "that of the failing item", "that of the failing item: each confirms its premise before it FAILs and is a WARN "
        "otherwise"),
    # ---- reachability -------------------------------------------------------------------------------------------
    "reachability.zero_gradient": Premise(
        "reachability", "a trainable parameter on the loss's graph that the loss depends on receives a nonzero gradient",
        "torch.autograd.grad of the loss (no .grad written) is exactly zero or None for it, " + _DEPENDS + ", and no "
        "signal reaches its uses: the same backward with the gradient arriving at each autograd node that takes it as "
        "an input reweighted by seeded factors 0.5..1.5 still gives it exactly zero (_core.cancelling.cancelled)",
        "the loss does not depend on it at these weights, the counterfactual could not run, or only loss= was given: "
        "WARN reachability.zero_gradient; a zero the reweighting makes nonzero is contributions of its uses that "
        "cancel (loss terms or examples that balance: a hinge or WGAN critic's final bias, a bias at its optimum): "
        "WARN of the same kind, cause cancelled" + _OTHER),
    "reachability.detached": Premise(
        "reachability", "a trainable parameter whose value reaches the loss is meant to receive its gradient along that "
        "path",
        "the traced forward (a TorchFunctionMode recording every op whose inputs required grad and whose outputs do not) "
        "shows the parameter is a leaf of such a cut made with grad enabled by an op with a floating output (.detach(), "
        ".data, another op that drops requires_grad), the loss's value was "
        "computed through that cut, the loss's autograd graph does not reach the parameter, and the traced forward did "
        "not rebind it (a parameter the forward replaces by a new object, an EMA codebook, is the program's own update: "
        "WARN)",
        "nothing computed from it reaches the loss: WARN reachability.not_executed / reachability.unused (declare "
        "frozen= if by design); only loss= given: WARN reachability.unreached. frozen= covers requires_grad=False "
        "parameters only: a stop-gradient target network kept in the model with requires_grad=True still FAILs" + _OTHER),
    "reachability.no_grad": Premise(
        "reachability", "a trainable parameter whose value reaches the loss is meant to receive its gradient along that "
        "path",
        "as reachability.detached, the cut made with grad mode disabled (torch.no_grad / inference_mode) in the module "
        "named as the boundary",
        "as reachability.detached" + _OTHER),
    "reachability.integer_cast": Premise(
        "reachability", "a trainable parameter whose value reaches the loss is meant to receive its gradient along that "
        "path",
        "as reachability.detached, the cut an op with an integer output (a cast, argmax, round) through which the loss's "
        "value flowed",
        "as reachability.detached" + _OTHER),
    "reachability.cut": Premise(
        "reachability", "a trainable parameter whose value reaches the loss is meant to receive its gradient along that "
        "path",
        "the traced forward shows no cut that consumed it and its module ran, the loss's autograd graph does not reach "
        "it, and perturbing its module's parameters on a copy moves the loss (beyond ten times the loss's own "
        "repeat noise): its value reaches the loss through a cut the trace did not see (a .item() or numpy round trip, "
        "a detach in code the trace does not cover)",
        "a loss the perturbation leaves unchanged, or a counterfactual that could not run: WARN reachability.unused "
        "(saying which)" + _OTHER),
    # ---- step_probe ---------------------------------------------------------------------------------------------
    "step.nonfinite_loss": Premise(
        "step_probe", "one forward pass on the batch gives a finite loss",
        "the controlled forward on a deep copy returned a NaN or infinite loss",
        _ALWAYS + "a non-finite loss is the divergence whatever the program means"),
    "step.no_gradient": Premise(
        "step_probe", "a trainable parameter the loss depends on receives a gradient from backward",
        "controlled step (deep copy, backward from .grad=None): its gradient is None and " + _DEPENDS + "; train_step "
        "(called twice on the user's objects, restored): no backward reached any trainable parameter and none moved",
        "WARN step.unused_parameter saying whether the loss was shown not to depend on it or the counterfactual could not "
        "run; step_probe takes no frozen= (four_structures and reachability do)" + _OTHER),
    "step.zero_gradient": Premise(
        "step_probe", "a trainable parameter the loss depends on receives a nonzero gradient",
        "controlled step: its gradient is exactly zero and " + _DEPENDS + ", and the backward run again with the "
        "gradient arriving at each of its uses reweighted (seeded factors 0.5..1.5) leaves it zero (no signal reaches it)",
        "WARN step.unused_parameter, as step.no_gradient; a zero that reweighting makes nonzero is a cancellation "
        "between loss terms or examples (a hinge critic's final bias): a WARN of this kind" + _OTHER),
    "step.nonfinite_gradient": Premise(
        "step_probe", "backward gives finite gradients",
        "the controlled backward on a deep copy left NaN/inf in the parameter's gradient",
        _ALWAYS + "a non-finite gradient makes any update non-finite"),
    "step.lr_zero": Premise(
        "step_probe", "a param group holding trainable parameters with nonzero gradients is meant to move them",
        "on the controlled step the group's lr is 0 and its schedule's initial_lr is 0 too, and the parameter did not "
        "move",
        "not confirmed: a group frozen on purpose with lr=0 under an LR scheduler FAILs; no argument declares it (lr 0 "
        "without a schedule's initial_lr, a warmup's first step, is a PASS note)", confirmed=False),
    "step.not_updated": Premise(
        "step_probe", "a trainable parameter with a nonzero gradient is moved by the step",
        "controlled step: nonzero gradient, delta exactly 0, lr > 0 and lr*|grad| above float rounding of the weights; "
        "train_step: nonzero .grad at the user's optimizer.step (a manual loop: the gradient its backward produced, "
        "others moving with a positive implied lr) and the value unchanged at every watched step, or no parameter moved "
        "at all; a parameter outside the optimizer that train_step moves, or that another optimizer train_step reaches "
        "owns (an alternating schedule trains it in other calls), is a PASS note; an owned parameter the "
        "optimizer's next steps on the same gradient move (its own step held the first update: a warmup computed "
        "inside step) is a PASS note; where the group's lr is positive, one more step at a 10^4-fold lr, at least 1, moving it is a note too (the update at this lr and gradient was below float32's resolution next to the weights)",
        "not confirmed for parameters outside the optimizer: without train_step (or when train_step does not move it) a "
        "parameter left requires_grad=True but out of the optimizer on purpose (frozen by omission, trained by an "
        "optimizer not passed) FAILs; step_probe has no frozen=", confirmed=False),
    "step.update_rule": Premise(
        "step_probe", "a torch.optim.SGD group without momentum, weight_decay, nesterov or maximize applies exactly "
        "delta = -lr * grad",
        "on the controlled step each moved parameter's delta is compared with -lr*grad element-wise (rtol=lr_rtol plus "
        "float rounding, one rounding per stored index of a sparse gradient); other optimizers are SKIPPED",
        "other optimizers: SKIPPED; an SGD subclass (its own step) or an SGD with a step hook (its own or a global "
        "one), which may change the update on purpose: a departure is a WARN of the same kind"),
    "step.diverges": Premise(
        "step_probe", "one step at the program's step size keeps the loss finite and below 10x, with an update smaller "
        "than the parameters",
        "the loss on the batch before and after one step (the controlled step on the copy; each train_step call, the loss "
        "re-evaluated with a fixed dropout seed) is non-finite or more than 10x, and some param group's ||delta|| / "
        "||param|| exceeds 1",
        "with train_step given, the controlled step's divergence is a WARN unless the program's own steps diverge too "
        "(its loop may clip or scale); not confirmed without train_step: the controlled step applies optimizer.step to "
        "the raw gradient, so a loop that clips gradients and is not passed as train_step FAILs there", confirmed=False),
    "step.train_step_ascends": Premise(
        "step_probe", "train_step descends loss_fn on the batch",
        "train_step called twice on the user's objects (restored): the loss on the batch, re-evaluated before and after "
        "each call, rose at both, and the cosine of train_step's gradient (a stateless manual update: its delta) with "
        "the probe batch's -gradient is below -0.3; with an optimizer, train_step's first call fed the model the probe "
        "batch's own input tensors (the gradient is of that batch)",
        "maximize=True, or a loss that cannot be re-evaluated between calls: PASS note, descent not checked; a weak "
        "gradient agreement is a note; an optimizer stepping on other batches (whose gradient may point against the "
        "probe batch's, equal losses at initialization notwithstanding): WARN"),
    "step.norm_statistics_never_estimated": Premise(
        "step_probe", "a training forward normalizes with batch statistics (train mode) or with estimated ones",
        "forward hooks while the step runs (the controlled step on a copy, the user's train_step): a batch-norm "
        "module ran with gradients on and its output on the graph, in eval mode, with running_mean == 0, running_var "
        "== 1 and num_batches_tracked == 0 (never estimated), or with so few batches counted that the built values keep "
        "at least half their weight ((1 - momentum) ** num_batches_tracked >= 1/2), with the model itself in eval "
        "mode: it divides by (nearly) constants and eval mode never updates them",
        "statistics estimated before (frozen batch norm in fine-tuning, loaded weights), eval mode under no_grad "
        "(a target network), or a module the same step also runs in train mode (an adversarial attack under "
        "model.eval() before the training forward): no finding; batch norms frozen module by module while the model trains (a detector's "
        "freeze_bn) with built statistics: WARN"),
    "step.eval_mode_not_restored": Premise(
        "step_probe", "a program that trains in train mode keeps training in train mode",
        "the program's own calls of train_step (a third one when the second ends with the model in eval mode): a "
        "module whose output depends on the mode (dropout p > 0, batch norm tracking statistics, functional dropout, "
        "a forward reading self.training) ran its training forwards (gradients on, output on the graph) only in train "
        "mode in one call and only in eval mode, the model itself in eval mode, in a later call; and a copy of it run "
        "on that forward's inputs in train and in eval mode (same seed) gives different outputs or buffers",
        "a module put in eval on purpose with the model in train mode (frozen batch norm), a mode that does not change "
        "what the module computes, or an eval() undone only after more calls than are watched (an epoch end reached "
        "later): no finding"),
    "step.soft_update_reversed": Premise(
        "step_probe", "a soft (Polyak) update moves the target network toward the trained one",
        "the program's own calls of train_step: after the optimizer's last step, train_step rewrote a trained parameter "
        "p exactly (within float rounding) as p + tau * (q - p), 0 < tau <= 0.5, for a same-shaped parameter q of a "
        "network the step reaches and forwards, that the optimizer does not own and that never moved during the calls",
        "a write that is not such an interpolation (a clamp, a projection), a copy the step never forwards (decay "
        "toward a reference point) or one that moves too (Lookahead, mutual averaging): no finding"),
    "step.clip_after_step": Premise(
        "step_probe", "gradient clipping bounds the update it precedes",
        "the order of the program's own calls while train_step runs: clip_grad_norm_/clip_grad_value_ (looked up "
        "through torch.nn.utils) only ever after an optimizer.step completed and before any new backward",
        "a clip between a backward and the next step, or inside step (a closure), anywhere in the calls: no finding; "
        "a clip function imported by name before the watch is not seen (no finding)"),
    "step.gradient_discarded": Premise(
        "step_probe", "the backward passes of one update add up in .grad for its optimizer.step",
        "in one train_step call a second zero_grad inside the update's window (opened by a zero_grad, closed by "
        "optimizer.step) erased gradients computed after the window opened, with no parameter changed in place since, "
        "outside optimizer.step, and that call's optimizer.step then used gradients of those parameters",
        "a zero_grad that opens a window, one after the weights moved in place (SAM), or one inside optimizer.step "
        "(an LBFGS closure) is no evidence: no finding; a zero_grad that leaves the gradients in place (Accelerate's "
        "wrapper while it accumulates) erases nothing and closes nothing"),
    "step.grad_accumulation": Premise(
        "step_probe", "each train_step call is one full update (the train_step= contract) that starts from cleared "
        "gradients",
        "a gradient hook reads .grad when call 2's backward first accumulates into each parameter (a gradient "
        "torch.autograd.grad computes without accumulating, a MAML inner loop's, is no backward of the step): it still "
        "holds call 1's gradient (nonzero or non-finite), a step of call 1 had applied it (a call that only "
        "backpropagates, one micro-batch of accumulation across calls, leaves its gradient for the step to come), "
        "the call-2 step of an optimizer owning the parameter used that sum (no backward between found .grad None or "
        "zero: an actor's loss reaching the critic deposits on the critic's old gradient, which the critic's zero_grad "
        "clears before the critic's own backward, is no accumulation), and call 2 then changes the parameter (a "
        "gradient left where no step of the call applies it, an alternating schedule's other network, is not used); "
        "the relative error of the gradient step 2 used against g1 + g2 is in the evidence; or, inside one call, a later step of the watched optimizer finds in .grad exactly "
        "the gradient its earlier step of that call applied at lr > 0 plus the backward between them (relative error "
        "<= 1e-4: a second update per iteration without zero_grad, a dense re-feeding step)",
        "the premise is the train_step= contract (one full step per call); without train_step not checked; "
        "parameters the watched optimizer does not own (a GAN's discriminator reached by the generator's backward) are "
        "not judged inside a call"),
    "step.zero_grad_before_step": Premise(
        "step_probe", "optimizer.step applies the gradients backward produced since the previous step",
        "gradient hooks saw nonzero gradients produced since the previous step, and at the optimizer.step pre-hook .grad "
        "of every one of those parameters was None or zero",
        "only some of them cleared: WARN"),
    "step.trained_in_eval_mode": Premise(
        "step_probe", "a dropout layer built to drop (p > 0) drops while the model trains",
        "forward hooks during the user's own train_step: the layer ran a forward with gradients on and its output on "
        "the graph while it and the model itself were in eval mode",
        _ALWAYS + "the layer dropped nothing in a forward that was trained on; dropout switched off module by module "
        "(the model in train mode) and rollouts under no_grad are not seen"),
    "step.step_before_backward": Premise(
        "step_probe", "each optimizer.step applies the gradient of a backward that precedes it",
        "the order of the program's own calls in 2 calls of train_step: every optimizer.step before the call's first "
        "backward, and .grad None or zero for every trainable parameter at each step",
        _ALWAYS + "no step applied any gradient; a step that runs first on purpose sees the previous call's gradient "
        "(nonzero) in call 2: no finding"),
    "step.no_optimizer_step": Premise(
        "step_probe", "train_step steps the optimizer passed",
        "a step pre-hook on the optimizer (wrappers unwrapped to the one that updates) counted 0 calls in 2 calls of "
        "train_step",
        _ALWAYS + "the user's own step never stepped; a call whose GradScaler lowered its scale (an fp16 skip) is a note"),
    # ---- learning_ledger ----------------------------------------------------------------------------------------
    "task.nonfinite_targets": Premise(
        "learning_ledger", "float targets are finite",
        "the batch's targets hold NaN or infinite values",
        _ALWAYS + "a non-finite target is the divergence whatever the task"),
    "task.label_out_of_range": Premise(
        "learning_ledger", "integer targets are class ids of the outputs' class axis: inside [0, K) or ignore_index "
        "(read from loss_fn)",
        "supervised targets outside [0, K), K the size of the class axis inferred from the shapes (or given by task=), "
        "and the user's loss_fn raises on these outputs and targets (an index loss on ids outside its classes does)",
        "WARN when loss_fn runs on them: it does not index these outputs by the targets (a head inside the loss, a "
        "sampled softmax, its own ignore value), and the later links stop reading the outputs as class scores; a note "
        "instead when the ids fit another floating output the model returns beside it ((features, logits))"),
    "task.target_shifted_twice": Premise(
        "learning_ledger", "a language model's targets are the next token, shifted exactly once",
        "labels equal input_ids one ahead at >= 90% of supervised positions and loss_fn's value equals next-token "
        "cross-entropy of shifted logits, not the plain one (the loss shifts them again; logits too uniform to tell: a "
        "Hugging Face *ForCausalLM / *LMHeadModel, which shifts by contract)",
        "targets equal to the inputs two ahead (more often than one ahead) are a WARN: multi-token prediction on "
        "purpose looks the same"),
    "task.target_not_shifted": Premise(
        "learning_ledger", "a language model's targets are the next token",
        "each position is asked for the token it reads: declared targets equal the inputs at >= 90% of supervised "
        "positions (more often than one ahead, loss_fn not found to shift them: its value, or at a fresh model's equal "
        "values its gradient), or the loss's own gradient (loss_fn's, or that of the loss train_step itself "
        "backpropagates, on the integer sequences its model call reads, where loss_fn showed no such relation) pulls up "
        "ids[t] at position t of an aligned output (a module's, or the scores a cross_entropy or nll_loss inside the "
        "forward reads) at >= 90% of the pulled positions, or (logits never a module output: a "
        "decoder inside the loss, a model computing its own loss from a target input) a target sequence equal to the "
        "inputs whose change at position j moves the loss's gradient on the last aligned output at position j only; "
        "and, on the ledger's copy, the "
        "model is causal on that input (changing the middle token moves the output there and none before it): a copy",
        "the model reads later tokens too (an autoencoder reproduces its input on purpose; a translation with targets "
        "from the source column looks the same): WARN naming both readings; causality not shown on the copy: WARN"),
    "task.mask_unread": Premise(
        "learning_ledger", "a 0/1 mask the program hands its loss among structured targets gates a term of it",
        "on the ledger's copy (same seed, no gradient) flipping the mask (1 - mask) leaves the loss bit-identical while "
        "rolling another target component across the batch moves it, and the mask filled with NaN leaves it "
        "bit-identical too (a mask read through a factor that is zero at this state carries the NaN, or raises)",
        _ALWAYS + "the loss reads its targets but provably not this mask; a mask that is read, a component not 0/1 "
        "valued (or of one value, unless one per example: [B] or [B, 1]), or a loss that reads no target: no finding"),
    "task.target_misaligned": Premise(
        "learning_ledger", "dense targets (a label map, heatmaps, a target image) sit at the positions of the input "
        "pixels they describe",
        "on the program's own batch (targets on the grid of a 4-D output) and on what train_step feeds (the target a "
        "loss node saved), on one grid (the larger pooled to the smaller, or a low-resolution input under 12 x 12 "
        "upsampled to the targets'), each example's targets predicted from the other examples' (the mean target of the "
        "pixels whose 3 x 3 neighbourhood of input values is nearest): one other alignment (flipped left-right, flipped "
        "upside down, transposed) explains at least two examples and a fifth of the batch with R^2 >= 0.1, at least "
        "0.2 better than the targets as given, which the input does not explain (R^2 <= 0.1); scored again with the "
        "winning examples' references realigned (misaligned examples blur the others' references), the pass "
        "explaining more examples counting; or, with task_probe (the user's own labelling rule), dense class targets "
        "it agrees with on >= 90% only flipped or transposed (and 10 points more than as given)",
        "targets the input's local values do not explain (no alignment reaches R^2 0.1 and the margin), symmetric "
        "images, a batch without a 4-D image input of <= 8 channels or a target grid under 12 x 12 or at another scale "
        "per axis: no finding"),
    "task.target_in_input": Premise(
        "learning_ledger", "the model is not handed what it must predict (a horizon after the input window, a label "
        "that is not among the features)",
        "on the declared batch and on what train_step feeds: target values equal to one input's values at fixed "
        "positions in every example and not when paired with another example's input (informative values only: "
        "floats mostly distinct over the batch, else >= 32 bits), making up at least half of a floating target or an "
        "example's one label; then, on the ledger's copy in eval mode with the RNGs reseeded, changing that input "
        "position alone moves the aligned output (an output longer than the targets along one axis alone, a "
        "forecaster reconstructing its window too, read at its last positions) by >= 1/20 of the largest move, for at "
        "least half of up to 8 probes",
        "a target copying the input at its own positions or copying every varying input position (reconstruction, a "
        "copy task) unless the program contradicts it (the step's loss compares the model's own first output with its "
        "input while the declared batch pairs the inputs with other targets of that shape, the untrained model "
        "already returns the target, R^2 >= 0.999, or the model is causal along an axis of that input: changing it at "
        "the axis's middle position on the copy moves outputs there and later, none before, a decoder fed the frames "
        "it must predict), integer sequences copying some source tokens (a seq2seq rule; shifts are the sequence checks'), "
        "a copy the model does not read (a causal model's next-token labels), no output aligned with the targets: no "
        "finding; targets that are the input shifted along one axis, copying >= 90% of its varying positions (a "
        "sequence's next steps, which a latent-variable model encoding the whole sequence may read): a note"),
    "task.mlm_labels_not_masked": Premise(
        "learning_ledger", "a masked language model predicts only the positions chosen for masking",
        "data pattern: one input id (the mask token, never a target) stands at >= 50% of the supervised positions whose "
        "target differs from the input, and > 50% of supervised positions are copies of a visible input token",
        "not confirmed: a denoising objective that reconstructs every position on purpose FAILs; no argument declares "
        "it", confirmed=False),
    "task.label_mismatch": Premise(
        "learning_ledger", "the targets are what task_probe= (the user's ground-truth labelling rule) says",
        "task_probe(inputs), or the known (inputs, targets) matched row by row, agrees with < 90% of the labels (values: "
        "< 90% within 1e-3 and R^2 < 0.9; targets that copy one input element are named)",
        "no task_probe: PASS with the note 'not verified'; a probe that cannot be compared: WARN unverified; class "
        "labels agreeing far above chance (over half the way from chance to 100%) with scattered disagreements: WARN "
        "(label noise or an approximate task_probe)"),
    "objective.nonfinite_loss": Premise(
        "learning_ledger", "the loss is finite",
        "the loss is NaN or infinite and the outputs are non-finite too (or no floating prediction tensor exists)",
        _ALWAYS + "a NaN loss from finite outputs is objective.empty_mask instead"),
    "objective.empty_mask": Premise(
        "learning_ledger", "the loss supervises at least one output element",
        "every target equals ignore_index; or the loss is NaN although every output and target is finite (0/0 of an "
        "empty mean); or d loss / d outputs is exactly zero and perturbing every output leaves the loss unchanged",
        "otherwise no finding"),
    "objective.constant_outputs": Premise(
        "learning_ledger", "the outputs can depend on the inputs",
        "the autograd node behind the outputs (through views) is a softmax / log_softmax over a dimension of size 1: "
        "always 1 / 0",
        _ALWAYS + "the op's result is constant by construction"),
    "objective.normalized_over_examples": Premise(
        "learning_ledger", "class scores are normalised over the classes, not over the examples' axis (batch_axis=)",
        "the softmax/log_softmax that made the outputs has the example axis as its dim, or (class outputs) the values "
        "sum to 1 over the example axis and over no other",
        "otherwise no finding"),
    "objective.probabilities_as_logits": Premise(
        "learning_ledger", "a logits loss receives logits",
        "the user's loss graph has a with-logits BCE or a cross-entropy whose input comes straight out of a sigmoid or "
        "softmax (through views) with values in [0, 1] (wherever the activation sits: the model, loss_fn, a "
        "discriminator loss_fn applies, or a loss train_step computes and backpropagates itself, read on one guarded "
        "call of it); or outputs non-negative with "
        "rows summing to 1 and the loss equals cross-entropy of them read as logits, not NLL of their log; or sigmoid "
        "outputs whose loss equals BCE-with-logits of them and not BCE; or, at the logits spread to std 3, the loss "
        "equals cross-entropy of their softmax",
        "probability outputs with a loss of another form (masked or weighted NLL, a Brier or MSE score): no finding; a "
        "loss_fn that ignores the outputs it is handed is never read (a note)"),
    "objective.penalty_without_graph": Premise(
        "learning_ledger", "a loss term built from a gradient (a gradient penalty) trains the weights",
        "while loss_fn runs on the ledger's copy, a torch.autograd.grad with respect to tensors that are not parameters "
        "is taken without create_graph=True; the same loss built with create_graph=True has a gradient with respect to "
        "the trainable parameters (the copy's and the program's own model's, read without writing .grad) that differs "
        "by more than 1e-3 of its norm",
        "no such gradient taken, a gradient the loss does not use, a gradient with respect to the weights (first-order "
        "MAML), a loss built inside train_step only: no finding"),
    "objective.padding_in_loss": Premise(
        "learning_ledger", "padding positions do not count in the loss",
        "padding read from the program's batch (a decoder_attention_mask, or an attention_mask shaped like token "
        "targets, at 0; else a run of one token id at the end of at least half the rows, or at the edge of most rows "
        "(read along the sequence axis), at different lengths, rare elsewhere and two or more long in far more rows than "
        "chance repeats make (at least a quarter of them and three times the id's rate elsewhere), a trailing run's "
        "first token left out; or, in structured targets, "
        "the positions a 0/1 weight beside same-shaped token ids switches off, where flipping the weights moves the "
        "loss), then the user's loss_fn on the same outputs with only the padding positions' predictions perturbed: "
        "the loss moves; a loss computed inside the model (outputs.loss from labels=), which cannot be handed other "
        "predictions: its own gradient, on a seeded forward of the ledger's copy, pulls predictions toward the "
        "padding target aligned with them (at their own position or the next one: a causal model shifts inside)",
        "no padding shown by the batch: not checked; a loss that stays put, or no gradient toward a padding target, "
        "ignores it (PASS); padding targets are never changed (a loss ignoring a pad id by value would stop "
        "ignoring them); the FAIL also needs the program to show it treats those positions as padding (the batch's "
        "attention mask or 0/1 weights its loss reads, an embedding with padding_idx, a pad id the model or its config "
        "holds under a pad name, a 0/1 mask in the batch marking the same positions, an ignore_index other than -100 "
        "or a zero class weight in the loss): without any, fixed-length rows counted on purpose look the same, a note "
        "(_padding_intent)"),
    "objective.nll_of_raw_scores": Premise(
        "learning_ledger", "an NLL loss receives log-probabilities",
        "the user's loss graph has an nll_loss (or a ctc_loss) whose input has no log-normalization among its "
        "producers (no log_softmax, log or logsigmoid within six nodes), or comes straight out of a log_softmax over "
        "another axis (in loss_fn's graph or in the loss train_step backpropagates), and whose logsumexp over the classes is not 0: NLL or CTC of raw scores is unbounded below, and "
        "of scores normalized over the positions is no class likelihood; or a cross-entropy written out (a sum or mean "
        "over given axes of log-probabilities weighted by targets, or a gather of them) takes a log_softmax's result "
        "(through row-major views and negations) along axes over which it is not normalized, neither each nor jointly "
        "(logsumexp there not 0), while the log_softmax normalized another axis",
        "always confirmed: graph and values both show it; a log-normalization over the classes behind the input finds "
        "nothing, nor does a weighting that is itself a distribution over the log_softmax's axis (a sound "
        "cross-entropy summed in another order), nor a consumption through a permute or an index (not read)"),
    "objective.kl_input_not_log": Premise(
        "learning_ledger", "F.kl_div receives log-probabilities as its input (and probabilities as its target unless "
        "log_target=True)",
        "while loss_fn runs once on the ledger's copy, a torch-function mode records each F.kl_div call (nn.KLDivLoss "
        "included): an input with values above 0 (log-probabilities never are: probabilities or raw scores), or a "
        "target with values below 0 and none above without log_target=True",
        _ALWAYS + "the values show it; an input of log-probabilities finds nothing"),
    "objective.wrong_sign": Premise(
        "learning_ledger", "the loss is bounded below and falls as the answer improves",
        "the loss is negative and equals -cross-entropy, or its gradient along a better answer (correct logits up, "
        "outputs toward the targets) is positive; signed per-example weights (a policy gradient's advantages) give no "
        "finding; or scaling a side output (a VAE's mu, nested or not; never the prediction) 10x and 100x drives the loss "
        "lower each time and far below zero",
        "otherwise no finding"),
    "objective.log_det_mismatch": Premise(
        "learning_ledger", "a normalizing flow's loss adds the log-determinant of the flow's own transform",
        "one float input x (2 to 256 values per example) and outputs holding z shaped like x beside per-example "
        "scalars; loss_fn on single examples is the change-of-variables NLL of a standard normal base (nll * s + "
        "log N(z) + sigma * L one constant across examples for s in 1, D, D ln 2 and sigma +1/-1 on one scalar L, or no "
        "scalar), where log N(z) + sigma * L varies across the examples at least 100 times that constant's residual (the "
        "identity explains how the examples differ); autograd's Jacobian dz/dx (eval mode, RNG fixed) gives log|det| differing from sigma * L (or from 0) "
        "by more than 1% of 1 + |log|det|| in most of six examples; read again on perturbed weights where log|det| is ~0 "
        "or where both match with D <= 64 (a mask's extra dependency through a weight that starts at zero)",
        "a loss that is not that NLL (a learned base, a VAE's reconstruction and KL), outputs that barely differ across "
        "the examples (a decoder constant at initialization), a singular Jacobian, more than 256 "
        "values per example, z of another shape (a multi-scale flow): no finding; a match confirms the determinant and "
        "leaves no 'falls in proportion' WARN on it"),
    "objective.unbounded_in_scores": Premise(
        "learning_ledger", "a loss on class scores has a minimum (cross-entropy flattens towards 0 as the target score "
        "grows)",
        "multiclass targets and class scores: the user's loss_fn with every supervised row's target score raised by 10 "
        "and by 100 falls each time and ends below -10 x max(1, |loss|): linear in the scores",
        "a loss that flattens, rises or stays above that bound, outputs the model normalized (log-probabilities, "
        "probabilities: one raised entry leaves their domain), or targets that are not class ids of the outputs: no "
        "finding"),
    "objective.shape_broadcast": Premise(
        "learning_ledger", "a regression loss compares each output with its own target (loss 0 at a perfect prediction)",
        "outputs and targets differ in shape with the same number of elements and broadcast to a larger shape, and "
        "loss_fn at outputs equal to the targets is not 0 but lower with the targets given in the outputs' shape; or the "
        "loss's own graph shows an elementwise regression loss "
        "(mse, smooth L1, Huber) whose prediction was expanded along a new axis as long as the batch (loss_fn squeezed "
        "it against [B, 1] targets), or the graph of a backward train_step runs shows such a node whose prediction was "
        "expanded along an axis it had as 1 to the length of another of its axes (a value net's [N, 1] against [N] "
        "returns), or a product or quotient of an [N, 1] operand with a gradient by a vector of N without one (a policy "
        "gradient's log_prob * advantage) into an [N, N] table: every prediction meets every example's target",
        "the loss is 0 at the targets, no lower with the targets in the outputs' shape (0/1 targets a loss indexes "
        "its scores by: not a broadcast) or loss_fn refuses them so, the shapes cannot broadcast (loss_fn reshapes), "
        "the gradient at the first "
        "example's outputs stays put when only the other examples' targets change (loss_fn lines the shapes up itself: "
        "a squeeze into BCE-with-logits), the cross-talk outlives targets reshaped to the outputs' shape (a pairwise "
        "loss such as RankNet: every example meets every other by design), or the probe cannot run: no finding"),
    "objective.adversarial_direction": Premise(
        "learning_ledger", "an adversarial step's discriminator pushes its scores on real and generated inputs apart, "
        "and the generator's loss pushes its samples' score toward the real side",
        "one call of train_step on the user's objects (two at most, until two optimizers stepped; restored after): "
        "two or more optimizers; a network (the largest module one optimizer owns alone; its runs read through its "
        "forward, called as a module or as self.forward by its own methods) run on a pipeline input and on "
        "another optimizer's network output (attached, or detached: the same storage); the gradient each loss sends "
        "into that network's scores, summed, over the backwards before each optimizer step (only inside a backward: a "
        "penalty's autograd.grad is no loss): its own optimizer's phase pushes real and generated scores the same way, "
        "or another optimizer's phase pushes the attached samples' score the way its own phase pushes the generated "
        "ones",
        "one optimizer, no network run on both kinds of input (a mixup of real and generated, a sample concatenated "
        "with its condition), a push of exactly 0 (a hinge satisfied), or a step that shows one player only in the calls "
        "watched (a critic trained many times per generator step): no finding"),
    "objective.target_out_of_range": Premise(
        "learning_ledger", "a binary cross-entropy's targets are probabilities in [0, 1]",
        "a BCE node (with or without logits) of loss_fn's graph or of a backward train_step runs reduces its elements "
        "(mean or sum, so each counts) and its saved targets hold finite values outside [0, 1] at a nonzero weight: "
        "the loss falls without bound there (y log p with y < 0 as p -> 0)",
        "a reduction='none' node (a mask may drop the elements afterwards) or a zero weight at those targets: no "
        "finding"),
    "objective.unreachable": Premise(
        "learning_ledger", "the output layer can produce the targets",
        "loss_fn at the best output the layer's range allows (a softmax's simplex, a sigmoid's [0, 1] ...) stays above "
        "10% of the gap between the loss at outputs == targets and at a constant prediction (for a softmax the model "
        "applies: unless the loss is a likelihood the targets weight, affine in them and blind to the outputs at zero "
        "targets, or the program declares task='classification'); or, multilabel 0/1 targets "
        "with several labels on in a row, the loss is unchanged when a constant is added to a row's logits (a softmax "
        "over the labels), and either the loss is not linear in the targets (it asks the softmax to equal them) or the "
        "program declares task='classification'",
        "a loss linear in the targets (a multinomial likelihood over multi-hot targets, as a recommender's Mult-VAE, "
        "is that by design; beside a term that does not read the targets, a VAE's KL, it is affine in them) without "
        "task='classification' is a WARN of the same kind; a bounded output whose loss is lower at twice the targets "
        "than at them (outputs == targets is not its floor: a ranking loss reads how the scores spread), or reaches "
        "the floor with the targets mapped affinely into the output's range, is a note; otherwise no finding"),
    "objective.sum_reduction": Premise(
        "learning_ledger", "the loss is a per-example mean",
        "the loss equals a standard objective of the task summed (its mean times the element or example count), and on "
        "m <= 8 examples it is m times their mean per-example loss: the sum is shown",
        "that a sum is wrong is not the program's to confirm (many programs sum on purpose): never a FAIL, a WARN "
        "naming it; a sum of no standard objective is only a note"),
    "objective.initial_loss": Premise(
        "learning_ledger", "a classification loss is cross-entropy of the logits",
        "not confirmable from the program: the loss differs from cross-entropy of the outputs by more than 10%, and is "
        "not weighted, smoothed, masked or shifted cross-entropy, nor a loss that rewards the correct class on every "
        "example (those are notes); a metric-learning loss on embeddings with class labels looks the same",
        "never a FAIL (the premise is not the program's to confirm): a WARN naming the assumption; reference_loss= "
        "declares the intended objective and turns the check into objective.manual_mismatch"),
    "objective.manual_mismatch": Premise(
        "learning_ledger", "the loss is the intended objective: reference_loss= when given, else cross-entropy",
        "with reference_loss= (the user's declaration): loss_fn disagrees with it on the batch or on single examples",
        "without reference_loss=, a loss within 10% of cross-entropy that single examples do not reproduce is a WARN "
        "(an objective close to cross-entropy on purpose looks the same), never a FAIL"),
    "dependency.no_trainable_parameters": Premise(
        "learning_ledger", "a model given to the learning chain has something to learn",
        "no parameter of the model has requires_grad=True",
        _ALWAYS + "with nothing trainable no later link can hold"),
    "dependency.unreachable": Premise(
        "learning_ledger", "every trainable parameter the loss depends on is on the loss's autograd graph",
        "the parameter is not a leaf of loss.grad_fn's graph and " + _DEPENDS,
        "the loss does not depend on it, or that could not be checked: WARN with the unused-parameter note" + _OTHER),
    "dependency.target_leak": Premise(
        "learning_ledger", "the prediction at position p does not read the target it is asked for",
        "an input tensor equals the integer target sequence; on the ledger's copy, changing that input at position p "
        "(values rolled across the batch) moves the prediction at p; or the integer targets are an input sequence "
        "shifted by s != 0 (targets[:, j] == input[:, j + s], |s| <= 2, on >= 90% of the supervised positions and on "
        "< half with the input paired with other examples) and, on the copy in eval mode with the RNGs reseeded, "
        "changing input[:, j + s] alone at the middle j moves the prediction at j by more than 1e-6 of the largest "
        "move (a bidirectional LM reading the token it predicts, a stacked bidirectional LSTM whose lower backward "
        "states carry it)",
        "a model that shifts that input itself (the prediction at p does not move) or a loss that shifts the labels: no "
        "finding"),
    "dependency.future_visible": Premise(
        "learning_ledger", "in next-token prediction the prediction at a position reads only the tokens before it",
        "next-token prediction read from the program: the targets are the token inputs shifted by one (or equal to "
        "them with the shift inside the loss, as TASK saw), or the loss's own gradient (loss_fn's, or train_step's own "
        "loss on the sequences its model call reads) pulls up token ids[t + 1] at position t of an aligned module output or of the scores a cross_entropy or nll_loss reads (a model computing "
        "its own loss, a head inside loss_fn), or another "
        "integer input is the sequence shifted by one, on >= 90% of supervised positions; on the ledger's copy in eval "
        "mode with the RNG fixed, changing only the middle token (or, where that moves none, the token after it: a "
        "local attention's window starts at the middle) moves the outputs before it, for every input that "
        "carries the tokens asked for (a copy task's encoder input is read whole by design, its decoder input is not); "
        "a move above rounding but below a thousandth of the changed position's own is read again on a copy with "
        "perturbed weights, where it must reach 2% of it (a spatial gating unit near the identity at initialization); "
        "where the declared call is causal, the same on the arguments of the model call train_step makes (a mask=False "
        "in the loop only), its loss's saved targets being those tokens shifted by one",
        "not next-token prediction by that evidence (a masked or bidirectional model, an autoencoder), one input "
        "carrying the tokens stays causal, batch statistics shared across positions in train mode, or rounding in a "
        "causal computation (0.4% at perturbed weights), or earlier outputs that move only at positions the loss does "
        "not supervise (its gradient there is zero: padding queries whose every key is masked attend uniformly): no "
        "finding"),
    "dependency.input_without_gradient": Premise(
        "learning_ledger", "every branch of the model that reads an input carries a gradient to the parameters",
        "on the copy, perturbing a float input moves the loss, the input is not a leaf of the loss's graph, and one of "
        "the model's float outputs carries no gradient",
        "not confirmed as a defect: a stop-gradient branch by design that reads its own input (a momentum/target "
        "encoder under no_grad on the second view, a frozen feature extractor whose features the model also returns) "
        "FAILs; no argument declares it", confirmed=False),
    "dependency.padding_read": Premise(
        "learning_ledger", "an attention model keeps the padding of a token batch out of the real tokens' outputs",
        "padding found in the batch (a run at the end or start of each padded row, marked by an input named *mask* or "
        "filled with the model's config.pad_token_id); on the copy with every RNG seeded alike, either noise added to "
        "the token embeddings at the padding only (ids untouched) moves the outputs at the real tokens, in a model with "
        "attention and no recurrent or 1-d convolution layer, and moves the output of an attention module at a real "
        "position too (where the attention modules' outputs were seen); or, with no attention_mask in the batch of a model whose "
        "forward takes one (or one of all ones beside pad-id runs of different lengths, some longer than one token), "
        "passing the mask of that padding moves them",
        "a recurrent or convolutional model (it reads its padding by design), no padding run, a mask the batch does "
        "not name, or a model without an attention_mask parameter: no finding; real outputs that move while no attention "
        "module's output at a real position does (the padding read after attention: a CRF or a pooling over the "
        "padded length): a note"),
    "dependency.examples_mixed": Premise(
        "learning_ledger", "each example's output depends on its own input only (eval mode: no batch statistics)",
        "on the ledger's copy in eval mode, after a warm-up forward and with two unchanged forwards agreeing, example "
        "j's inputs replaced by example k's moves the other examples' outputs beyond 1e-4 of their scale, and one "
        "reduction or normalization inside forward over an axis of the examples' size (softmax, mean, sum, norm, "
        "normalize, max...) carries the whole move: handing the other examples its result from the unchanged batch takes "
        "the move away (to under 1e-4 and a hundredth of it); the module that ran it is named; or, where no one carries "
        "it (one attention class over the batch run twice), up to 8 such reductions held together do, and each whose "
        "release keeps the move away is dropped: the modules of the rest are named; and the one reduction's result does "
        "not reach the outputs as features concatenated beside each example's own, the same for every example (a batch "
        "statistic appended as a channel: a GAN discriminator's minibatch standard deviation)",
        "examples that meet by design through no set of such reductions (a graph's adjacency, a mixup, batch statistics "
        "without running estimates), outputs with a second axis of the batch's size (in-batch similarities), fewer than "
        "4 examples, an eval forward that is not repeatable, or a batch whose examples are not on axis 0: no finding; a "
        "batch statistic concatenated beside each example's own features: a note"),
    "gradient.missing": Premise(
        "learning_ledger", "a trainable parameter the loss depends on gets a gradient",
        "after one backward from .grad=None on the copy its .grad is None and " + _DEPENDS,
        "the loss does not depend on it, or that could not be checked: WARN GRADIENT with the unused-parameter note" + _OTHER),
    "gradient.zero": Premise(
        "learning_ledger", "a trainable parameter the loss depends on gets a nonzero gradient",
        "after one backward its gradient is exactly zero and " + _DEPENDS,
        "as gradient.missing" + _OTHER),
    "gradient.nonfinite": Premise(
        "learning_ledger", "backward gives finite gradients",
        "after one backward on the copy the gradient holds NaN/inf",
        _ALWAYS + "a non-finite gradient makes any update non-finite"),
    "update.wrong_direction": Premise(
        "learning_ledger", "loss_fn is minimised",
        "one optimizer step on the copy moved the parameters up the gradient (<update, gradient> > 0) with maximize=True "
        "in a param group",
        "maximize=True is the user's own declaration that loss_fn is a reward: never a FAIL, a WARN naming both "
        "readings"),
    "update.not_moved": Premise(
        "learning_ledger", "every owned parameter with a nonzero gradient moves in one step",
        "controlled: one optimizer step on the copy left it unchanged although the step should change it at float "
        "resolution (SGD: lr*|grad|, adaptive: lr) at an lr above 0, and up to 2 more steps of the copy on the same "
        "gradients leave it unchanged too (an optimizer whose own step holds the first update is a note; where the group's lr is positive, one more step at a 10^4-fold lr, at least 1, moving it is a note too (the update at this lr and gradient was below float32's resolution next to the weights)); with train_step: its gradient is healthy (finite, above 1e-6 of the largest: a bias a batch norm cancels "
        "gets float rounding), it never "
        "changed over up to 4 calls, no other optimizer train_step reaches owns it (an alternating schedule), some call's "
        "own backward reached it or every call reached the same parameters (a subset the step draws per call, one head per "
        "sampled time step, is a note), its "
        "group's lr was above 0 at some optimizer.step of those calls (a warmup from 0 "
        "is a note), and a counterfactual on a copy shows the loss depends on it",
        "WARN of the same kind when its group's lr is 0 (an lr may freeze a group on purpose) or, with train_step, "
        "when the dependence could not be checked; a parameter the loss does not depend on (a term that cancels) is a "
        "note"),
    "update.ascends": Premise(
        "learning_ledger", "train_step descends loss_fn on the batch",
        "train_step run up to 4 times on the user's objects (restored): the first update's cosine with the gradient is "
        "above 0.3 and the loss on the batch rose at every call (or became non-finite), and again when the same start "
        "(restored, the global RNGs reseeded) runs train_step's next calls; where train_step returns its loss on its "
        "own batches at each call, that loss rose at every call too (a step that climbs its objective climbs the loss "
        "it reports)",
        "otherwise no finding (a step on other batches moves this batch's loss by chance: a climb the rerun does not "
        "repeat is a note; a reported loss that fell while the batch's rose, a discriminator whose fakes move on or a "
        "stream drifting from the batch, is a note)"),
    "update.diverges": Premise(
        "learning_ledger", "a few steps of train_step keep the loss finite and below 10x",
        "the loss on the batch, re-evaluated after each of up to 4 train_step calls on the user's objects (restored), "
        "became non-finite or grew more than 10-fold, and again when the same start (restored) runs train_step's next "
        "16 calls (other batches of its stream), where it does not come back (non-finite at the last call, or the "
        "median of the losses after the start above 10x of it)",
        "a blow-up on one sequence of calls and not on the next, a spike the next calls recover from (a large first "
        "step), or a batch that started below the loss train_step reports on its own batches and stays under 10x of "
        "its first report (an easy batch, not the program's loss scale): WARN"),
    "capability.cannot_overfit": Premise(
        "learning_ledger", "the controlled system can fit a tiny fixed batch",
        "copies of the model and optimizer train on the first 8 examples at the program's lr x1, x10, x100, x1000 (down "
        "to x0.01 when it diverges): FAIL only with a cause: the weights barely moved at every lr (and again from the lr "
        "the program's own schedule reaches, at train_step's optimizer steps or as its LR scheduler's recorded "
        "initial_lr/max_lr, where that is above every lr tried: a warmup's start), the program's lr and "
        "every lower one diverged with the weights moving less at the lowest (an equal move at 100x less lr is the "
        "program's own write, an EMA codebook, not the step), or every lr plateaued at the same loss with the weights "
        "moving while the same copy with a learnable offset and scale on its outputs fits (the missing piece shown) and "
        "does not go below the entropy of soft distribution targets (which only outputs outside a distribution's range "
        "can)",
        "no cause shown: WARN inconclusive (a plateau the output offset and scale do not lift: an objective's own floor); "
        "a plateau at the entropy of soft distribution targets (their sum or mean over the batch) is that floor: PASS "
        "with a note; so is a divergence at every lr where the program's own train_step kept "
        "the loss finite over its calls (its clipping or schedule, which the copy's plain step lacks); an objective "
        "without a known floor or a stochastic one is judged on learning (a note); a loss whose graph reaches the "
        "program's own model's parameters (a loss_fn computing part of it from a model it reaches through a global "
        "or another function; one held in its own closure is swapped for the copy it evaluates), or tensors the "
        "program's optimizer trains beside the model (a second network the loss reads), or gives the trained copy no "
        "gradient at all: SKIPPED; a loss that is not finite on the first examples before any step (a mean over an "
        "empty subset: no negatives among them) overfits the whole batch instead"),
    # ---- six_claims ---------------------------------------------------------------------------------------------
    "claim.representation.affine": Premise(
        "six_claims", "a model stacking more than one linear layer is meant to compute a nonlinear map",
        "on an eval-mode copy f(a x1 + (1-a) x2) equals a f(x1) + (1-a) f(x2) within the output dtype's tolerance, and "
        "the task needs more: the batch's labels are not linearly separable / a linear map leaves variance random "
        "nonlinear features explain (F-test); a module named like an activation that is nn.Identity is named beside",
        "a module named like an activation that is nn.Identity without that evidence from the targets is a WARN of the "
        "same kind (the activation may be off by configuration on purpose); otherwise a linear model, targets fit "
        "linearly or no evidence give a PASS note"),
    "claim.representation.constant_output": Premise(
        "six_claims", "the output depends on the input",
        "on an eval-mode copy the output is identical for every input, and still is after every weight of a copy is "
        "perturbed by half its largest magnitude",
        "the output varies once the weights are perturbed (a zero-initialised output layer): SKIPPED"),
    "claim.computation.zero_init": Premise(
        "six_claims", "the hidden units of a Linear/Conv layer compute different functions",
        "the layer's weights are all zero, it can train (requires_grad=True), and its gradient rows on the measured "
        "step are identical and nonzero, or it gets no gradient even after two steps of the program's optimizer on a "
        "copy while the same layers given random weights (their reset_parameters(), seeded) on another copy get one, so "
        "the initialization is what keeps them tied (gradient rows that differ: PASS)",
        "WARN claim.computation.tied_without_gradient when the layer gets no gradient now but does after two steps (a "
        "zero-initialized layer downstream), when random weights get none either (an all-zero input such as a learned "
        "prior over a zero buffer, an unused output), or when the steps could not run; a frozen (requires_grad=False) layer with zero "
        "weights is a WARN of the same kind (a fixed map on purpose, or weights never loaded)"),
    "claim.computation.symmetric_init": Premise(
        "six_claims", "the hidden units of a Linear/Conv layer compute different functions",
        "the layer's weight rows are identical (within 1e-6 of the largest weight), it can train (requires_grad=True), "
        "and its gradient rows are identical and nonzero, or it gets no gradient even after two steps of the program's "
        "optimizer on a copy while random weights on another copy get one",
        "WARN claim.computation.tied_without_gradient as for zero_init; a frozen layer with identical rows (a fixed "
        "averaging or summing layer by design) is a WARN of the same kind"),
    "claim.objective.nonfinite_loss": Premise(
        "six_claims", "the loss is finite", "the loss of the measured step is NaN or infinite",
        _ALWAYS + "a non-finite loss is the divergence whatever the program means"),
    "claim.objective.probabilities_as_logits": Premise(
        "six_claims", "integer class targets (inferred from shapes) are trained with cross-entropy of logits",
        "the outputs are non-negative rows summing to 1 and the loss equals cross-entropy of those outputs read as "
        "logits (as a mean or a sum)",
        "the loss is not that cross-entropy: no finding here (the other probes run)"),
    "claim.objective.wrong_sign": Premise(
        "six_claims", "a loss on class targets is never negative; a regression loss falls toward the targets",
        "regression: the loss is negative and both outputs == targets and outputs 1% closer raise it; classification: "
        "the loss is negative and raising every correct-class output raises it (it punishes the targets)",
        "a negative loss that falls when the correct-class outputs rise (a policy gradient with negative advantages, "
        "a bonus term) or a regression loss that falls toward the targets: no finding"),
    "claim.objective.wrong_direction": Premise(
        "six_claims", "integer targets indexing an output axis are class labels the loss rewards",
        "raising every correct-class output by 0.01 x max(1, mean |output|) raises loss_fn, and the outputs are read as "
        "class scores: in >= 90% of supervised rows the loss's gradient at the target entry has the opposite sign of "
        "every other entry's",
        "the probe cannot run, or the gradient's signs are mixed (embeddings a distance loss reads, a prototypical "
        "network): no finding; the task is inferred from shapes (six_claims takes no task=)"),
    "claim.objective.not_descended": Premise(
        "six_claims", "the gradient descends the objective it came from",
        "a deep copy stepped along -grad by 1e-3, 1e-4 and 1e-5 of the parameters' norm: the loss (seeded, shown "
        "reproducible at fixed parameters) rose at all three",
        "a loss not reproducible at fixed parameters, a semi-gradient objective (it reads .item()/.detach() of tensors "
        "that require grad), or rises that do not scale with the step (a smaller step's rise over 30 % of the larger "
        "one's, or under 3 % between the two smallest: the loss jumps there, a discontinuity): a note, not judged"),
    "claim.evaluation.random_masks": Premise(
        "six_claims", "evaluation is deterministic: with the model in eval mode it draws no random mask",
        "eval_fn runs twice on a deep copy under a dispatch mode that counts random masks (native_dropout in training "
        "mode, bernoulli): masks were drawn with every Dropout/BatchNorm module in eval mode, and the two calls "
        "returned different metrics; or a module built with a drop rate (a dropout layer, a drop path reading "
        "self.training) drew random numbers (rand, bernoulli, uniform) while in eval mode and two eval-mode forwards "
        "of a copy on the same batch under different seeds differ",
        "WARN when masks were drawn but the two calls agreed, or when every mask came from a dropout call written "
        "with a literal training=True in the program (stochastic evaluation by design: an always-on prenet, Monte "
        "Carlo dropout); WARN not_repeatable when the calls differ with no mask drawn (randomness of another kind)"),
    "claim.differentiation.detached": Premise(
        "six_claims", "every trainable parameter the loss depends on gets a gradient",
        "after backward on the measured copy its gradient is None and " + _DEPENDS,
        "WARN claim.differentiation.unused (the loss does not depend on it, or that could not be checked)" + _OTHER),
    "claim.differentiation.nonfinite": Premise(
        "six_claims", "backward gives finite gradients", "a parameter's gradient holds NaN/inf",
        _ALWAYS + "a non-finite gradient makes any update non-finite"),
    "claim.update.not_updated": Premise(
        "six_claims", "every parameter with a healthy gradient (finite, above 1e-6 of its largest weight) moves in one "
        "step",
        "the program computes its gradient (healthy on the measured backward) and one optimizer step on a copy (a "
        "warmup's lr raised to the base lr) left it unchanged, and so did two more steps of the copy on the same "
        "gradient (an optimizer whose own step holds its first update is a note; where the group's lr is positive, one more step at a 10^4-fold lr, at least 1, moving it is a note too (the update at this lr and gradient was below float32's resolution next to the weights)), and when train_step is given beside "
        "the optimizer, one "
        "call of it on the user's objects (restored) does not move it by hand either; or one call of train_step on the "
        "user's objects (restored) when there is no optimizer or several left it unchanged, no other optimizer "
        "train_step reaches owns it (an alternating schedule trains it in other calls), and, where its group's lr at "
        "that step was at most 1e-6, a copy of the optimizer stepped on the measured gradient at that lr and then a "
        "raised one leaves it unchanged too (a warmup's start: a note)",
        "parameters in a group at lr 0 are WARN claim.update.lr_zero (beside trained groups) or a note (every group at "
        "lr 0: a warmup); a parameter left out of the optimizer on purpose while autograd still computes its gradient "
        "FAILs: requires_grad_(False) declares it (six_claims has no frozen=)"),
    "claim.evaluation.train_mode": Premise(
        "six_claims", "eval_fn (declared as the evaluation) runs Dropout/BatchNorm in eval mode",
        "pre-hooks on every Dropout/BatchNorm of the model's copy (of the model itself, restored after, where eval_fn's "
        "closure holds parts of it: an eval_fn calling embedding_net.eval() before running its model argument) and of "
        "the modules eval_fn reaches through its closure (an EMA copy), and on every module holding a drop rate its own forward applies while self.training (a drop "
        "path, F.dropout(x, self.input_droprate, self.training)), saw training mode while eval_fn ran (a one-layer "
        "RNN's dropout= applies between layers only: not a mode-dependent module)",
        "no eval_fn: SKIPPED; eval_fn raising: SKIPPED claim.evaluation.not_checked and the report WARNs"),
    "claim.evaluation.writes_model": Premise(
        "six_claims", "evaluation leaves the model it measures unchanged",
        "eval_fn ran twice on the same batch (on a deep copy, or on the model itself, restored, where its closure holds "
        "parts of it) with every Dropout/BatchNorm module in eval mode: a parameter or buffer of the model's "
        "state_dict (a batch norm's step counter aside) changed, and the two calls returned different metrics",
        "a write that leaves the metric unchanged: no finding; the calls differing with nothing written stay "
        "claim.evaluation.not_repeatable (WARN)"),
    "claim.evaluation.non_finite": Premise(
        "six_claims", "evaluation computes finite values",
        "eval_fn returned a non-finite metric, or the model's eval-mode output on the batch is non-finite while its "
        "train-mode output is finite",
        _ALWAYS + "a non-finite evaluation is the divergence"),
    # ---- shape_ledger -------------------------------------------------------------------------------------------
    "shape.mismatch": Premise(
        "shape_ledger", "a layer computes the geometry its class and hyperparameters say, on the input it declares",
        "before each layer runs its output shape is derived from the observed input, its hyperparameters (stride, "
        "padding, ...) and the weight it holds (channels, kernel), a transposed conv's output_size included: the "
        "observed output differs for a layer that runs torch's own forward, and torch's forward of its class, replayed "
        "on a meta copy of the layer with the call's positional arguments, gives the derived shape (the call ran an "
        "instance forward or a hook); or the input disagrees with what the layer declares (in_channels, num_features, "
        "rank); in diagnose, where the forward then raised on inputs read from the batch, one step of the user's "
        "train_step (guarded) raises too",
        "the replay giving the observed shape is torch's arithmetic (PASS shape.derived); WARN when the replay fails or "
        "the class's forward takes arguments the call may have passed by keyword, and for a subclass of a torch layer "
        "that writes its own forward (a learned positional embedding returning [1, T, D], a same-padding conv): its "
        "geometry may be its design; SKIPPED when the forward raised on firstdiv's call and the user's train_step "
        "completes"),
    "shape.flatten_mismatch": Premise(
        "shape_ledger", "the features arriving at a Linear after a flatten are its in_features",
        "in_features differs from the C*H*W that arrives; the last layer that set C or the spatial size is named",
        _ALWAYS + "the Linear cannot run on them (mat1 and mat2 shapes cannot be multiplied)"),
    "shape.forward_raised": Premise(
        "shape_ledger", "the forward pass completes", "it raised (no earlier layer disagreed, or after one did); in "
        "diagnose, on inputs read from the batch, one step of the user's train_step (guarded) raises too",
        "SKIPPED when the user's train_step completes: the loop does not call the model as firstdiv did (pass inputs=)"),
    "shape.design_mismatch": Premise(
        "shape_ledger", "each module named in designed= outputs its designed per-example shape",
        "the module's first output differs from the declared shape; the culprit since the last designed output that "
        "matched is named",
        "only with designed=; a designed module that never returned an output is SKIPPED"),
    "shape.unread_pixels": Premise(
        "shape_ledger", "with unread='fail' declared, every input row and column is read by a conv/pooling window",
        "the layer's kernel, stride, padding and dilation leave trailing rows/columns no window reads (a stride longer "
        "than the window skips by design and is not flagged)",
        "WARN by default (unread='warn'), a PASS note with unread='note'"),
    # ---- attention_check ----------------------------------------------------------------------------------------
    "attention.shape": Premise(
        "attention_check", "the attention weights are [B, Nh, Tq, Tk] (or [B*Nh, Tq, Tk]) and the output [B, Tq, E] "
        "([Tq, B, E] with batch_first=False), E the hidden states' width, the merged heads [B, Tq, Nh*Dh]",
        "the captured softmax (or the weights recomputed from SDPA / multi_head_attention_forward) is not [B, Nh, Tq, Tk] "
        "with B, Tq, Tk from the inputs and Nh declared by num_heads= or the module's own heads attribute (num_heads, "
        "num_attention_heads, n_head, its config)",
        "an output or merged heads of another shape (a projection to another width, pooling, heads left unmerged) may be "
        "the module's design: a WARN naming it (the merge itself is LEVEL_2's evidence); no argument declares the "
        "intended output shape"),
    "attention.nonfinite": Premise(
        "attention_check", "the attention weights and output are finite",
        "the captured weights or the module's output hold NaN/inf (a row whose keys are all masked is named)",
        _ALWAYS + "non-finite weights or outputs are the divergence"),
    "attention.blocked_query": Premise(
        "attention_check", "every query has at least one allowed key",
        "the forbidden (query, key) pairs - the causal mask (declared or inferred) plus padding and masks the inputs "
        "carry - forbid every key of a query that the inputs' padding (key_padding_mask=, else the keys an input mask "
        "forbids to every query, in self-attention) declares a real token",
        "a blocked query that is padding itself (left padding under a causal mask), or whose own padding no input "
        "declares, is a WARN naming key_padding_mask=: its output is normally discarded"),
    "attention.rows_not_normalized": Premise(
        "attention_check", "the attention weights sum to 1 over the keys",
        "the captured weights' rows deviate from 1 beyond max(atol, 4*eps*Tk) (whether the columns sum to 1 instead is "
        "in the evidence) and the module reads them as they are: on the copy, the same forward pass with these weights "
        "renormalised over the keys changes the output beyond atol + 1e-5 * max|output| (a module that renormalises "
        "over the keys itself, as slot attention does, PASSes with that evidence)",
        "the weights cannot be replaced in the call (F.multi_head_attention_forward) or the counterfactual raises: a "
        "WARN saying so"),
    "attention.forbidden_weight": Premise(
        "attention_check", "forbidden keys (causal future, padding, masks) get weight exactly 0",
        "a forbidden (query, key) pair has a nonzero captured weight; causality comes from causal=, else an is_causal/"
        "causal attribute, else a causal mask in the inputs, else the captured weights (most of the upper triangle "
        "exactly 0), confirmed there only when every future weight is 0 or the nonzero ones are exactly a causal mask "
        "shifted by k (query t sees keys t+1..t+k and nothing beyond: tril(diagonal=k)); padding and masks are the "
        "inputs' declarations",
        "causality read from the weights in another pattern (a bidirectional prefix, blocks): a future-key leak is a "
        "WARN naming causal=, and the LEVEL_4 reference keeps the module's own zero pattern"),
    "attention.reference_mismatch": Premise(
        "attention_check", "the module computes softmax(q k^T / sqrt(Dh) + mask) v on its own q/k/v projections (rotary "
        "embeddings and grouped heads accounted for)",
        "the merged heads differ from F.scaled_dot_product_attention on the module's q/k/v (double precision, the "
        "intended mask) beyond atol + max(1e-4, 32 eps) of the reference, and the reference at another scale (1, 1/Dh, "
        "1/sqrt(E), 1/E) matches them; T5-style relative position bias is SKIPPED",
        "not confirmed when a scale fits and scale= is not given: the scale is taken to be meant as 1/sqrt(Dh) (see "
        "attention.missing_scale, attention.wrong_scale); scale= declares another; a mismatch no other scale explains "
        "(QK-norm or cosine attention, ALiBi, a gate on the heads) is a WARN", confirmed=False),
    "attention.missing_scale": Premise(
        "attention_check", "diagnosis of attention.reference_mismatch (with module=): the scores are meant to be scaled "
        "by 1/sqrt(Dh), or by the scale= given",
        "the module's output matches the reference at scale 1",
        "not confirmed: a scale folded into the projection's initialisation by design (outside T5, which is skipped by "
        "name) FAILs unless scale= declares it; nothing in the module's behaviour tells the intended scale",
        confirmed=False),
    "attention.wrong_scale": Premise(
        "attention_check", "diagnosis of attention.reference_mismatch (with module=): the scores are meant to be scaled "
        "by 1/sqrt(Dh), or by the scale= given",
        "the module's output matches the reference at 1/Dh, 1/sqrt(E) or 1/E (or 1/sqrt(Dh) when scale= declares another)",
        "not confirmed: a 1/Dh scale by design (muP) FAILs unless scale= declares it; nothing in the module's behaviour "
        "tells the intended scale", confirmed=False),
    "attention.axis_semantics": Premise(
        "attention_check", "heads are split and merged without mixing batch elements, positions or heads",
        "on the copy: the value projection replaced by distinct tags must come back as weights @ split(tags) in the "
        "merged heads; perturbing batch 0 must leave the other batch elements unchanged; with the weights pinned, "
        "perturbing position p may change only positions whose weight on p is nonzero",
        "a probe that cannot run (B = 1, cross-attention, several attention calls) is SKIPPED"),
    "attention.head_split_merge": Premise(
        "attention_check", "diagnosis of attention.axis_semantics (with module=): heads split/merged correctly",
        "as attention.axis_semantics", "as attention.axis_semantics"),
    "attention.causality": Premise(
        "attention_check", "with causal attention, a future token does not change an earlier output",
        "changing the hidden state at position p changed an output before p beyond atol + 1e-5 * max|output|; "
        "causality declared or confirmed as for attention.forbidden_weight",
        "causality read from the captured weights in a pattern that is not a shifted causal mask (a prefix-LM): a WARN "
        "naming causal=; not causal: SKIPPED"),
    "attention.future_visible": Premise(
        "attention_check", "diagnosis (with module=) of attention.causality, or of attention.forbidden_weight at a future "
        "key: the causal mask hides the future",
        "as those kinds", "as those kinds: unconfirmed causality gives their WARN, which keeps its level's kind"),
    "attention.padding_visible": Premise(
        "attention_check", "diagnosis of attention.forbidden_weight at a padding key: padding declared by the inputs' "
        "key_padding_mask / attention_mask gets weight 0",
        "a padding key (as the inputs declare it) has a nonzero captured weight",
        "no padding mask in the inputs: not checked"),
    "attention.masked_key_visible": Premise(
        "attention_check", "diagnosis of attention.forbidden_weight at a key an input mask forbids: it gets weight 0",
        "a key the inputs' mask forbids has a nonzero captured weight", "no mask in the inputs: not checked"),
    "attention.softmax_axis": Premise(
        "attention_check", "diagnosis of attention.rows_not_normalized when the columns sum to 1: the softmax is meant "
        "to run over the keys",
        "rows do not sum to 1, every column does, and renormalising the weights over the keys on the copy changes the "
        "output (as attention.rows_not_normalized)",
        "softmax over the queries followed by a renormalisation over the keys (slot attention) PASSes; the "
        "counterfactual cannot run: WARN, as attention.rows_not_normalized"),
    "attention.eval_dropout": Premise(
        "attention_check", "under eval() no dropout is active",
        "two eval-mode passes on the same input (no reseeding) differ and a dropout-family op (F.dropout with "
        "training=True, SDPA dropout_p > 0) ran in an eval-mode module",
        _ALWAYS + "a random op under eval() with outputs that differ; later checks leave it out (a note)"),
    "attention.eval_randomness": Premise(
        "attention_check", "the eval path is deterministic",
        "two eval-mode passes on the same input differ beyond the threshold with no dropout call seen",
        _ALWAYS + "the module's own outputs differ on the same input"),
    # ---- tensor_trace -------------------------------------------------------------------------------------------
    "trace.forward_raised": Premise(
        "tensor_trace", "the forward pass completes", "it raised; the ledger up to the failure is kept; in diagnose, on "
        "inputs read from the batch, one step of the user's train_step (guarded) raises too",
        "SKIPPED when the user's train_step completes: the loop does not call the model as firstdiv did (pass inputs=)"),
    "contract.axis_mismatch": Premise(
        "tensor_trace", "each module in contracts= outputs the named axes it declares (names bound on first sight)",
        "the recorded output shape violates the contract (an axis size or a bound name disagrees)",
        "only with contracts=; a module that never returned a tensor is a WARN contract.not_reached"),
    "layout.values_moved": Premise(
        "tensor_trace", "a rearrangement keeps each example's values in that example",
        "a reshape chain composed as arange(input).reshape(output), or (layout_probe=True) a user module re-run on a "
        "copy with arange values, gives the exact map of where each value went; FAIL when the input's one axis of the "
        "examples' size (batch_axis=) is cut across output axes or shares an output axis with others, and on a deep "
        "copy in eval mode (RNGs reseeded) replacing one example's inputs by another's moves the other examples' "
        "outputs",
        "values moved only among other axes (patches to an image, a relative-position shift, heads merged without a "
        "transpose) are a permutation that may be the design: WARN with the axes; an examples axis that cannot be told "
        "apart by size, examples regrouped with their features whose outputs stay their own (a batch of vectors), or a "
        "copy that cannot run: WARN; contracts= declares the intended axes"),
    # ---- feature_space ------------------------------------------------------------------------------------------
    "features.nonfinite": Premise(
        "feature_space", "representation vectors are finite", "some values are NaN/inf",
        _ALWAYS + "non-finite features are the divergence"),
    "features.collapse_zero": Premise(
        "feature_space", "representations of different inputs are not zero vectors",
        "more than 90% of the vectors have a norm <= 1e-6 of the largest norm, and also of the 99th-percentile norm (or "
        "exactly 0: not only against a few outliers), and on a grid of vectors ([B, T, D]) the zero ones are not a "
        "contiguous head or tail of every line along one axis (padding positions)",
        "not confirmed for padding flattened into one vector axis ([B*T, D] with padding rows in each sequence): those "
        "zero rows FAIL, and no argument declares padding or sparse features; zero only against outliers, or "
        "padding-like on a grid: a WARN saying which", confirmed=False),
    "features.dominant_coordinate": Premise(
        "feature_space", "no single coordinate dominates the representation's energy",
        "none: it does not FAIL (from the vectors alone a dominant coordinate cannot be told from a design)",
        "a WARN when one coordinate holds more than max(0.5, min(0.9, 8/D)) of sum x_k^2: representations with a few "
        "massive coordinates by design (transformer hidden states' massive activations, unnormalised raw features) "
        "exist, and no argument declares the coordinates' intended scales"),
    "features.collapse_direction": Premise(
        "feature_space", "representations of different inputs point in different directions",
        "mean |cos| over up to 256 vectors exceeds 0.99 AND after centering nothing is left but one direction (top "
        "principal component > 90%, or centered energy < 1e-4 of the mean vector's)",
        "mean |cos| above 0.99 with a rich centered spread (a shared offset, anisotropy) is a WARN"),
    "features.invariance_broken": Premise(
        "feature_space", "the quantity the user names is invariant to the transform the user names (invariances=)",
        "encoder(inputs) and encoder(transform(inputs)) on copies, same RNG state, differ in that quantity beyond its "
        "tolerance",
        "only with invariances=; an encoder or transform that raises is a WARN"),
    # ---- loader_timing ------------------------------------------------------------------------------------------
    "loader.starved": Premise(
        "loader_timing", "the consumer step is the work per batch of the user's loop and is not meant to wait for data",
        "median steady wait (plus worker start-up per batch) >= 0.5 ms and > 0.5 x the median work, or >= 25% of steady "
        "batches waiting longer than their own work; a wait blamed on __getitem__/collate must be explained by the "
        "producer's measured cost (else remeasured up to 3 times, then noise: PASS); an unsplittable phase must be "
        "starved in two measurements in a row; the consumer is the user's step (or train_step)",
        "a WARN naming what would confirm it: an unsplittable phase measured once because a one-shot iterator cannot be "
        "measured again (a re-iterable loader confirms), or a consumer that is diagnose's stand-in step on a copy of "
        "the model, no step/train_step given (step= / train_step= confirms)"),
    # ---- performance_ledger -------------------------------------------------------------------------------------
    "memory.growth": Premise(
        "performance_ledger", "identical iterations of the step return to the same live tensor set",
        "live tensor bytes the step created (a storage-tracking dispatch mode) rose at every one of 6 identical calls "
        "(or CUDA allocated bytes did), and the tensors kept from earlier iterations hold an autograd graph (a loss "
        "appended instead of loss.item())",
        "WARN when the kept tensors are detached (predictions gathered for an epoch metric, a replay buffer): growth "
        "named with its rate, not shown to be a leak"),
    # ---- compile_ledger -----------------------------------------------------------------------------------------
    "compile.eager_raised": Premise(
        "compile_ledger", "eager runs on every input of inputs_seq", "eager raised on one",
        _ALWAYS + "the function fails before compilation is involved"),
    "compile.compiled_raised": Premise(
        "compile_ledger", "the compiled function runs wherever eager runs", "eager ran, the compiled call raised",
        _ALWAYS + "the compiled call fails where eager does not"),
    "compile.incorrect": Premise(
        "compile_ledger", "compiled outputs equal eager outputs within atol + rtol * |eager|",
        "on some input a leaf of the compiled output is beyond that tolerance of eager's, and eager replayed on fresh "
        "copies over inputs 0..i (the main pass's seeds, then another RNG state at the failing input) agrees with itself "
        "within it",
        "eager differs from itself under another RNG state (dropout in training mode, sampling) or cannot be replayed: "
        "a WARN saying so (compiled code draws other random numbers)"),
    "compile.graph_break": Premise(
        "compile_ledger", "with fullgraph_required=True the call is captured as one graph",
        "the recording capture saw a graph break (reason and file:line) or fullgraph=True does not compile",
        "WARN without fullgraph_required=True (a graph break is not an error)"),
    "compile.recompiles": Premise(
        "compile_ledger", "one compile per frame is reused across inputs_seq (plus one automatic-dynamic recompile with "
        "dynamic=None)",
        "over the whole inputs_seq the recompile limit was hit (later inputs run eager), or some recompilation is "
        "unexpected (failed guards listed by category) and, from the first one on, inputs_seq recompiles more often than "
        "it reuses a compiled graph",
        "unexpected recompilations whose graphs inputs_seq reuses at least as often as it recompiles (a few padded "
        "bucket sizes with dynamic=False): a WARN; no argument declares the expected recompiles"),
    # ---- compare_outputs ----------------------------------------------------------------------------------------
    "outputs.fed_differently": Premise(
        "compare_outputs", "every variant is fed the reference's preprocessing/generation settings (as declared in "
        "preprocessing= / generation=)",
        "the sha256 of a variant's declared settings differs from the reference's; the differing keys are named",
        "only with preprocessing= / generation="),
    "outputs.train_mode": Premise(
        "compare_outputs", "variants compared in mode='eval' (the default) are in evaluation mode",
        "a variant's module, compiled module or exported graph has dropout or BatchNorm active in training mode",
        "mode='train' does not make this check"),
    "outputs.nondeterministic_eval": Premise(
        "compare_outputs", "the reference's evaluation is deterministic",
        "two more calls of the reference without reseeding differ beyond its tolerance; the module that ran an active "
        "dropout-family op, else the first differing layer, is named",
        "calls that agree although an op was active: WARN outputs.stochastic_in_eval; a fresh-process reference: "
        "SKIPPED"),
    "outputs.raised": Premise(
        "compare_outputs", "every variant runs on the fixed inputs", "the variant raised",
        _ALWAYS + "a variant that raises where the reference runs is the divergence"),
    "outputs.diverged": Premise(
        "compare_outputs", "each variant matches the reference within its declared tolerance (tolerances= / rtol / "
        "atol)",
        "some output leaf is outside the tolerance; the first diverging layer is localised when layers=True",
        "a compiled variant of a random training forward: SKIPPED outputs.not_comparable"),
    "outputs.gradient_diverged": Premise(
        "compare_outputs", "in mode='train' with loss=, each variant's parameter gradients match the reference's within "
        "its tolerance",
        "torch.autograd.grad of loss(output) per parameter name: the first parameter outside the tolerance",
        "a variant without parameters to differentiate: SKIPPED"),
    # ---- memory_phases ------------------------------------------------------------------------------------------
    "memory.oom": Premise(
        "memory_phases", "each phase fits in memory (cap_bytes= declares a cap)",
        "torch.OutOfMemoryError was raised inside the with-block (or the cap was exceeded); the phase is named",
        _ALWAYS + "the program ran out of memory"),
    # ---- DiagnosticSet ------------------------------------------------------------------------------------------
    "diagnostic.raised": Premise(
        "DiagnosticSet", "model_or_fn runs on every stored example", "it raised on one",
        _ALWAYS + "an example that ran when stored and now raises"),
    "diagnostic.changed": Premise(
        "DiagnosticSet", "model_or_fn reproduces the outputs accepted with create()/update() within atol/rtol",
        "an example's output is outside the tolerance or its decision (argmax, abstention) changed, and two more runs "
        "of it with torch, Python and numpy seeded differently (every RNG restored) agree within the tolerance and on "
        "the decision",
        "model_or_fn differs from itself under other seeds (dropout left on) or cannot run again: a WARN with its own "
        "spread"),
    "diagnostic.missing": Premise(
        "DiagnosticSet", "every example the index lists has stored inputs and outputs", "tensors.pt holds none for it",
        _ALWAYS + "the stored set is inconsistent"),
    "diagnostic.fingerprint_mismatch": Premise(
        "DiagnosticSet", "stored outputs are the ones the index fingerprinted",
        "the outputs' fingerprint differs from the index's", _ALWAYS + "the stored set was changed outside firstdiv"),
    # ---- watch --------------------------------------------------------------------------------------------------
    "ownership.unowned": Premise(
        "watch", "a parameter with requires_grad=True is trained by a watched optimizer",
        "at a check step no watched optimizer's param groups hold it, it had a gradient at the measured optimizer step "
        "(the program computes it), and a copy taken then is unchanged at the next step, when every optimizer of that "
        "iteration has stepped (nothing else trains it)",
        "WARN of the same kind when it had no gradient (the loss may not use it), when it changed by the next step (an "
        "unwatched optimizer or a hand-written update trains it), and while the next step is not reached; frozen= "
        "patterns are exempt"),
    "ownership.undeclared_frozen": Premise(
        "watch", "with frozen= declared (frozen=() meaning nothing is frozen), every requires_grad=False parameter is "
        "declared",
        "the declaration against the flags at a check step",
        "WARN while frozen= is not given"),
    "frozen.moved": Premise(
        "watch", "a parameter declared frozen (frozen=) does not change",
        "a copy taken in the optimizer's step pre-hook differs from the value after the step",
        "only with frozen="),
    "grad.nonfinite": Premise(
        "watch", "the gradients an optimizer step applies are finite",
        "in the step pre-hook (after GradScaler's unscale; a step it skips is not measured) a held parameter's gradient "
        "norm is non-finite",
        _ALWAYS + "a non-finite gradient makes the update non-finite"),
    "grad.none_at_step": Premise(
        "watch", "an optimizer step applies gradients from a backward",
        "in the step pre-hook every trainable parameter the optimizer holds has .grad None",
        "some missing: WARN grad.missing; a step given a closure (gradients come inside it) is not judged unless "
        "gradients_ready() re-reads them"),
    "grad.not_zeroed": Premise(
        "watch", "an optimizer's gradients are zeroed before the next step's first backward (several backwards per step "
        "are fine)",
        "a gradient hook on one stepped parameter, from a check step to that optimizer's next step: no arriving gradient "
        "found .grad None or zero",
        _ALWAYS + "the previous step's gradient was added into this one's"),
    "update.too_large": Premise(
        "watch", "one optimizer step changes no weight (>= 2 dims) by more than its own norm",
        "||delta|| / ||weight|| of one measured step exceeds 1 (weights that had a zero norm at the previous check are "
        "exempt), and the step hurt the loss: the loss of the next iteration is non-finite or above the measured "
        "iteration's by more than 5% of it",
        "WARN of the same kind when the loss did not rise (a weight initialised small under Adam takes such a first "
        "step), when no loss was passed to w.step(loss) / w.observe(loss=), and while the next step is not reached; "
        "ratio_bounds moves only the WARN band"),
    "loss.nonfinite": Premise(
        "watch", "the loss is finite", "the mean of the losses passed to w.step()/w.observe() since the last check is "
        "NaN or infinite", _ALWAYS + "a non-finite loss is the divergence"),
    "mode.train_at_eval": Premise(
        "watch", "code inside w.evaluating() (declared evaluation) runs Dropout/BatchNorm/InstanceNorm in eval mode",
        "a forward pre-hook at the first forward inside evaluating() finds such a module in train mode",
        "only the root module in train mode, with no dropout/norm layer: WARN"),
    # ---- rng_audit (lab) ----------------------------------------------------------------------------------------
    "rng.not_reproducible": Premise(
        "rng_audit", "a pass started from torch.manual_seed(seed) draws the same data order, items and RNG states every "
        "time (per-setting findings are named num_workers=N, and 'applied and verified' for the repair)",
        "two passes per num_workers setting on deep copies, each after torch.manual_seed(seed), a probe observing (never "
        "drawing) every RNG before and after each __getitem__: the first difference is named",
        _ALWAYS + "the two passes of the user's own pipeline differ"),
    "rng.duplicated_across_workers": Premise(
        "rng_audit", "each DataLoader worker draws its own random stream",
        "within one pass, draws repeated from the same RNG state in more than one worker",
        _ALWAYS + "the workers were observed replaying the same stream"),
    # ---- determinism (lab) --------------------------------------------------------------------------------------
    "determinism": Premise(
        "determinism", "a workload run twice with the same seed is bit-identical (the finding 'same seed twice'; the "
        "other variants are WARN)",
        "the workload run twice with the seed: curves and state are compared element by element",
        _ALWAYS + "the user's own run differs from itself"),
    "determinism.not_reproducible": Premise(
        "determinism", "a workload run twice with the same seed is bit-identical",
        "as the finding 'determinism' at 'same seed twice': the first diverging epoch is named",
        _ALWAYS + "the user's own run differs from itself"),
}


_INTRO = ("Each check kind below states what it assumes the program means (premise), how that is confirmed on the "
          "program's own behaviour before the check FAILs, and what it reports when the premise cannot be confirmed. "
          "`firstdiv._registry.premise(kind)` returns the same entry.")


def unconfirmed_kinds() -> list[str]:
    """The kinds whose FAIL rests, on at least one path, on a premise the code does not confirm."""
    return [k for k, p in PREMISES.items() if not p.confirmed]


def _md(text: str) -> str:
    """Plain text as Markdown: ``*`` and ``__`` (``lr*|grad|``, ``__getitem__``) would start emphasis."""
    return text.replace("*", "\\*").replace("__", "\\_\\_")


def _section(kind: str, p: Premise, name: str) -> list[str]:
    others = [i for i in p.instruments if i != name]
    out = [f"### `{kind}`", "", f"- **Premise:** {_md(p.premise)}.", f"- **Confirmed by:** {_md(p.confirmation)}.",
           f"- **When unconfirmed:** {_md(p.unconfirmed)}.",
           "- **Status:** " + ("confirmed before FAIL." if p.confirmed else "**not confirmed on every FAIL path.**")]
    if others:
        out.append(f"- **Also emitted by:** {', '.join(others)}.")
    return out + [""]


def render_checks_md(order: Sequence[str] = ()) -> str:
    """``docs/checks.md``: the rule, then every kind grouped by instrument (``order`` first, then the table's own
    order of first appearance): premise, how it is confirmed, what happens when it is not."""
    seen = list(dict.fromkeys([*order, *(p.instrument for p in PREMISES.values()),
                               *(i for p in PREMISES.values() for i in p.also)]))
    missing = unconfirmed_kinds()
    lines = ["# Checks that can FAIL", "", f"<!-- generated from firstdiv._premises.PREMISES by: {REGENERATE} -->", "",
             "From DESIGN.md, *Trust: what a FAIL means*:", "", f"> {RULE}", "",
             _INTRO, "", f"{len(PREMISES)} kinds; {len(missing)} of them FAIL on at least one path without confirming "
             "their premise yet: " + ", ".join(f"`{k}`" for k in missing) + ".", ""]
    for name in seen:
        kinds = [(k, p) for k, p in PREMISES.items() if p.instrument == name]
        kinds += [(k, p) for k, p in PREMISES.items() if name in p.also]
        if kinds:
            lines += [f"## {name}", ""]
            for kind, p in kinds:
                lines += _section(kind, p, name)
    return "\n".join(lines).rstrip("\n") + "\n"


def write_checks_md(path: str | Path = "docs/checks.md") -> None:
    """Write :func:`render_checks_md` to ``path``."""
    Path(path).write_text(render_checks_md(), encoding="utf-8")
