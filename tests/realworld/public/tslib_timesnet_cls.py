"""TimesNet (Wu et al., "Temporal 2D-Variation Modeling for General Time Series Analysis") for multivariate time
series classification, from THUML's Time-Series-Library: a circular-conv token embedding plus sinusoidal positions,
``TimesBlock``s that pick the top-k periods by FFT amplitude, fold the series into 2-D (cycles x period), run two
Inception blocks of 2-D convolutions and fold back, aggregated by the softmaxed amplitudes, with a residual and a
shared LayerNorm; GELU, dropout, padding positions zeroed by the mask, a flattened linear classifier; cross-entropy,
RAdam, gradient-norm clipping at 4; the UEA pipeline's zero-padding collate with padding masks.

Source: https://github.com/thuml/Time-Series-Library
Commit: 4e938a1767106324dd753b2a44832bf870a0252e
Files: models/TimesNet.py, layers/Conv_Blocks.py, layers/Embed.py, exp/exp_classification.py,
data_provider/data_loader.py (``UEAloader``), data_provider/uea.py (``collate_fn``, ``padding_mask``, ``Normalizer``),
data_provider/data_factory.py, utils/tools.py (``cal_accuracy``), run.py, scripts/classification/TimesNet.sh
License: MIT (Copyright (c) 2021 THUML @ Tsinghua University; full text in LICENSES/thuml-Time-Series-Library.txt)
Domain: time series classification (multivariate, variable length; the JapaneseVowels configuration)

Kept as written: ``FFT_for_Period``, ``TimesBlock``, ``Model`` (``classification`` path; the forecasting heads are
not built for this task, as in the original), ``Inception_Block_V1``, ``PositionalEmbedding``, ``TokenEmbedding``,
``TimeFeatureEmbedding`` and ``DataEmbedding`` (with ``embed='timeF'`` its temporal embedding exists and is unused
when ``x_mark`` is None, as in the original), ``collate_fn`` / ``padding_mask`` with ``max_len=args.seq_len``,
``Normalizer('standardization')`` fitted on each split's own rows, ``UEAloader.__getitem__`` (``.loc`` of the sample's
rows and label, ``instance_norm`` the identity outside EthanolConcentration), ``Exp_Classification``'s ``RAdam``,
``CrossEntropyLoss``, ``vali`` and the loop body of ``train`` (zero_grad, ``model(batch_x, padding_mask, None, None)``,
``criterion(outputs, label.long().squeeze(-1))``, backward, ``clip_grad_norm_(max_norm=4.0)``, step), the
JapaneseVowels settings of TimesNet.sh (e_layers 2, batch_size 16, d_model 16, d_ff 32, top_k 3, lr 0.001) and
run.py's defaults (num_kernels 6, dropout 0.1, embed timeF, freq h).

Deviations from the original:
- the UEA .ts files (read with sktime's ``load_from_tsfile_to_dataframe`` or from the Hugging Face hub) are not
  here: the series are synthetic JapaneseVowels-shaped recordings made from ``seed``: 12 channels, lengths 12 to 29,
  9 classes, each class a smooth template of per-channel sinusoids over the utterance (varied per sample in
  amplitude, phase and noise); 270 training and 90 test samples, built directly as the ``(num_samples * seq_len,
  feat_dim)`` dataframe indexed by sample ID and the int8 ``labels_df`` that ``load_single`` returns.
- ``train`` is not run an epoch at a time: ``train_step`` is one batch of its loop (the shuffled DataLoader, drawn
  with a ``torch.Generator(seed)``, restarts when it runs out), returning the loss; the prints, timing, early
  stopping and checkpoints are dropped; ``eval_fn`` is ``vali``'s accuracy on the TEST split.
- ``vali`` takes the softmax with ``dim=1`` (the original calls it without ``dim``, which only warns and picks the
  same axis for these 2-D predictions).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, UP004

from __future__ import annotations

import functools
import math
import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch
import torch.fft
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# ---- layers/Conv_Blocks.py ---------------------------------------------------------------------------------------
class Inception_Block_V1(nn.Module):
    def __init__(self, in_channels, out_channels, num_kernels=6, init_weight=True):
        super(Inception_Block_V1, self).__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.num_kernels = num_kernels
        kernels = []
        for i in range(self.num_kernels):
            kernels.append(nn.Conv2d(in_channels, out_channels, kernel_size=2 * i + 1, padding=i))
        self.kernels = nn.ModuleList(kernels)
        if init_weight:
            self._initialize_weights()

    def _initialize_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)

    def forward(self, x):
        res_list = []
        for i in range(self.num_kernels):
            res_list.append(self.kernels[i](x))
        res = torch.stack(res_list, dim=-1).mean(-1)
        return res


# ---- layers/Embed.py ---------------------------------------------------------------------------------------------
class PositionalEmbedding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super(PositionalEmbedding, self).__init__()
        # Compute the positional encodings once in log space.
        pe = torch.zeros(max_len, d_model).float()
        pe.require_grad = False

        position = torch.arange(0, max_len).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float()
                    * -(math.log(10000.0) / d_model)).exp()

        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)

        pe = pe.unsqueeze(0)
        self.register_buffer('pe', pe)

    def forward(self, x):
        return self.pe[:, :x.size(1)]


class TokenEmbedding(nn.Module):
    def __init__(self, c_in, d_model):
        super(TokenEmbedding, self).__init__()
        padding = 1 if torch.__version__ >= '1.5.0' else 2
        self.tokenConv = nn.Conv1d(in_channels=c_in, out_channels=d_model,
                                   kernel_size=3, padding=padding, padding_mode='circular', bias=False)
        for m in self.modules():
            if isinstance(m, nn.Conv1d):
                nn.init.kaiming_normal_(
                    m.weight, mode='fan_in', nonlinearity='leaky_relu')

    def forward(self, x):
        x = self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2)
        return x


class TimeFeatureEmbedding(nn.Module):
    def __init__(self, d_model, embed_type='timeF', freq='h'):
        super(TimeFeatureEmbedding, self).__init__()

        freq_map = {'h': 4, 't': 5, 's': 6,
                    'm': 1, 'a': 1, 'w': 2, 'd': 3, 'b': 3}
        d_inp = freq_map[freq]
        self.embed = nn.Linear(d_inp, d_model, bias=False)

    def forward(self, x):
        return self.embed(x)


class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, embed_type='fixed', freq='h', dropout=0.1):
        super(DataEmbedding, self).__init__()

        self.value_embedding = TokenEmbedding(c_in=c_in, d_model=d_model)
        self.position_embedding = PositionalEmbedding(d_model=d_model)
        assert embed_type == 'timeF'  # (port) only the TimeFeatureEmbedding branch is copied
        self.temporal_embedding = TimeFeatureEmbedding(d_model=d_model, embed_type=embed_type, freq=freq)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, x_mark):
        if x_mark is None:
            x = self.value_embedding(x) + self.position_embedding(x)
        else:
            x = self.value_embedding(
                x) + self.temporal_embedding(x_mark) + self.position_embedding(x)
        return self.dropout(x)


# ---- models/TimesNet.py ------------------------------------------------------------------------------------------
def FFT_for_Period(x, k=2):
    # [B, T, C]
    xf = torch.fft.rfft(x, dim=1)
    # find period by amplitudes
    frequency_list = abs(xf).mean(0).mean(-1)
    frequency_list[0] = 0
    _, top_list = torch.topk(frequency_list, k)
    top_list = top_list.detach().cpu().numpy()
    period = x.shape[1] // top_list
    return period, abs(xf).mean(-1)[:, top_list]


class TimesBlock(nn.Module):
    def __init__(self, configs):
        super(TimesBlock, self).__init__()
        self.seq_len = configs.seq_len
        self.pred_len = configs.pred_len
        self.k = configs.top_k
        # parameter-efficient design
        self.conv = nn.Sequential(
            Inception_Block_V1(configs.d_model, configs.d_ff,
                               num_kernels=configs.num_kernels),
            nn.GELU(),
            Inception_Block_V1(configs.d_ff, configs.d_model,
                               num_kernels=configs.num_kernels)
        )

    def forward(self, x):
        B, T, N = x.size()
        period_list, period_weight = FFT_for_Period(x, self.k)

        res = []
        for i in range(self.k):
            period = period_list[i]
            # padding
            if (self.seq_len + self.pred_len) % period != 0:
                length = (
                                 ((self.seq_len + self.pred_len) // period) + 1) * period
                padding = torch.zeros([x.shape[0], (length - (self.seq_len + self.pred_len)), x.shape[2]]).to(x.device)
                out = torch.cat([x, padding], dim=1)
            else:
                length = (self.seq_len + self.pred_len)
                out = x
            # reshape
            out = out.reshape(B, length // period, period,
                              N).permute(0, 3, 1, 2).contiguous()
            # 2D conv: from 1d Variation to 2d Variation
            out = self.conv(out)
            # reshape back
            out = out.permute(0, 2, 3, 1).reshape(B, -1, N)
            res.append(out[:, :(self.seq_len + self.pred_len), :])
        res = torch.stack(res, dim=-1)
        # adaptive aggregation
        period_weight = F.softmax(period_weight, dim=1)
        period_weight = period_weight.unsqueeze(
            1).unsqueeze(1).repeat(1, T, N, 1)
        res = torch.sum(res * period_weight, -1)
        # residual connection
        res = res + x
        return res


class Model(nn.Module):
    """
    Paper link: https://openreview.net/pdf?id=ju_Uqw384Oq
    """

    def __init__(self, configs):
        super(Model, self).__init__()
        self.configs = configs
        self.task_name = configs.task_name
        self.seq_len = configs.seq_len
        self.label_len = configs.label_len
        self.pred_len = configs.pred_len
        self.model = nn.ModuleList([TimesBlock(configs)
                                    for _ in range(configs.e_layers)])
        self.enc_embedding = DataEmbedding(configs.enc_in, configs.d_model, configs.embed, configs.freq,
                                           configs.dropout)
        self.layer = configs.e_layers
        self.layer_norm = nn.LayerNorm(configs.d_model)
        if self.task_name == 'classification':
            self.act = F.gelu
            self.dropout = nn.Dropout(configs.dropout)
            self.projection = nn.Linear(
                configs.d_model * configs.seq_len, configs.num_class)

    def classification(self, x_enc, x_mark_enc):
        # embedding
        enc_out = self.enc_embedding(x_enc, None)  # [B,T,C]
        # TimesNet
        for i in range(self.layer):
            enc_out = self.layer_norm(self.model[i](enc_out))

        # Output
        # the output transformer encoder/decoder embeddings don't include non-linearity
        output = self.act(enc_out)
        output = self.dropout(output)
        # zero-out padding embeddings
        output = output * x_mark_enc.unsqueeze(-1)
        # (batch_size, seq_length * d_model)
        output = output.reshape(output.shape[0], -1)
        output = self.projection(output)  # (batch_size, num_classes)
        return output

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec, mask=None):
        if self.task_name == 'classification':
            dec_out = self.classification(x_enc, x_mark_enc)
            return dec_out  # [B, N]
        return None


# ---- data_provider/uea.py ----------------------------------------------------------------------------------------
def collate_fn(data, max_len=None):
    batch_size = len(data)
    features, labels = zip(*data)

    # Stack and pad features and masks (convert 2D to 3D tensors, i.e. add batch dimension)
    lengths = [X.shape[0] for X in features]  # original sequence length for each time series
    if max_len is None:
        max_len = max(lengths)

    X = torch.zeros(batch_size, max_len, features[0].shape[-1])  # (batch_size, padded_length, feat_dim)
    for i in range(batch_size):
        end = min(lengths[i], max_len)
        X[i, :end, :] = features[i][:end, :]

    targets = torch.stack(labels, dim=0)  # (batch_size, num_labels)

    padding_masks = padding_mask(torch.tensor(lengths, dtype=torch.int16),
                                 max_len=max_len)  # (batch_size, padded_length) boolean tensor, "1" means keep

    return X, targets, padding_masks


def padding_mask(lengths, max_len=None):
    batch_size = lengths.numel()
    max_len = max_len or lengths.max_val()  # trick works because of overloading of 'or' operator for non-boolean types
    return (torch.arange(0, max_len, device=lengths.device)
            .type_as(lengths)
            .repeat(batch_size, 1)
            .lt(lengths.unsqueeze(1)))


class Normalizer(object):
    def __init__(self, norm_type='standardization', mean=None, std=None, min_val=None, max_val=None):
        self.norm_type = norm_type
        self.mean = mean
        self.std = std
        self.min_val = min_val
        self.max_val = max_val

    def normalize(self, df):
        if self.norm_type == "standardization":
            if self.mean is None:
                self.mean = df.mean()
                self.std = df.std()
            return (df - self.mean) / (self.std + np.finfo(float).eps)
        raise NotImplementedError(self.norm_type)  # (port) the other norm types are not used


# ---- data_provider/data_loader.py --------------------------------------------------------------------------------
class UEAloader(Dataset):
    def __init__(self, args, root_path, all_df, labels_df, flag=None, bug=None):
        self.args = args
        self.root_path = root_path
        self.flag = flag
        self.all_df, self.labels_df = all_df, labels_df  # (port) load_all's result
        self.all_IDs = self.all_df.index.unique()  # all sample IDs (integer indices 0 ... num_samples-1)
        self.max_seq_len = int(self.all_df.groupby(level=0).size().max())
        self.class_names = list(range(int(labels_df[0].max()) + 1))
        if bug == "labels_misaligned":
            # the labels frame re-indexed by sorted IDs while the features keep load order (classic)
            self.labels_df = self.labels_df.set_index(pd.Index(np.roll(np.asarray(self.labels_df.index), 1)))

        # use all features
        self.feature_names = self.all_df.columns
        self.feature_df = self.all_df

        # pre_process
        normalizer = Normalizer()
        self.feature_df = normalizer.normalize(self.feature_df)

    def instance_norm(self, case):
        if self.root_path.count('EthanolConcentration') > 0:  # special process for numerical stability
            mean = case.mean(0, keepdim=True)
            case = case - mean
            stdev = torch.sqrt(torch.var(case, dim=1, keepdim=True, unbiased=False) + 1e-5)
            case /= stdev
            return case
        else:
            return case

    def __getitem__(self, ind):
        batch_x = self.feature_df.loc[self.all_IDs[ind]].values
        labels = self.labels_df.loc[self.all_IDs[ind]].values
        return self.instance_norm(torch.from_numpy(batch_x)), \
               torch.from_numpy(labels)

    def __len__(self):
        return len(self.all_IDs)


def cal_accuracy(y_pred, y_true):
    return np.mean(y_pred == y_true)


# ---- (port) synthetic JapaneseVowels-shaped data ----------------------------------------------------------------
def synthetic_uea(rng, templates, n):
    n_class, n_ch, _ = templates.shape
    frames, labels = [], []
    for sid in range(n):
        c = int(rng.integers(0, n_class))
        length = int(rng.integers(12, 30))
        u = np.linspace(0, 1, length)[:, None]
        amp, freq, phase = templates[c, :, 0], templates[c, :, 1], templates[c, :, 2]
        x = amp * rng.uniform(0.8, 1.2) * np.sin(2 * np.pi * freq * u + phase + rng.normal(0, 0.3))
        x = x + rng.normal(0, 0.3, size=x.shape)
        frames.append((x, [sid] * length))
        labels.append(c)
    all_df = pd.DataFrame(np.concatenate([f for f, _ in frames]), columns=[f"dim_{j}" for j in range(n_ch)],
                          index=pd.Index([i for _, ids in frames for i in ids]))
    return all_df, pd.DataFrame(np.asarray(labels), dtype=np.int8)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    templates = np.stack([rng.uniform(0.5, 1.5, size=(9, 12)), rng.uniform(0.5, 3.0, size=(9, 12)),
                          rng.uniform(0, 2 * np.pi, size=(9, 12))], axis=-1)
    args = SimpleNamespace(task_name='classification', root_path='./dataset/JapaneseVowels/',
                           model_id='JapaneseVowels', e_layers=2, batch_size=16, d_model=16, d_ff=32, top_k=3,
                           learning_rate=0.001, num_kernels=6, dropout=0.1, embed='timeF', freq='h', label_len=48)
    train_data = UEAloader(args, args.root_path, *synthetic_uea(rng, templates, 270), flag='TRAIN', bug=bug)
    test_data = UEAloader(args, args.root_path, *synthetic_uea(rng, templates, 90), flag='TEST')
    # _build_model: the input depends on the data
    args.seq_len = max(train_data.max_seq_len, test_data.max_seq_len)
    args.pred_len = 0
    args.enc_in = train_data.feature_df.shape[1]
    args.num_class = len(train_data.class_names)
    model = Model(args).float()
    train_loader = DataLoader(train_data, batch_size=args.batch_size, shuffle=True, num_workers=0, drop_last=False,
                              collate_fn=lambda x: collate_fn(x, max_len=args.seq_len),
                              generator=torch.Generator().manual_seed(seed))
    vali_loader = DataLoader(test_data, batch_size=args.batch_size, shuffle=False, num_workers=0, drop_last=False,
                             collate_fn=lambda x: collate_fn(x, max_len=args.seq_len))

    model_optim = optim.RAdam(model.parameters(), lr=args.learning_rate)
    criterion = nn.CrossEntropyLoss()
    st = {"it": None}

    def vali(vali_data, vali_loader, criterion):
        total_loss = []
        preds = []
        trues = []
        if bug != "vali_without_eval":
            model.eval()
        with torch.no_grad():
            for i, (batch_x, label, padding_mask) in enumerate(vali_loader):
                batch_x = batch_x.float()
                padding_mask = padding_mask.float()

                outputs = model(batch_x, padding_mask, None, None)

                pred = outputs.detach()
                loss = criterion(pred, label.long().squeeze())
                total_loss.append(loss.item())

                preds.append(outputs.detach())
                trues.append(label)

        total_loss = np.average(total_loss)

        preds = torch.cat(preds, 0)
        trues = torch.cat(trues, 0)
        probs = torch.nn.functional.softmax(preds, dim=1)  # (total_samples, num_classes) est. prob. for each class and sample
        predictions = torch.argmax(probs, dim=1).cpu().numpy()  # (total_samples,) int class index for each sample
        trues = trues.flatten().cpu().numpy()
        accuracy = cal_accuracy(predictions, trues)

        model.train()
        return total_loss, accuracy

    def next_batch():
        batch = next(st["it"], None) if st["it"] is not None else None
        if batch is None:
            model.train()
            st["it"] = iter(train_loader)
            batch = next(st["it"])
        return batch

    def train_step():
        batch_x, label, padding_mask = next_batch()
        if bug != "zero_grad_dropped":
            model_optim.zero_grad()

        batch_x = batch_x.float()
        padding_mask = padding_mask.float()

        outputs = model(batch_x, padding_mask, None, None)
        loss = criterion(outputs, label.long().squeeze(-1))

        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=4.0)
        model_optim.step()
        return loss.item()

    def loss_fn(outputs, label):
        return criterion(outputs, label.long().squeeze(-1))

    def eval_fn(_model, _batch=None):
        was_training = model.training
        _, accuracy = vali(test_data, vali_loader, criterion)
        model.train(was_training)
        return float(accuracy)

    bx, lb, pm = collate_fn([train_data[i] for i in range(args.batch_size)], max_len=args.seq_len)
    batch = ((bx.float(), pm.float(), None, None), lb)
    return Program(name="tslib_timesnet_cls", model=model, batch=batch, loss_fn=loss_fn, optimizer=model_optim,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the labels frame re-indexed apart from the features (classic: the labels of sample i read for sample i+1).
    Bug("labels_misaligned", functools.partial(_build, bug="labels_misaligned"), "learning_ledger", ("TASK",)),
    # vali without self.model.eval() (classic): the accuracy is measured with dropout on.
    Bug("vali_without_eval", functools.partial(_build, bug="vali_without_eval"), "six_claims", ("EVALUATION",)),
    # model_optim.zero_grad() left out of the loop (classic): the gradients of every batch pile up.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
