"""kefirski/pytorch_RVAE's modules (``selfModules/``: ``TDNN``, ``Highway``, ``Embedding``; ``model/encoder.py``,
``model/decoder.py``; ``utils/functional.py``'s ``kld_coef``; ``utils/parameters.py``), for ``rvae_sentence.py``; the
deviations are listed there (sizes in ``Parameters``, the word embedding matrix given instead of read from
``data/word_embeddings.npy``, torch 0.3 idioms, allocation-check asserts dropped).

Source: https://github.com/kefirski/pytorch_RVAE
Commit: 19103d1298d7d77423c6e7d76dcc190400d7256e
Files: selfModules/tdnn.py, selfModules/highway.py, selfModules/embedding.py, model/encoder.py, model/decoder.py,
utils/functional.py, utils/parameters.py
License: MIT (Copyright (c) 2017 Daniil Gavrilov; full text in LICENSES/kefirski-pytorch_RVAE.txt)
"""
# ruff: noqa: UP008

from __future__ import annotations

import math

import torch as t
import torch.nn.functional as F
from torch import nn
from torch.nn import Parameter

# ---- utils/functional.py, utils/parameters.py ---------------------------------------------------------------------

def kld_coef(i):
    return (math.tanh((i - 3500)/1000) + 1)/2


class Parameters:
    def __init__(self, max_word_len, max_seq_len, word_vocab_size, char_vocab_size):
        self.max_word_len = int(max_word_len)
        self.max_seq_len = int(max_seq_len) + 1  # go or eos token

        self.word_vocab_size = int(word_vocab_size)
        self.char_vocab_size = int(char_vocab_size)

        self.word_embed_size = 16
        self.char_embed_size = 8

        self.kernels = [(1, 4), (2, 4), (3, 8)]
        self.sum_depth = sum(depth for _, depth in self.kernels)

        self.encoder_rnn_size = 16
        self.encoder_num_layers = 1

        self.latent_variable_size = 8

        self.decoder_rnn_size = 32
        self.decoder_num_layers = 2


# ---- selfModules/tdnn.py, highway.py, embedding.py ----------------------------------------------------------------

class TDNN(nn.Module):
    def __init__(self, params):
        super(TDNN, self).__init__()

        self.params = params

        self.kernels = [Parameter(t.Tensor(out_dim, self.params.char_embed_size, kW).uniform_(-1, 1))
                        for kW, out_dim in params.kernels]
        self._add_to_parameters(self.kernels, 'TDNN_kernel')

    def forward(self, x):
        input_size = x.size()
        input_size_len = len(input_size)

        assert input_size_len == 4, \
            f'Wrong input rang, must be equal to 4, but {input_size_len} found'

        [batch_size, seq_len, _, embed_size] = input_size

        assert embed_size == self.params.char_embed_size, \
            f'Wrong embedding size, must be equal to {self.params.char_embed_size}, but {embed_size} found'

        # leaps with shape
        x = x.view(-1, self.params.max_word_len, self.params.char_embed_size).transpose(1, 2).contiguous()

        xs = [t.tanh(F.conv1d(x, kernel)) for kernel in self.kernels]
        xs = [x.max(2)[0] for x in xs]

        x = t.cat(xs, 1)
        x = x.view(batch_size, seq_len, -1)

        return x

    def _add_to_parameters(self, parameters, name):
        for i, parameter in enumerate(parameters):
            self.register_parameter(name=f'{name}-{i}', param=parameter)


class Highway(nn.Module):
    def __init__(self, size, num_layers, f):

        super(Highway, self).__init__()

        self.num_layers = num_layers

        self.nonlinear = [nn.Linear(size, size) for _ in range(num_layers)]
        for i, module in enumerate(self.nonlinear):
            self._add_to_parameters(module.parameters(), f'nonlinear_module_{i}')

        self.linear = [nn.Linear(size, size) for _ in range(num_layers)]
        for i, module in enumerate(self.linear):
            self._add_to_parameters(module.parameters(), f'linear_module_{i}')

        self.gate = [nn.Linear(size, size) for _ in range(num_layers)]
        for i, module in enumerate(self.gate):
            self._add_to_parameters(module.parameters(), f'gate_module_{i}')

        self.f = f

    def forward(self, x):
        for layer in range(self.num_layers):
            gate = t.sigmoid(self.gate[layer](x))

            nonlinear = self.f(self.nonlinear[layer](x))
            linear = self.linear[layer](x)

            x = gate * nonlinear + (1 - gate) * linear

        return x

    def _add_to_parameters(self, parameters, name):
        for i, parameter in enumerate(parameters):
            self.register_parameter(name=f'{name}-{i}', param=parameter)


class Embedding(nn.Module):
    def __init__(self, params, word_embed):
        super(Embedding, self).__init__()

        self.params = params

        self.word_embed = nn.Embedding(self.params.word_vocab_size, self.params.word_embed_size)
        self.char_embed = nn.Embedding(self.params.char_vocab_size, self.params.char_embed_size)
        self.word_embed.weight = Parameter(t.from_numpy(word_embed).float(), requires_grad=False)
        self.char_embed.weight = Parameter(
            t.Tensor(self.params.char_vocab_size, self.params.char_embed_size).uniform_(-1, 1))

        self.TDNN = TDNN(self.params)

    def forward(self, word_input, character_input):
        assert word_input.size()[:2] == character_input.size()[:2], \
            f'Word input and character input must have the same sizes, but {word_input.size()} and {character_input.size()} found'

        [batch_size, seq_len] = word_input.size()

        word_input = self.word_embed(word_input)

        character_input = character_input.view(-1, self.params.max_word_len)
        character_input = self.char_embed(character_input)
        character_input = character_input.view(batch_size,
                                               seq_len,
                                               self.params.max_word_len,
                                               self.params.char_embed_size)

        character_input = self.TDNN(character_input)

        result = t.cat([word_input, character_input], 2)

        return result


# ---- model/encoder.py, model/decoder.py, model/rvae.py ------------------------------------------------------------

class Encoder(nn.Module):
    def __init__(self, params):
        super(Encoder, self).__init__()

        self.params = params

        self.hw1 = Highway(self.params.sum_depth + self.params.word_embed_size, 2, F.relu)

        self.rnn = nn.LSTM(input_size=self.params.word_embed_size + self.params.sum_depth,
                           hidden_size=self.params.encoder_rnn_size,
                           num_layers=self.params.encoder_num_layers,
                           batch_first=True,
                           bidirectional=True)

    def forward(self, input):
        [batch_size, seq_len, embed_size] = input.size()

        input = input.view(-1, embed_size)
        input = self.hw1(input)
        input = input.view(batch_size, seq_len, embed_size)

        ''' Unfold rnn with zero initial state and get its final state from the last layer
        '''
        _, (_, final_state) = self.rnn(input)

        final_state = final_state.view(self.params.encoder_num_layers, 2, batch_size, self.params.encoder_rnn_size)
        final_state = final_state[-1]
        h_1, h_2 = final_state[0], final_state[1]
        final_state = t.cat([h_1, h_2], 1)

        return final_state


class Decoder(nn.Module):
    def __init__(self, params, bug=None):
        super(Decoder, self).__init__()

        self.params = params
        self.bug = bug

        self.rnn = nn.LSTM(input_size=self.params.latent_variable_size + self.params.word_embed_size,
                           hidden_size=self.params.decoder_rnn_size,
                           num_layers=self.params.decoder_num_layers,
                           batch_first=True)

        self.fc = nn.Linear(self.params.decoder_rnn_size, self.params.word_vocab_size)

    def forward(self, decoder_input, z, drop_prob, initial_state=None):
        [batch_size, seq_len, _] = decoder_input.size()

        '''
            decoder rnn is conditioned on context via additional bias = W_cond * z to every input token
        '''
        decoder_input = F.dropout(decoder_input, drop_prob)

        z = t.cat([z] * seq_len, 1).view(batch_size, seq_len, self.params.latent_variable_size)
        if self.bug == "z_not_fed_to_decoder":
            # the context slot filled with zeros: the decoder never sees the sentence's code
            z = t.zeros_like(z)
        decoder_input = t.cat([decoder_input, z], 2)

        rnn_out, final_state = self.rnn(decoder_input, initial_state)

        rnn_out = rnn_out.contiguous().view(-1, self.params.decoder_rnn_size)
        result = self.fc(rnn_out)
        result = result.view(batch_size, seq_len, self.params.word_vocab_size)

        return result, final_state
