"""How the demo speaks: each experiment's heading and question, then what it printed (nothing without a console)."""

from __future__ import annotations

from typing import Any

from .._rich import Console, Text


def say(console: Console | None, *items: Any) -> None:
    if console is not None:
        for item in items:
            console.print(item)


def heading(console: Console | None, title: str, question: str) -> None:
    say(console, Text(""), Text(title, style="bold underline"), Text(f"QUESTION   {question}"))
