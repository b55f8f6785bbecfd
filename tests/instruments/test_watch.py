"""watch: the cheap invariants of the learning chain on a live, hand-written loop. Correct loops get no FAIL;
each bug is reported at the first check step that sees it, in the user's parameter names and module paths."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import firstdiv
from firstdiv import InvalidArgument, Report, Status


def mlp(dropout: float = 0.0) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(dropout), nn.Linear(32, 1))


def data(n: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 8, generator=g)
    return x, x[:, :1] * 2 - x[:, 1:2]


def train(model, opt, w, steps=60, *, zero_grad=True, x=None, y=None, before=None):
    x, y = data() if x is None else (x, y)
    for step in range(steps):
        if before:
            before(step)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        if zero_grad:
            opt.zero_grad()
        w.step(loss)
    return w.report


def no_fail(report: Report) -> None:
    assert report.status is not Status.FAIL, str(report)
    assert report.details["checks"] > 0


@pytest.mark.parametrize("make_opt", [lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
                                      lambda p: torch.optim.Adam(p, lr=1e-3)], ids=["sgd", "adam"])
def test_a_correct_loop_passes_with_what_was_checked(make_opt):
    model = mlp()
    opt = make_opt(model.parameters())
    with firstdiv.watch(model, opt, every=10) as w:
        report = train(model, opt, w)
    assert report.status is Status.PASS, str(report)
    assert report.details["checks"] == 6 and report.details["steps"] == 60
    assert {f.check for f in report.findings} >= {"ownership", "grads", "updates", "loss"}
    assert Report.from_dict(report.to_dict()).to_dict() == report.to_dict()


def test_a_declared_frozen_backbone_passes_and_an_undeclared_one_warns():
    for frozen, expected in ((("0",), Status.PASS), (None, Status.WARN)):
        model = mlp()
        model[0].requires_grad_(False)
        opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        with firstdiv.watch(model, opt, every=5, frozen=frozen) as w:
            report = train(model, opt, w, steps=20)
        assert report.status is expected, str(report)


def test_gradient_accumulation_and_a_gradscaler_that_skips_steps_pass():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = data()
    with firstdiv.watch(model, opt, every=5) as w:
        for step in range(30):  # a step every 2 batches
            (((model(x) - y) ** 2).mean() / 2).backward()
            if step % 2 == 1:
                opt.step()
                opt.zero_grad()
            w.step()
    no_fail(w.report)
    assert w.report.details["checks"] >= 5
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu")
    with firstdiv.watch(model, opt, every=1) as w:
        for step in range(12):
            scaler.scale(((model(x) - y) ** 2).mean()).backward()
            if step in (0, 4):  # an overflow in the scaled gradients: GradScaler skips these steps
                model[0].weight.grad[0, 0] = float("inf")
            before = model[0].weight.detach().clone()
            scaler.step(opt)
            assert torch.equal(before, model[0].weight) == (step in (0, 4))
            scaler.update()
            opt.zero_grad()
            w.step()
    assert w.report.details["checks"] == 10  # one per step that ran
    no_fail(w.report)


def test_a_tiny_gpt2_fine_tuning_loop_gets_no_fail():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_embd=32, n_head=2, n_layer=2, vocab_size=64, n_positions=16)
    model = transformers.GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
    with firstdiv.watch(model, opt, every=3) as w:
        for _ in range(9):
            model.train()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            w.step(loss)
        model.eval()
        with w.evaluating(), torch.no_grad():
            model(input_ids=ids)
    no_fail(w.report)


def test_forgetting_zero_grad_is_found_at_the_backward_after_a_check_step():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    with firstdiv.watch(model, opt, every=5) as w:
        report = train(model, opt, w, steps=20, zero_grad=False)
    div = report.first_divergence
    assert (div.kind, div.where) == ("grad.not_zeroed", "step 1: 0.weight"), str(report)
    assert all(p._backward_hooks is None or not p._backward_hooks for p in model.parameters())
    for set_to_none in (True, False):  # zeroing either way, before the forward pass or after the step: no FAIL
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.02)
        with firstdiv.watch(model, opt, every=3) as w:
            train(model, opt, w, steps=10, zero_grad=False, before=lambda s, o=opt, n=set_to_none: o.zero_grad(set_to_none=n))
        no_fail(w.report)


def test_a_learning_rate_100x_too_high_is_an_update_ratio_at_the_first_step():
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-1 * 100)
    with firstdiv.watch(model, opt, every=10) as w:
        report = train(model, opt, w, steps=20)
    div = report.first_divergence
    assert report.status is Status.FAIL and div.kind == "update.too_large", str(report)
    assert div.where in ("step 0: 0.weight", "step 0: 3.weight") and div.observed > 1


def test_a_parameter_created_after_the_optimizer_is_unowned():
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.add_module("head", nn.Linear(1, 1))  # created after the optimizer: it never trains
    with firstdiv.watch(model, opt, every=10) as w:
        report = train(model, opt, w, steps=10, y=None, x=None)
    assert report.first_divergence.kind == "ownership.unowned"
    unowned = next(f for f in report.findings if f.check == "ownership.unowned")
    assert "had a gradient at step 0" in unowned.message and "was unchanged at step 1" in unowned.message
    assert report.first_divergence.where == "step 0: head.weight"


def test_an_unowned_parameter_the_loss_never_uses_is_a_warn():
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.register_parameter("unused_scale", nn.Parameter(torch.ones(3)))  # a parameter no forward reads
    with firstdiv.watch(model, opt, every=5) as w:
        report = train(model, opt, w, steps=6)
    no_fail(report)
    unowned = next(f for f in report.findings if f.check == "ownership.unowned")
    assert unowned.status is Status.WARN and "it had no gradient at step 0" in unowned.message


def test_requires_grad_false_by_mistake_fails_once_frozen_is_declared():
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with firstdiv.watch(model, opt, every=5, frozen=()) as w:
        report = train(model, opt, w, steps=30, before=lambda s: s == 12 and model[3].weight.requires_grad_(False))
    assert report.first_divergence.kind == "ownership.undeclared_frozen"
    assert report.first_divergence.where == "step 15: 3.weight"
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model[3].weight.requires_grad_(False)  # undeclared: a warning, and the parameter is seen not to move
    with firstdiv.watch(model, opt, every=2, stall_checks=3) as w:
        report = train(model, opt, w, steps=12)
    assert report.status is Status.WARN, str(report)
    assert {("ownership.undeclared_frozen", "3.weight"), ("param.stalled", "3.weight")} <= \
        {(f.check, f.where) for f in report.findings}


def test_a_declared_frozen_parameter_that_moves_fails():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with firstdiv.watch(model, opt, every=5, frozen=("0.*",)) as w:
        report = train(model, opt, w, steps=10)
    assert report.first_divergence.kind == "frozen.moved"
    assert report.first_divergence.where == "step 0: 0.weight"


def test_nan_from_log_of_zero_is_found_at_the_first_check_after_it():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = data()
    with firstdiv.watch(model, opt, every=5) as w:
        for step in range(30):
            inputs = x.clone()
            if step == 12:
                inputs[0, 0] = 0.0
            loss = ((model(torch.log(inputs.abs())) - y) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            w.step(loss)
    report = w.report
    assert report.first_divergence.where.startswith("step 15: ")
    assert report.first_divergence.kind in ("loss.nonfinite", "grad.nonfinite")
    assert ("grad.nonfinite", "0.weight", 15) in {(f.check, f.where, f.evidence.get("step")) for f in report.findings}


def test_evaluating_in_train_mode_names_the_dropout_layer_and_the_step():
    model = mlp(dropout=0.5)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, _ = data()
    with firstdiv.watch(model, opt, every=5) as w:
        train(model, opt, w, steps=10)
        model.eval()
        with w.evaluating(), torch.no_grad():  # correct: eval mode
            model(x)
        model.train()
        train(model, opt, w, steps=10)
        with w.evaluating(), torch.no_grad():  # forgot model.eval()
            model(x)
    div = w.report.first_divergence
    assert (div.kind, div.where) == ("mode.train_at_eval", "step 19: 2"), str(w.report)


def test_the_watch_leaves_no_trace_and_the_run_is_bit_identical():
    def run(watched):
        model = mlp(dropout=0.2)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        torch.manual_seed(5)
        w = firstdiv.watch(model, opt, every=3) if watched else None
        x, y = data()
        versions = []
        for _ in range(9):
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            grads = [p.grad for p in model.parameters()]
            versions = [p._version for p in model.parameters()]
            opt.step()
            assert [p.grad for p in model.parameters()] == grads  # the same .grad tensors
            opt.zero_grad()
            if w:
                w.step(loss)
        if w:
            w.close()
            w.close()  # idempotent
            assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks
            assert not model._forward_pre_hooks
        return [p.detach().clone() for p in model.parameters()], versions, torch.get_rng_state(), opt.state_dict()

    plain, watched = run(False), run(True)
    assert all(torch.equal(a, b) for a, b in zip(plain[0], watched[0], strict=True))
    assert plain[1] == watched[1] and torch.equal(plain[2], watched[2])
    assert str(plain[3]) == str(watched[3])


def test_loss_that_does_not_decrease_warns_and_no_step_is_skipped():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with firstdiv.watch(model, opt, every=2, loss_window=3) as w:
        assert w.report.status is Status.SKIPPED and "every=2" in w.report.reason
        report = train(model, opt, w, steps=12)
    assert report.status is Status.WARN
    assert "loss.not_decreasing" in {f.check for f in report.findings}


@pytest.mark.parametrize(("kwargs", "message"), [({"every": 0}, "every"), ({"ratio_bounds": (1e-1, 1e-3)}, "ratio_bounds"),
                                                 ({"frozen": ("nope.*",)}, "matches no parameter"),
                                                 ({"stall_checks": 1.5}, "stall_checks")])
def test_bad_arguments_name_the_problem(kwargs, message):
    model = mlp()
    with pytest.raises(InvalidArgument, match=message):
        firstdiv.watch(model, torch.optim.SGD(model.parameters(), lr=0.1), **kwargs)
    with pytest.raises(InvalidArgument, match="optimizer"):
        firstdiv.watch(model, None)
    w = firstdiv.watch(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(InvalidArgument, match="scalar loss"):
        w.step(torch.ones(3))
    w.close()


def test_sparse_gradients_a_foreign_tensor_and_observed_losses_are_handled():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(20, 8, sparse=True), nn.Flatten(), nn.Linear(8 * 4, 1))
    temperature = nn.Parameter(torch.ones(()))  # learnable, outside the model: fine
    opt = torch.optim.SGD([*model.parameters(), temperature], lr=0.01)
    ids, y = torch.randint(0, 20, (16, 4)), torch.randn(16, 1)
    with firstdiv.watch(model, opt, every=2) as w:
        for _ in range(6):
            loss = ((model(ids) * temperature - y) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            w.observe(loss=loss.item())
            w.step()
    report = w.report
    assert report.status is Status.WARN, str(report)
    assert [f.check for f in report.findings if f.status is Status.WARN] == ["ownership.foreign"]
    assert len(report.details["loss"]) == 3


def test_a_check_that_cannot_run_is_a_skipped_finding_and_training_goes_on(monkeypatch):
    from firstdiv.instruments.watch import _checks

    def broken(t):
        raise RuntimeError("no norm for this tensor")

    monkeypatch.setattr(_checks, "norm_of", broken)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with firstdiv.watch(model, opt, every=5) as w:
        report = train(model, opt, w, steps=10)
    skipped = [f for f in report.findings if f.status is Status.SKIPPED]
    assert skipped and "no norm for this tensor" in skipped[0].message
    assert report.status is Status.PASS


def _zoo_state(program):
    params = [p.detach().clone() for p in program.model.parameters()]
    grads = [None if p.grad is None else p.grad.clone() for p in program.model.parameters()]
    return params, grads, str(program.optimizer.state_dict()), torch.get_rng_state()


@pytest.mark.parametrize("reference", ["mlp", "cnn", "finetune", "transformer", "regression"])
def test_the_catalogs_correct_programs_get_no_fail_and_train_bit_for_bit_as_without(reference):
    from firstdiv import zoo

    bare, watched = zoo.build(reference, seed=0), zoo.build(reference, seed=0)
    torch.manual_seed(5)
    for _ in range(6):
        bare.train_step()
    torch.manual_seed(5)
    with firstdiv.watch(watched.model, watched.optimizer, every=2) as w:
        for _ in range(6):
            watched.train_step()
            w.step()
    a, b = _zoo_state(bare), _zoo_state(watched)
    assert all(torch.equal(x, y) for x, y in zip(a[0], b[0], strict=True))
    assert all((x is None and y is None) or torch.equal(x, y) for x, y in zip(a[1], b[1], strict=True))
    assert a[2] == b[2] and torch.equal(a[3], b[3])
    no_fail(w.report)


def test_zero_grad_between_backward_and_step_is_a_step_without_gradients_but_lbfgs_is_not():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = data()
    with firstdiv.watch(model, opt, every=5) as w:
        for _ in range(6):
            ((model(x) - y) ** 2).mean().backward()
            opt.zero_grad()
            opt.step()
            w.step()
    assert (w.report.first_divergence.kind, w.report.first_divergence.where) == ("grad.none_at_step", "step 0: optimizer")
    model = mlp()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=2)

    def closure():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        return loss

    with firstdiv.watch(model, opt, every=2) as w:
        for _ in range(4):
            w.step(opt.step(closure))
    no_fail(w.report)


def test_two_optimizers_are_watched_together_and_one_alone_leaves_the_other_half_unowned():
    torch.manual_seed(0)
    model = nn.ModuleDict({"gen": nn.Linear(4, 8), "disc": nn.Linear(8, 1)})
    opt_g = torch.optim.Adam(model["gen"].parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(model["disc"].parameters(), lr=1e-3)
    z = torch.randn(16, 4)

    def step(w):
        opt_d.zero_grad()  # the generator's backward below leaves stale gradients on disc: zeroed here, in time
        d_loss = model["disc"](model["gen"](z).detach()).mean()
        d_loss.backward()
        opt_d.step()
        g_loss = -model["disc"](model["gen"](z)).mean()
        g_loss.backward()
        opt_g.step()
        opt_g.zero_grad()
        w.step(g_loss)

    with firstdiv.watch(model, [opt_g, opt_d], every=2) as w:
        for _ in range(6):
            step(w)
    no_fail(w.report)
    # watching opt_g alone leaves disc unowned by the watched optimizers, but opt_d trains it: a WARN naming both
    # readings, first while the next step is not reached, then once disc is seen to change
    with firstdiv.watch(model, opt_g, every=2) as w:
        step(w)
        unowned = next(f for f in w.report.findings if f.check == "ownership.unowned" and f.where == "disc.weight")
        assert unowned.status is Status.WARN and "shows at the next step, not reached yet" in unowned.message
        step(w)
    no_fail(w.report)
    unowned = next(f for f in w.report.findings if f.check == "ownership.unowned" and f.where == "disc.weight")
    assert unowned.status is Status.WARN and "an unwatched optimizer or a hand-written update trains it" in unowned.message


def test_an_unowned_parameter_the_loop_updates_by_hand_is_a_warn():
    model = mlp()
    opt = torch.optim.SGD(model[0].parameters(), lr=0.05)  # the last layer is updated by hand below
    x, y = data()
    with firstdiv.watch(model, opt, every=5) as w:
        for _ in range(6):
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            with torch.no_grad():
                for p in model[3].parameters():
                    p.add_(p.grad, alpha=-0.05)
                    p.grad = None
            opt.zero_grad()
            w.step(loss)
    no_fail(w.report)
    unowned = next(f for f in w.report.findings if f.check == "ownership.unowned")
    assert unowned.status is Status.WARN and "a hand-written update trains it" in unowned.message


def test_a_large_first_step_on_a_weight_initialised_small_is_a_warn_when_the_loss_falls():
    model = mlp()
    with torch.no_grad():
        model[3].weight.mul_(1e-4)  # a small init: Adam's first step (about lr per element) dwarfs it
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with firstdiv.watch(model, opt, every=10) as w:
        report = train(model, opt, w, steps=12)
    no_fail(report)
    large = next(f for f in report.findings if f.check == "update.too_large")
    assert large.status is Status.WARN and "but the loss did not rise at the next step" in large.message
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-1 * 100)
    x, y = data()
    with firstdiv.watch(model, opt, every=10) as w:  # no loss passed: the update's harm cannot be confirmed
        for _ in range(3):
            ((model(x) - y) ** 2).mean().backward()
            opt.step()
            opt.zero_grad()
            w.step()
    large = next(f for f in w.report.findings if f.check == "update.too_large")
    assert large.status is Status.WARN and "no loss was passed" in large.message
