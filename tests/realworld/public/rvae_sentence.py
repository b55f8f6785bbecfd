"""A recurrent variational autoencoder for sentences (Bowman et al., "Generating Sentences from a Continuous Space")
with Kim et al.'s character-aware word inputs, as kefirski/pytorch_RVAE trains it (``train.py`` through
``RVAE.trainer``): frozen pretrained word embeddings joined to a TDNN (multi-width character convolutions with
max-over-time pooling), a two-layer highway network, a bidirectional LSTM encoder over the reversed, left-padded
sentence whose final cell states give ``mu`` and ``logvar``, a reparameterized ``z`` concatenated to every input of a
two-layer LSTM decoder with word dropout on its inputs (``F.dropout`` on the embeddings), teacher forcing from a go
token, and ``loss = 79 * cross_entropy + kld_coef(i) * kld`` with the tanh KL annealing schedule; Adam over the
learnable parameters (``learnable_parameters``: the word embedding is constant).

Source: https://github.com/kefirski/pytorch_RVAE
Commit: 19103d1298d7d77423c6e7d76dcc190400d7256e
Files: train.py, model/rvae.py, model/encoder.py, model/decoder.py, selfModules/embedding.py, selfModules/highway.py,
selfModules/tdnn.py, utils/batch_loader.py (next_batch, encode_characters), utils/functional.py, utils/parameters.py
License: MIT (Copyright (c) 2017 Daniil Gavrilov; full text in LICENSES/kefirski-pytorch_RVAE.txt)
Domain: sentence variational autoencoder / conditional language model (character-aware inputs, KL annealing)

Deviations from the original:
- data: the repository's PTB-style text and the word embeddings trained by ``train_word_embeddings.py``
  (``data/word_embeddings.npy``) are replaced by synthetic sentences made from ``seed`` (5-10 words over a vocabulary
  of 40 words of 3-6 random letters, each word followed by one of two successors fixed per word) and a fixed random
  embedding matrix made from ``seed`` (loaded as the constant ``word_embed`` exactly as the file would be);
  ``BatchLoader``'s vocabularies are built the same way (sorted words, then pad ``_``, go ``>``, end ``|``; characters
  with the blind symbol and padding by ``''``) and ``next_batch`` is copied;
- sizes for 2 CPU cores: word_embed_size 300 -> 16, char_embed_size 15 -> 8, kernels [(1, 25) ... (6, 150)] ->
  [(1, 4), (2, 4), (3, 8)], encoder_rnn_size 600 -> 16, latent_variable_size 1100 -> 8, decoder_rnn_size 800 -> 32
  (decoder_num_layers 2, batch_size 32, dropout 0.3 unchanged); learning_rate 5e-5 -> 3e-3 for 30 steps;
- torch 0.3 idioms: ``Variable`` wrappers and the ``.cuda()`` branches dropped; ``F.sigmoid``/``F.tanh`` are
  ``torch.sigmoid``/``torch.tanh``; TDNN's ``x.max(2)[0].squeeze(2)`` is ``x.max(2)[0]`` (``max`` kept the dimension
  in the torch the code was written for); the allocation-check asserts (``parameters_allocation_check``) dropped;
- one ``train_step`` is ``RVAE.trainer``'s ``train(i, batch_size, use_cuda, dropout)`` with the iteration counter
  kept by the step; validation prints, sampling and saving are left out; ``eval_fn`` is ``RVAE.validater``'s cross
  entropy on a given batch;
- the Program's batch is ``((dropout, encoder_word_input, encoder_character_input, decoder_word_input,
  decoder_character_input), target)`` of one training batch and ``loss_fn`` the trainer's loss at iteration 0.
"""
# ruff: noqa: UP008

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch as t
import torch.nn.functional as F
from torch import nn
from torch.optim import Adam

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _rvae_sentence_lib import Decoder, Embedding, Encoder, Parameters, kld_coef

# ---- model/rvae.py ------------------------------------------------------------------------------------------------

class RVAE(nn.Module):
    def __init__(self, params, word_embed, bug=None):
        super(RVAE, self).__init__()

        self.params = params
        self.bug = bug

        self.embedding = Embedding(self.params, word_embed)

        self.encoder = Encoder(self.params)

        self.context_to_mu = nn.Linear(self.params.encoder_rnn_size * 2, self.params.latent_variable_size)
        self.context_to_logvar = nn.Linear(self.params.encoder_rnn_size * 2, self.params.latent_variable_size)

        self.decoder = Decoder(self.params, bug=bug)

    def forward(self, drop_prob,
                encoder_word_input=None, encoder_character_input=None,
                decoder_word_input=None, decoder_character_input=None,
                z=None, initial_state=None):
        if z is None:
            ''' Get context from encoder and sample z ~ N(mu, std)
            '''
            [batch_size, _] = encoder_word_input.size()

            encoder_input = self.embedding(encoder_word_input, encoder_character_input)

            context = self.encoder(encoder_input)

            mu = self.context_to_mu(context)
            logvar = self.context_to_logvar(context)
            std = t.exp(0.5 * logvar)

            z = t.randn([batch_size, self.params.latent_variable_size])

            z = z * std + mu

            kld = (-0.5 * t.sum(logvar - t.pow(mu, 2) - t.exp(logvar) + 1, 1)).mean().squeeze()
        else:
            kld = None

        decoder_input = self.embedding.word_embed(decoder_word_input)
        out, final_state = self.decoder(decoder_input, z, drop_prob, initial_state)

        return out, final_state, kld

    def learnable_parameters(self):

        # word_embedding is constant parameter thus it must be dropped from list of parameters for optimizer
        return [p for p in self.parameters() if p.requires_grad]

    def trainer(self, optimizer, batch_loader):
        def train(i, batch_size, use_cuda, dropout):
            input = batch_loader.next_batch(batch_size, 'train')
            input = [t.from_numpy(var) for var in input]
            input = [var.long() for var in input]

            [encoder_word_input, encoder_character_input, decoder_word_input, decoder_character_input, target] = input

            logits, _, kld = self(dropout,
                                  encoder_word_input, encoder_character_input,
                                  decoder_word_input, decoder_character_input,
                                  z=None)

            logits = logits.view(-1, self.params.word_vocab_size)
            target = target.view(-1)
            cross_entropy = F.cross_entropy(logits, target)

            loss = 79 * cross_entropy + kld_coef(i) * kld

            optimizer.zero_grad()
            loss.backward()
            if self.bug != "optimizer_step_dropped":
                optimizer.step()

            return cross_entropy, kld, kld_coef(i)

        return train

    def validater(self, batch_loader):
        def validate(batch_size, use_cuda):
            input = batch_loader.next_batch(batch_size, 'valid')
            input = [t.from_numpy(var) for var in input]
            input = [var.long() for var in input]

            [encoder_word_input, encoder_character_input, decoder_word_input, decoder_character_input, target] = input

            logits, _, kld = self(0.,
                                  encoder_word_input, encoder_character_input,
                                  decoder_word_input, decoder_character_input,
                                  z=None)

            logits = logits.view(-1, self.params.word_vocab_size)
            target = target.view(-1)

            cross_entropy = F.cross_entropy(logits, target)

            return cross_entropy, kld

        return validate


# ---- utils/batch_loader.py (vocabularies built as written, from synthetic sentences) ------------------------------

class BatchLoader:
    def __init__(self, seed, bug=None):
        rng = np.random.RandomState(seed)
        self.rng, self.bug = rng, bug
        self.blind_symbol = ''
        self.pad_token = '_'
        self.go_token = '>'
        self.end_token = '|'

        letters = 'abcdefghijklmnopqrstuvwxyz'
        words = sorted({''.join(rng.choice(list(letters), rng.randint(3, 7))) for _ in range(40)})
        successors = {w: [words[j] for j in rng.choice(len(words), 2, replace=False)] for w in words}
        sentences = []
        for _ in range(600):
            w = words[rng.randint(len(words))]
            line = [w]
            for _ in range(rng.randint(4, 10)):
                w = successors[w][rng.randint(2)]
                line.append(w)
            sentences.append(line)

        chars = sorted(set(''.join(words))) + [self.blind_symbol, self.pad_token, self.go_token, self.end_token]
        self.idx_to_char = chars
        self.char_to_idx = {x: i for i, x in enumerate(self.idx_to_char)}
        self.chars_vocab_size = len(self.idx_to_char)

        self.idx_to_word = sorted(words) + [self.pad_token, self.go_token, self.end_token]
        self.word_to_idx = {x: i for i, x in enumerate(self.idx_to_word)}
        self.words_vocab_size = len(self.idx_to_word)

        self.max_word_len = np.amax([len(word) for word in self.idx_to_word])
        self.max_seq_len = np.amax([len(line) for line in sentences])
        data = [sentences[:500], sentences[500:]]
        self.word_tensor = [[[self.word_to_idx[w] for w in line] for line in part] for part in data]
        self.character_tensor = [[[self.encode_characters(w) for w in line] for line in part] for part in data]
        self.num_lines = [len(part) for part in data]

    def encode_characters(self, characters):
        word_len = len(characters)
        to_add = self.max_word_len - word_len
        characters_idx = [self.char_to_idx[i] for i in characters] + to_add * [self.char_to_idx['']]
        return characters_idx

    def next_batch(self, batch_size, target_str):
        target = 0 if target_str == 'train' else 1

        indexes = np.array(self.rng.randint(self.num_lines[target], size=batch_size))

        encoder_word_input = [self.word_tensor[target][index] for index in indexes]
        encoder_character_input = [self.character_tensor[target][index] for index in indexes]
        input_seq_len = [len(line) for line in encoder_word_input]
        max_input_seq_len = np.amax(input_seq_len)

        encoded_words = [[idx for idx in line] for line in encoder_word_input]
        decoder_word_input = [[self.word_to_idx[self.go_token]] + line for line in encoder_word_input]
        decoder_character_input = [[self.encode_characters(self.go_token)] + line for line in encoder_character_input]
        if self.bug == "target_not_shifted":
            # the decoder's targets built from its own inputs (go token first), not the words after them
            decoder_output = [[self.word_to_idx[self.go_token]] + line for line in encoded_words]
        else:
            decoder_output = [line + [self.word_to_idx[self.end_token]] for line in encoded_words]

        # sorry
        for i, line in enumerate(decoder_word_input):
            line_len = input_seq_len[i]
            to_add = max_input_seq_len - line_len
            decoder_word_input[i] = line + [self.word_to_idx[self.pad_token]] * to_add

        for i, line in enumerate(decoder_character_input):
            line_len = input_seq_len[i]
            to_add = max_input_seq_len - line_len
            decoder_character_input[i] = line + [self.encode_characters(self.pad_token)] * to_add

        for i, line in enumerate(decoder_output):
            line_len = input_seq_len[i]
            to_add = max_input_seq_len - line_len
            decoder_output[i] = line + [self.word_to_idx[self.pad_token]] * to_add

        for i, line in enumerate(encoder_word_input):
            line_len = input_seq_len[i]
            to_add = max_input_seq_len - line_len
            encoder_word_input[i] = [self.word_to_idx[self.pad_token]] * to_add + line[::-1]

        for i, line in enumerate(encoder_character_input):
            line_len = input_seq_len[i]
            to_add = max_input_seq_len - line_len
            encoder_character_input[i] = [self.encode_characters(self.pad_token)] * to_add + line[::-1]

        return np.array(encoder_word_input), np.array(encoder_character_input), \
               np.array(decoder_word_input), np.array(decoder_character_input), np.array(decoder_output)


# ---- train.py -----------------------------------------------------------------------------------------------------

BATCH_SIZE, LEARNING_RATE, DROPOUT = 32, 3e-3, 0.3


def _build(seed, bug=None):
    t.manual_seed(seed)
    batch_loader = BatchLoader(seed, bug=bug)
    parameters = Parameters(batch_loader.max_word_len,
                            batch_loader.max_seq_len,
                            batch_loader.words_vocab_size,
                            batch_loader.chars_vocab_size)
    word_embed = np.random.RandomState(seed + 1).normal(size=(parameters.word_vocab_size, parameters.word_embed_size))

    rvae = RVAE(parameters, word_embed, bug=bug)

    optimizer = Adam(rvae.learnable_parameters(), LEARNING_RATE)

    train_step = rvae.trainer(optimizer, batch_loader)
    state = {'iteration': 0}

    def step():
        cross_entropy, kld, coef = train_step(state['iteration'], BATCH_SIZE, False, DROPOUT)
        state['iteration'] += 1
        return 79 * cross_entropy.detach() + coef * kld.detach()

    first = [t.from_numpy(var).long() for var in batch_loader.next_batch(BATCH_SIZE, 'train')]
    inputs = (DROPOUT, *first[:4])

    def loss_fn(out, target):
        logits, _, kld = out
        return 79 * F.cross_entropy(logits.reshape(-1, parameters.word_vocab_size), target.reshape(-1)) \
            + kld_coef(0) * kld

    def eval_fn(model, batch):
        with t.no_grad():
            logits, _, _ = model(0., *batch[0][1:])
            return float(F.cross_entropy(logits.reshape(-1, parameters.word_vocab_size), batch[1].reshape(-1)))

    return Program(name="rvae_sentence", model=rvae, batch=(inputs, first[4]), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=step, eval_fn=eval_fn, frozen=("embedding.word_embed.weight",))


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the decoder's targets built like its inputs (go token first): each position is scored on the word it
    # was just given. (Declared TASK at first contact; reviewed after public-31's: the decoder's input at each position
    # is the target it is scored on, which is the leak dependency.target_leak names, so the FAIL names the defect.)
    Bug("target_not_shifted", functools.partial(_build, bug="target_not_shifted"), "learning_ledger", ("DEPENDENCY",),
        kind="dependency.target_leak"),
    # classic: the latent code not reaching the decoder (its slot filled with zeros): the reconstruction cannot
    # depend on the encoded sentence, and the encoder learns only from the KL term.
    Bug("z_not_fed_to_decoder", functools.partial(_build, bug="z_not_fed_to_decoder"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic: optimizer.step() left out of the trainer: gradients are computed and zeroed, nothing is updated.
    Bug("optimizer_step_dropped", functools.partial(_build, bug="optimizer_step_dropped"), "step_probe", (),
        kind="step.no_optimizer_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
