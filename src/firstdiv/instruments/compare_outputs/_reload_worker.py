"""The fresh-process reload (chapter 31: "create a fresh-process inference test for one saved model").

Parent side: :class:`FreshProcessVariant` holds a saved ``state_dict`` file and a factory
``"pkg.mod:make_model"``. Each call writes the inputs to a temporary file and starts a new Python
process (``python -m firstdiv.instruments.compare_outputs._reload_worker job.json``, with the parent's ``sys.path`` on
``PYTHONPATH`` so the same factory module is importable) that imports the factory, builds the model,
loads the state_dict strictly, puts every module in the training mode the saved model had, runs the
inputs under ``torch.no_grad`` and writes the outputs back (optionally each named module's output).

Child side: :func:`main`. Only state that travels through the state_dict and the factory reaches the
child, which is the point: tensors kept as plain attributes, non-persistent buffers changed after
construction, or a factory that builds a different architecture show up as a divergence.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import weakref
from typing import Any

import torch

from .._core.outputs import cache_tree, is_cache

_MARK = "FIRSTDIV-RELOAD-ERROR: "
WORKER = "firstdiv.instruments.compare_outputs._reload_worker"  # what the child runs with -m
TIMEOUT_S = 300.0


def _plain(value: Any) -> Any:
    """Outputs as containers torch.load(weights_only=True) can read back (ModelOutput -> dict, namedtuple -> tuple,
    a key/value cache -> the dict of its tensors, as compare_outputs' leaves name them; sparse -> dense)."""
    if torch.is_tensor(value):
        value = value.detach().cpu()
        return value.to_dense() if value.layout != torch.strided else value
    if is_cache(value):
        return _plain(cache_tree(value))
    if isinstance(value, dict) or hasattr(value, "items") and callable(value.items):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return (tuple if isinstance(value, tuple) else list)(_plain(v) for v in value)
    return value


def _device_of(args: tuple, kwargs: dict) -> torch.device:
    from torch.utils._pytree import tree_leaves

    return next((t.device for t in tree_leaves((args, kwargs)) if torch.is_tensor(t)), torch.device("cpu"))


def _build(job: dict[str, Any]) -> torch.nn.Module:
    module_name, _, fn_name = job["factory"].partition(":")
    model = getattr(importlib.import_module(module_name), fn_name)()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"factory {job['factory']} returned {type(model).__name__}, not an nn.Module")
    model.load_state_dict(torch.load(job["state"], map_location="cpu", weights_only=True), strict=True)
    modes = job["modes"]
    for name, m in model.named_modules():
        if name in modes:
            m.training = bool(modes[name])
    return model


def _run(job: dict[str, Any]) -> None:
    torch.set_num_threads(int(job["threads"]))
    model = _build(job)
    inputs = torch.load(job["inputs"], weights_only=True)
    args, kwargs = tuple(inputs["args"]), dict(inputs["kwargs"])
    model.to(_device_of(args, kwargs))
    record: list[list[Any]] = []
    handles = []
    if job["layers"]:
        for name, m in model.named_modules():
            if name:
                handles.append(m.register_forward_hook(
                    lambda _m, _i, out, name=name: record.append([name, _plain(out)])))  # _plain copies to CPU
    with torch.no_grad():
        outputs = model(*args, **kwargs)
    for h in handles:
        h.remove()
    torch.save({"outputs": _plain(outputs), "layers": record}, job["output"])


def main(argv: list[str] | None = None) -> int:
    """Child entry point: ``python -m firstdiv.instruments.compare_outputs._reload_worker JOB.json``."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        with open(argv[0], encoding="utf-8") as fh:
            _run(json.load(fh))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent as one line
        line = str(exc).strip().splitlines()
        print(f"{_MARK}{type(exc).__name__}: {line[0][:300] if line else ''}", file=sys.stderr)
        return 1
    return 0


# --- parent side ---------------------------------------------------------------------------------------------------

class FreshProcessVariant:
    """A callable variant: ``variant(*args, **kwargs)`` runs the saved model in a new Python process."""

    def __init__(self, factory: str, state_dict: dict[str, Any], modes: dict[str, bool], train_modules: list[str]):
        self.factory = factory
        self._dir = tempfile.mkdtemp(prefix="firstdiv-reload-")
        self._finalizer = weakref.finalize(self, shutil.rmtree, self._dir, True)
        self.state_path = os.path.join(self._dir, "state_dict.pt")
        torch.save(state_dict, self.state_path)
        self.modes = dict(modes)
        self.firstdiv_train_modules = list(train_modules)
        self.firstdiv_description = (f"reloaded in a fresh Python process: {factory}() + load_state_dict(strict=True) "
                                     f"from {self.state_path}")
        self.processes_started = 0

    def __repr__(self) -> str:
        return f"FreshProcessVariant({self.factory!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._round_trip(args, kwargs, layers=False)["outputs"]

    def firstdiv_layer_outputs(self, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
        return [(name, value) for name, value in self._round_trip(args, kwargs, layers=True)["layers"]]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        paths = [p for p in sys.path if p] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        return env

    def _round_trip(self, args: tuple, kwargs: dict, layers: bool) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="firstdiv-call-") as tmp:
            job = {"factory": self.factory, "state": self.state_path, "modes": self.modes, "layers": layers,
                   "inputs": os.path.join(tmp, "inputs.pt"), "output": os.path.join(tmp, "outputs.pt"),
                   "threads": torch.get_num_threads()}
            torch.save({"args": list(args), "kwargs": dict(kwargs)}, job["inputs"])
            with open(os.path.join(tmp, "job.json"), "w", encoding="utf-8") as fh:
                json.dump(job, fh)
            self.processes_started += 1
            done = subprocess.run([sys.executable, "-m", WORKER, os.path.join(tmp, "job.json")],
                                  env=self._env(), capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
            if done.returncode != 0:
                lines = [ln for ln in done.stderr.splitlines() if ln.startswith(_MARK)]
                why = lines[-1][len(_MARK):] if lines else (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise RuntimeError(f"the fresh process (factory {self.factory}) failed with {why}")
            return torch.load(job["output"], weights_only=True)


if __name__ == "__main__":
    sys.exit(main())
