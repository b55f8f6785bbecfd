"""Old path of :mod:`firstdiv.instruments._core.batch`, kept only for ``firstdiv.diagnosis`` until it imports the
new one (it moves in its own step); nothing else may import it."""

from ._core.batch import check_evidence, compute_loss, describe_error, split_batch

__all__ = ["check_evidence", "compute_loss", "describe_error", "split_batch"]
