"""What a command sweep's identity knows about the command: its script and local imports (the code version) and
the interpreter the child runs (the environment), found without running the script."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

_PYTHON = re.compile(r"^python[0-9.]*$")
#: printed by the child's interpreter: its versions, read from package metadata (importing torch takes seconds)
_PROBE = ("import json, platform\nfrom importlib import metadata\ndef v(name):\n    try:\n"
          "        return metadata.version(name)\n    except metadata.PackageNotFoundError:\n        return None\n"
          "print(json.dumps({'python': platform.python_version(), 'torch': v('torch'), 'numpy': v('numpy')}))")


#: launchers a command may name that install no program on PATH in every environment: the module each runs
_LAUNCHERS = {"torchrun": "torch.distributed.run"}


def program(argv: list[str]) -> list[str]:
    """The command as it is started: a launcher (``torchrun``) that is not on PATH is the one next to this
    interpreter, else this interpreter running the launcher's module (``python -m torch.distributed.run``)."""
    module = _LAUNCHERS.get(argv[0]) if argv else None
    if module is None or shutil.which(argv[0]):
        return list(argv)
    beside = Path(sys.executable).parent / argv[0]
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside), *argv[1:]]
    return [sys.executable, "-m", module, *argv[1:]]


def interpreter(argv: list[str]) -> str | None:
    """The Python that runs the command: ``argv[0]`` itself, or the interpreter of its ``#!`` line (torchrun,
    an entry point); None for a command that is not Python."""
    found = shutil.which(argv[0]) or (argv[0] if Path(argv[0]).is_file() else None)
    if found is None:
        return None
    if _PYTHON.match(Path(argv[0]).name):
        return found
    try:
        with open(found, "rb") as fh:
            first = fh.readline(300).decode(errors="replace")
    except OSError:
        return None
    words = first[2:].split() if first.startswith("#!") else []
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    return shutil.which(words[0]) if words and _PYTHON.match(Path(words[0]).name) else None


def script_of(argv: list[str], cwd: Path) -> Path | None:
    """The command's script: the first ``.py`` argument (or ``-m`` module) that exists, else the first existing
    file argument after the program (``bash run.sh``); None when the command names no file."""
    for i, arg in enumerate(argv[1:], 1):
        if arg == "-m" and i + 1 < len(argv):
            base = cwd.joinpath(*argv[i + 1].split("."))
            for path in (base.with_suffix(".py"), base / "__main__.py"):
                if path.is_file():
                    return path.resolve()
        if arg.endswith(".py") and (cwd / arg).is_file():
            return (cwd / arg).resolve()
    for arg in argv[1:]:
        if "{" not in arg and not arg.startswith("-") and (cwd / arg).is_file():
            return (cwd / arg).resolve()
    first = cwd / argv[0]
    return first.resolve() if os.sep in argv[0] and first.is_file() else None  # ./train.sh


def local_imports(script: Path) -> list[Path]:
    """``script`` and the files next to it that it imports, transitively (``import helper``, ``from pkg import x``
    where helper.py or pkg/ sits beside it)."""
    root, seen, todo = script.parent, [], [script]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.append(path)
        if path.suffix != ".py":
            continue
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except (OSError, SyntaxError, ValueError):
            continue
        todo += [p for p in (_local_file(root, path, node, name) for node, name in _imported_names(tree)) if p]
    return sorted(seen)


def _imported_names(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    found: list[tuple[ast.AST, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            found += [(node, f"{base}.{a.name}" if base else a.name) for a in node.names]
            if base:
                found.append((node, base))
    return found


def _local_file(root: Path, here: Path, node: ast.AST, name: str) -> Path | None:
    start = here.parent if isinstance(node, ast.ImportFrom) and node.level else root
    base = start.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path.resolve()
    return None


def script_code(script: Path | None, *, exclude: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The code version: git of the script's work tree (its local imports count as source when untracked); outside
    git ``script.<hash>`` of the script and its local imports."""
    from .env import code_version

    if script is None:
        return {"commit": None, "dirty": False, "dirty_hash": None, "version": "unversioned"}
    files = local_imports(script)
    h = hashlib.sha256()
    for path in files:
        h.update(os.path.relpath(path, script.parent).encode() + b"\0")
        try:
            h.update(path.read_bytes())
        except OSError:
            continue
    code = code_version(script, exclude=exclude, fallback=f"script.{h.hexdigest()[:12]}", closure=tuple(files))
    code["files"] = [os.path.relpath(p, script.parent) for p in files]
    return code


def child_environment(argv: list[str], threads: int) -> dict[str, Any]:
    """This machine's environment with the child interpreter's python, torch and numpy versions."""
    from .env import environment

    env = environment(threads=threads)
    python = interpreter(program(argv))
    if python is None:
        env["child"] = f"not probed: {argv[0]} is not a Python interpreter"
        return env
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True)
        env.update(json.loads(out.stdout.strip().splitlines()[-1]))
        env["child"] = python
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        env["child"] = f"not probed: {python} failed ({type(exc).__name__})"
    return env
