"""GPT-2 pre-training from scratch with Jungyeon Lee's plain-PyTorch GPT-2: token and learned positional embeddings,
pre-LayerNorm transformer layers (multi-head attention with additive pad and future masks, Swish feed-forward),
a final LayerNorm and logits through the transposed token embedding; a tokenized corpus read line by line into
``<s> ... </s>`` sequences padded to ``seq_len`` (``input`` = tokens[:-1], ``output`` = tokens[1:]), cross-entropy
ignoring ``<pad>``, Adam(W) with weight decay 1e-2 and a linear-decay ``LambdaLR``, one optimizer step per batch
(``Trainer._train_step``).

Source: https://github.com/affjljoo3581/GPT2
Commit: 7b159669f6225231ee75f5ea110c1be69f4ce8ef
Files: src/gpt2/train_model.py, src/gpt2/training/training.py, src/gpt2/training/specification.py,
  src/gpt2/training/configuration.py, src/gpt2/modeling/ (attention.py, embedding.py, feedforward.py, masking.py,
  transformer.py), src/gpt2/data/ (corpus.py, vocabulary.py, dataset.py), src/gpt2/utils/fusing.py, README.md
  (training command)
License: Apache-2.0 (Copyright 2020 Jungyeon Lee; full text in LICENSES/affjljoo3581-GPT2.txt)
Domain: causal language model pre-training (GPT-2)

Deviations from the original:
- sizes: seq_len 64 -> 24, layers 12 -> 2, heads 16 -> 2, dims 1024 -> 32 (rate 4, dropout 0.1 as the defaults),
  batch_train/batch_eval 128 -> 8; base_lr 1e-4 -> 1e-3 (a tiny model must move within the self-check's steps),
  wd_rate 1e-2 and total_steps 1000000 (the LambdaLR decay) as the README command;
- apex is not installed: ``utils/fusing.py``'s own fallback runs (``torch.optim.AdamW`` as ``Adam``,
  ``torch.nn.LayerNorm``); the README command uses neither ``--use_amp`` nor ``--use_grad_ckpt``; CUDA calls
  (``.cuda()``, ``torch.cuda.empty_cache``) and the distributed path are dropped;
- data: the subword-tokenized corpus and vocabulary files are replaced by text made from ``seed`` and read from
  memory (``io.StringIO`` for ``open``): 40 subword tokens, each line a chain of 4-20 tokens in which every token
  follows from the one before by a fixed successor table (a random permutation), so the next token is predictable;
  ``Vocab`` and ``TokenizedCorpus`` are otherwise unchanged;
- ``Trainer._train`` (set-up) runs in ``build``, one ``train_step`` is ``Trainer._train_step``; ``eval_fn`` is
  ``_eval_step``'s ``eval_objective`` on a given batch; ``_fetch_from`` is ``dataset.fetch(batch_train)`` (its
  non-distributed path); tqdm, ``Recorder``, checkpoints and saving are left out, and with them ``TokenizedCorpus``'s
  ``skip``/``where``/``assign``; the abstract ``Dataset`` and ``TrainingSpec`` bases are dropped (the classes derive
  from ``object``) and ``TrainConfig``'s values are the module constants;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP006, UP007, UP035, UP045, UP004, PLR0402  (the original's style is kept)

from __future__ import annotations

import functools
import io
import math
import pathlib
import random
import sys
from functools import partial
from typing import Dict, Iterator, List, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.checkpoint
from torch.nn import LayerNorm
from torch.optim import AdamW as Adam

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SEQ_LEN = 24
LAYERS = 2
HEADS = 2
DIMS = 32
RATE = 4
DROPOUT = 0.1
BATCH_TRAIN = 8
BATCH_EVAL = 8
BASE_LR = 1e-3
WD_RATE = 1e-2
TOTAL_STEPS = 1000000
N_TOKENS = 40


# ---- src/gpt2/modeling/attention.py ---------------------------------------------------------------
Past = Tuple[torch.Tensor, torch.Tensor]


class BaseAttention(nn.Module):
    """
    Tensor          Type            Shape
    ===========================================================================
    q               float           (..., query_len, dims)
    k               float           (..., kv_len, dims)
    v               float           (..., kv_len, dims)
    mask            bool            (..., query_len, kv_len)
    ---------------------------------------------------------------------------
    output          float           (..., query_len, dims)
    ===========================================================================
    """
    def __init__(self, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self,
                q: torch.Tensor,
                k: torch.Tensor,
                v: torch.Tensor,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(k.size(-1))

        if mask is not None:
            x += mask.type_as(x) * x.new_tensor(-1e4)
        x = self.dropout(x.softmax(-1))

        return torch.matmul(x, v)


class MultiHeadAttention(BaseAttention):
    """
    Tensor          Type            Shape
    ===========================================================================
    q               float           (..., query_len, dims)
    k               float           (..., kv_len, dims)
    v               float           (..., kv_len, dims)
    mask            bool            (..., query_len, kv_len)
    ---------------------------------------------------------------------------
    output          float           (..., query_len, dims)
    ===========================================================================
    """
    def __init__(self, heads: int, dropout: float = 0.1):
        super().__init__(dropout)
        self.heads = heads

    def forward(self,
                q: torch.Tensor,
                k: torch.Tensor,
                v: torch.Tensor,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        # Split the tensors to multi-heads.
        q = q.view(q.size()[:-1] + (self.heads, q.size(-1) // self.heads))
        k = k.view(k.size()[:-1] + (self.heads, k.size(-1) // self.heads))
        v = v.view(v.size()[:-1] + (self.heads, v.size(-1) // self.heads))

        q = q.transpose(-3, -2)
        k = k.transpose(-3, -2)
        v = v.transpose(-3, -2)

        if mask is not None:
            mask = mask.unsqueeze(-3)

        # Calculate multi-headed attentions and merge them into one.
        return (super().forward(q, k, v, mask)
                .transpose(-3, -2)
                .contiguous()
                .view(q.size()[:-3] + (q.size(-2), v.size(-1) * self.heads)))


class AttentionLayer(nn.Module):
    """
    Tensor          Type            Shape
    ===========================================================================
    q               float           (..., query_len, dims)
    k               float           (..., kv_len, dims)
    v               float           (..., kv_len, dims)
    past (*)        float           (..., past_len, dims)
    mask            bool            (..., query_len, past_len + kv_len)
    ---------------------------------------------------------------------------
    output 1        float           (..., query_len, dims)
    output 2 (*)    float           (..., past_len + kv_len, dims)
    ===========================================================================
    """
    def __init__(self, heads: int, dims: int, dropout: float = 0.1):
        super().__init__()
        self.attn = MultiHeadAttention(heads, dropout)
        self.proj_q = nn.Linear(dims, dims)
        self.proj_k = nn.Linear(dims, dims)
        self.proj_v = nn.Linear(dims, dims)
        self.linear = nn.Linear(dims, dims)

    def forward(self,
                q: torch.Tensor,
                k: torch.Tensor,
                v: torch.Tensor,
                past: Optional[Past] = None,
                mask: Optional[torch.Tensor] = None
                ) -> Tuple[torch.Tensor, Past]:
        q, k, v = self.proj_q(q), self.proj_k(k), self.proj_v(v)

        # Reuse attention keys and values by concatenating to the current ones.
        if past is not None:
            k = torch.cat((past[0], k), dim=-2)
            v = torch.cat((past[1], v), dim=-2)

        x = self.linear(self.attn(q, k, v, mask))
        return x, (k, v)


# ---- src/gpt2/modeling/embedding.py ---------------------------------------------------------------
class PositionalEmbedding(nn.Embedding):
    """
    Tensor          Type            Shape
    ===========================================================================
    input           long            (..., seq_len)
    ---------------------------------------------------------------------------
    output          float           (..., seq_len, embedding_dim)
    ===========================================================================
    """
    def reset_parameters(self):
        nn.init.normal_(self.weight, std=0.02)

    def _load_from_state_dict(self,
                              state_dict: Dict[str, torch.Tensor],
                              prefix: str,
                              *args,
                              **kwargs):
        weight = state_dict[f'{prefix}weight']

        # Reduce or expand the positional embedding matrix to increase or
        # decrease the total sequence length.
        if weight.size(0) < self.num_embeddings:
            weight = torch.cat((weight, self.weight[weight.size(0):]), dim=0)
        elif weight.size(0) > self.num_embeddings:
            weight = weight[:self.num_embeddings]

        state_dict[f'{prefix}weight'] = weight
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        position = torch.arange(offset, offset + x.size(-1),
                                dtype=torch.long, device=x.device)
        position = position.view((1,) * (x.ndim - 1) + (-1,)).expand_as(x)

        return super().forward(position)


class TokenEmbedding(nn.Embedding):
    """
    Tensor          Type            Shape
    ===========================================================================
    input           long or float  (..., seq_len)
                                    or (..., seq_len, embedding_dim)
    ---------------------------------------------------------------------------
    output          float           (..., seq_len, embedding_dim)
                                    or (..., seq_len, num_embeddings)
    ===========================================================================
    """
    def reset_parameters(self):
        nn.init.normal_(self.weight, std=0.02)

    def forward(self,
                x: torch.Tensor,
                transposed: bool = False) -> torch.Tensor:
        if transposed:
            return torch.matmul(x, self.weight.transpose(0, 1))
        else:
            return super().forward(x)


# ---- src/gpt2/modeling/feedforward.py -------------------------------------------------------------
class Swish(nn.Module):
    """
    Tensor          Type            Shape
    ===========================================================================
    input           float           (..., dims)
    ---------------------------------------------------------------------------
    output          float           (..., dims)
    ===========================================================================
    """
    def __init__(self):
        super().__init__()
        self.sigmoid = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.sigmoid(x)


class PositionwiseFeedForward(nn.Sequential):
    """
    Tensor          Type            Shape
    ===========================================================================
    input           float           (..., dims)
    ---------------------------------------------------------------------------
    output          float           (..., dims)
    ===========================================================================
    """
    def __init__(self, dims: int, rate: int = 4, dropout: float = 0.1):
        super().__init__(
            nn.Linear(dims, dims * rate),
            Swish(),
            nn.Dropout(dropout),
            nn.Linear(dims * rate, dims))


# ---- src/gpt2/modeling/masking.py -----------------------------------------------------------------
class PadMasking(nn.Module):
    """
    Tensor          Type            Shape
    ===========================================================================
    input           long            (..., seq_len)
    ---------------------------------------------------------------------------
    output          float           (..., seq_len, seq_len + offset)
    ===========================================================================
    """
    def __init__(self, pad_idx: int):
        super().__init__()
        self.pad_idx = pad_idx

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        is_pad = (x == self.pad_idx).unsqueeze(-2)
        shifted = torch.zeros(x.size()[:-1] + (1, offset,),
                              dtype=torch.bool, device=x.device)

        mask = torch.cat((shifted, is_pad), dim=-1)
        return mask.expand(x.shape + mask.shape[-1:])


class FutureMasking(nn.Module):
    """
    Tensor          Type            Shape
    ===========================================================================
    input           long            (..., seq_len)
    ---------------------------------------------------------------------------
    output          float           (..., seq_len, seq_len + offset)
    ===========================================================================
    """
    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        seq_len = x.size(-1)

        # Create shifted upper triangular matrix.
        future = torch.ones((seq_len, seq_len + offset),
                            dtype=torch.bool, device=x.device)
        future = future.triu(offset + 1)

        mask = future.view((1,) * (x.ndim - 1) + future.size())
        return mask.expand(x.shape + mask.shape[-1:])


# ---- src/gpt2/modeling/transformer.py -------------------------------------------------------------


class TransformerLayer(nn.Module):
    """
    Tensor          Type            Shape
    ===========================================================================
    x               float           (..., seq_len, dims)
    past (*)        float           (..., past_len, dims)
    mask            bool            (..., seq_len, past_len + seq_len)
    ---------------------------------------------------------------------------
    output 1        float           (..., seq_len, dims)
    output 2 (*)    float           (..., past_len + seq_len, dims)
    ===========================================================================
    """
    def __init__(self,
                 heads: int,
                 dims: int,
                 rate: int,
                 dropout: float = 0.1):
        super().__init__()
        self.attn = AttentionLayer(heads, dims, dropout)
        self.ff = PositionwiseFeedForward(dims, rate, dropout)
        self.ln_attn = LayerNorm(dims)
        self.ln_ff = LayerNorm(dims)

    def forward(self,
                x: torch.Tensor,
                past: Optional[Past] = None,
                mask: Optional[torch.Tensor] = None,
                ) -> Union[torch.Tensor, Tuple[torch.Tensor, Past]]:
        # Layer normalizations are performed before the layers respectively.
        a = self.ln_attn(x)
        a, past = self.attn(a, a, a, past, mask)

        x = x + a
        x = x + self.ff(self.ln_ff(x))

        return x if self.training else (x, past)


class Transformer(nn.Module):
    """
    Tensor          Type            Shape
    ===========================================================================
    x               long            (..., seq_len)
    past (**)       float           (..., past_len, dims)
    ---------------------------------------------------------------------------
    output 1        float           (..., seq_len, dims)
    output 2 (**)   float           (..., past_len + seq_len, dims)
    ===========================================================================
    """
    def __init__(self,
                 layers: int,
                 pad_idx: int,
                 words: int,
                 seq_len: int,
                 heads: int,
                 dims: int,
                 rate: int = 4,
                 dropout: float = 0.1,
                 bidirectional: bool = True):
        super().__init__()
        self.bidirectional = bidirectional
        self.pad_masking = PadMasking(pad_idx)
        self.future_masking = FutureMasking()

        self.positional_embedding = PositionalEmbedding(seq_len, dims)
        self.token_embedding = TokenEmbedding(words, dims)
        self.dropout_embedding = nn.Dropout(dropout)

        self.transformers = nn.ModuleList([
            TransformerLayer(heads, dims, rate, dropout)
            for _ in range(layers)])
        self.ln_head = LayerNorm(dims)

    def forward(self,
                x: torch.Tensor,
                past: Optional[List[Past]] = None,
                use_grad_ckpt: bool = False
                ) -> Union[torch.Tensor, Tuple[torch.Tensor, List[Past]]]:
        offset = past[0][0].size(-2) if past is not None else 0

        # Create masking tensor.
        mask = self.pad_masking(x, offset)
        if not self.bidirectional:
            mask = mask + self.future_masking(x, offset)

        # Use token embedding and positional embedding layers.
        x = self.token_embedding(x) + self.positional_embedding(x, offset)
        x = self.dropout_embedding(x)

        # Apply transformer layers sequentially.
        present = []
        for i, transformer in enumerate(self.transformers):
            if self.training and use_grad_ckpt:
                transformer = partial(torch.utils.checkpoint.checkpoint,
                                      transformer)

            x = transformer(x, past[i] if past is not None else None, mask)

            if not self.training:
                present.append(x[1])
                x = x[0]

        x = self.ln_head(x)
        x = self.token_embedding(x, transposed=True)

        return x if self.training else (x, present)


# ---- src/gpt2/data/vocabulary.py -------------------------------------------------------------------------------

class Vocab(object):
    def __init__(self,
                 vocab_text: str,
                 unk_token: str = '<unk>',
                 bos_token: str = '<s>',
                 eos_token: str = '</s>',
                 pad_token: str = '<pad>'):
        self.unk_token = unk_token
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.pad_token = pad_token

        with io.StringIO(vocab_text) as fp:
            self.additional_tokens = [bos_token, eos_token, pad_token]

            # The additional tokens would be inserted before the words.
            self.words = self.additional_tokens + fp.read().split()
            self.vocab = {word: i for i, word in enumerate(self.words)}

    def __getitem__(self, idx_or_token: Union[int, str]) -> Union[str, int]:
        if isinstance(idx_or_token, str):
            return self.vocab[idx_or_token]
        else:
            return self.words[idx_or_token]

    def __contains__(self, token: str) -> bool:
        return token in self.words

    def __len__(self) -> int:
        # Note that vocabulary size must be a multiple of 8 although the actual
        # number of words is less than it.
        return (len(self.words) + 7) // 8 * 8

    @property
    def unk_idx(self) -> int:
        return self.vocab[self.unk_token]

    @property
    def bos_idx(self) -> int:
        return self.vocab[self.bos_token]

    @property
    def eos_idx(self) -> int:
        return self.vocab[self.eos_token]

    @property
    def pad_idx(self) -> int:
        return self.vocab[self.pad_token]


# ---- src/gpt2/data/corpus.py -----------------------------------------------------------------------------------

class TokenizedCorpus(object):
    def __init__(self,
                 corpus_text: str,
                 vocab: Vocab,
                 seq_len: int,
                 repeat: bool = True,
                 bug=None):
        self.corpus_fp = io.StringIO(corpus_text)
        self.vocab = vocab
        self.seq_len = seq_len
        self.repeat = repeat
        self.bug = bug

    def _fetch_one(self) -> Dict[str, List[int]]:
        while True:
            # Read subword-tokenized sequence from corpus.
            line = self.corpus_fp.readline()
            if not line:
                # Raise error when all sequences are fetched.
                if not self.repeat:
                    raise StopIteration()

                # Or, move to the first of the corpus.
                self.corpus_fp.seek(0)
                continue

            # Use token indices rather than the token names directly.
            indices = [self.vocab[t] for t in line.split()]
            if len(indices) + 2 > self.seq_len:
                continue

            # Decorate the sequence with additional tokens.
            indices = [self.vocab.bos_idx] + indices + [self.vocab.eos_idx]
            indices += [self.vocab.pad_idx] * (self.seq_len - len(indices) + 1)

            if self.bug == "output_not_shifted":
                return {'input': indices[:-1], 'output': indices[:-1]}
            return {'input': indices[:-1], 'output': indices[1:]}

    def fetch(self, batch: Optional[int] = None) -> Dict[str, torch.Tensor]:
        if batch is None:
            data = self._fetch_one()
        else:
            data = [self._fetch_one() for _ in range(batch)]
            data = {k: [d[k] for d in data] for k in data[0]}

        return {k: torch.tensor(v, dtype=torch.long) for k, v in data.items()}


# ---- src/gpt2/train_model.py -----------------------------------------------------------------------------------

class GPT2TrainingSpec(object):
    def __init__(self, train_corpus: str, eval_corpus: str, vocab_path: str,
                 seq_len: int, layers: int, heads: int, dims: int, rate: int,
                 dropout: float, base_lr: float, wd_rate: float,
                 total_steps: int, use_grad_ckpt: bool, bug=None):
        self.train_corpus = train_corpus
        self.eval_corpus = eval_corpus
        self.vocab_path = vocab_path
        self.seq_len = seq_len
        self.layers = layers
        self.heads = heads
        self.dims = dims
        self.rate = rate
        self.dropout = dropout
        self.base_lr = base_lr
        self.wd_rate = wd_rate
        self.total_steps = total_steps
        self.use_grad_ckpt = use_grad_ckpt
        self.bug = bug

    def initialize(self):
        self.vocab = Vocab(vocab_text=self.vocab_path)
        if self.bug == "pad_not_ignored":
            self.criterion = nn.CrossEntropyLoss(reduction='mean')
        else:
            self.criterion = nn.CrossEntropyLoss(ignore_index=self.vocab.pad_idx,
                                                 reduction='mean')

    def prepare_datasets(self) -> Tuple[TokenizedCorpus, TokenizedCorpus]:
        train_dataset = TokenizedCorpus(corpus_text=self.train_corpus,
                                        vocab=self.vocab,
                                        seq_len=self.seq_len, bug=self.bug)
        eval_dataset = TokenizedCorpus(corpus_text=self.eval_corpus,
                                       vocab=self.vocab,
                                       seq_len=self.seq_len, bug=self.bug)
        return train_dataset, eval_dataset

    def construct_model(self) -> nn.Module:
        if self.bug == "bidirectional_left_default":
            # the Transformer's own default (bidirectional=True) kept: no future mask
            return Transformer(layers=self.layers, pad_idx=self.vocab.pad_idx,
                               words=len(self.vocab), seq_len=self.seq_len,
                               heads=self.heads, dims=self.dims, rate=self.rate,
                               dropout=self.dropout)
        return Transformer(layers=self.layers, pad_idx=self.vocab.pad_idx,
                           words=len(self.vocab), seq_len=self.seq_len,
                           heads=self.heads, dims=self.dims, rate=self.rate,
                           dropout=self.dropout, bidirectional=False)

    def create_optimizer(self, params: Iterator[nn.Parameter]
                         ) -> Tuple[optim.Optimizer,
                                    optim.lr_scheduler._LRScheduler]:
        optimizer = Adam(
            params, lr=self.base_lr, weight_decay=self.wd_rate)
        scheduler = optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: 1 - step / self.total_steps)
        return optimizer, scheduler

    def train_objective(self, data: Dict[str, torch.Tensor], model: nn.Module
                        ) -> Dict[str, torch.Tensor]:
        logits = model(data['input'], use_grad_ckpt=self.use_grad_ckpt)
        loss = self.criterion(logits.transpose(1, 2), data['output'])
        return {'loss': loss}

    def eval_objective(self, data: Dict[str, torch.Tensor], model: nn.Module
                       ) -> Dict[str, torch.Tensor]:
        logits, _ = model(data['input'], past=None)
        loss = self.criterion(logits.transpose(1, 2), data['output'])
        return {'loss': loss}


# ---- synthetic tokenized corpus --------------------------------------------------------------------------------

def make_corpus(rng, lines):
    """40 subword tokens; each line a chain of 4-20 tokens, each the successor (a fixed random permutation) of the
    one before. Returns (vocab text, successor table, a function making corpus text of n lines)."""
    tokens = [f"_t{i}" for i in range(N_TOKENS)]
    succ = rng.permutation(N_TOKENS)

    def corpus(n):
        out = []
        for _ in range(n):
            k = int(rng.integers(0, N_TOKENS))
            chain = []
            for _ in range(int(rng.integers(4, 21))):
                chain.append(tokens[k])
                k = int(succ[k])
            out.append(' '.join(chain))
        return '\n'.join(out) + '\n'

    return '\n'.join(tokens) + '\n', corpus(lines), corpus(64)


# ---- src/gpt2/training/training.py (Trainer) -------------------------------------------------------------------

def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    vocab_text, train_text, eval_text = make_corpus(rng, 512)

    spec = GPT2TrainingSpec(
        train_corpus=train_text, eval_corpus=eval_text,
        vocab_path=vocab_text, seq_len=SEQ_LEN, layers=LAYERS,
        heads=HEADS, dims=DIMS, rate=RATE, dropout=DROPOUT,
        base_lr=BASE_LR, wd_rate=WD_RATE,
        total_steps=TOTAL_STEPS, use_grad_ckpt=False, bug=bug)

    # Initialize training environment and prepare datasets.
    spec.initialize()
    train_dataset, eval_dataset = spec.prepare_datasets()

    # Construct a model and load its pretrained weights.
    model = spec.construct_model()

    # Create an optimizer and learning rate scheduler.
    optimizer, scheduler = spec.create_optimizer(model.parameters())

    def train_step():
        model.train()
        optimizer.zero_grad()

        data = train_dataset.fetch(BATCH_TRAIN)
        metrics = spec.train_objective(data, model)
        loss = metrics['loss']

        loss.backward()

        optimizer.step()
        scheduler.step()

        return {k: v.item() for k, v in metrics.items()}['loss']

    @torch.no_grad()
    def eval_fn(model, batch):
        """_eval_step: eval_objective on a given batch."""
        model.eval()
        inputs, outputs = batch
        metrics = spec.eval_objective({'input': inputs, 'output': outputs}, model)
        return metrics['loss'].item()

    def loss_fn(logits, outputs):
        return spec.criterion(logits.transpose(1, 2), outputs)

    first = eval_dataset.fetch(BATCH_EVAL)
    return Program(name="gpt2jlee_pretrain", model=model, batch=(first['input'], first['output']), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # classic: the Transformer built without bidirectional=False (its own default is True): no future mask, every
    # position attends to the tokens it must predict.
    Bug("bidirectional_left_default", functools.partial(_build, bug="bidirectional_left_default"),
        "learning_ledger", ("DEPENDENCY",)),
    # classic: CrossEntropyLoss without ignore_index=pad_idx: the padding after </s> is scored as tokens to predict.
    Bug("pad_not_ignored", functools.partial(_build, bug="pad_not_ignored"), "learning_ledger", ("OBJECTIVE",)),
    # classic: the corpus's output taken from the same slice as the input (indices[:-1]): the labels are not shifted.
    Bug("output_not_shifted", functools.partial(_build, bug="output_not_shifted"), "learning_ledger", ("TASK",)),
]
