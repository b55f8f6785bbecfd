"""DeepAR (autoregressive LSTM over the lagged, scaled target plus time covariates and a per-series embedding, a
Gaussian head with softplus sigma, negative log-likelihood summed over the training window with missing targets
ignored) trained by the repository's ``train.py``: windows from ``preprocess_elect.py``'s ``prep_data`` (lagged input
z_{t-1}, covariates age/weekday/hour/month z-scored, scale v = mean of the non-zero inputs + 1), ``WeightedSampler``
by scale, missing inputs replaced by the previous step's mu, Adam lr 1e-3.

Source: https://github.com/zhykoties/TimeSeries
Commit: b12b13c8250a096e38882d258213abd6c2d78c43
Files: train.py, model/net.py, dataloader.py, preprocess_elect.py, utils.py, experiments/base_model/params.json
License: Apache-2.0
Domain: time series forecasting (DeepAR, probabilistic autoregressive RNN)

Deviations from the original:
- sizes (params.json): batch_size 64 -> 16, lstm_hidden_dim 40 -> 16, embedding_dim 20 -> 4, num_class 370 -> 8
  series, train_window 192 -> 48 (``prep_data``'s window_size 192 -> 48, stride_size 24 -> 12); lstm_layers 3,
  cov_dim 4, lstm_dropout 0.1, learning_rate 1e-3 unchanged;
- data: the UCI electricity download (LD2011_2014.txt) is replaced by 8 synthetic hourly series made from ``seed``
  (20 days: a per-series level, daily and weekly cycles, noise; some series start late with leading zeros and 5% of
  the readings are zero as gaps, as in the real data); ``gen_covariates`` and ``prep_data`` (train part) are copied
  and fill in-memory arrays instead of .npy files; ``TrainDataset`` and ``WeightedSampler`` read those arrays;
- ``utils.Params`` is built from the dict of params.json values (no file); ``device`` is the CPU; logging, tqdm,
  checkpoints and plots are left out; ``num_workers`` 4 -> 0;
- the test set, ``evaluate.py`` and its metrics are left out: ``eval_fn`` is the training loss (per time step) on a
  fixed batch of held-back windows in eval mode;
- the bug variant in ``loss_fn`` reaches it through a module-level switch ``_BUG`` set by ``build``;
- one ``train_step`` is one iteration of ``train``'s ``for i, (train_batch, idx, labels_batch)`` loop; the declared
  model is ``Net`` with one time step's inputs ``(x_t, idx, hidden, cell)`` as the batch and ``loss_fn`` applied to
  its ``mu``, ``sigma`` against ``z_t`` (given as ``[1, B]``, batch on axis 1 like every input), as the loop
  applies it at each step.
"""
# ruff: noqa: UP008, PLR0402, RUF059, F821  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from datetime import datetime, timedelta

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from scipy import stats
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

_BUG = [None]

# ---- model/net.py -------------------------------------------------------------------------------------------------

class Net(nn.Module):
    def __init__(self, params):
        '''
        We define a recurrent network that predicts the future values of a time-dependent variable based on
        past inputs and covariates.
        '''
        super(Net, self).__init__()
        self.params = params
        self.embedding = nn.Embedding(params.num_class, params.embedding_dim)

        self.lstm = nn.LSTM(input_size=1+params.cov_dim+params.embedding_dim,
                            hidden_size=params.lstm_hidden_dim,
                            num_layers=params.lstm_layers,
                            bias=True,
                            batch_first=False,
                            dropout=params.lstm_dropout)
        '''self.lstm = nn.LSTM(input_size=1 + params.cov_dim,
                            hidden_size=params.lstm_hidden_dim,
                            num_layers=params.lstm_layers,
                            bias=True,
                            batch_first=False,
                            dropout=params.lstm_dropout)'''
        # initialize LSTM forget gate bias to be 1 as recommanded by http://proceedings.mlr.press/v37/jozefowicz15.pdf
        for names in self.lstm._all_weights:
            for name in filter(lambda n: "bias" in n, names):
                bias = getattr(self.lstm, name)
                n = bias.size(0)
                start, end = n // 4, n // 2
                bias.data[start:end].fill_(1.)

        self.relu = nn.ReLU()
        self.distribution_mu = nn.Linear(params.lstm_hidden_dim * params.lstm_layers, 1)
        self.distribution_presigma = nn.Linear(params.lstm_hidden_dim * params.lstm_layers, 1)
        self.distribution_sigma = nn.Softplus()

    def forward(self, x, idx, hidden, cell):
        '''
        Predict mu and sigma of the distribution for z_t.
        Args:
            x: ([1, batch_size, 1+cov_dim]): z_{t-1} + x_t, note that z_0 = 0
            idx ([1, batch_size]): one integer denoting the time series id
            hidden ([lstm_layers, batch_size, lstm_hidden_dim]): LSTM h from time step t-1
            cell ([lstm_layers, batch_size, lstm_hidden_dim]): LSTM c from time step t-1
        Returns:
            mu ([batch_size]): estimated mean of z_t
            sigma ([batch_size]): estimated standard deviation of z_t
            hidden ([lstm_layers, batch_size, lstm_hidden_dim]): LSTM h from time step t
            cell ([lstm_layers, batch_size, lstm_hidden_dim]): LSTM c from time step t
        '''
        onehot_embed = self.embedding(idx) #TODO: is it possible to do this only once per window instead of per step?
        lstm_input = torch.cat((x, onehot_embed), dim=2)
        output, (hidden, cell) = self.lstm(lstm_input, (hidden, cell))
        # use h from all three layers to calculate mu and sigma
        hidden_permute = hidden.permute(1, 2, 0).contiguous().view(hidden.shape[1], -1)
        pre_sigma = self.distribution_presigma(hidden_permute)
        mu = self.distribution_mu(hidden_permute)
        sigma = self.distribution_sigma(pre_sigma)  # softplus to make sure standard deviation is positive
        return torch.squeeze(mu), torch.squeeze(sigma), hidden, cell

    def init_hidden(self, input_size):
        return torch.zeros(self.params.lstm_layers, input_size, self.params.lstm_hidden_dim, device=self.params.device)

    def init_cell(self, input_size):
        return torch.zeros(self.params.lstm_layers, input_size, self.params.lstm_hidden_dim, device=self.params.device)

    def test(self, x, v_batch, id_batch, hidden, cell, sampling=False):
        batch_size = x.shape[1]
        if sampling:
            samples = torch.zeros(self.params.sample_times, batch_size, self.params.predict_steps,
                                       device=self.params.device)
            for j in range(self.params.sample_times):
                decoder_hidden = hidden
                decoder_cell = cell
                for t in range(self.params.predict_steps):
                    mu_de, sigma_de, decoder_hidden, decoder_cell = self(x[self.params.predict_start + t].unsqueeze(0),
                                                                         id_batch, decoder_hidden, decoder_cell)
                    gaussian = torch.distributions.normal.Normal(mu_de, sigma_de)
                    pred = gaussian.sample()  # not scaled
                    samples[j, :, t] = pred * v_batch[:, 0] + v_batch[:, 1]
                    if t < (self.params.predict_steps - 1):
                        x[self.params.predict_start + t + 1, :, 0] = pred

            sample_mu = torch.median(samples, dim=0)[0]
            sample_sigma = samples.std(dim=0)
            return samples, sample_mu, sample_sigma

        else:
            decoder_hidden = hidden
            decoder_cell = cell
            sample_mu = torch.zeros(batch_size, self.params.predict_steps, device=self.params.device)
            sample_sigma = torch.zeros(batch_size, self.params.predict_steps, device=self.params.device)
            for t in range(self.params.predict_steps):
                mu_de, sigma_de, decoder_hidden, decoder_cell = self(x[self.params.predict_start + t].unsqueeze(0),
                                                                     id_batch, decoder_hidden, decoder_cell)
                sample_mu[:, t] = mu_de * v_batch[:, 0] + v_batch[:, 1]
                sample_sigma[:, t] = sigma_de * v_batch[:, 0]
                if t < (self.params.predict_steps - 1):
                    x[self.params.predict_start + t + 1, :, 0] = mu_de
            return sample_mu, sample_sigma


def loss_fn(mu: Tensor, sigma: Tensor, labels: Tensor):
    '''
    Compute using gaussian the log-likehood which needs to be maximized. Ignore time steps where labels are missing.
    Args:
        mu: (Variable) dimension [batch_size] - estimated mean at time step t
        sigma: (Variable) dimension [batch_size] - estimated standard deviation at time step t
        labels: (Variable) dimension [batch_size] z_t
    Returns:
        loss: (Variable) average log-likelihood loss across the batch
    '''
    if _BUG[0] == "missing_not_masked":
        zero_index = torch.ones_like(labels, dtype=torch.bool)
    else:
        zero_index = (labels != 0)
    distribution = torch.distributions.normal.Normal(mu[zero_index], sigma[zero_index])
    likelihood = distribution.log_prob(labels[zero_index])
    return -torch.mean(likelihood)


# ---- preprocess_elect.py (in memory) -------------------------------------------------------------------------------

window_size = 48
stride_size = 12
num_covariates = 4


def prep_data(data, covariates, data_start, num_series, total_time, train=True, bug=None):
    time_len = data.shape[0]
    input_size = window_size-stride_size
    windows_per_series = np.full((num_series), (time_len-input_size) // stride_size)
    if train: windows_per_series -= (data_start+stride_size-1) // stride_size
    total_windows = np.sum(windows_per_series)
    x_input = np.zeros((total_windows, window_size, 1 + num_covariates + 1), dtype='float32')
    label = np.zeros((total_windows, window_size), dtype='float32')
    v_input = np.zeros((total_windows, 2), dtype='float32')
    count = 0
    if not train:
        covariates = covariates[-time_len:]
    for series in range(num_series):
        cov_age = stats.zscore(np.arange(total_time-data_start[series]))
        if train:
            covariates[data_start[series]:time_len, 0] = cov_age[:time_len-data_start[series]]
        else:
            covariates[:, 0] = cov_age[-time_len:]
        for i in range(windows_per_series[series]):
            if train:
                window_start = stride_size*i+data_start[series]
            else:
                window_start = stride_size*i
            window_end = window_start+window_size
            if bug == "input_not_lagged":
                # the input column filled from the same steps as the label (classic: z_t fed to predict z_t)
                x_input[count, :, 0] = data[window_start:window_end, series]
            else:
                x_input[count, 1:, 0] = data[window_start:window_end-1, series]
            x_input[count, :, 1:1+num_covariates] = covariates[window_start:window_end, :]
            x_input[count, :, -1] = series
            label[count, :] = data[window_start:window_end, series]
            nonzero_sum = (x_input[count, 1:input_size, 0]!=0).sum()
            if nonzero_sum == 0:
                v_input[count, 0] = 0
            else:
                v_input[count, 0] = np.true_divide(x_input[count, 1:input_size, 0].sum(),nonzero_sum)+1
                x_input[count, :, 0] = x_input[count, :, 0]/v_input[count, 0]
                if train:
                    label[count, :] = label[count, :]/v_input[count, 0]
            count += 1
    return x_input, v_input, label


def gen_covariates(times, num_covariates):
    covariates = np.zeros((times.shape[0], num_covariates))
    for i, input_time in enumerate(times):
        covariates[i, 1] = input_time.weekday()
        covariates[i, 2] = input_time.hour
        covariates[i, 3] = input_time.month
    for i in range(1,num_covariates):
        covariates[:,i] = stats.zscore(covariates[:,i])
    return covariates[:, :num_covariates]


def make_series(seed, num_series=8, days=20):
    """Synthetic hourly load (replaces LD2011_2014.txt): level x daily and weekly cycles, late starts, gaps."""
    rng = np.random.RandomState(seed)
    hours = np.arange(days * 24)
    times = np.array([datetime(2014, 6, 20) + timedelta(hours=int(h)) for h in hours])
    level = rng.uniform(5, 50, num_series)
    daily = 1 + 0.5 * np.sin(2 * np.pi * (hours[:, None] - rng.uniform(0, 24, num_series)) / 24)
    weekly = 1 + 0.2 * (np.array([t.weekday() for t in times])[:, None] >= 5)
    data = level * daily * weekly * (1 + 0.05 * rng.randn(len(hours), num_series))
    data[rng.rand(*data.shape) < 0.05] = 0
    for series in range(num_series):
        data[:rng.choice([0, 0, 24, 48, 72]), series] = 0
    return times, data.astype('float32')


# ---- dataloader.py --------------------------------------------------------------------------------------------------

class TrainDataset(Dataset):
    def __init__(self, data, label):
        self.data = data
        self.label = label
        self.train_len = self.data.shape[0]

    def __len__(self):
        return self.train_len

    def __getitem__(self, index):
        return (self.data[index,:,:-1],int(self.data[index,0,-1]), self.label[index])


class WeightedSampler(Sampler):
    def __init__(self, v, replacement=True):
        self.weights = torch.as_tensor(np.abs(v[:,0])/np.sum(np.abs(v[:,0])), dtype=torch.double)
        self.num_samples = self.weights.shape[0]
        self.replacement = replacement

    def __iter__(self):
        return iter(torch.multinomial(self.weights, self.num_samples, self.replacement).tolist())

    def __len__(self):
        return self.num_samples


# ---- train.py -------------------------------------------------------------------------------------------------------

class Params:
    def __init__(self, params):
        self.__dict__.update(params)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    params = Params({
        "learning_rate": 1e-3,
        "batch_size": 16,
        "lstm_layers": 3,
        "num_epochs": 20,
        "train_window": 48,
        "num_class": 8,
        "cov_dim": 4,
        "lstm_hidden_dim": 16,
        "embedding_dim": 4,
        "lstm_dropout": 0.1,
    })
    params.device = torch.device('cpu')
    model = Net(params)

    times, series = make_series(seed)
    covariates = gen_covariates(times, num_covariates)
    data_start = (series!=0).argmax(axis=0) #find first nonzero value in each time series
    total_time, num_series = series.shape
    x_input, v_input, label = prep_data(series, covariates, data_start, num_series, total_time, bug=bug)
    held = np.random.RandomState(seed + 1).choice(len(x_input), size=16, replace=False)

    train_set = TrainDataset(x_input, label)
    sampler = WeightedSampler(v_input) # Use weighted sampler instead of random sampler
    train_loader = DataLoader(train_set, batch_size=params.batch_size, sampler=sampler, num_workers=0)

    optimizer = optim.Adam(model.parameters(), lr=params.learning_rate)

    # fetch loss function
    loss_fn_ = loss_fn

    def epochs():
        while True:
            model.train()
            for i, (train_batch, idx, labels_batch) in enumerate(train_loader):
                if bug != "no_zero_grad":
                    optimizer.zero_grad()
                batch_size = train_batch.shape[0]

                train_batch = train_batch.permute(1, 0, 2).to(torch.float32).to(params.device)  # not scaled
                labels_batch = labels_batch.permute(1, 0).to(torch.float32).to(params.device)  # not scaled
                idx = idx.unsqueeze(0).to(params.device)

                loss = torch.zeros(1, device=params.device)
                hidden = model.init_hidden(batch_size)
                cell = model.init_cell(batch_size)

                for t in range(params.train_window):
                    # if z_t is missing, replace it by output mu from the last time step
                    zero_index = (train_batch[t, :, 0] == 0)
                    if t > 0 and torch.sum(zero_index) > 0:
                        train_batch[t, zero_index, 0] = mu[zero_index]
                    mu, sigma, hidden, cell = model(train_batch[t].unsqueeze_(0).clone(), idx, hidden, cell)
                    loss += loss_fn_(mu, sigma, labels_batch[t])

                loss.backward()
                optimizer.step()
                yield loss.detach()[0] / params.train_window  # loss per timestep

    loop = epochs()

    def train_step():
        _BUG[0] = bug
        try:
            return next(loop)
        finally:
            _BUG[0] = None

    def eval_fn(model, batch):
        _BUG[0] = bug
        try:
            model.eval()
            with torch.no_grad():
                xb = torch.as_tensor(x_input[held, :, :-1]).permute(1, 0, 2).clone()
                idx = torch.as_tensor(x_input[held, 0, -1]).long().unsqueeze(0)
                yb = torch.as_tensor(label[held]).permute(1, 0)
                hidden, cell = model.init_hidden(len(held)), model.init_cell(len(held))
                total = 0.0
                for t in range(params.train_window):
                    zero_index = (xb[t, :, 0] == 0)
                    if t > 0 and torch.sum(zero_index) > 0:
                        xb[t, zero_index, 0] = mu[zero_index]
                    mu, sigma, hidden, cell = model(xb[t].unsqueeze(0).clone(), idx, hidden, cell)
                    total += float(loss_fn_(mu, sigma, yb[t]))
            return total / params.train_window
        finally:
            _BUG[0] = None

    def program_loss(outputs, labels_t):
        _BUG[0] = bug
        try:
            return loss_fn_(outputs[0], outputs[1], labels_t[0])
        finally:
            _BUG[0] = None

    # one time step of the first batch, sequence-first as the loop feeds it (batch on axis 1): z_{t-1} + x_t
    # [1, B, 1+cov], the series ids [1, B], the zero state [layers, B, H]; target z_t as [1, B]
    b = x_input[:params.batch_size]
    x_t = torch.as_tensor(b[:, 1, :-1]).unsqueeze(0)
    idx0 = torch.as_tensor(b[:, 0, -1]).long().unsqueeze(0)
    batch = ((x_t, idx0, model.init_hidden(len(b)), model.init_cell(len(b))), torch.as_tensor(label[:params.batch_size, 1]).unsqueeze(0))
    return Program(name="deepar_elect", model=model, batch=batch, loss_fn=program_loss, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader, batch_axis=1)


build = functools.partial(_build)

BUGS = [
    # the likelihood taken over every step, missing readings (zeros) included (classic: the mask not reaching the
    # loss); the original keeps only labels != 0.
    Bug("missing_not_masked", functools.partial(_build, bug="missing_not_masked"), "learning_ledger", ("OBJECTIVE",)),
    # the input column filled from the label's own steps instead of shifted by one (classic target leak): z_t is
    # given as input to predict z_t.
    Bug("input_not_lagged", functools.partial(_build, bug="input_not_lagged"), "learning_ledger", ("TASK",)),
    # optimizer.zero_grad() dropped from train (classic): gradients accumulate across batches.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (), kind="step.grad_accumulation"),
]
