# ruff: noqa: UP008, F541, RUF059, PLR0402
"""The original Transformer (Vaswani et al.) for machine translation, from Aleksa Gordić's
pytorch-original-transformer: a pre-LayerNorm encoder-decoder with hand-written multi-headed attention (masks
applied by ``masked_fill_`` with ``-inf``), sinusoidal positions, embeddings scaled by ``sqrt(d)``, a log-softmax
generator reshaped to ``(B*T, V)``; label-smoothed target distributions (the pad column and pad targets zeroed)
under ``KLDivLoss(reduction='batchmean')``; Adam (0.9, 0.98, 1e-9) wrapped by ``CustomLRAdamOptimizer``, which sets
the lr of every group to ``d ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)`` before each step.

Source: https://github.com/gordicaleksa/pytorch-original-transformer
Commit: d5b29a41c5c3f68e1bcd0c528a58281632fa9d6d
Files: training_script.py, models/definitions/transformer_model.py, utils/optimizers_and_distributions.py,
utils/data_utils.py, utils/constants.py
License: MIT (Copyright (c) 2020 Aleksa Gordić; full text in LICENSES/gordicaleksa-pytorch-original-transformer.txt)
Domain: seq2seq, neural machine translation (Transformer encoder-decoder, label smoothing, warm-up lr)

Kept as written: the whole ``Transformer`` (Embedding, PositionalEncoding, Encoder/EncoderLayer, Decoder/
DecoderLayer with deep-copied self- and source-attention, SublayerLogic, PositionwiseFeedForwardNet,
MultiHeadedAttention, DecoderGenerator, ``get_clones``, xavier init of every matrix), ``CustomLRAdamOptimizer``,
``LabelSmoothingDistribution``, ``get_src_and_trg_batches`` and the mask helpers of utils/data_utils.py, and the
CORE PART of ``train_val_loop`` (batches split into source, shifted target input and flattened target output,
masks, forward, smoothed targets, zero_grad, KL loss, backward, step).

Deviations from the original:
- sizes for 2 CPU cores: model dimension 512 -> 32, 8 heads -> 4, 6 layers -> 2 (dropout 0.1 and label smoothing
  0.1 kept); batches of 16 sentences instead of ~1500 tokens; ``num_warmup_steps`` 4000 -> 100 so that the 30
  steps of the self-check are not all spent at a near-zero learning rate (the schedule's formula is unchanged);
- data: IWSLT / WMT14 through torchtext and spaCy are not here: synthetic "sentences" made from ``seed`` (source
  of 4-9 words over 24 word ids, the target the source's words mapped by a fixed random dictionary and read in
  reverse), numericalized as torchtext's Fields do (``<unk>`` 0, ``<pad>`` 1, the target wrapped in ``<s>`` 2 /
  ``</s>`` 3, batch_first, padded to the batch's longest); a tiny ``Batch`` with ``.src`` / ``.trg`` stands for
  torchtext's, batches drawn in a shuffled order from a ``torch.Generator(seed)``; CUDA dropped;
- the logging, tensorboard and checkpoint code after the CORE PART is dropped; one ``train_step`` is one batch of
  the training loop; ``eval_fn`` is the validation loop's loss on a held-out batch (BLEU via nltk is not here);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import math
import pathlib
import sys

import torch
import torch.nn as nn
from torch.optim import Adam

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# utils/constants.py (sizes changed, see the docstring)
BASELINE_MODEL_NUMBER_OF_LAYERS = 2
BASELINE_MODEL_DIMENSION = 32
BASELINE_MODEL_NUMBER_OF_HEADS = 4
BASELINE_MODEL_DROPOUT_PROB = 0.1
BASELINE_MODEL_LABEL_SMOOTHING_VALUE = 0.1

BOS_TOKEN = '<s>'
EOS_TOKEN = '</s>'
PAD_TOKEN = "<pad>"

N_WORDS = 24
BATCH = 16


# models/definitions/transformer_model.py
class Transformer(nn.Module):

    def __init__(self, model_dimension, src_vocab_size, trg_vocab_size, number_of_heads, number_of_layers,
                 dropout_probability, log_attention_weights=False, bug=None):
        super().__init__()

        # Embeds source/target token ids into embedding vectors
        self.src_embedding = Embedding(src_vocab_size, model_dimension)
        self.trg_embedding = Embedding(trg_vocab_size, model_dimension)

        # Adds positional information to source/target token's embedding vector
        self.src_pos_embedding = PositionalEncoding(model_dimension, dropout_probability)
        self.trg_pos_embedding = PositionalEncoding(model_dimension, dropout_probability)

        # All of these will get deep-copied multiple times internally
        mha = MultiHeadedAttention(model_dimension, number_of_heads, dropout_probability, log_attention_weights)
        pwn = PositionwiseFeedForwardNet(model_dimension, dropout_probability)
        encoder_layer = EncoderLayer(model_dimension, dropout_probability, mha, pwn)
        decoder_layer = DecoderLayer(model_dimension, dropout_probability, mha, pwn, bug=bug)

        self.encoder = Encoder(encoder_layer, number_of_layers)
        self.decoder = Decoder(decoder_layer, number_of_layers)

        # Converts final target token representations into log probabilities vectors of the target vocab size
        self.decoder_generator = DecoderGenerator(model_dimension, trg_vocab_size)
        self.init_params()

    def init_params(self, default_initialization=False):
        # Not mentioned in the paper, but other implementations used xavier.
        if not default_initialization:
            for name, p in self.named_parameters():
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)

    def forward(self, src_token_ids_batch, trg_token_ids_batch, src_mask, trg_mask):
        src_representations_batch = self.encode(src_token_ids_batch, src_mask)
        trg_log_probs = self.decode(trg_token_ids_batch, src_representations_batch, trg_mask, src_mask)
        return trg_log_probs

    def encode(self, src_token_ids_batch, src_mask):
        src_embeddings_batch = self.src_embedding(src_token_ids_batch)  # get embedding vectors for src token ids
        src_embeddings_batch = self.src_pos_embedding(src_embeddings_batch)  # add positional embedding
        src_representations_batch = self.encoder(src_embeddings_batch, src_mask)  # forward pass through the encoder

        return src_representations_batch

    def decode(self, trg_token_ids_batch, src_representations_batch, trg_mask, src_mask):
        trg_embeddings_batch = self.trg_embedding(trg_token_ids_batch)  # get embedding vectors for trg token ids
        trg_embeddings_batch = self.trg_pos_embedding(trg_embeddings_batch)  # add positional embedding
        # Shape (B, T, D), where B - batch size, T - longest target token-sequence length and D - model dimension
        trg_representations_batch = self.decoder(trg_embeddings_batch, src_representations_batch, trg_mask, src_mask)

        # After this line we'll have a shape (B, T, V), where V - target vocab size
        trg_log_probs = self.decoder_generator(trg_representations_batch)

        # Reshape into (B*T, V) as that's a suitable format for passing it into KL div loss
        trg_log_probs = trg_log_probs.reshape(-1, trg_log_probs.shape[-1])

        return trg_log_probs  # the reason I use log here is that PyTorch's nn.KLDivLoss expects log probabilities


#
# Encoder architecture
#


class Encoder(nn.Module):

    def __init__(self, encoder_layer, number_of_layers):
        super().__init__()
        assert isinstance(encoder_layer, EncoderLayer), f'Expected EncoderLayer got {type(encoder_layer)}.'

        self.encoder_layers = get_clones(encoder_layer, number_of_layers)
        self.norm = nn.LayerNorm(encoder_layer.model_dimension)

    def forward(self, src_embeddings_batch, src_mask):
        src_representations_batch = src_embeddings_batch

        # Forward pass through the encoder stack
        for encoder_layer in self.encoder_layers:
            # src_mask's role is to mask/ignore padded token representations in the multi-headed self-attention module
            src_representations_batch = encoder_layer(src_representations_batch, src_mask)

        return self.norm(src_representations_batch)


class EncoderLayer(nn.Module):

    def __init__(self, model_dimension, dropout_probability, multi_headed_attention, pointwise_net):
        super().__init__()
        num_of_sublayers_encoder = 2
        self.sublayers = get_clones(SublayerLogic(model_dimension, dropout_probability), num_of_sublayers_encoder)

        self.multi_headed_attention = multi_headed_attention
        self.pointwise_net = pointwise_net

        self.model_dimension = model_dimension

    def forward(self, src_representations_batch, src_mask):
        encoder_self_attention = lambda srb: self.multi_headed_attention(query=srb, key=srb, value=srb, mask=src_mask)

        # Self-attention MHA sublayer followed by point-wise feed forward net sublayer
        src_representations_batch = self.sublayers[0](src_representations_batch, encoder_self_attention)
        src_representations_batch = self.sublayers[1](src_representations_batch, self.pointwise_net)

        return src_representations_batch


#
# Decoder architecture
#


class Decoder(nn.Module):

    def __init__(self, decoder_layer, number_of_layers):
        super().__init__()
        assert isinstance(decoder_layer, DecoderLayer), f'Expected DecoderLayer got {type(decoder_layer)}.'

        self.decoder_layers = get_clones(decoder_layer, number_of_layers)
        self.norm = nn.LayerNorm(decoder_layer.model_dimension)

    def forward(self, trg_embeddings_batch, src_representations_batch, trg_mask, src_mask):
        trg_representations_batch = trg_embeddings_batch

        # Forward pass through the decoder stack
        for decoder_layer in self.decoder_layers:
            # Target mask masks pad tokens as well as future tokens (current target token can't look forward)
            trg_representations_batch = decoder_layer(trg_representations_batch, src_representations_batch,
                                                      trg_mask, src_mask)

        return self.norm(trg_representations_batch)


class DecoderLayer(nn.Module):

    def __init__(self, model_dimension, dropout_probability, multi_headed_attention, pointwise_net, bug=None):
        super().__init__()
        num_of_sublayers_decoder = 3
        self.sublayers = get_clones(SublayerLogic(model_dimension, dropout_probability), num_of_sublayers_decoder)

        if bug == "decoder_attentions_shared":
            # the bug the author reports in this repository's models/definitions/transformer_model.py (__main__):
            # "I had a bug with MHA (attention) in decoder, where both src and trg were referencing the same MHA
            # object in mem" (no deepcopy)
            self.trg_multi_headed_attention = multi_headed_attention
            self.src_multi_headed_attention = multi_headed_attention
        else:
            self.trg_multi_headed_attention = copy.deepcopy(multi_headed_attention)
            self.src_multi_headed_attention = copy.deepcopy(multi_headed_attention)
        self.pointwise_net = pointwise_net

        self.model_dimension = model_dimension

    def forward(self, trg_representations_batch, src_representations_batch, trg_mask, src_mask):
        srb = src_representations_batch  # simple/short alias
        decoder_trg_self_attention = lambda trb: self.trg_multi_headed_attention(query=trb, key=trb, value=trb,
                                                                                 mask=trg_mask)
        decoder_src_attention = lambda trb: self.src_multi_headed_attention(query=trb, key=srb, value=srb,
                                                                            mask=src_mask)

        # Self-attention MHA sublayer followed by a source-attending MHA and point-wise feed forward net sublayer
        trg_representations_batch = self.sublayers[0](trg_representations_batch, decoder_trg_self_attention)
        trg_representations_batch = self.sublayers[1](trg_representations_batch, decoder_src_attention)
        trg_representations_batch = self.sublayers[2](trg_representations_batch, self.pointwise_net)

        return trg_representations_batch


#
# Helper modules (designed with modularity in mind) and organized top to bottom.
#


class SublayerLogic(nn.Module):
    def __init__(self, model_dimension, dropout_probability):
        super().__init__()
        self.norm = nn.LayerNorm(model_dimension)
        self.dropout = nn.Dropout(p=dropout_probability)

    def forward(self, representations_batch, sublayer_module):
        # Residual connection between input and sublayer output, details: Page 7, Chapter 5.4 "Regularization",
        return representations_batch + self.dropout(sublayer_module(self.norm(representations_batch)))


class DecoderGenerator(nn.Module):
    def __init__(self, model_dimension, vocab_size):
        super().__init__()

        self.linear = nn.Linear(model_dimension, vocab_size)

        # -1 stands for apply the log-softmax along the last dimension i.e. over the vocab dimension
        self.log_softmax = nn.LogSoftmax(dim=-1)

    def forward(self, trg_representations_batch):
        # Project from D (model dimension) into V (target vocab size) and apply the log softmax along V dimension
        return self.log_softmax(self.linear(trg_representations_batch))


class PositionwiseFeedForwardNet(nn.Module):
    def __init__(self, model_dimension, dropout_probability, width_mult=4):
        super().__init__()

        self.linear1 = nn.Linear(model_dimension, width_mult * model_dimension)
        self.linear2 = nn.Linear(width_mult * model_dimension, model_dimension)

        # This dropout layer is not explicitly mentioned in the paper but it's common to use to avoid over-fitting
        self.dropout = nn.Dropout(p=dropout_probability)
        self.relu = nn.ReLU()

    def forward(self, representations_batch):
        return self.linear2(self.dropout(self.relu(self.linear1(representations_batch))))


class MultiHeadedAttention(nn.Module):

    def __init__(self, model_dimension, number_of_heads, dropout_probability, log_attention_weights):
        super().__init__()
        assert model_dimension % number_of_heads == 0, f'Model dimension must be divisible by the number of heads.'

        self.head_dimension = int(model_dimension / number_of_heads)
        self.number_of_heads = number_of_heads

        self.qkv_nets = get_clones(nn.Linear(model_dimension, model_dimension), 3)  # identity activation hence "nets"
        self.out_projection_net = nn.Linear(model_dimension, model_dimension)

        self.attention_dropout = nn.Dropout(p=dropout_probability)  # no pun intended, not explicitly mentioned in paper
        self.softmax = nn.Softmax(dim=-1)  # -1 stands for apply the softmax along the last dimension

        self.log_attention_weights = log_attention_weights  # should we log attention weights
        self.attention_weights = None  # for visualization purposes, I cache the weights here (translation_script.py)

    def attention(self, query, key, value, mask):
        # Step 1: Scaled dot-product attention, Page 4, Chapter 3.2.1 "Scaled Dot-Product Attention"
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(self.head_dimension)

        # Step 2: Optionally mask tokens whose representations we want to ignore by setting a big negative number
        if mask is not None:
            scores.masked_fill_(mask == torch.tensor(False), float("-inf"))

        # Step 3: Calculate the attention weights - how much should we attend to surrounding token representations
        attention_weights = self.softmax(scores)

        # Step 4: Not defined in the original paper apply dropout to attention weights as well
        attention_weights = self.attention_dropout(attention_weights)

        # Step 5: based on attention weights calculate new token representations
        intermediate_token_representations = torch.matmul(attention_weights, value)

        return intermediate_token_representations, attention_weights  # attention weights for visualization purposes

    def forward(self, query, key, value, mask):
        batch_size = query.shape[0]

        # Step 1: Input linear projection
        query, key, value = [net(x).view(batch_size, -1, self.number_of_heads, self.head_dimension).transpose(1, 2)
                             for net, x in zip(self.qkv_nets, (query, key, value))]

        # Step 2: Apply attention - compare query with key and use that to combine values (see the function for details)
        intermediate_token_representations, attention_weights = self.attention(query, key, value, mask)

        # Potentially, for visualization purposes, log the attention weights, turn off during training though!
        if self.log_attention_weights:
            self.attention_weights = attention_weights

        # Step 3: Reshape from (B, NH, S/T, HD) over (B, S/T, NH, HD) (via transpose) into (B, S/T, NHxHD)
        reshaped = intermediate_token_representations.transpose(1, 2).reshape(
            batch_size, -1, self.number_of_heads * self.head_dimension)

        # Step 4: Output linear projection
        token_representations = self.out_projection_net(reshaped)

        return token_representations


#
# Input modules
#


class Embedding(nn.Module):

    def __init__(self, vocab_size, model_dimension):
        super().__init__()
        self.embeddings_table = nn.Embedding(vocab_size, model_dimension)
        self.model_dimension = model_dimension

    def forward(self, token_ids_batch):
        assert token_ids_batch.ndim == 2, \
            f'Expected: (batch size, max token sequence length), got {token_ids_batch.shape}'

        embeddings = self.embeddings_table(token_ids_batch)

        # (stated in the paper) multiply the embedding weights by the square root of model dimension
        return embeddings * math.sqrt(self.model_dimension)


class PositionalEncoding(nn.Module):

    def __init__(self, model_dimension, dropout_probability, expected_max_sequence_length=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout_probability)

        position_id = torch.arange(0, expected_max_sequence_length).unsqueeze(1)
        frequencies = torch.pow(10000., -torch.arange(0, model_dimension, 2, dtype=torch.float) / model_dimension)

        positional_encodings_table = torch.zeros(expected_max_sequence_length, model_dimension)
        positional_encodings_table[:, 0::2] = torch.sin(position_id * frequencies)  # sine on even positions
        positional_encodings_table[:, 1::2] = torch.cos(position_id * frequencies)  # cosine on odd positions

        self.register_buffer('positional_encodings_table', positional_encodings_table)

    def forward(self, embeddings_batch):
        assert embeddings_batch.ndim == 3 and embeddings_batch.shape[-1] == self.positional_encodings_table.shape[1], \
            f'Expected (batch size, max token sequence length, model dimension) got {embeddings_batch.shape}'

        positional_encodings = self.positional_encodings_table[:embeddings_batch.shape[1]]

        # (stated in the paper) Applying dropout to the sum of positional encodings and token embeddings
        return self.dropout(embeddings_batch + positional_encodings)


def get_clones(module, num_of_deep_copies):
    # Create deep copies so that we can tweak each module's weights independently
    return nn.ModuleList([copy.deepcopy(module) for _ in range(num_of_deep_copies)])


# utils/optimizers_and_distributions.py
class CustomLRAdamOptimizer:
    """
        Linear ramp learning rate for the warm-up number of steps and then start decaying
        according to the inverse square root law of the current training step number.
    """

    def __init__(self, optimizer, model_dimension, num_of_warmup_steps):
        self.optimizer = optimizer
        self.model_size = model_dimension
        self.num_of_warmup_steps = num_of_warmup_steps

        self.current_step_number = 0

    def step(self):
        self.current_step_number += 1
        current_learning_rate = self.get_current_learning_rate()

        for p in self.optimizer.param_groups:
            p['lr'] = current_learning_rate

        self.optimizer.step()  # apply gradients

    def get_current_learning_rate(self):
        # For readability purpose
        step = self.current_step_number
        warmup = self.num_of_warmup_steps

        return self.model_size ** (-0.5) * min(step ** (-0.5), step * warmup ** (-1.5))

    def zero_grad(self):
        self.optimizer.zero_grad()


class LabelSmoothingDistribution(nn.Module):

    def __init__(self, smoothing_value, pad_token_id, trg_vocab_size, device):
        assert 0.0 <= smoothing_value <= 1.0

        super(LabelSmoothingDistribution, self).__init__()

        self.confidence_value = 1.0 - smoothing_value
        self.smoothing_value = smoothing_value

        self.pad_token_id = pad_token_id
        self.trg_vocab_size = trg_vocab_size
        self.device = device

    def forward(self, trg_token_ids_batch):

        batch_size = trg_token_ids_batch.shape[0]
        smooth_target_distributions = torch.zeros((batch_size, self.trg_vocab_size), device=self.device)

        # -2 because we are not distributing the smoothing mass over the pad token index and over the ground truth index
        smooth_target_distributions.fill_(self.smoothing_value / (self.trg_vocab_size - 2))

        smooth_target_distributions.scatter_(1, trg_token_ids_batch, self.confidence_value)
        smooth_target_distributions[:, self.pad_token_id] = 0.

        # If we had a pad token as a target we set the distribution to all 0s instead of smooth labeled distribution
        smooth_target_distributions.masked_fill_(trg_token_ids_batch == self.pad_token_id, 0.)

        return smooth_target_distributions


# utils/data_utils.py
def get_masks_and_count_tokens_src(src_token_ids_batch, pad_token_id):
    batch_size = src_token_ids_batch.shape[0]

    # src_mask shape = (B, 1, 1, S) check out attention function in transformer_model.py where masks are applied
    src_mask = (src_token_ids_batch != pad_token_id).view(batch_size, 1, 1, -1)
    num_src_tokens = torch.sum(src_mask.long())

    return src_mask, num_src_tokens


def get_masks_and_count_tokens_trg(trg_token_ids_batch, pad_token_id, bug=None):
    batch_size = trg_token_ids_batch.shape[0]
    device = trg_token_ids_batch.device

    # Same as src_mask but we additionally want to mask tokens from looking forward into the future tokens
    sequence_length = trg_token_ids_batch.shape[1]  # trg_token_ids shape = (B, T)
    trg_padding_mask = (trg_token_ids_batch != pad_token_id).view(batch_size, 1, 1, -1)  # shape = (B, 1, 1, T)
    if bug == "look_forward_mask_dropped":
        # classic: the triangle left out (only the padding masked), so each target token attends to the future
        trg_no_look_forward_mask = torch.ones((1, 1, sequence_length, sequence_length), device=device) == 1
    else:
        trg_no_look_forward_mask = torch.triu(
            torch.ones((1, 1, sequence_length, sequence_length), device=device) == 1).transpose(2, 3)

    # logic AND operation (both padding mask and no-look-forward must be true to attend to a certain target token)
    trg_mask = trg_padding_mask & trg_no_look_forward_mask  # final shape = (B, 1, T, T)
    num_trg_tokens = torch.sum(trg_padding_mask.long())

    return trg_mask, num_trg_tokens


def get_masks_and_count_tokens(src_token_ids_batch, trg_token_ids_batch, pad_token_id, device, bug=None):
    src_mask, num_src_tokens = get_masks_and_count_tokens_src(src_token_ids_batch, pad_token_id)
    trg_mask, num_trg_tokens = get_masks_and_count_tokens_trg(trg_token_ids_batch, pad_token_id, bug=bug)

    return src_mask, trg_mask, num_src_tokens, num_trg_tokens


def get_src_and_trg_batches(token_ids_batch, bug=None):
    src_token_ids_batch, trg_token_ids_batch = token_ids_batch.src, token_ids_batch.trg

    # Target input should be shifted by 1 compared to the target output tokens
    trg_token_ids_batch_input = trg_token_ids_batch[:, :-1]

    # We reshape from (B, S) into (BxS, 1) as that's the the shape expected by LabelSmoothing
    if bug == "target_output_not_shifted":
        # classic: the expected output sliced like the input, so each position is asked for its own input token
        trg_token_ids_batch_gt = trg_token_ids_batch[:, :-1].reshape(-1, 1)
    else:
        trg_token_ids_batch_gt = trg_token_ids_batch[:, 1:].reshape(-1, 1)

    return src_token_ids_batch, trg_token_ids_batch_input, trg_token_ids_batch_gt


class Batch:
    """Stands for torchtext's Batch: ``.src`` (B, S) and ``.trg`` (B, T), batch_first, padded with <pad>."""

    def __init__(self, src, trg):
        self.src = src
        self.trg = trg


def make_corpus(seed, n):
    """Synthetic parallel sentences numericalized like torchtext's Fields: source word w (ids 2..N_WORDS+1 after
    <unk> 0 and <pad> 1) translates to ``dictionary[w]`` (ids after <unk> 0, <pad> 1, <s> 2, </s> 3), the target
    read in reverse; 4-9 words."""
    gen = torch.Generator().manual_seed(seed)
    dictionary = torch.randperm(N_WORDS, generator=gen) + 4
    pairs = []
    for _ in range(n):
        length = int(torch.randint(4, 10, (), generator=gen))
        words = torch.randint(0, N_WORDS, (length,), generator=gen)
        src = words + 2
        trg = torch.cat([torch.tensor([2]), dictionary[words].flip(0), torch.tensor([3])])
        pairs.append((src, trg))
    return pairs


def pad_batch(pairs, pad_token_id):
    s_len = max(len(s) for s, _ in pairs)
    t_len = max(len(t) for _, t in pairs)
    src = torch.full((len(pairs), s_len), pad_token_id, dtype=torch.long)
    trg = torch.full((len(pairs), t_len), pad_token_id, dtype=torch.long)
    for i, (s, t) in enumerate(pairs):
        src[i, :len(s)] = s
        trg[i, :len(t)] = t
    return Batch(src, trg)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = torch.device("cpu")

    # Step 1: Prepare data loaders
    train_pairs = make_corpus(seed, 320)
    val_batch_pairs = make_corpus(seed, 320 + BATCH)[320:]  # same dictionary, held-out sentences
    pad_token_id = 1  # torchtext's vocab: <unk> 0, <pad> 1 (the same for target as well)
    src_vocab_size = N_WORDS + 2
    trg_vocab_size = N_WORDS + 4
    order_gen = torch.Generator().manual_seed(seed + 1)

    def train_token_ids_loader():
        perm = torch.randperm(len(train_pairs), generator=order_gen).tolist()
        for i in range(0, len(perm) - BATCH + 1, BATCH):
            yield pad_batch([train_pairs[j] for j in perm[i:i + BATCH]], pad_token_id)

    val_batch = pad_batch(val_batch_pairs, pad_token_id)

    # Step 2: Prepare the model (original transformer) and push to GPU
    baseline_transformer = Transformer(
        model_dimension=BASELINE_MODEL_DIMENSION,
        src_vocab_size=src_vocab_size,
        trg_vocab_size=trg_vocab_size,
        number_of_heads=BASELINE_MODEL_NUMBER_OF_HEADS,
        number_of_layers=BASELINE_MODEL_NUMBER_OF_LAYERS,
        dropout_probability=BASELINE_MODEL_DROPOUT_PROB,
        bug=bug,
    ).to(device)

    # Step 3: Prepare other training related utilities
    kl_div_loss = nn.KLDivLoss(reduction='batchmean')  # gives better BLEU score than "mean"

    # Makes smooth target distributions as opposed to conventional one-hot distributions
    label_smoothing = LabelSmoothingDistribution(BASELINE_MODEL_LABEL_SMOOTHING_VALUE, pad_token_id, trg_vocab_size,
                                                 device)

    custom_lr_optimizer = CustomLRAdamOptimizer(
                Adam(baseline_transformer.parameters(), betas=(0.9, 0.98), eps=1e-9),
                BASELINE_MODEL_DIMENSION,
                100,  # num_warmup_steps (4000 in the original)
            )

    state = {"it": train_token_ids_loader()}

    def train_step():
        try:
            token_ids_batch = next(state["it"])
        except StopIteration:
            state["it"] = train_token_ids_loader()
            token_ids_batch = next(state["it"])
        baseline_transformer.train()

        src_token_ids_batch, trg_token_ids_batch_input, trg_token_ids_batch_gt = get_src_and_trg_batches(
            token_ids_batch, bug=bug)
        src_mask, trg_mask, num_src_tokens, num_trg_tokens = get_masks_and_count_tokens(
            src_token_ids_batch, trg_token_ids_batch_input, pad_token_id, device, bug=bug)

        # log because the KL loss expects log probabilities (just an implementation detail)
        predicted_log_distributions = baseline_transformer(src_token_ids_batch, trg_token_ids_batch_input, src_mask,
                                                           trg_mask)
        smooth_target_distributions = label_smoothing(trg_token_ids_batch_gt)  # these are regular probabilities

        custom_lr_optimizer.zero_grad()  # clean the trainable weights gradients in the computational graph

        loss = kl_div_loss(predicted_log_distributions, smooth_target_distributions)

        loss.backward()  # compute the gradients for every trainable weight in the computational graph
        custom_lr_optimizer.step()  # apply the gradients to weights
        return loss.detach()

    def eval_fn(model, batch):
        # train_val_loop(is_train=False) on the held-out batch, under torch.no_grad() as in train_transformer
        model.eval()
        with torch.no_grad():
            src, trg_in, trg_gt = get_src_and_trg_batches(val_batch, bug=bug)
            src_mask, trg_mask, _, _ = get_masks_and_count_tokens(src, trg_in, pad_token_id, device, bug=bug)
            loss = kl_div_loss(model(src, trg_in, src_mask, trg_mask), label_smoothing(trg_gt))
        model.train()
        return float(loss)

    first = pad_batch(train_pairs[:BATCH], pad_token_id)
    src0, trg_in0, trg_gt0 = get_src_and_trg_batches(first, bug=bug)
    src_mask0, trg_mask0, _, _ = get_masks_and_count_tokens(src0, trg_in0, pad_token_id, device, bug=bug)

    def loss_fn(predicted_log_distributions, trg_token_ids_batch_gt):
        return kl_div_loss(predicted_log_distributions, label_smoothing(trg_token_ids_batch_gt))

    return Program(name="originaltransformer_nmt", model=baseline_transformer,
                   batch=((src0, trg_in0, src_mask0, trg_mask0), trg_gt0), loss_fn=loss_fn,
                   optimizer=custom_lr_optimizer.optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("decoder_attentions_shared", functools.partial(_build, bug="decoder_attentions_shared"), "four_structures",
        ("multi_headed_attention",)),
    Bug("look_forward_mask_dropped", functools.partial(_build, bug="look_forward_mask_dropped"),
        "learning_ledger", ("DEPENDENCY",)),
    Bug("target_output_not_shifted", functools.partial(_build, bug="target_output_not_shifted"), "learning_ledger",
        ("TASK",)),
]
