"""A transient progress display for instruments whose work takes seconds (a performance ledger on a real model,
a compile ledger): a rich progress bar (or a spinner when the total is unknown) on stderr, shown only once the
work has run for ``delay`` seconds (default 2 s) and removed when it ends.

Shown only when stderr is a terminal (``sys.stderr.isatty()``, which pytest's capture and notebooks without a
terminal are not), or when forced (``force=True`` or ``FIRSTDIV_PROGRESS=1``); never when
``FIRSTDIV_PROGRESS=0``. Wrapping a loop is one line::

    with progress("compile_ledger: compiling", total=len(inputs)) as tick:
        for x in inputs:
            ...
            tick()            # one unit done; tick(3) for three, tick(description="...") to relabel

``tick`` is a plain callable that is cheap when nothing is shown (no clock read, no terminal I/O) and never
raises: a display that fails (a closed stream) turns itself off; the work goes on.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["progress", "progress_enabled"]

DELAY_S = 2.0  # work shorter than this never shows a display


def progress_enabled(stream: TextIO | None = None, force: bool | None = None) -> bool:
    """Whether a display may be shown on ``stream`` (default stderr): ``FIRSTDIV_PROGRESS=0`` turns it off,
    ``force`` (or ``FIRSTDIV_PROGRESS=1``) turns it on, else only a terminal gets one."""
    env = os.environ.get("FIRSTDIV_PROGRESS", "").strip().lower()
    if env in ("0", "false", "no", "off"):
        return False
    if force is not None:
        return force
    if env in ("1", "true", "yes", "on"):
        return True
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class _Display:
    """The rich Progress, started by a timer thread after the delay (so short work prints nothing at all)."""

    def __init__(self, description: str, total: float | None, console: Any, delay: float) -> None:
        from ... import _rich

        columns = [_rich.TextColumn("[progress.description]{task.description}"), _rich.BarColumn()]
        if total is not None:
            columns += [_rich.MofNCompleteColumn(), _rich.TimeRemainingColumn()]
        self.bar = _rich.Progress(*columns, console=console, transient=True, auto_refresh=True)
        self.task = self.bar.add_task(description, total=total)
        self.lock = threading.Lock()
        self.started = self.closed = False
        self.timer = threading.Timer(delay, self._start)
        self.timer.daemon = True
        self.timer.start()

    def _start(self) -> None:
        with self.lock:
            if self.closed:
                return
            try:
                self.bar.start()
                self.started = True
            except Exception:  # noqa: BLE001 - a display must never break the work
                self.closed = True

    def tick(self, advance: float = 1, description: str | None = None) -> None:
        try:
            kwargs = {"description": description} if description is not None else {}
            self.bar.update(self.task, advance=advance, **kwargs)
        except Exception:  # noqa: BLE001 - a display must never break the work
            self.close()

    def close(self) -> None:
        self.timer.cancel()
        with self.lock:
            self.closed = True
            if self.started:
                with contextlib.suppress(Exception):  # a display must never break the work
                    self.bar.stop()
                self.started = False


def _silent(advance: float = 1, description: str | None = None) -> None:
    return None


@contextmanager
def progress(description: str, total: float | None = None, *, delay: float | None = None, force: bool | None = None,
             console: Any = None) -> Iterator[Callable[..., None]]:
    """Yield ``tick(advance=1, description=None)``; a transient bar (spinner-like pulse when ``total`` is None)
    appears on stderr after ``delay`` seconds (default ``DELAY_S``) when :func:`progress_enabled`; a forced
    display draws as on a terminal. ``console``: a rich Console to draw on (tests pass one with
    ``force_terminal=True``); giving one counts as the terminal check."""
    if console is None:
        if not progress_enabled(force=force):
            yield _silent
            return
        from ... import _rich

        console = _rich.Console(stderr=True, force_terminal=True)
    elif not progress_enabled(console.file, force=True if force is None else force):
        yield _silent
        return
    display = _Display(description, total, console, max(0.0, float(DELAY_S if delay is None else delay)))
    try:
        yield display.tick
    finally:
        display.close()

