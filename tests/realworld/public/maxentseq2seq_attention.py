# ruff: noqa: PLR0402, RUF051, RUF059
"""Attentional seq2seq NMT from MaximumEntropy/Seq2Seq-PyTorch (``nmt.py`` with ``"seq2seq": "attention"``): a
2-layer bidirectional LSTM encoder, ``encoder2decoder`` (tanh) to start the decoder, an ``LSTMAttentionDot``
decoder (an LSTM cell whose output goes through Luong dot attention, ``SoftDotAttention``, over the encoder states
and is fed back as the next hidden state), ``decoder2vocab``; ``CrossEntropyLoss`` whose class weights zero the
``<pad>`` class, Adam, teacher forcing with ``get_minibatch``'s inputs (``<s> w1 .. wn``) and outputs (``w1 .. wn
</s>``), minibatches taken in file order.

Source: https://github.com/MaximumEntropy/Seq2Seq-PyTorch
Commit: 76ea5b66fdf86e86e81de12eb96c161d9c04126b
Files: ``nmt.py`` (model, loss and optimizer set-up, the training loop), ``model.py`` (``SoftDotAttention``,
``LSTMAttentionDot``, ``Seq2SeqAttention``), ``data_utils.py`` (``construct_vocab``, ``read_nmt_data``,
``get_minibatch``), ``config_en_fr_attention_wmt14.json``
License: WTFPL (Do What The Fuck You Want To Public License, Version 2; full text in
LICENSES/MaximumEntropy-Seq2Seq-PyTorch.txt)
Domain: seq2seq translation with attention (bi-LSTM encoder, LSTM decoder with dot attention, teacher forcing)

Kept as written: the three model classes (``nn.Softmax()`` with its implicit dimension, ``F.sigmoid``/``F.tanh``,
``Variable``), ``construct_vocab`` (special ids 0-3, words by frequency), ``get_minibatch``, the loop body (forward,
``optimizer.zero_grad()``, the loss on ``decoder_logit.view(-1, trg_vocab_size)`` against ``output_lines_trg``,
backward, step), the config's choices that apply (attention mode ``dot``, bidirectional, n_layers_src 2,
n_layers_trg 1, dropout 0, Adam).

Deviations from the original:
- Python 2 to 3 (``print``, ``xrange``, ``loss.data[0]`` -> ``loss.item()``); no GPU: the ``.cuda()`` calls are
  dropped (``get_state``, ``get_minibatch``, the model, ``weight_mask``, the criterion);
- Europarl fr-en and newstest are replaced by a synthetic parallel corpus made from ``seed``, given to
  ``read_nmt_data`` as tokenized lines instead of file paths: source sentences of 4 to 8 words over 30 words, each
  target the source reversed and translated word for word through a seeded lexicon (320 train / 64 test pairs);
- sizes for 2 CPU cores: dim 1000 -> 64, dim_word_src/trg 500 -> 32, batch_size 80 -> 32, max_src_length 50 -> 12;
  lrate 1e-4 -> 1e-3 so the loss falls within the 30 steps of the self-check;
- the model classes are in the helper ``_maxentseq2seq_model.py`` (``and ... or`` on a tensor in
  ``LSTMAttentionDot.forward`` written as a conditional expression, an error in current PyTorch); ``get_minibatch`` keeps only the
  ``add_start and add_end`` case the loop uses;
- the epoch loop is unrolled: one ``train_step`` is one minibatch of it (``j`` wraps to 0 when the data ends); the
  logging, sample printing, BLEU evaluation (``evaluate.py``) and checkpoints are dropped; ``eval_fn`` is the
  loss on the test pairs under ``no_grad``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import operator
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.autograd import Variable

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _maxentseq2seq_model import Seq2SeqAttention


# data_utils.py
def construct_vocab(lines, vocab_size):
    """Construct a vocabulary from tokenized lines."""
    vocab = {}
    for line in lines:
        for word in line:
            if word not in vocab:
                vocab[word] = 1
            else:
                vocab[word] += 1

    # Discard start, end, pad and unk tokens if already present
    if '<s>' in vocab:
        del vocab['<s>']
    if '<pad>' in vocab:
        del vocab['<pad>']
    if '</s>' in vocab:
        del vocab['</s>']
    if '<unk>' in vocab:
        del vocab['<unk>']

    word2id = {
        '<s>': 0,
        '<pad>': 1,
        '</s>': 2,
        '<unk>': 3,
    }

    id2word = {
        0: '<s>',
        1: '<pad>',
        2: '</s>',
        3: '<unk>',
    }

    sorted_word2id = sorted(
        vocab.items(),
        key=operator.itemgetter(1),
        reverse=True
    )

    sorted_words = [x[0] for x in sorted_word2id[:vocab_size]]

    for ind, word in enumerate(sorted_words):
        word2id[word] = ind + 4

    for ind, word in enumerate(sorted_words):
        id2word[ind + 4] = word

    return word2id, id2word


def read_nmt_data(src_lines, config, trg_lines=None):
    """Read data from files.  (port: the tokenized lines are given)"""
    src_word2id, src_id2word = construct_vocab(
        src_lines, config['data']['n_words_src']
    )

    src = {'data': src_lines, 'word2id': src_word2id, 'id2word': src_id2word}

    trg_word2id, trg_id2word = construct_vocab(
        trg_lines, config['data']['n_words_trg']
    )

    trg = {'data': trg_lines, 'word2id': trg_word2id, 'id2word': trg_id2word}

    return src, trg


def get_minibatch(
    lines, word2ind, index, batch_size,
    max_len, add_start=True, add_end=True
):
    """Prepare minibatch.  (port: the add_start/add_end cases the loop does not use left out)"""
    lines = [
        ['<s>'] + line + ['</s>']
        for line in lines[index:index + batch_size]
    ]
    lines = [line[:max_len] for line in lines]

    lens = [len(line) for line in lines]
    max_len = max(lens)

    input_lines = [
        [word2ind[w] if w in word2ind else word2ind['<unk>'] for w in line[:-1]] +
        [word2ind['<pad>']] * (max_len - len(line))
        for line in lines
    ]

    output_lines = [
        [word2ind[w] if w in word2ind else word2ind['<unk>'] for w in line[1:]] +
        [word2ind['<pad>']] * (max_len - len(line))
        for line in lines
    ]

    mask = [
        ([1] * (l - 1)) + ([0] * (max_len - l))
        for l in lens
    ]

    input_lines = Variable(torch.LongTensor(input_lines))
    output_lines = Variable(torch.LongTensor(output_lines))
    mask = Variable(torch.FloatTensor(mask))

    return input_lines, output_lines, lens, mask


def _corpus(seed, n):
    """(port) Source sentences over 30 words; each target is the source reversed, translated through a lexicon."""
    rng = np.random.RandomState(seed)
    lexicon = rng.permutation(30)
    src = [[f"s{w}" for w in rng.randint(30, size=rng.randint(4, 9))] for _ in range(n)]
    trg = [[f"t{lexicon[int(w[1:])]}" for w in reversed(s)] for s in src]
    return src, trg


def _build(seed, bug=None):
    torch.manual_seed(seed)
    config = {"training": {"optimizer": "adam", "clip_c": 1, "lrate": 0.001},  # (port) lrate 0.0001
              "data": {"batch_size": 32, "n_words_trg": 30000, "n_words_src": 30000, "max_src_length": 12,
                       "max_trg_length": 12, "task": "translation"},
              "model": {"dim": 64, "dim_trg": 64, "dim_word_src": 32, "dim_word_trg": 32, "n_layers_src": 2,
                        "n_layers_trg": 1, "bidirectional": True, "seq2seq": "attention"}}  # (port) sizes
    src_lines, trg_lines = _corpus(seed, 384)
    src, trg = read_nmt_data(src_lines[:320], config, trg_lines[:320])
    src_test, trg_test = {"data": src_lines[320:]}, {"data": trg_lines[320:]}
    batch_size = config['data']['batch_size']
    max_length = config['data']['max_src_length']
    src_vocab_size = len(src['word2id'])
    trg_vocab_size = len(trg['word2id'])

    weight_mask = torch.ones(trg_vocab_size)
    if bug != "pad_weight_not_zeroed":
        weight_mask[trg['word2id']['<pad>']] = 0
    loss_criterion = nn.CrossEntropyLoss(weight=weight_mask)

    model = Seq2SeqAttention(
        src_emb_dim=config['model']['dim_word_src'], trg_emb_dim=config['model']['dim_word_trg'],
        src_vocab_size=src_vocab_size, trg_vocab_size=trg_vocab_size, src_hidden_dim=config['model']['dim'],
        trg_hidden_dim=config['model']['dim'], ctx_hidden_dim=config['model']['dim'], attention_mode='dot',
        batch_size=batch_size, bidirectional=config['model']['bidirectional'],
        pad_token_src=src['word2id']['<pad>'], pad_token_trg=trg['word2id']['<pad>'],
        nlayers=config['model']['n_layers_src'], nlayers_trg=config['model']['n_layers_trg'], dropout=0.,
    )
    lr = config['training']['lrate']
    optimizer = optim.Adam(model.parameters(), lr=lr)

    def minibatch(data_src, data_trg, j, n):
        input_lines_src, _, lens_src, mask_src = get_minibatch(
            data_src, src['word2id'], j, n, max_length, add_start=True, add_end=True)
        input_lines_trg, output_lines_trg, lens_trg, mask_trg = get_minibatch(
            data_trg, trg['word2id'], j, n, max_length, add_start=True, add_end=True)
        return input_lines_src, input_lines_trg, output_lines_trg

    state = {"j": 0}

    def train_step():
        # one minibatch of the loop over j
        if state["j"] >= len(src['data']):
            state["j"] = 0
        input_lines_src, input_lines_trg, output_lines_trg = minibatch(src['data'], trg['data'], state["j"], batch_size)
        state["j"] += batch_size

        if bug == "decoder_fed_outputs":
            decoder_logit = model(input_lines_src, output_lines_trg)
        else:
            decoder_logit = model(input_lines_src, input_lines_trg)
        optimizer.zero_grad()

        loss = loss_criterion(
            decoder_logit.contiguous().view(-1, trg_vocab_size),
            output_lines_trg.view(-1)
        )
        loss.backward()
        optimizer.step()
        return loss.item()

    def loss_fn(decoder_logit, output_lines_trg):
        return loss_criterion(decoder_logit.contiguous().view(-1, trg_vocab_size), output_lines_trg.view(-1))

    def eval_fn(model, _batch):
        x, y_in, y_out = minibatch(src_test['data'], trg_test['data'], 0, len(src_test['data']))
        with torch.no_grad():
            return float(loss_fn(model(x, y_in), y_out))

    x, y_in, y_out = minibatch(src['data'], trg['data'], 0, batch_size)
    return Program(name="maxentseq2seq_attention", model=model, batch=({"input_src": x, "input_trg": y_in}, y_out),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the <pad> class keeps weight 1 in CrossEntropyLoss, so the padded positions after </s> count in the
    # loss and the model is trained to emit <pad>.
    Bug("pad_weight_not_zeroed", functools.partial(_build, bug="pad_weight_not_zeroed"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic teacher-forcing slip: the decoder fed output_lines_trg (w1 .. wn </s>), the very tokens it must
    # predict, instead of input_lines_trg (<s> w1 .. wn).
    Bug("decoder_fed_outputs", functools.partial(_build, bug="decoder_fed_outputs"), "learning_ledger", ("TASK",)),
]
