"""Bridges to other tools, each importing its library only when used.

MLflow: :mod:`firstdiv.integrations.mlflow` (``pip install 'firstdiv[mlflow]'``) pushes sweeps into an experiment and
compares runs that live there.

Training callbacks for the Lightning and Hugging Face trainers: each records the run (curves per epoch and per
evaluation, grad-norm quantiles, throughput, the eval fingerprint, the hyper-parameters) and can host
:func:`firstdiv.watch` on the real training.

``from firstdiv.integrations.lightning import FirstdivCallback`` (``pip install 'firstdiv[lightning]'``) and
``from firstdiv.integrations.hf import FirstdivCallback`` (``pip install 'firstdiv[hf]'``). Under a command sweep
(``firstdiv sweep -- python train.py --seed {seed}``) the callback reports through the sweep's report file, so every
seed's run record carries all of it; run bare, it keeps the record in memory (``cb.record``, ``cb.report``) and
writes no file. This package imports none of the libraries: each module imports its own.
"""
