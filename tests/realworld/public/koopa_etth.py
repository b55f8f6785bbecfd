"""Koopa (Liu et al., "Koopa: Learning Non-stationary Time Series Dynamics with Koopman Predictors", NeurIPS 2023)
from thuml/Koopa, trained as ``exp/exp_main.py`` does on an ETT-style multivariate series: each window is
stationarized (mean and standard deviation of the lookback, detached), then Koopa blocks split the residual with a
Fourier filter into a time-invariant part (the spectrum's top ``alpha`` frequencies, chosen from the training
windows' mean amplitudes before the model is built) and a time-variant part; the time-invariant part goes through an
MLP encoder, a learnable Koopman operator (an orthogonal-initialized ``nn.Linear``) and an MLP decoder; the
time-variant part is cut into segments, encoded, advanced by a Koopman operator fitted to the window by least squares
(``torch.linalg.lstsq``, DMD), decoded into a backcast that is removed from the residual and a forecast; the block
forecasts are summed and de-stationarized; MSE on the last ``pred_len`` steps, Adam, the ``type1`` halving of the
learning rate per epoch.

Source: https://github.com/thuml/Koopa
Commit: a2e0bb77ec7c1a25e8e0579ba517ffb41358b844
Files: ``models/Koopa.py``, ``exp/exp_main.py`` (``_get_mask_spectrum``, ``_build_model``, ``_select_optimizer``,
``_select_criterion``, ``vali``, ``train``), ``data_provider/data_loader.py`` (``Dataset_ETT_hour``),
``data_provider/data_factory.py``, ``utils/tools.py`` (``adjust_learning_rate``), ``run.py`` (defaults),
``scripts/ETT_script/Koopa.sh``
License: MIT (Copyright (c) 2022 THUML @ Tsinghua University; full text in LICENSES/thuml-Koopa.txt)
Domain: time series, long-term multivariate forecasting (Koopman predictors, Fourier disentanglement)

Kept as written: ``models/Koopa.py`` (``FourierFilter``, ``MLP``, ``KPLayer``, ``KPLayerApprox``, ``TimeVarKP``,
``TimeInvKP``, ``Model``), ``_get_mask_spectrum`` (the mean rfft amplitude over the training loader, top
``alpha`` share), the train loop body (``zero_grad``, the decoder input of zeros after ``label_len`` known steps,
the model, the last ``pred_len`` steps with ``f_dim`` 0 for features M, ``nn.MSELoss``, backward, step),
``Dataset_ETT_hour`` (the three borders with the lookback overlap, the scaler fit on the training border, windows
of ``seq_len`` inputs and ``label_len + pred_len`` targets), the loaders (train and validation shuffled with
``drop_last``), ``adjust_learning_rate`` type1 at each epoch end, alpha 0.2, hidden_layers 2, multistep False,
features M, enc_in 7, batch_size 32, learning_rate 1e-3.

Deviations from the original:
- ETTh2.csv is not here: the 7 series are synthetic, made from ``seed``: daily (period 24) and half-daily cycles
  with channel-specific phases and amplitudes, a slow drift and AR(1) noise, 2000 hourly rows; the borders are the
  ETT ones scaled from 12/4/4 months of 720 rows to 1200/400/400 rows; pandas and sklearn are not installed:
  the rows come as an array (the ``date`` column is not made) and ``StandardScaler`` is written out (mean and
  population standard deviation of the training border); the time stamps, which Koopa never reads, are zeros of
  the ``timeenc`` 1 width (4 columns for freq ``h``);
- sizes for 2 CPU cores: seq_len 96 -> 48, label_len 48 -> 24, pred_len 48 -> 24, seg_len 48 -> 12, dynamic_dim
  64 -> 16, hidden_dim 512 -> 32, num_blocks 4 -> 2;
- CPU only, no AMP; checkpoints, early stopping, the prints and the test phase are dropped;
- one ``train_step`` is one iteration of the loop over ``train_loader`` (``adjust_learning_rate`` when an epoch
  ends, then a new shuffled epoch), returning the loss; ``eval_fn`` is ``vali`` on the validation loader;
- the Program's batch is the first training batch (the four loader tensors as floats and the decoder input, the
  last ``pred_len`` target steps), its ``loss_fn`` the criterion on the last ``pred_len`` output steps;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, RUF059, PLR0402, SIM118  (the original's style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch import optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# models/Koopa.py
class FourierFilter(nn.Module):
    """
    Fourier Filter: to time-variant and time-invariant term
    """
    def __init__(self, mask_spectrum):
        super(FourierFilter, self).__init__()
        self.mask_spectrum = mask_spectrum
        
    def forward(self, x):
        xf = torch.fft.rfft(x, dim=1)
        mask = torch.ones_like(xf)
        mask[:, self.mask_spectrum, :] = 0
        x_var = torch.fft.irfft(xf*mask, dim=1)
        x_inv = x - x_var
        
        return x_var, x_inv
    

class MLP(nn.Module):
    '''
    Multilayer perceptron to encode/decode high dimension representation of sequential data
    '''
    def __init__(self, 
                 f_in, 
                 f_out, 
                 hidden_dim=128, 
                 hidden_layers=2, 
                 dropout=0.05,
                 activation='tanh'): 
        super(MLP, self).__init__()
        self.f_in = f_in
        self.f_out = f_out
        self.hidden_dim = hidden_dim
        self.hidden_layers = hidden_layers
        self.dropout = dropout
        if activation == 'relu':
            self.activation = nn.ReLU()
        elif activation == 'tanh':
            self.activation = nn.Tanh()
        else:
            raise NotImplementedError

        layers = [nn.Linear(self.f_in, self.hidden_dim), 
                  self.activation, nn.Dropout(self.dropout)]
        for i in range(self.hidden_layers-2):
            layers += [nn.Linear(self.hidden_dim, self.hidden_dim),
                       self.activation, nn.Dropout(dropout)]
        
        layers += [nn.Linear(hidden_dim, f_out)]
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        # x:     B x S x f_in
        # y:     B x S x f_out
        y = self.layers(x)
        return y
    

class KPLayer(nn.Module):
    """
    A demonstration of finding one step transition of linear system by DMD iteratively
    """
    def __init__(self): 
        super(KPLayer, self).__init__()
        
        self.K = None # B E E

    def one_step_forward(self, z, return_rec=False, return_K=False):
        B, input_len, E = z.shape
        assert input_len > 1, 'snapshots number should be larger than 1'
        x, y = z[:, :-1], z[:, 1:]

        # solve linear system
        self.K = torch.linalg.lstsq(x, y).solution # B E E
        if torch.isnan(self.K).any():
            print('Encounter K with nan, replace K by identity matrix')
            self.K = torch.eye(self.K.shape[1]).to(self.K.device).unsqueeze(0).repeat(B, 1, 1)

        z_pred = torch.bmm(z[:, -1:], self.K)
        if return_rec:
            z_rec = torch.cat((z[:, :1], torch.bmm(x, self.K)), dim=1)
            return z_rec, z_pred

        return z_pred
    
    def forward(self, z, pred_len=1):
        assert pred_len >= 1, 'prediction length should not be less than 1'
        z_rec, z_pred= self.one_step_forward(z, return_rec=True)
        z_preds = [z_pred]
        for i in range(1, pred_len):
            z_pred = torch.bmm(z_pred, self.K)
            z_preds.append(z_pred)
        z_preds = torch.cat(z_preds, dim=1)
        return z_rec, z_preds


class KPLayerApprox(nn.Module):
    """
    Find koopman transition of linear system by DMD with multistep K approximation
    """
    def __init__(self): 
        super(KPLayerApprox, self).__init__()
        
        self.K = None # B E E
        self.K_step = None # B E E

    def forward(self, z, pred_len=1):
        # z:       B L E, koopman invariance space representation
        # z_rec:   B L E, reconstructed representation
        # z_pred:  B S E, forecasting representation
        B, input_len, E = z.shape
        assert input_len > 1, 'snapshots number should be larger than 1'
        x, y = z[:, :-1], z[:, 1:]

        # solve linear system
        self.K = torch.linalg.lstsq(x, y).solution # B E E

        if torch.isnan(self.K).any():
            print('Encounter K with nan, replace K by identity matrix')
            self.K = torch.eye(self.K.shape[1]).to(self.K.device).unsqueeze(0).repeat(B, 1, 1)

        z_rec = torch.cat((z[:, :1], torch.bmm(x, self.K)), dim=1) # B L E
        
        if pred_len <= input_len:
            self.K_step = torch.linalg.matrix_power(self.K, pred_len)
            if torch.isnan(self.K_step).any():
                print('Encounter multistep K with nan, replace it by identity matrix')
                self.K_step = torch.eye(self.K_step.shape[1]).to(self.K_step.device).unsqueeze(0).repeat(B, 1, 1)
            z_pred = torch.bmm(z[:, -pred_len:, :], self.K_step)
        else:
            self.K_step = torch.linalg.matrix_power(self.K, input_len)
            if torch.isnan(self.K_step).any():
                print('Encounter multistep K with nan, replace it by identity matrix')
                self.K_step = torch.eye(self.K_step.shape[1]).to(self.K_step.device).unsqueeze(0).repeat(B, 1, 1)
            temp_z_pred, all_pred = z, []
            for _ in range(math.ceil(pred_len / input_len)):
                temp_z_pred = torch.bmm(temp_z_pred, self.K_step)
                all_pred.append(temp_z_pred)
            z_pred = torch.cat(all_pred, dim=1)[:, :pred_len, :]

        return z_rec, z_pred
    

class TimeVarKP(nn.Module):
    """
    Koopman Predictor with DMD (analysitical solution of Koopman operator)
    Utilize local variations within individual sliding window to predict the future of time-variant term
    """
    def __init__(self,
                 enc_in=8,
                 input_len=96,
                 pred_len=96,
                 seg_len=24,
                 dynamic_dim=128,
                 encoder=None,
                 decoder=None,
                 multistep=False,
                ):
        super(TimeVarKP, self).__init__()
        self.input_len = input_len
        self.pred_len = pred_len
        self.enc_in = enc_in
        self.seg_len = seg_len
        self.dynamic_dim = dynamic_dim
        self.multistep = multistep
        self.encoder, self.decoder = encoder, decoder            
        self.freq = math.ceil(self.input_len / self.seg_len)  # segment number of input
        self.step = math.ceil(self.pred_len / self.seg_len)   # segment number of output
        self.padding_len = self.seg_len * self.freq - self.input_len
        # Approximate mulitstep K by KPLayerApprox when pred_len is large
        self.dynamics = KPLayerApprox() if self.multistep else KPLayer() 

    def forward(self, x):
        # x: B L C
        B, L, C = x.shape

        res = torch.cat((x[:, L-self.padding_len:, :], x) ,dim=1)

        res = res.chunk(self.freq, dim=1)     # F x B P C, P means seg_len
        res = torch.stack(res, dim=1).reshape(B, self.freq, -1)   # B F PC

        res = self.encoder(res) # B F H
        x_rec, x_pred = self.dynamics(res, self.step) # B F H, B S H

        x_rec = self.decoder(x_rec) # B F PC
        x_rec = x_rec.reshape(B, self.freq, self.seg_len, self.enc_in)
        x_rec = x_rec.reshape(B, -1, self.enc_in)[:, :self.input_len, :]  # B L C
        
        x_pred = self.decoder(x_pred)     # B S PC
        x_pred = x_pred.reshape(B, self.step, self.seg_len, self.enc_in)
        x_pred = x_pred.reshape(B, -1, self.enc_in)[:, :self.pred_len, :] # B S C

        return x_rec, x_pred


class TimeInvKP(nn.Module):
    """
    Koopman Predictor with learnable Koopman operator
    Utilize lookback and forecast window snapshots to predict the future of time-invariant term
    """
    def __init__(self,
                 input_len=96,
                 pred_len=96,
                 dynamic_dim=128,
                 encoder=None,
                 decoder=None):
        super(TimeInvKP, self).__init__()
        self.dynamic_dim = dynamic_dim
        self.input_len = input_len
        self.pred_len = pred_len
        self.encoder = encoder
        self.decoder = decoder

        K_init = torch.randn(self.dynamic_dim, self.dynamic_dim)
        U, _, V = torch.svd(K_init) # stable initialization
        self.K = nn.Linear(self.dynamic_dim, self.dynamic_dim, bias=False)
        self.K.weight.data = torch.mm(U, V.t())
    
    def forward(self, x):
        # x: B L C
        res = x.transpose(1, 2) # B C L
        res = self.encoder(res) # B C H
        res = self.K(res) # B C H
        res = self.decoder(res) # B C S
        res = res.transpose(1, 2) # B S C

        return res


class Model(nn.Module):
    '''
    Koopman Forecasting Model
    '''
    def __init__(self, configs):
        super(Model, self).__init__()
        self.mask_spectrum = configs.mask_spectrum
        self.enc_in = configs.enc_in
        self.input_len = configs.seq_len
        self.pred_len = configs.pred_len
        self.seg_len = configs.seg_len
        self.num_blocks = configs.num_blocks
        self.dynamic_dim = configs.dynamic_dim
        self.hidden_dim = configs.hidden_dim
        self.hidden_layers = configs.hidden_layers
        self.multistep = configs.multistep

        self.disentanglement = FourierFilter(self.mask_spectrum)

        # shared encoder/decoder to make koopman embedding consistent
        self.time_inv_encoder = MLP(f_in=self.input_len, f_out=self.dynamic_dim, activation='relu',
                    hidden_dim=self.hidden_dim, hidden_layers=self.hidden_layers)
        self.time_inv_decoder = MLP(f_in=self.dynamic_dim, f_out=self.pred_len, activation='relu',
                           hidden_dim=self.hidden_dim, hidden_layers=self.hidden_layers)
        self.time_inv_kps = self.time_var_kps = nn.ModuleList([
                                TimeInvKP(input_len=self.input_len,
                                    pred_len=self.pred_len, 
                                    dynamic_dim=self.dynamic_dim,
                                    encoder=self.time_inv_encoder, 
                                    decoder=self.time_inv_decoder)
                                for _ in range(self.num_blocks)])

        # shared encoder/decoder to make koopman embedding consistent
        self.time_var_encoder = MLP(f_in=self.seg_len*self.enc_in, f_out=self.dynamic_dim, activation='tanh',
                           hidden_dim=self.hidden_dim, hidden_layers=self.hidden_layers)
        self.time_var_decoder = MLP(f_in=self.dynamic_dim, f_out=self.seg_len*self.enc_in, activation='tanh',
                           hidden_dim=self.hidden_dim, hidden_layers=self.hidden_layers)
        self.time_var_kps = nn.ModuleList([
                    TimeVarKP(enc_in=configs.enc_in,
                        input_len=self.input_len,
                        pred_len=self.pred_len,
                        seg_len=self.seg_len,
                        dynamic_dim=self.dynamic_dim,
                        encoder=self.time_var_encoder,
                        decoder=self.time_var_decoder,
                        multistep=self.multistep)
                    for _ in range(self.num_blocks)])
    
    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec):
        # x_enc: B L C

        # Series Stationarization adopted from NSformer
        mean_enc = x_enc.mean(1, keepdim=True).detach() # B x 1 x E
        x_enc = x_enc - mean_enc
        std_enc = torch.sqrt(torch.var(x_enc, dim=1, keepdim=True, unbiased=False) + 1e-5).detach()
        x_enc = x_enc / std_enc

        # Koopman Forecasting
        residual, forecast = x_enc, None
        for i in range(self.num_blocks):
            time_var_input, time_inv_input = self.disentanglement(residual)
            time_inv_output = self.time_inv_kps[i](time_inv_input)
            time_var_backcast, time_var_output = self.time_var_kps[i](time_var_input)
            residual = residual - time_var_backcast
            if forecast is None:
                forecast = (time_inv_output + time_var_output)
            else:
                forecast += (time_inv_output + time_var_output)

        # Series Stationarization adopted from NSformer
        if getattr(self, 'bug', None) == "destationarization_dropped":
            res = forecast
        else:
            res = forecast * std_enc + mean_enc

        return res


class args:  # (port) run.py's defaults with scripts/ETT_script/Koopa.sh, sizes as listed in the docstring
    model = 'Koopa'
    features = 'M'
    target = 'OT'
    freq = 'h'
    embed = 'timeF'
    seq_len = 48  # (port) 96
    label_len = 24  # (port) 48
    pred_len = 24  # (port) 48
    enc_in = 7
    dec_in = 7
    c_out = 7
    batch_size = 32
    learning_rate = 0.001
    lradj = 'type1'
    use_amp = False
    dynamic_dim = 16  # (port) 64
    hidden_dim = 32  # (port) 512
    hidden_layers = 2
    seg_len = 12  # (port) 48
    num_blocks = 2  # (port) 4
    alpha = 0.2
    multistep = False


# utils/tools.py
def adjust_learning_rate(optimizer, epoch, args):
    # lr = args.learning_rate * (0.2 ** (epoch // 2))
    if args.lradj == 'type1':
        lr_adjust = {epoch: args.learning_rate * (0.5 ** ((epoch - 1) // 1))}
    elif args.lradj == 'type2':
        lr_adjust = {
            2: 5e-5, 4: 1e-5, 6: 5e-6, 8: 1e-6,
            10: 5e-7, 15: 1e-7, 20: 5e-8
        }
    if epoch in lr_adjust.keys():
        lr = lr_adjust[epoch]
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr


class StandardScaler:  # (port) sklearn.preprocessing.StandardScaler, written out
    def fit(self, data):
        self.mean_ = data.mean(0)
        self.scale_ = data.std(0)

    def transform(self, data):
        return (data - self.mean_) / self.scale_

    def inverse_transform(self, data):
        return data * self.scale_ + self.mean_


# data_provider/data_loader.py
class Dataset_ETT_hour(Dataset):
    def __init__(self, raw, flag='train', size=None,
                 features='S', target='OT', scale=True, timeenc=0, freq='h'):
        # size [seq_len, label_len, pred_len]
        # info
        if size == None:
            self.seq_len = 24 * 4 * 4
            self.label_len = 24 * 4
            self.pred_len = 24 * 4
        else:
            self.seq_len = size[0]
            self.label_len = size[1]
            self.pred_len = size[2]
        # init
        assert flag in ['train', 'test', 'val']
        type_map = {'train': 0, 'val': 1, 'test': 2}
        self.set_type = type_map[flag]

        self.features = features
        self.target = target
        self.scale = scale
        self.timeenc = timeenc
        self.freq = freq

        self.raw = raw  # (port) the synthetic rows instead of root_path / data_path
        self.__read_data__()

    def __read_data__(self):
        self.scaler = StandardScaler()
        df_data = self.raw  # (port) df_raw[df_raw.columns[1:]] for features M

        border1s = [0, 1200 - self.seq_len, 1200 + 400 - self.seq_len]  # (port) 12 * 30 * 24, 4 * 30 * 24
        border2s = [1200, 1200 + 400, 1200 + 800]
        border1 = border1s[self.set_type]
        border2 = border2s[self.set_type]

        if self.scale:
            train_data = df_data[border1s[0]:border2s[0]]
            self.scaler.fit(train_data)
            data = self.scaler.transform(df_data)
        else:
            data = df_data

        data_stamp = np.zeros((border2 - border1, 4))  # (port) time_features, unused by Koopa

        self.data_x = data[border1:border2]
        self.data_y = data[border1:border2]
        self.data_stamp = data_stamp

    def __getitem__(self, index):
        s_begin = index
        s_end = s_begin + self.seq_len
        r_begin = s_end - self.label_len
        r_end = r_begin + self.label_len + self.pred_len

        seq_x = self.data_x[s_begin:s_end]
        seq_y = self.data_y[r_begin:r_end]
        seq_x_mark = self.data_stamp[s_begin:s_end]
        seq_y_mark = self.data_stamp[r_begin:r_end]

        return seq_x, seq_y, seq_x_mark, seq_y_mark

    def __len__(self):
        return len(self.data_x) - self.seq_len - self.pred_len + 1


def _series(rng, n=2000, c=7):  # (port) the stand-in for ETTh2.csv
    t = np.arange(n)[:, None]
    phase = rng.uniform(0, 2 * np.pi, size=(1, c))
    amp = rng.uniform(0.5, 2.0, size=(1, c))
    x = amp * np.sin(2 * np.pi * t / 24 + phase) + 0.5 * amp * np.sin(2 * np.pi * t / 12 + 2 * phase)
    x = x + 0.002 * t * rng.uniform(-1, 1, size=(1, c))
    noise = np.zeros((n, c))
    for i in range(1, n):
        noise[i] = 0.7 * noise[i - 1] + 0.2 * rng.standard_normal(c)
    return (x + noise).astype(np.float64)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)
    raw = _series(rng)
    device = torch.device('cpu')
    gen = torch.Generator().manual_seed(seed)

    def _get_data(flag):  # data_provider/data_factory.py
        timeenc = 0 if args.embed != 'timeF' else 1
        data_set = Dataset_ETT_hour(raw, flag=flag, size=[args.seq_len, args.label_len, args.pred_len],
                                    features=args.features, target=args.target, timeenc=timeenc, freq=args.freq)
        data_loader = DataLoader(data_set, batch_size=args.batch_size, shuffle=True, num_workers=0, drop_last=True,
                                 generator=gen)
        return data_set, data_loader

    def _get_mask_spectrum():
        """
        get shared frequency spectrums
        """
        train_data, train_loader = _get_data(flag='train')
        amps = 0.0
        for data in train_loader:
            lookback_window = data[0]
            amps += abs(torch.fft.rfft(lookback_window, dim=1)).mean(dim=0).mean(dim=1)

        mask_spectrum = amps.topk(int(amps.shape[0]*args.alpha)).indices
        return mask_spectrum # as the spectrums of time-invariant component

    args.mask_spectrum = _get_mask_spectrum()
    model = Model(args).float()
    model.bug = bug

    train_data, train_loader = _get_data(flag='train')
    vali_data, vali_loader = _get_data(flag='val')
    model_optim = optim.Adam(model.parameters(), lr=args.learning_rate)
    criterion = nn.MSELoss()
    st = {"it": iter(train_loader), "epoch": 0}

    def train_step():
        model.train()
        try:
            batch_x, batch_y, batch_x_mark, batch_y_mark = next(st["it"])
        except StopIteration:
            st["epoch"] += 1
            adjust_learning_rate(model_optim, st["epoch"] + 1, args)
            st["it"] = iter(train_loader)
            batch_x, batch_y, batch_x_mark, batch_y_mark = next(st["it"])
        if bug != "zero_grad_dropped":
            model_optim.zero_grad()
        batch_x = batch_x.float().to(device)

        batch_y = batch_y.float().to(device)
        batch_x_mark = batch_x_mark.float().to(device)
        batch_y_mark = batch_y_mark.float().to(device)

        # decoder input
        dec_inp = torch.zeros_like(batch_y[:, -args.pred_len:, :]).float()
        dec_inp = torch.cat([batch_y[:, :args.label_len, :], dec_inp], dim=1).float().to(device)

        outputs = model(batch_x, batch_x_mark, dec_inp, batch_y_mark)

        f_dim = -1 if args.features == 'MS' else 0
        outputs = outputs[:, -args.pred_len:, f_dim:]
        if bug == "target_window_from_start":
            batch_y = batch_y[:, :args.pred_len, f_dim:].to(device)
        else:
            batch_y = batch_y[:, -args.pred_len:, f_dim:].to(device)
        loss = criterion(outputs, batch_y)

        loss.backward()
        model_optim.step()
        return loss.item()

    def eval_fn(m, _batch=None):
        total_loss = []
        was = m.training
        m.eval()
        with torch.no_grad():
            for i, (batch_x, batch_y, batch_x_mark, batch_y_mark) in enumerate(vali_loader):
                batch_x = batch_x.float().to(device)
                batch_y = batch_y.float()

                batch_x_mark = batch_x_mark.float().to(device)
                batch_y_mark = batch_y_mark.float().to(device)

                # decoder input
                dec_inp = torch.zeros_like(batch_y[:, -args.pred_len:, :]).float()
                dec_inp = torch.cat([batch_y[:, :args.label_len, :], dec_inp], dim=1).float().to(device)
                outputs = m(batch_x, batch_x_mark, dec_inp, batch_y_mark)
                f_dim = -1 if args.features == 'MS' else 0
                outputs = outputs[:, -args.pred_len:, f_dim:]
                batch_y = batch_y[:, -args.pred_len:, f_dim:].to(device)

                pred = outputs.detach().cpu()
                true = batch_y.detach().cpu()

                loss = criterion(pred, true)

                total_loss.append(loss)
        total_loss = np.average(total_loss)
        m.train(was)
        return float(total_loss)

    items = [train_data[i] for i in range(args.batch_size)]
    bx, by, bxm, bym = (torch.from_numpy(np.stack([it[k] for it in items])).float() for k in range(4))
    dec_inp = torch.cat([by[:, :args.label_len, :], torch.zeros_like(by[:, -args.pred_len:, :])], dim=1)
    target = by[:, :args.pred_len] if bug == "target_window_from_start" else by[:, -args.pred_len:]

    def loss_fn(outputs, batch_y):
        return criterion(outputs[:, -args.pred_len:, 0:], batch_y)

    return Program(name="koopa_etth", model=model, batch=((bx, bxm, dec_inp, bym), target), loss_fn=loss_fn,
                   optimizer=model_optim, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the target window taken from the start of batch_y (the label_len known steps) instead of its last
    # pred_len steps, so the forecast is scored against the lookback's tail.
    Bug("target_window_from_start", functools.partial(_build, bug="target_window_from_start"), "learning_ledger",
        ("TASK",)),
    # classic: the forecast returned without the de-stationarization (forecast * std_enc + mean_enc dropped), so the
    # model's normalized output is compared with targets in the data's scale.
    Bug("destationarization_dropped", functools.partial(_build, bug="destationarization_dropped"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: model_optim.zero_grad() left out of the loop: gradients pile up across batches.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
