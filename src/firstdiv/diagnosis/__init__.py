"""Diagnosis: the escalation ladder (:mod:`.ladder`), the worksheet it pre-fills (:mod:`.worksheet`), the
symptom router (:mod:`.route`) and the failure notebook (:mod:`.incident`).

>>> ws = firstdiv.diagnose(model=model, batch=(x, y), loss_fn=loss_fn, optimizer=opt, symptom="loss is flat")
>>> ws.status, ws.first_divergence.where      # FAIL, "four_structures:head.weight"
>>> print(ws.to_markdown())                   # paste into an issue
"""

from __future__ import annotations

from .ladder import EVIDENCE_KEYS, EXTRA_KEYS, ORDER, diagnose
from .worksheet import Worksheet

__all__ = ["EVIDENCE_KEYS", "EXTRA_KEYS", "ORDER", "Worksheet", "diagnose"]
