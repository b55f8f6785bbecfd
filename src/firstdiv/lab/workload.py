"""Workload targets: ``builtin:mlp``, ``path/to/file.py:function`` or ``module:function``.

A workload is a function ``train(seed, config, rec)``: it trains one run from ``seed`` (its only
source of randomness), reads hyperparameters from the ``config`` dict and tells the
:class:`~firstdiv.lab.record.Recorder` what happened. Declaring defaults makes ``--set`` type-checked::

    @firstdiv.workload(defaults={"lr": 0.01, "epochs": 5}, eval_keys=("eval_split",))
    def train(seed, config, rec):
        ...
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._format import first_line
from ..errors import InvalidArgument, WorkloadError
from ._targets import Kind, load_callable

TrainFn = Callable[[int, dict[str, Any], Any], Any]
#: Execution settings: recorded in the environment, not in the config hash.
EXEC_KEYS = ("threads",)
#: The most intra-op threads a run may ask for: far beyond any CPU count here, far below the
#: counts at which OpenMP fails to allocate its thread pool (threads=100000 aborts the run).
MAX_THREADS = 1024


@dataclass(frozen=True)
class WorkloadSpec:
    defaults: dict[str, Any] | None = None
    eval_keys: tuple[str, ...] = ()
    exec_keys: tuple[str, ...] = EXEC_KEYS
    validate: Callable[[dict[str, Any]], None] | None = None
    choices: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    nonfinite: tuple[str, ...] = ()


def workload(defaults: dict[str, Any] | None = None, *, eval_keys: tuple[str, ...] = (),
             exec_keys: tuple[str, ...] = EXEC_KEYS,
             validate: Callable[[dict[str, Any]], None] | None = None,
             nonfinite: tuple[str, ...] = ()) -> Callable[[TrainFn], TrainFn]:
    """Decorate a ``train(seed, config, rec)`` function with its default config.

    ``eval_keys`` name config keys that change only the measurement (they belong in the eval
    contract, not the config hash); ``exec_keys`` name execution settings such as thread counts.
    ``validate(config)`` may raise ValueError with a message naming the key. A value set to NaN or
    infinity is refused unless its key is named in ``nonfinite`` (e.g. ``("max_grad_norm",)``) or
    its default is itself non-finite.
    """

    def wrap(fn: TrainFn) -> TrainFn:
        fn.__firstdiv__ = WorkloadSpec(dict(defaults) if defaults is not None else None,  # type: ignore[attr-defined]
                                       tuple(eval_keys), tuple(exec_keys), validate, nonfinite=tuple(nonfinite))
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
        if overrides is not None and not isinstance(overrides, dict):
            raise InvalidArgument(f"Expected `config` to be a dict of key: value overrides but got "
                                  f"{type(overrides).__name__}; for 'k=v' strings use sets=")
        if isinstance(sets, str):  # one "k=v" string, not a sequence of characters
            sets = [sets]
        given: list[str] = []
        for key, value in (overrides or {}).items():
            config[key] = self._coerce(key, value, from_text=False)
            given.append(key)
        for item in sets or []:
            if not isinstance(item, str):
                raise InvalidArgument(f"Expected each of `sets` to be a 'KEY=VALUE' string but got {item!r}")
            key, sep, text = item.partition("=")
            if not sep or not key.strip():
                raise InvalidArgument(f"Expected --set KEY=VALUE but got {item!r}")
            config[key.strip()] = self._coerce(key.strip(), text.strip(), from_text=True)
            given.append(key.strip())
        self._check_values(config, given)
        if self.spec.validate is not None:
            self._run_validate(config)
        return config

    def _check_values(self, config: dict[str, Any], given: list[str]) -> None:
        """Refuse what would make every run meaningless or kill it: NaN/inf where the workload did not
        declare it may take one, and thread counts OpenMP cannot start."""
        defaults = self.spec.defaults or {}
        for key in dict.fromkeys(given):
            if key in self.spec.nonfinite or _nonfinite(defaults.get(key)):
                continue
            if _nonfinite(config[key]):
                hint = "" if self.target.startswith("builtin:") else \
                    f" (a workload that accepts it declares @firstdiv.workload(nonfinite=({key!r},)))"
                raise InvalidArgument(f"Config key {key!r} is {config[key]!r}, not a finite number; give a finite value{hint}")
        threads = config.get("threads")
        if "threads" in self.spec.exec_keys and isinstance(threads, int) and not 1 <= threads <= MAX_THREADS:
            raise InvalidArgument(f"Config key 'threads' must be in [1, {MAX_THREADS}] but got {threads}")

    def _run_validate(self, config: dict[str, Any]) -> None:
        assert self.spec.validate is not None
        try:
            self.spec.validate(config)
        except ValueError as exc:
            raise InvalidArgument(f"Bad config for {self.target}: {first_line(exc)}") from None
        except (TypeError, KeyError) as exc:  # a value of a type the hook did not expect
            raise InvalidArgument(f"Bad config for {self.target}: its validate hook raised {type(exc).__name__}: "
                                  f"{first_line(exc)}; check the types of the values you set") from None

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


def _nonfinite(value: Any) -> bool:
    """True for a NaN or infinite float, also inside a list, tuple or dict value."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return any(_nonfinite(v) for v in value)
    if isinstance(value, dict):
        return any(_nonfinite(v) for v in value.values())
    return False


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
    parsed = _parse_free(value)
    if (isinstance(template, (list, tuple)) and not isinstance(parsed, (list, tuple))) or \
            (isinstance(template, dict) and not isinstance(parsed, dict)):
        example = json.dumps(template, default=str)
        raise InvalidArgument(f"Config key {key!r} expects a {kind.__name__} (like {example}) but got {value!r}; "
                              f"write it as JSON, e.g. --set {key}={example.replace(' ', '')}")
    return parsed


def _builtin_mlp() -> Workload:
    from . import builtin_mlp as m

    defaults = dict(m.DEFAULT_CONFIG, **m.EXTRA_CONFIG)
    spec = WorkloadSpec(defaults, m.EVAL_KEYS, m.EXEC_KEYS, m.validate)
    return Workload("builtin:mlp", m.train, spec, Path(m.__file__).parent.parent, f"firstdiv {_version()}")


def _version() -> str:
    """The installed firstdiv's version (the package metadata, as the HTML pages read it); from a source tree
    that is not installed, the one the package declares."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("firstdiv")
    except PackageNotFoundError:
        from .. import __version__

        return __version__


BUILTINS: dict[str, Callable[[], Workload]] = {"mlp": _builtin_mlp}


#: how a workload target's errors are worded (the loader is :func:`firstdiv.lab._targets.load_callable`)
WORKLOAD = Kind(
    WorkloadError, "Expected a target like builtin:mlp, path/to/file.py:train or module:train but got {target!r}",
    missing_file="Workload file {path!r} does not exist (target {target!r}, relative to {cwd}); give the path to a "
                 ".py file defining train(seed, config, rec)",
    no_function="{where} has no function {name!r}; define train(seed, config, rec) there",
    builtins=BUILTINS, builtin_noun="workload")


def resolve(target: str) -> Workload:
    """Load a workload from its target string (``cmd:...``: a command, :mod:`firstdiv.lab.command`); raises
    WorkloadError with the fix on failure."""
    if target.startswith("cmd:"):
        from .command import EXEC_KEYS, command_parts

        run, validate, script = command_parts(target)
        return Workload(target, run, WorkloadSpec(None, (), EXEC_KEYS, validate), script, "unversioned")
    fn, source = load_callable(target, WORKLOAD)
    if source is None:  # builtin:NAME: its factory
        return fn()
    spec = getattr(fn, "__firstdiv__", None) or WorkloadSpec()
    return Workload(target, fn, spec, source, "unversioned")
