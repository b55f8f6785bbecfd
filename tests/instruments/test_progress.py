"""_core.progress: a transient display on a terminal after the delay; silent otherwise."""

from __future__ import annotations

import io
import time

from rich.console import Console

from firstdiv.instruments._core.progress import progress, progress_enabled


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=True, width=80), buf


def test_shows_on_a_forced_terminal_after_the_delay():
    console, buf = _console()
    with progress("timing the step", total=4, delay=0.0, console=console) as tick:
        for _ in range(4):
            time.sleep(0.05)
            tick()
    assert "timing the step" in buf.getvalue()


def test_work_shorter_than_the_delay_prints_nothing():
    console, buf = _console()
    with progress("quick", total=2, delay=5.0, console=console) as tick:
        tick()
        tick()
    assert buf.getvalue() == ""


def test_env_zero_silences_even_a_forced_console(monkeypatch):
    monkeypatch.setenv("FIRSTDIV_PROGRESS", "0")
    console, buf = _console()
    with progress("off", total=None, delay=0.0, console=console) as tick:
        time.sleep(0.05)
        tick()
    assert buf.getvalue() == ""
    assert not progress_enabled(force=True)


def test_silent_when_stderr_is_not_a_terminal(monkeypatch, capsys):
    monkeypatch.delenv("FIRSTDIV_PROGRESS", raising=False)
    assert not progress_enabled(io.StringIO())
    with progress("captured", total=3, delay=0.0) as tick:
        time.sleep(0.05)
        tick(description="relabelled")
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_env_one_enables_without_a_terminal(monkeypatch):
    monkeypatch.setenv("FIRSTDIV_PROGRESS", "1")
    assert progress_enabled(io.StringIO())
    monkeypatch.setenv("FIRSTDIV_PROGRESS", "0")
    assert not progress_enabled(io.StringIO(), force=True)


def test_tick_never_raises_when_the_stream_is_closed():
    console, buf = _console()
    with progress("closing", total=3, delay=0.0, console=console) as tick:
        time.sleep(0.05)
        buf.close()
        tick()
        tick()
