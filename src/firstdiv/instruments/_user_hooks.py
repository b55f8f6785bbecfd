"""Old path of :mod:`firstdiv.instruments._core.user_hooks`, kept only for ``firstdiv.diagnosis`` until it imports
the new one (it moves in its own step); nothing else may import it."""

from ._core.user_hooks import reports_user_hooks

__all__ = ["reports_user_hooks"]
