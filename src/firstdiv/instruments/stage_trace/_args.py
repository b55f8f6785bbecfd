"""Argument checks of ``stage_trace``: stages, probes, the meta contract, fields, label and eval declarations.
Each raises :class:`~firstdiv.errors.InvalidArgument` naming the problem."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import InvalidArgument
from . import _probes as sp

_ALIASES = {"structure": "structure", "numeric": "numeric", "numeric interpretation": "numeric",
            "numeric_interpretation": "numeric", "semantics": "semantics", "relationships": "relationships",
            "provenance": "provenance"}
Probe = Callable[[Any, Any, str], Any]


def check_stages(stages: Any) -> list[tuple[str, Callable]]:
    items = list(stages.items()) if isinstance(stages, dict) else stages
    if not isinstance(items, (list, tuple)) or not items:
        raise InvalidArgument(f"Expected `stages` to be a non-empty list of (name, callable) or a dict but got {stages!r:.80}")
    seen: set[str] = set()
    for item in items:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str) and callable(item[1])):
            raise InvalidArgument(f"Expected each stage to be a (name, callable) pair but got {item!r:.80}")
        if item[0] in seen:
            raise InvalidArgument(f"Expected unique stage names but got {item[0]!r} twice")
        seen.add(item[0])
    return [(n, f) for n, f in items]


def check_probes(probes: Any) -> dict[str, tuple[str, Probe]]:
    if probes is None:
        return {}
    if not isinstance(probes, dict):
        raise InvalidArgument(f"Expected `probes` to be a dict name -> callable or (category, callable) but got {type(probes).__name__}")
    out = {}
    for name, spec in probes.items():
        category, fn = "semantics", spec
        if not callable(spec):
            category, fn = spec if isinstance(spec, tuple) and len(spec) == 2 else (None, None)
        cat = _ALIASES.get(category.lower()) if isinstance(category, str) else None
        if cat is None or not callable(fn):
            raise InvalidArgument(f"Expected probe {name!r} to be a callable or (category, callable) with category one of "
                                  f"{', '.join(sp.CATEGORIES)} but got {spec!r:.80}")
        out[str(name)] = (cat, fn)
    return out


def track(sample: Any, meta: Any = None) -> sp.Track:
    if meta is None:
        meta = sample.get("meta") if isinstance(sample, dict) else None
    elif not isinstance(meta, dict):
        raise InvalidArgument(f"Expected `meta` to be a dict like {{'channel_order': 'RGB'}} but got {type(meta).__name__}")
    track = sp.Track()
    if not isinstance(meta, dict):
        return track
    order = meta.get("channel_order", "RGB")
    if not isinstance(order, str) or sorted(order.upper()) != sorted("RGB"):
        raise InvalidArgument(f"Expected meta['channel_order'] to be an order of R, G, B such as 'RGB' but got {order!r}")
    track.channel_order = order.upper()
    known = meta.get("known_colour", meta.get("known_color"))
    if known is not None:
        box, rgb = (known.get("box"), known.get("rgb")) if isinstance(known, dict) else (None, None)
        if not (isinstance(box, (list, tuple)) and len(box) == 4 and all(isinstance(v, int) and v >= 0 for v in box)
                and box[0] < box[1] and box[2] < box[3]):
            raise InvalidArgument(f"Expected meta['known_colour']['box'] to be [y0, y1, x0, x1] ints with y0 < y1, x0 < x1 but got {box!r}")
        if not (isinstance(rgb, (list, tuple)) and len(rgb) == 3 and all(isinstance(v, (int, float)) and 0 <= v <= 255 for v in rgb)):
            raise InvalidArgument(f"Expected meta['known_colour']['rgb'] to be three numbers in 0..255 but got {rgb!r}")
        track.box, track.colour = list(box), [float(rgb["RGB".index(c)]) for c in track.channel_order]
    prov = meta.get("provenance", {})
    if not isinstance(prov, dict):
        raise InvalidArgument(f"Expected meta['provenance'] to be a dict stage -> split but got {type(prov).__name__}")
    track.provenance = dict(prov)
    return track




def check_fields(fields: Any) -> tuple[str, ...]:
    if fields is None:
        return ()
    if not isinstance(fields, (list, tuple)) or not fields or not all(isinstance(f, str) and f for f in fields) \
            or len(set(fields)) != len(fields):
        raise InvalidArgument(f"Expected `fields` to be unique names of a tuple sample's elements, e.g. ('image', 'label'), "
                              f"but got {fields!r:.80}")
    return tuple(fields)


def check_labels(class_to_idx: Any, label_rule: Any, label_key: Any) -> None:
    if class_to_idx is not None and not (isinstance(class_to_idx, dict) and class_to_idx and all(
            isinstance(v, int) and not isinstance(v, bool) for v in class_to_idx.values())):
        raise InvalidArgument(f"Expected `class_to_idx` to be a non-empty dict class name -> int index but got {class_to_idx!r:.80}")
    if label_rule is not None and not callable(label_rule):
        raise InvalidArgument(f"Expected `label_rule` to be a callable record -> label but got {type(label_rule).__name__}")
    if label_key is not None and not isinstance(label_key, str):
        raise InvalidArgument(f"Expected `label_key` to be a key such as 'label' or a tuple position such as '1' but got {label_key!r}")


def check_augmentations(augmentations: Any, names: list[str]) -> set[str]:
    if augmentations is None:
        return set()
    if isinstance(augmentations, str) or not isinstance(augmentations, (set, frozenset, list, tuple)):
        raise InvalidArgument(f"Expected `augmentations` to be a set of train stage names but got {augmentations!r:.80}")
    unknown = [a for a in augmentations if a not in names]
    if unknown:
        raise InvalidArgument(f"Expected `augmentations` among the stages {', '.join(names)} but got {unknown[0]!r}")
    return set(augmentations)
