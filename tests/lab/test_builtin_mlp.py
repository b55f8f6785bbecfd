"""builtin:mlp: the data is fixed by data_seed, the run seed drives only init, order and dropout."""

import pytest
import torch

from firstdiv.errors import InvalidArgument
from firstdiv.lab import builtin_mlp as mlp
from firstdiv.lab.builtin_checks import footprint
from firstdiv.lab.record import Recorder
from firstdiv.lab.workload import resolve

FAST = {"epochs": 2, "n_train": 600, "n_val": 200}


def fit(seed, **over):
    cfg = resolve("builtin:mlp").config(dict(FAST, **over))
    rec = Recorder(seed, cfg)
    params, data = mlp.fit(seed, cfg, rec)
    return rec, params, data


def test_data_depends_on_data_seed_only():
    cfg = resolve("builtin:mlp").config(FAST)
    a, b = mlp.make_data(cfg), mlp.make_data(dict(cfg))
    assert a.identity() == b.identity()
    assert mlp.make_data(dict(cfg, data_seed=1)).identity() != a.identity()
    rec0, _, d0 = fit(0)
    rec1, _, d1 = fit(1)
    assert d0.identity() == d1.identity() == rec0.data_id == rec1.data_id


def test_label_noise_rate_and_val_noise_nesting():
    cfg = resolve("builtin:mlp").config({"n_train": 20000, "n_val": 20000, "noise": 0.3})
    clean = mlp.make_data(dict(cfg, noise=0.0, val_noise=0.0))
    noisy = mlp.make_data(cfg)
    changed = (clean.y_train != noisy.y_train).float().mean().item()
    assert changed == pytest.approx(0.3 * 3 / 4, abs=0.015)  # a randomised label keeps its class 1 time in 4
    lower = mlp.make_data(dict(cfg, val_noise=0.29))
    assert torch.equal(lower.y_train, noisy.y_train) and torch.equal(lower.x_val, noisy.x_val)
    moved = lower.y_val != noisy.y_val
    assert 0 < moved.sum().item() < 0.02 * cfg["n_val"]
    assert torch.all(lower.y_val[moved] == clean.y_val[moved])  # the examples that moved went back to clean


def test_same_seed_is_bit_identical_and_other_seed_is_not():
    rec_a, pa, _ = fit(3)
    rec_b, pb, _ = fit(3)
    rec_c, _, _ = fit(4)
    assert rec_a.rows == rec_b.rows and all(torch.equal(x, y) for x, y in zip(pa, pb))
    assert rec_a.rows != rec_c.rows


def test_run_does_not_depend_on_global_rng():
    torch.manual_seed(123)
    rec_a, _, _ = fit(5)
    torch.manual_seed(999)
    torch.rand(1000)
    rec_b, _, _ = fit(5)
    assert rec_a.rows == rec_b.rows


def test_streams_are_separate():
    g = mlp.generators(0)
    draws = {k: torch.rand(4, generator=v).tolist() for k, v in g.items()}
    assert len({tuple(v) for v in draws.values()}) == 4
    cfg = resolve("builtin:mlp").config(FAST)
    init_a = mlp.init_params(cfg, mlp.generators(0)["init"])
    init_b = mlp.init_params(dict(cfg, dropout=0.0), mlp.generators(0)["init"])
    assert all(torch.equal(a, b) for a, b in zip(init_a, init_b))  # dropout does not perturb init


def test_records_curves_grad_norms_throughput_and_contract():
    rec, _, _ = fit(0)
    assert [r["epoch"] for r in rec.rows] == [0, 1]
    assert {"train_loss", "val_loss", "val_acc"} <= set(rec.rows[0])
    assert len(rec.grad_norm_values) == 2 * 5  # 600 / 128 -> 5 steps per epoch
    assert rec.examples_seen == 1200 and rec.train_seconds > 0
    assert rec.contract["model_mode"] == "eval" and rec.contract["eval_count"] == 200


@pytest.mark.parametrize("change,field", [
    ({"eval_mode": "train"}, "model_mode"), ({"eval_subset": 100}, "eval_indices"),
    ({"eval_input_scale": 1.15}, "preprocessing"), ({"eval_reduction": "sum"}, "aggregation"),
])
def test_eval_knobs_change_the_contract_field_they_own(change, field):
    cfg = resolve("builtin:mlp").config(FAST)
    base, other = mlp.eval_contract(cfg), mlp.eval_contract(dict(cfg, **change))
    assert base[field] != other[field]
    assert [k for k in base if base[k] != other[k]] in ([field], [field, "eval_count"], ["eval_count", field])


def test_label_shift_pairs_inputs_with_later_labels():
    rec_shift, _, _ = fit(0, label_shift=1, epochs=4)
    rec_base, _, _ = fit(0, epochs=4)
    assert rec_shift.rows[-1]["val_loss"] > rec_base.rows[-1]["val_loss"] + 0.1


@pytest.mark.parametrize("sets", [["noise=1.0"], ["eval_subset=5000"], ["optimizer=lion"], ["threads=0"],
                                  ["eval_mode=test"], ["val_noise=abc"], ["epochs=0"]])
def test_bad_knob_values_are_rejected_with_the_key(sets):
    with pytest.raises(InvalidArgument, match=sets[0].split("=")[0]):
        resolve("builtin:mlp").config(sets=sets)


def test_a_batch_larger_than_the_data_is_one_full_batch_and_is_not_refused_for_memory(cli, tmp_path):
    """batch_size above n_train trains one full batch per epoch: it needs the memory of batch_size=n_train."""
    cfg = resolve("builtin:mlp").config(dict(FAST, batch_size=100_000_000))
    assert footprint(cfg) == footprint(dict(cfg, batch_size=FAST["n_train"]))
    rec, _, _ = fit(0, batch_size=100_000_000)
    full, _, _ = fit(0, batch_size=FAST["n_train"])
    assert len(rec.grad_norm_values) == FAST["epochs"] and rec.rows == full.rows  # one step an epoch, the same run
    proc = cli("sweep", "builtin:mlp", "--seeds", "0", "--set", "batch_size=100000000", "--set", "epochs=1",
               "--store", tmp_path / "runs.db", cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)


def test_sizes_too_large_after_the_batch_is_clamped_are_still_refused_in_one_line():
    with pytest.raises(InvalidArgument, match="GiB") as info:
        resolve("builtin:mlp").config(sets=["batch_size=100000000", "hidden=10000000"])
    assert "\n" not in str(info.value) and "hidden=10000000" in str(info.value)


def _plain_loss(params, x, y, keep, scale):
    """The MLP written with nn.functional and autograd: the reference for the hand-written backward."""
    w1, b1, w2, b2, w3, b3 = params
    h = w1.shape[0]
    a1 = torch.nn.functional.linear(x, w1, b1).relu() * keep[:, :h] * scale
    a2 = torch.nn.functional.linear(a1, w2, b2).relu() * keep[:, h:] * scale
    return torch.nn.functional.cross_entropy(torch.nn.functional.linear(a2, w3, b3), y)


@pytest.mark.parametrize("p", [0.0, 0.3, 0.6])
def test_stacked_mlp_forward_and_gradients_match_the_plain_layers(p):
    cfg = resolve("builtin:mlp").config({"hidden": 9, "classes": 3, "in_dim": 5})
    gen = torch.Generator().manual_seed(4)
    params = [t.double().requires_grad_() for t in mlp.init_params(cfg, gen)]
    x, y = torch.randn(17, 5, generator=gen, dtype=torch.float64), torch.randint(0, 3, (17,), generator=gen)
    keep = mlp._keep(mlp._draw(gen, 17, hidden=9), hidden=9, p=p).double() if p else torch.ones(17, 18, dtype=torch.float64)
    scale = 1.0 / (1.0 - p)
    expected = torch.autograd.grad(_plain_loss(params, x, y, keep, scale), params)
    logits = mlp.stacked_forward([t.unsqueeze(0) for t in params], x.unsqueeze(0), keep.unsqueeze(0), scale=scale)
    assert logits.shape == (1, 17, 3)
    loss = torch.nn.functional.cross_entropy(logits[0], y)
    assert float(loss.detach()) == pytest.approx(float(_plain_loss(params, x, y, keep, scale).detach()), rel=1e-12)
    for got, want in zip(torch.autograd.grad(loss, params), expected):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_dropout_decisions_drop_p_of_units_independently_of_how_the_bits_are_drawn():
    from scipy import stats

    gen = torch.Generator().manual_seed(0)
    bits = mlp._draw(gen, 4000, hidden=32)
    assert bits.shape == (4000, 16) and bits.dtype == torch.int64
    keep = mlp._keep(bits, hidden=32, p=0.3)
    assert keep.shape == (4000, 64) and set(keep.unique().tolist()) == {0.0, 1.0}
    dropped = int((keep == 0).sum())
    # p rounded up to a multiple of 2**-16: 19661 / 65536
    assert stats.binomtest(dropped, keep.numel(), 19661 / 65536).pvalue > 1e-4
    # each unit's rate, not only the total (a bad view of the 64-bit draws would skew some columns)
    per_unit = (keep == 0).double().mean(0)
    assert float(per_unit.min()) > 0.27 and float(per_unit.max()) < 0.33
    # an odd hidden size uses the first 2 * hidden of the 16-bit fields
    assert mlp._keep(mlp._draw(gen, 10, hidden=5), hidden=5, p=0.5).shape == (10, 10)
    # filling a buffer row in place draws the very same bits as a fresh tensor (the stack's fast path)
    row = torch.empty(4000, 16, dtype=torch.int64)
    mlp._draw(torch.Generator().manual_seed(0), 4000, hidden=32, out=row)
    assert torch.equal(row, bits)
    assert mlp._keep(bits, hidden=32, p=0.0).all()  # p = 0 drops nothing


def test_dropout_zero_trains_without_draws_and_eval_in_train_mode_draws_masks():
    no_drop, _, _ = fit(0, dropout=0.0)
    again, _, _ = fit(0, dropout=0.0)
    dropped, _, _ = fit(0)
    assert no_drop.rows == again.rows and no_drop.rows != dropped.rows
    train_mode, _, _ = fit(0, eval_mode="train")
    assert [r["train_loss"] for r in train_mode.rows] == [r["train_loss"] for r in dropped.rows]  # same training
    assert [r["val_loss"] for r in train_mode.rows] != [r["val_loss"] for r in dropped.rows]  # masks at evaluation
