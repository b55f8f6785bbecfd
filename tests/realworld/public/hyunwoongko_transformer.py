# ruff: noqa: UP008, N806, B007, E722, PLR2004, RUF100, RUF059
"""Transformer (Vaswani et al.) for translation, from hyunwoongko/transformer.

Source: https://github.com/hyunwoongko/transformer
Commit: 63286547b9cd174a6cfc204832271814d685181f
Files: ``train.py``, ``conf.py``, ``data.py``, ``util/data_loader.py``, ``models/model/`` (transformer, encoder,
decoder), ``models/blocks/`` (encoder_layer, decoder_layer), ``models/layers/`` (layer_norm, multi_head_attention,
position_wise_feed_forward, scale_dot_product_attention), ``models/embedding/`` (positional_encoding,
token_embeddings, transformer_embedding).
License: Apache-2.0 (stated in the README's "Licence" section, Copyright 2019 Hyunwoong Ko; the repository has no
LICENSE file; the section is copied to LICENSES/hyunwoongko-transformer.txt).
Domain: seq2seq translation (post-norm encoder-decoder Transformer written out: own LayerNorm, scaled dot-product
attention with -10000 masking, sinusoidal positions, pad + causal target mask; teacher forcing with ``trg[:, :-1]``
in, ``trg[:, 1:]`` as targets, cross-entropy with ``ignore_index`` the pad id, Adam with weight decay, clipping).

Kept as written: every model class, ``initialize_weights`` (kaiming_uniform on every >1-d weight),
``Adam(lr=init_lr, weight_decay=5e-4, eps=5e-9)``, ``ReduceLROnPlateau(factor=0.9, patience=10)`` (stepped on the
validation loss after ``warmup`` epochs: not reached in a self-check), ``nn.CrossEntropyLoss(ignore_index=
src_pad_idx)``, the body of ``train`` (zero_grad, forward on ``trg[:, :-1]``, view to 2-d, loss against
``trg[:, 1:]``, backward, ``clip_grad_norm_(clip=1.0)``, step), the torchtext special ids (unk 0, pad 1, sos 2,
eos 3) and batch-first tensors.

Deviations from the original:
- Multi30k (torchtext download, spacy tokenizers, vocabularies) is replaced by a synthetic translation made from
  ``seed``: a source sentence of 3..8 tokens, its "translation" each token mapped by a fixed permutation of the
  vocabulary, in reverse order; both wrapped in <sos>/<eos> and padded with 1 in the batch, as torchtext's Field
  does.
- sizes for 2 CPU cores: d_model 32, n_layers 2, n_heads 4, ffn_hidden 64, max_len 16, vocabularies of 24 tokens,
  batch size 16 (conf: 512, 6, 8, 2048, 256, Multi30k vocabularies, 128).
- ``init_lr`` is 1e-3 instead of the conf's 1e-5: at 1e-5 the tiny model does not move in a self-check's 30 steps
  (the schedule's first ``warmup`` = 100 epochs run at ``init_lr`` anyway).
- ``device`` is the CPU; the BLEU evaluation, checkpointing, result files and printing are dropped.
- ``train_step`` is one iteration of ``train``'s loop on the next synthetic batch.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
from torch import nn
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

BUG = {"name": None}

# conf.py (sizes shrunk, see the docstring)
batch_size = 16
max_len = 16
d_model = 32
n_layers = 2
n_heads = 4
ffn_hidden = 64
drop_prob = 0.1
init_lr = 1e-3
factor = 0.9
adam_eps = 5e-9
patience = 10
warmup = 100
clip = 1.0
weight_decay = 5e-4
VOCAB = 24
UNK, PAD, SOS, EOS = 0, 1, 2, 3


# models/layers/layer_norm.py
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-12):
        super(LayerNorm, self).__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        # '-1' means last dimension.

        out = (x - mean) / torch.sqrt(var + self.eps)
        out = self.gamma * out + self.beta
        return out


# models/layers/scale_dot_product_attention.py
class ScaleDotProductAttention(nn.Module):
    """
    compute scale dot product attention

    Query : given sentence that we focused on (decoder)
    Key : every sentence to check relationship with Query(encoder)
    Value : every sentence same with Key (encoder)
    """

    def __init__(self):
        super(ScaleDotProductAttention, self).__init__()
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, q, k, v, mask=None, e=1e-12):
        # input is 4 dimension tensor
        # [batch_size, head, length, d_tensor]
        batch_size, head, length, d_tensor = k.size()

        # 1. dot product Query with Key^T to compute similarity
        k_t = k.transpose(2, 3)  # transpose
        score = (q @ k_t) / math.sqrt(d_tensor)  # scaled dot product

        # 2. apply masking (opt)
        if mask is not None:
            score = score.masked_fill(mask == 0, -10000)

        # 3. pass them softmax to make [0, 1] range
        score = self.softmax(score)

        # 4. multiply with Value
        v = score @ v

        return v, score


# models/layers/multi_head_attention.py
class MultiHeadAttention(nn.Module):

    def __init__(self, d_model, n_head):
        super(MultiHeadAttention, self).__init__()
        self.n_head = n_head
        self.attention = ScaleDotProductAttention()
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_concat = nn.Linear(d_model, d_model)

    def forward(self, q, k, v, mask=None):
        # 1. dot product with weight matrices
        q, k, v = self.w_q(q), self.w_k(k), self.w_v(v)

        # 2. split tensor by number of heads
        q, k, v = self.split(q), self.split(k), self.split(v)

        # 3. do scale dot product to compute similarity
        out, attention = self.attention(q, k, v, mask=mask)

        # 4. concat and pass to linear layer
        out = self.concat(out)
        out = self.w_concat(out)

        # 5. visualize attention map
        # TODO : we should implement visualization

        return out

    def split(self, tensor):
        """
        split tensor by number of head

        :param tensor: [batch_size, length, d_model]
        :return: [batch_size, head, length, d_tensor]
        """
        batch_size, length, d_model = tensor.size()

        d_tensor = d_model // self.n_head
        tensor = tensor.view(batch_size, length, self.n_head, d_tensor).transpose(1, 2)
        # it is similar with group convolution (split by number of heads)

        return tensor

    def concat(self, tensor):
        """
        inverse function of self.split(tensor : torch.Tensor)

        :param tensor: [batch_size, head, length, d_tensor]
        :return: [batch_size, length, d_model]
        """
        batch_size, head, length, d_tensor = tensor.size()
        d_model = head * d_tensor

        tensor = tensor.transpose(1, 2).contiguous().view(batch_size, length, d_model)
        return tensor


# models/layers/position_wise_feed_forward.py
class PositionwiseFeedForward(nn.Module):

    def __init__(self, d_model, hidden, drop_prob=0.1):
        super(PositionwiseFeedForward, self).__init__()
        self.linear1 = nn.Linear(d_model, hidden)
        self.linear2 = nn.Linear(hidden, d_model)
        self.relu = nn.ReLU()
        self.dropout = nn.Dropout(p=drop_prob)

    def forward(self, x):
        x = self.linear1(x)
        x = self.relu(x)
        x = self.dropout(x)
        x = self.linear2(x)
        return x


# models/embedding/positional_encoding.py
class PositionalEncoding(nn.Module):
    """
    compute sinusoid encoding.
    """

    def __init__(self, d_model, max_len, device):
        """
        constructor of sinusoid encoding class

        :param d_model: dimension of model
        :param max_len: max sequence length
        :param device: hardware device setting
        """
        super(PositionalEncoding, self).__init__()

        # same size with input matrix (for adding with input matrix)
        self.encoding = torch.zeros(max_len, d_model, device=device)
        self.encoding.requires_grad = False  # we don't need to compute gradient

        pos = torch.arange(0, max_len, device=device)
        pos = pos.float().unsqueeze(dim=1)
        # 1D => 2D unsqueeze to represent word's position

        _2i = torch.arange(0, d_model, step=2, device=device).float()
        # 'i' means index of d_model (e.g. embedding size = 50, 'i' = [0,50])
        # "step=2" means 'i' multiplied with two (same with 2 * i)

        self.encoding[:, 0::2] = torch.sin(pos / (10000 ** (_2i / d_model)))
        self.encoding[:, 1::2] = torch.cos(pos / (10000 ** (_2i / d_model)))
        # compute positional encoding to consider positional information of words

    def forward(self, x):
        # self.encoding
        # [max_len = 512, d_model = 512]

        batch_size, seq_len = x.size()
        # [batch_size = 128, seq_len = 30]

        return self.encoding[:seq_len, :]
        # [seq_len = 30, d_model = 512]
        # it will add with tok_emb : [128, 30, 512]


# models/embedding/token_embeddings.py
class TokenEmbedding(nn.Embedding):
    """
    Token Embedding using torch.nn
    they will dense representation of word using weighted matrix
    """

    def __init__(self, vocab_size, d_model):
        """
        class for token embedding that included positional information

        :param vocab_size: size of vocabulary
        :param d_model: dimensions of model
        """
        super(TokenEmbedding, self).__init__(vocab_size, d_model, padding_idx=1)


# models/embedding/transformer_embedding.py
class TransformerEmbedding(nn.Module):
    """
    token embedding + positional encoding (sinusoid)
    positional encoding can give positional information to network
    """

    def __init__(self, vocab_size, d_model, max_len, drop_prob, device):
        """
        class for word embedding that included positional information

        :param vocab_size: size of vocabulary
        :param d_model: dimensions of model
        """
        super(TransformerEmbedding, self).__init__()
        self.tok_emb = TokenEmbedding(vocab_size, d_model)
        self.pos_emb = PositionalEncoding(d_model, max_len, device)
        self.drop_out = nn.Dropout(p=drop_prob)

    def forward(self, x):
        tok_emb = self.tok_emb(x)
        pos_emb = self.pos_emb(x)
        return self.drop_out(tok_emb + pos_emb)


# models/blocks/encoder_layer.py
class EncoderLayer(nn.Module):

    def __init__(self, d_model, ffn_hidden, n_head, drop_prob):
        super(EncoderLayer, self).__init__()
        self.attention = MultiHeadAttention(d_model=d_model, n_head=n_head)
        self.norm1 = LayerNorm(d_model=d_model)
        self.dropout1 = nn.Dropout(p=drop_prob)

        self.ffn = PositionwiseFeedForward(d_model=d_model, hidden=ffn_hidden, drop_prob=drop_prob)
        self.norm2 = LayerNorm(d_model=d_model)
        self.dropout2 = nn.Dropout(p=drop_prob)

    def forward(self, x, src_mask):
        # 1. compute self attention
        _x = x
        x = self.attention(q=x, k=x, v=x, mask=src_mask)

        # 2. add and norm
        x = self.dropout1(x)
        x = self.norm1(x + _x)

        # 3. positionwise feed forward network
        _x = x
        x = self.ffn(x)

        # 4. add and norm
        x = self.dropout2(x)
        x = self.norm2(x + _x)
        return x


# models/blocks/decoder_layer.py
class DecoderLayer(nn.Module):

    def __init__(self, d_model, ffn_hidden, n_head, drop_prob):
        super(DecoderLayer, self).__init__()
        self.self_attention = MultiHeadAttention(d_model=d_model, n_head=n_head)
        self.norm1 = LayerNorm(d_model=d_model)
        self.dropout1 = nn.Dropout(p=drop_prob)

        self.enc_dec_attention = MultiHeadAttention(d_model=d_model, n_head=n_head)
        self.norm2 = LayerNorm(d_model=d_model)
        self.dropout2 = nn.Dropout(p=drop_prob)

        self.ffn = PositionwiseFeedForward(d_model=d_model, hidden=ffn_hidden, drop_prob=drop_prob)
        self.norm3 = LayerNorm(d_model=d_model)
        self.dropout3 = nn.Dropout(p=drop_prob)

    def forward(self, dec, enc, trg_mask, src_mask):
        # 1. compute self attention
        _x = dec
        x = self.self_attention(q=dec, k=dec, v=dec, mask=trg_mask)

        # 2. add and norm
        x = self.dropout1(x)
        x = self.norm1(x + _x)

        if enc is not None:
            # 3. compute encoder - decoder attention
            _x = x
            x = self.enc_dec_attention(q=x, k=enc, v=enc, mask=src_mask)

            # 4. add and norm
            x = self.dropout2(x)
            x = self.norm2(x + _x)

        # 5. positionwise feed forward network
        _x = x
        x = self.ffn(x)

        # 6. add and norm
        x = self.dropout3(x)
        x = self.norm3(x + _x)
        return x


# models/model/encoder.py
class Encoder(nn.Module):

    def __init__(self, enc_voc_size, max_len, d_model, ffn_hidden, n_head, n_layers, drop_prob, device):
        super().__init__()
        self.emb = TransformerEmbedding(d_model=d_model,
                                        max_len=max_len,
                                        vocab_size=enc_voc_size,
                                        drop_prob=drop_prob,
                                        device=device)

        self.layers = nn.ModuleList([EncoderLayer(d_model=d_model,
                                                  ffn_hidden=ffn_hidden,
                                                  n_head=n_head,
                                                  drop_prob=drop_prob)
                                     for _ in range(n_layers)])

    def forward(self, x, src_mask):
        x = self.emb(x)

        for layer in self.layers:
            x = layer(x, src_mask)

        return x


# models/model/decoder.py
class Decoder(nn.Module):
    def __init__(self, dec_voc_size, max_len, d_model, ffn_hidden, n_head, n_layers, drop_prob, device):
        super().__init__()
        self.emb = TransformerEmbedding(d_model=d_model,
                                        drop_prob=drop_prob,
                                        max_len=max_len,
                                        vocab_size=dec_voc_size,
                                        device=device)

        self.layers = nn.ModuleList([DecoderLayer(d_model=d_model,
                                                  ffn_hidden=ffn_hidden,
                                                  n_head=n_head,
                                                  drop_prob=drop_prob)
                                     for _ in range(n_layers)])

        self.linear = nn.Linear(d_model, dec_voc_size)

    def forward(self, trg, enc_src, trg_mask, src_mask):
        trg = self.emb(trg)

        for layer in self.layers:
            trg = layer(trg, enc_src, trg_mask, src_mask)

        # pass to LM head
        output = self.linear(trg)
        return output


# models/model/transformer.py
class Transformer(nn.Module):

    def __init__(self, src_pad_idx, trg_pad_idx, trg_sos_idx, enc_voc_size, dec_voc_size, d_model, n_head, max_len,
                 ffn_hidden, n_layers, drop_prob, device):
        super().__init__()
        self.src_pad_idx = src_pad_idx
        self.trg_pad_idx = trg_pad_idx
        self.trg_sos_idx = trg_sos_idx
        self.device = device
        self.encoder = Encoder(d_model=d_model,
                               n_head=n_head,
                               max_len=max_len,
                               ffn_hidden=ffn_hidden,
                               enc_voc_size=enc_voc_size,
                               drop_prob=drop_prob,
                               n_layers=n_layers,
                               device=device)

        self.decoder = Decoder(d_model=d_model,
                               n_head=n_head,
                               max_len=max_len,
                               ffn_hidden=ffn_hidden,
                               dec_voc_size=dec_voc_size,
                               drop_prob=drop_prob,
                               n_layers=n_layers,
                               device=device)

    def forward(self, src, trg):
        src_mask = self.make_src_mask(src)
        trg_mask = self.make_trg_mask(trg)
        enc_src = self.encoder(src, src_mask)
        output = self.decoder(trg, enc_src, trg_mask, src_mask)
        return output

    def make_src_mask(self, src):
        src_mask = (src != self.src_pad_idx).unsqueeze(1).unsqueeze(2)
        return src_mask

    def make_trg_mask(self, trg):
        trg_pad_mask = (trg != self.trg_pad_idx).unsqueeze(1).unsqueeze(3)
        trg_len = trg.shape[1]
        trg_sub_mask = torch.tril(torch.ones(trg_len, trg_len)).type(torch.ByteTensor).to(self.device)
        trg_mask = trg_pad_mask & trg_sub_mask
        if BUG["name"] == "causal_mask_dropped":
            # classic: the target mask built from the pad mask alone, the decoder sees the future tokens
            trg_mask = trg_pad_mask.expand(-1, -1, -1, trg_len)
        return trg_mask



# train.py
def initialize_weights(m):
    if hasattr(m, 'weight') and m.weight.dim() > 1:
        nn.init.kaiming_uniform(m.weight.data)


class SyntheticTranslation:
    """Pairs (source, reversed source mapped by a fixed permutation), <sos>/<eos>-wrapped and padded like a Field."""

    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)
        self.perm = torch.randperm(VOCAB - 4, generator=torch.Generator().manual_seed(seed + 7)) + 4

    def batch(self, n):
        lens = torch.randint(3, 9, (n,), generator=self.g)
        L = int(lens.max()) + 2
        src = torch.full((n, L), PAD, dtype=torch.long)
        trg = torch.full((n, L), PAD, dtype=torch.long)
        for k in range(n):
            s = torch.randint(4, VOCAB, (int(lens[k]),), generator=self.g)
            t = self.perm[s - 4].flip(0)
            src[k, :len(s) + 2] = torch.cat([torch.tensor([SOS]), s, torch.tensor([EOS])])
            trg[k, :len(t) + 2] = torch.cat([torch.tensor([SOS]), t, torch.tensor([EOS])])
        return src, trg


def _build(seed: int, bug: str | None = None) -> Program:
    BUG["name"] = bug
    torch.manual_seed(seed)
    device = torch.device("cpu")
    src_pad_idx = PAD
    trg_pad_idx = PAD
    trg_sos_idx = SOS
    enc_voc_size = VOCAB
    dec_voc_size = VOCAB

    model = Transformer(src_pad_idx=src_pad_idx,
                        trg_pad_idx=trg_pad_idx,
                        trg_sos_idx=trg_sos_idx,
                        d_model=d_model,
                        enc_voc_size=enc_voc_size,
                        dec_voc_size=dec_voc_size,
                        max_len=max_len,
                        ffn_hidden=ffn_hidden,
                        n_head=n_heads,
                        n_layers=n_layers,
                        drop_prob=drop_prob,
                        device=device).to(device)

    model.apply(initialize_weights)
    optimizer = Adam(params=model.parameters(),
                     lr=init_lr,
                     weight_decay=weight_decay,
                     eps=adam_eps)

    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer=optimizer,  # noqa: F841
                                                           factor=factor,
                                                           patience=patience)

    if bug == "pad_not_ignored":
        # classic: ignore_index left out, the loss trains the model to predict padding after <eos>
        criterion = nn.CrossEntropyLoss()
    else:
        criterion = nn.CrossEntropyLoss(ignore_index=src_pad_idx)

    data = SyntheticTranslation(seed)

    def shift(trg):
        if bug == "targets_not_shifted":
            # classic off-by-one: the decoder input's own tokens as targets
            return trg[:, :-1]
        return trg[:, 1:]

    def train_step():
        model.train()
        src, trg = data.batch(batch_size)

        optimizer.zero_grad()
        output = model(src, trg[:, :-1])
        output_reshape = output.contiguous().view(-1, output.shape[-1])
        trg = shift(trg).contiguous().view(-1)

        loss = criterion(output_reshape, trg)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss.item()

    src0, trg0 = SyntheticTranslation(seed + 1).batch(batch_size)
    batch = ({"src": src0, "trg": trg0[:, :-1]}, shift(trg0))

    def loss_fn(output, targets):
        return criterion(output.contiguous().view(-1, output.shape[-1]), targets.contiguous().view(-1))

    return Program(name="hyunwoongko_transformer", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic (the criterion's ignore_index is what https://github.com/hyunwoongko/transformer/issues/20 asks
    # about): ignore_index left out, the padding after <eos> is trained as targets.
    Bug("pad_not_ignored", functools.partial(_build, bug="pad_not_ignored"), "learning_ledger", ("OBJECTIVE",)),
    # classic: make_trg_mask returns the pad mask alone, no subsequent-position mask: the decoder reads the token
    # it must predict.
    Bug("causal_mask_dropped", functools.partial(_build, bug="causal_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic off-by-one: targets taken as trg[:, :-1], the same tokens the decoder is fed.
    # first contact declared TASK; the decoder fed the unshifted targets reads the token it must predict: DEPENDENCY's
    # dependency.target_leak (reviewed after first contact: the finding names this bug's mechanism)
    Bug("targets_not_shifted", functools.partial(_build, bug="targets_not_shifted"), "learning_ledger", ("DEPENDENCY",),
        kind="dependency.target_leak"),
]
