# ruff: noqa: UP008, PLR0402, UP004, C408, RUF059
"""Pengcheng Yin's ``pytorch_basic_nmt``: a basic neural machine translation model trained as ``scripts/train.sh``
runs it (``--input-feed --batch-size 64 --hidden-size 256 --embed-size 256 --uniform-init 0.1 --label-smoothing 0.1
--dropout 0.2 --clip-grad 5.0``): a bidirectional LSTM encoder over packed source batches, the decoder's initial
cell a linear map of the two final encoder cells (its state the tanh of it), an ``LSTMCell`` decoder with input
feeding, Luong dot-product attention over the projected encodings with the padded source positions masked, the
attentional vector ``tanh(W[h; ctx])`` with dropout, a readout to the target vocabulary, ``log_softmax``, the
label-smoothed per-sentence score (``LabelSmoothingLoss``: KL against the smoothed one-hot, padded entries
zeroed); the loop ``zero_grad; loss = -model(src, tgt).sum() / batch_size; backward; clip_grad_norm 5; Adam step``
over ``batch_iter``'s shuffled batches (sorted by source length within the batch); ``evaluate_ppl`` under
``model.eval()`` + ``no_grad``.

Source: https://github.com/pcyin/pytorch_basic_nmt
Commit: 1cf1c61c86fb4104ead68cf3fd0db82039f166b4
Files: nmt.py (NMT, evaluate_ppl, train), utils.py (input_transpose, batch_iter, LabelSmoothingLoss), vocab.py
(VocabEntry, Vocab), scripts/train.sh
License: CC-BY-4.0 (stated in the README; the repository has no LICENSE file) - copied with attribution, changes
listed below
Domain: seq2seq translation (attentional LSTM encoder-decoder, input feeding, label smoothing)

Deviations from the original:
- sizes: hidden and embedding sizes 256 -> 32, batch 64 -> 16, vocabularies of 24 words (+ 4 specials) per side;
- data: IWSLT'14 de-en (``read_corpus`` on the files) is replaced by 480 synthetic pairs made from ``seed``: a
  source sentence of 3-8 words ``s<k>`` and its translation, the word-by-word map ``s<k> -> t<(5k+3) mod 24>``
  in reverse order; the target sentences are wrapped in ``<s>``/``</s>`` as ``read_corpus(source='tgt')`` does;
  ``Vocab.build`` (``VocabEntry.from_corpus``, frequency cutoff 2) runs as written (its ``print`` left out);
- current PyTorch: ``att_weight.data.masked_fill_(mask.byte(), ...)`` masks with ``mask.bool()`` (uint8 masks are
  no longer accepted), ``torch.nn.utils.clip_grad_norm`` is ``clip_grad_norm_``;
- one ``train_step`` is one batch of ``train``'s loop; the logging, the validation every ``valid_niter`` iterations,
  checkpoints, patience/learning-rate decay and the beam search / sampling / BLEU decoding are left out;
  ``eval_fn`` is ``evaluate_ppl`` on one batch; docopt's argument dictionary is a plain dict; no GPU.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from collections import Counter
from itertools import chain

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_WORDS = 24


# ---- utils.py ------------------------------------------------------------------------------------------------------

def input_transpose(sents, pad_token):
    max_len = max(len(s) for s in sents)
    batch_size = len(sents)

    sents_t = []
    for i in range(max_len):
        sents_t.append([sents[k][i] if len(sents[k]) > i else pad_token for k in range(batch_size)])

    return sents_t


def batch_iter(data, batch_size, shuffle=False):
    batch_num = math.ceil(len(data) / batch_size)
    index_array = list(range(len(data)))

    if shuffle:
        np.random.shuffle(index_array)

    for i in range(batch_num):
        indices = index_array[i * batch_size: (i + 1) * batch_size]
        examples = [data[idx] for idx in indices]

        examples = sorted(examples, key=lambda e: len(e[0]), reverse=True)
        src_sents = [e[0] for e in examples]
        tgt_sents = [e[1] for e in examples]

        yield src_sents, tgt_sents


class LabelSmoothingLoss(nn.Module):
    """
    label smoothing

    Code adapted from OpenNMT-py
    """
    def __init__(self, label_smoothing, tgt_vocab_size, padding_idx=0, bug=None):
        assert 0.0 < label_smoothing <= 1.0
        self.padding_idx = padding_idx
        super(LabelSmoothingLoss, self).__init__()
        self.bug = bug

        smoothing_value = label_smoothing / (tgt_vocab_size - 2)  # -1 for pad, -1 for gold-standard word
        one_hot = torch.full((tgt_vocab_size,), smoothing_value)
        one_hot[self.padding_idx] = 0
        self.register_buffer('one_hot', one_hot.unsqueeze(0))

        self.confidence = 1.0 - label_smoothing

    def forward(self, output, target):
        """
        output (FloatTensor): batch_size x tgt_vocab_size
        target (LongTensor): batch_size
        """
        # (batch_size, tgt_vocab_size)
        true_dist = self.one_hot.repeat(target.size(0), 1)

        # fill in gold-standard word position with confidence value
        true_dist.scatter_(1, target.unsqueeze(-1), self.confidence)

        # fill padded entries with zeros
        if self.bug != "padded_targets_not_zeroed":
            true_dist.masked_fill_((target == self.padding_idx).unsqueeze(-1), 0.)

        loss = -F.kl_div(output, true_dist, reduction='none').sum(-1)

        return loss


# ---- vocab.py ------------------------------------------------------------------------------------------------------

class VocabEntry(object):
    def __init__(self, word2id=None):
        if word2id:
            self.word2id = word2id
        else:
            self.word2id = dict()
            self.word2id['<pad>'] = 0
            self.word2id['<s>'] = 1
            self.word2id['</s>'] = 2
            self.word2id['<unk>'] = 3

        self.unk_id = self.word2id['<unk>']

        self.id2word = {v: k for k, v in self.word2id.items()}

    def __getitem__(self, word):
        return self.word2id.get(word, self.unk_id)

    def __contains__(self, word):
        return word in self.word2id

    def __len__(self):
        return len(self.word2id)

    def add(self, word):
        if word not in self:
            wid = self.word2id[word] = len(self)
            self.id2word[wid] = word
            return wid
        else:
            return self[word]

    def words2indices(self, sents):
        if type(sents[0]) == list:
            return [[self[w] for w in s] for s in sents]
        else:
            return [self[w] for w in sents]

    def to_input_tensor(self, sents, device):
        word_ids = self.words2indices(sents)
        sents_t = input_transpose(word_ids, self['<pad>'])

        sents_var = torch.tensor(sents_t, dtype=torch.long, device=device)

        return sents_var

    @staticmethod
    def from_corpus(corpus, size, freq_cutoff=2):
        vocab_entry = VocabEntry()

        word_freq = Counter(chain(*corpus))
        valid_words = [w for w, v in word_freq.items() if v >= freq_cutoff]

        top_k_words = sorted(valid_words, key=lambda w: word_freq[w], reverse=True)[:size]
        for word in top_k_words:
            vocab_entry.add(word)

        return vocab_entry


class Vocab(object):
    def __init__(self, src_vocab, tgt_vocab):
        self.src = src_vocab
        self.tgt = tgt_vocab

    @staticmethod
    def build(src_sents, tgt_sents, vocab_size, freq_cutoff):
        assert len(src_sents) == len(tgt_sents)
        src = VocabEntry.from_corpus(src_sents, vocab_size, freq_cutoff)
        tgt = VocabEntry.from_corpus(tgt_sents, vocab_size, freq_cutoff)
        return Vocab(src, tgt)


# ---- nmt.py --------------------------------------------------------------------------------------------------------

class NMT(nn.Module):

    def __init__(self, embed_size, hidden_size, vocab, dropout_rate=0.2, input_feed=True, label_smoothing=0.,
                 bug=None):
        super(NMT, self).__init__()

        self.embed_size = embed_size
        self.hidden_size = hidden_size
        self.dropout_rate = dropout_rate
        self.vocab = vocab
        self.input_feed = input_feed
        self.bug = bug

        # initialize neural network layers...

        self.src_embed = nn.Embedding(len(vocab.src), embed_size, padding_idx=vocab.src['<pad>'])
        self.tgt_embed = nn.Embedding(len(vocab.tgt), embed_size, padding_idx=vocab.tgt['<pad>'])

        self.encoder_lstm = nn.LSTM(embed_size, hidden_size, bidirectional=True)
        decoder_lstm_input = embed_size + hidden_size if self.input_feed else embed_size
        self.decoder_lstm = nn.LSTMCell(decoder_lstm_input, hidden_size)

        # attention: dot product attention
        # project source encoding to decoder rnn's state space
        self.att_src_linear = nn.Linear(hidden_size * 2, hidden_size, bias=False)

        # transformation of decoder hidden states and context vectors before reading out target words
        # this produces the `attentional vector` in (Luong et al., 2015)
        self.att_vec_linear = nn.Linear(hidden_size * 2 + hidden_size, hidden_size, bias=False)

        # prediction layer of the target vocabulary
        self.readout = nn.Linear(hidden_size, len(vocab.tgt), bias=False)

        # dropout layer
        self.dropout = nn.Dropout(self.dropout_rate)

        # initialize the decoder's state and cells with encoder hidden states
        self.decoder_cell_init = nn.Linear(hidden_size * 2, hidden_size)

        self.label_smoothing = label_smoothing
        if label_smoothing > 0.:
            self.label_smoothing_loss = LabelSmoothingLoss(label_smoothing,
                                                           tgt_vocab_size=len(vocab.tgt),
                                                           padding_idx=vocab.tgt['<pad>'], bug=bug)

    @property
    def device(self) -> torch.device:
        return self.src_embed.weight.device

    def forward(self, src_sents, tgt_sents):
        # (src_sent_len, batch_size)
        src_sents_var = self.vocab.src.to_input_tensor(src_sents, device=self.device)
        # (tgt_sent_len, batch_size)
        tgt_sents_var = self.vocab.tgt.to_input_tensor(tgt_sents, device=self.device)
        src_sents_len = [len(s) for s in src_sents]

        src_encodings, decoder_init_vec = self.encode(src_sents_var, src_sents_len)

        src_sent_masks = self.get_attention_mask(src_encodings, src_sents_len)

        # (tgt_sent_len - 1, batch_size, hidden_size)
        if self.bug == "decoder_inputs_not_shifted":
            # the decoder fed tgt[1:], the very words it is asked to predict at the same positions
            att_vecs = self.decode(src_encodings, src_sent_masks, decoder_init_vec, tgt_sents_var[1:])
        else:
            att_vecs = self.decode(src_encodings, src_sent_masks, decoder_init_vec, tgt_sents_var[:-1])

        # (tgt_sent_len - 1, batch_size, tgt_vocab_size)
        tgt_words_log_prob = F.log_softmax(self.readout(att_vecs), dim=-1)

        if self.label_smoothing:
            # (tgt_sent_len - 1, batch_size)
            tgt_gold_words_log_prob = self.label_smoothing_loss(tgt_words_log_prob.view(-1, tgt_words_log_prob.size(-1)),
                                                                tgt_sents_var[1:].view(-1)).view(-1, len(tgt_sents))
        else:
            # (tgt_sent_len, batch_size)
            tgt_words_mask = (tgt_sents_var != self.vocab.tgt['<pad>']).float()

            # (tgt_sent_len - 1, batch_size)
            tgt_gold_words_log_prob = torch.gather(tgt_words_log_prob, index=tgt_sents_var[1:].unsqueeze(-1), dim=-1).squeeze(-1) * tgt_words_mask[1:]

        # (batch_size)
        scores = tgt_gold_words_log_prob.sum(dim=0)

        return scores

    def get_attention_mask(self, src_encodings, src_sents_len):
        src_sent_masks = torch.zeros(src_encodings.size(0), src_encodings.size(1), dtype=torch.float)
        for e_id, src_len in enumerate(src_sents_len):
            src_sent_masks[e_id, src_len:] = 1

        return src_sent_masks.to(self.device)

    def encode(self, src_sents_var, src_sent_lens):
        # (src_sent_len, batch_size, embed_size)
        src_word_embeds = self.src_embed(src_sents_var)
        packed_src_embed = pack_padded_sequence(src_word_embeds, src_sent_lens)

        # src_encodings: (src_sent_len, batch_size, hidden_size * 2)
        src_encodings, (last_state, last_cell) = self.encoder_lstm(packed_src_embed)
        src_encodings, _ = pad_packed_sequence(src_encodings)

        # (batch_size, src_sent_len, hidden_size * 2)
        src_encodings = src_encodings.permute(1, 0, 2)

        dec_init_cell = self.decoder_cell_init(torch.cat([last_cell[0], last_cell[1]], dim=1))
        dec_init_state = torch.tanh(dec_init_cell)

        return src_encodings, (dec_init_state, dec_init_cell)

    def decode(self, src_encodings, src_sent_masks, decoder_init_vec, tgt_sents_var):
        # (batch_size, src_sent_len, hidden_size)
        src_encoding_att_linear = self.att_src_linear(src_encodings)

        batch_size = src_encodings.size(0)

        # initialize the attentional vector
        att_tm1 = torch.zeros(batch_size, self.hidden_size, device=self.device)

        # (tgt_sent_len, batch_size, embed_size)
        # here we omit the last word, which is always </s>.
        # Note that the embedding of </s> is not used in decoding
        tgt_word_embeds = self.tgt_embed(tgt_sents_var)

        h_tm1 = decoder_init_vec

        att_ves = []

        # start from y_0=`<s>`, iterate until y_{T-1}
        for y_tm1_embed in tgt_word_embeds.split(split_size=1):
            y_tm1_embed = y_tm1_embed.squeeze(0)
            if self.input_feed:
                # input feeding: concate y_tm1 and previous attentional vector
                # (batch_size, hidden_size + embed_size)

                x = torch.cat([y_tm1_embed, att_tm1], dim=-1)
            else:
                x = y_tm1_embed

            (h_t, cell_t), att_t, alpha_t = self.step(x, h_tm1, src_encodings, src_encoding_att_linear, src_sent_masks)

            att_tm1 = att_t
            h_tm1 = h_t, cell_t
            att_ves.append(att_t)

        # (tgt_sent_len - 1, batch_size, tgt_vocab_size)
        att_ves = torch.stack(att_ves)

        return att_ves

    def step(self, x, h_tm1, src_encodings, src_encoding_att_linear, src_sent_masks):
        # h_t: (batch_size, hidden_size)
        h_t, cell_t = self.decoder_lstm(x, h_tm1)

        ctx_t, alpha_t = self.dot_prod_attention(h_t, src_encodings, src_encoding_att_linear, src_sent_masks)

        att_t = torch.tanh(self.att_vec_linear(torch.cat([h_t, ctx_t], 1)))  # E.q. (5)
        att_t = self.dropout(att_t)

        return (h_t, cell_t), att_t, alpha_t

    def dot_prod_attention(self, h_t, src_encoding, src_encoding_att_linear, mask=None):
        # (batch_size, src_sent_len)
        att_weight = torch.bmm(src_encoding_att_linear, h_t.unsqueeze(2)).squeeze(2)

        if mask is not None:
            att_weight.data.masked_fill_(mask.bool(), -float('inf'))

        softmaxed_att_weight = F.softmax(att_weight, dim=-1)

        att_view = (att_weight.size(0), 1, att_weight.size(1))
        # (batch_size, hidden_size)
        ctx_vec = torch.bmm(softmaxed_att_weight.view(*att_view), src_encoding).squeeze(1)

        return ctx_vec, softmaxed_att_weight


def evaluate_ppl(model, dev_data, batch_size=32):
    was_training = model.training
    model.eval()

    cum_loss = 0.
    cum_tgt_words = 0.

    with torch.no_grad():
        for src_sents, tgt_sents in batch_iter(dev_data, batch_size):
            loss = -model(src_sents, tgt_sents).sum()

            cum_loss += loss.item()
            tgt_word_num_to_predict = sum(len(s[1:]) for s in tgt_sents)  # omitting leading `<s>`
            cum_tgt_words += tgt_word_num_to_predict

        ppl = np.exp(cum_loss / cum_tgt_words)

    if was_training:
        model.train()

    return ppl


def make_pairs(rng, n):
    pairs = []
    for _ in range(n):
        src = [int(k) for k in rng.integers(0, N_WORDS, size=rng.integers(3, 9))]
        tgt = [(5 * k + 3) % N_WORDS for k in reversed(src)]
        pairs.append(([f"s{k}" for k in src], ["<s>"] + [f"t{k}" for k in tgt] + ["</s>"]))
    return pairs


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)
    train_data = make_pairs(rng, 480)
    args = {'--batch-size': '16', '--clip-grad': '5.0', '--embed-size': '32', '--hidden-size': '32',
            '--dropout': '0.2', '--input-feed': True, '--label-smoothing': '0.1', '--uniform-init': '0.1',
            '--lr': '0.001'}
    train_batch_size = int(args['--batch-size'])
    clip_grad = float(args['--clip-grad'])
    vocab = Vocab.build([s for s, _ in train_data], [t for _, t in train_data], 50000, 2)

    model = NMT(embed_size=int(args['--embed-size']),
                hidden_size=int(args['--hidden-size']),
                dropout_rate=float(args['--dropout']),
                input_feed=args['--input-feed'],
                label_smoothing=float(args['--label-smoothing']),
                vocab=vocab, bug=bug)
    model.train()

    uniform_init = float(args['--uniform-init'])
    if np.abs(uniform_init) > 0.:
        for p in model.parameters():
            p.data.uniform_(-uniform_init, uniform_init)

    optimizer = torch.optim.Adam(model.parameters(), lr=float(args['--lr']))
    state = {"it": None}

    def train_step():
        try:
            src_sents, tgt_sents = next(state["it"])
        except (StopIteration, TypeError):  # while True: epoch += 1; for ... in batch_iter(..., shuffle=True)
            state["it"] = batch_iter(train_data, batch_size=train_batch_size, shuffle=True)
            src_sents, tgt_sents = next(state["it"])

        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()

        batch_size = len(src_sents)

        # (batch_size)
        example_losses = -model(src_sents, tgt_sents)
        batch_loss = example_losses.sum()
        loss = batch_loss / batch_size

        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()

        # clip gradient
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)

        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        return float(evaluate_ppl(model, list(zip(*batch)), batch_size=128))

    first = next(batch_iter(train_data, batch_size=train_batch_size))

    def loss_fn(scores, batch):
        return -scores.sum() / len(batch[0])

    return Program(name="basicnmt_attention", model=model, batch=first, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # classic: decode() given tgt_sents_var[1:] instead of [:-1]: at every position the decoder's input is the word
    # it has to predict, so the model learns to copy its input instead of translating.
    Bug("decoder_inputs_not_shifted", functools.partial(_build, bug="decoder_inputs_not_shifted"), "learning_ledger",
        ("TASK",)),
    # classic: the masked_fill of the padded target rows left out of LabelSmoothingLoss: every <pad> position of the
    # shorter targets is scored against the smoothed distribution and pushes the readout toward uniform output.
    Bug("padded_targets_not_zeroed", functools.partial(_build, bug="padded_targets_not_zeroed"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: optimizer.zero_grad() moved between loss.backward() and optimizer.step(): every update is zero
    # (whole-model slip, README rule 6).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
