"""The regression lab: workloads, run records, the store, sweeps, comparisons and experiments.

Its public names are exported from :mod:`firstdiv` (``firstdiv.sweep``, ``firstdiv.compare``, ...);
this package re-exports nothing, so ``firstdiv.lab.bisect`` is always the module.
"""
