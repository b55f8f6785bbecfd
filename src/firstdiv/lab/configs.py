"""Config specs given on the command line or in Python: a dict, a JSON/YAML file, or "k=v" lists."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidArgument
from .workload import Workload


def read_spec(spec: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """(overrides dict, "k=v" strings) from a dict, a .json/.yaml/.yml path, "k=v,k=v", or a list of those."""
    if spec is None:
        return None, []
    if isinstance(spec, dict):
        return dict(spec), []
    if isinstance(spec, str):
        path = Path(spec)
        if path.suffix.lower() in (".json", ".yaml", ".yml"):
            return _read_file(path), []
        return None, [part for part in (p.strip() for p in spec.split(",")) if part]
    if isinstance(spec, Sequence):
        overrides: dict[str, Any] = {}
        sets: list[str] = []
        for item in spec:
            more, more_sets = read_spec(item)
            overrides.update(more or {})
            sets += more_sets
        return overrides or None, sets
    raise InvalidArgument(f"Expected a config as a dict, a .json/.yaml file or 'k=v,k=v' but got {type(spec).__name__}")


def _read_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InvalidArgument(f"Config file {str(path)!r} does not exist; give a .json or .yaml file of key: value pairs")
    text = path.read_text()
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except ValueError as exc:  # json.JSONDecodeError and yaml.YAMLError's parse errors
        raise InvalidArgument(f"Config file {str(path)!r} is not valid {path.suffix[1:].upper()}: "
                              f"{str(exc).splitlines()[0]}") from None
    except Exception as exc:  # noqa: BLE001 (any other parser failure is still the file's, reported in one line)
        raise InvalidArgument(f"Config file {str(path)!r} could not be parsed: {str(exc).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidArgument(f"Config file {str(path)!r} must hold a mapping of key: value pairs, not {type(data).__name__}")
    return data


def spec_keys(spec: Any) -> list[str]:
    """Keys in the order the spec names them (the default order of changes for bisection)."""
    overrides, sets = read_spec(spec)
    keys = list(overrides or {})
    keys += [s.partition("=")[0].strip() for s in sets]
    return list(dict.fromkeys(keys))


def build(workload: Workload, spec: Any, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The workload's full config with ``spec`` applied (on top of ``base`` when given)."""
    overrides, sets = read_spec(spec)
    return workload.config(dict(base or {}, **(overrides or {})), sets)
