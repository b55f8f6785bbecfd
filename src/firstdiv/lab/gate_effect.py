"""The gate's threshold moved out to the smallest effect that matters (``Gate.check(x, min_effect=...)``).

A run then fails only when it is worse than the calibrated threshold AND worse than the calibration median by
more than the min effect (0.01, "2%" of the calibration mean, "0.5x" the calibration spread). The rule only
ever passes more runs than the calibrated one, so the held-out false-alarm bound still holds.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ._effect import parse_min_effect


def effect_threshold(gate: Any, min_effect: Any) -> tuple[Any, dict[str, Any] | None]:
    """(the gate to check with, what the min effect did); the gate itself and None without one."""
    effect = parse_min_effect(min_effect)
    if effect is None:
        return gate, None
    x = effect.threshold(list(gate.calibration_values))
    center = float(np.median(gate.calibration_values))
    floor = center - x if gate.higher_is_better else center + x  # worse than the median by the min effect
    threshold = min(gate.threshold, floor) if gate.higher_is_better else max(gate.threshold, floor)
    info = {"spec": effect.text, "what": effect.describe(), "value": x, "median": center,
            "calibrated_threshold": gate.threshold, "threshold": threshold, "decides": threshold != gate.threshold}
    return replace(gate, threshold=threshold), info
