"""The fault catalog: small, real-looking PyTorch training programs, clean or with one bug injected.

>>> from firstdiv import zoo
>>> p = zoo.build("mlp", fault="detach", seed=0)
>>> losses = p.train(steps=50)            # the user's own loop
>>> evidence = p.evidence()               # model, batch, loss_fn, optimizer, train_step, eval_fn, ...

References (``REFERENCES``): ``mlp`` (fc1 -> ReLU -> fc2 -> ReLU -> fc3 classifier, SGD), ``cnn``
(two conv/BatchNorm/ReLU/pool blocks + linear head, shuffled DataLoader, SGD with momentum),
``finetune`` (``backbone`` + replaced ``head``, Adam), ``transformer`` (tiny causal LM with
``embed``, ``blocks``, ``lm_head``; next-token targets, AdamW), ``regression`` (MLP, MSE, SGD), and
``pipeline`` (an image + mask preprocessing pipeline: a raw ``sample`` and its ``stages``, no model).
Programs also carry what the shape and meaning instruments take (``inputs``, ``contracts``,
``attention``, ``features``; ``sample``, ``stages``, ``stage_probes``, ``stage_contracts``) and what the
speed, memory, compilation and deployment instruments take (``loader_case``, ``perf_case``,
``compile_case``, ``variants_case``).
Every program is synthetic, built from ``seed`` through local generators, and leaves the global RNG
untouched. ``FAULTS`` maps each fault name to its :class:`Fault` record, including where the
instruments must localize it (``Fault.expected``).
"""

from __future__ import annotations

from ..errors import InvalidArgument
from . import pipeline
from ._program import Program, assemble, assemble_pipeline
from .catalog import FAULTS, Expect, Fault
from .faults import INJECTIONS
from .references import RECIPES

REFERENCES: tuple[str, ...] = (*RECIPES, pipeline.REFERENCE)

__all__ = ["FAULTS", "REFERENCES", "Expect", "Fault", "Program", "build"]


def _check(reference: object, fault: object, seed: object) -> None:
    if not isinstance(reference, str) or reference not in REFERENCES:
        raise InvalidArgument(f"Expected `reference` to be one of {', '.join(REFERENCES)} but got {reference!r}")
    if fault is not None and (not isinstance(fault, str) or fault not in FAULTS):
        raise InvalidArgument(f"Expected `fault` to be None or one of {', '.join(FAULTS)} but got {fault!r}")
    if fault is not None and reference not in FAULTS[fault].applies_to:
        valid = [name for name, f in FAULTS.items() if reference in f.applies_to]
        raise InvalidArgument(f"Fault {fault!r} applies to {', '.join(FAULTS[fault].applies_to)}, not {reference!r}; "
                              f"faults for {reference}: {', '.join(valid)}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidArgument(f"Expected `seed` to be a non-negative int but got {seed!r}")


def build(reference: str, fault: str | None = None, seed: int = 0) -> Program:
    """Build reference program ``reference`` (one of ``REFERENCES``), with ``fault`` injected if given.

    Deterministic in ``seed``: the same arguments give identical parameters, data and loss curve.
    Raises :class:`~firstdiv.errors.InvalidArgument` for an unknown reference or fault, or a fault
    that does not apply to the reference.
    """
    _check(reference, fault, seed)
    if reference == pipeline.REFERENCE:
        return assemble_pipeline(reference, fault, seed, pipeline.build(seed, fault))
    recipe = RECIPES[reference]()
    if fault is not None:
        recipe = INJECTIONS[fault](recipe)
    return assemble(reference, fault, seed, recipe)
