"""rich, imported without moving Python's global RNG: every firstdiv module takes rich names from here.

rich draws from ``random`` once, when ``rich.style`` is first imported (``count(getrandbits(24))``), so the
first report a user prints would move their random state. This module imports ``rich.style`` under a saved
state and gives it back; the names below then load lazily, on first use, and draw nothing.
"""

from __future__ import annotations

import importlib
import random
from typing import Any

_saved = random.getstate()
try:
    import rich.style  # noqa: F401 - the one import that draws
finally:
    random.setstate(_saved)
del _saved

#: name -> the rich module that defines it
_WHERE = {
    "Console": "rich.console", "Table": "rich.table", "Text": "rich.text", "Padding": "rich.padding",
    "Progress": "rich.progress", "BarColumn": "rich.progress", "MofNCompleteColumn": "rich.progress",
    "TextColumn": "rich.progress", "TimeRemainingColumn": "rich.progress", "Segment": "rich.segment",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'firstdiv._rich' has no attribute {name!r}; add it to _WHERE")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
