"""_core.progress: a transient display on a terminal after the delay; silent otherwise."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from firstdiv.instruments._core.progress import progress, progress_enabled

pytestmark = pytest.mark.usefixtures("one_thread")


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


def test_performance_ledger_and_loader_timing_show_progress_when_forced(monkeypatch, capsys):
    import torch
    import torch.nn.functional as F
    from torch import nn

    from firstdiv.instruments._core import progress as progress_module
    from firstdiv.instruments.loader_timing import loader_timing
    from firstdiv.instruments.performance_ledger import performance_ledger

    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = (torch.randn(8, 4), torch.randint(0, 2, (8,)))

    def step(b):
        time.sleep(0.01)
        opt.zero_grad()
        F.cross_entropy(model(b[0]), b[1]).backward()
        opt.step()

    monkeypatch.setattr(progress_module, "DELAY_S", 0.0)
    monkeypatch.delenv("FIRSTDIV_PROGRESS", raising=False)
    performance_ledger(step, batch, model=model, optimizer=opt, loss_fn=F.cross_entropy, repeats=3, warmup=1)
    assert capsys.readouterr().err == ""  # stderr is captured: not a terminal
    monkeypatch.setenv("FIRSTDIV_PROGRESS", "1")
    performance_ledger(step, batch, model=model, optimizer=opt, loss_fn=F.cross_entropy, repeats=3, warmup=1)
    loader_timing([batch] * 4, train_step=step, batches=3)
    err = capsys.readouterr().err
    assert "performance_ledger" in err and "loader_timing" in err


def test_compile_ledger_shows_progress_when_forced(monkeypatch, capsys):
    import torch
    from torch import nn

    from firstdiv.instruments._core import progress as progress_module
    from firstdiv.instruments.compile_ledger import compile_ledger

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    inputs = [torch.randn(3, 4), torch.randn(3, 4)]
    monkeypatch.setattr(progress_module, "DELAY_S", 0.0)
    monkeypatch.delenv("FIRSTDIV_PROGRESS", raising=False)
    compile_ledger(model, inputs, backend="eager", repeats=2)
    assert capsys.readouterr().err == ""  # stderr is captured: not a terminal
    monkeypatch.setenv("FIRSTDIV_PROGRESS", "1")
    report = compile_ledger(model, inputs, backend="eager", repeats=2)
    err = capsys.readouterr().err
    assert "compile_ledger" in err and report.status.value != "FAIL"
