"""The public corpus gate's jobs, run in worker processes (two: the CI machine's cores) so the gate costs half its
serial time. Each job builds its program in the worker, runs it, and returns plain data (a traceback text when the
run itself raised); the tests in ``test_public_gate.py`` assert on what comes back."""

from __future__ import annotations

import pathlib
import sys
import traceback
from typing import Any

_HERE = pathlib.Path(__file__).resolve().parent
for path in (str(_HERE), str(_HERE.parent), str(_HERE.parent.parent / "src")):
    if path not in sys.path:
        sys.path.insert(0, path)


def _setup() -> dict[str, Any]:
    import torch
    from _api import load_dir

    torch.set_num_threads(1)
    return load_dir(_HERE / "public", "realworld_public")


def correct(name: str, seed: int) -> dict[str, Any]:
    """diagnose(stop_at_first=False) on the correct port under the no-trace harness: its status and FAILs."""
    try:
        from _gate import run_correct
        from harness import assert_no_trace, watched

        program = _setup()[name].build(seed)
        out = assert_no_trace(lambda: run_correct(program), watched(program))
        if not isinstance(out, tuple):
            return {"error": f"diagnose raised {type(out).__name__}: {out}"}
        status, verdicts = out
        return {"status": status, "fail": {k: v.summary for k, v in verdicts.items() if v.status == "FAIL"},
                "warn": sorted(k for k, v in verdicts.items() if v.status == "WARN")}
    except BaseException:  # noqa: BLE001 - the harness's own assertion included: reported, never lost
        return {"error": traceback.format_exc(limit=6)}


def bug(name: str, index: int, full: bool = False) -> dict[str, Any]:
    """The bug's owning instrument and plain diagnose: whether each localizes it. Where the owner does not, the bug
    is not localized by both whatever diagnose says, so the gate skips diagnose there (``full`` runs it anyway, for
    the reasons ``public_misses.py`` writes)."""
    try:
        from _gate import localized, run_bug
        from first_contact import diagnose_bug

        b = _setup()[name].BUGS[index]
        v = run_bug(b)
        owner = localized(b, v)
        skipped = {"status": "not run (the owner did not localize it)", "localized": False}
        return {"owner": owner, "owner_saw": f"{v.status} {v.where} {v.kind}: {v.summary[:200]}",
                "diagnose": diagnose_bug(b) if owner or full else skipped}
    except BaseException:  # noqa: BLE001
        return {"error": traceback.format_exc(limit=6)}


def learns(name: str) -> dict[str, Any]:
    """The correct port built at seed 0 and run under its own loop (``SELF_CHECK_STEPS``, else 30 steps): its first
    and last loss, or what went wrong."""
    try:
        from _api import Program, self_check

        module = _setup()[name]
        program = module.build(0)
        if not isinstance(program, Program):
            return {"error": f"build(0) returned {type(program).__name__}, not a Program"}
        first, last = self_check(program, steps=getattr(module, "SELF_CHECK_STEPS", 30))
        return {"first": first, "last": last}
    except BaseException:  # noqa: BLE001
        return {"error": traceback.format_exc(limit=6)}


def steps(name: str, index: int) -> dict[str, Any]:
    """The bug variant built at seed 0 and one call of its ``train_step``: how many elements its loss has."""
    try:
        import torch
        from _api import Program

        program = _setup()[name].BUGS[index].build(0)
        if not isinstance(program, Program):
            return {"error": f"the bug's build returned {type(program).__name__}, not a Program"}
        return {"numel": torch.as_tensor(program.train_step()).detach().numel()}
    except BaseException:  # noqa: BLE001
        return {"error": traceback.format_exc(limit=6)}
