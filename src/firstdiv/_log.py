"""``firstdiv.log``: how a script run by a command sweep reports its metrics; a no-op anywhere else.

A command sweep (``firstdiv sweep -- python train.py --seed {seed}``) gives each child process the path of a
report file in ``FIRSTDIV_REPORT_FILE`` (or an open descriptor in ``FIRSTDIV_REPORT_FD``); each call appends one
JSON line ``{"step": 3, "val_loss": 0.41}``. Called repeatedly with a ``step`` (or ``epoch``) it draws curves; the
last value of each metric is the run's final metric. Outside a sweep neither variable is set and ``log`` returns
at once, so the same script runs bare. Under a multi-process launcher (``torchrun``) only rank 0 reports: with
``RANK`` set to anything but ``"0"`` it does nothing. A script in another language writes the same lines itself.

This module imports only the standard library's ``os`` and ``json``: ``firstdiv.log`` loads no torch.
"""

from __future__ import annotations

import json
import os
from typing import Any

REPORT_FILE = "FIRSTDIV_REPORT_FILE"
REPORT_FD = "FIRSTDIV_REPORT_FD"


def log(step: int | None = None, *, epoch: int | None = None, **metrics: Any) -> None:
    """Report ``metrics`` (numbers, or 0-d tensors/arrays) of one step or epoch to the sweep running this script."""
    path, fd = os.environ.get(REPORT_FILE), os.environ.get(REPORT_FD)
    if not path and not fd:
        return
    if os.environ.get("RANK", "0") not in ("", "0"):
        return
    row: dict[str, Any] = {}
    at = step if step is not None else epoch
    if at is not None:
        row["step"] = int(at)
    for name, value in metrics.items():
        item = getattr(value, "item", None)
        value = item() if callable(item) else value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"firstdiv.log: metric {name!r} must be a number but got {type(value).__name__}; "
                            f"pass float({name})")
        row[name] = float(value)
    data = (json.dumps(row) + "\n").encode()
    if fd:
        os.write(int(fd), data)
    else:
        with open(path, "ab") as fh:  # one append per line: lines of several processes never interleave
            fh.write(data)
