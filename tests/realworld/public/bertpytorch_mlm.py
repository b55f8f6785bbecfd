"""BERT pre-training as in codertimo/BERT-pytorch: a BERT encoder (token + sinusoidal position + segment embeddings,
pre-norm transformer blocks with a hand-written LayerNorm and GELU), the BERTLM heads (next-sentence prediction and
masked LM, both LogSoftmax), NLL losses summed, Adam(lr 1e-3, betas (0.9, 0.999), weight_decay 0.01) driven by the
repository's ``ScheduledOptim`` (inverse-square-root schedule with warm-up, which sets the lr every step), and the
BERTDataset's masking (15% of the tokens: 80% [MASK], 10% random, 10% kept) and 50% random next sentences.

Source: https://github.com/codertimo/BERT-pytorch
Commit: d10dc4f9d5a6f2ca74380f62039526eb7277c671
Files: bert_pytorch/trainer/pretrain.py, bert_pytorch/trainer/optim_schedule.py, bert_pytorch/model/*.py,
       bert_pytorch/model/{attention,embedding,utils}/*.py, bert_pytorch/dataset/dataset.py, bert_pytorch/__main__.py
License: Apache-2.0
Domain: masked language model (with next-sentence prediction)

Deviations from the original:
- sizes: hidden 256 -> 32, layers 8 -> 2, attention heads 8 -> 2, batch 64 -> 16 (seq_len 20 unchanged);
  warmup_steps 10000 -> 100, so that the schedule's warm-up fits a run of tens of steps instead of ten epochs;
- the next-sentence loss: the trainer uses one ``nn.NLLLoss(ignore_index=0)`` for both heads, so every "is not next"
  example (label 0) is ignored by the NSP loss (issues #49 and #98, PR #77; the author agreed it must change). The
  correct program gives NSP its own ``nn.NLLLoss()`` and keeps ``ignore_index=0`` (the padding/unmasked label) for
  the masked LM; the original line is the bug variant ``nsp_ignore_index_0``;
- data: a synthetic corpus of "sentence1\\tsentence2" lines made from ``seed``: sentence1 repeats one word of a ring
  of 40 words (w0 .. w39) 3-8 times and sentence2 repeats the next word of the ring, so a masked word follows from
  its neighbours and "is next" from the two words; the vocabulary is a fixed ``WordVocab``-shaped object with
  the repository's special indices (pad 0, unk 1, eos 2, sos 3, mask 4); the dataset class is unchanged except that
  it draws from a ``random.Random(seed)`` instance instead of the global ``random`` module;
- the DataLoader has no worker processes (num_workers 5 -> 0), no CUDA/DataParallel, no tqdm, no checkpoint saving;
- one ``train_step`` is one iteration of ``BERTTrainer.iteration`` with ``train=True`` (forward, both losses,
  ``zero_grad``, backward, ``step_and_update_lr``).
"""
# ruff: noqa: PLR0402, RUF059, UP008, UP039  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import Adam
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

HIDDEN, LAYERS, HEADS, SEQ_LEN, BATCH_SIZE = 32, 2, 2, 20, 16
RING = 40
WARMUP_STEPS = 100


# ---- bert_pytorch/model/attention ----------------------------------------------------------------------------

class Attention(nn.Module):
    """
    Compute 'Scaled Dot Product Attention
    """

    def forward(self, query, key, value, mask=None, dropout=None):
        scores = torch.matmul(query, key.transpose(-2, -1)) \
                 / math.sqrt(query.size(-1))

        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)

        p_attn = F.softmax(scores, dim=-1)

        if dropout is not None:
            p_attn = dropout(p_attn)

        return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    """
    Take in model size and number of heads.
    """

    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        assert d_model % h == 0

        # We assume d_v always equals d_k
        self.d_k = d_model // h
        self.h = h

        self.linear_layers = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(3)])
        self.output_linear = nn.Linear(d_model, d_model)
        self.attention = Attention()

        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        batch_size = query.size(0)

        # 1) Do all the linear projections in batch from d_model => h x d_k
        query, key, value = [l(x).view(batch_size, -1, self.h, self.d_k).transpose(1, 2)
                             for l, x in zip(self.linear_layers, (query, key, value))]

        # 2) Apply attention on all the projected vectors in batch.
        x, attn = self.attention(query, key, value, mask=mask, dropout=self.dropout)

        # 3) "Concat" using a view and apply a final linear.
        x = x.transpose(1, 2).contiguous().view(batch_size, -1, self.h * self.d_k)

        return self.output_linear(x)


# ---- bert_pytorch/model/utils --------------------------------------------------------------------------------

class GELU(nn.Module):
    """
    Paper Section 3.4, last paragraph notice that BERT used the GELU instead of RELU
    """

    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


class PositionwiseFeedForward(nn.Module):
    "Implements FFN equation."

    def __init__(self, d_model, d_ff, dropout=0.1):
        super(PositionwiseFeedForward, self).__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = GELU()

    def forward(self, x):
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


class LayerNorm(nn.Module):
    "Construct a layernorm module (See citation for details)."

    def __init__(self, features, eps=1e-6):
        super(LayerNorm, self).__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


class SublayerConnection(nn.Module):
    """
    A residual connection followed by a layer norm.
    Note for code simplicity the norm is first as opposed to last.
    """

    def __init__(self, size, dropout):
        super(SublayerConnection, self).__init__()
        self.norm = LayerNorm(size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        "Apply residual connection to any sublayer with the same size."
        return x + self.dropout(sublayer(self.norm(x)))


# ---- bert_pytorch/model/embedding ----------------------------------------------------------------------------

class TokenEmbedding(nn.Embedding):
    def __init__(self, vocab_size, embed_size=512):
        super().__init__(vocab_size, embed_size, padding_idx=0)


class PositionalEmbedding(nn.Module):

    def __init__(self, d_model, max_len=512):
        super().__init__()

        # Compute the positional encodings once in log space.
        pe = torch.zeros(max_len, d_model).float()
        pe.require_grad = False

        position = torch.arange(0, max_len).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()

        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)

        pe = pe.unsqueeze(0)
        self.register_buffer('pe', pe)

    def forward(self, x):
        return self.pe[:, :x.size(1)]


class SegmentEmbedding(nn.Embedding):
    def __init__(self, embed_size=512):
        super().__init__(3, embed_size, padding_idx=0)


class BERTEmbedding(nn.Module):
    """
    BERT Embedding which is consisted with under features
        1. TokenEmbedding : normal embedding matrix
        2. PositionalEmbedding : adding positional information using sin, cos
        2. SegmentEmbedding : adding sentence segment info, (sent_A:1, sent_B:2)

        sum of all these features are output of BERTEmbedding
    """

    def __init__(self, vocab_size, embed_size, dropout=0.1):
        super().__init__()
        self.token = TokenEmbedding(vocab_size=vocab_size, embed_size=embed_size)
        self.position = PositionalEmbedding(d_model=self.token.embedding_dim)
        self.segment = SegmentEmbedding(embed_size=self.token.embedding_dim)
        self.dropout = nn.Dropout(p=dropout)
        self.embed_size = embed_size

    def forward(self, sequence, segment_label):
        x = self.token(sequence) + self.position(sequence) + self.segment(segment_label)
        return self.dropout(x)


# ---- bert_pytorch/model/transformer.py, bert.py, language_model.py ---------------------------------------------

class TransformerBlock(nn.Module):
    """
    Bidirectional Encoder = Transformer (self-attention)
    Transformer = MultiHead_Attention + Feed_Forward with sublayer connection
    """

    def __init__(self, hidden, attn_heads, feed_forward_hidden, dropout):
        super().__init__()
        self.attention = MultiHeadedAttention(h=attn_heads, d_model=hidden)
        self.feed_forward = PositionwiseFeedForward(d_model=hidden, d_ff=feed_forward_hidden, dropout=dropout)
        self.input_sublayer = SublayerConnection(size=hidden, dropout=dropout)
        self.output_sublayer = SublayerConnection(size=hidden, dropout=dropout)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, mask):
        x = self.input_sublayer(x, lambda _x: self.attention.forward(_x, _x, _x, mask=mask))
        x = self.output_sublayer(x, self.feed_forward)
        return self.dropout(x)


class BERT(nn.Module):
    """
    BERT model : Bidirectional Encoder Representations from Transformers.
    """

    def __init__(self, vocab_size, hidden=768, n_layers=12, attn_heads=12, dropout=0.1):
        super().__init__()
        self.hidden = hidden
        self.n_layers = n_layers
        self.attn_heads = attn_heads

        # paper noted they used 4*hidden_size for ff_network_hidden_size
        self.feed_forward_hidden = hidden * 4

        # embedding for BERT, sum of positional, segment, token embeddings
        self.embedding = BERTEmbedding(vocab_size=vocab_size, embed_size=hidden)

        # multi-layers transformer blocks, deep network
        self.transformer_blocks = nn.ModuleList(
            [TransformerBlock(hidden, attn_heads, hidden * 4, dropout) for _ in range(n_layers)])

    def forward(self, x, segment_info):
        # attention masking for padded token
        # torch.ByteTensor([batch_size, 1, seq_len, seq_len)
        mask = (x > 0).unsqueeze(1).repeat(1, x.size(1), 1).unsqueeze(1)

        # embedding the indexed sequence to sequence of vectors
        x = self.embedding(x, segment_info)

        # running over multiple transformer blocks
        for transformer in self.transformer_blocks:
            x = transformer.forward(x, mask)

        return x


class NextSentencePrediction(nn.Module):
    """
    2-class classification model : is_next, is_not_next
    """

    def __init__(self, hidden):
        super().__init__()
        self.linear = nn.Linear(hidden, 2)
        self.softmax = nn.LogSoftmax(dim=-1)

    def forward(self, x):
        return self.softmax(self.linear(x[:, 0]))


class MaskedLanguageModel(nn.Module):
    """
    predicting origin token from masked input sequence
    n-class classification problem, n-class = vocab_size
    """

    def __init__(self, hidden, vocab_size):
        super().__init__()
        self.linear = nn.Linear(hidden, vocab_size)
        self.softmax = nn.LogSoftmax(dim=-1)

    def forward(self, x):
        return self.softmax(self.linear(x))


class BERTLM(nn.Module):
    """
    BERT Language Model
    Next Sentence Prediction Model + Masked Language Model
    """

    def __init__(self, bert: BERT, vocab_size):
        super().__init__()
        self.bert = bert
        self.next_sentence = NextSentencePrediction(self.bert.hidden)
        self.mask_lm = MaskedLanguageModel(self.bert.hidden, vocab_size)

    def forward(self, x, segment_label):
        x = self.bert(x, segment_label)
        return self.next_sentence(x), self.mask_lm(x)


# ---- bert_pytorch/trainer/optim_schedule.py ------------------------------------------------------------------

class ScheduledOptim():
    '''A simple wrapper class for learning rate scheduling'''

    def __init__(self, optimizer, d_model, n_warmup_steps):
        self._optimizer = optimizer
        self.n_warmup_steps = n_warmup_steps
        self.n_current_steps = 0
        self.init_lr = np.power(d_model, -0.5)

    def step_and_update_lr(self):
        "Step with the inner optimizer"
        self._update_learning_rate()
        self._optimizer.step()

    def zero_grad(self):
        "Zero out the gradients by the inner optimizer"
        self._optimizer.zero_grad()

    def _get_lr_scale(self):
        return np.min([
            np.power(self.n_current_steps, -0.5),
            np.power(self.n_warmup_steps, -1.5) * self.n_current_steps])

    def _update_learning_rate(self):
        ''' Learning rate scheduling per step '''

        self.n_current_steps += 1
        lr = self.init_lr * self._get_lr_scale()

        for param_group in self._optimizer.param_groups:
            param_group['lr'] = lr


# ---- bert_pytorch/dataset ------------------------------------------------------------------------------------

class RingVocab:
    """The WordVocab interface the dataset uses, over the words w0 .. w{RING-1}, with WordVocab's special indices."""

    def __init__(self):
        self.pad_index, self.unk_index, self.eos_index, self.sos_index, self.mask_index = 0, 1, 2, 3, 4
        self.itos = ["<pad>", "<unk>", "<eos>", "<sos>", "<mask>"] + [f"w{i}" for i in range(RING)]
        self.stoi = {tok: i for i, tok in enumerate(self.itos)}

    def __len__(self):
        return len(self.itos)


def make_corpus(gen, n_lines):
    """Lines "sentence1\\tsentence2": sentence1 repeats one word of the ring 3-8 times, sentence2 repeats the next
    word of the ring 3-8 times."""
    lines = []
    for _ in range(n_lines):
        a = int(torch.randint(RING, (1,), generator=gen))
        n1, n2 = (int(v) for v in torch.randint(3, 9, (2,), generator=gen))
        lines.append([" ".join([f"w{a}"] * n1), " ".join([f"w{(a + 1) % RING}"] * n2)])
    return lines


class BERTDataset(Dataset):
    def __init__(self, lines, vocab, seq_len, seed, bug=None):
        self.vocab = vocab
        self.seq_len = seq_len
        self.lines = lines
        self.corpus_lines = len(self.lines)
        self.random = random.Random(seed)
        self.bug = bug

    def __len__(self):
        return self.corpus_lines

    def __getitem__(self, item):
        t1, t2, is_next_label = self.random_sent(item)
        t1_random, t1_label = self.random_word(t1)
        t2_random, t2_label = self.random_word(t2)

        # [CLS] tag = SOS tag, [SEP] tag = EOS tag
        t1 = [self.vocab.sos_index] + t1_random + [self.vocab.eos_index]
        t2 = t2_random + [self.vocab.eos_index]

        t1_label = [self.vocab.pad_index] + t1_label + [self.vocab.pad_index]
        t2_label = t2_label + [self.vocab.pad_index]

        segment_label = ([1 for _ in range(len(t1))] + [2 for _ in range(len(t2))])[:self.seq_len]
        bert_input = (t1 + t2)[:self.seq_len]
        bert_label = (t1_label + t2_label)[:self.seq_len]

        padding = [self.vocab.pad_index for _ in range(self.seq_len - len(bert_input))]
        bert_input.extend(padding), bert_label.extend(padding), segment_label.extend(padding)

        output = {"bert_input": bert_input,
                  "bert_label": bert_label,
                  "segment_label": segment_label,
                  "is_next": is_next_label}

        return {key: torch.tensor(value) for key, value in output.items()}

    def random_word(self, sentence):
        tokens = sentence.split()
        output_label = []

        for i, token in enumerate(tokens):
            prob = self.random.random()
            if prob < 0.15 and self.bug == "mask_never_applied":
                # the conditions of commit 7b145dc (fixed in ed68f5a, "really fix conditions #13"; issue #29):
                # `prob < prob * 0.8` is never true, so 90% of the selected tokens stay visible with their label
                if prob < prob * 0.8:
                    tokens[i] = self.vocab.mask_index
                elif 0.15 * 0.8 <= prob < 0.15 * 0.9:
                    tokens[i] = self.random.randrange(len(self.vocab))
                else:
                    tokens[i] = self.vocab.stoi.get(token, self.vocab.unk_index)

                output_label.append(self.vocab.stoi.get(token, self.vocab.unk_index))

            elif prob < 0.15:
                prob /= 0.15

                # 80% randomly change token to mask token
                if prob < 0.8:
                    tokens[i] = self.vocab.mask_index

                # 10% randomly change token to random token
                elif prob < 0.9:
                    tokens[i] = self.random.randrange(len(self.vocab))

                # 10% randomly change token to current token
                else:
                    tokens[i] = self.vocab.stoi.get(token, self.vocab.unk_index)

                output_label.append(self.vocab.stoi.get(token, self.vocab.unk_index))

            else:
                tokens[i] = self.vocab.stoi.get(token, self.vocab.unk_index)
                output_label.append(0)

        return tokens, output_label

    def random_sent(self, index):
        t1, t2 = self.get_corpus_line(index)

        # output_text, label(isNotNext:0, isNext:1)
        if self.random.random() > 0.5:
            return t1, t2, 1
        else:
            return t1, self.get_random_line(), 0

    def get_corpus_line(self, item):
        return self.lines[item][0], self.lines[item][1]

    def get_random_line(self):
        return self.lines[self.random.randrange(len(self.lines))][1]


# ---- bert_pytorch/__main__.py + trainer/pretrain.py ----------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    vocab = RingVocab()
    train_dataset = BERTDataset(make_corpus(gen, 256), vocab, seq_len=SEQ_LEN, seed=seed, bug=bug)
    train_data_loader = DataLoader(train_dataset, batch_size=BATCH_SIZE, num_workers=0)

    bert = BERT(len(vocab), hidden=HIDDEN, n_layers=LAYERS, attn_heads=HEADS)

    # BERTTrainer.__init__
    model = BERTLM(bert, len(vocab))
    optim = Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01)
    optim_schedule = ScheduledOptim(optim, bert.hidden, n_warmup_steps=WARMUP_STEPS)
    # Using Negative Log Likelihood Loss function for predicting the masked_token
    criterion = nn.NLLLoss(ignore_index=0)
    nsp_criterion = criterion if bug == "nsp_ignore_index_0" else nn.NLLLoss()

    def loss_fn(outputs, targets):
        next_sent_output, mask_lm_output = outputs
        is_next, bert_label = targets
        next_loss = nsp_criterion(next_sent_output, is_next)
        mask_loss = criterion(mask_lm_output.transpose(1, 2), bert_label)
        return next_loss + mask_loss

    state = {"it": None}

    def next_data():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):  # a new epoch
            state["it"] = iter(train_data_loader)
            return next(state["it"])

    def train_step():
        data = next_data()

        # 1. forward the next_sentence_prediction and masked_lm model
        next_sent_output, mask_lm_output = model.forward(data["bert_input"], data["segment_label"])

        # 2-1. NLL(negative log likelihood) loss of is_next classification result
        next_loss = nsp_criterion(next_sent_output, data["is_next"])

        # 2-2. NLLLoss of predicting masked token word
        mask_loss = criterion(mask_lm_output.transpose(1, 2), data["bert_label"])

        # 2-3. Adding next_loss and mask_loss : 3.4 Pre-training Procedure
        loss = next_loss + mask_loss

        # 3. backward and optimization only in train
        optim_schedule.zero_grad()
        loss.backward()
        optim_schedule.step_and_update_lr()
        return loss.detach()

    first = next(iter(DataLoader(BERTDataset(train_dataset.lines, vocab, SEQ_LEN, seed + 10_000), batch_size=BATCH_SIZE)))
    batch = ({"x": first["bert_input"], "segment_label": first["segment_label"]}, (first["is_next"], first["bert_label"]))
    return Program(name="bertpytorch_mlm", model=model, batch=batch, loss_fn=loss_fn, optimizer=optim,
                   train_step=train_step, loader=train_data_loader)


build = functools.partial(_build)

BUGS = [
    # the original trainer: one NLLLoss(ignore_index=0) for both heads, so every "is not next" label (0) is ignored
    # and the NSP head only ever learns "is next". https://github.com/codertimo/BERT-pytorch/issues/49 (and #98)
    Bug("nsp_ignore_index_0", functools.partial(_build, bug="nsp_ignore_index_0"), "learning_ledger", ("OBJECTIVE",)),
    # the masking conditions of commit 7b145dc: `if prob < prob * 0.8` never holds, the selected tokens stay in the
    # input with their label, and the masked LM learns to copy. https://github.com/codertimo/BERT-pytorch/issues/29
    Bug("mask_never_applied", functools.partial(_build, bug="mask_never_applied"), "learning_ledger", ("DEPENDENCY",)),
]
