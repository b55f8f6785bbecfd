"""One run of a command sweep: the child process, what it reported, and how it ended.

The child runs in its own process group (its session), with ``FIRSTDIV_REPORT_FILE`` naming a fresh file that
:func:`firstdiv.log` appends JSON lines to, ``FIRSTDIV_SEED`` and ``OMP_NUM_THREADS`` (the sweep's ``threads``). Its
stdout and stderr go to files (a sweep's own output stays clean); the tail of stderr is the error of a failed run.
Nothing in the group outlives the run: a timeout, Ctrl-C, or the worker being stopped (SIGTERM) kills the whole
group, a launcher's children too; what the command leaves running in it when it exits is ended then (a note of the
run says so); and if this process dies first (SIGKILL), a watchdog (:mod:`._command_watch`) ends the group and
removes the run's temporary directory. How the child ended is the record's ``exit_code`` (a timeout: minus the
signal that stopped it). A report line that cannot be used is skipped, and the run's notes (``extra["notes"]``)
count and name it.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
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
from ._command_watch import GRACE_S, end_group, group_exists, signal_group, start_watchdog

_TAIL_LINES, _TAIL_CHARS = 15, 2000
_MAX_DEPTH = 64  # a run line nested deeper is not a report firstdiv can store or show
_SHOWN_SKIPS = 3
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
        tmp = Path(tempfile.mkdtemp(prefix="firstdiv-run-"))
        try:
            watchdog = start_watchdog(tmp)  # if this process dies, the watchdog ends the command and removes tmp
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        try:
            report = tmp / "report.jsonl"
            report.touch()
            env = dict(os.environ, FIRSTDIV_SEED=str(seed), OMP_NUM_THREADS=str(config.get("threads", 1)))
            env[REPORT_FILE] = str(report)
            env.pop("FIRSTDIV_REPORT_FD", None)
            code, timed_out, left = _launch(argv, self.cwd, env, timeout, tmp, watchdog.watch)
            rec.exit_code = code  # the record's exit_code: 0, the exit status, or minus the signal that ended it
            if left:
                _note(rec, "processes the command left running in its process group were ended when it exited")
            skipped: list[str] = []
            rows, runs = _read(report, skipped)
            for row in rows:
                rec.log(row.pop("step", None), **row)
            apply_run_lines(rec, runs)
            if skipped:
                _note(rec, skipped_note(skipped))
            stderr = _tail(tmp / "stderr")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            watchdog.release()
        _check_ending(code, timed_out, timeout, len(rows), skipped, stderr, runs.get("status"))


def _check_ending(code: int, timed_out: bool, timeout: Any, rows: int, skipped: list[str], stderr: str,
                  status: dict[str, Any] | None) -> None:
    """Raise the run's error when the command did not end with a usable result."""
    if timed_out:
        raise CommandFailed(f"timed out after {timeout} s (--timeout), {rows} report lines before it" + stderr)
    if code != 0:
        how = f"killed by {_signal_name(-code)}" if code < 0 else f"exit code {code}"
        if "No module named 'firstdiv'" in stderr:  # the command's python is not the one firstdiv is in
            how += (f" (its Python cannot import firstdiv: run the command with {sys.executable}, e.g. "
                    "activate that environment, or pip install firstdiv where the command runs)")
        raise CommandFailed(f"command failed with {how}" + stderr)
    if (status or {}).get("status", "ok") != "ok":  # a training callback saw it end unfinished
        raise CommandFailed(_unfinished(status) + stderr)
    if not rows and skipped:
        raise CommandFailed(f"the command exited 0 but none of its report lines could be used ({skipped_note(skipped)})"
                            "; report with firstdiv.log(step=..., val_loss=...)" + stderr)
    if not rows:
        raise CommandFailed("the command exited 0 but reported no metrics: call firstdiv.log(val_loss=...) in the "
                            f"script (or write JSON lines to ${REPORT_FILE})" + stderr)


def _note(rec: Any, text: str) -> None:
    rec.extra.setdefault("notes", []).append(text)


def _launch(argv: list[str], cwd: str, env: dict[str, str], timeout: int | None, tmp: Path,
            watch: Any) -> tuple[int, bool, bool]:
    """Run the child to its end; (its exit code, whether the timeout killed it, whether it left processes running
    in its group, now ended). ``watch(pgid)`` hands the child's group to the run's watchdog."""
    from ._command_code import program

    with open(tmp / "stdout", "wb") as out, open(tmp / "stderr", "wb") as err:
        try:
            proc = subprocess.Popen(program(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True)
        except OSError as exc:
            raise CommandFailed(f"cannot start {argv[0]!r}: {exc.strerror or exc}; check the command") from None
        watch(proc.pid)  # its process group id: start_new_session made it the leader
        restore = _kill_on_sigterm(proc)
        try:
            try:
                # with a timeout the wait polls, so an interrupt raised in this thread from outside (a Ray task
                # being cancelled) is seen while the child runs; a plain wait would block in waitpid until it ends
                code = proc.wait(timeout=timeout if timeout is not None else _FOREVER_S)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                return proc.returncode, True, False
            # the group outlives its leader while a process it started still runs: that holds its id
            left = group_exists(proc.pid)
            if left:
                end_group(proc.pid, GRACE_S)
            return code, False, left
        except BaseException:  # Ctrl-C, or anything else ending this run: the child must not outlive it
            _kill_group(proc)
            raise
        finally:
            restore()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the child's process group, SIGKILL to what is left after a grace period, then reap the child."""
    signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    signal_group(proc.pid, signal.SIGKILL)  # the launcher may be gone while its children still run
    proc.wait()


def _kill_on_sigterm(proc: subprocess.Popen[bytes]) -> Any:
    """While the child runs, a SIGTERM to this process (the process backend stopping its worker) kills the child's
    group first, then ends this process as SIGTERM would (its watchdog removes the run's directory). Only the main
    thread can install a handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: Any) -> None:
        _kill_group(proc)
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


class _Unusable(ValueError):
    """A report line that cannot be used; the message says why, in a few words."""


def _read(report: Path, skipped: list[str] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The reported rows: JSON objects of numbers (a ``step`` or ``epoch`` key gives the row's index); and the run
    lines (``{"_firstdiv": kind, "data": ...}``, see :mod:`firstdiv._log`) by kind: the last usable one of each
    kind, the ``grad_norm`` values of all its lines together. A line that cannot be used is skipped: ``skipped``
    gets ``"line N (why)"`` for each."""
    rows: list[dict[str, Any]] = []
    runs: dict[str, Any] = {}
    for number, line in enumerate(report.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = _line(line, runs)
        except _Unusable as exc:
            if skipped is not None:
                skipped.append(f"line {number} ({exc})")
            continue
        if row:
            rows.append(row)
    return rows, runs


def _line(line: str, runs: dict[str, Any]) -> dict[str, Any] | None:
    """A metrics line's row, or None (a run line, put in ``runs``; a line without numbers)."""
    try:
        obj = json.loads(line)
    except RecursionError:
        raise _Unusable("nested too deeply") from None
    except ValueError:
        raise _Unusable("not JSON: cut short, or not written by firstdiv.log") from None
    if not isinstance(obj, dict):
        raise _Unusable("not a JSON object")
    if "_firstdiv" in obj:
        if not _shallow(obj):
            raise _Unusable("nested too deeply")
        _run_line(runs, obj.get("_firstdiv"), obj.get("data"))
        return None
    step = obj.pop("step", obj.pop("epoch", None))
    row: dict[str, Any] = {k: _float(v, _shown(k)) for k, v in obj.items() if _is_number(v)}
    if not row:
        return None
    if _is_number(step):
        if not math.isfinite(_float(step, "step", "step is not a finite number")):
            raise _Unusable("step is not a finite number")
        row["step"] = int(step)
    return row


def _run_line(runs: dict[str, Any], kind: Any, data: Any) -> None:
    if kind == "grad_norm":
        if not isinstance(data, list):
            raise _Unusable("grad_norm data is not a list of numbers")
        runs.setdefault("grad_norm", []).extend([_float(v, "a grad_norm value") for v in data if _is_number(v)])
    elif kind == "throughput":
        counts = [data.get(k) for k in ("examples", "seconds")] if isinstance(data, dict) else [None]
        if any(_count(v) is None for v in counts) or (data.get("tokens") is not None and _count(data["tokens"]) is None):
            raise _Unusable("throughput needs finite numbers >= 0 for examples, seconds and tokens")
        runs[kind] = data
    elif kind == "status":
        if not isinstance(data, dict) or not isinstance(data.get("status"), str):
            raise _Unusable("status data is not a JSON object with a status")
        runs[kind] = data
    elif kind in ("eval_contract", "config") and not isinstance(data, dict):
        raise _Unusable(f"{kind} data is not a JSON object")
    elif kind == "eval_contract" and data:
        from .record import contract_value, short_hash

        try:
            short_hash({k: contract_value(v) for k, v in data.items()})
        except (ValueError, TypeError, OverflowError, RecursionError) as exc:
            raise _Unusable(f"eval_contract cannot be fingerprinted: {type(exc).__name__}") from None
        runs[kind] = data
    elif kind == "config" and data:
        runs[kind] = data


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _float(value: float, name: str, why: str | None = None) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer of hundreds of digits
        raise _Unusable(why or f"{name} is too large for a float") from None


def _shown(name: str) -> str:
    text = ascii(name)[1:-1]
    return text if len(text) <= 40 else text[:37] + "..."


def _shallow(value: Any) -> bool:
    """Whether ``value`` is nested at most :data:`_MAX_DEPTH` levels deep (without recursion)."""
    todo = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if depth > _MAX_DEPTH:
            return False
        if isinstance(item, dict):
            todo += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list):
            todo += [(v, depth + 1) for v in item]
    return True


def skipped_note(skipped: list[str]) -> str:
    """The run's note on the report lines it skipped: how many, and why for the first few."""
    n = len(skipped)
    shown = ", ".join(skipped[:_SHOWN_SKIPS]) + (f" and {n - _SHOWN_SKIPS} more" if n > _SHOWN_SKIPS else "")
    return (f"{n} report line{'s' if n != 1 else ''} could not be used and {'was' if n == 1 else 'were'} skipped: "
            + shown)


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
    examples, seconds = (_count(put.get("examples")), _count(put.get("seconds"))) if put is not None else (None, None)
    if examples is not None and seconds is not None:
        tokens = _count(put.get("tokens"))  # type: ignore[union-attr]
        rec.throughput(examples=int(examples), seconds=seconds, tokens=int(tokens) if tokens is not None else None)
    if runs.get("eval_contract"):
        rec.eval_contract(runs["eval_contract"])
    if runs.get("config"):
        rec.extra["reported_config"] = dict(runs["config"])


def _count(value: Any) -> float | None:
    """A finite number >= 0 as a float, else None."""
    if not _is_number(value):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


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
