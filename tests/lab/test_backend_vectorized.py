"""The vectorized backend: a seed's record is the same alone (serial) or inside a stack of any size."""

import json
import random

import numpy as np
import pytest
import torch
from conftest import ROOT

import firstdiv
from firstdiv.errors import InvalidArgument
from firstdiv.lab import backends, functional
from firstdiv.lab import builtin_mlp as mlp
from firstdiv.lab.backends import vectorized
from firstdiv.lab.record import Recorder
from firstdiv.lab.runner import identity
from firstdiv.lab.workload import resolve

FUNCTIONAL = str(ROOT / "tests" / "workloads" / "functional.py")
TINY = str(ROOT / "tests" / "workloads" / "tiny.py")
MLP_FAST = ["epochs=4", "n_train=900", "n_val=300"]
IDENTITY_FIELDS = ("seed", "workload", "identity", "config_hash", "code", "env_hash", "eval_fingerprint",
                   "eval_contract", "eval_fields", "data_identity", "status", "error")


def _run(backend, target, seeds, sets=(), ident=None, workers=None, **options):
    wl = resolve(target)
    ident = ident or identity(wl, wl.config(sets=list(sets)))
    out = []
    backends.get(backend).run(wl, list(seeds), ident, workers=workers, done=out.append, options=options)
    return out, ident


def _same(a, b):
    """The identity rule: equal identity, measurement and data; curves and metrics within 1e-6."""
    for field in IDENTITY_FIELDS:
        assert getattr(a, field) == getattr(b, field), (field, a.seed)
    assert a.curves.keys() == b.curves.keys()
    for name in a.curves:
        assert a.curves[name] == pytest.approx(b.curves[name], abs=1e-6, rel=0), (name, a.seed)
    final = {k: v for k, v in a.final.items() if k != "examples_per_s"}  # a measured speed, not a result
    assert final == pytest.approx({k: b.final[k] for k in final}, abs=1e-6, rel=0)
    assert a.grad_norm == pytest.approx(b.grad_norm, abs=1e-6, rel=0)
    assert a.throughput["examples"] == b.throughput["examples"]


def test_seed_alone_equals_seed_in_stacks_of_1_3_12_and_across_chunk_boundaries():
    # The chapter's full config: 480 AdamW steps, where any difference between a stack of one and a
    # stack of many would have room to grow.
    serial, ident = _run("serial", "builtin:mlp", range(12))
    for chunk, sizes in ((1, [1] * 12), (3, [3] * 12), (12, [12] * 12), (5, [5] * 10 + [2] * 2)):
        stacked, _ = _run("vectorized", "builtin:mlp", range(12), ident=ident, chunk=chunk)
        assert [r.seed for r in stacked] == list(range(12))
        assert [r.extra["batch_seeds"] for r in stacked] == sizes
        for a, b in zip(serial, stacked):
            _same(a, b)
            # Every kernel of the stacked loop treats a seed's slice alike whatever S is, so at one
            # thread the weights agree bit for bit (1e-6 is the promise; this is what holds here).
            assert a.state_hash == b.state_hash, (chunk, a.seed)


def test_records_say_which_backend_ran_them_and_share_the_stack_time():
    recs, _ = _run("vectorized", "builtin:mlp", range(6), MLP_FAST, chunk=3)
    for r in recs:
        assert r.extra["backend"] == "vectorized" and r.extra["batch_seeds"] == 3 and r.extra["chunk"] == 3
        assert r.throughput["examples"] == 900 * 4
        assert 0 < r.throughput["seconds"] * 3 <= r.extra["batch_seconds"]  # training time, eval excluded
        assert r.wall_seconds * 3 >= r.extra["batch_seconds"]
        assert r.final["examples_per_s"] == pytest.approx(900 * 4 / r.throughput["seconds"])
        assert r.eval_contract == mlp.eval_contract(resolve("builtin:mlp").config(sets=MLP_FAST))
        assert {"train_loss", "val_loss", "val_acc"} == set(r.curves) and r.state_hash


def test_functional_user_workload_vectorizes_and_matches_its_own_serial_run():
    for target, sets, seeds in ((f"{FUNCTIONAL}:train", [], range(7)), (f"{FUNCTIONAL}:regress", [], range(4)),
                                (f"{FUNCTIONAL}:regress", ["loss=huber"], range(4))):
        serial, ident = _run("serial", target, seeds, sets)
        stacked, _ = _run("vectorized", target, seeds, ident=ident, chunk=3)
        assert all(r.ok for r in stacked), [r.error for r in stacked]
        for a, b in zip(serial, stacked):
            _same(a, b)
            assert a.state_hash == b.state_hash
        assert len({r.curves["val_loss"][-1] for r in stacked}) == len(stacked)  # seeds differ from each other
    assert "val_acc" in stacked[0].curves or target.endswith("regress")


def test_a_failing_spec_is_the_same_failed_record_in_both_backends():
    serial, ident = _run("serial", f"{FUNCTIONAL}:train", range(3), ["fail=true"])
    stacked, _ = _run("vectorized", f"{FUNCTIONAL}:train", range(3), ident=ident)
    assert [r.status for r in stacked] == ["failed"] * 3
    assert [r.error for r in stacked] == [r.error for r in serial]
    assert "the spec refused this config" in stacked[0].error


def test_plain_workload_is_refused_in_one_line_with_the_fix(cli, tmp_path):
    with pytest.raises(InvalidArgument, match=r"plain train\(seed, config, rec\).*vectorizable.*serial") as err:
        firstdiv.sweep(f"{TINY}:train", "0-2", store=tmp_path / "runs.db", backend="vectorized")
    assert "\n" not in str(err.value)
    proc = cli("sweep", f"{TINY}:train", "--seeds", "0-2", "--backend", "vectorized", "--store", tmp_path / "c.db",
               "--json")
    assert proc.returncode == 2 and json.loads(proc.stdout)["status"] == "ERROR"  # --json: the error as JSON too
    assert proc.stderr.startswith("firstdiv: error: ") and proc.stderr.count("\n") == 1


@pytest.mark.parametrize("options,match", [({"chunk": 0}, "chunk"), ({"chunk": "4"}, "chunk"),
                                           ({"chunk": True}, "chunk"), ({"address": "x"}, "address")])
def test_bad_backend_options_are_refused(options, match):
    with pytest.raises(InvalidArgument, match=match):
        _run("vectorized", f"{FUNCTIONAL}:regress", [0], **options)


def test_chunks_bound_the_stack_and_records_stream_per_chunk(monkeypatch):
    stacks, delivered = [], []
    real = functional.train_stack

    def spy(fs, seeds, recs):
        stacks.append((list(seeds), len(delivered), torch.get_num_threads()))
        return real(fs, seeds, recs)

    monkeypatch.setattr(functional, "train_stack", spy)
    wl = resolve(f"{FUNCTIONAL}:regress")
    ident = identity(wl, wl.config())
    vectorized.run(wl, list(range(10)), ident, workers=None, done=delivered.append, options={"chunk": 4})
    assert [(s, before) for s, before, _ in stacks] == [([0, 1, 2, 3], 0), ([4, 5, 6, 7], 4), ([8, 9], 8)]
    assert all(threads == 1 for *_, threads in stacks)
    assert [r.seed for r in delivered] == list(range(10))


def test_default_chunk_comes_from_the_measured_footprint():
    cfg = resolve("builtin:mlp").config()
    fs = mlp.spec(cfg)
    per_seed = vectorized.seed_bytes(fs)
    params = sum(p.numel() for p in mlp.init_params(cfg, torch.Generator())) * 4
    assert per_seed > 5 * params  # optimizer state, draws and activations on top of the weights
    assert vectorized.default_chunk(fs, budget=3 * per_seed) == 3
    assert vectorized.default_chunk(fs, budget=1) == 1
    assert 1 < vectorized.default_chunk(fs) <= vectorized.MAX_CHUNK
    bigger = mlp.spec(dict(cfg, n_val=20000, hidden=128))
    assert vectorized.seed_bytes(bigger) > 10 * per_seed
    assert vectorized.default_chunk(bigger) < vectorized.default_chunk(fs)


def test_caller_thread_count_and_rng_states_are_restored():
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.manual_seed(7), np.random.seed(7), random.seed(7)
        expect = (torch.rand(3), np.random.rand(3), random.random())
        torch.manual_seed(7), np.random.seed(7), random.seed(7)
        _run("vectorized", f"{FUNCTIONAL}:train", range(2), ["epochs=1"])
        assert torch.get_num_threads() == 2
        got = (torch.rand(3), np.random.rand(3), random.random())
        assert torch.equal(got[0], expect[0]) and np.array_equal(got[1], expect[1]) and got[2] == expect[2]
    finally:
        torch.set_num_threads(saved_threads)


def test_store_resume_skips_seeds_already_recorded_by_any_backend(tmp_path):
    store = tmp_path / "runs.db"
    first = firstdiv.sweep("builtin:mlp", "0-3", sets=MLP_FAST, store=store, backend="serial")
    more = firstdiv.sweep("builtin:mlp", "0-7", sets=MLP_FAST, store=store, backend="vectorized")
    again = firstdiv.sweep("builtin:mlp", "0-7", sets=MLP_FAST, store=store, backend="vectorized")
    assert (more.reused, more.ran) == ((0, 1, 2, 3), (4, 5, 6, 7)), "did the code version change mid-test?"
    assert (again.reused, again.ran) == (tuple(range(8)), ())
    assert [r.created for r in more.records[:4]] == [r.created for r in first.records]
    assert [r.extra.get("backend") for r in again.records] == [None] * 4 + ["vectorized"] * 4


def test_cli_vectorized_sweep_gives_the_serial_noise_floor(cli, tmp_path):
    out = {}
    for backend in ("vectorized", "serial"):
        proc = cli("sweep", "builtin:mlp", "--seeds", "0-11", "--backend", backend, "--json",
                   "--store", tmp_path / f"{backend}.db")
        assert proc.returncode == 0, proc.stderr
        out[backend] = json.loads(proc.stdout)["payload"]
    vec, ser = out["vectorized"], out["serial"]
    assert vec["ran"] == ser["ran"] == list(range(12))
    for metric in ("train_loss", "val_loss", "val_acc"):
        assert vec["summary"][metric] == pytest.approx(ser["summary"][metric], abs=1e-6, rel=0), metric
    for a, b in zip(vec["runs"], ser["runs"]):
        assert a["eval_fingerprint"] == b["eval_fingerprint"]
        assert a["final"]["val_loss"] == pytest.approx(b["final"]["val_loss"], abs=1e-6, rel=0)


def test_builtin_single_seed_helpers_run_the_stacked_code():
    cfg = resolve("builtin:mlp").config(sets=MLP_FAST)
    rec = Recorder(3, cfg)
    params, data = mlp.fit(3, cfg, rec)
    assert [p.shape for p in params] == [p.shape for p in mlp.init_params(cfg, torch.Generator())]
    again = mlp.evaluate(params, data, cfg, mlp.generators(3)["eval"])
    assert again == {"val_loss": rec.rows[-1]["val_loss"], "val_acc": rec.rows[-1]["val_acc"]}
    logits = mlp.forward(params, data.x_val, 0.0, None)
    stacked = mlp.stacked_forward([p.unsqueeze(0) for p in params], data.x_val.unsqueeze(0))
    assert torch.equal(logits, stacked[0])
    dropped = mlp.forward(params, data.x_val, cfg["dropout"], torch.Generator().manual_seed(0))
    assert not torch.equal(dropped, logits)


def test_functional_descriptions_are_checked():
    x, y = torch.randn(8, 2), torch.zeros(8, dtype=torch.int64)
    ok = {"data": (x, y, x, y), "init": lambda g: [torch.zeros(2, 2)], "apply": lambda p, x: x @ p[0]}
    functional.Functional(**ok)
    for change, match in (({"optimizer": "lion"}, "optimizer"), ({"epochs": 0}, "epochs"), ({"lr": 0}, "lr"), ({"loss": "l1"}, "loss"),
                          ({"data": (x, y[:3], x, y)}, "differ in length")):
        with pytest.raises(InvalidArgument, match=match):
            functional.Functional(**dict(ok, **change))
    for init in (lambda g: {"w": torch.zeros(2)}, lambda g: [torch.zeros(2), torch.zeros(2, dtype=torch.int64)]):
        with pytest.raises(InvalidArgument, match="init"):
            functional.Stack(functional.Functional(**dict(ok, init=init)), [functional.generators(0)])
    with pytest.raises(InvalidArgument, match="return a Functional"):
        functional.build(lambda config: None, {})


def test_global_randomness_inside_apply_is_named_with_the_fix():
    x, y = torch.randn(40, 3), torch.randint(0, 2, (40,))
    fs = functional.Functional(data=(x, y, x, y), init=lambda g: [torch.randn(3, 2, generator=g)],
                               apply=lambda p, x: torch.nn.functional.dropout(x @ p[0], 0.5), batch_size=8)
    with pytest.raises(InvalidArgument, match=r"global RNG.*draws="):
        functional.train_stack(fs, [0, 1], [Recorder(0, {}), Recorder(1, {})])


def test_predicted_class_is_argmax_with_the_first_of_tied_maxima():
    logits = torch.tensor([[[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [0.0, -1.0, 5.0, 5.0]]])
    assert functional.predicted(logits).tolist() == [[1, 0, 2]]
    wide = torch.randn(3, 50, 4).round()  # many ties
    assert torch.equal(functional.predicted(wide), wide.argmax(-1))
    assert torch.equal(functional.predicted(wide.transpose(1, 2).contiguous().transpose(1, 2)), wide.argmax(-1))


@pytest.mark.parametrize("name", ["adamw", "adam", "sgd"])
@pytest.mark.parametrize("fused", [True, False])
def test_stack_optimizer_follows_torch_optim_step_for_step(name, fused, monkeypatch):
    monkeypatch.setattr(functional, "_has_fused", lambda *a: fused)
    x, y = torch.randn(8, 2), torch.zeros(8, dtype=torch.int64)
    fs = functional.Functional(data=(x, y, x, y), init=lambda g: [torch.zeros(2)], apply=lambda p, x: x,
                               optimizer=name, lr=0.05, weight_decay=0.1)
    gen = torch.Generator().manual_seed(0)
    start = torch.randn(3, 64, generator=gen)
    flat = start.clone()
    opt = functional._Optimizer(fs, flat)
    assert opt.fused == (fused and name != "sgd")
    ref = start.clone().requires_grad_()
    cls = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam, "sgd": torch.optim.SGD}[name]
    ref_opt = cls([ref], lr=0.05, weight_decay=0.1, foreach=False)
    for _ in range(25):
        grad = torch.randn(3, 64, generator=gen)
        opt.update(grad)
        ref.grad = grad.clone()
        ref_opt.step()
    torch.testing.assert_close(flat, ref.detach(), rtol=1e-5, atol=1e-6)


def test_worker_processes_train_balanced_stacks_that_equal_the_serial_runs_bit_for_bit():
    serial, ident = _run("serial", "builtin:mlp", range(10), MLP_FAST)
    for chunk, sizes in ((None, [5] * 10), (3, [3] * 6 + [2] * 4)):  # 10 seeds, chunk 3 -> 4 stacks of 3, 3, 2, 2
        options = {} if chunk is None else {"chunk": chunk}
        stacked, _ = _run("vectorized", "builtin:mlp", range(10), ident=ident, workers=2, **options)
        assert sorted(r.seed for r in stacked) == list(range(10))
        by_seed = {r.seed: r for r in stacked}
        assert [by_seed[s].extra["batch_seeds"] for s in range(10)] == sizes
        assert {r.extra["where"] for r in stacked} == {"worker process"}
        for a in serial:
            _same(a, by_seed[a.seed])
            assert a.state_hash == by_seed[a.seed].state_hash, (chunk, a.seed)


def test_vectorized_split_balances_stacks_over_workers():
    assert vectorized.split(list(range(10)), 4, 1) == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9)]
    assert vectorized.split(list(range(12)), 256, 2) == [tuple(range(6)), tuple(range(6, 12))]
    assert [len(s) for s in vectorized.split(list(range(100)), 40, 2)] == [25] * 4
    assert vectorized.split([7, 3], 256, 4) == [(7,), (3,)]  # never an empty stack


def test_a_worker_dying_fails_only_the_seeds_of_the_stack_it_held(tmp_path):
    res = firstdiv.sweep(f"{FUNCTIONAL}:crash_stack", "0-4", store=tmp_path / "runs.db", backend="vectorized",
                         workers=2)
    failed = {r.seed: r.error for r in res.failed}
    assert sorted(failed) == [0, 1, 2] and sorted(res.ran) == [0, 1, 2, 3, 4]
    assert "stack of seeds 0, 1, 2" in failed[0] and "exit code 3" in failed[0] and "--backend serial" in failed[0]
    assert all(r.ok and r.extra["batch_seeds"] == 2 for r in res.records if r.seed in (3, 4))
    again = firstdiv.sweep(f"{FUNCTIONAL}:crash_stack", "0-4", store=tmp_path / "runs.db", backend="serial")
    assert again.ran == (0, 1, 2) and not again.failed  # alone, each of them trains


def test_draws_that_take_out_fill_the_buffer_and_give_the_same_runs_as_draws_that_do_not():
    x, y = torch.randn(60, 3, generator=torch.Generator().manual_seed(1)), torch.arange(60) % 2

    def fresh(gen, n):
        return torch.rand(n, 4, generator=gen).ge_(0.5).div_(0.5)

    def fills(gen, n, out=None):
        return torch.rand(n, 4, generator=gen, out=out).ge_(0.5).div_(0.5)

    def ignores_out(gen, n, out=None):  # takes out= but returns a tensor of its own
        return fresh(gen, n)

    def apply(params, x, r):
        h = torch.tanh(x @ params[0])
        return (h if r is None else h * r) @ params[1]

    results = []
    for draws in (fresh, fills, ignores_out):
        fs = functional.Functional(data=(x, y, x, y), draws=draws, apply=apply, epochs=3, batch_size=16,
                                   init=lambda g: [torch.randn(3, 4, generator=g), torch.randn(4, 2, generator=g)])
        recs = [Recorder(s, {}) for s in (0, 1)]
        functional.train_stack(fs, [0, 1], recs)
        results.append([r.rows for r in recs])
    assert results[0] == results[1] == results[2]
