"""Command sweeps: existing training code, run as it is, one child process per seed.

``firstdiv sweep --name base --seeds 0-11 -- python train.py --seed {seed} --lr {lr}`` (or
``firstdiv.sweep(["python", "train.py", "--seed", "{seed}"], "0-11", sets=["lr=0.1"])``) runs the command at every
seed, with ``{seed}`` and every ``{key}`` of the ``--set`` values filled in. The script reports with
:func:`firstdiv.log` (a no-op outside a sweep). A command target is a :class:`~firstdiv.lab.workload.Workload`
named ``cmd:<the command>`` whose run launches the child (:mod:`._command_run`), so the serial and process backends
run it like any workload; its identity holds the child's interpreter and the script's code version
(:mod:`._command_code`). ``--set timeout=S`` (``--timeout S``) kills a command still running after S seconds.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgument
from ._command_run import CommandRun, placeholders
from .identity import RunIdentity
from .record import short_hash

if TYPE_CHECKING:
    from .workload import Workload

PREFIX = "cmd:"
#: execution settings of a command run: not in the config hash (``timeout`` in whole seconds)
EXEC_KEYS = ("threads", "timeout")
_PLAIN = re.compile(r"[\w@%+=:,./{}-]+")  # an argument shown unquoted in the target (shlex quotes {seed})


def is_command(target: Any) -> bool:
    """A command given as a list of arguments, a ``cmd:`` target string, or a command workload."""
    if isinstance(getattr(target, "target", None), str):  # a Workload
        return target.target.startswith(PREFIX)
    if isinstance(target, str):
        return target.startswith(PREFIX)
    return isinstance(target, (list, tuple))


def command_target(argv: Sequence[Any]) -> str:
    """``["python", "train.py", "--seed", "{seed}"]`` -> ``"cmd:python train.py --seed {seed}"``."""
    if not argv or not all(isinstance(a, str) for a in argv):
        raise InvalidArgument(f"Expected a command as a non-empty list of strings, like ['python', 'train.py', "
                              f"'--seed', '{{seed}}'], but got {list(argv)!r}"[:300])
    return PREFIX + " ".join(a if _PLAIN.fullmatch(a) else shlex.quote(a) for a in argv)


def command_parts(target: str) -> tuple[CommandRun, Callable[[dict[str, Any]], None], Path]:
    """What :func:`firstdiv.lab.workload.resolve` makes a ``cmd:`` target's workload of: its run, its config check
    (every placeholder has a value) and its script (the working directory when it names none). Refuses a command
    without ``{seed}``: every seed would run the same."""
    from ._command_code import script_of

    try:
        argv = shlex.split(target[len(PREFIX):])
    except ValueError as exc:
        raise InvalidArgument(f"Cannot split command {target[len(PREFIX):]!r} into arguments ({exc}); "
                              "check its quotes") from None
    if not argv:
        raise InvalidArgument("Expected a command after --, like: firstdiv sweep -- python train.py --seed {seed}")
    if "seed" not in placeholders(argv):
        raise InvalidArgument(f"Command {shlex.join(argv)!r} has no {{seed}} placeholder, so every seed would run the "
                              "same; pass the seed to the script, e.g. --seed {seed}")
    script = script_of(argv, Path.cwd())
    return CommandRun(tuple(argv), str(Path.cwd())), _placeholder_check(argv), script or Path.cwd()


def _placeholder_check(argv: list[str]) -> Callable[[dict[str, Any]], None]:
    def validate(config: dict[str, Any]) -> None:
        unknown = [n for n in placeholders(argv) if n != "seed" and n not in config]
        if unknown:
            given = ", ".join(sorted(k for k in config if k not in EXEC_KEYS)) or "none"
            raise ValueError(f"placeholder {{{unknown[0]}}} in the command has no value (set keys: {given}); "
                             f"give one with --set {unknown[0]}=VALUE")
        timeout = config.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1):
            raise ValueError(f"timeout must be a whole number of seconds >= 1 but got {timeout!r}")

    return validate


def command_identity(workload: Workload, config: dict[str, Any], *, store_path: Path | None = None,
                     hypothesis: str | None = None, success: str | None = None) -> RunIdentity:
    """As :func:`firstdiv.lab.runner.identity`, with the child's interpreter and the script's code version."""
    from ._command_code import child_environment, script_code
    from .env import env_hash

    train_cfg, _, execs = workload.split(config)
    argv = list(workload.fn.argv)
    exclude = (store_path.resolve().parent,) if store_path is not None else ()
    script = workload.source if workload.source.is_file() else None
    code = script_code(script, exclude=exclude)
    env = child_environment(argv, int(execs.get("threads", 1)))
    ehash = env_hash(env)
    return RunIdentity(
        workload=workload.target, config=config, config_hash=short_hash(train_cfg), code=code, env=env, env_hash=ehash,
        hypothesis=hypothesis, success=success,
        extra={"eval_keys": [], "exec_keys": list(EXEC_KEYS), "command": argv, "cwd": workload.fn.cwd},
        identity=short_hash({"workload": workload.target, "config": config, "code": code["version"], "env": ehash}),
    )
