"""step_probe on programs in the shapes real training code takes: manual SGD loops (word LM with clipping,
regression), recipe optimizers with state, gradient accumulation, LBFGS closures, sparse inputs and gradients,
HF-style dict batches, bf16 autocast, GANs; and the bugs they hide (missing zero_grad, ascent, divergence)."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import InvalidArgument, Report, Status, step_probe
from firstdiv.instruments._core.state import Snapshot

torch.set_num_threads(1)


def probe(model, batch, loss_fn, opt=None, *, extra=(), **kw):
    """Call step_probe and prove it left no trace (parameters, .grad identities and values, optimizer state)."""
    objs = (model, opt, *extra) if opt is not None else (model, *extra)
    before = Snapshot.take(*objs)
    grads = {n: p.grad for n, p in model.named_parameters()}
    report = step_probe(model, batch, loss_fn, opt, **kw)
    assert before.diff(Snapshot.take(*objs)) == []
    assert all(p.grad is grads[n] for n, p in model.named_parameters())
    assert str(report) and Report.from_dict(json.loads(report.to_json())).to_dict() == report.to_dict()
    return report


def fails(report):
    return [(f.where, f.check) for f in report.findings if f.status is Status.FAIL]


def finding(report, kind):
    return next(f for f in report.findings if f.check == kind)


# --- programs ----------------------------------------------------------------------------------------------------


class WordLM(nn.Module):
    """Embedding -> LSTM -> Linear over the vocabulary, sequence-first like the classic word-LM example."""

    def __init__(self, vocab=40, dim=16):
        super().__init__()
        self.encoder, self.rnn, self.decoder = nn.Embedding(vocab, dim), nn.LSTM(dim, dim), nn.Linear(dim, vocab)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, x):
        return self.decoder(self.rnn(self.encoder(x))[0])


def word_lm(seed, lr=20.0, clip=0.25, fault=None):
    torch.manual_seed(seed)
    model, vocab = WordLM(), 40
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, vocab, (11, 4), generator=g)
    x, y = data[:-1], data[1:].reshape(-1)

    def loss_fn(out, targets):
        return F.cross_entropy(out.view(-1, vocab), targets)

    def train_step():
        if fault != "no_zero_grad":
            model.zero_grad()
        loss = loss_fn(model(x), y)
        (-loss if fault == "neg_loss" else loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=lr if fault == "plus_lr" else -lr)
        return loss
    return model, (x, y), loss_fn, train_step


def regression(seed, lr=0.05, scale=1.0, fault=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 1))
    g = torch.Generator().manual_seed(seed)
    x = scale * torch.randn(32, 5, generator=g)
    y = x[:, :1] * 0.5 + 0.1 * torch.randn(32, 1, generator=g)

    def train_step():
        loss = F.mse_loss(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
                if fault != "no_zero_grad":
                    p.grad.zero_()
        return loss
    return model, (x, y), F.mse_loss, train_step


class MLP(nn.Module):
    def __init__(self, width=32, dropout=0.1):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(10, width), nn.ReLU(), nn.Dropout(dropout), nn.Linear(width, width), nn.ReLU())
        self.head = nn.Linear(width, 4)

    def forward(self, x):
        return self.head(self.body(x))


def classifier(seed, opt_name, scale=1.0, warm=3, fault=None, micro=1):
    torch.manual_seed(seed)
    model = MLP()
    g = torch.Generator().manual_seed(seed)
    x = scale * torch.randn(64, 10, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    opt = {"sgd_momentum": lambda: torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4),
           "adam": lambda: torch.optim.Adam(model.parameters(), lr=1e-3),
           "adamw": lambda: torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01),
           "sgd_500": lambda: torch.optim.SGD(model.parameters(), lr=500.0)}[opt_name]()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

    def train_step():
        opt.zero_grad()
        total = 0.0
        for xb, yb in zip(x.chunk(micro), y.chunk(micro)):
            loss = F.cross_entropy(model(xb), yb) / micro
            (-loss if fault == "neg_loss" else loss).backward()
            total += float(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        sched.step()
        return torch.tensor(total)
    for _ in range(warm):  # optimizer state (momentum, Adam moments) and a scheduler from earlier steps
        train_step()
    return model, (x, y), F.cross_entropy, opt, train_step, sched


# --- 1. manual updates -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_word_lm_manual_sgd_with_clipping_passes_and_reports_the_implied_lr(seed):
    model, batch, loss_fn, ts = word_lm(seed)
    r = probe(model, batch, loss_fn, None, train_step=ts)
    assert r.status is Status.PASS and not fails(r), str(r)
    assert "optimizer.step() called 0 times" not in str(r) and "restored" in r.side_effects
    d = finding(r, "step.descent")
    assert d.evidence["cosine_update_vs_minus_grad"] > 0.99
    assert d.evidence["implied_lr"] == pytest.approx(20.0, rel=1e-4) and d.evidence["implied_lr_spread"] < 1e-3
    # a clip that bites scales every gradient by the same factor: one implied lr for all parameters, below 20
    model, batch, loss_fn, ts = word_lm(seed, clip=0.01)
    d = finding(probe(model, batch, loss_fn, None, train_step=ts), "step.descent")
    assert 0 < d.evidence["implied_lr"] < 19.0 and d.evidence["implied_lr_spread"] < 1e-3


@pytest.mark.parametrize("seed", [0, 1])
def test_regression_manual_no_grad_update_passes(seed):
    model, batch, loss_fn, ts = regression(seed)
    ts()  # .grad tensors exist (zeroed by the loop): the probe gives them back by identity and value
    r = probe(model, batch, loss_fn, train_step=ts)
    assert r.status is Status.PASS and not fails(r), str(r)
    assert finding(r, "step.descent").evidence["implied_lr"] == pytest.approx(0.05, rel=1e-4)
    assert finding(r, "step.grad_accumulation").status is Status.PASS


def test_manual_loop_without_zero_grad_accumulates():
    model, batch, loss_fn, ts = word_lm(0, fault="no_zero_grad")
    r = probe(model, batch, loss_fn, train_step=ts)
    d = r.first_divergence
    assert (d.where, d.kind) == ("encoder.weight", "step.grad_accumulation"), str(r)
    assert "gradients accumulate across steps: model.zero_grad() missing" in d.hint
    f = finding(r, "step.grad_accumulation")
    assert f.message.startswith("gradients accumulate across steps: model.zero_grad() missing")
    # clip_grad_norm_(0.25) does not bite on this batch: .grad after call 2 is exactly grad1 + grad2, on all 7 tensors
    assert f.evidence["grad_after_call2_vs_g1_plus_g2_relative_error"] < 1e-5 and f.evidence["carried"] == 7
    model, batch, loss_fn, ts = regression(0, fault="no_zero_grad")
    assert probe(model, batch, loss_fn, train_step=ts).first_divergence.kind == "step.grad_accumulation"


def test_manual_loop_that_skips_a_parameter_is_not_updated():
    model, batch, loss_fn, _ = regression(0)
    x, y = batch

    def ts():  # updates the output layer only: the hidden layer gets gradients and never moves
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        with torch.no_grad():
            for p in model[2].parameters():
                p -= 0.05 * p.grad
    r = probe(model, batch, loss_fn, train_step=ts)
    assert (r.first_divergence.where, r.first_divergence.kind) == ("0.weight", "step.not_updated"), str(r)


def test_optimizer_none_without_train_step_is_invalid_argument():
    model, batch, loss_fn, _ = regression(0)
    with pytest.raises(InvalidArgument, match="train_step"):
        step_probe(model, batch, loss_fn, None)


def test_manual_path_restores_parameters_and_grads_when_train_step_raises():
    model, batch, loss_fn, ts = word_lm(0)
    ts()  # stale .grad the probe must give back by identity and value
    calls = []

    def flaky():
        calls.append(1)
        ts()
        if len(calls) == 2:
            raise RuntimeError("boom")
    r = probe(model, batch, loss_fn, train_step=flaky)
    assert finding(r, "step.train_step_raised").status is Status.SKIPPED and "boom" in r.findings[-1].message


# --- 2. a train_step that does not descend ---------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["neg_loss", "plus_lr"])
def test_word_lm_step_up_the_gradient_is_ascent(fault):
    model, batch, loss_fn, ts = word_lm(0, fault=fault)
    r = probe(model, batch, loss_fn, train_step=ts)
    d = r.first_divergence
    assert d is not None and d.kind == "step.train_step_ascends", str(r)
    f = finding(r, "step.train_step_ascends")
    assert d.where == "encoder.weight" and "the loss is maximized" in f.message
    assert f.evidence["losses"][-1] > f.evidence["losses"][0] and f.evidence["cosine_update_vs_minus_grad"] < -0.3


@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adam"])
def test_negated_loss_with_stateful_optimizers_is_ascent(opt_name):
    model, batch, loss_fn, opt, ts, sched = classifier(0, opt_name, fault="neg_loss", warm=0)
    r = probe(model, batch, loss_fn, opt, train_step=ts, extra=(sched,))
    assert r.first_divergence is not None and r.first_divergence.kind == "step.train_step_ascends", str(r)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("opt_name", ["sgd_momentum", "adam", "adamw"])
def test_recipe_optimizers_with_state_clipping_decay_dropout_and_scheduler_pass(opt_name, seed):
    model, batch, loss_fn, opt, ts, sched = classifier(seed, opt_name)
    r = probe(model, batch, loss_fn, opt, train_step=ts, extra=(sched,))
    assert not fails(r), str(r)
    assert finding(r, "step.descent").status is Status.PASS


@pytest.mark.parametrize("seed", [0, 1])
def test_gradient_accumulation_over_four_micro_batches_passes(seed):
    model, batch, loss_fn, opt, ts, sched = classifier(seed, "adam", micro=4)
    r = probe(model, batch, loss_fn, opt, train_step=ts, extra=(sched,))
    assert not fails(r), str(r)
    assert r.details["train_step"]["optimizer_steps"] == [1, 1]


@pytest.mark.parametrize("seed", [0, 1])
def test_lbfgs_closure_passes(seed):
    model, batch, loss_fn, _ = regression(seed)
    opt = torch.optim.LBFGS(model.parameters(), lr=1, max_iter=5, history_size=5)
    x, y = batch

    def ts():
        def closure():
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            return loss
        return opt.step(closure)
    r = probe(model, batch, loss_fn, opt, train_step=ts)
    assert not fails(r), str(r)


# --- 3. a step size that diverges ------------------------------------------------------------------------------


def test_sgd_lr_500_on_inputs_of_scale_10_diverges_at_its_param_group():
    model, batch, loss_fn, opt, ts, sched = classifier(0, "sgd_500", scale=10.0, warm=0)
    r = probe(model, batch, loss_fn, opt, extra=(sched,))
    d = r.first_divergence
    assert d is not None and (d.where, d.kind) == ("param_group 0 (lr=500)", "step.diverges"), str(r)
    f = finding(r, "step.diverges")
    assert f.evidence["relative_update"] > 1 and f.evidence["largest_parameter"] in dict(model.named_parameters())
    r = probe(model, batch, loss_fn, opt, train_step=ts, extra=(sched,))
    assert r.first_divergence.kind == "step.diverges", str(r)


def test_manual_regression_with_a_huge_lr_diverges():
    model, batch, loss_fn, ts = regression(0, lr=50.0, scale=10.0)
    r = probe(model, batch, loss_fn, train_step=ts)
    d = r.first_divergence
    assert d is not None and d.kind == "step.diverges" and d.where.startswith("train_step update (implied lr="), str(r)


# --- 4. real inputs: no crash, no FAIL on correct programs -------------------------------------------------------


class GCN(nn.Module):
    """Two graph convolutions on ((features, sparse normalised adjacency), labels), like the classic GCN example."""

    def __init__(self):
        super().__init__()
        self.w1, self.w2 = nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, inputs):
        x, adj = inputs
        return self.w2(torch.sparse.mm(adj, F.relu(self.w1(torch.sparse.mm(adj, x)))))


@pytest.mark.parametrize("seed", [0, 1])
def test_gcn_with_a_sparse_adjacency_passes(seed):
    torch.manual_seed(seed)
    n = 12
    edges = torch.randint(0, n, (2, 30))
    adj = torch.sparse_coo_tensor(torch.cat([edges, torch.arange(n).repeat(2, 1)], 1), torch.ones(30 + n), (n, n)).coalesce()
    adj = torch.sparse_coo_tensor(adj.indices(), adj.values() / torch.sparse.sum(adj, 1).to_dense()[adj.indices()[0]],
                                  (n, n)).coalesce()
    model, x, y = GCN(), torch.randn(n, 6), torch.randint(0, 3, (n,))
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    def ts():
        model.train()
        opt.zero_grad()
        loss = F.cross_entropy(model((x, adj)), y)
        loss.backward()
        opt.step()
        return loss
    r = probe(model, ((x, adj), y), F.cross_entropy, opt, train_step=ts)
    assert not fails(r) and r.status is not Status.SKIPPED, str(r)


def test_embedding_bag_with_sparse_gradients_and_sparse_adam_passes():
    torch.manual_seed(0)
    bag, fc = nn.EmbeddingBag(50, 8, mode="mean", sparse=True), nn.Linear(8, 2)
    model = nn.ModuleDict({"bag": bag, "fc": fc})
    model.forward = None  # a ModuleDict has no forward: the program calls its parts

    class Text(nn.Module):
        def __init__(self):
            super().__init__()
            self.bag, self.fc = bag, fc

        def forward(self, inputs):
            text, offsets = inputs
            return self.fc(self.bag(text, offsets))
    model = Text()
    text, offsets, y = torch.randint(0, 50, (40,)), torch.arange(0, 40, 5), torch.randint(0, 2, (8,))
    sparse_opt, dense_opt = torch.optim.SparseAdam(list(bag.parameters()), lr=0.01), torch.optim.SGD(fc.parameters(), lr=0.1)

    def ts():
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss = F.cross_entropy(model((text, offsets)), y)
        loss.backward()
        sparse_opt.step()
        dense_opt.step()
        return loss
    r = probe(model, ((text, offsets), y), F.cross_entropy, sparse_opt, train_step=ts, extra=(dense_opt,))
    assert not fails(r) and r.status is not Status.SKIPPED, str(r)
    assert finding(r, "step.descent").status is Status.PASS


def test_bf16_autocast_inside_train_step_passes():
    model, batch, loss_fn, opt, _, sched = classifier(0, "adamw", warm=0)
    x, y = batch

    def ts():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    r = probe(model, batch, loss_fn, opt, train_step=ts, extra=(sched,))
    assert not fails(r), str(r)


def test_gan_train_step_stepping_two_optimizers_passes():
    torch.manual_seed(0)
    disc = nn.Sequential(nn.Linear(4, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    gen = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 4))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real, z = torch.randn(16, 4) + 2.0, torch.randn(16, 3)
    bce = nn.functional.binary_cross_entropy_with_logits
    with torch.no_grad():
        fake = gen(z)
    batch = (torch.cat([real, fake]), torch.cat([torch.ones(16, 1), torch.zeros(16, 1)]))

    def ts():
        opt_d.zero_grad()
        fake = gen(z)
        loss_d = bce(disc(real), torch.ones(16, 1)) + bce(disc(fake.detach()), torch.zeros(16, 1))
        loss_d.backward()
        opt_d.step()
        opt_g.zero_grad()
        loss_g = bce(disc(fake), torch.ones(16, 1))  # its backward reaches D's parameters too; only G steps
        loss_g.backward()
        opt_g.step()
        return loss_d
    r = probe(disc, batch, bce, opt_d, train_step=ts, extra=(gen, opt_g))
    assert not fails(r), str(r)
    # the generator's side: its loss goes through D, whose parameters it must leave as they were
    r = probe(gen, (z, torch.ones(16, 1)), lambda out, t: bce(disc(out), t), opt_g, train_step=ts, extra=(disc, opt_d))
    assert not fails(r), str(r)


def test_hf_model_with_a_dict_batch_and_model_output_loss_passes():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16, num_labels=3)
    model = transformers.BertForSequenceClassification(config)
    batch = {"input_ids": torch.randint(0, 60, (4, 8)), "attention_mask": torch.ones(4, 8, dtype=torch.long),
             "labels": torch.randint(0, 3, (4,))}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def ts():
        model.train()
        opt.zero_grad()
        out = model(**batch)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return out.loss
    r = probe(model, batch, lambda out, labels: out.loss, opt, train_step=ts)
    assert not fails(r) and r.status is not Status.SKIPPED, str(r)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_momentum_on_a_stream_of_batches_is_not_ascent(seed):
    # train_step draws the next batch from an iterator: momentum carries earlier batches' directions
    model, batch, loss_fn, opt, _, sched = classifier(seed, "sgd_momentum", warm=0)
    g = torch.Generator().manual_seed(100 + seed)
    stream = iter([(torch.randn(16, 10, generator=g), torch.randint(0, 4, (16,), generator=g)) for _ in range(40)])

    def ts():
        xb, yb = next(stream)
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        return loss
    for _ in range(20):
        ts()
    r = probe(model, batch, loss_fn, opt, train_step=ts, extra=(sched,))
    assert not fails(r), str(r)


def test_linear_warmup_starting_at_lr_0_is_not_a_missing_update():
    # HF-style get_linear_schedule_with_warmup: the first optimizer.step runs at lr 0
    model, batch, loss_fn, opt, _, _ = classifier(0, "adamw", warm=0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, step / 10))
    x, y = batch

    def ts():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        return loss
    r = probe(model, batch, loss_fn, opt, train_step=ts, extra=(sched,))
    assert not fails(r), str(r)
    assert any(f.message.startswith("note: ") and "lr is 0" in f.message for f in r.findings)
    assert r.details["notes"]


def test_uncopyable_model_with_a_manual_train_step_is_still_judged_from_its_steps():
    import threading

    model, batch, loss_fn, ts = word_lm(0, fault="plus_lr")
    model.lock = threading.Lock()  # deepcopy fails: the controlled step cannot run, the user's steps still can
    r = probe(model, batch, loss_fn, train_step=ts)
    assert finding(r, "step.controlled_step").status is Status.SKIPPED and "could not deep-copy" in str(r)
    assert r.first_divergence is not None and r.first_divergence.kind == "step.train_step_ascends", str(r)
    model, batch, loss_fn, ts = word_lm(0)
    model.lock = threading.Lock()
    r = probe(model, batch, loss_fn, train_step=ts)
    assert r.status is Status.PASS and finding(r, "step.descent").status is Status.PASS, str(r)


def test_divergence_names_the_param_group_whose_lr_is_too_large():
    model, batch, loss_fn, _, _, _ = classifier(0, "adam", scale=10.0, warm=0)
    opt = torch.optim.SGD([{"params": model.body.parameters()}, {"params": model.head.parameters(), "lr": 300.0}], lr=0.01)
    r = probe(model, batch, loss_fn, opt)
    d = r.first_divergence
    assert d is not None and (d.where, d.kind) == ("param_group 1 (lr=300)", "step.diverges"), str(r)
    assert finding(r, "step.diverges").evidence["largest_parameter"].startswith("head.")


@pytest.mark.parametrize("seed", [1, 5])
def test_momentum_state_pointing_against_this_batch_is_not_ascent(seed):
    # measured: after 150 steps at lr 0.5 on noisy batches, momentum's update has cosine -0.4 to -0.8 with the
    # current gradient and the probe batch's loss rises for two steps; the gradient itself still points down
    model, batch, loss_fn, opt, _, sched = classifier(seed, "sgd_momentum", warm=0)
    for group in opt.param_groups:
        group["lr"] = 0.5
    g = torch.Generator().manual_seed(100 + seed)
    stream = iter([(torch.randn(8, 10, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(160)])

    def ts():
        xb, yb = next(stream)
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        return loss
    for _ in range(150):
        ts()
    r = probe(model, batch, loss_fn, opt, train_step=ts, extra=(sched,))
    assert not fails(r), str(r)


def test_a_train_step_on_other_batches_says_ascent_was_not_verifiable():
    # (-loss).backward() on a stream of other batches: at init their gradients barely agree with the probe batch's
    # (measured cosine -0.05 to -0.26), too weak to call ascent safely; the report says so in a note, not silence
    model, batch, loss_fn, opt, _, sched = classifier(0, "adam", warm=0)
    g = torch.Generator().manual_seed(100)

    def draw():
        x = torch.randn(32, 10, generator=g)
        return x, (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    stream = iter([draw() for _ in range(4)])

    def ts():
        xb, yb = next(stream)
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        (-loss).backward()
        opt.step()
        return loss
    r = probe(model, batch, loss_fn, opt, train_step=ts, extra=(sched,))
    assert r.status is Status.PASS, str(r)
    assert any("agrees weakly" in n and "(-loss).backward()" in n for n in r.details["notes"])
    assert finding(r, "step.gradient_agreement").message.startswith("note: ")


def test_maximize_true_optimizer_is_a_note_not_ascent():
    model, batch, _, _, _, _ = classifier(0, "adam", warm=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, maximize=True)
    x, y = batch

    def log_likelihood(out, targets):  # the objective is maximized on purpose
        return -F.cross_entropy(out, targets)

    def ts():
        opt.zero_grad()
        score = log_likelihood(model(x), y)
        score.backward()
        opt.step()
        return score
    r = probe(model, batch, log_likelihood, opt, train_step=ts)
    assert not fails(r), str(r)
    assert any("maximize=True" in n for n in r.details["notes"])


def test_each_call_stays_well_under_a_second_on_tiny_models():
    import time

    model, batch, loss_fn, ts = word_lm(0)
    c_model, c_batch, c_loss_fn, c_opt, c_ts, _ = classifier(0, "adam")
    step_probe(model, batch, loss_fn, train_step=ts)  # warm-up (imports, allocator)
    t = time.perf_counter()
    step_probe(model, batch, loss_fn, train_step=ts)
    step_probe(c_model, c_batch, c_loss_fn, c_opt, train_step=c_ts)
    assert (time.perf_counter() - t) / 2 < 1.0


def test_grad_scaler_skipping_steps_on_overflow_is_a_note():
    # fp16 training's first steps: the scaled gradients overflow, GradScaler skips optimizer.step and halves its
    # scale. Reproduced on CPU with a scale near float32's limit: both calls skip, which is not "0 optimizer steps".
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127)
    x, y = 100 * torch.randn(32, 10), torch.randint(0, 4, (32,))

    def ts():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss
    r = probe(model, (x, y), F.cross_entropy, opt, train_step=ts, extra=(scaler,))
    assert not fails(r), str(r)
    assert r.details["train_step"]["optimizer_steps"] == [0, 0] and scaler.get_scale() == 2.0**127
    assert any("GradScaler skipped optimizer.step" in n for n in r.details["notes"])


def test_hand_written_momentum_is_not_judged_by_its_update_direction():
    # v = 0.9 v + g; p -= lr v after 150 noisy steps at lr 0.5: the update points against this call's gradient
    # (as torch.optim.SGD's momentum did, measured cosine -0.8) although the program is correct
    model, batch, loss_fn, _, _, _ = classifier(1, "adam", warm=0)
    bufs = [torch.zeros_like(p) for p in model.parameters()]
    g = torch.Generator().manual_seed(101)
    stream = iter([(torch.randn(8, 10, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(160)])

    def ts():
        xb, yb = next(stream)
        model.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        with torch.no_grad():
            for p, v in zip(model.parameters(), bufs):
                v.mul_(0.9).add_(p.grad)
                p -= 0.5 * v
        return loss
    for _ in range(150):
        ts()
    r = probe(model, batch, loss_fn, train_step=ts, extra=(bufs,))
    assert not fails(r), str(r)


@pytest.mark.parametrize("seed", [0, 1])
def test_optimizer_none_with_a_train_step_that_owns_its_adam_passes(seed):
    # a trainer-style step holding its own optimizer, the probe given none: judged from the deltas, restored
    model, batch, loss_fn, opt, ts, sched = classifier(seed, "adam")
    r = probe(model, batch, loss_fn, None, train_step=ts, extra=(opt, sched))
    assert not fails(r) and finding(r, "step.descent").status is Status.PASS, str(r)
