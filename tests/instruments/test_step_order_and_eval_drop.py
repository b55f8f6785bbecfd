"""Checks built from the public corpus' misses (issue 26, item 5), each read from the program's own calls: an optimizer
step placed before the backward, dropout that never drops because the model trains in eval mode, a drop path that
keeps dropping in eval mode, and a tuple of inputs that is the model's positional arguments."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv


def _mlp(p: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(p), nn.Linear(16, 3))


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(32, 6, generator=g), torch.randint(0, 3, (32,), generator=g)


def _probe(model: nn.Module, train_step: object, opt: torch.optim.Optimizer) -> firstdiv.Report:
    x, y = _data()
    return firstdiv.step_probe(model, (x, y), F.cross_entropy, opt, train_step=train_step)


def _kinds(report: firstdiv.Report) -> dict[str, str]:
    return {f.check: f.status.value for f in report.findings}


def test_a_step_before_the_backward_fails_at_the_step_not_at_a_parameter() -> None:
    model, (x, y) = _mlp(), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step() -> torch.Tensor:
        opt.zero_grad()
        opt.step()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss

    r = _probe(model, train_step, opt)
    assert r.status.value == "FAIL"
    assert (r.first_divergence.where, r.first_divergence.kind) == ("optimizer.step", "step.step_before_backward")


def test_a_step_that_applies_the_previous_calls_gradient_first_is_no_order_finding() -> None:
    model, (x, y) = _mlp(), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step() -> torch.Tensor:  # the update for the previous backward, then this call's backward
        opt.step()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss

    assert "step.step_before_backward" not in _kinds(_probe(model, train_step, opt))


def _eval_mode_step(model: nn.Module, opt: torch.optim.Optimizer, how: str) -> object:
    x, y = _data()

    def train_step() -> torch.Tensor:
        if how == "model_eval":
            model.eval()
        elif how == "dropout_off_by_module":
            model.train()
            for m in model.modules():
                if isinstance(m, nn.Dropout):
                    m.eval()
        elif how == "rollout_then_train":
            model.eval()
            with torch.no_grad():
                model(x)
            model.train()
        elif how == "validate_in_the_step":
            model.train()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if how == "validate_in_the_step":  # a validation forward with gradients on, never backpropagated
            model.eval()
            F.cross_entropy(model(x), y)
        return loss
    return train_step


def test_dropout_in_a_model_trained_in_eval_mode_fails_at_the_dropout_layer() -> None:
    model = _mlp(0.5)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    r = _probe(model, _eval_mode_step(model, opt, "model_eval"), opt)
    assert r.status.value == "FAIL"
    assert (r.first_divergence.where, r.first_divergence.kind) == ("2", "step.trained_in_eval_mode")


def test_dropout_off_by_module_an_eval_rollout_or_a_validation_forward_is_no_eval_mode_finding() -> None:
    for how in ("dropout_off_by_module", "rollout_then_train", "validate_in_the_step", "train"):
        model = _mlp(0.5)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        r = _probe(model, _eval_mode_step(model, opt, how), opt)
        assert "step.trained_in_eval_mode" not in _kinds(r), how
    model = _mlp(0.0)  # p = 0: nothing to drop, eval mode changes nothing
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    assert "step.trained_in_eval_mode" not in _kinds(_probe(model, _eval_mode_step(model, opt, "model_eval"), opt))


class DropPath(nn.Module):
    """Stochastic depth as image models write it: a per-sample mask from ``torch.rand``, off in eval mode."""

    def __init__(self, drop_prob: float, always: bool = False) -> None:
        super().__init__()
        self.drop_prob, self.always = drop_prob, always

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training or self.always):
            return x
        keep = 1 - self.drop_prob
        mask = (keep + torch.rand((x.shape[0], 1), dtype=x.dtype)).floor_()
        return x.div(keep) * mask


class Residual(nn.Module):
    def __init__(self, always: bool = False, sample: bool = False) -> None:
        super().__init__()
        self.inp, self.body, self.out = nn.Linear(6, 16), nn.Linear(16, 16), nn.Linear(16, 3)
        self.drop_path, self.sample = DropPath(0.3, always), sample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        h = h + self.drop_path(torch.relu(self.body(h)))
        if self.sample:  # a sampling layer (no drop rate): random in eval mode by design
            h = h + 0.1 * torch.randn_like(h)
        return self.out(h)


def _claims(model: nn.Module) -> firstdiv.Report:
    x, y = _data()

    def eval_fn(m: nn.Module, batch: tuple) -> float:
        m.eval()
        with torch.no_grad():
            return float((m(batch[0]).argmax(-1) == batch[1]).float().mean())
    return firstdiv.six_claims(model, (x, y), F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1),
                               eval_fn=eval_fn)


def _evaluation(r: firstdiv.Report) -> tuple[str, str]:
    f = next(f for f in r.findings if f.where == "EVALUATION")
    return f.status.value, f.check


def test_a_drop_path_that_drops_in_eval_mode_fails_evaluation_even_when_the_metric_repeats() -> None:
    torch.manual_seed(0)
    status, kind = _evaluation(_claims(Residual(always=True)))
    assert (status, kind) == ("FAIL", "claim.evaluation.random_masks")


def test_a_drop_path_off_in_eval_mode_and_a_sampling_layer_are_no_random_mask_finding() -> None:
    torch.manual_seed(0)
    assert _evaluation(_claims(Residual()))[0] == "PASS"
    torch.manual_seed(0)
    assert _evaluation(_claims(Residual(sample=True)))[1] != "claim.evaluation.random_masks"


class TwoArgs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.head = nn.Embedding(10, 8), nn.Linear(8, 3)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        keep = (torch.arange(tokens.shape[1])[None] < lengths[:, None]).float()
        return self.head((self.emb(tokens) * keep[..., None]).sum(1) / lengths[:, None].float())


class DictInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wide, self.deep = nn.Linear(4, 3), nn.Linear(6, 3)

    def forward(self, X: dict, y: torch.Tensor | None = None) -> torch.Tensor:
        return self.wide(X["wide"]) + self.deep(X["deep"])


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(6, 3)

    def forward(self, inputs: tuple) -> torch.Tensor:
        return self.head(inputs[0] + inputs[1])


class Unpacks(TwoArgs):
    def forward(self, inputs: tuple) -> torch.Tensor:  # Tacotron 2's ``text, lengths, ... = inputs``
        tokens, lengths = inputs
        return super().forward(tokens, lengths)


def test_a_tuple_of_inputs_is_the_positional_arguments_its_forward_takes() -> None:
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 3, (8,), generator=g)
    tokens, lengths = torch.randint(0, 10, (8, 5), generator=g), torch.randint(1, 6, (8,), generator=g)
    features = {"wide": torch.randn(8, 4, generator=g), "deep": torch.randn(8, 6, generator=g)}
    a, b = torch.randn(8, 6, generator=g), torch.randn(8, 6, generator=g)
    cases = ((TwoArgs(), (tokens, lengths)), (DictInput(), (features,)), (Pair(), (a, b)),
             (Pair(), ((a, b),)), (Unpacks(), ((tokens, lengths),)))  # ((x, lengths),): the tuple is the argument
    for model, inputs in cases:
        r = firstdiv.learning_ledger(model, (inputs, y), F.cross_entropy, torch.optim.Adam(model.parameters(), lr=1e-2))
        assert r.status.value != "SKIPPED", (type(model).__name__, r.reason)
        assert "raised" not in (r.reason or ""), r.reason


V, T, B = 11, 10, 6


class RecurrentLM(nn.Module):
    """A sequence-first LSTM LM whose decoder runs inside the loss (a split softmax given the decoder's weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.rnn, self.decoder = nn.Embedding(V, 8), nn.LSTM(8, 8), nn.Linear(8, V)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(self.emb(x))[0]


def _rnn_report(shift: bool) -> firstdiv.Report:
    torch.manual_seed(0)
    model = RecurrentLM()
    source = torch.randint(0, V, (T + 1, B))
    data = source[:-1]
    target = (source[1:] if shift else source[:-1]).reshape(-1)

    def loss_fn(hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = F.linear(hidden.reshape(-1, 8), model.decoder.weight, model.decoder.bias)
        return F.cross_entropy(logits, targets)
    return firstdiv.learning_ledger(model, (data, target), loss_fn, torch.optim.SGD(model.parameters(), lr=1.0),
                                    batch_axis=1, overfit_steps=0)


class SelfLossLM(nn.Module):
    """A causal model that computes its own loss from a ``target`` input; ``shift_inside`` shifts like HF models."""

    def __init__(self, shift_inside: bool = False) -> None:
        super().__init__()
        self.shift_inside = shift_inside
        self.emb, self.head = nn.Embedding(V, 16), nn.Linear(16, V)
        self.block = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)

    def forward(self, data: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(data.shape[1])
        hidden = self.block(self.emb(data), src_mask=mask, is_causal=True)
        logits = F.linear(hidden, self.head.weight, self.head.bias)  # no module output of vocabulary size
        if self.shift_inside:
            return F.cross_entropy(logits[:, :-1].reshape(-1, V), target[:, 1:].reshape(-1))
        return F.cross_entropy(logits.reshape(-1, V), target.reshape(-1))


def _self_loss_report(relation: str) -> firstdiv.Report:
    torch.manual_seed(0)
    model = SelfLossLM(shift_inside=relation == "labels_equal_inputs")
    tokens = torch.randint(0, V, (B, T + 1))
    data = tokens[:, :-1]
    target = tokens[:, 1:] if relation == "next" else data.clone()
    return firstdiv.learning_ledger(model, {"data": data, "target": target}, lambda loss, _t: loss,
                                    torch.optim.Adam(model.parameters(), lr=1e-3), overfit_steps=0)


def _task(r: firstdiv.Report) -> tuple[str, str]:
    f = next(f for f in r.findings if f.where == "TASK")
    return f.status.value, f.check


def test_unshifted_targets_of_a_recurrent_lm_whose_decoder_runs_in_the_loss_are_a_copy() -> None:
    assert _task(_rnn_report(shift=False)) == ("FAIL", "task.target_not_shifted")
    assert _task(_rnn_report(shift=True))[1] != "task.target_not_shifted"


def test_a_model_computing_its_own_loss_from_an_unshifted_target_input_is_a_copy() -> None:
    assert _task(_self_loss_report("same")) == ("FAIL", "task.target_not_shifted")
    assert _task(_self_loss_report("next"))[1] != "task.target_not_shifted"
    assert _task(_self_loss_report("labels_equal_inputs"))[1] != "task.target_not_shifted"  # shifted inside


def _td_report(read_mask: bool, all_ones: bool = False, extra: bool = False) -> firstdiv.Report:
    torch.manual_seed(0)
    q, q_target = nn.Linear(4, 2), nn.Linear(4, 2)
    g = torch.Generator().manual_seed(0)
    s, s2 = torch.randn(32, 4, generator=g), torch.randn(32, 4, generator=g)
    a, r = torch.randint(0, 2, (32, 1), generator=g), torch.randn(32, 1, generator=g)
    not_done = torch.ones(32, 1) if all_ones else (torch.rand(32, 1, generator=g) > 0.2).float()
    targets = (a, r, s2, not_done, torch.randn(32, 1, generator=g)) if extra else (a, r, s2, not_done)

    def loss_fn(q_out: torch.Tensor, t: tuple) -> torch.Tensor:
        a, r, s2, not_done = t[:4]
        bootstrap = q_target(s2).max(1, keepdim=True)[0].detach()
        target = r + 0.99 * bootstrap * (not_done if read_mask else 1.0)
        return F.smooth_l1_loss(q_out.gather(1, a), target)
    return firstdiv.learning_ledger(q, (s, targets), loss_fn, torch.optim.Adam(q.parameters(), lr=1e-3),
                                    overfit_steps=0)


def test_a_done_mask_the_td_loss_never_reads_fails_task_even_in_a_sample_without_an_episode_end() -> None:
    assert _task(_td_report(read_mask=False)) == ("FAIL", "task.mask_unread")
    assert _task(_td_report(read_mask=False, all_ones=True)) == ("FAIL", "task.mask_unread")


def test_a_mask_that_is_read_or_an_unread_component_that_is_no_mask_is_no_finding() -> None:
    assert _task(_td_report(read_mask=True))[1] != "task.mask_unread"
    assert _task(_td_report(read_mask=True, extra=True))[1] != "task.mask_unread"  # an unread float column
