"""Which modules would compute differently in train mode than in eval mode."""

from __future__ import annotations

from torch import nn

__all__ = ["train_mode_modules"]

_MODE_DEPENDENT = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)


def train_mode_modules(model: nn.Module) -> list[str]:
    """Paths of the dropout / batch-norm / instance-norm modules in train mode (``""`` first when the root is in
    train mode and none of those exists: its own forward may read ``self.training``)."""
    bad = [name for name, m in model.named_modules() if m.training and isinstance(m, _MODE_DEPENDENT)]
    if not bad and model.training:
        return [""]
    return bad
