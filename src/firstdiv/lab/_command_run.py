"""One run of a command sweep: the child process, what it reported, and how it ended.

The child runs in its own process group (its session), with ``FIRSTDIV_REPORT_FILE`` naming a fresh file that
:func:`firstdiv.log` appends JSON lines to, ``FIRSTDIV_SEED`` and ``OMP_NUM_THREADS`` (the sweep's ``threads``). Its
stdout and stderr go to files (a sweep's own output stays clean); the tail of stderr is the error of a failed run.
A timeout, Ctrl-C, or the worker being stopped (SIGTERM) kills the whole group: a launcher's children too.
How the child ended is the record's ``exit_code`` (a timeout: minus the signal that stopped it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._log import REPORT_FILE

_TAIL_LINES, _TAIL_CHARS = 15, 2000
_GRACE_S = 3.0
_FOREVER_S = 10.0 ** 9
_RAISED = re.compile(r"(\[[^\]]*\]:\s*)?[A-Za-z_][\w.]*(Error|Exception)(: .*)?$")  # "[rank1]: RuntimeError: ..."
_PLACEHOLDER = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")


def placeholders(argv: Sequence[str]) -> list[str]:
    names: dict[str, None] = {}
    for arg in argv:
        names.update(dict.fromkeys(_PLACEHOLDER.findall(arg)))
    return list(names)


def fill(argv: Sequence[str], seed: int, config: dict[str, Any]) -> list[str]:
    """The command of one run: every ``{name}`` replaced by the seed or the config value (``{{`` stays literal)."""
    values = {**{k: str(v) for k, v in config.items()}, "seed": str(seed)}
    return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in argv]


class CommandFailed(Exception):
    """The command ended without a usable result; the message is the run's error."""


@dataclass(frozen=True)
class CommandRun:
    """A command workload's ``train(seed, config, rec)``: run the command at ``seed``, pass its reports to ``rec``."""

    argv: tuple[str, ...]
    cwd: str

    def __call__(self, seed: int, config: dict[str, Any], rec: Any) -> None:
        argv = fill(self.argv, seed, config)
        timeout = config.get("timeout")
        with tempfile.TemporaryDirectory(prefix="firstdiv-run-") as tmp:
            report = Path(tmp) / "report.jsonl"
            report.touch()
            env = dict(os.environ, FIRSTDIV_SEED=str(seed), OMP_NUM_THREADS=str(config.get("threads", 1)))
            env[REPORT_FILE] = str(report)
            env.pop("FIRSTDIV_REPORT_FD", None)
            code, timed_out = _launch(argv, self.cwd, env, timeout, Path(tmp))
            rec.exit_code = code  # the record's exit_code: 0, the exit status, or minus the signal that ended it
            rows, runs = _read(report)
            for row in rows:
                rec.log(row.pop("step", None), **row)
            apply_run_lines(rec, runs)
            stderr = _tail(Path(tmp) / "stderr")
        if timed_out:
            raise CommandFailed(f"timed out after {timeout} s (--timeout), {len(rows)} report lines before it" + stderr)
        if code != 0:
            how = f"killed by {_signal_name(-code)}" if code < 0 else f"exit code {code}"
            if "No module named 'firstdiv'" in stderr:  # the command's python is not the one firstdiv is in
                how += (f" (its Python cannot import firstdiv: run the command with {sys.executable}, e.g. "
                        "activate that environment, or pip install firstdiv where the command runs)")
            raise CommandFailed(f"command failed with {how}" + stderr)
        if runs.get("status", {}).get("status", "ok") != "ok":  # a training callback saw it end unfinished
            raise CommandFailed(_unfinished(runs["status"]) + stderr)
        if not rows:
            raise CommandFailed("the command exited 0 but reported no metrics: call firstdiv.log(val_loss=...) in the "
                                f"script (or write JSON lines to ${REPORT_FILE})" + stderr)


def _launch(argv: list[str], cwd: str, env: dict[str, str], timeout: int | None, tmp: Path) -> tuple[int, bool]:
    """Run the child to its end; (its exit code, whether the timeout killed it)."""
    from ._command_code import program

    with open(tmp / "stdout", "wb") as out, open(tmp / "stderr", "wb") as err:
        try:
            proc = subprocess.Popen(program(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True)
        except OSError as exc:
            raise CommandFailed(f"cannot start {argv[0]!r}: {exc.strerror or exc}; check the command") from None
        restore = _kill_on_sigterm(proc)
        try:
            # with a timeout the wait polls, so an interrupt raised in this thread from outside (a Ray task
            # being cancelled) is seen while the child runs; a plain wait would block in waitpid until it ends
            return proc.wait(timeout=timeout if timeout is not None else _FOREVER_S), False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return proc.returncode, True
        except BaseException:  # Ctrl-C, or anything else ending this run: the child must not outlive it
            _kill_group(proc)
            raise
        finally:
            restore()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the child's process group, SIGKILL to what is left after a grace period, then reap the child."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc.pid, signal.SIGKILL)  # the launcher may be gone while its children still run
    proc.wait()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_on_sigterm(proc: subprocess.Popen[bytes]) -> Any:
    """While the child runs, a SIGTERM to this process (the process backend stopping its worker) kills the child's
    group first, then ends this process as SIGTERM would. Only the main thread can install a handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: Any) -> None:
        _kill_group(proc)
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _read(report: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The reported rows: JSON objects of numbers (a ``step`` or ``epoch`` key gives the row's index); and the run
    lines (``{"_firstdiv": kind, "data": ...}``, see :mod:`firstdiv._log`) by kind: the last of each kind, the
    ``grad_norm`` values of all its lines together."""
    rows: list[dict[str, Any]] = []
    runs: dict[str, Any] = {}
    for line in report.read_text(errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill
        if not isinstance(obj, dict):
            continue
        if "_firstdiv" in obj:
            _run_line(runs, obj.get("_firstdiv"), obj.get("data"))
            continue
        step = obj.pop("step", obj.pop("epoch", None))
        row: dict[str, Any] = {k: float(v) for k, v in obj.items()
                               if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if row:
            rows.append({**row, "step": int(step)} if isinstance(step, (int, float)) else row)
    return rows, runs


def _run_line(runs: dict[str, Any], kind: Any, data: Any) -> None:
    if kind == "grad_norm" and isinstance(data, list):
        runs.setdefault("grad_norm", []).extend(float(v) for v in data
                                                if isinstance(v, (int, float)) and not isinstance(v, bool))
    elif kind in ("throughput", "eval_contract", "config", "status") and isinstance(data, dict) and data:
        runs[kind] = data


def _unfinished(status: dict[str, Any]) -> str:
    """The error of a run whose training did not end although the command exited 0 (the script caught it)."""
    error = status.get("error")
    if isinstance(error, str) and error:
        return f"training {status.get('status')}: {error[:1000]}; the script went on and exited 0, the run did not finish"
    return ("training began but never reached its end, and the script exited 0 (the trainer raised and the script "
            "went on?)")


def apply_run_lines(rec: Any, runs: dict[str, Any]) -> None:
    """Pass the run lines read by :func:`_read` to the recorder: grad norms, throughput (tokens too), the eval
    contract (the record's eval fingerprint) and the reported config (``extra["reported_config"]``)."""
    if runs.get("grad_norm"):
        rec.grad_norms(runs["grad_norm"])
    put = runs.get("throughput")
    if put is not None and _count(put.get("examples")) is not None and _count(put.get("seconds")) is not None:
        tokens = _count(put.get("tokens"))
        rec.throughput(examples=int(put["examples"]), seconds=float(put["seconds"]),
                       tokens=int(tokens) if tokens is not None else None)
    if runs.get("eval_contract"):
        rec.eval_contract(runs["eval_contract"])
    if runs.get("config"):
        rec.extra["reported_config"] = dict(runs["config"])


def _count(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
    return float(value) if ok else None


def _tail(path: Path) -> str:
    """'; stderr: <its last lines>' (secrets scrubbed), or '' when it wrote nothing."""
    from .._secrets import scrub_text

    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    if not text:
        return ""
    lines = text.splitlines()
    tail = " | ".join(lines[-_TAIL_LINES:])[-_TAIL_CHARS:]
    # a launcher's summary (torchrun's) fills the tail: the first exception raised is the cause, from some rank
    first = next((m.group(0).strip() for m in map(_RAISED.match, lines) if m), None)
    cause = f"; first raised: {first[:_TAIL_CHARS // 4]}" if first and first not in tail else ""
    return scrub_text(cause + "; stderr: " + tail)


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
