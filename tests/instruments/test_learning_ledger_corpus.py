"""learning_ledger's TASK / OBJECTIVE / DEPENDENCY links on programs in the shapes real code takes: a VAE that
flattens its own images, a softmax before cross_entropy, one Linear(h, 1) head per label, a masked LM whose labels
were not masked, a forecaster whose target is the last input value, a seq2seq decoder fed the unshifted targets, a
siamese tower under torch.no_grad(). Each bug is named at its link; each correct twin passes that link."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import Status, learning_ledger


def link(report, where):
    return next(f for f in report.findings if f.where == where)


def run(model, batch, loss_fn, **kw):
    torch.manual_seed(0)
    return learning_ledger(model, batch, loss_fn, torch.optim.Adam(model.parameters(), lr=1e-3), overfit_steps=0, **kw)


# --- OBJECTIVE: a VAE's loss flattens [N, 1, 4, 4] images itself: not a broadcast --------------------------------

class TinyVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc, self.mu, self.lv, self.dec = nn.Linear(16, 8), nn.Linear(8, 2), nn.Linear(8, 2), nn.Linear(2, 16)

    def forward(self, x):
        h = F.relu(self.enc(x.view(-1, 16)))
        mu, logvar = self.mu(h), self.lv(h)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return torch.sigmoid(self.dec(z)), mu, logvar


def vae_loss(outputs, x):
    recon, mu, logvar = outputs
    bce = F.binary_cross_entropy(recon, x.view(-1, 16), reduction="sum")
    return (bce - 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())) / x.size(0)


def test_vae_flattening_its_images_is_not_a_broadcast():
    torch.manual_seed(0)
    images = torch.rand(12, 1, 4, 4)
    report = run(TinyVAE(), (images, images), vae_loss, task_probe=lambda x: x)
    assert link(report, "OBJECTIVE").status is not Status.FAIL


def test_a_real_broadcast_is_still_named():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    x, y = torch.randn(16, 3), torch.randn(16)
    report = run(model, (x, y), F.mse_loss, task="regression")
    assert (report.first_divergence.where, report.first_divergence.kind) == ("OBJECTIVE", "objective.shape_broadcast")


# --- OBJECTIVE: softmax before cross_entropy ---------------------------------------------------------------------

def _classifier():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4)), torch.randn(24, 6), torch.randint(0, 4, (24,))


def test_softmax_before_cross_entropy_is_named_at_objective():
    model, x, y = _classifier()
    report = run(model, (x, y), lambda logits, t: F.cross_entropy(logits.softmax(-1), t))
    assert (report.first_divergence.where, report.first_divergence.kind) == ("OBJECTIVE", "objective.probabilities_as_logits")
    plain = run(model, (x, y), F.cross_entropy)
    assert link(plain, "OBJECTIVE").status is Status.PASS


def test_class_weighted_cross_entropy_is_not_a_double_softmax():
    model, x, y = _classifier()
    w = torch.tensor([1.0, 2.0, 0.5, 1.5])
    report = run(model, (x, y), lambda logits, t: F.cross_entropy(logits, t, weight=w))
    assert link(report, "OBJECTIVE").status is Status.PASS


# --- OBJECTIVE: one Linear(h, 1) head per label, concatenated ------------------------------------------------------

class Heads(nn.Module):
    def __init__(self, log_softmax=False):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(6, 16), nn.ReLU())
        self.heads = nn.ModuleList(nn.Linear(16, 1) for _ in range(4))
        self.log_softmax = log_softmax

    def forward(self, x):
        h = self.trunk(x)
        outs = [head(h) for head in self.heads]
        return torch.cat([o.log_softmax(1) for o in outs] if self.log_softmax else outs, 1)


def _multilabel():
    torch.manual_seed(0)
    x = torch.randn(24, 6)
    return x, (x[:, :4] + 0.3 * x[:, 4:5] > 0).float()


def test_log_softmax_per_single_unit_head_is_constant_outputs():
    x, y = _multilabel()
    report = run(Heads(log_softmax=True), (x, y), nn.BCEWithLogitsLoss())
    assert (report.first_divergence.where, report.first_divergence.kind) == ("OBJECTIVE", "objective.constant_outputs")


def test_softmax_over_independent_labels_inside_the_loss_is_unreachable():
    x, y = _multilabel()
    assert int((y.sum(1) >= 2).sum()) > 0
    report = run(Heads(), (x, y), lambda o, t: F.mse_loss(o.softmax(1), t))
    assert (report.first_divergence.where, report.first_divergence.kind) == ("OBJECTIVE", "objective.unreachable")
    assert link(run(Heads(), (x, y), nn.BCEWithLogitsLoss()), "OBJECTIVE").status is Status.PASS


# --- TASK: a masked LM whose labels were not masked ----------------------------------------------------------------

MASK, VOCAB = 3, 40


class TinyMLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.out = nn.Embedding(VOCAB, 16), nn.Linear(16, VOCAB)

    def forward(self, input_ids):
        return self.out(torch.tanh(self.emb(input_ids)))


def _mlm_batch(mask_labels):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, VOCAB, (8, 12), generator=g)
    chosen = torch.rand(ids.shape, generator=g) < 0.2
    chosen[:, 2] = True
    labels = ids.clone()
    if mask_labels:
        labels[~chosen] = -100
    inputs = ids.clone()
    inputs[chosen & (torch.rand(ids.shape, generator=g) < 0.8)] = MASK
    return {"input_ids": inputs, "labels": labels}


def _mlm_loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)


def test_mlm_labels_not_masked_is_named_at_task():
    report = run(TinyMLM(), _mlm_batch(mask_labels=False), _mlm_loss, task="language_model")
    assert (report.first_divergence.where, report.first_divergence.kind) == ("TASK", "task.mlm_labels_not_masked")
    assert link(run(TinyMLM(), _mlm_batch(mask_labels=True), _mlm_loss, task="language_model"), "TASK").status is Status.PASS


# --- TASK: the target is the last value of the input window ---------------------------------------------------------

class Forecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.head = nn.GRU(1, 8, batch_first=True), nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


def _windows(shift):
    g = torch.Generator().manual_seed(0)
    series = torch.sin(0.4 * torch.arange(13.0) + 6.28 * torch.rand(16, 1, generator=g))
    return series[:, :12, None], series[:, 12 - shift:13 - shift]


def _next_value(x):
    return 2 * torch.cos(torch.tensor(0.4)) * x[:, -1] - x[:, -2]


def test_target_copying_the_last_input_is_named_at_task():
    x, y = _windows(shift=1)
    report = run(Forecaster(), (x, y), F.mse_loss, task_probe=_next_value)
    # the targets are the window's last value: the model is handed what it must predict (task_probe would say the
    # labels disagree with the rule too; the copy is the more specific finding)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("TASK", "task.target_in_input")
    assert "inputs[:, 11, 0]" in link(report, "TASK").message


def test_correct_and_noisy_forecast_targets_pass_task():
    x, y = _windows(shift=0)
    assert link(run(Forecaster(), (x, y), F.mse_loss, task_probe=_next_value), "TASK").status is Status.PASS
    noisy = y + 0.02 * torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    assert link(run(Forecaster(), (x, noisy), F.mse_loss, task_probe=_next_value), "TASK").status is Status.PASS


# --- DEPENDENCY: the decoder is fed the unshifted targets ---------------------------------------------------------

SOS, PAD, V = 1, 0, 12


class Seq2Seq(nn.Module):
    def __init__(self, shift_inside=False):
        super().__init__()
        self.src, self.tgt = nn.Embedding(V, 8), nn.Embedding(V, 8)
        self.enc, self.dec, self.out = nn.GRU(8, 8, batch_first=True), nn.GRU(8, 8, batch_first=True), nn.Linear(8, V)
        self.shift_inside = shift_inside

    def forward(self, src, decoder_input):
        if self.shift_inside:
            decoder_input = torch.cat([torch.full_like(decoder_input[:, :1], SOS), decoder_input[:, :-1]], 1)
        _, h = self.enc(self.src(src))
        return self.out(self.dec(self.tgt(decoder_input), h)[0])


def _pairs(leak):
    g = torch.Generator().manual_seed(0)
    src = torch.randint(2, V, (8, 6), generator=g)
    tgt = src.flip(1)
    dec = tgt.clone() if leak else torch.cat([torch.full((8, 1), SOS), tgt[:, :-1]], 1)
    return {"src": src, "decoder_input": dec, "labels": tgt}


def _s2s_loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=PAD)


def test_decoder_fed_the_targets_is_a_leak_named_by_its_key():
    report = run(Seq2Seq(), _pairs(leak=True), _s2s_loss)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("DEPENDENCY", "dependency.target_leak")
    assert "'decoder_input'" in link(report, "DEPENDENCY").message


def test_shifted_decoder_input_and_a_model_that_shifts_itself_pass_dependency():
    assert link(run(Seq2Seq(), _pairs(leak=False), _s2s_loss), "DEPENDENCY").status is Status.PASS
    assert link(run(Seq2Seq(shift_inside=True), _pairs(leak=True), _s2s_loss), "DEPENDENCY").status is Status.PASS


# --- DEPENDENCY: one siamese tower under torch.no_grad() -----------------------------------------------------------

class Siamese(nn.Module):
    def __init__(self, mode="both"):
        super().__init__()
        self.embed, self.mode = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 4)), mode
        self.pred = nn.Linear(4, 4) if mode == "simsiam" else None

    def forward(self, x1, x2):
        a = self.embed(x1)
        if self.mode == "no_grad":
            with torch.no_grad():
                b = self.embed(x2)
            return a, b
        b = self.embed(x2)
        if self.mode == "simsiam":  # stop-gradient targets, predictor on both branches: every input keeps a path
            return self.pred(a), self.pred(b), a.detach(), b.detach()
        return a, b


def _pair_batch():
    g = torch.Generator().manual_seed(0)
    return {"x1": torch.randn(16, 5, generator=g), "x2": torch.randn(16, 5, generator=g),
            "labels": torch.where(torch.arange(16) % 2 == 0, 1.0, -1.0)}


def _cosine(outputs, labels):
    return nn.CosineEmbeddingLoss(margin=0.5)(outputs[0], outputs[1], labels)


def _simsiam(outputs, labels):
    p1, p2, z1, z2 = outputs
    return -(F.cosine_similarity(p1, z2).mean() + F.cosine_similarity(p2, z1).mean()) / 2


def test_no_grad_tower_is_named_by_its_input():
    report = run(Siamese("no_grad"), _pair_batch(), _cosine)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("DEPENDENCY", "dependency.input_without_gradient")
    assert "'x2'" in link(report, "DEPENDENCY").message


def test_both_towers_with_gradient_and_stop_gradient_targets_pass_dependency():
    assert link(run(Siamese(), _pair_batch(), _cosine), "DEPENDENCY").status is Status.PASS
    assert link(run(Siamese("simsiam"), _pair_batch(), _simsiam), "DEPENDENCY").status is Status.PASS


def test_dependency_probes_leave_the_rng_and_the_model_untouched():
    model = Siamese("no_grad")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(5)
    state = torch.get_rng_state()
    learning_ledger(model, _pair_batch(), _cosine, torch.optim.Adam(model.parameters()), overfit_steps=0)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_kld_with_the_wrong_sign_has_no_minimum():
    torch.manual_seed(0)
    images = torch.rand(12, 1, 4, 4)

    def flipped(outputs, x):
        recon, mu, logvar = outputs
        bce = F.binary_cross_entropy(recon, x.view(-1, 16), reduction="sum")
        return (bce + 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())) / x.size(0)
    report = run(TinyVAE(), (images, images), flipped, task_probe=lambda x: x)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("OBJECTIVE", "objective.wrong_sign")
