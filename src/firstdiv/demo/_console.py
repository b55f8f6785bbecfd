"""How the demo speaks: each experiment's heading and question, then what it printed (nothing without a console);
and the backend its sweeps run on."""

from __future__ import annotations

from typing import Any

from .._rich import Console, Text

#: the backend of the demo's sweeps: builtin:mlp is functional, so the vectorized backend trains a sweep's seeds as
#: one stack, each seed's record identical to the serial backend's (tests/lab/test_backend_vectorized.py), faster
BACKEND = "vectorized"


def say(console: Console | None, *items: Any) -> None:
    if console is not None:
        for item in items:
            console.print(item)


def heading(console: Console | None, title: str, question: str) -> None:
    say(console, Text(""), Text(title, style="bold underline"), Text(f"QUESTION   {question}"))
