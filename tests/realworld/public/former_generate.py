"""Peter Bloem's ``former``: a character-level generating transformer (``GTransformer``: token + position embeddings,
post-norm blocks of canonical multi-head self-attention with the autoregressive mask, ReLU feed-forward, log-softmax
output) trained by ``experiments/generate.py``: random subsequences of enwik8 as inputs, the same subsequences shifted
one position as targets, ``F.nll_loss`` on the log-probabilities, Adam lr 1e-4 with a linear warmup
(``LambdaLR``, per batch), gradient clipping at 1.0.

Source: https://github.com/pbloem/former
Commit: ad9cc703b0b82a24a12e777f5946296f352c9d11
Files: experiments/generate.py, former/transformers.py, former/modules.py, former/util/util.py
License: MIT (Copyright (c) 2019 Peter Bloem)
Domain: causal language model (character level, plain loop)

Deviations from the original:
- sizes: embedding 128 -> 32, heads 8 -> 2, depth 12 -> 2, context 256 -> 32, batch size 32 -> 16,
  lr_warmup 5000 -> 160 instances (10 batches instead of 156, so the warmup ends within the 30 self-check steps),
  lr 1e-4 -> 1e-3 (30 steps instead of a million);
- data: enwik8 is replaced by a synthetic byte stream made from ``seed`` (lower-case "words" of 3-6 bytes, each
  repeated 3-6 times, so a byte is predictable from the bytes before it); ``sample_batch`` is unchanged;
- only the ``attention_type='default'`` path (``SelfAttention``) is copied; ``d()`` is written as ``'cpu'``;
- one ``train_step`` is one iteration of the training loop; TensorBoard logging, the timing calls, sampling and the
  bits-per-byte validation are left out (``eval_fn`` is the mean nll on a given batch, under ``no_grad``).
"""
# ruff: noqa: B006, PLW0127, TRY002

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NUM_TOKENS = 256
EMB, HEADS, DEPTH, CONTEXT, BATCH_SIZE = 32, 2, 2, 32, 16
LR, LR_WARMUP, GRADIENT_CLIPPING = 1e-3, 160, 1.0


# ---- former/util/util.py ----------------------------------------------------------------------------------------

def mask_(matrices, maskval=0.0, mask_diagonal=True):
    """
    Masks out all values in the given batch of matrices where i <= j holds,
    i < j if mask_diagonal is false

    In place operation
    """

    h, w = matrices.size(-2), matrices.size(-1)

    indices = torch.triu_indices(h, w, offset=0 if mask_diagonal else 1)
    matrices[..., indices[0], indices[1]] = maskval


def d(tensor=None):
    return 'cpu'


# ---- former/modules.py --------------------------------------------------------------------------------------------

class SelfAttention(nn.Module):
    """
    Canonical implementation of multi-head self attention.
    """

    def __init__(self, emb, heads=8, mask=False, kqnorm=False, scalefactor=None):
        super().__init__()

        assert emb % heads == 0, f'Embedding dimension ({emb}) should be divisible by nr. of heads ({heads})'

        self.emb = emb
        self.heads = heads
        self.mask = mask

        s = emb // heads
        # - We will break the embedding into `heads` chunks and feed each to a different attention head

        self.tokeys    = nn.Linear(emb, emb, bias=False)
        self.toqueries = nn.Linear(emb, emb, bias=False)
        self.tovalues  = nn.Linear(emb, emb, bias=False)

        self.unifyheads = nn.Linear(emb, emb)

        self.kqnorm = kqnorm
        if kqnorm:
            self.kln = nn.LayerNorm([s])
            self.qln = nn.LayerNorm([s])

        self.scalefactor = 1/math.sqrt(emb // heads) if scalefactor is None else scalefactor

    def forward(self, x):

        b, t, e = x.size()
        h = self.heads
        assert e == self.emb, f'Input embedding dim ({e}) should match layer embedding dim ({self.emb})'

        s = e // h

        keys    = self.tokeys(x)
        queries = self.toqueries(x)
        values  = self.tovalues(x)

        keys    = keys.view(b, t, h, s)
        queries = queries.view(b, t, h, s)
        values  = values.view(b, t, h, s)

        if self.kqnorm:
            keys = self.kln(keys)
            queries = self.qln(queries)

        # - fold heads into the batch dimension
        keys = keys.transpose(1, 2).contiguous().view(b * h, t, s)
        queries = queries.transpose(1, 2).contiguous().view(b * h, t, s)
        values = values.transpose(1, 2).contiguous().view(b * h, t, s)

        queries = queries
        keys    = keys

        # - get dot product of queries and keys, and scale
        dot = torch.bmm(queries, keys.transpose(1, 2))
        dot = dot * self.scalefactor

        assert dot.size() == (b*h, t, t)

        if self.mask: # mask out the upper half of the dot matrix, excluding the diagonal
            mask_(dot, maskval=float('-inf'), mask_diagonal=False)

        dot = F.softmax(dot, dim=2)
        # -- dot now has row-wise self-attention probabilities

        # apply the self attention to the values
        out = torch.bmm(dot, values).view(b, h, t, s)

        # swap h, t back, unify heads
        out = out.transpose(1, 2).contiguous().view(b, t, s * h)

        return self.unifyheads(out)


class TransformerBlock(nn.Module):
    """
    A straightforward transformer block.
    """

    def __init__(self, emb, heads, mask, seq_length, ff_hidden_mult=4, dropout=0.0, attention_type='default',
                 pos_embedding=None, sa_kwargs={}):
        super().__init__()

        if attention_type == 'default':
            self.attention = SelfAttention(emb, heads=heads, mask=mask, **sa_kwargs)
        else:
            raise Exception(f'Self-attention type {type} not recognized.')

        self.mask = mask

        self.norm1 = nn.LayerNorm(emb)
        self.norm2 = nn.LayerNorm(emb)

        self.ff = nn.Sequential(

            nn.Linear(emb, ff_hidden_mult * emb),
            nn.ReLU(),
            nn.Linear(ff_hidden_mult * emb, emb)
        )

        self.do = nn.Dropout(dropout)

    def forward(self, x):

        attended = self.attention(x)

        x = self.norm1(attended + x)

        x = self.do(x)

        fedforward = self.ff(x)

        x = self.norm2(fedforward + x)

        x = self.do(x)

        return x


# ---- former/transformers.py ---------------------------------------------------------------------------------------

class GTransformer(nn.Module):
    """
    Transformer for generating text (character by character).
    """

    def __init__(self, emb, heads, depth, seq_length, num_tokens, attention_type='default', bug=None):

        super().__init__()

        self.num_tokens = num_tokens
        self.token_embedding = nn.Embedding(embedding_dim=emb, num_embeddings=num_tokens)
        self.pos_embedding = nn.Embedding(embedding_dim=emb, num_embeddings=(seq_length * 2 - 1 if attention_type=='relative' else seq_length))

        # the causal mask forgotten: the blocks built with mask=False, as the classifier's blocks are
        mask = bug != "blocks_without_mask"

        tblocks = []
        for i in range(depth):
            tblocks.append(
                TransformerBlock(emb=emb, heads=heads, seq_length=seq_length, mask=mask, attention_type=attention_type, pos_embedding=self.pos_embedding))

        self.tblocks = nn.Sequential(*tblocks)

        self.toprobs = nn.Linear(emb, num_tokens)
        self.bug = bug

    def forward(self, x):
        """
        :param x: A (batch, sequence length) integer tensor of token indices.
        :return: predicted log-probability vectors for each token based on the preceding tokens.
        """
        tokens = self.token_embedding(x)
        b, t, e = tokens.size()

        positions = self.pos_embedding(torch.arange(t, device=d()))[None, :, :].expand(b, t, e)
        x = tokens + positions

        x = self.tblocks(x)

        x = self.toprobs(x.view(b*t, e)).view(b, t, self.num_tokens)

        if self.bug == "log_softmax_over_time":
            # normalised over the sequence axis instead of the vocabulary
            return F.log_softmax(x, dim=1)
        return F.log_softmax(x, dim=2)


# ---- experiments/generate.py --------------------------------------------------------------------------------------

def sample_batch(data, length, batch_size, bug=None):
    """
    Takes the data (a single sequence of tokens) and slices out a batch of subsequences to provide as input to the model.
    """

    # Sample the starting indices of the sequences to slice out.
    starts = torch.randint(size=(batch_size,), low=0, high=data.size(0) - length - 1)

    # Slice out the input sequences
    seqs_inputs  = [data[start:start + length] for start in starts]
    # -- the start index is the one we just sampled, and the end is exactly 'lentgh' positions after that.
    if bug == "target_not_shifted":
        seqs_target = [data[start:start + length] for start in starts]
    else:
        seqs_target = [data[start + 1:start + length + 1] for start in starts]
    # -- The target is the same sequence as input, except one character ahead (we are asking the model to predict the
    #    next character at each position)

    # We now have two lists of torch vectors, which we can concatenate into matrices of batch_size-by-length
    inputs = torch.cat([s[None, :] for s in seqs_inputs], dim=0).to(torch.long)
    target = torch.cat([s[None, :] for s in seqs_target], dim=0).to(torch.long)
    # -- Note that we add a singleton dimenson to each vector, s[None.,:], and then concatenate along that dimension.

    return inputs, target


def make_bytes(gen, n):
    """Lower-case words of 3-6 bytes, each repeated 3-6 times: after a word's first occurrence its bytes repeat."""
    out = []
    while len(out) < n:
        word = torch.randint(97, 123, (int(torch.randint(3, 7, (1,), generator=gen)),), generator=gen).tolist()
        out.extend((word + [32]) * int(torch.randint(3, 7, (1,), generator=gen)))
    return torch.tensor(out[:n], dtype=torch.uint8)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    data_train = make_bytes(gen, 20000)

    # create the model
    model = GTransformer(emb=EMB, heads=HEADS, depth=DEPTH, seq_length=CONTEXT, num_tokens=NUM_TOKENS, attention_type='default', bug=bug)

    opt = torch.optim.Adam(lr=LR, params=model.parameters())

    # Linear learning rate warmup
    sch = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(i / (LR_WARMUP / BATCH_SIZE), 1.0))

    first = sample_batch(data_train, length=CONTEXT, batch_size=BATCH_SIZE, bug=bug)

    def train_step():
        opt.zero_grad()

        source, target = sample_batch(data_train, length=CONTEXT, batch_size=BATCH_SIZE, bug=bug)

        output = model(source) # forward pass

        # Compute the loss
        loss = F.nll_loss(output.transpose(2, 1), target, reduction='mean')

        loss.backward() # backward pass

        # clip gradients
        # -- If the total gradient vector has a length > x, we clip it back down to x.
        if GRADIENT_CLIPPING > 0.0:
            nn.utils.clip_grad_norm_(model.parameters(), GRADIENT_CLIPPING)

        opt.step() # stochastic gradient descent step
        sch.step() # update the learning rate
        return loss.detach()

    def eval_fn(model, batch):
        with torch.no_grad():
            output = model(batch[0])
            return float(F.nll_loss(output.transpose(2, 1), batch[1], reduction='mean'))

    return Program(name="former_generate", model=model, batch=first,
                   loss_fn=lambda output, target: F.nll_loss(output.transpose(2, 1), target, reduction='mean'),
                   optimizer=opt, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # targets sliced from the same positions as the inputs (the one-position shift dropped): the model learns to copy.
    Bug("target_not_shifted", functools.partial(_build, bug="target_not_shifted"), "learning_ledger", ("TASK",)),
    # the generator's blocks built with mask=False (as CTransformer's): every position sees the byte it must predict.
    Bug("blocks_without_mask", functools.partial(_build, bug="blocks_without_mask"), "learning_ledger",
        ("DEPENDENCY",)),
    # log_softmax over the sequence axis (dim=1) instead of the vocabulary: nll on values that are not the model's
    # next-byte log-probabilities.
    Bug("log_softmax_over_time", functools.partial(_build, bug="log_softmax_over_time"), "learning_ledger",
        ("OBJECTIVE",)),
]
