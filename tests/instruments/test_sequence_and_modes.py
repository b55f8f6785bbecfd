"""Checks whose premise is read from the program itself (issue 26): the next-token objective read from the loss's own
gradient (a model that computes its own loss declares no targets), causality by a counterfactual on the copy, batch
norm trained in eval mode on never-estimated statistics, and clipping placed after the step."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv

V, T, D = 13, 12, 16


class TinyLM(nn.Module):
    """A causal LM that computes its own loss (the shift inside), as many public programs write it."""

    def __init__(self, causal: bool = True, shift: bool = True, head_in_loss: bool = False) -> None:
        super().__init__()
        self.causal, self.shift, self.head_in_loss = causal, shift, head_in_loss
        self.emb, self.pos = nn.Embedding(V, D), nn.Parameter(torch.randn(T, D) * 0.1)
        self.block = nn.TransformerEncoderLayer(D, 2, 32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(D, V)

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1]) if self.causal else None
        return self.block(self.emb(x) + self.pos[: x.shape[1]], src_mask=mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.hidden(x))
        if self.shift:
            return F.cross_entropy(logits[:, :-1].reshape(-1, V), x[:, 1:].reshape(-1))
        return F.cross_entropy(logits.reshape(-1, V), x.reshape(-1))


def _ledger(model: nn.Module) -> firstdiv.Report:
    torch.manual_seed(0)
    x = torch.randint(1, V, (8, T))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return firstdiv.learning_ledger(model, (x,), lambda loss, _t: loss, opt, overfit_steps=0)


def _kinds(r: firstdiv.Report) -> set[str]:
    return {f.check for f in r.findings if f.status.name == "FAIL"}


def test_a_causal_lm_computing_its_own_loss_passes_dependency_and_task() -> None:
    torch.manual_seed(0)
    r = _ledger(TinyLM())
    assert not _kinds(r) & {"dependency.future_visible", "task.target_not_shifted"}, r.findings


def test_attention_without_the_causal_mask_is_a_future_leak_read_from_the_loss_gradient() -> None:
    torch.manual_seed(0)
    r = _ledger(TinyLM(causal=False))
    assert r.first_divergence is not None and r.first_divergence.kind == "dependency.future_visible"
    finding = next(f for f in r.findings if f.check == "dependency.future_visible")
    assert finding.evidence["read_from"] == "the loss's gradient"


def test_a_loss_on_the_unshifted_tokens_of_a_causal_model_is_a_copy() -> None:
    torch.manual_seed(0)
    r = _ledger(TinyLM(shift=False))
    assert r.first_divergence is not None and r.first_divergence.kind == "task.target_not_shifted"
    assert r.first_divergence.where == "TASK"


def test_a_bidirectional_model_asked_for_its_own_tokens_is_no_copy_finding() -> None:
    """An autoencoder over tokens: the positions read later tokens too, so the copy premise is not confirmed."""
    torch.manual_seed(0)
    r = _ledger(TinyLM(causal=False, shift=False))
    assert "task.target_not_shifted" not in _kinds(r)


class CopyTask(nn.Module):
    """An encoder over the source and a decoder over the shifted target, both carrying the same tokens."""

    def __init__(self, decoder_causal: bool = True) -> None:
        super().__init__()
        self.decoder_causal = decoder_causal
        self.emb = nn.Embedding(V, D)
        self.model = nn.Transformer(D, 2, 1, 1, 32, dropout=0.0, batch_first=True)
        self.generator = nn.Linear(D, V)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1]) if self.decoder_causal else None
        return self.model(self.emb(src), self.emb(tgt), tgt_mask=mask)  # hidden states: the head is in the loss


def _copy_report(decoder_causal: bool) -> firstdiv.Report:
    torch.manual_seed(0)
    model = CopyTask(decoder_causal)
    data = torch.randint(1, V, (8, T))
    batch = ({"src": data, "tgt": data[:, :-1]}, data[:, 1:])

    def loss_fn(hidden: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model.generator(hidden).reshape(-1, V), y.reshape(-1))
    return firstdiv.learning_ledger(model, batch, loss_fn, torch.optim.Adam(model.parameters()), overfit_steps=0)


def test_a_copy_task_whose_encoder_reads_the_whole_source_is_no_leak() -> None:
    r = _copy_report(decoder_causal=True)
    assert r.status.name != "SKIPPED" and "dependency.future_visible" not in _kinds(r)


def test_a_copy_task_whose_decoder_sees_the_future_is_a_leak() -> None:
    r = _copy_report(decoder_causal=False)
    assert r.first_divergence is not None and r.first_divergence.kind == "dependency.future_visible"


def _bn_program(eval_mode: bool, estimated: bool):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    if estimated:
        with torch.no_grad():
            for _ in range(30):  # running statistics estimated in train mode, then frozen (at momentum 0.1, 30
                m(torch.randn(32, 4) * 3 + 1)  # batches leave the built values 4 % of the weight; 3 would leave 73 %)
    if eval_mode:
        m.eval()
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def step() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss
    return m, (x, y), F.cross_entropy, opt, step


def test_training_in_eval_mode_on_never_estimated_batch_norm_fails_at_the_layer() -> None:
    m, batch, lf, opt, step = _bn_program(eval_mode=True, estimated=False)
    r = firstdiv.step_probe(m, batch, lf, opt, train_step=step)
    assert r.first_divergence is not None and r.first_divergence.kind == "step.norm_statistics_never_estimated"
    assert r.first_divergence.where == "1"
    assert not m.training and int(m[1].num_batches_tracked) == 0  # no trace: mode and statistics as they were


def test_frozen_batch_norm_with_estimated_statistics_is_no_finding() -> None:
    for eval_mode, estimated in ((True, True), (False, False)):
        m, batch, lf, opt, step = _bn_program(eval_mode, estimated)
        r = firstdiv.step_probe(m, batch, lf, opt, train_step=step)
        assert "step.norm_statistics_never_estimated" not in _kinds(r)


def _clip_program(where: str):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def step() -> torch.Tensor:
        if where == "closure":
            def closure() -> torch.Tensor:
                opt.zero_grad()
                loss = F.cross_entropy(m(x), y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(m.parameters(), 0.1)
                return loss
            return opt.step(closure)
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        if where == "before":
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.1)
        opt.step()
        if where == "after":
            torch.nn.utils.clip_grad_value_(m.parameters(), 0.01)
        return loss
    return m, (x, y), F.cross_entropy, opt, step


def test_clipping_after_the_step_fails_and_the_clip_functions_are_restored() -> None:
    originals = (torch.nn.utils.clip_grad_norm_, torch.nn.utils.clip_grad_value_)
    m, batch, lf, opt, step = _clip_program("after")
    r = firstdiv.step_probe(m, batch, lf, opt, train_step=step)
    assert r.first_divergence is not None and r.first_divergence.kind == "step.clip_after_step"
    assert r.first_divergence.where == "0.weight"
    assert (torch.nn.utils.clip_grad_norm_, torch.nn.utils.clip_grad_value_) == originals


def test_clipping_before_the_step_or_inside_its_closure_is_no_finding() -> None:
    for where in ("before", "closure"):
        m, batch, lf, opt, step = _clip_program(where)
        r = firstdiv.step_probe(m, batch, lf, opt, train_step=step)
        assert "step.clip_after_step" not in _kinds(r), where


class PaddedLM(TinyLM):
    """Right-padded rows (pad id 0, an end token 1 before it) and a loss that masks the padding, or not."""

    def __init__(self, ignore_padding: bool) -> None:
        super().__init__()
        self.ignore_padding = ignore_padding
        self.pad_id = 0  # the program knows its pad id (it builds the labels' mask from it)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.hidden(x))
        labels = x[:, 1:].masked_fill((x[:, 1:] == 0) & self.ignore_padding, -100)
        return F.cross_entropy(logits[:, :-1].reshape(-1, V), labels.reshape(-1))


def _padded_batch() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(2, V, (8, T), generator=g)
    for i, n in enumerate((3, 4, 5, 6, 7, 8, 9, 10)):
        x[i, n] = 1  # end of sequence
        x[i, n + 1:] = 0  # padding
    return x


def test_a_loss_that_trains_on_padding_is_found_from_its_gradient() -> None:
    for ignore in (True, False):
        torch.manual_seed(0)
        model = PaddedLM(ignore)
        r = firstdiv.learning_ledger(model, (_padded_batch(),), lambda loss, _t: loss,
                                     torch.optim.Adam(model.parameters()), overfit_steps=0)
        assert ("objective.padding_in_loss" in _kinds(r)) is (not ignore), r.findings


def test_targets_in_a_namedtuple_are_cut_and_rebuilt_without_a_crash() -> None:
    """A replay batch's transitions as a namedtuple: the ledger's subsets keep the type (it was a could-not-check)."""
    from collections import namedtuple

    Transition = namedtuple("Transition", ["target", "weight"])
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    x = torch.randn(32, 4)
    batch = (x, Transition(x.sum(1, keepdim=True), torch.ones(32, 1)))
    r = firstdiv.learning_ledger(model, batch, lambda o, t: ((o - t.target) ** 2 * t.weight).mean(),
                                 torch.optim.SGD(model.parameters(), lr=0.1), overfit_steps=20)
    raised = [f for f in r.findings if "raised" in f.message and "could not check" in f.message]
    assert not raised, raised


def _ledger_of(model: nn.Module, batch, loss_fn) -> firstdiv.Report:
    return firstdiv.learning_ledger(model, batch, loss_fn, torch.optim.Adam(model.parameters()), overfit_steps=0)


def test_a_sigmoid_discriminator_inside_loss_fn_feeding_a_with_logits_loss_is_read_from_the_graph() -> None:
    torch.manual_seed(0)
    gen, disc = nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())  # the discriminator lives outside

    def gan_loss(fake: torch.Tensor, _t) -> torch.Tensor:
        score = disc(fake)
        return F.binary_cross_entropy_with_logits(score, torch.ones_like(score))
    r = _ledger_of(gen, (torch.randn(16, 4), torch.zeros(16)), gan_loss)
    assert r.first_divergence is not None and r.first_divergence.kind == "objective.probabilities_as_logits"


def test_ctc_on_raw_scores_is_unbounded_below() -> None:
    torch.manual_seed(0)
    model = nn.Linear(6, 5)
    x, targets = torch.randn(4, 10, 6), torch.randint(1, 5, (4, 3))

    def ctc(scores: torch.Tensor, t: torch.Tensor, log: bool) -> torch.Tensor:
        s = scores.transpose(0, 1)
        return F.ctc_loss(s.log_softmax(-1) if log else s, t, torch.full((4,), 10), torch.full((4,), 3))
    assert _kinds(_ledger_of(model, (x, targets), lambda s, t: ctc(s, t, True))) == set()
    r = _ledger_of(model, (x, targets), lambda s, t: ctc(s, t, False))
    assert r.first_divergence is not None and r.first_divergence.kind == "objective.nll_of_raw_scores"


def test_a_prediction_squeezed_inside_loss_fn_against_column_targets_is_a_broadcast() -> None:
    torch.manual_seed(0)
    x = torch.randn(32, 4)
    y = x.sum(1, keepdim=True)
    ok = _ledger_of(nn.Linear(4, 1), (x, y), lambda o, t: F.mse_loss(o, t))
    assert "objective.shape_broadcast" not in _kinds(ok)
    r = _ledger_of(nn.Linear(4, 1), (x, y), lambda o, t: F.mse_loss(o.squeeze(), t))
    assert r.first_divergence is not None and r.first_divergence.kind == "objective.shape_broadcast"


class _DiceLike(nn.Module):
    """A segmentation loss class that declares ``ignore_index=None`` (nothing ignored)."""

    ignore_index = None

    def forward(self, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        p = logits.sigmoid()
        return 1 - (2 * (p * mask).sum() + 1) / (p.sum() + mask.sum() + 1)


def test_a_loss_declaring_ignore_index_none_is_read_as_ignoring_nothing() -> None:
    torch.manual_seed(0)
    model = nn.Conv2d(1, 1, 3, padding=1)
    x = torch.randn(4, 1, 8, 8)
    r = firstdiv.learning_ledger(model, (x, (x > 0).float()), _DiceLike(), torch.optim.Adam(model.parameters()),
                                 overfit_steps=0)
    assert r.status.name != "SKIPPED" and not [f for f in r.findings if "raised" in f.message]


class _Wrapper(torch.optim.Optimizer):
    """A framework's wrapper that forwards to the optimizer it holds (Fabric's does so through __getattr__), whose
    pickled copy keeps only groups and state, as an Optimizer subclass's does."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.__dict__["_optimizer"] = optimizer

    def __getattr__(self, name: str):
        return getattr(self._optimizer, name)

    def step(self, closure=None):
        return self._optimizer.step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._optimizer.zero_grad(set_to_none)


def test_a_wrapped_optimizer_whose_copy_loses_its_inner_one_is_copied_through_it() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = _Wrapper(torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))

    def step() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    r = firstdiv.step_probe(model, (x, y), F.cross_entropy, opt, train_step=step)
    assert r.status.name in ("PASS", "WARN"), r
