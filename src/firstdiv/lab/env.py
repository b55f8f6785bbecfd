"""Environment and code identity of a run: the links of the causal chain besides config and data."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
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


def code_version(source: Path, *, exclude: tuple[Path, ...] = (), fallback: str = "") -> dict[str, Any]:
    """Git commit of the work tree holding ``source`` plus a hash of its uncommitted changes.

    Uncommitted changes are the tracked diff against HEAD and the content of untracked files that
    git does not ignore, excluding ``exclude`` (the run store lives in the tree and must not make
    every run look like a code change). Outside git, ``fallback`` (e.g. a package version) is used.
    """
    cwd = source if source.is_dir() else source.parent
    top = _git(["rev-parse", "--show-toplevel"], cwd)
    commit = _git(["rev-parse", "HEAD"], cwd) if top else None
    if not top or not commit:
        return {"commit": None, "dirty": False, "dirty_hash": None, "version": fallback or "unversioned"}
    root = Path(top.strip())
    h = hashlib.sha256()
    diff = _git(["diff", "HEAD", "--binary"], root) or ""
    h.update(diff.encode())
    dirty = bool(diff)
    untracked = _git(["ls-files", "--others", "--exclude-standard", "-z"], root) or ""
    skip = [p.resolve() for p in exclude]
    for rel in sorted(filter(None, untracked.split("\0"))):
        path = (root / rel).resolve()
        if any(path == s or s in path.parents for s in skip) or ".firstdiv" in path.parts:
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
    return {"commit": commit, "dirty": dirty, "dirty_hash": dirty_hash, "version": version}
