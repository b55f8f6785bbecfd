# ruff: noqa: UP008, RUF059, PLR0402, SIM113, B008, SIM118, UP039, RUF012
"""Crossformer (Zhang & Yan, "Crossformer: Transformer Utilizing Cross-Dimension Dependency for Multivariate Time
Series Forecasting"): dimension-segment-wise (DSW) embedding of each channel's segments, learned position
embeddings, a hierarchical encoder of Two-Stage Attention layers (attention across time within each channel, then
across channels through a small set of learned routers) with segment merging between scales, and a decoder whose
layers each cross-attend to one encoder scale and predict the output segments, the scales' predictions summed;
MSE, Adam, the lr halved by ``adjust_learning_rate('type1')`` after epochs 2, 4, ...; early stopping on the
validation loss.

Source: https://github.com/Thinklab-SJTU/Crossformer
Commit: c10c8eadb153d1dd9798250967747ca3ebb81383
Files: main_crossformer.py, cross_exp/exp_crossformer.py, cross_models/ (cross_former, cross_encoder,
cross_decoder, attn, cross_embed), data/data_loader.py, utils/tools.py, scripts/ETTh1.sh
License: Apache-2.0 (Copyright 2023 Yunhao Zhang and Junchi Yan; full text in LICENSES/Thinklab-SJTU-Crossformer.txt)
Domain: time series, multivariate long-term forecasting (ETTh1-shaped)

Kept as written: ``Crossformer`` (front padding to a multiple of ``seg_len``, DSW embedding, position embedding,
pre-norm, encoder, decoder on the repeated decoder position embedding, ``baseline`` off), ``Encoder`` /
``scale_block`` / ``SegMerging``, ``Decoder`` / ``DecoderLayer``, ``FullAttention`` / ``AttentionLayer`` /
``TwoStageAttentionLayer``, ``DSW_embedding``, ``Dataset_MTS`` (borders with the input window reaching back
across the split, the scaler fitted on the training rows, ``seq_x`` / ``seq_y`` windows), ``StandardScaler``,
``adjust_learning_rate``, and ``Exp_crossformer``'s training-loop body (zero_grad, ``_process_one_batch``,
``nn.MSELoss``, backward, step) and ``vali``.

Deviations from the original:
- einops is not here: every ``rearrange`` / ``repeat`` is written out with ``reshape`` / ``permute`` /
  ``repeat`` (each original pattern kept in a comment beside it);
- sizes for 2 CPU cores (scripts/ETTh1.sh, out_len 24): ``in_len`` 168 -> 48, ``out_len`` 24 -> 12 (``seg_len`` 6,
  ``win_size`` 2 kept), ``factor`` 10 -> 4, ``d_model`` 256 -> 32, ``d_ff`` 512 -> 64, ``n_heads`` 4 -> 2,
  ``e_layers`` 3 -> 2, ``batch_size`` 32 -> 16; ``learning_rate`` 1e-4 -> 1e-3 so that the 30 steps of the
  self-check show the loss falling (the original runs up to 20 epochs);
- data: ETTh1.csv is replaced by a synthetic ETTh1-shaped frame made from ``seed`` (a date column and 7
  channels: daily and half-daily cycles with channel-specific phases and amplitudes, a slow trend, one channel a
  lagged mix of two others, plus noise; 800 hourly rows) passed to ``Dataset_MTS`` in place of ``pd.read_csv``,
  with ``data_split`` [0.7, 0.1, 0.2]; the DataLoaders shuffle with a ``torch.Generator(seed)``; CUDA dropped;
- the args / scale-statistic files, checkpoints, early stopping's saves and the test metrics are dropped; one
  ``train_step`` is one batch of the training loop (``adjust_learning_rate`` runs when the loader is used up, as
  after each epoch); ``eval_fn`` is ``vali`` on the validation split;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from math import ceil, sqrt

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch import optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# cross_models/attn.py
class FullAttention(nn.Module):
    '''
    The Attention operation
    '''
    def __init__(self, scale=None, attention_dropout=0.1):
        super(FullAttention, self).__init__()
        self.scale = scale
        self.dropout = nn.Dropout(attention_dropout)

    def forward(self, queries, keys, values):
        B, L, H, E = queries.shape
        _, S, _, D = values.shape
        scale = self.scale or 1./sqrt(E)

        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        A = self.dropout(torch.softmax(scale * scores, dim=-1))
        V = torch.einsum("bhls,bshd->blhd", A, values)

        return V.contiguous()


class AttentionLayer(nn.Module):
    '''
    The Multi-head Self-Attention (MSA) Layer
    '''
    def __init__(self, d_model, n_heads, d_keys=None, d_values=None, dropout = 0.1):
        super(AttentionLayer, self).__init__()

        d_keys = d_keys or (d_model//n_heads)
        d_values = d_values or (d_model//n_heads)

        self.inner_attention = FullAttention(scale=None, attention_dropout = dropout)
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_values * n_heads)
        self.out_projection = nn.Linear(d_values * n_heads, d_model)
        self.n_heads = n_heads

    def forward(self, queries, keys, values):
        B, L, _ = queries.shape
        _, S, _ = keys.shape
        H = self.n_heads

        queries = self.query_projection(queries).view(B, L, H, -1)
        keys = self.key_projection(keys).view(B, S, H, -1)
        values = self.value_projection(values).view(B, S, H, -1)

        out = self.inner_attention(
            queries,
            keys,
            values,
        )

        out = out.view(B, L, -1)

        return self.out_projection(out)


class TwoStageAttentionLayer(nn.Module):
    '''
    The Two Stage Attention (TSA) Layer
    input/output shape: [batch_size, Data_dim(D), Seg_num(L), d_model]
    '''
    def __init__(self, seg_num, factor, d_model, n_heads, d_ff = None, dropout=0.1):
        super(TwoStageAttentionLayer, self).__init__()
        d_ff = d_ff or 4*d_model
        self.time_attention = AttentionLayer(d_model, n_heads, dropout = dropout)
        self.dim_sender = AttentionLayer(d_model, n_heads, dropout = dropout)
        self.dim_receiver = AttentionLayer(d_model, n_heads, dropout = dropout)
        self.router = nn.Parameter(torch.randn(seg_num, factor, d_model))

        self.dropout = nn.Dropout(dropout)

        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.norm4 = nn.LayerNorm(d_model)

        self.MLP1 = nn.Sequential(nn.Linear(d_model, d_ff),
                                nn.GELU(),
                                nn.Linear(d_ff, d_model))
        self.MLP2 = nn.Sequential(nn.Linear(d_model, d_ff),
                                nn.GELU(),
                                nn.Linear(d_ff, d_model))

    def forward(self, x):
        #Cross Time Stage: Directly apply MSA to each dimension
        batch = x.shape[0]
        b, ts_d, seg_num, d_model = x.shape
        # rearrange(x, 'b ts_d seg_num d_model -> (b ts_d) seg_num d_model')
        time_in = x.reshape(b * ts_d, seg_num, d_model)
        time_enc = self.time_attention(
            time_in, time_in, time_in
        )
        dim_in = time_in + self.dropout(time_enc)
        dim_in = self.norm1(dim_in)
        dim_in = dim_in + self.dropout(self.MLP1(dim_in))
        dim_in = self.norm2(dim_in)

        #Cross Dimension Stage: use a small set of learnable vectors to aggregate and distribute messages to build
        # the D-to-D connection
        # rearrange(dim_in, '(b ts_d) seg_num d_model -> (b seg_num) ts_d d_model', b = batch)
        dim_send = dim_in.reshape(batch, ts_d, seg_num, d_model).permute(0, 2, 1, 3).reshape(batch * seg_num, ts_d,
                                                                                             d_model)
        # repeat(self.router, 'seg_num factor d_model -> (repeat seg_num) factor d_model', repeat = batch)
        batch_router = self.router.repeat(batch, 1, 1)
        dim_buffer = self.dim_sender(batch_router, dim_send, dim_send)
        dim_receive = self.dim_receiver(dim_send, dim_buffer, dim_buffer)
        dim_enc = dim_send + self.dropout(dim_receive)
        dim_enc = self.norm3(dim_enc)
        dim_enc = dim_enc + self.dropout(self.MLP2(dim_enc))
        dim_enc = self.norm4(dim_enc)

        # rearrange(dim_enc, '(b seg_num) ts_d d_model -> b ts_d seg_num d_model', b = batch)
        final_out = dim_enc.reshape(batch, seg_num, ts_d, d_model).permute(0, 2, 1, 3)

        return final_out


# cross_models/cross_embed.py
class DSW_embedding(nn.Module):
    def __init__(self, seg_len, d_model, bug=None):
        super(DSW_embedding, self).__init__()
        self.seg_len = seg_len
        self.bug = bug

        self.linear = nn.Linear(seg_len, d_model)

    def forward(self, x):
        batch, ts_len, ts_dim = x.shape

        # rearrange(x, 'b (seg_num seg_len) d -> (b d seg_num) seg_len', seg_len = self.seg_len)
        if self.bug == "segments_viewed_not_permuted":
            # classic layout slip writing the rearrange out: a reshape without the permute, so each "segment"
            # interleaves the channels of consecutive time steps
            x_segment = x.reshape(-1, self.seg_len)
        else:
            seg_num = ts_len // self.seg_len
            x_segment = x.reshape(batch, seg_num, self.seg_len, ts_dim).permute(0, 3, 1, 2).reshape(-1, self.seg_len)
        x_embed = self.linear(x_segment)
        # rearrange(x_embed, '(b d seg_num) d_model -> b d seg_num d_model', b = batch, d = ts_dim)
        x_embed = x_embed.reshape(batch, ts_dim, -1, x_embed.shape[-1])

        return x_embed


# cross_models/cross_encoder.py
class SegMerging(nn.Module):
    '''
    Segment Merging Layer.
    The adjacent `win_size' segments in each dimension will be merged into one segment to
    get representation of a coarser scale
    we set win_size = 2 in our paper
    '''
    def __init__(self, d_model, win_size, norm_layer=nn.LayerNorm):
        super().__init__()
        self.d_model = d_model
        self.win_size = win_size
        self.linear_trans = nn.Linear(win_size * d_model, d_model)
        self.norm = norm_layer(win_size * d_model)

    def forward(self, x):
        """
        x: B, ts_d, L, d_model
        """
        batch_size, ts_d, seg_num, d_model = x.shape
        pad_num = seg_num % self.win_size
        if pad_num != 0:
            pad_num = self.win_size - pad_num
            x = torch.cat((x, x[:, :, -pad_num:, :]), dim = -2)

        seg_to_merge = []
        for i in range(self.win_size):
            seg_to_merge.append(x[:, :, i::self.win_size, :])
        x = torch.cat(seg_to_merge, -1)  # [B, ts_d, seg_num/win_size, win_size*d_model]

        x = self.norm(x)
        x = self.linear_trans(x)

        return x


class scale_block(nn.Module):
    '''
    We can use one segment merging layer followed by multiple TSA layers in each scale
    the parameter `depth' determines the number of TSA layers used in each scale
    We set depth = 1 in the paper
    '''
    def __init__(self, win_size, d_model, n_heads, d_ff, depth, dropout, \
                    seg_num = 10, factor=10):
        super(scale_block, self).__init__()

        if (win_size > 1):
            self.merge_layer = SegMerging(d_model, win_size, nn.LayerNorm)
        else:
            self.merge_layer = None

        self.encode_layers = nn.ModuleList()

        for i in range(depth):
            self.encode_layers.append(TwoStageAttentionLayer(seg_num, factor, d_model, n_heads, \
                                                        d_ff, dropout))

    def forward(self, x):
        _, ts_dim, _, _ = x.shape

        if self.merge_layer is not None:
            x = self.merge_layer(x)

        for layer in self.encode_layers:
            x = layer(x)

        return x


class Encoder(nn.Module):
    '''
    The Encoder of Crossformer.
    '''
    def __init__(self, e_blocks, win_size, d_model, n_heads, d_ff, block_depth, dropout,
                in_seg_num = 10, factor=10):
        super(Encoder, self).__init__()
        self.encode_blocks = nn.ModuleList()

        self.encode_blocks.append(scale_block(1, d_model, n_heads, d_ff, block_depth, dropout,\
                                            in_seg_num, factor))
        for i in range(1, e_blocks):
            self.encode_blocks.append(scale_block(win_size, d_model, n_heads, d_ff, block_depth, dropout,\
                                            ceil(in_seg_num/win_size**i), factor))

    def forward(self, x):
        encode_x = []
        encode_x.append(x)

        for block in self.encode_blocks:
            x = block(x)
            encode_x.append(x)

        return encode_x


# cross_models/cross_decoder.py
class DecoderLayer(nn.Module):
    '''
    The decoder layer of Crossformer, each layer will make a prediction at its scale
    '''
    def __init__(self, seg_len, d_model, n_heads, d_ff=None, dropout=0.1, out_seg_num = 10, factor = 10):
        super(DecoderLayer, self).__init__()
        self.self_attention = TwoStageAttentionLayer(out_seg_num, factor, d_model, n_heads, \
                                d_ff, dropout)
        self.cross_attention = AttentionLayer(d_model, n_heads, dropout = dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.MLP1 = nn.Sequential(nn.Linear(d_model, d_model),
                                nn.GELU(),
                                nn.Linear(d_model, d_model))
        self.linear_pred = nn.Linear(d_model, seg_len)

    def forward(self, x, cross):
        '''
        x: the output of last decoder layer
        cross: the output of the corresponding encoder layer
        '''

        batch = x.shape[0]
        x = self.self_attention(x)
        b, ts_d, out_seg_num, d_model = x.shape
        # rearrange(x, 'b ts_d out_seg_num d_model -> (b ts_d) out_seg_num d_model')
        x = x.reshape(b * ts_d, out_seg_num, d_model)

        # rearrange(cross, 'b ts_d in_seg_num d_model -> (b ts_d) in_seg_num d_model')
        cross = cross.reshape(-1, cross.shape[2], cross.shape[3])
        tmp = self.cross_attention(
            x, cross, cross,
        )
        x = x + self.dropout(tmp)
        y = x = self.norm1(x)
        y = self.MLP1(y)
        dec_output = self.norm2(x+y)

        # rearrange(dec_output, '(b ts_d) seg_dec_num d_model -> b ts_d seg_dec_num d_model', b = batch)
        dec_output = dec_output.reshape(batch, -1, dec_output.shape[1], dec_output.shape[2])
        layer_predict = self.linear_pred(dec_output)
        # rearrange(layer_predict, 'b out_d seg_num seg_len -> b (out_d seg_num) seg_len')
        layer_predict = layer_predict.reshape(batch, -1, layer_predict.shape[-1])

        return dec_output, layer_predict


class Decoder(nn.Module):
    '''
    The decoder of Crossformer, making the final prediction by adding up predictions at each scale
    '''
    def __init__(self, seg_len, d_layers, d_model, n_heads, d_ff, dropout,\
                router=False, out_seg_num = 10, factor=10):
        super(Decoder, self).__init__()

        self.router = router
        self.decode_layers = nn.ModuleList()
        for i in range(d_layers):
            self.decode_layers.append(DecoderLayer(seg_len, d_model, n_heads, d_ff, dropout, \
                                        out_seg_num, factor))

    def forward(self, x, cross):
        final_predict = None
        i = 0

        ts_d = x.shape[1]
        for layer in self.decode_layers:
            cross_enc = cross[i]
            x, layer_predict = layer(x,  cross_enc)
            if final_predict is None:
                final_predict = layer_predict
            else:
                final_predict = final_predict + layer_predict
            i += 1

        # rearrange(final_predict, 'b (out_d seg_num) seg_len -> b (seg_num seg_len) out_d', out_d = ts_d)
        b, _, seg_len = final_predict.shape
        final_predict = final_predict.reshape(b, ts_d, -1, seg_len).permute(0, 2, 3, 1).reshape(b, -1, ts_d)

        return final_predict


# cross_models/cross_former.py
class Crossformer(nn.Module):
    def __init__(self, data_dim, in_len, out_len, seg_len, win_size = 4,
                factor=10, d_model=512, d_ff = 1024, n_heads=8, e_layers=3,
                dropout=0.0, baseline = False, device=torch.device('cuda:0'), bug=None):
        super(Crossformer, self).__init__()
        self.data_dim = data_dim
        self.in_len = in_len
        self.out_len = out_len
        self.seg_len = seg_len
        self.merge_win = win_size

        self.baseline = baseline

        self.device = device

        # The padding operation to handle invisible sgemnet length
        self.pad_in_len = ceil(1.0 * in_len / seg_len) * seg_len
        self.pad_out_len = ceil(1.0 * out_len / seg_len) * seg_len
        self.in_len_add = self.pad_in_len - self.in_len

        # Embedding
        self.enc_value_embedding = DSW_embedding(seg_len, d_model, bug=bug)
        self.enc_pos_embedding = nn.Parameter(torch.randn(1, data_dim, (self.pad_in_len // seg_len), d_model))
        self.pre_norm = nn.LayerNorm(d_model)

        # Encoder
        self.encoder = Encoder(e_layers, win_size, d_model, n_heads, d_ff, block_depth = 1, \
                                    dropout = dropout,in_seg_num = (self.pad_in_len // seg_len), factor = factor)

        # Decoder
        self.dec_pos_embedding = nn.Parameter(torch.randn(1, data_dim, (self.pad_out_len // seg_len), d_model))
        self.decoder = Decoder(seg_len, e_layers + 1, d_model, n_heads, d_ff, dropout, \
                                    out_seg_num = (self.pad_out_len // seg_len), factor = factor)

    def forward(self, x_seq):
        if (self.baseline):
            base = x_seq.mean(dim = 1, keepdim = True)
        else:
            base = 0
        batch_size = x_seq.shape[0]
        if (self.in_len_add != 0):
            x_seq = torch.cat((x_seq[:, :1, :].expand(-1, self.in_len_add, -1), x_seq), dim = 1)

        x_seq = self.enc_value_embedding(x_seq)
        x_seq += self.enc_pos_embedding
        x_seq = self.pre_norm(x_seq)

        enc_out = self.encoder(x_seq)

        # repeat(self.dec_pos_embedding, 'b ts_d l d -> (repeat b) ts_d l d', repeat = batch_size)
        dec_in = self.dec_pos_embedding.repeat(batch_size, 1, 1, 1)
        predict_y = self.decoder(dec_in, enc_out)

        return base + predict_y[:, :self.out_len, :]


# utils/tools.py
def adjust_learning_rate(optimizer, epoch, args):
    if args.lradj=='type1':
        lr_adjust = {2: args.learning_rate * 0.5 ** 1, 4: args.learning_rate * 0.5 ** 2,
                     6: args.learning_rate * 0.5 ** 3, 8: args.learning_rate * 0.5 ** 4,
                     10: args.learning_rate * 0.5 ** 5}
    elif args.lradj=='type2':
        lr_adjust = {5: args.learning_rate * 0.5 ** 1, 10: args.learning_rate * 0.5 ** 2,
                     15: args.learning_rate * 0.5 ** 3, 20: args.learning_rate * 0.5 ** 4,
                     25: args.learning_rate * 0.5 ** 5}
    else:
        lr_adjust = {}
    if epoch in lr_adjust.keys():
        lr = lr_adjust[epoch]
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr


class StandardScaler():
    def __init__(self, mean=0., std=1.):
        self.mean = mean
        self.std = std

    def fit(self, data):
        self.mean = data.mean(0)
        self.std = data.std(0)

    def transform(self, data):
        mean = torch.from_numpy(self.mean).type_as(data).to(data.device) if torch.is_tensor(data) else self.mean
        std = torch.from_numpy(self.std).type_as(data).to(data.device) if torch.is_tensor(data) else self.std
        return (data - mean) / std

    def inverse_transform(self, data):
        mean = torch.from_numpy(self.mean).type_as(data).to(data.device) if torch.is_tensor(data) else self.mean
        std = torch.from_numpy(self.std).type_as(data).to(data.device) if torch.is_tensor(data) else self.std
        return (data * std) + mean


def synthetic_etth(seed, n=800):
    """An ETTh1-shaped frame: a date column and 7 hourly channels (daily and half-daily cycles with
    channel-specific phases and amplitudes, a slow trend, channel 6 a lagged mix of channels 0 and 3, noise)."""
    rng = np.random.RandomState(seed)
    t = np.arange(n, dtype=np.float64)
    cols = {}
    for c in range(6):
        cols[c] = (rng.uniform(0.5, 2.0) * np.sin(2 * np.pi * t / 24 + rng.uniform(0, 2 * np.pi))
                   + rng.uniform(0.2, 0.8) * np.sin(2 * np.pi * t / 12 + rng.uniform(0, 2 * np.pi))
                   + 0.002 * rng.uniform(-1, 1) * t + 0.1 * rng.randn(n))
    lagged = np.roll(0.6 * cols[0] + 0.4 * cols[3], 3)
    cols[6] = lagged + 0.1 * rng.randn(n)
    names = ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]
    df = pd.DataFrame({"date": pd.date_range("2016-07-01", periods=n, freq="h").astype(str)})
    for c, name in enumerate(names):
        df[name] = cols[c]
    return df


# data/data_loader.py
class Dataset_MTS(Dataset):
    def __init__(self, root_path, data_path='ETTh1.csv', flag='train', size=None,
                  data_split = [0.7, 0.1, 0.2], scale=True, scale_statistic=None, bug=None):  # noqa: B006
        # size [seq_len, label_len, pred_len]
        # info
        self.in_len = size[0]
        self.out_len = size[1]
        # init
        assert flag in ['train', 'test', 'val']
        type_map = {'train':0, 'val':1, 'test':2}
        self.set_type = type_map[flag]

        self.scale = scale
        self.bug = bug

        self.root_path = root_path
        self.data_path = data_path
        self.data_split = data_split
        self.scale_statistic = scale_statistic
        self.__read_data__()

    def __read_data__(self):
        df_raw = self.root_path  # pd.read_csv(os.path.join(self.root_path, self.data_path)) in the original
        if (self.data_split[0] > 1):
            train_num = self.data_split[0]; val_num = self.data_split[1]; test_num = self.data_split[2];
        else:
            train_num = int(len(df_raw)*self.data_split[0]);
            test_num = int(len(df_raw)*self.data_split[2])
            val_num = len(df_raw) - train_num - test_num;
        border1s = [0, train_num - self.in_len, train_num + val_num - self.in_len]
        border2s = [train_num, train_num+val_num, train_num + val_num + test_num]

        border1 = border1s[self.set_type]
        border2 = border2s[self.set_type]

        cols_data = df_raw.columns[1:]
        df_data = df_raw[cols_data]

        if self.scale:
            if self.scale_statistic is None:
                self.scaler = StandardScaler()
                train_data = df_data[border1s[0]:border2s[0]]
                self.scaler.fit(train_data.values)
            else:
                self.scaler = StandardScaler(mean = self.scale_statistic['mean'], std = self.scale_statistic['std'])
            data = self.scaler.transform(df_data.values)
        else:
            data = df_data.values

        self.data_x = data[border1:border2]
        self.data_y = data[border1:border2]

    def __getitem__(self, index):
        s_begin = index
        s_end = s_begin + self.in_len
        r_begin = s_end
        r_end = r_begin + self.out_len
        if self.bug == "target_window_inside_input":
            # classic slicing slip: the target window starts with the input window instead of after it
            r_begin = s_begin
            r_end = r_begin + self.out_len

        seq_x = self.data_x[s_begin:s_end]
        seq_y = self.data_y[r_begin:r_end]

        return seq_x, seq_y

    def __len__(self):
        return len(self.data_x) - self.in_len- self.out_len + 1

    def inverse_transform(self, data):
        return self.scaler.inverse_transform(data)


class Args:
    """main_crossformer.py's arguments (ETTh1, sizes changed, see the docstring)."""
    data = 'ETTh1'
    data_split = [0.7, 0.1, 0.2]
    in_len = 48
    out_len = 12
    seg_len = 6
    win_size = 2
    factor = 4
    data_dim = 7
    d_model = 32
    d_ff = 64
    n_heads = 2
    e_layers = 2
    dropout = 0.2
    baseline = False
    num_workers = 0
    batch_size = 16
    train_epochs = 20
    patience = 3
    learning_rate = 1e-3
    lradj = 'type1'


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = Args()
    device = torch.device('cpu')
    df_raw = synthetic_etth(seed)

    def _get_data(flag):
        if flag == 'test':
            shuffle_flag = False; drop_last = False; batch_size = args.batch_size;
        else:
            shuffle_flag = True; drop_last = False; batch_size = args.batch_size;
        data_set = Dataset_MTS(
            root_path=df_raw,
            data_path='ETTh1.csv',
            flag=flag,
            size=[args.in_len, args.out_len],
            data_split = args.data_split,
            bug=bug,
        )
        data_loader = DataLoader(
            data_set,
            batch_size=batch_size,
            shuffle=shuffle_flag,
            num_workers=args.num_workers,
            drop_last=drop_last,
            generator=torch.Generator().manual_seed(seed))
        return data_set, data_loader

    model = Crossformer(
        args.data_dim,
        args.in_len,
        args.out_len,
        args.seg_len,
        args.win_size,
        args.factor,
        args.d_model,
        args.d_ff,
        args.n_heads,
        args.e_layers,
        args.dropout,
        args.baseline,
        device,
        bug=bug,
    ).float()

    train_data, train_loader = _get_data(flag = 'train')
    vali_data, vali_loader = _get_data(flag = 'val')

    model_optim = optim.Adam(model.parameters(), lr=args.learning_rate)
    criterion = nn.MSELoss()

    def _process_one_batch(dataset_object, batch_x, batch_y, inverse = False):
        batch_x = batch_x.float().to(device)
        batch_y = batch_y.float().to(device)

        outputs = model(batch_x)

        if inverse:
            outputs = dataset_object.inverse_transform(outputs)
            batch_y = dataset_object.inverse_transform(batch_y)

        return outputs, batch_y

    def vali(vali_data, vali_loader, criterion):
        model.eval()
        total_loss = []
        with torch.no_grad():
            for i, (batch_x,batch_y) in enumerate(vali_loader):
                pred, true = _process_one_batch(
                    vali_data, batch_x, batch_y)
                loss = criterion(pred.detach().cpu(), true.detach().cpu())
                total_loss.append(loss.detach().item())
        total_loss = np.average(total_loss)
        model.train()
        return total_loss

    state = {"it": iter(train_loader), "epoch": 0}
    model.train()

    def train_step():
        try:
            batch_x, batch_y = next(state["it"])
        except StopIteration:
            state["epoch"] += 1
            adjust_learning_rate(model_optim, state["epoch"], args)
            state["it"] = iter(train_loader)
            batch_x, batch_y = next(state["it"])

        if bug != "zero_grad_dropped":
            model_optim.zero_grad()
        pred, true = _process_one_batch(
            train_data, batch_x, batch_y)
        loss = criterion(pred, true)

        loss.backward()
        model_optim.step()
        return loss.detach()

    def eval_fn(model_, batch):
        return float(vali(vali_data, vali_loader, criterion))

    xs, ys = zip(*[train_data[i] for i in range(args.batch_size)], strict=True)
    batch_x0 = torch.as_tensor(np.stack(xs)).float()
    batch_y0 = torch.as_tensor(np.stack(ys)).float()

    return Program(name="crossformer_etth", model=model, batch=(batch_x0, batch_y0), loss_fn=criterion,
                   optimizer=model_optim, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("segments_viewed_not_permuted", functools.partial(_build, bug="segments_viewed_not_permuted"),
        "tensor_trace", ("enc_value_embedding",)),
    Bug("target_window_inside_input", functools.partial(_build, bug="target_window_inside_input"),
        "learning_ledger", ("TASK",)),
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
