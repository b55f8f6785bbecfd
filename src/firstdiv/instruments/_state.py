"""Old path of :mod:`firstdiv.instruments._core.state`, kept only for ``firstdiv.diagnosis`` until it imports the
new one (it moves in its own step); nothing else may import it."""

from ._core.state import detached_copy

__all__ = ["detached_copy"]
