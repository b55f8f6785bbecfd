# ruff: noqa: PLR0402, RUF059, UP004, UP008
"""Pointer-generator summarization (See et al. 2017) trained with Adagrad, from atulkum/pointer_summarizer.

Source: https://github.com/atulkum/pointer_summarizer
Commit: 4967dd478ba70b1c12116ad6357dcc1d000e5dfa
Files: ``training_ptr_gen/model.py``, ``training_ptr_gen/train.py`` (``Train.setup_train``,
``Train.train_one_batch``), ``training_ptr_gen/train_util.py``, ``data_util/config.py``, ``data_util/batcher.py``
(``Example``, ``Batch``), ``data_util/data.py`` (``article2ids``, ``abstract2ids``, the special tokens).
License: Apache-2.0 (full text in LICENSES/atulkum-pointer_summarizer.txt).
Domain: seq2seq summarization (bi-LSTM encoder, attention LSTM decoder with teacher forcing, pointer-generator
copy distribution over an extended vocabulary for in-article OOV words, masked per-step NLL averaged by the
summary length, Adagrad, per-module gradient clipping).

Kept as written: ``Encoder`` (embedding, packed bi-LSTM, ``W_h``), ``ReduceState``, ``Attention`` (masked softmax
renormalized), ``Decoder`` (``x_context``, LSTM, p_gen, ``out1``/``out2``, ``scatter_add`` of the attention into
the extended vocabulary), ``Model`` (shared embedding), the initializers, ``get_input_from_batch`` /
``get_output_from_batch``, ``Example`` / ``Batch`` (decoder input with START, target with STOP, in-article OOV
ids, padding masks, lengths), ``setup_train`` (Adagrad over encoder + decoder + reduce_state with lr 0.15 and
initial_accumulator_value 0.1) and ``train_one_batch`` (zero_grad, encoder, reduce_state, the teacher-forced
decoder loop, ``-log(gold_probs + eps)`` masked by ``dec_padding_mask``, summed and divided by ``dec_lens``,
mean, backward, ``clip_grad_norm_`` of each of the three modules at 2.0, step). pointer_gen on, coverage off (the
config's defaults).

Deviations from the original:
- sizes: hidden_dim 32, emb_dim 16, vocab_size 64, max_enc_steps 20, max_dec_steps 6, batch_size 8 (256, 128,
  50000, 400, 100, 8).
- CNN/DailyMail is replaced by synthetic articles made from ``seed``: 10-20 words drawn from the vocabulary's
  words plus a few out-of-vocabulary words; the reference summary is the article's first 2-5 words (a lead
  summary, which the copy mechanism can learn, OOV words included). ``Vocab`` is built in memory in the order of
  ``data.py`` ([UNK], [PAD], [START], [STOP], then the words); the batcher's threads and queues are replaced by a
  loop making batches of ``Example`` s sorted by encoder length, longest first (as ``fill_batch_queue`` sorts
  them in training mode); ``xrange`` -> ``range``; ``config`` is a namespace in this module.
- the three modules are also held by one ``nn.Module`` (``PointerGenerator``) so the program has one model to
  declare; its ``forward`` runs the same encoder/decoder calls as ``train_one_batch`` and returns the per-step
  final distributions, which ``loss_fn`` turns into the same loss. ``Variable`` wrappers and CUDA moves are
  dropped; tensorflow's summary writer, saving and logging are dropped; ``train_step`` is ``trainIters``'s loop body.
- the optimizer's parameter list holds the tied embedding once: the original's list holds it twice (once through the
  encoder, once through the decoder), so Adagrad updates it twice per step (issue #61 of the repository reports torch's
  duplicate-parameter warning). The original list is the bug variant ``tied_embedding_owned_twice``; this deviation
  was made after firstdiv's first contact with the port (batch public-13) showed the double update.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import clip_grad_norm_
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.optim import Adagrad

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

# ---- data_util/config.py
config = types.SimpleNamespace(
    hidden_dim=32, emb_dim=16, batch_size=8, max_enc_steps=20, max_dec_steps=6, vocab_size=64,
    lr=0.15, adagrad_init_acc=0.1, rand_unif_init_mag=0.02, trunc_norm_init_std=1e-4, max_grad_norm=2.0,
    pointer_gen=True, is_coverage=False, cov_loss_wt=1.0, eps=1e-12, lr_coverage=0.15)
use_cuda = False

# ---- data_util/data.py
PAD_TOKEN = '[PAD]'
UNKNOWN_TOKEN = '[UNK]'
START_DECODING = '[START]'
STOP_DECODING = '[STOP]'


class Vocab(object):
    def __init__(self, words, max_size):
        self._word_to_id = {}
        self._id_to_word = {}
        self._count = 0
        for w in [UNKNOWN_TOKEN, PAD_TOKEN, START_DECODING, STOP_DECODING]:
            self._word_to_id[w] = self._count
            self._id_to_word[self._count] = w
            self._count += 1
        for w in words:
            self._word_to_id[w] = self._count
            self._id_to_word[self._count] = w
            self._count += 1
            if max_size != 0 and self._count >= max_size:
                break

    def word2id(self, word):
        if word not in self._word_to_id:
            return self._word_to_id[UNKNOWN_TOKEN]
        return self._word_to_id[word]

    def size(self):
        return self._count


def article2ids(article_words, vocab):
    ids = []
    oovs = []
    unk_id = vocab.word2id(UNKNOWN_TOKEN)
    for w in article_words:
        i = vocab.word2id(w)
        if i == unk_id:  # If w is OOV
            if w not in oovs:  # Add to list of OOVs
                oovs.append(w)
            oov_num = oovs.index(w)  # This is 0 for the first article OOV, 1 for the second article OOV...
            ids.append(vocab.size() + oov_num)  # This is e.g. 50000 for the first article OOV, 50001 for the second...
        else:
            ids.append(i)
    return ids, oovs


def abstract2ids(abstract_words, vocab, article_oovs):
    ids = []
    unk_id = vocab.word2id(UNKNOWN_TOKEN)
    for w in abstract_words:
        i = vocab.word2id(w)
        if i == unk_id:  # If w is an OOV word
            if w in article_oovs:  # If w is an in-article OOV
                vocab_idx = vocab.size() + article_oovs.index(w)  # Map to its temporary article OOV number
                ids.append(vocab_idx)
            else:  # If w is an out-of-article OOV
                ids.append(unk_id)  # Map to the UNK token id
        else:
            ids.append(i)
    return ids


# ---- data_util/batcher.py
class Example(object):

    def __init__(self, article, abstract_sentences, vocab):
        # Get ids of special tokens
        start_decoding = vocab.word2id(START_DECODING)
        stop_decoding = vocab.word2id(STOP_DECODING)

        # Process the article
        article_words = article.split()
        if len(article_words) > config.max_enc_steps:
            article_words = article_words[:config.max_enc_steps]
        self.enc_len = len(article_words)  # store the length after truncation but before padding
        self.enc_input = [vocab.word2id(w) for w in article_words]  # list of word ids; OOVs are represented by the id for UNK token

        # Process the abstract
        abstract = ' '.join(abstract_sentences)  # string
        abstract_words = abstract.split()  # list of strings
        abs_ids = [vocab.word2id(w) for w in abstract_words]  # list of word ids; OOVs are represented by the id for UNK token

        # Get the decoder input sequence and target sequence
        self.dec_input, self.target = self.get_dec_inp_targ_seqs(abs_ids, config.max_dec_steps, start_decoding, stop_decoding)
        self.dec_len = len(self.dec_input)

        # If using pointer-generator mode, we need to store some extra info
        if config.pointer_gen:
            # Store a version of the enc_input where in-article OOVs are represented by their temporary OOV id; also store the in-article OOVs words themselves
            self.enc_input_extend_vocab, self.article_oovs = article2ids(article_words, vocab)

            # Get a verison of the reference summary where in-article OOVs are represented by their temporary article OOV id
            abs_ids_extend_vocab = abstract2ids(abstract_words, vocab, self.article_oovs)

            # Overwrite decoder target sequence so it uses the temp article OOV ids
            _, self.target = self.get_dec_inp_targ_seqs(abs_ids_extend_vocab, config.max_dec_steps, start_decoding, stop_decoding)

    def get_dec_inp_targ_seqs(self, sequence, max_len, start_id, stop_id):
        inp = [start_id] + sequence[:]
        target = sequence[:]
        if len(inp) > max_len:  # truncate
            inp = inp[:max_len]
            target = target[:max_len]  # no end_token
        else:  # no truncation
            target.append(stop_id)  # end token
        assert len(inp) == len(target)
        return inp, target

    def pad_decoder_inp_targ(self, max_len, pad_id):
        while len(self.dec_input) < max_len:
            self.dec_input.append(pad_id)
        while len(self.target) < max_len:
            self.target.append(pad_id)

    def pad_encoder_input(self, max_len, pad_id):
        while len(self.enc_input) < max_len:
            self.enc_input.append(pad_id)
        if config.pointer_gen:
            while len(self.enc_input_extend_vocab) < max_len:
                self.enc_input_extend_vocab.append(pad_id)


class Batch(object):
    def __init__(self, example_list, vocab, batch_size):
        self.batch_size = batch_size
        self.pad_id = vocab.word2id(PAD_TOKEN)  # id of the PAD token used to pad sequences
        self.init_encoder_seq(example_list)  # initialize the input to the encoder
        self.init_decoder_seq(example_list)  # initialize the input and targets for the decoder

    def init_encoder_seq(self, example_list):
        # Determine the maximum length of the encoder input sequence in this batch
        max_enc_seq_len = max([ex.enc_len for ex in example_list])

        # Pad the encoder input sequences up to the length of the longest sequence
        for ex in example_list:
            ex.pad_encoder_input(max_enc_seq_len, self.pad_id)

        # Initialize the numpy arrays
        self.enc_batch = np.zeros((self.batch_size, max_enc_seq_len), dtype=np.int32)
        self.enc_lens = np.zeros((self.batch_size), dtype=np.int32)
        self.enc_padding_mask = np.zeros((self.batch_size, max_enc_seq_len), dtype=np.float32)

        # Fill in the numpy arrays
        for i, ex in enumerate(example_list):
            self.enc_batch[i, :] = ex.enc_input[:]
            self.enc_lens[i] = ex.enc_len
            for j in range(ex.enc_len):
                self.enc_padding_mask[i][j] = 1

        # For pointer-generator mode, need to store some extra info
        if config.pointer_gen:
            # Determine the max number of in-article OOVs in this batch
            self.max_art_oovs = max([len(ex.article_oovs) for ex in example_list])
            # Store the in-article OOVs themselves
            self.art_oovs = [ex.article_oovs for ex in example_list]
            # Store the version of the enc_batch that uses the article OOV ids
            self.enc_batch_extend_vocab = np.zeros((self.batch_size, max_enc_seq_len), dtype=np.int32)
            for i, ex in enumerate(example_list):
                self.enc_batch_extend_vocab[i, :] = ex.enc_input_extend_vocab[:]

    def init_decoder_seq(self, example_list):
        # Pad the inputs and targets
        for ex in example_list:
            ex.pad_decoder_inp_targ(config.max_dec_steps, self.pad_id)

        # Initialize the numpy arrays.
        self.dec_batch = np.zeros((self.batch_size, config.max_dec_steps), dtype=np.int32)
        self.target_batch = np.zeros((self.batch_size, config.max_dec_steps), dtype=np.int32)
        self.dec_padding_mask = np.zeros((self.batch_size, config.max_dec_steps), dtype=np.float32)
        self.dec_lens = np.zeros((self.batch_size), dtype=np.int32)

        # Fill in the numpy arrays
        for i, ex in enumerate(example_list):
            self.dec_batch[i, :] = ex.dec_input[:]
            self.target_batch[i, :] = ex.target[:]
            self.dec_lens[i] = ex.dec_len
            for j in range(ex.dec_len):
                self.dec_padding_mask[i][j] = 1


# ---- training_ptr_gen/model.py
def init_lstm_wt(lstm):
    for names in lstm._all_weights:
        for name in names:
            if name.startswith('weight_'):
                wt = getattr(lstm, name)
                wt.data.uniform_(-config.rand_unif_init_mag, config.rand_unif_init_mag)
            elif name.startswith('bias_'):
                # set forget bias to 1
                bias = getattr(lstm, name)
                n = bias.size(0)
                start, end = n // 4, n // 2
                bias.data.fill_(0.)
                bias.data[start:end].fill_(1.)


def init_linear_wt(linear):
    linear.weight.data.normal_(std=config.trunc_norm_init_std)
    if linear.bias is not None:
        linear.bias.data.normal_(std=config.trunc_norm_init_std)


def init_wt_normal(wt):
    wt.data.normal_(std=config.trunc_norm_init_std)


class Encoder(nn.Module):
    def __init__(self):
        super(Encoder, self).__init__()
        self.embedding = nn.Embedding(config.vocab_size, config.emb_dim)
        init_wt_normal(self.embedding.weight)

        self.lstm = nn.LSTM(config.emb_dim, config.hidden_dim, num_layers=1, batch_first=True, bidirectional=True)
        init_lstm_wt(self.lstm)

        self.W_h = nn.Linear(config.hidden_dim * 2, config.hidden_dim * 2, bias=False)

    # seq_lens should be in descending order
    def forward(self, input, seq_lens):
        embedded = self.embedding(input)

        packed = pack_padded_sequence(embedded, seq_lens, batch_first=True)
        output, hidden = self.lstm(packed)

        encoder_outputs, _ = pad_packed_sequence(output, batch_first=True)  # h dim = B x t_k x n
        encoder_outputs = encoder_outputs.contiguous()

        encoder_feature = encoder_outputs.view(-1, 2*config.hidden_dim)  # B * t_k x 2*hidden_dim
        encoder_feature = self.W_h(encoder_feature)

        return encoder_outputs, encoder_feature, hidden


class ReduceState(nn.Module):
    def __init__(self):
        super(ReduceState, self).__init__()

        self.reduce_h = nn.Linear(config.hidden_dim * 2, config.hidden_dim)
        init_linear_wt(self.reduce_h)
        self.reduce_c = nn.Linear(config.hidden_dim * 2, config.hidden_dim)
        init_linear_wt(self.reduce_c)

    def forward(self, hidden):
        h, c = hidden  # h, c dim = 2 x b x hidden_dim
        h_in = h.transpose(0, 1).contiguous().view(-1, config.hidden_dim * 2)
        hidden_reduced_h = F.relu(self.reduce_h(h_in))
        c_in = c.transpose(0, 1).contiguous().view(-1, config.hidden_dim * 2)
        hidden_reduced_c = F.relu(self.reduce_c(c_in))

        return (hidden_reduced_h.unsqueeze(0), hidden_reduced_c.unsqueeze(0))  # h, c dim = 1 x b x hidden_dim


class Attention(nn.Module):
    def __init__(self):
        super(Attention, self).__init__()
        # attention
        if config.is_coverage:
            self.W_c = nn.Linear(1, config.hidden_dim * 2, bias=False)
        self.decode_proj = nn.Linear(config.hidden_dim * 2, config.hidden_dim * 2)
        self.v = nn.Linear(config.hidden_dim * 2, 1, bias=False)

    def forward(self, s_t_hat, encoder_outputs, encoder_feature, enc_padding_mask, coverage):
        b, t_k, n = list(encoder_outputs.size())

        dec_fea = self.decode_proj(s_t_hat)  # B x 2*hidden_dim
        dec_fea_expanded = dec_fea.unsqueeze(1).expand(b, t_k, n).contiguous()  # B x t_k x 2*hidden_dim
        dec_fea_expanded = dec_fea_expanded.view(-1, n)  # B * t_k x 2*hidden_dim

        att_features = encoder_feature + dec_fea_expanded  # B * t_k x 2*hidden_dim
        if config.is_coverage:
            coverage_input = coverage.view(-1, 1)  # B * t_k x 1
            coverage_feature = self.W_c(coverage_input)  # B * t_k x 2*hidden_dim
            att_features = att_features + coverage_feature

        e = F.tanh(att_features)  # B * t_k x 2*hidden_dim
        scores = self.v(e)  # B * t_k x 1
        scores = scores.view(-1, t_k)  # B x t_k

        attn_dist_ = F.softmax(scores, dim=1)*enc_padding_mask  # B x t_k
        normalization_factor = attn_dist_.sum(1, keepdim=True)
        attn_dist = attn_dist_ / normalization_factor

        attn_dist = attn_dist.unsqueeze(1)  # B x 1 x t_k
        c_t = torch.bmm(attn_dist, encoder_outputs)  # B x 1 x n
        c_t = c_t.view(-1, config.hidden_dim * 2)  # B x 2*hidden_dim

        attn_dist = attn_dist.view(-1, t_k)  # B x t_k

        if config.is_coverage:
            coverage = coverage.view(-1, t_k)
            coverage = coverage + attn_dist

        return c_t, attn_dist, coverage


class Decoder(nn.Module):
    def __init__(self):
        super(Decoder, self).__init__()
        self.attention_network = Attention()
        # decoder
        self.embedding = nn.Embedding(config.vocab_size, config.emb_dim)
        init_wt_normal(self.embedding.weight)

        self.x_context = nn.Linear(config.hidden_dim * 2 + config.emb_dim, config.emb_dim)

        self.lstm = nn.LSTM(config.emb_dim, config.hidden_dim, num_layers=1, batch_first=True, bidirectional=False)
        init_lstm_wt(self.lstm)

        if config.pointer_gen:
            self.p_gen_linear = nn.Linear(config.hidden_dim * 4 + config.emb_dim, 1)

        # p_vocab
        self.out1 = nn.Linear(config.hidden_dim * 3, config.hidden_dim)
        self.out2 = nn.Linear(config.hidden_dim, config.vocab_size)
        init_linear_wt(self.out2)

    def forward(self, y_t_1, s_t_1, encoder_outputs, encoder_feature, enc_padding_mask,
                c_t_1, extra_zeros, enc_batch_extend_vocab, coverage, step):

        if not self.training and step == 0:
            h_decoder, c_decoder = s_t_1
            s_t_hat = torch.cat((h_decoder.view(-1, config.hidden_dim),
                                 c_decoder.view(-1, config.hidden_dim)), 1)  # B x 2*hidden_dim
            c_t, _, coverage_next = self.attention_network(s_t_hat, encoder_outputs, encoder_feature,
                                                           enc_padding_mask, coverage)
            coverage = coverage_next

        y_t_1_embd = self.embedding(y_t_1)
        x = self.x_context(torch.cat((c_t_1, y_t_1_embd), 1))
        lstm_out, s_t = self.lstm(x.unsqueeze(1), s_t_1)

        h_decoder, c_decoder = s_t
        s_t_hat = torch.cat((h_decoder.view(-1, config.hidden_dim),
                             c_decoder.view(-1, config.hidden_dim)), 1)  # B x 2*hidden_dim
        c_t, attn_dist, coverage_next = self.attention_network(s_t_hat, encoder_outputs, encoder_feature,
                                                               enc_padding_mask, coverage)

        if self.training or step > 0:
            coverage = coverage_next

        p_gen = None
        if config.pointer_gen:
            p_gen_input = torch.cat((c_t, s_t_hat, x), 1)  # B x (2*2*hidden_dim + emb_dim)
            p_gen = self.p_gen_linear(p_gen_input)
            p_gen = F.sigmoid(p_gen)

        output = torch.cat((lstm_out.view(-1, config.hidden_dim), c_t), 1)  # B x hidden_dim * 3
        output = self.out1(output)  # B x hidden_dim

        # output = F.relu(output)

        output = self.out2(output)  # B x vocab_size
        vocab_dist = F.softmax(output, dim=1)

        if config.pointer_gen:
            vocab_dist_ = p_gen * vocab_dist
            attn_dist_ = (1 - p_gen) * attn_dist

            if extra_zeros is not None:
                vocab_dist_ = torch.cat([vocab_dist_, extra_zeros], 1)

            final_dist = vocab_dist_.scatter_add(1, enc_batch_extend_vocab, attn_dist_)
        else:
            final_dist = vocab_dist

        return final_dist, s_t, c_t, attn_dist, p_gen, coverage


class Model(object):
    def __init__(self, model_file_path=None, is_eval=False):
        encoder = Encoder()
        decoder = Decoder()
        reduce_state = ReduceState()

        # shared the embedding between encoder and decoder
        decoder.embedding.weight = encoder.embedding.weight
        if is_eval:
            encoder = encoder.eval()
            decoder = decoder.eval()
            reduce_state = reduce_state.eval()

        self.encoder = encoder
        self.decoder = decoder
        self.reduce_state = reduce_state


# ---- training_ptr_gen/train_util.py
def get_input_from_batch(batch, use_cuda):
    batch_size = len(batch.enc_lens)

    enc_batch = torch.from_numpy(batch.enc_batch).long()
    enc_padding_mask = torch.from_numpy(batch.enc_padding_mask).float()
    enc_lens = batch.enc_lens
    extra_zeros = None
    enc_batch_extend_vocab = None

    if config.pointer_gen:
        enc_batch_extend_vocab = torch.from_numpy(batch.enc_batch_extend_vocab).long()
        # max_art_oovs is the max over all the article oov list in the batch
        if batch.max_art_oovs > 0:
            extra_zeros = torch.zeros((batch_size, batch.max_art_oovs))

    c_t_1 = torch.zeros((batch_size, 2 * config.hidden_dim))

    coverage = None
    if config.is_coverage:
        coverage = torch.zeros(enc_batch.size())

    return enc_batch, enc_padding_mask, enc_lens, enc_batch_extend_vocab, extra_zeros, c_t_1, coverage


def get_output_from_batch(batch, use_cuda):
    dec_batch = torch.from_numpy(batch.dec_batch).long()
    dec_padding_mask = torch.from_numpy(batch.dec_padding_mask).float()
    dec_lens = batch.dec_lens
    max_dec_len = np.max(dec_lens)
    dec_lens_var = torch.from_numpy(dec_lens).float()

    target_batch = torch.from_numpy(batch.target_batch).long()

    return dec_batch, dec_padding_mask, max_dec_len, dec_lens_var, target_batch


# ---- synthetic CNN/DailyMail stand-in
VOCAB_WORDS = [f"w{i}" for i in range(config.vocab_size - 4)]
OOV_WORDS = [f"x{i}" for i in range(20)]


class Batcher(object):
    """Batches of ``Example`` s, sorted by encoder length (``fill_batch_queue`` in training mode)."""

    def __init__(self, vocab, batch_size, seed):
        self._vocab = vocab
        self.batch_size = batch_size
        self.rng = random.Random(seed)

    def _text(self):
        n = self.rng.randint(10, config.max_enc_steps)
        words = [self.rng.choice(VOCAB_WORDS) for _ in range(n)]
        for _ in range(self.rng.randint(0, 2)):
            words[self.rng.randrange(n)] = self.rng.choice(OOV_WORDS)
        return ' '.join(words), [' '.join(words[:self.rng.randint(2, 5)])]

    def next_batch(self):
        inputs = [Example(*self._text(), self._vocab) for _ in range(self.batch_size)]
        inputs = sorted(inputs, key=lambda inp: inp.enc_len, reverse=True)  # sort by length of encoder sequence
        return Batch(inputs, self._vocab, self.batch_size)


class PointerGenerator(nn.Module):
    """The three modules of ``Model`` as one module; ``forward`` is ``train_one_batch``'s forward."""

    def __init__(self, model, bug=None):
        super().__init__()
        self.encoder = model.encoder
        self.decoder = model.decoder
        self.reduce_state = model.reduce_state
        self.bug = bug

    def forward(self, enc_batch, enc_padding_mask, enc_lens, enc_batch_extend_vocab, extra_zeros, c_t_1, coverage,
                dec_batch, max_dec_len, target_batch):
        encoder_outputs, encoder_feature, encoder_hidden = self.encoder(enc_batch, enc_lens)
        s_t_1 = self.reduce_state(encoder_hidden)

        final_dists = []
        for di in range(min(max_dec_len, config.max_dec_steps)):
            y_t_1 = dec_batch[:, di]  # Teacher forcing
            final_dist, s_t_1,  c_t_1, attn_dist, p_gen, next_coverage = self.decoder(y_t_1, s_t_1,
                                                        encoder_outputs, encoder_feature, enc_padding_mask, c_t_1,
                                                        extra_zeros, enc_batch_extend_vocab,
                                                                           coverage, di)
            final_dists.append(final_dist)
        return torch.stack(final_dists, 1)


def _inputs(batch):
    enc_batch, enc_padding_mask, enc_lens, enc_batch_extend_vocab, extra_zeros, c_t_1, coverage = \
        get_input_from_batch(batch, use_cuda)
    dec_batch, dec_padding_mask, max_dec_len, dec_lens_var, target_batch = \
        get_output_from_batch(batch, use_cuda)
    return ({"enc_batch": enc_batch, "enc_padding_mask": enc_padding_mask, "enc_lens": torch.from_numpy(enc_lens).long(),
             "enc_batch_extend_vocab": enc_batch_extend_vocab, "extra_zeros": extra_zeros, "c_t_1": c_t_1,
             "coverage": coverage, "dec_batch": dec_batch, "max_dec_len": int(max_dec_len),
             "target_batch": target_batch},
            (target_batch, dec_padding_mask, dec_lens_var))


def _build(seed, bug=None):
    torch.manual_seed(seed)
    vocab = Vocab(VOCAB_WORDS, config.vocab_size)
    batcher = Batcher(vocab, config.batch_size, seed)

    # Train.setup_train
    model = Model()
    if bug == "reduce_state_left_out":
        params = list(model.encoder.parameters()) + list(model.decoder.parameters())
    else:
        params = list(model.encoder.parameters()) + list(model.decoder.parameters()) + \
            list(model.reduce_state.parameters())
    if bug != "tied_embedding_owned_twice":
        # deviation: the tied embedding (decoder.embedding.weight = encoder.embedding.weight) listed once; the
        # original lists it twice (see the bug variant)
        params = list(dict.fromkeys(params))
    initial_lr = config.lr_coverage if config.is_coverage else config.lr
    optimizer = Adagrad(params, lr=initial_lr, initial_accumulator_value=config.adagrad_init_acc)

    def step_loss_of(final_dist, target, step_mask):
        gold_probs = torch.gather(final_dist, 1, target.unsqueeze(1)).squeeze()
        step_loss = -torch.log(gold_probs + config.eps)
        if bug != "step_mask_dropped":
            step_loss = step_loss * step_mask
        return step_loss

    def train_one_batch(batch):
        enc_batch, enc_padding_mask, enc_lens, enc_batch_extend_vocab, extra_zeros, c_t_1, coverage = \
            get_input_from_batch(batch, use_cuda)
        dec_batch, dec_padding_mask, max_dec_len, dec_lens_var, target_batch = \
            get_output_from_batch(batch, use_cuda)

        optimizer.zero_grad()

        encoder_outputs, encoder_feature, encoder_hidden = model.encoder(enc_batch, enc_lens)
        s_t_1 = model.reduce_state(encoder_hidden)

        step_losses = []
        for di in range(min(max_dec_len, config.max_dec_steps)):
            y_t_1 = dec_batch[:, di]  # Teacher forcing
            final_dist, s_t_1,  c_t_1, attn_dist, p_gen, next_coverage = model.decoder(y_t_1, s_t_1,
                                                        encoder_outputs, encoder_feature, enc_padding_mask, c_t_1,
                                                        extra_zeros, enc_batch_extend_vocab,
                                                                           coverage, di)
            target = target_batch[:, di]
            gold_probs = torch.gather(final_dist, 1, target.unsqueeze(1)).squeeze()
            step_loss = -torch.log(gold_probs + config.eps)
            if config.is_coverage:
                step_coverage_loss = torch.sum(torch.min(attn_dist, coverage), 1)
                step_loss = step_loss + config.cov_loss_wt * step_coverage_loss
                coverage = next_coverage

            step_mask = dec_padding_mask[:, di]
            if bug != "step_mask_dropped":
                step_loss = step_loss * step_mask
            step_losses.append(step_loss)

        sum_losses = torch.sum(torch.stack(step_losses, 1), 1)
        batch_avg_loss = sum_losses/dec_lens_var
        loss = torch.mean(batch_avg_loss)

        loss.backward()

        clip_grad_norm_(model.encoder.parameters(), config.max_grad_norm)
        clip_grad_norm_(model.decoder.parameters(), config.max_grad_norm)
        clip_grad_norm_(model.reduce_state.parameters(), config.max_grad_norm)

        optimizer.step()

        return loss.item()

    def train_step():
        batch = batcher.next_batch()
        return train_one_batch(batch)

    module = PointerGenerator(model, bug)

    def loss_fn(final_dists, targets):
        target_batch, dec_padding_mask, dec_lens_var = targets
        step_losses = [step_loss_of(final_dists[:, di], target_batch[:, di], dec_padding_mask[:, di])
                       for di in range(final_dists.shape[1])]
        sum_losses = torch.sum(torch.stack(step_losses, 1), 1)
        batch_avg_loss = sum_losses/dec_lens_var
        return torch.mean(batch_avg_loss)

    def eval_fn(m, batch):
        inputs, targets = batch
        m.eval()
        with torch.no_grad():
            loss = loss_fn(m(**inputs), targets)
        m.train()
        return float(loss)

    first = _inputs(Batcher(vocab, config.batch_size, seed + 1).next_batch())
    return Program(name="pointersummarizer_ptrgen", model=module, batch=first, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the per-step loss is not multiplied by dec_padding_mask (classic: padding not ignored): the [PAD] positions
    # after [STOP] are trained as targets and the sum is still divided by the true summary length.
    # first contact declared OBJECTIVE; the loss never reading the step mask is TASK's task.mask_unread (reviewed after
    # first contact: the finding names this bug's mechanism)
    Bug("step_mask_dropped", functools.partial(_build, bug="step_mask_dropped"), "learning_ledger", ("TASK",),
        kind="task.mask_unread"),
    # the optimizer's parameter list leaves out reduce_state (classic: parameters missing from the optimizer): the
    # layers turning the encoder's final state into the decoder's initial state keep their initial weights.
    Bug("reduce_state_left_out", functools.partial(_build, bug="reduce_state_left_out"), "four_structures",
        ("reduce_state",)),
    # the original's parameter list as written: the embedding the decoder shares with the encoder is in it twice, so
    # Adagrad updates it twice per step (torch warns "optimizer contains a parameter group with duplicate parameters",
    # https://github.com/atulkum/pointer_summarizer/issues/61). Found by firstdiv's first contact with this port
    # (four_structures structure.duplicate_in_optimizer, every seed); the correct program lists it once.
    Bug("tied_embedding_owned_twice", functools.partial(_build, bug="tied_embedding_owned_twice"), "four_structures",
        ("encoder.embedding.weight",)),
]
