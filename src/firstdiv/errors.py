"""One exception root; subclasses also inherit the builtin a caller would expect."""

from __future__ import annotations


class FirstdivError(Exception):
    """Root of every error firstdiv raises on purpose. The message is one line: what and how to fix."""


class InvalidArgument(FirstdivError, ValueError):
    """A value supplied by the user is malformed or out of range."""


class WorkloadError(FirstdivError, LookupError):
    """A workload target cannot be found or does not follow the workload protocol."""


class StoreError(FirstdivError, RuntimeError):
    """The run store cannot be opened, is corrupt, or was written by a newer firstdiv."""


class NotFound(FirstdivError, LookupError):
    """A sweep, run or metric the user named is not in the store."""
