"""Masked-language-model pretraining with lucidrains' ``MLM`` wrapper: 15% of the non-special tokens chosen per
sequence (``get_mask_subset_with_prob``), [pad]/[cls] never masked (``mask_ignore_token_ids``), a random-token
replacement (``random_token_prob``), the rest replaced by [mask] with ``replace_prob`` 0.9, labels kept only at the
chosen positions (pad elsewhere, ``ignore_index`` = pad), around an encoder transformer; the README's loop: Adam
lr 3e-4, ``loss = trainer(data); loss.backward(); opt.step(); opt.zero_grad()``.

Source: https://github.com/lucidrains/mlm-pytorch
Commit: 1569ae2ad67fc4c973bcae00ac01b3eaae9fe2a2
Files: mlm_pytorch/mlm_pytorch.py, README.md (the usage example: transformer, MLM arguments, optimizer, step)
License: MIT (Copyright (c) 2020 Phil Wang; LICENSES/lucidrains-mlm-pytorch.txt)
Domain: masked language model pretraining (BERT-style masking wrapper)

Deviations from the original:
- the README's transformer is x-transformers' ``TransformerWrapper(num_tokens, max_seq_len, attn_layers =
  Encoder(dim, depth, heads))``; x-transformers is not installed, so a plain-torch stand-in of the same shape is
  written here: token embedding + absolute positional embedding, pre-norm encoder layers (``nn.TransformerEncoder``,
  ``norm_first=True``, no attention mask, as the Encoder), a final LayerNorm and a linear projection to logits;
  sizes num_tokens 20000 -> 32, max_seq_len 1024 -> 32, dim 512 -> 32, depth 6 -> 2, heads 8 -> 2;
- ``random_token_prob`` 0.1 with ``num_tokens`` given (the README leaves it at its default 0; the wrapper's
  random-replacement branch runs with it), and ``mask_ignore_token_ids = [1]`` for a [cls] token at position 0
  (the README's comment: "include the [cls] and [sep] here"); ``mask_token_id = 2``, ``pad_token_id = 0``,
  ``mask_prob = 0.15``, ``replace_prob = 0.90`` as in the README; ``.cuda()`` dropped;
- data: the README's ``torch.randint(0, 20000, (8, 1024))`` is replaced by synthetic sequences made from ``seed``
  with a learnable rule: [cls], then a random "word" of 4 tokens (ids 3..31) repeated, then [pad] to a fixed length
  (random lengths), batch 8, drawn fresh for each step; a masked token is predictable from its other copies (at
  the README's lr 3e-4 the loss falls slowly and noisily: ``SELF_CHECK_STEPS`` is 100);
- one ``train_step`` is the README's step on the next batch; ``eval_fn`` is the wrapper's loss on a given batch in
  eval mode without gradients (the README has no evaluation);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: B006, C405  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys
from functools import reduce

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import Adam

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NUM_TOKENS, SEQ_LEN, BATCH_SIZE, WORD = 32, 32, 8, 4
SELF_CHECK_STEPS = 100
PAD, CLS, MASK = 0, 1, 2


# ---- mlm_pytorch/mlm_pytorch.py -------------------------------------------------------------------------------

# helpers

def prob_mask_like(t, prob):
    return torch.zeros_like(t).float().uniform_(0, 1) < prob

def mask_with_tokens(t, token_ids):
    init_no_mask = torch.full_like(t, False, dtype=torch.bool)
    mask = reduce(lambda acc, el: acc | (t == el), token_ids, init_no_mask)
    return mask

def get_mask_subset_with_prob(mask, prob):
    batch, seq_len, device = *mask.shape, mask.device
    max_masked = math.ceil(prob * seq_len)

    num_tokens = mask.sum(dim=-1, keepdim=True)
    mask_excess = (mask.cumsum(dim=-1) > (num_tokens * prob).ceil())
    mask_excess = mask_excess[:, :max_masked]

    rand = torch.rand((batch, seq_len), device=device).masked_fill(~mask, -1e9)
    _, sampled_indices = rand.topk(max_masked, dim=-1)
    sampled_indices = (sampled_indices + 1).masked_fill_(mask_excess, 0)

    new_mask = torch.zeros((batch, seq_len + 1), device=device)
    new_mask.scatter_(-1, sampled_indices, 1)
    return new_mask[:, 1:].bool()

# main class

class MLM(nn.Module):
    def __init__(
        self,
        transformer,
        mask_prob = 0.15,
        replace_prob = 0.9,
        num_tokens = None,
        random_token_prob = 0.,
        mask_token_id = 2,
        pad_token_id = 0,
        mask_ignore_token_ids = [],
        bug = None):
        super().__init__()

        self.transformer = transformer
        self.bug = bug

        # mlm related probabilities

        self.mask_prob = mask_prob
        self.replace_prob = replace_prob

        self.num_tokens = num_tokens
        self.random_token_prob = random_token_prob

        # token ids

        self.pad_token_id = pad_token_id
        self.mask_token_id = mask_token_id
        self.mask_ignore_token_ids = set([*mask_ignore_token_ids, pad_token_id])

    def forward(self, seq, **kwargs):

        # do not mask [pad] tokens, or any other tokens in the tokens designated to be excluded ([cls], [sep])
        # also do not include these special tokens in the tokens chosen at random

        no_mask = mask_with_tokens(seq, self.mask_ignore_token_ids)
        mask = get_mask_subset_with_prob(~no_mask, self.mask_prob)

        # mask input with mask tokens with probability of `replace_prob` (keep tokens the same with probability 1 - replace_prob)

        masked_seq = seq.clone().detach()

        # derive labels to predict

        if self.bug == "labels_not_masked":
            # every token is a label, not only the chosen ones: the loss is mostly "copy the visible input"
            labels = seq.clone()
        else:
            labels = seq.masked_fill(~mask, self.pad_token_id)

        # if random token probability > 0 for mlm

        if self.random_token_prob > 0:
            assert self.num_tokens is not None, 'num_tokens keyword must be supplied when instantiating MLM if using random token replacement'
            random_token_prob = prob_mask_like(seq, self.random_token_prob)
            random_tokens = torch.randint(0, self.num_tokens, seq.shape, device=seq.device)
            random_no_mask = mask_with_tokens(random_tokens, self.mask_ignore_token_ids)
            random_token_prob &= ~random_no_mask
            masked_seq = torch.where(random_token_prob, random_tokens, masked_seq)

            # remove tokens that were substituted randomly from being [mask]ed later
            mask = mask & ~random_token_prob

        # [mask] input

        replace_prob = prob_mask_like(seq, self.replace_prob)
        if self.bug == "mask_fill_not_assigned":
            # masked_fill (not in place) without assigning its result: the chosen tokens stay visible in the input
            masked_seq.masked_fill(mask * replace_prob, self.mask_token_id)
        else:
            masked_seq = masked_seq.masked_fill(mask * replace_prob, self.mask_token_id)

        # get generator output and get mlm loss

        logits = self.transformer(masked_seq, **kwargs)

        if self.bug == "ignore_index_dropped":
            # the pad label of every unchosen position enters the loss: the model is trained to predict [pad]
            mlm_loss = F.cross_entropy(
                logits.transpose(1, 2),
                labels
            )
        else:
            mlm_loss = F.cross_entropy(
                logits.transpose(1, 2),
                labels,
                ignore_index = self.pad_token_id
            )

        return mlm_loss


# ---- stand-in for x-transformers' TransformerWrapper(attn_layers = Encoder(...)) -------------------------------

class TransformerWrapper(nn.Module):
    def __init__(self, *, num_tokens, max_seq_len, dim, depth, heads):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=dim * 4, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.attn_layers = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.to_logits = nn.Linear(dim, num_tokens)

    def forward(self, x):
        x = self.token_emb(x) + self.pos_emb(torch.arange(x.shape[1], device=x.device))
        x = self.attn_layers(x)
        return self.to_logits(self.norm(x))


# ---- data ------------------------------------------------------------------------------------------------------

def make_batch(gen):
    """[cls] + a random 4-token word repeated up to a random length + [pad]: masked tokens are predictable from the
    word's other copies."""
    data = torch.full((BATCH_SIZE, SEQ_LEN), PAD, dtype=torch.long)
    for i in range(BATCH_SIZE):
        word = torch.randint(3, NUM_TOKENS, (WORD,), generator=gen)
        length = int(torch.randint(SEQ_LEN // 2, SEQ_LEN + 1, (1,), generator=gen))
        data[i, 0] = CLS
        data[i, 1:length] = word.repeat(SEQ_LEN // WORD)[: length - 1]
    return data


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)

    # instantiate the language model

    transformer = TransformerWrapper(
        num_tokens = NUM_TOKENS,
        max_seq_len = SEQ_LEN,
        dim = 32,
        depth = 2,
        heads = 2
    )

    # plugin the language model into the MLM trainer

    trainer = MLM(
        transformer,
        mask_token_id = MASK,       # the token id reserved for masking
        pad_token_id = PAD,         # the token id for padding
        mask_prob = 0.15,           # masking probability for masked language modeling
        replace_prob = 0.90,        # ~10% probability that token will not be masked, but included in loss, as detailed in the epaper
        num_tokens = NUM_TOKENS,
        random_token_prob = 0.1,
        mask_ignore_token_ids = [CLS],  # other tokens to exclude from masking, include the [cls] and [sep] here
        bug = bug
    )

    # optimizer

    opt = Adam(trainer.parameters(), lr=3e-4)

    first = make_batch(torch.Generator().manual_seed(seed + 10_000))

    def train_step():
        # one training step (do this for many steps in a for loop, getting new `data` each time)
        trainer.train()
        data = make_batch(gen)

        loss = trainer(data)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            loss = model(batch[0])
        model.train()
        return float(loss)

    return Program(name="mlmpytorch_mlm", model=trainer, batch=(first,), loss_fn=lambda loss, _targets: loss,
                   optimizer=opt, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # labels left at every position (the masked_fill with ~mask dropped): the loss is dominated by visible tokens the
    # model only has to copy, the masked-prediction objective is diluted (classic: the mask not reaching the loss).
    Bug("labels_not_masked", functools.partial(_build, bug="labels_not_masked"), "learning_ledger", ("OBJECTIVE",)),
    # the [mask] replacement computed but not assigned: every chosen token stays in the input it must be predicted
    # from, and the model learns to copy it (classic; the same symptom as codertimo/BERT-pytorch#29).
    Bug("mask_fill_not_assigned", functools.partial(_build, bug="mask_fill_not_assigned"), "learning_ledger",
        ("DEPENDENCY",)),
    # cross_entropy without ignore_index: the pad labels of the unchosen positions are trained as targets (classic).
    Bug("ignore_index_dropped", functools.partial(_build, bug="ignore_index_dropped"), "learning_ledger",
        ("OBJECTIVE",)),
]
