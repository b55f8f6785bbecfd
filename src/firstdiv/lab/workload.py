"""Workload targets: ``builtin:mlp``, ``path/to/file.py:function`` or ``module:function``.

A workload is a function ``train(seed, config, rec)``: it trains one run from ``seed`` (its only
source of randomness), reads hyperparameters from the ``config`` dict and tells the
:class:`~firstdiv.lab.record.Recorder` what happened. Declaring defaults makes ``--set`` type-checked::

    @firstdiv.workload(defaults={"lr": 0.01, "epochs": 5}, eval_keys=("eval_split",))
    def train(seed, config, rec):
        ...
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import InvalidArgument, WorkloadError

TrainFn = Callable[[int, dict[str, Any], Any], Any]
#: Execution settings: recorded in the environment, not in the config hash.
EXEC_KEYS = ("threads",)


@dataclass(frozen=True)
class WorkloadSpec:
    defaults: dict[str, Any] | None = None
    eval_keys: tuple[str, ...] = ()
    exec_keys: tuple[str, ...] = EXEC_KEYS
    validate: Callable[[dict[str, Any]], None] | None = None
    choices: dict[str, tuple[Any, ...]] = field(default_factory=dict)


def workload(defaults: dict[str, Any] | None = None, *, eval_keys: tuple[str, ...] = (),
             exec_keys: tuple[str, ...] = EXEC_KEYS,
             validate: Callable[[dict[str, Any]], None] | None = None) -> Callable[[TrainFn], TrainFn]:
    """Decorate a ``train(seed, config, rec)`` function with its default config.

    ``eval_keys`` name config keys that change only the measurement (they belong in the eval
    contract, not the config hash); ``exec_keys`` name execution settings such as thread counts.
    ``validate(config)`` may raise ValueError with a message naming the key.
    """

    def wrap(fn: TrainFn) -> TrainFn:
        fn.__firstdiv__ = WorkloadSpec(dict(defaults) if defaults is not None else None,  # type: ignore[attr-defined]
                                       tuple(eval_keys), tuple(exec_keys), validate)
        return fn

    return wrap


@dataclass(frozen=True)
class Workload:
    target: str
    fn: TrainFn
    spec: WorkloadSpec
    source: Path
    fallback_version: str

    def config(self, overrides: dict[str, Any] | None = None, sets: list[str] | None = None) -> dict[str, Any]:
        """The full config: defaults, then ``overrides`` (a dict), then ``sets`` ("key=value" strings)."""
        config = dict(self.spec.defaults or {})
        config.setdefault("threads", 1)
        for key, value in (overrides or {}).items():
            config[key] = self._coerce(key, value, from_text=False)
        for item in sets or []:
            key, sep, text = item.partition("=")
            if not sep or not key.strip():
                raise InvalidArgument(f"Expected --set KEY=VALUE but got {item!r}")
            config[key.strip()] = self._coerce(key.strip(), text.strip(), from_text=True)
        if self.spec.validate is not None:
            try:
                self.spec.validate(config)
            except ValueError as exc:
                raise InvalidArgument(f"Bad config for {self.target}: {exc}") from None
        return config

    def _coerce(self, key: str, value: Any, *, from_text: bool) -> Any:
        defaults = self.spec.defaults
        if defaults is not None and key not in defaults and key not in self.spec.exec_keys:
            known = ", ".join(sorted(defaults))
            raise InvalidArgument(f"Unknown config key {key!r} for {self.target}; known keys: {known}")
        template = (defaults or {}).get(key, 1 if key in self.spec.exec_keys else None)
        if template is None:
            return _parse_free(value) if from_text else value
        return _parse_typed(key, value, template)

    def split(self, config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """(training config, eval-path keys, execution keys)."""
        train = {k: v for k, v in config.items() if k not in self.spec.eval_keys and k not in self.spec.exec_keys}
        evals = {k: v for k, v in config.items() if k in self.spec.eval_keys}
        execs = {k: v for k, v in config.items() if k in self.spec.exec_keys}
        return train, evals, execs


def _parse_free(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _parse_typed(key: str, value: Any, template: Any) -> Any:
    kind = type(template)
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            return _BOOLS[str(value).lower()]
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value) if not isinstance(value, str) else int(value, 10)
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind is str:
            return str(value)
    except (ValueError, KeyError):
        raise InvalidArgument(f"Config key {key!r} expects {kind.__name__} (like {template!r}) but got {value!r}") from None
    return _parse_free(value)


def _builtin_mlp() -> Workload:
    from .. import __version__
    from . import builtin_mlp as m

    defaults = dict(m.DEFAULT_CONFIG, **m.EXTRA_CONFIG)
    spec = WorkloadSpec(defaults, m.EVAL_KEYS, m.EXEC_KEYS, m.validate)
    return Workload("builtin:mlp", m.train, spec, Path(m.__file__).parent.parent, f"firstdiv {__version__}")


BUILTINS: dict[str, Callable[[], Workload]] = {"mlp": _builtin_mlp}


def resolve(target: str) -> Workload:
    """Load a workload from its target string; raises WorkloadError with the fix on failure."""
    if not isinstance(target, str) or ":" not in target:
        raise WorkloadError(f"Expected a target like builtin:mlp, path/to/file.py:train or module:train but got {target!r}")
    where, _, name = target.rpartition(":")
    if where == "builtin":
        if name not in BUILTINS:
            raise WorkloadError(f"Unknown built-in workload {target!r}; available: "
                                + ", ".join(f"builtin:{k}" for k in BUILTINS))
        return BUILTINS[name]()
    if not name.isidentifier():
        raise WorkloadError(f"{name!r} in target {target!r} is not a Python function name")
    if where.endswith(".py"):
        module, source = _load_file(Path(where), target)
    else:
        module, source = _load_module(where, target)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise WorkloadError(f"{where} has no function {name!r}; define train(seed, config, rec) there")
    spec = getattr(fn, "__firstdiv__", None) or WorkloadSpec()
    return Workload(target, fn, spec, source, "unversioned")


def _load_file(path: Path, target: str) -> tuple[Any, Path]:
    if not path.is_file():
        raise WorkloadError(f"Workload file {str(path)!r} does not exist (target {target!r}, relative to {Path.cwd()}); "
                            "give the path to a .py file defining train(seed, config, rec)")
    path = path.resolve()
    mod_name = f"_firstdiv_workload_{abs(hash(str(path)))}"
    if mod_name in sys.modules:
        return sys.modules[mod_name], path
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"Cannot import {str(path)!r} as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[mod_name]
        raise WorkloadError(f"Importing {str(path)!r} raised {type(exc).__name__}: {exc}") from None
    finally:
        sys.path.remove(str(path.parent))
    return module, path


def _load_module(name: str, target: str) -> tuple[Any, Path]:
    added = "" not in sys.path and str(Path.cwd()) not in sys.path
    if added:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise WorkloadError(f"Cannot import module {name!r} for target {target!r} ({exc}); install it, run from the "
                            f"directory that holds it (working directory: {Path.cwd()}), or use path/to/file.py:train") from None
    except Exception as exc:
        raise WorkloadError(f"Importing {name!r} raised {type(exc).__name__}: {exc}") from None
    finally:
        if added:
            sys.path.remove(str(Path.cwd()))
    return module, Path(getattr(module, "__file__", None) or Path.cwd())
