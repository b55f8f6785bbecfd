"""Writing a directory in one step: build it beside its place, then swap it in."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

__all__ = ["swap_in"]


def swap_in(new: Path, target: Path) -> None:
    """Put the built directory ``new`` at ``target``. What was there is moved aside first, put back if the swap
    fails, and removed after it succeeds; ``new`` and ``target`` must be on one file system (siblings)."""
    if not target.exists():
        os.replace(new, target)
        return
    old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
    os.replace(target, old)
    try:
        os.replace(new, target)
    except BaseException:
        os.replace(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)
