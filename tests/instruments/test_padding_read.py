"""``dependency.padding_read``: a padded token batch whose attention model reads the padding (public corpus misses: a
SimCSE encoder and a BERT pretraining model whose forward takes the padding mask but never hands it to the attention
blocks). Confirmed by a counterfactual on the ledger's copy: changing only the token ids inside the padding moves the
outputs at the real tokens. A model that applies its mask, and a recurrent model that reads its padding by design, are
no finding; a Hugging Face model that takes ``attention_mask`` but is given none is one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv

V, T, B, E = 20, 10, 16, 32


def _batch(seed: int = 0) -> tuple[dict, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, V, (B, T), generator=g)
    lengths = torch.randint(4, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    ids = ids * mask  # pad id 0 after each sequence
    return {"input_ids": ids, "attention_mask": mask}, (ids[:, 1] % 2)


class _Encoder(nn.Module):
    def __init__(self, applies_mask: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.applies_mask = applies_mask
        self.emb, self.pos = nn.Embedding(V, E, padding_idx=0), nn.Parameter(0.02 * torch.randn(T, E))
        self.layer = nn.TransformerEncoderLayer(E, 4, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(E, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        pad = attention_mask == 0 if self.applies_mask else None
        h = self.layer(self.emb(input_ids) + self.pos, src_key_padding_mask=pad)
        return self.head(h[:, 0])


class _BiLSTM(nn.Module):
    """Reads its padding by design (no packing); the mask only pools."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.rnn, self.head = nn.Embedding(V, E, padding_idx=0), nn.LSTM(E, E, batch_first=True,
                                                                                    bidirectional=True), nn.Linear(2 * E, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.emb(input_ids))
        m = attention_mask.unsqueeze(-1).float()
        return self.head((h * m).sum(1) / m.sum(1))


def _ledger(model: nn.Module, batch, loss_fn=F.cross_entropy) -> firstdiv.Report:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return firstdiv.learning_ledger(model, batch, loss_fn, opt)


def _padding_read(report: firstdiv.Report) -> bool:
    return any(f.check == "dependency.padding_read" and f.status.value == "FAIL" for f in report.findings)


def test_a_mask_handed_over_but_not_applied_fails_at_dependency() -> None:
    r = _ledger(_Encoder(applies_mask=False), _batch())
    assert (r.first_divergence.where, r.first_divergence.kind) == ("DEPENDENCY", "dependency.padding_read")
    f = next(f for f in r.findings if f.check == "dependency.padding_read")
    assert f.evidence["mask_input"] == "attention_mask" and f.evidence["padding_positions"] > 0


def test_a_mask_applied_or_a_recurrent_model_reading_its_padding_is_no_finding() -> None:
    assert not _padding_read(_ledger(_Encoder(applies_mask=True), _batch()))
    assert not _padding_read(_ledger(_BiLSTM(), _batch()))


def test_a_hugging_face_model_given_no_attention_mask_fails_and_given_one_passes() -> None:
    transformers = pytest.importorskip("transformers", reason="transformers is a test dependency: pip install -e '.[dev]'")
    config = transformers.BertConfig(vocab_size=V, hidden_size=E, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=T, pad_token_id=0,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=2)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)
    inputs, labels = _batch()
    def loss_fn(out, _labels):
        return out.loss
    r = _ledger(model, {"input_ids": inputs["input_ids"], "labels": labels}, loss_fn)
    assert _padding_read(r)
    assert "passes no attention_mask" in next(f.message for f in r.findings if f.check == "dependency.padding_read")
    assert not _padding_read(_ledger(model, {**inputs, "labels": labels}, loss_fn))


def test_a_hugging_face_model_given_an_all_ones_mask_beside_its_padding_fails() -> None:
    """A collator that rebuilt the mask without the padding column (public-11's lightningtransformers_ner): the model
    gets an attention_mask of ones beside trailing runs of its pad id, and the real tokens attend to the padding."""
    transformers = pytest.importorskip("transformers", reason="transformers is a test dependency: pip install -e '.[dev]'")
    config = transformers.BertConfig(vocab_size=V, hidden_size=E, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=T, pad_token_id=0,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=2)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)
    inputs, labels = _batch()
    def loss_fn(out, _labels):
        return out.loss
    ones = torch.ones_like(inputs["attention_mask"])
    r = _ledger(model, {"input_ids": inputs["input_ids"], "attention_mask": ones, "labels": labels}, loss_fn)
    assert _padding_read(r)
    assert "all ones" in next(f.message for f in r.findings if f.check == "dependency.padding_read")


def test_an_all_ones_mask_where_the_pad_id_only_ends_rows_once_is_no_finding() -> None:
    """The pad id shared with an end token that closes some rows once (no run longer than one token): not padding."""
    transformers = pytest.importorskip("transformers", reason="transformers is a test dependency: pip install -e '.[dev]'")
    config = transformers.BertConfig(vocab_size=V, hidden_size=E, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=T, pad_token_id=1,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=2)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, V, (B, T), generator=g)
    ids[::2, -1] = 1  # an end token on every other row
    def loss_fn(out, _labels):
        return out.loss
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids[:, 1] % 2}
    assert not _padding_read(_ledger(model, batch, loss_fn))
