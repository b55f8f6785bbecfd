"""BERT pretraining (masked LM + next-sentence prediction) from MorvanZhou's NLP-Tutorials, PyTorch version: a
post-LayerNorm transformer encoder (``transformer.py``: ``MultiHead`` with a pad mask, ``PositionWiseFFN``,
``EncoderLayer``, ``Encoder``) under ``GPT``'s embeddings (word, segment, a learned position parameter), an MLM head
and an NSP head over the flattened sequence; ``BERT.step`` (zero_grad, MLM cross-entropy on the ``masked_select``-ed
positions against the unmasked copy ``seqs_``, NSP cross-entropy weighted 0.2, backward, the Adam the model owns)
after ``random_mask_or_replace`` (per batch: 70% of the time [MASK], 15% keep, 15% random words, on 15% of each
pair's tokens).

Source: https://github.com/MorvanZhou/NLP-Tutorials
Commit: 3aa02a13151b696e8c034da5f7bd2ef4294a5e5f
Files: ``pytorch/BERT.py`` (``BERT``, ``_get_loss_mask``, ``do_mask``, ``do_replace``, ``do_nothing``,
``random_mask_or_replace``, ``train``), ``pytorch/GPT.py`` (``GPT``), ``pytorch/transformer.py`` (``MultiHead``,
``PositionWiseFFN``, ``EncoderLayer``, ``Encoder``), ``pytorch/utils.py`` (``MRPCData``, ``_process_mrpc``,
``pad_zero``)
License: MIT (Copyright (c) 2017 Andrew Gambardella, as the repository's LICENSE reads; full text in
LICENSES/MorvanZhou-NLP-Tutorials.txt)
Domain: masked LM + next-sentence prediction (BERT from scratch, plain loop)

Kept as written: the model classes, ``BERT.step`` and ``BERT.mask``, the masking functions, ``MRPCData``'s
sequence layout (``<GO> s1 <SEP> s2 <SEP>``, padded to the longest pair, segments 0/1/2, ``word_ids`` without the
special tokens), ``_process_mrpc``'s vocabulary (sorted words from 1, then ``<MASK>``, ``<SEP>``, ``<GO>``),
``train``'s loop body (``random_mask_or_replace``, the casts to ``LongTensor``, ``model.step``), num_head 4,
drop_rate 0.2, batch 32 with shuffling, MASK_RATE 0.15.

Deviations from the original:
- MRPC (a download, read with pandas) is replaced by synthetic sentence pairs made from ``seed``, handed to
  ``MRPCData`` in the dict ``_process_mrpc`` builds: 30 words, sentences of 4 to 7 words that follow a seeded
  successor chain 85% of the time; ``is_same`` pairs have the second sentence the first one word for word through a
  seeded synonym map, the others an unrelated sentence (256 train / 64 test rows);
- sizes for 2 CPU cores: MODEL_DIM 256 -> 32, N_LAYER 4 -> 2, rows 2000 -> 256; LEARNING_RATE 1e-4 -> 1e-3 so the
  loss falls within the 30 steps of the self-check; the device is the CPU;
- ``np.bool`` (removed from numpy) is spelled ``bool`` in ``_get_loss_mask``; the model and data code of
  ``transformer.py``, ``GPT.py`` and ``utils.py`` is in the helper ``_morvannlp_lib.py`` (``GPT``'s own ``step``,
  causal ``mask`` and ``attentions``, overridden or unused by ``BERT``, and ``MRPCData.sample`` left out);
- ``train``'s epoch loop is unrolled: one ``train_step`` is one batch of it (a new shuffled iterator when an epoch
  ends); the prints, the saved model and the attention export are dropped; ``eval_fn`` is the MLM accuracy on the
  masked positions of a given batch in eval mode;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import optim
from torch.nn.functional import cross_entropy
from torch.utils.data import DataLoader

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _morvannlp_lib import GPT, MRPCData

MASK_RATE = 0.15
BUG = {"name": None}  # (port) the bug switch read by BERT.__init__ and random_mask_or_replace


# BERT.py
class BERT(GPT):

    def __init__(
        self, model_dim, max_len, num_layer, num_head, n_vocab, lr,
        max_seg=3, drop_rate=0.2, padding_idx=0) -> None:
        super().__init__(model_dim, max_len, num_layer, num_head, n_vocab, lr, max_seg, drop_rate, padding_idx)
        if BUG["name"] == "optimizer_before_nsp_head":  # (port) the Adam of GPT.__init__ made before task_nsp
            self.opt = optim.Adam([p for n, p in self.named_parameters() if not n.startswith("task_nsp")], lr)

    def step(self,seqs,segs,seqs_, loss_mask,nsp_labels):
        self.opt.zero_grad()
        mlm_logits, nsp_logits = self(seqs, segs, training=True)    # [n, step, n_vocab], [n, n_cls]
        mlm_loss = cross_entropy(
            torch.masked_select(mlm_logits,loss_mask).reshape(-1,mlm_logits.shape[2]),
            torch.masked_select(seqs_,loss_mask.squeeze(2))
            )
        nsp_loss = cross_entropy(nsp_logits,nsp_labels.reshape(-1))
        loss = mlm_loss + 0.2 * nsp_loss
        loss.backward()
        self.opt.step()
        return loss.cpu().data.numpy(),mlm_logits

    def mask(self, seqs):
        mask = torch.eq(seqs,self.padding_idx)
        return mask[:, None, None, :]


def _get_loss_mask(len_arange, seq, pad_id):
    rand_id = np.random.choice(len_arange, size=max(2, int(MASK_RATE * len(len_arange))), replace=False)
    loss_mask = np.full_like(seq, pad_id, dtype=bool)  # (port) np.bool
    loss_mask[rand_id] = True
    return loss_mask[None, :], rand_id


def do_mask(seq, len_arange, pad_id, mask_id):
    loss_mask, rand_id = _get_loss_mask(len_arange, seq, pad_id)
    seq[rand_id] = mask_id
    return loss_mask


def do_replace(seq, len_arange, pad_id, word_ids):
    loss_mask, rand_id = _get_loss_mask(len_arange, seq, pad_id)
    seq[rand_id] = torch.from_numpy(np.random.choice(word_ids, size=len(rand_id))).type(torch.IntTensor)
    return loss_mask


def do_nothing(seq, len_arange, pad_id):
    loss_mask, _ = _get_loss_mask(len_arange, seq, pad_id)
    return loss_mask


def random_mask_or_replace(data,arange,dataset):
    seqs, segs,xlen,nsp_labels = data
    seqs_ = seqs.data if BUG["name"] == "targets_not_cloned" else seqs.data.clone()
    p = np.random.random()
    if p < 0.7:
        # mask
        loss_mask = np.concatenate([
            do_mask(
                seqs[i],
                np.concatenate((arange[:xlen[i,0]],arange[xlen[i,0]+1:xlen[i].sum()+1])),
                dataset.pad_id,
                dataset.mask_id
                )
                for i in range(len(seqs))], axis=0)
    elif p < 0.85:
        # do nothing
        loss_mask = np.concatenate([
            do_nothing(
                seqs[i],
                np.concatenate((arange[:xlen[i,0]],arange[xlen[i,0]+1:xlen[i].sum()+1])),
                dataset.pad_id
                )
                for i in range(len(seqs))],  axis=0)
    else:
        # replace
        loss_mask = np.concatenate([
            do_replace(
                seqs[i],
                np.concatenate((arange[:xlen[i,0]],arange[xlen[i,0]+1:xlen[i].sum()+1])),
                dataset.pad_id,
                dataset.word_ids
                )
                for i in range(len(seqs))],  axis=0)
    loss_mask = torch.from_numpy(loss_mask).unsqueeze(2)
    return seqs, segs, seqs_, loss_mask, xlen, nsp_labels


def _build(seed, bug=None):
    BUG["name"] = bug
    np.random.seed(seed)
    torch.manual_seed(seed)
    MODEL_DIM = 32  # (port) 256
    N_LAYER = 2  # (port) 4
    LEARNING_RATE = 1e-3  # (port) 1e-4
    dataset = MRPCData(seed, 256)
    model = BERT(
        model_dim=MODEL_DIM, max_len=dataset.max_len, num_layer=N_LAYER, num_head=4, n_vocab=dataset.num_word,
        lr=LEARNING_RATE, max_seg=dataset.num_seg, drop_rate=0.2, padding_idx=dataset.pad_id
    )
    BUG["name"] = None
    device = torch.device("cpu")
    model = model.cpu()

    loader = DataLoader(dataset,batch_size=32,shuffle=True, generator=torch.Generator().manual_seed(seed))
    arange = np.arange(0,dataset.max_len)
    state = {"it": None}

    def next_batch():
        batch = next(state["it"], None) if state["it"] is not None else None
        if batch is None:
            state["it"] = iter(loader)
            batch = next(state["it"])
        BUG["name"] = bug
        try:
            seqs, segs, seqs_, loss_mask, _xlen, nsp_labels = random_mask_or_replace(batch,arange,dataset)
        finally:
            BUG["name"] = None
        seqs, segs, seqs_, nsp_labels, loss_mask = seqs.type(torch.LongTensor).to(device), segs.type(torch.LongTensor).to(device),seqs_.type(torch.LongTensor).to(device),nsp_labels.to(device),loss_mask.to(device)
        return seqs, segs, seqs_, loss_mask, nsp_labels

    def train_step():
        # train()'s loop body, one batch
        seqs, segs, seqs_, loss_mask, nsp_labels = next_batch()
        loss, _pred = model.step(seqs, segs, seqs_, loss_mask, nsp_labels)
        return float(loss)

    def loss_fn(outputs, targets):
        mlm_logits, nsp_logits = outputs
        seqs_, loss_mask, nsp_labels = targets
        mlm_loss = cross_entropy(torch.masked_select(mlm_logits, loss_mask).reshape(-1, mlm_logits.shape[2]),
                                 torch.masked_select(seqs_, loss_mask.squeeze(2)))
        return mlm_loss + 0.2 * cross_entropy(nsp_logits, nsp_labels.reshape(-1))

    def eval_fn(model, batch):
        inputs, (seqs_, loss_mask, _nsp) = batch
        model.eval()
        with torch.no_grad():
            mlm_logits, _ = model(**inputs)
        model.train()
        picked = loss_mask.squeeze(2)
        return float((mlm_logits.argmax(-1)[picked] == seqs_[picked]).float().mean())

    seqs, segs, seqs_, loss_mask, nsp_labels = next_batch()
    state["it"] = None  # (port) the loop starts from a fresh epoch
    batch = ({"seqs": seqs, "segs": segs, "training": True}, (seqs_, loss_mask, nsp_labels))
    return Program(name="morvannlp_bert", model=model, batch=batch, loss_fn=loss_fn, optimizer=model.opt,
                   train_step=train_step, eval_fn=eval_fn, loader=loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the unmasked copy taken as seqs.data without .clone(), so masking the inputs in place rewrites the
    # targets too: the MLM loss asks for <MASK> (or the random word) at the masked positions.
    Bug("targets_not_cloned", functools.partial(_build, bug="targets_not_cloned"), "learning_ledger", ("TASK",)),
    # classic: the Adam built in __init__ before the NSP head is created, so task_nsp is never in the optimizer.
    Bug("optimizer_before_nsp_head", functools.partial(_build, bug="optimizer_before_nsp_head"), "four_structures",
        ("task_nsp",)),
]
