"""Environment and code identity of a run: the links of the causal chain besides config and data."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from .record import short_hash

#: Fields that must match before two runs count as the same environment.
ENV_FIELDS = ("python", "torch", "numpy", "threads", "device", "gpu", "deterministic_algorithms",
              "cudnn_deterministic", "cudnn_benchmark", "cublas_workspace_config", "os", "machine", "cpu")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment(threads: int, device: str = "cpu") -> dict[str, Any]:
    """What the run executes on. ``threads`` is the intra-op thread count the run will use."""
    import numpy
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "threads": int(threads),
        "device": device,
        "gpu": torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else None,
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpu": _cpu_model(),
    }


def env_hash(env: dict[str, Any]) -> str:
    return short_hash({k: env.get(k) for k in ENV_FIELDS})


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.decode(errors="replace") if out.returncode == 0 else None


#: Untracked files with these endings are source: hashed into the code version. Any other untracked
#: file is listed in the record (``code["untracked"]``) unless the workload imported it.
SOURCE_SUFFIXES = frozenset({".py", ".pyi", ".pyx", ".pxd", ".pxi", ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp",
                             ".cu", ".cuh", ".so", ".pyd"})
_LISTED_MAX = 50  # untracked non-source files named in the record; the rest are counted


def code_version(source: Path, *, exclude: tuple[Path, ...] = (), fallback: str = "",
                 closure: tuple[Path, ...] | None = None) -> dict[str, Any]:
    """Git commit of the work tree holding ``source`` plus a hash of its uncommitted changes.

    Uncommitted changes are the tracked diff against HEAD and the content of untracked source files
    (by ending, or in ``closure``: the files of the modules imported so far, which hold the
    workload's import closure). Files firstdiv writes (the store under ``exclude`` or ``.firstdiv``,
    report pages, gate files) never count: a report written next to the code is not a code change.
    Other untracked files are listed, not hashed. Outside git, ``fallback`` (e.g. a package
    version) is used.
    """
    cwd = source if source.is_dir() else source.parent
    top = _git(["rev-parse", "--show-toplevel"], cwd)
    commit = _git(["rev-parse", "HEAD"], cwd) if top else None
    if not top or not commit:
        return {"commit": None, "dirty": False, "dirty_hash": None, "version": fallback or "unversioned"}
    root = Path(top.strip())
    skip = [p.resolve() for p in exclude]
    h = hashlib.sha256()
    changed = [rel for rel in (_git(["diff", "HEAD", "--name-only", "-z"], root) or "").split("\0") if rel]
    ours = [rel for rel in changed if _ignored(root / rel, skip) or _written_by_firstdiv(root / rel)]
    diff = _git(["diff", "HEAD", "--binary", "--", ".", *(f":(exclude,literal){rel}" for rel in ours)], root) or ""
    h.update(diff.encode())
    dirty = bool(diff)
    imported = _imported_files(root) if closure is None else {p.resolve() for p in closure}
    listed: list[str] = []
    untracked = _git(["ls-files", "--others", "--exclude-standard", "-z"], root) or ""
    for rel in sorted(filter(None, untracked.split("\0"))):
        path = (root / rel).resolve()
        if _ignored(path, skip) or _written_by_firstdiv(path):
            continue
        if path.suffix.lower() not in SOURCE_SUFFIXES and path not in imported:
            listed.append(rel)
            continue
        dirty = True
        h.update(rel.encode())
        try:
            h.update(path.read_bytes() if path.stat().st_size < 4_000_000 else str(path.stat().st_mtime_ns).encode())
        except OSError:
            continue
    commit = commit.strip()
    dirty_hash = h.hexdigest()[:8] if dirty else None
    version = commit[:12] + (f"+dirty.{dirty_hash}" if dirty_hash else "")
    out: dict[str, Any] = {"commit": commit, "dirty": dirty, "dirty_hash": dirty_hash, "version": version}
    if listed:
        out["untracked"] = listed[:_LISTED_MAX] + ([f"... {len(listed) - _LISTED_MAX} more"] if len(listed) > _LISTED_MAX else [])
    return out


def _ignored(path: Path, skip: list[Path]) -> bool:
    path = path.resolve()
    return any(path == s or s in path.parents for s in skip) or ".firstdiv" in path.parts


def _imported_files(root: Path) -> set[Path]:
    """Files of the modules imported so far that live in the work tree at ``root``."""
    out = set()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file:
            path = Path(file).resolve()
            if root in path.parents:
                out.add(path)
    return out


_MARKERS = (b'<meta name="generator" content="firstdiv ', b'"format": "firstdiv.gate"')


def _written_by_firstdiv(path: Path) -> bool:
    """A report page, a gate file or a run store (with its -wal/-shm), told by what firstdiv writes into them."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    if head.startswith(b"SQLite format 3\0") or path.name.endswith(("-wal", "-shm")) and \
            Path(str(path)[:-4]).is_file():
        return True
    return any(m in head for m in _MARKERS)
