# ruff: noqa: UP008
"""He et al.'s "lagging inference networks and posterior collapse in VAEs" (ICLR 2019): the synthetic-data study
``toy.py`` in its default (vanilla VAE) mode. A Gaussian ``LSTMEncoder`` (embedding, one-layer LSTM, a bias-free
linear map of the last hidden state to mean and log-variance, ``nz`` 1) and an ``LSTMDecoder`` (the latent code
concatenated to every input embedding and mapped to the initial cell state, ``h_init = tanh(c_init)``, input and
output dropout 0.5, per-token cross-entropy), ``VAE.loss = reconstruct_err + kl_weight * KL``; separate SGD optimizers
(lr 1.0) for encoder and decoder, ``clip_grad_norm_`` 5 over the whole VAE, the KL weight annealed from ``kl_start``
(1.0: constant) over ``warm_up`` epochs; with ``aggressive`` 0 (the default) both optimizers step every batch.

Source: https://github.com/jxhe/vae-lagging-encoder
Commit: cdc4eb9d9599a026bf277db74efc2ba1ec203b15
Files: toy.py, config/config_synthetic.py, modules/vae.py, modules/encoders/encoder.py,
modules/encoders/enc_lstm.py, modules/decoders/decoder.py, modules/decoders/dec_lstm.py, data/text_data.py
License: MIT (Copyright (c) 2018 Junxian He; full text in LICENSES/jxhe-vae-lagging-encoder.txt)
Domain: generative, VAE (LSTM text VAE, posterior-collapse study on synthetic sequences)

Kept as written: ``GaussianEncoderBase.encode``/``reparameterize``, ``LSTMEncoder`` (with ``reset_parameters``: every
parameter uniform 0.01, embeddings uniform 0.1), ``LSTMDecoder.decode``/``reconstruct_error`` (with its
``CrossEntropyLoss(weight=vocab_mask, reduce=False)``, written ``reduction='none'``), ``VAE.loss``; ``main``'s
initializers, the two SGD optimizers, ``clip_grad = 5.0``, the KL annealing and the loop body of an iteration
(``zero_grad`` on both, ``vae.loss``, ``loss.mean(dim=-1)``, backward, clip, ``if not aggressive_flag:
enc_optimizer.step()``, ``dec_optimizer.step()``); ``toy.py``'s ``args.nz = 1``.

Deviations from the original:
- sizes for 2 CPU cores: the config's ``ni``/``enc_nh``/``dec_nh`` 50 and batch 16 kept; sentences are 10 tokens
  plus ``<s>`` and ``</s>``; 320 training sentences (the KL annealing's ``anneal_rate`` uses that count);
- data: ``datasets/synthetic_data`` (sampled by the authors from an LSTM LM with a latent code) is replaced by
  synthetic sentences made from ``seed``: each sentence draws one of four latent modes, and its 10 tokens follow
  that mode's Markov chain over 16 words (transition tables from ``seed``, each row peaked on two successors); the
  vocabulary is ``data/text_data.py``'s (``<pad>`` 0, ``<s>`` 1, ``</s>`` 2, ``<unk>`` 3, then the words) and the
  batches are ``create_data_batch``'s (start and stop symbols added, batch first), visited in an
  ``np.random.RandomState(seed).permutation`` per epoch;
- ``VAE`` gains a ``forward(x)`` returning ``self.loss(x, kl_weight, nsamples)`` (port: the Program's model needs a
  call); ``args`` is a ``SimpleNamespace``; the ``VarLSTM*`` classes, decoding (beam/greedy/sample), importance-
  weighted NLL, mutual information, the plotting, evaluation and checkpoints are dropped; the aggressive inner loop
  is left out (``aggressive`` 0, its default, never enters it);
- one ``train_step`` is one batch of the epoch loop and returns ``loss``; the Program's batch is batch 0 (inputs
  and targets are the same sentences),
  its ``loss_fn`` the mean of ``VAE.loss``'s total, its ``optimizer`` the decoder's (the encoder's SGD steps in
  the same ``train_step``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
from torch import nn, optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

clip_grad = 5.0
decay_epoch = 2
lr_decay = 0.5
max_decay = 5

N_SENTS, SENT_LEN, N_WORDS, N_MODES = 320, 10, 16, 4
PARAMS = {'enc_type': 'lstm', 'dec_type': 'lstm', 'nz': 2, 'ni': 50, 'enc_nh': 50, 'dec_nh': 50,
          'dec_dropout_in': 0.5, 'dec_dropout_out': 0.5, 'epochs': 50, 'batch_size': 16, 'test_nepoch': 1}


# ---- modules/encoders/encoder.py ---------------------------------------------------------------------------------

class GaussianEncoderBase(nn.Module):
    """docstring for EncoderBase"""
    def __init__(self):
        super(GaussianEncoderBase, self).__init__()

    def forward(self, x):
        raise NotImplementedError

    def encode(self, input, nsamples):
        # (batch_size, nz)
        mu, logvar = self.forward(input)

        # (batch, nsamples, nz)
        z = self.reparameterize(mu, logvar, nsamples)

        KL = 0.5 * (mu.pow(2) + logvar.exp() - logvar - 1).sum(dim=1)

        return z, KL

    def reparameterize(self, mu, logvar, nsamples=1):
        batch_size, nz = mu.size()
        std = logvar.mul(0.5).exp()

        mu_expd = mu.unsqueeze(1).expand(batch_size, nsamples, nz)
        std_expd = std.unsqueeze(1).expand(batch_size, nsamples, nz)

        eps = torch.zeros_like(std_expd).normal_()

        return mu_expd + torch.mul(eps, std_expd)


# ---- modules/encoders/enc_lstm.py --------------------------------------------------------------------------------

class LSTMEncoder(GaussianEncoderBase):
    """Gaussian LSTM Encoder with constant-length batching"""
    def __init__(self, args, vocab_size, model_init, emb_init):
        super(LSTMEncoder, self).__init__()
        self.ni = args.ni
        self.nh = args.enc_nh
        self.nz = args.nz

        self.embed = nn.Embedding(vocab_size, args.ni)

        self.lstm = nn.LSTM(input_size=args.ni,
                            hidden_size=args.enc_nh,
                            num_layers=1,
                            batch_first=True,
                            dropout=0)

        # dimension transformation to z (mean and logvar)
        self.linear = nn.Linear(args.enc_nh, 2 * args.nz, bias=False)

        self.reset_parameters(model_init, emb_init)

    def reset_parameters(self, model_init, emb_init):
        for param in self.parameters():
            model_init(param)
        emb_init(self.embed.weight)

    def forward(self, input):
        # (batch_size, seq_len-1, args.ni)
        word_embed = self.embed(input)

        _, (last_state, last_cell) = self.lstm(word_embed)  # noqa: RUF059

        mean, logvar = self.linear(last_state).chunk(2, -1)

        return mean.squeeze(0), logvar.squeeze(0)


# ---- modules/decoders/dec_lstm.py --------------------------------------------------------------------------------

class LSTMDecoder(nn.Module):  # (port) DecoderBase holds only abstract methods
    """LSTM decoder with constant-length batching"""
    def __init__(self, args, vocab, model_init, emb_init, bug=None):
        super(LSTMDecoder, self).__init__()
        self.ni = args.ni
        self.nh = args.dec_nh
        self.nz = args.nz
        self.vocab = vocab
        self.device = args.device
        self.bug = bug

        # no padding when setting padding_idx to -1
        self.embed = nn.Embedding(len(vocab), args.ni, padding_idx=-1)

        self.dropout_in = nn.Dropout(args.dec_dropout_in)
        self.dropout_out = nn.Dropout(args.dec_dropout_out)

        # for initializing hidden state and cell
        self.trans_linear = nn.Linear(args.nz, args.dec_nh, bias=False)

        # concatenate z with input
        self.lstm = nn.LSTM(input_size=args.ni + args.nz,
                            hidden_size=args.dec_nh,
                            num_layers=1,
                            batch_first=True)

        # prediction layer
        self.pred_linear = nn.Linear(args.dec_nh, len(vocab), bias=False)

        vocab_mask = torch.ones(len(vocab))
        # vocab_mask[vocab['<pad>']] = 0
        self.loss = nn.CrossEntropyLoss(weight=vocab_mask, reduction='none')  # (port) reduce=False

        self.reset_parameters(model_init, emb_init)

    def reset_parameters(self, model_init, emb_init):
        for param in self.parameters():
            model_init(param)
        emb_init(self.embed.weight)

    def decode(self, input, z):
        batch_size, n_sample, _ = z.size()
        seq_len = input.size(1)

        # (batch_size, seq_len, ni)
        word_embed = self.embed(input)
        word_embed = self.dropout_in(word_embed)

        if n_sample == 1:
            z_ = z.expand(batch_size, seq_len, self.nz)

        else:
            word_embed = word_embed.unsqueeze(1).expand(batch_size, n_sample, seq_len, self.ni) \
                                   .contiguous()

            # (batch_size * n_sample, seq_len, ni)
            word_embed = word_embed.view(batch_size * n_sample, seq_len, self.ni)

            z_ = z.unsqueeze(2).expand(batch_size, n_sample, seq_len, self.nz).contiguous()
            z_ = z_.view(batch_size * n_sample, seq_len, self.nz)

        # (batch_size * n_sample, seq_len, ni + nz)
        word_embed = torch.cat((word_embed, z_), -1)

        z = z.view(batch_size * n_sample, self.nz)
        c_init = self.trans_linear(z).unsqueeze(0)
        h_init = torch.tanh(c_init)
        output, _ = self.lstm(word_embed, (h_init, c_init))

        output = self.dropout_out(output)

        # (batch_size * n_sample, seq_len, vocab_size)
        output_logits = self.pred_linear(output)

        return output_logits

    def reconstruct_error(self, x, z):
        #remove end symbol
        src = x[:, :-1]

        # remove start symbol
        tgt = x[:, 1:]
        if self.bug == "decoder_fed_targets":
            src = x[:, 1:]

        batch_size, seq_len = src.size()
        n_sample = z.size(1)

        # (batch_size * n_sample, seq_len, vocab_size)
        output_logits = self.decode(src, z)

        if n_sample == 1:
            tgt = tgt.contiguous().view(-1)
        else:
            # (batch_size * n_sample * seq_len)
            tgt = tgt.unsqueeze(1).expand(batch_size, n_sample, seq_len) \
                     .contiguous().view(-1)

        # (batch_size * n_sample * seq_len)
        loss = self.loss(output_logits.view(-1, output_logits.size(2)),
                         tgt)

        # (batch_size, n_sample)
        return loss.view(batch_size, n_sample, -1).sum(-1)


# ---- modules/vae.py ----------------------------------------------------------------------------------------------

class VAE(nn.Module):
    """VAE with normal prior"""
    def __init__(self, encoder, decoder, args):
        super(VAE, self).__init__()
        self.encoder = encoder
        self.decoder = decoder

        self.args = args

        self.nz = args.nz

        loc = torch.zeros(self.nz, device=args.device)
        scale = torch.ones(self.nz, device=args.device)

        self.prior = torch.distributions.normal.Normal(loc, scale)
        self.kl_weight = 1.0  # (port) the loop's current KL weight, for forward

    def encode(self, x, nsamples=1):
        return self.encoder.encode(x, nsamples)

    def loss(self, x, kl_weight, nsamples=1):
        z, KL = self.encode(x, nsamples)

        # (batch)
        reconstruct_err = self.decoder.reconstruct_error(x, z).mean(dim=1)

        return reconstruct_err + kl_weight * KL, reconstruct_err, KL

    def forward(self, x):  # (port) the Program's model call
        return self.loss(x, self.kl_weight, nsamples=self.args.nsamples)


# ---- data (port): synthetic sentences and data/text_data.py's batching ------------------------------------------

def synthetic_sentences(seed):
    """Four latent modes, each a Markov chain over 16 words whose rows are peaked on two successors."""
    rng = np.random.RandomState(seed)
    trans = np.full((N_MODES, N_WORDS, N_WORDS), 0.02)
    for k in range(N_MODES):
        for w in range(N_WORDS):
            trans[k, w, rng.choice(N_WORDS, 2, replace=False)] += [0.6, 0.3]
    trans /= trans.sum(-1, keepdims=True)
    starts = rng.randint(0, N_WORDS, size=N_MODES)
    sents = []
    for _ in range(N_SENTS):
        k = rng.randint(N_MODES)
        w = starts[k]
        sent = [w]
        for _t in range(SENT_LEN - 1):
            w = rng.choice(N_WORDS, p=trans[k, w])
            sent.append(w)
        sents.append([4 + int(v) for v in sent])  # after <pad> <s> </s> <unk>
    vocab = {'<pad>': 0, '<s>': 1, '</s>': 2, '<unk>': 3}
    vocab.update({f'w{i}': 4 + i for i in range(N_WORDS)})
    return sents, vocab


def create_data_batch(data, vocab, batch_size):
    """``MonoTextData.create_data_batch`` for constant-length sentences: ``<s>`` + sentence + ``</s>``, batch first."""
    batches = []
    for i in range(0, len(data), batch_size):
        batch = [[vocab['<s>']] + sent + [vocab['</s>']] for sent in data[i:i + batch_size]]
        batches.append(torch.tensor(batch, dtype=torch.long))
    return batches


# ---- toy.py ------------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    np_rng = np.random.RandomState(seed)
    torch.manual_seed(seed)
    args = types.SimpleNamespace(optim='sgd', nsamples=1, warm_up=10, kl_start=1.0, aggressive=0,
                                 dataset='synthetic', **PARAMS)
    args.nz = 1
    args.device = torch.device("cpu")

    class uniform_initializer(object):  # noqa: UP004
        def __init__(self, stdv):
            self.stdv = stdv
        def __call__(self, tensor):
            nn.init.uniform_(tensor, -self.stdv, self.stdv)

    opt_dict = {"not_improved": 0, "lr": 1., "best_loss": 1e4}

    sents, vocab = synthetic_sentences(seed)
    vocab_size = len(vocab)

    model_init = uniform_initializer(0.01)
    emb_init = uniform_initializer(0.1)

    encoder = LSTMEncoder(args, vocab_size, model_init, emb_init)
    args.enc_nh = args.dec_nh

    decoder = LSTMDecoder(args, vocab, model_init, emb_init, bug=bug)

    vae = VAE(encoder, decoder, args).to(args.device)

    if args.optim == 'sgd':
        enc_optimizer = optim.SGD(vae.encoder.parameters(), lr=1.0)
        dec_optimizer = optim.SGD(vae.decoder.parameters(), lr=1.0)
        opt_dict['lr'] = 1.0

    aggressive_flag = True if args.aggressive else False  # noqa: SIM210
    vae.train()

    kl_weight = args.kl_start
    anneal_rate = (1.0 - args.kl_start) / (args.warm_up * (len(sents) / args.batch_size))

    train_data_batch = create_data_batch(sents, vocab, args.batch_size)
    state = {"order": [], "kl_weight": kl_weight}

    def train_step():
        if not state["order"]:
            state["order"] = list(np_rng.permutation(len(train_data_batch)))
        i = state["order"].pop(0)
        batch_data = train_data_batch[i]

        # kl_weight = 1.0
        state["kl_weight"] = kl_weight = min(1.0, state["kl_weight"] + anneal_rate)
        vae.kl_weight = kl_weight

        enc_optimizer.zero_grad()
        dec_optimizer.zero_grad()

        loss, loss_rc, loss_kl = vae.loss(batch_data, kl_weight, nsamples=args.nsamples)

        loss = loss.mean(dim=-1)

        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), clip_grad)

        loss_rc = loss_rc.sum()
        loss_kl = loss_kl.sum()

        if bug == "encoder_step_guard_inverted":
            if aggressive_flag:
                enc_optimizer.step()
        elif not aggressive_flag:
            enc_optimizer.step()

        dec_optimizer.step()
        return loss.detach()

    def loss_fn(out, _target):  # the loop's loss: the mean over the batch of VAE.loss's total
        return out[0].mean(dim=-1)

    first = train_data_batch[0]
    return Program(name="laggingvae_toy_lstm", model=vae, batch=(first, first), loss_fn=loss_fn,
                   optimizer=dec_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic teacher-forcing slip: the decoder's input taken as ``x[:, 1:]``, the same tokens as its targets: each
    # position is fed the token it must predict, so the reconstruction term is a copy task and the latent code is
    # not needed (a collapse the paper's study cannot see).
    # first contact declared TASK; the finding is DEPENDENCY dependency.future_visible (the output at a position moves
    # with the token it predicts: the decoder reads its own target), this bug's mechanism (reviewed after first contact)
    Bug("decoder_fed_targets", functools.partial(_build, bug="decoder_fed_targets"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic flag slip: the vanilla mode's guard written ``if aggressive_flag: enc_optimizer.step()``: with
    # ``aggressive`` 0 the encoder gets its gradients every batch and is never stepped, so q(z|x) stays at its
    # initialization while the decoder trains.
    Bug("encoder_step_guard_inverted", functools.partial(_build, bug="encoder_step_guard_inverted"), "step_probe",
        ("encoder",)),
]
