"""Instruments: each inspects one run (a model, a batch, a loss, an optimizer, a loader) and returns
a report naming the first boundary where observation diverges from expectation."""
