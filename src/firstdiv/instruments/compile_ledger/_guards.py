"""compile_ledger's guard vocabulary: the failed guard dynamo reports, read as text (``guard_text``), sorted into
a category (shape, dtype, device, value, other) and tested for a Python number automatic dynamic can
generalise; the compile id a reason starts with."""

from __future__ import annotations

import re

CATEGORIES = ("shape", "dtype", "device", "value", "other")
_SHAPE = re.compile(r"size mismatch|stride mismatch|rank mismatch|\.size\(\)|\.stride\(\)|storage_offset|"
                    r"dimensionality|ndim|\bdim\b", re.IGNORECASE)
_DEVICE = re.compile(r"device|dispatch key set mismatch", re.IGNORECASE)
_VALUE = re.compile(r"(==|!=)\s*(-?[\d.]+(e[-+]?\d+)?|True|False|None|'[^']*'|\"[^\"]*\")|\blen\(", re.IGNORECASE)
_NUMBER = re.compile(r"==\s*-?\d+(\.\d*)?(e[-+]?\d+)?\s*(#|$)", re.IGNORECASE)


def guard_text(reason: str) -> str:
    """The failed guard without the compile id prefix, the source comment and the user stack lines."""
    first = reason.strip().splitlines()[0] if reason.strip() else ""
    first = re.sub(r"^\d+/\d+(_\d+)?:\s*", "", first)
    return re.sub(r"\s{2,}#.*$", "", first).strip()


def guard_category(reason: str) -> str:
    """shape | dtype | device | value | other, from the guard failure text dynamo gives.

    ``tensor 'x' size mismatch at index 1. expected 3, actual 5`` and symbolic guards on ``.size()`` are shape;
    ``dtype mismatch`` dtype; ``device``/``dispatch key set mismatch`` (the key set encodes the device type) device;
    a comparison of a Python value with a constant (``n == 2``, ``self.flag == True``, ``len(x) == 3``) value;
    identity, type, requires_grad and global-state guards are other.
    """
    text = guard_text(reason)
    if "dtype mismatch" in text.lower():
        return "dtype"
    if _SHAPE.search(text):
        return "shape"
    if _DEVICE.search(text):
        return "device"
    if "requires_grad" in text or "___check_obj_id" in text or "___check_type_id" in text or "GLOBAL_STATE" in text:
        return "other"
    if _VALUE.search(text):
        return "value"
    return "other"


def numeric_value_guard(reason: str) -> bool:
    """``n == 2`` / ``self.scale == 1.0``: a Python number baked in, which automatic dynamic can generalise."""
    return guard_category(reason) == "value" and bool(_NUMBER.search(guard_text(reason)))


def compile_id_of(reason: str) -> str:
    m = re.match(r"\s*(\d+/\d+)", reason)
    return m.group(1) if m else ""
