"""Seq2Seq with attention from graykode's nlp-tutorial: a one-layer RNN encoder over one-hot source words, an RNN
decoder fed the one-hot target words with teacher forcing (``S`` prefix), a score ``dec_output . attn(enc_output)``
for every source position, softmax weights, the context ``bmm`` with the encoder outputs, and a linear output over
``[dec_output, context]``; ``nn.CrossEntropyLoss`` against the targets (``E`` suffix), Adam lr 0.001, one sentence
pair per update (the model is written for batch size 1).

Source: https://github.com/graykode/nlp-tutorial
Commit: d05e31ec81d56d70c1db89b99ab07e948f7ebc11
Files: 4-2.Seq2Seq(Attention)/Seq2Seq(Attention).py
License: MIT (Copyright (c) 2019 TaeHwan Jung; full text in LICENSES/graykode-nlp-tutorial.txt)
Domain: seq2seq translation with attention

Deviations from the original:
- sizes: n_hidden 128 -> 32 (n_step 5 unchanged);
- data: the single German/English pair is replaced by 24 synthetic pairs made from ``seed``: a source "sentence"
  of four words from an 8-word source vocabulary, its "translation" word by word through a fixed dictionary, in the
  original's three strings (``'src1 src2 src3 src4 P'``, ``'S tgt1 tgt2 tgt3 tgt4'``, ``'tgt1 tgt2 tgt3 tgt4 E'``);
  ``make_batch`` takes the pair to encode as an argument (the original reads the global ``sentences``), and one
  ``train_step`` trains on the next pair of the cycle (the original repeats its one pair every epoch);
- the vocabulary is built from ``sorted(set(...))`` (the original's ``list(set(...))`` order changes between runs);
- ``F.softmax(attn_scores)`` is given its ``dim=0`` (the implicit dim PyTorch picks for a 1-d tensor, written out to
  silence the deprecation warning); ``make_batch`` wraps its lists in ``np.array`` before ``torch.FloatTensor`` (the
  same values, without the slow list-of-arrays path);
- ``n_class`` / ``n_hidden`` are module globals as in the original's ``__main__`` block, set at import;
- one ``train_step`` is one epoch of the original loop (zero_grad, forward, loss, backward, step); printing, the test
  decode and the attention plot (matplotlib) are left out; ``eval_fn`` is the loss on a given pair in eval mode;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SRC_WORDS = ["ich", "du", "mochte", "ein", "bier", "wein", "habe", "gern"]
DICTIONARY = {"ich": "i", "du": "you", "mochte": "want", "ein": "a", "bier": "beer", "wein": "wine",
              "habe": "have", "gern": "like"}

n_step = 5  # number of cells(= number of Step)
n_hidden = 32  # number of hidden units in one cell

word_list = sorted(set(SRC_WORDS + list(DICTIONARY.values()) + ["S", "E", "P"]))
word_dict = {w: i for i, w in enumerate(word_list)}
number_dict = {i: w for i, w in enumerate(word_list)}
n_class = len(word_dict)  # vocab list


def make_batch(sentences):
    input_batch = [np.eye(n_class)[[word_dict[n] for n in sentences[0].split()]]]
    output_batch = [np.eye(n_class)[[word_dict[n] for n in sentences[1].split()]]]
    target_batch = [[word_dict[n] for n in sentences[2].split()]]

    # make tensor
    return torch.FloatTensor(np.array(input_batch)), torch.FloatTensor(np.array(output_batch)), torch.LongTensor(target_batch)


class Attention(nn.Module):
    def __init__(self, bug=None):
        super(Attention, self).__init__()
        self.enc_cell = nn.RNN(input_size=n_class, hidden_size=n_hidden, dropout=0.5)
        self.dec_cell = nn.RNN(input_size=n_class, hidden_size=n_hidden, dropout=0.5)

        # Linear for attention
        self.attn = nn.Linear(n_hidden, n_hidden)
        self.out = nn.Linear(n_hidden * 2, n_class)
        self.bug = bug

    def forward(self, enc_inputs, hidden, dec_inputs):
        enc_inputs = enc_inputs.transpose(0, 1)  # enc_inputs: [n_step(=n_step, time step), batch_size, n_class]
        dec_inputs = dec_inputs.transpose(0, 1)  # dec_inputs: [n_step(=n_step, time step), batch_size, n_class]

        # enc_outputs : [n_step, batch_size, num_directions(=1) * n_hidden], matrix F
        # enc_hidden : [num_layers(=1) * num_directions(=1), batch_size, n_hidden]
        enc_outputs, enc_hidden = self.enc_cell(enc_inputs, hidden)

        trained_attn = []
        hidden = enc_hidden
        n_step = len(dec_inputs)
        model = torch.empty([n_step, 1, n_class])

        for i in range(n_step):  # each time step
            # dec_output : [n_step(=1), batch_size(=1), num_directions(=1) * n_hidden]
            # hidden : [num_layers(=1) * num_directions(=1), batch_size(=1), n_hidden]
            dec_output, hidden = self.dec_cell(dec_inputs[i].unsqueeze(0), hidden)
            attn_weights = self.get_att_weight(dec_output, enc_outputs)  # attn_weights : [1, 1, n_step]
            if self.bug == "attn_weights_detached":
                # the weights taken off the graph (as for the plot) before the context is made from them
                attn_weights = attn_weights.detach()
            trained_attn.append(attn_weights.squeeze().data.numpy())

            # matrix-matrix product of matrices [1,1,n_step] x [1,n_step,n_hidden] = [1,1,n_hidden]
            context = attn_weights.bmm(enc_outputs.transpose(0, 1))
            dec_output = dec_output.squeeze(0)  # dec_output : [batch_size(=1), num_directions(=1) * n_hidden]
            context = context.squeeze(1)  # [1, num_directions(=1) * n_hidden]
            model[i] = self.out(torch.cat((dec_output, context), 1))

        # make model shape [n_step, n_class]
        return model.transpose(0, 1).squeeze(0), trained_attn

    def get_att_weight(self, dec_output, enc_outputs):  # get attention weight one 'dec_output' with 'enc_outputs'
        n_step = len(enc_outputs)
        attn_scores = torch.zeros(n_step)  # attn_scores : [n_step]

        for i in range(n_step):
            attn_scores[i] = self.get_att_score(dec_output, enc_outputs[i])

        # Normalize scores to weights in range 0 to 1
        return F.softmax(attn_scores, dim=0).view(1, 1, -1)

    def get_att_score(self, dec_output, enc_output):  # enc_outputs [batch_size, num_directions(=1) * n_hidden]
        score = self.attn(enc_output)  # score : [batch_size, n_hidden]
        return torch.dot(dec_output.view(-1), score.view(-1))  # inner product make scalar value


def make_sentences(gen, n_pairs):
    """Synthetic pairs in the original's three strings: source words, 'S' + translation, translation + 'E'."""
    pairs = []
    for _ in range(n_pairs):
        src = [SRC_WORDS[int(i)] for i in torch.randint(0, len(SRC_WORDS), (4,), generator=gen)]
        tgt = [DICTIONARY[w] for w in src]
        pairs.append([" ".join(src + ["P"]), " ".join(["S"] + tgt), " ".join(tgt + ["E"])])
    return pairs


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    corpus = make_sentences(gen, 24)

    # hidden : [num_layers(=1) * num_directions(=1), batch_size, n_hidden]
    hidden = torch.zeros(1, 1, n_hidden)

    model = Attention(bug=bug)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)

    batches = []
    for sentences in corpus:
        input_batch, output_batch, target_batch = make_batch(sentences)
        if bug == "targets_are_decoder_inputs":
            # the decoder's input string taken as the target: 'S w1 .. w4' (no shift) for 'w1 .. w4 E'
            target_batch = output_batch.argmax(-1)
        batches.append((input_batch, output_batch, target_batch))
    state = {"i": 0}

    def train_step():
        input_batch, output_batch, target_batch = batches[state["i"] % len(batches)]
        state["i"] += 1
        model.train()
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        output, _ = model(input_batch, hidden, output_batch)

        loss = criterion(output, target_batch.squeeze(0))

        loss.backward()
        optimizer.step()
        return loss.detach()

    def loss_fn(outputs, target_batch):
        output, _ = outputs
        return criterion(output, target_batch.squeeze(0))

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            (input_batch, hidden_, output_batch), target_batch = batch
            output, _ = model(input_batch, hidden_, output_batch)
            return float(criterion(output, target_batch.squeeze(0)))

    input0, output0, target0 = batches[0]
    return Program(name="nlptutorial_seq2seq_attention", model=model, batch=((input0, hidden, output0), target0),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # classic: the targets built from the decoder-input string ('S w1 .. w4') instead of the shifted one
    # ('w1 .. w4 E'): every position is trained to emit the word it was just fed.
    Bug("targets_are_decoder_inputs", functools.partial(_build, bug="targets_are_decoder_inputs"),
        "learning_ledger", ("TASK",)),
    # classic: the attention weights detached (as for the plot) before the context: the attention layer never learns.
    Bug("attn_weights_detached", functools.partial(_build, bug="attn_weights_detached"), "reachability",
        ("attn.weight",)),
    # classic: optimizer.zero_grad() left out of the loop: every update carries all earlier gradients.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
