"""Instruments that watch the user's own code run (memory_phases) must be invisible to it: the same
program trained with and without the watcher ends in the same state, bit for bit."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import firstdiv
from firstdiv import zoo

TRAINED = [ref for ref in zoo.REFERENCES if ref != "pipeline"]


def _state(program):
    params = {n: p.detach().clone() for n, p in program.model.named_parameters()}
    grads = {n: None if p.grad is None else p.grad.clone() for n, p in program.model.named_parameters()}
    opt = [{k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()} for s in program.optimizer.state.values()]
    return params, grads, opt, torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()


def _same(a, b):
    for x, y in zip(a[:2], b[:2]):
        assert x.keys() == y.keys()
        for k in x:
            assert (x[k] is None) == (y[k] is None) and (x[k] is None or torch.equal(x[k], y[k])), k
    assert len(a[2]) == len(b[2])
    for s, t in zip(a[2], b[2]):
        assert all(torch.equal(s[k], t[k]) if torch.is_tensor(s[k]) else s[k] == t[k] for k in s)
    assert torch.equal(a[3], b[3]) and np.array_equal(a[4], b[4]) and a[5] == b[5]


@pytest.mark.parametrize("reference", TRAINED)
def test_memory_phases_leaves_the_watched_training_unchanged(reference):
    bare, watched = zoo.build(reference, seed=0), zoo.build(reference, seed=0)
    torch.manual_seed(5)
    for _ in range(3):
        bare.train_step()
    after_bare = _state(bare)
    torch.manual_seed(5)
    mp = firstdiv.memory_phases(watched.model, watched.optimizer)
    with mp:
        for _ in range(3):
            watched.train_step()
    _same(after_bare, _state(watched))
    assert mp.report.status.value in ("PASS", "WARN"), str(mp.report)
    assert {f.where for f in mp.report.findings} >= {"forward", "backward"}
    assert not watched.model._forward_hooks and not watched.model._forward_pre_hooks
    assert torch._C._len_torch_dispatch_stack() == 0 and torch._C._len_torch_function_stack() == 0
