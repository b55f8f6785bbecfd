"""Pyraformer (alipay/Pyraformer) for long-range forecasting, as ``long_range_main.py`` trains it on ETTh1 with its
defaults: the data embedding (circular-conv token embedding + sinusoidal positions + a linear time-feature
embedding), the bottleneck coarser-scale construction module (``Bottleneck_Construct``: down-projection, strided
``ConvLayer``s of window 4, up-projection, concatenated to the fine scale), encoder layers whose attention is masked
by the pyramidal attention mask of ``get_mask`` (PAM-Naive), the ``FC`` decoder (a zero predict token appended to
the history, the pyramid's nodes that cover it gathered by ``refer_points`` and a bias-free linear ``Predictor``
over them), MSE, Adam and ``StepLR(step_size=1, gamma=lr_step)`` stepped after every epoch.

Source: https://github.com/alipay/Pyraformer
Commit: 84af4dbd93b7b96975b5034f0dde412005260123
Files: long_range_main.py (prepare_dataloader, dataset_parameters, train_epoch, eval_epoch, train, main's optimizer
       and scheduler, the argument defaults), pyraformer/Pyraformer_LR.py (Encoder, Model), pyraformer/Layers.py
       (get_mask, refer_points, EncoderLayer, ConvLayer, Bottleneck_Construct, Predictor), pyraformer/SubLayers.py
       (MultiHeadAttention, PositionwiseFeedForward), pyraformer/Modules.py (ScaledDotProductAttention),
       pyraformer/embed.py (PositionalEmbedding, TokenEmbedding, TimeFeatureEmbedding, DataEmbedding),
       data_loader.py (Dataset_ETT_hour), utils/tools.py (StandardScaler)
License: Apache-2.0 (Copyright 2022 - The AntGroup-RI team; LICENSES/alipay-Pyraformer.txt)
Domain: time-series forecasting

Deviations from the original:
- sizes: input_size 168 -> 64, predict_step 168 -> 24, d_model 512 -> 32, d_inner_hid 512 -> 32, d_k = d_v 128 -> 8,
  d_bottleneck 128 -> 16, n_layer 4 -> 2 (n_head 4, window_size [4, 4, 4], inner_size 3, dropout 0.05, batch 32,
  Adam lr 1e-4, lr_step 0.1 unchanged);
- data: the ETTh1 CSV is replaced by a synthetic 7-channel hourly series made from ``seed`` (a daily and a weekly
  sinusoid per channel with its own phase and amplitude, a slow trend, noise) of 2000 hours, split 60/20/20 (the
  original's 12/4/4 months, scaled) and standardized with the training part's mean and std by the repository's
  ``StandardScaler``; ``time_features(timeenc=1, freq='h')`` is written out for an hourly index starting at hour 0
  (hour of day, day of week, day of month, day of year, each scaled to [-0.5, 0.5]); no pandas;
- no TVM kernel (``use_tvm`` is False by default; its branch raises), no GPU, tqdm, checkpoints or metrics files;
- one ``train_step`` is one batch of ``train_epoch``; when an epoch of the training loader ends ``scheduler.step()``
  runs as ``train`` does after ``eval_epoch``; ``eval_fn`` is ``eval_epoch``'s forward on one batch (``model.eval()``,
  ``no_grad``, the MSE), restoring ``model.train()`` as the next ``train_epoch`` does.
"""
# ruff: noqa: C417, F821, PLR0402, PLW0127, RUF059, SIM102, UP008, UP039  (the original's code style is kept as written; F821: the
# attention-decoder and TVM branches, never taken here, name helpers that are not ported)

from __future__ import annotations

import functools
import math
import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.modules.linear import Linear
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- pyraformer/Modules.py -----------------------------------------------------------------------------------

class ScaledDotProductAttention(nn.Module):
    """ Scaled Dot-Product Attention """

    def __init__(self, temperature, attn_dropout=0.2):
        super().__init__()

        self.temperature = temperature
        self.dropout = nn.Dropout(attn_dropout)

    def forward(self, q, k, v, mask=None):
        attn = torch.matmul(q / self.temperature, k.transpose(2, 3))

        if mask is not None:
            attn = attn.masked_fill(mask, -1e9)

        attn = self.dropout(F.softmax(attn, dim=-1))
        output = torch.matmul(attn, v)

        return output, attn


# ---- pyraformer/SubLayers.py ---------------------------------------------------------------------------------

class MultiHeadAttention(nn.Module):
    """ Multi-Head Attention module """

    def __init__(self, n_head, d_model, d_k, d_v, dropout=0.1, normalize_before=True):
        super().__init__()

        self.normalize_before = normalize_before
        self.n_head = n_head
        self.d_k = d_k
        self.d_v = d_v

        self.w_qs = nn.Linear(d_model, n_head * d_k, bias=False)
        self.w_ks = nn.Linear(d_model, n_head * d_k, bias=False)
        self.w_vs = nn.Linear(d_model, n_head * d_v, bias=False)
        nn.init.xavier_uniform_(self.w_qs.weight)
        nn.init.xavier_uniform_(self.w_ks.weight)
        nn.init.xavier_uniform_(self.w_vs.weight)

        self.fc = nn.Linear(d_v * n_head, d_model)
        nn.init.xavier_uniform_(self.fc.weight)

        self.attention = ScaledDotProductAttention(temperature=d_k ** 0.5, attn_dropout=dropout)

        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v, mask=None):
        d_k, d_v, n_head = self.d_k, self.d_v, self.n_head
        sz_b, len_q, len_k, len_v = q.size(0), q.size(1), k.size(1), v.size(1)

        residual = q
        if self.normalize_before:
            q = self.layer_norm(q)

        # Pass through the pre-attention projection: b x lq x (n*dv)
        # Separate different heads: b x lq x n x dv
        q = self.w_qs(q).view(sz_b, len_q, n_head, d_k)
        k = self.w_ks(k).view(sz_b, len_k, n_head, d_k)
        v = self.w_vs(v).view(sz_b, len_v, n_head, d_v)

        # Transpose for attention dot product: b x n x lq x dv
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

        if mask is not None:
            if len(mask.size()) == 3:
                mask = mask.unsqueeze(1)  # For head axis broadcasting.

        output, attn = self.attention(q, k, v, mask=mask)

        # Transpose to move the head dimension back: b x lq x n x dv
        # Combine the last two dimensions to concatenate all the heads together: b x lq x (n*dv)
        output = output.transpose(1, 2).contiguous().view(sz_b, len_q, -1)
        output = self.dropout(self.fc(output))
        output += residual

        if not self.normalize_before:
            output = self.layer_norm(output)
        return output, attn


class PositionwiseFeedForward(nn.Module):
    """ Two-layer position-wise feed-forward neural network. """

    def __init__(self, d_in, d_hid, dropout=0.1, normalize_before=True):
        super().__init__()

        self.normalize_before = normalize_before

        self.w_1 = nn.Linear(d_in, d_hid)
        self.w_2 = nn.Linear(d_hid, d_in)

        self.layer_norm = nn.LayerNorm(d_in, eps=1e-6)
        #self.layer_norm = GraphNorm(d_in)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        residual = x
        if self.normalize_before:
            x = self.layer_norm(x)

        x = F.gelu(self.w_1(x))
        x = self.dropout(x)
        x = self.w_2(x)
        x = self.dropout(x)
        x = x + residual

        if not self.normalize_before:
            x = self.layer_norm(x)
        return x

# ---- pyraformer/Layers.py ----

def get_mask(input_size, window_size, inner_size, device):
    """Get the attention mask of PAM-Naive"""
    # Get the size of all layers
    all_size = []
    all_size.append(input_size)
    for i in range(len(window_size)):
        layer_size = math.floor(all_size[i] / window_size[i])
        all_size.append(layer_size)

    seq_length = sum(all_size)
    mask = torch.zeros(seq_length, seq_length, device=device)

    # get intra-scale mask
    inner_window = inner_size // 2
    for layer_idx in range(len(all_size)):
        start = sum(all_size[:layer_idx])
        for i in range(start, start + all_size[layer_idx]):
            left_side = max(i - inner_window, start)
            right_side = min(i + inner_window + 1, start + all_size[layer_idx])
            mask[i, left_side:right_side] = 1

    # get inter-scale mask
    for layer_idx in range(1, len(all_size)):
        start = sum(all_size[:layer_idx])
        for i in range(start, start + all_size[layer_idx]):
            left_side = (start - all_size[layer_idx - 1]) + (i - start) * window_size[layer_idx - 1]
            if i == ( start + all_size[layer_idx] - 1):
                right_side = start
            else:
                right_side = (start - all_size[layer_idx - 1]) + (i - start + 1) * window_size[layer_idx - 1]
            mask[i, left_side:right_side] = 1
            mask[left_side:right_side, i] = 1

    mask = (1 - mask).bool()

    return mask, all_size


def refer_points(all_sizes, window_size, device):
    """Gather features from PAM's pyramid sequences"""
    input_size = all_sizes[0]
    indexes = torch.zeros(input_size, len(all_sizes), device=device)

    for i in range(input_size):
        indexes[i][0] = i
        former_index = i
        for j in range(1, len(all_sizes)):
            start = sum(all_sizes[:j])
            inner_layer_idx = former_index - (start - all_sizes[j - 1])
            former_index = start + min(inner_layer_idx // window_size[j - 1], all_sizes[j] - 1)
            indexes[i][j] = former_index

    indexes = indexes.unsqueeze(0).unsqueeze(3)

    return indexes.long()


class EncoderLayer(nn.Module):
    """ Compose with two layers """

    def __init__(self, d_model, d_inner, n_head, d_k, d_v, dropout=0.1, normalize_before=True, use_tvm=False, q_k_mask=None, k_q_mask=None):
        super(EncoderLayer, self).__init__()
        self.use_tvm = use_tvm
        if use_tvm:
            raise NotImplementedError("(port) the TVM kernel of PAM_TVM.py is not ported")
        else:
            self.slf_attn = MultiHeadAttention(n_head, d_model, d_k, d_v, dropout=dropout, normalize_before=normalize_before)

        self.pos_ffn = PositionwiseFeedForward(
            d_model, d_inner, dropout=dropout, normalize_before=normalize_before)

    def forward(self, enc_input, slf_attn_mask=None):
        if self.use_tvm:
            enc_output = self.slf_attn(enc_input)
            enc_slf_attn = None
        else:
            enc_output, enc_slf_attn = self.slf_attn(enc_input, enc_input, enc_input, mask=slf_attn_mask)

        enc_output = self.pos_ffn(enc_output)

        return enc_output, enc_slf_attn


class ConvLayer(nn.Module):
    def __init__(self, c_in, window_size):
        super(ConvLayer, self).__init__()
        self.downConv = nn.Conv1d(in_channels=c_in,
                                  out_channels=c_in,
                                  kernel_size=window_size,
                                  stride=window_size)
        self.norm = nn.BatchNorm1d(c_in)
        self.activation = nn.ELU()

    def forward(self, x):
        x = self.downConv(x)
        x = self.norm(x)
        x = self.activation(x)
        return x


class Bottleneck_Construct(nn.Module):
    """Bottleneck convolution CSCM"""
    def __init__(self, d_model, window_size, d_inner):
        super(Bottleneck_Construct, self).__init__()
        if not isinstance(window_size, list):
            self.conv_layers = nn.ModuleList([
                ConvLayer(d_inner, window_size),
                ConvLayer(d_inner, window_size),
                ConvLayer(d_inner, window_size)
                ])
        else:
            self.conv_layers = []
            for i in range(len(window_size)):
                self.conv_layers.append(ConvLayer(d_inner, window_size[i]))
            self.conv_layers = nn.ModuleList(self.conv_layers)
        self.up = Linear(d_inner, d_model)
        self.down = Linear(d_model, d_inner)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, enc_input):

        temp_input = self.down(enc_input).permute(0, 2, 1)
        all_inputs = []
        for i in range(len(self.conv_layers)):
            temp_input = self.conv_layers[i](temp_input)
            all_inputs.append(temp_input)

        all_inputs = torch.cat(all_inputs, dim=2).transpose(1, 2)
        all_inputs = self.up(all_inputs)
        all_inputs = torch.cat([enc_input, all_inputs], dim=1)

        all_inputs = self.norm(all_inputs)

        return all_inputs


class Predictor(nn.Module):

    def __init__(self, dim, num_types):
        super().__init__()

        self.linear = nn.Linear(dim, num_types, bias=False)
        nn.init.xavier_normal_(self.linear.weight)

    def forward(self, data):
        out = self.linear(data)
        out = out
        return out


# ---- pyraformer/embed.py ----

class PositionalEmbedding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super(PositionalEmbedding, self).__init__()
        # Compute the positional encodings once in log space.
        pe = torch.zeros(max_len, d_model).float()
        pe.require_grad = False

        position = torch.arange(0, max_len).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()

        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)

        pe = pe.unsqueeze(0)
        self.register_buffer('pe', pe)

    def forward(self, x):
        return self.pe[:, :x.size(1)]

class TokenEmbedding(nn.Module):
    def __init__(self, c_in, d_model):
        super(TokenEmbedding, self).__init__()
        padding = 1 if torch.__version__>='1.5.0' else 2
        self.tokenConv = nn.Conv1d(in_channels=c_in, out_channels=d_model, 
                                    kernel_size=3, padding=padding, padding_mode='circular')
        for m in self.modules():
            if isinstance(m, nn.Conv1d):
                nn.init.kaiming_normal_(m.weight,mode='fan_in',nonlinearity='leaky_relu')

    def forward(self, x):
        x = self.tokenConv(x.permute(0, 2, 1)).transpose(1,2)
        return x

class TimeFeatureEmbedding(nn.Module):
    def __init__(self, d_model):
        super(TimeFeatureEmbedding, self).__init__()

        d_inp = 4
        self.embed = nn.Linear(d_inp, d_model)
    
    def forward(self, x):
        return self.embed(x)

"""Embedding modules. The DataEmbedding is used by the ETT dataset for long range forecasting."""
class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, dropout=0.1):
        super(DataEmbedding, self).__init__()

        self.value_embedding = TokenEmbedding(c_in=c_in, d_model=d_model)
        self.position_embedding = PositionalEmbedding(d_model=d_model)
        self.temporal_embedding = TimeFeatureEmbedding(d_model)

        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, x_mark):
        x = self.value_embedding(x) + self.position_embedding(x) + self.temporal_embedding(x_mark)

        return self.dropout(x)


# ---- pyraformer/Pyraformer_LR.py ----

class Encoder(nn.Module):
    """ A encoder model with self attention mechanism. """

    def __init__(self, opt):
        super().__init__()

        self.d_model = opt.d_model
        self.model_type = opt.model
        self.window_size = opt.window_size
        self.truncate = opt.truncate
        if opt.decoder == 'attention':
            self.mask, self.all_size = get_mask(opt.input_size, opt.window_size, opt.inner_size, opt.device)
        else:
            self.mask, self.all_size = get_mask(opt.input_size+1, opt.window_size, opt.inner_size, opt.device)
        self.decoder_type = opt.decoder
        if opt.decoder == 'FC':
            self.indexes = refer_points(self.all_size, opt.window_size, opt.device)

        if opt.use_tvm:
            assert len(set(self.window_size)) == 1, "Only constant window size is supported."
            padding = 1 if opt.decoder == 'FC' else 0
            q_k_mask = get_q_k(opt.input_size + padding, opt.inner_size, opt.window_size[0], opt.device)
            k_q_mask = get_k_q(q_k_mask)
            self.layers = nn.ModuleList([
                EncoderLayer(opt.d_model, opt.d_inner_hid, opt.n_head, opt.d_k, opt.d_v, dropout=opt.dropout, \
                    normalize_before=False, use_tvm=True, q_k_mask=q_k_mask, k_q_mask=k_q_mask) for i in range(opt.n_layer)
                ])
        else:
            self.layers = nn.ModuleList([
                EncoderLayer(opt.d_model, opt.d_inner_hid, opt.n_head, opt.d_k, opt.d_v, dropout=opt.dropout, \
                    normalize_before=False) for i in range(opt.n_layer)
                ])

        if opt.embed_type == 'CustomEmbedding':
            self.enc_embedding = CustomEmbedding(opt.enc_in, opt.d_model, opt.covariate_size, opt.seq_num, opt.dropout)
        else:
            self.enc_embedding = DataEmbedding(opt.enc_in, opt.d_model, opt.dropout)

        self.conv_layers = eval(opt.CSCM)(opt.d_model, opt.window_size, opt.d_bottleneck)

    def forward(self, x_enc, x_mark_enc):

        seq_enc = self.enc_embedding(x_enc, x_mark_enc)

        mask = self.mask.repeat(len(seq_enc), 1, 1).to(x_enc.device)
        seq_enc = self.conv_layers(seq_enc)

        for i in range(len(self.layers)):
            seq_enc, _ = self.layers[i](seq_enc, mask)

        if self.decoder_type == 'FC':
            indexes = self.indexes.repeat(seq_enc.size(0), 1, 1, seq_enc.size(2)).to(seq_enc.device)
            indexes = indexes.view(seq_enc.size(0), -1, seq_enc.size(2))
            all_enc = torch.gather(seq_enc, 1, indexes)
            seq_enc = all_enc.view(seq_enc.size(0), self.all_size[0], -1)
        elif self.decoder_type == 'attention' and self.truncate:
            seq_enc = seq_enc[:, :self.all_size[0]]

        return seq_enc


class Model(nn.Module):
    """ A sequence to sequence model with attention mechanism. """

    def __init__(self, opt):
        super().__init__()

        self.predict_step = opt.predict_step
        self.d_model = opt.d_model
        self.input_size = opt.input_size
        self.decoder_type = opt.decoder
        self.channels = opt.enc_in

        self.encoder = Encoder(opt)
        if opt.decoder == 'attention':
            mask = get_subsequent_mask(opt.input_size, opt.window_size, opt.predict_step, opt.truncate)
            self.decoder = Decoder(opt, mask)
            self.predictor = Predictor(opt.d_model, opt.enc_in)
        elif opt.decoder == 'FC':
            self.predictor = Predictor(4 * opt.d_model, opt.predict_step * opt.enc_in)

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec, pretrain):
        """
        Return the hidden representations and predictions.
        For a sequence (l_1, l_2, ..., l_N), we predict (l_2, ..., l_N, l_{N+1}).
        Input: event_type: batch*seq_len;
               event_time: batch*seq_len.
        Output: enc_output: batch*seq_len*model_dim;
                type_prediction: batch*seq_len*num_classes (not normalized);
                time_prediction: batch*seq_len.
        """
        if self.decoder_type == 'attention':
            enc_output = self.encoder(x_enc, x_mark_enc)
            dec_enc = self.decoder(x_dec, x_mark_dec, enc_output)

            if pretrain:
                dec_enc = torch.cat([enc_output[:, :self.input_size], dec_enc], dim=1)
                pred = self.predictor(dec_enc)
            else:
                pred = self.predictor(dec_enc)
        elif self.decoder_type == 'FC':
            enc_output = self.encoder(x_enc, x_mark_enc)[:, -1, :]
            pred = self.predictor(enc_output).view(enc_output.size(0), self.predict_step, -1)

        return pred



# ---- utils/tools.py ------------------------------------------------------------------------------------------

class StandardScaler():
    def __init__(self):
        self.mean = 0.
        self.std = 1.

    def fit(self, data):
        self.mean = data.mean(0)
        self.std = data.std(0)

    def transform(self, data):
        mean = torch.from_numpy(self.mean).type_as(data).to(data.device) if torch.is_tensor(data) else self.mean
        std = torch.from_numpy(self.std).type_as(data).to(data.device) if torch.is_tensor(data) else self.std
        return (data - mean) / std


# ---- data_loader.py (Dataset_ETT_hour on an in-memory series) ------------------------------------------------

def make_series(seed, n=2000, channels=7):
    """(port) ETTh1.csv's 7 value columns: per channel a daily and a weekly sinusoid, a slow trend, noise."""
    g = np.random.default_rng(seed)
    t = np.arange(n, dtype=np.float64)
    phase = g.uniform(0, 2 * np.pi, (2, channels))
    amp = g.uniform(0.5, 2.0, (2, channels))
    slope = g.uniform(-2.0, 2.0, channels) / n
    return (amp[0] * np.sin(2 * np.pi * t[:, None] / 24 + phase[0])
            + amp[1] * np.sin(2 * np.pi * t[:, None] / 168 + phase[1])
            + slope * t[:, None] + 0.1 * g.standard_normal((n, channels)))


def time_features_hourly(n):
    """(port) utils/timefeatures.time_features(timeenc=1, freq='h') for hours 0..n-1: HourOfDay, DayOfWeek,
    DayOfMonth, DayOfYear, each in [-0.5, 0.5]."""
    t = np.arange(n)
    day = t // 24
    return np.stack([(t % 24) / 23.0 - 0.5, (day % 7) / 6.0 - 0.5, (day % 30) / 30.0 - 0.5,
                     (day % 365) / 364.0 - 0.5], axis=1)


class Dataset_ETT_hour(Dataset):
    def __init__(self, series, flag='train', size=None, inverse=False, bug=None):
        # size [seq_len, label_len, pred_len]
        # info
        self.seq_len = size[0]
        self.pred_len = size[1]
        # init
        assert flag in ['train', 'test', 'val']
        type_map = {'train':0, 'val':1, 'test':2}
        self.set_type = type_map[flag]
        self.inverse = inverse
        self.bug = bug
        self.__read_data__(series)

    def __read_data__(self, df_data):
        self.scaler = StandardScaler()
        n = len(df_data)
        border1s = [0, int(n * 0.6) - self.seq_len, int(n * 0.8) - self.seq_len]
        border2s = [int(n * 0.6), int(n * 0.8), n]
        border1 = border1s[self.set_type]
        border2 = border2s[self.set_type]

        train_data = df_data[border1s[0]:border2s[0]]
        self.scaler.fit(train_data)
        data = self.scaler.transform(df_data)

        data_stamp = time_features_hourly(n)[border1:border2]

        self.data_x = data[border1:border2]
        if self.inverse:
            self.data_y = df_data[border1:border2]
        else:
            self.data_y = data[border1:border2]
        self.data_stamp = data_stamp

    def __getitem__(self, index):
        s_begin = index
        s_end = s_begin + self.seq_len
        r_begin = s_end
        if self.bug == "target_window_inside_input":
            # the target window starts pred_len steps before the end of the history: it is the input's own tail
            r_begin = s_end - self.pred_len
        r_end = r_begin + self.pred_len

        seq_x = self.data_x[s_begin:s_end]
        seq_y = self.data_y[r_begin:r_end]
        seq_x_mark = self.data_stamp[s_begin:s_end]
        seq_y_mark = self.data_stamp[r_begin:r_end]
        return seq_x, seq_y, seq_x_mark, seq_y_mark, self.scaler.mean, self.scaler.std

    def __len__(self):
        return len(self.data_x) - self.seq_len- self.pred_len + 1


# ---- long_range_main.py --------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    opt = SimpleNamespace(data='ETTh1', input_size=64, predict_step=24, inverse=False, model='Pyraformer',
                          decoder='FC', epoch=5, batch_size=32, pretrain=False, hard_sample_mining=False,
                          dropout=0.05, lr=1e-4, lr_step=0.1, d_model=32, d_inner_hid=32, d_k=8, d_v=8,
                          d_bottleneck=16, n_head=4, n_layer=2, window_size='[4, 4, 4]', inner_size=3,
                          CSCM='Bottleneck_Construct', truncate=False, use_tvm=False, device='cpu')
    opt.window_size = eval(opt.window_size)
    # dataset_parameters(opt, 'ETTh1')
    opt.enc_in, opt.dec_in, opt.covariate_size, opt.seq_num, opt.embed_type = 7, 7, 4, 1, 'DataEmbedding'

    series = make_series(seed)
    train_dataset = Dataset_ETT_hour(series, flag='train', size=[opt.input_size, opt.predict_step],
                                     inverse=opt.inverse, bug=bug)
    test_dataset = Dataset_ETT_hour(series, flag='test', size=[opt.input_size, opt.predict_step],
                                    inverse=opt.inverse, bug=bug)
    training_loader = DataLoader(train_dataset, batch_size=opt.batch_size, shuffle=True, num_workers=0,
                                 drop_last=True, generator=torch.Generator().manual_seed(seed))

    model = Model(opt)
    model.to(opt.device)

    """ optimizer and scheduler """
    optimizer = optim.Adam(filter(lambda x: x.requires_grad, model.parameters()), opt.lr)
    scheduler = optim.lr_scheduler.StepLR(optimizer, 1, gamma=opt.lr_step)

    state = {"it": None, "epoch_i": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of `for epoch_i in range(opt.epoch)`'s body
                scheduler.step()
                state["epoch_i"] += 1
            model.train()
            state["it"] = iter(training_loader)
            return next(state["it"])

    def prepare(batch_x, batch_y, batch_x_mark, batch_y_mark):
        # Add a predict token into the history sequence
        predict_token = torch.zeros(batch_x.size(0), 1, batch_x.size(-1), device=batch_x.device)
        if bug == "predict_token_from_target":
            # the predict token filled with the first target step instead of zeros
            predict_token = batch_y[:, 0:1, :]
        batch_x = torch.cat([batch_x, predict_token], dim=1)
        batch_x_mark = torch.cat([batch_x_mark, batch_y_mark[:, 0:1, :]], dim=1)
        return batch_x, batch_x_mark

    def train_step():
        batch = next_batch()
        # prepare data
        batch_x, batch_y, batch_x_mark, batch_y_mark, mean, std = map(lambda x: x.float().to(opt.device), batch)
        # prepare predict token
        dec_inp = torch.zeros_like(batch_y).float()

        optimizer.zero_grad()

        # forward
        batch_x, batch_x_mark = prepare(batch_x, batch_y, batch_x_mark, batch_y_mark)
        outputs = model(batch_x, batch_x_mark, dec_inp, batch_y_mark, False)

        # determine the loss function
        criterion = torch.nn.MSELoss(reduction='none')
        # compute loss
        losses = criterion(outputs, batch_y)
        loss = losses.mean()
        loss.backward()

        """ update parameters """
        optimizer.step()
        if bug == "scheduler_stepped_per_batch":
            # StepLR(step_size=1) stepped inside the batch loop: the lr falls tenfold after every batch
            scheduler.step()
        return loss.detach()

    def eval_epoch(model, batch):
        (batch_x, batch_x_mark, batch_y_mark), batch_y = batch
        model.eval()
        with torch.no_grad():
            dec_inp = torch.zeros_like(batch_y).float()
            outputs = model(batch_x, batch_x_mark, dec_inp, batch_y_mark, False)
            mse = float(((outputs - batch_y) ** 2).mean())
        model.train()
        return mse

    def as_inputs(items):
        batch_x, batch_y, batch_x_mark, batch_y_mark = (torch.stack([torch.as_tensor(it[k]) for it in items]).float()
                                                        for k in range(4))
        batch_x, batch_x_mark = prepare(batch_x, batch_y, batch_x_mark, batch_y_mark)
        return (batch_x, batch_x_mark, batch_y_mark), batch_y

    batch = as_inputs([train_dataset[i] for i in range(opt.batch_size)])
    test_batch = as_inputs([test_dataset[i] for i in range(0, len(test_dataset), 8)][:opt.batch_size])
    return Program(name="pyraformer_etth", model=model, batch=batch,
                   loss_fn=lambda outputs, batch_y: torch.nn.MSELoss(reduction='none')(outputs, batch_y).mean(),
                   optimizer=optimizer, train_step=train_step,
                   eval_fn=lambda m, _batch: eval_epoch(m, test_batch), task="regression", loader=training_loader)


build = functools.partial(_build)

BUGS = [
    # the target window taken from the end of the history instead of after it: the "forecast" is a copy of the
    # input's last predict_step steps.
    Bug("target_window_inside_input", functools.partial(_build, bug="target_window_inside_input"),
        "learning_ledger", ("TASK",)),
    # the FC decoder's predict token filled with the first future value instead of zeros: the target leaks into
    # the input at the very node the prediction is gathered from.
    Bug("predict_token_from_target", functools.partial(_build, bug="predict_token_from_target"), "learning_ledger",
        ("TASK",)),
    # scheduler.step() moved into the batch loop: StepLR(step_size=1, gamma=0.1) cuts the lr tenfold every batch
    # and training stalls after a few steps.
    Bug("scheduler_stepped_per_batch", functools.partial(_build, bug="scheduler_stepped_per_batch"),
        "learning_ledger", ("PARAMETER_UPDATE",)),
]
