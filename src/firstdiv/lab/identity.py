"""A sweep's identity: everything that makes two runs of one seed interchangeable, computed once per sweep.

The store, the JSON and the hashes keep it as the plain dict :meth:`RunIdentity.to_dict` gives (its keys in
that order); the sweep path passes the typed value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunIdentity:
    """One sweep's identity. ``identity`` is the short hash of workload, config, code version and env hash."""

    workload: str
    config: dict[str, Any]
    config_hash: str
    code: dict[str, Any]
    env: dict[str, Any]
    env_hash: str
    identity: str
    hypothesis: str | None = None
    success: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def threads(self) -> int:
        """The torch thread count every run of the sweep trains at (the environment's ``threads``)."""
        return int(self.env["threads"])

    def to_dict(self) -> dict[str, Any]:
        """The dict the sweep path has always passed and recorded: same keys, same order, same values."""
        return {"workload": self.workload, "config": self.config, "config_hash": self.config_hash, "code": self.code,
                "env": self.env, "env_hash": self.env_hash, "hypothesis": self.hypothesis, "success": self.success,
                "extra": self.extra, "identity": self.identity}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunIdentity:
        """Read :meth:`to_dict`'s dict back (``hypothesis``, ``success`` and ``extra`` may be missing)."""
        return cls(workload=data["workload"], config=data["config"], config_hash=data["config_hash"],
                   code=data["code"], env=data["env"], env_hash=data["env_hash"], identity=data["identity"],
                   hypothesis=data.get("hypothesis"), success=data.get("success"), extra=dict(data.get("extra", {})))
