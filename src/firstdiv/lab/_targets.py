"""One loader for what a target names: ``path/to/file.py:fn``, ``module:fn`` or ``builtin:name``.

The lab's workloads (:func:`firstdiv.lab.workload.resolve`), the RNG audit's datasets
(:func:`firstdiv.lab.rng_audit.load_target`) and diagnose's cases (``firstdiv diagnose CASE``) all load
through :func:`load_callable`. Each passes a :class:`Kind` saying what its targets are for, so every error is
one line in that kind's terms: its exception type, its example target, what to define.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._format import describe_error

_MODULE_HINT = "install it, run from the directory that holds it (working directory: {cwd}), or use path/to/file.py:train"


@dataclass(frozen=True)
class Kind:
    """What a target is for and how its errors are worded. The templates are formatted with ``target``,
    ``where`` (before the last colon), ``name`` (after it), ``path``, ``cwd``, and for an import that failed ``exc``
    (the exception) and ``error`` (:func:`firstdiv._format.describe_error` of it)."""

    error: type[Exception]
    usage: str  # the target is not WHERE:NAME
    missing_file: str
    no_function: str
    bad_name: str = "{name!r} in target {target!r} is not a Python function name"
    builtins: Mapping[str, Any] = field(default_factory=dict)
    builtin_noun: str = ""  # "workload": builtin:x is looked up in ``builtins``; "": builtin is a module name
    import_failed: str = "Cannot import module {where!r} for target {target!r} ({exc}); " + _MODULE_HINT
    module_raised: str = "Importing {where!r} raised {error}"
    module_prefix: str = "_firstdiv_workload_"
    #: a workload's file is loaded once per process, importable from its folder (the working directory for a
    #: module), and named by its resolved path in errors; a case file is executed afresh and named as given
    reuse: bool = True


def load_callable(target: str, kind: Kind) -> tuple[Any, Path | None]:
    """``(the function the target names, its file or module file)``; ``builtin:x`` gives ``(kind.builtins[x],
    None)``. Raises ``kind.error`` with one line saying what is wrong and how to fix it."""
    where, sep, name = target.rpartition(":") if isinstance(target, str) else ("", "", "")
    words = {"target": target, "where": where, "name": name, "cwd": Path.cwd()}
    if not sep or not where:
        raise kind.error(kind.usage.format(**words))
    if where == "builtin" and kind.builtin_noun:
        if name not in kind.builtins:
            raise kind.error(f"Unknown built-in {kind.builtin_noun} {target!r}; available: "
                             + ", ".join(f"builtin:{k}" for k in kind.builtins))
        return kind.builtins[name], None
    if not name.isidentifier():
        raise kind.error(kind.bad_name.format(**words))
    module, source = _load_file(Path(where), kind, words) if where.endswith(".py") else _load_module(where, kind, words)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise kind.error(kind.no_function.format(**words))
    return fn, source


def _load_file(path: Path, kind: Kind, words: dict[str, Any]) -> tuple[Any, Path]:
    if not path.is_file():
        raise kind.error(kind.missing_file.format(path=str(path), **words))
    path = path.resolve()
    shown = str(path) if kind.reuse else words["where"]
    mod_name = f"{kind.module_prefix}{abs(hash(str(path)))}"
    if kind.reuse and mod_name in sys.modules:
        return sys.modules[mod_name], path
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise kind.error(f"Cannot import {shown!r} as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    if kind.reuse:
        sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 (whatever the user's module raises on import is reported in one line)
        sys.modules.pop(mod_name, None)
        raise kind.error(f"Importing {shown!r} raised {describe_error(exc, None)}") from None
    finally:
        if kind.reuse:
            sys.path.remove(str(path.parent))
    return module, path


def _load_module(name: str, kind: Kind, words: dict[str, Any]) -> tuple[Any, Path]:
    added = kind.reuse and "" not in sys.path and str(Path.cwd()) not in sys.path
    if added:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise kind.error(kind.import_failed.format(exc=exc, error=describe_error(exc, None), **words)) from None
    except Exception as exc:  # noqa: BLE001 (whatever the user's module raises on import is reported in one line)
        raise kind.error(kind.module_raised.format(exc=exc, error=describe_error(exc, None), **words)) from None
    finally:
        if added:
            sys.path.remove(str(Path.cwd()))
    return module, Path(getattr(module, "__file__", None) or Path.cwd())
