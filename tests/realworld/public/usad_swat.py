# ruff: noqa: PLR0402, UP034
"""USAD (Audibert et al., KDD 2020): unsupervised anomaly detection on multivariate time series with two
autoencoders that share one encoder and are trained adversarially. Sliding windows of min-max-scaled sensor readings
are flattened; AE1 = decoder1(encoder(w)) and AE2 = decoder2(encoder(w)); each batch takes an Adam step of AE1 on
``1/n * |w - AE1(w)|^2 + (1 - 1/n) * |w - AE2(AE1(w))|^2`` and then an Adam step of AE2 on
``1/n * |w - AE2(w)|^2 - (1 - 1/n) * |w - AE2(AE1(w))|^2`` (``n`` the epoch number); the anomaly score of a window
mixes the two reconstruction errors.

Source: https://github.com/manigalati/usad
Commit: e25af45c8e1c32783aed94fc7e5ab85effef2b1a
Files: ``usad.py`` (``Encoder``, ``Decoder``, ``UsadModel``, ``evaluate``, ``training``, ``testing``), ``utils.py``
(``to_device``, ``ROC``), ``USAD.ipynb`` (the SWaT pipeline: min-max scaling fitted on the normal period, windows of
12, 80/20 train/validation split, hidden_size 100, ``training(N_EPOCHS, model, train_loader, val_loader)``,
``testing`` and the window labels)
License: BSD-3-Clause (Copyright (c) 2020, EURECOM; full text in LICENSES/manigalati-usad.txt)
Domain: time series, anomaly detection (adversarially trained twin autoencoders on sliding windows)

Kept as written: ``Encoder`` / ``Decoder`` (in -> in/2 -> in/4 -> latent with ReLU, the latent also ReLU'd; the
decoders end in a sigmoid), ``UsadModel.training_step`` / ``validation_step`` / ``validation_epoch_end``,
``training``'s loop body (``optimizer1`` = Adam over encoder + decoder1 and ``optimizer2`` = Adam over encoder +
decoder2 at the default lr; for every batch: losses, ``loss1.backward()``, ``optimizer1.step()``,
``optimizer1.zero_grad()``, losses recomputed, ``loss2.backward()``, ``optimizer2.step()``, ``optimizer2.zero_grad()``;
``n = epoch + 1``; ``evaluate`` on the validation loader at the end of an epoch), ``testing`` (alpha = beta = 0.5),
the notebook's windowing by fancy indexing, the 80/20 split without shuffling, ``hidden_size`` 100 and
``z_size = window_size * hidden_size``, a window labelled anomalous if any of its steps is.
As written, gradients cross between the two optimizers: ``loss1.backward()`` also fills decoder2's gradient, which
``optimizer2.step()`` then uses, and ``loss2.backward()`` fills decoder1's, which the next ``optimizer1.step()`` uses
(the zero_grad of each optimizer clears only its own parameters). This is kept.

Deviations from the original:
- SWaT (downloaded from Google Drive) is not here: ``_synthetic_swat`` makes 8 sensor / actuator channels from
  ``seed`` (sinusoids of random period and phase, square-wave actuators following them, a slow drift, noise): a normal
  period of 640 steps and an attack period of 480 steps in which 6 segments are perturbed (a sensor stuck, an
  offset, an actuator flipped); the labels mark the perturbed steps. The min-max scaling of
  ``sklearn.preprocessing.MinMaxScaler`` is written out (fit on the normal period); ``ROC``'s ``roc_auc_score`` is
  written out as the rank statistic (the plotting is dropped);
- sizes for 2 CPU cores: 51 channels -> 8 (w_size 96, z_size 1200), BATCH_SIZE 7919 -> 32; the train loader
  shuffles nothing, as in the notebook;
- ``get_default_device`` is CPU; ``training``'s epoch loop is unrolled: one ``train_step`` is one batch of it
  (``evaluate`` and ``epoch_end``'s print at the end of an epoch are dropped, the returned history is not kept);
  it returns AE1's ``loss1``;
- ``UsadModel`` has no ``forward`` (its objective is ``training_step``), so the declared model is ``UsadView``, a
  module holding the same ``UsadModel`` whose forward returns AE1's reconstructions ``(w1, w3)``; ``loss_fn`` is
  ``loss1`` at the current epoch number; ``optimizer1`` is declared; ``eval_fn`` runs ``testing`` on the attack
  windows and returns the ROC AUC of the scores against the window labels;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.utils.data as data_utils

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_CHANNELS, N_NORMAL, N_ATTACK = 8, 640, 480  # (port) synthetic SWaT
SELF_CHECK_STEPS = 150
device = torch.device("cpu")  # (port) get_default_device()


def to_device(data, device):
    """Move tensor(s) to chosen device"""
    if isinstance(data, (list,tuple)):
        return [to_device(x, device) for x in data]
    return data.to(device, non_blocking=True)


# usad.py
class Encoder(nn.Module):
  def __init__(self, in_size, latent_size):
    super().__init__()
    self.linear1 = nn.Linear(in_size, int(in_size/2))
    self.linear2 = nn.Linear(int(in_size/2), int(in_size/4))
    self.linear3 = nn.Linear(int(in_size/4), latent_size)
    self.relu = nn.ReLU(True)

  def forward(self, w):
    out = self.linear1(w)
    out = self.relu(out)
    out = self.linear2(out)
    out = self.relu(out)
    out = self.linear3(out)
    z = self.relu(out)
    return z

class Decoder(nn.Module):
  def __init__(self, latent_size, out_size):
    super().__init__()
    self.linear1 = nn.Linear(latent_size, int(out_size/4))
    self.linear2 = nn.Linear(int(out_size/4), int(out_size/2))
    self.linear3 = nn.Linear(int(out_size/2), out_size)
    self.relu = nn.ReLU(True)
    self.sigmoid = nn.Sigmoid()

  def forward(self, z):
    out = self.linear1(z)
    out = self.relu(out)
    out = self.linear2(out)
    out = self.relu(out)
    out = self.linear3(out)
    w = self.sigmoid(out)
    return w

class UsadModel(nn.Module):
  def __init__(self, w_size, z_size, bug=None):
    super().__init__()
    self.bug = bug
    self.encoder = Encoder(w_size, z_size)
    self.decoder1 = Decoder(z_size, w_size)
    self.decoder2 = Decoder(z_size, w_size)

  def training_step(self, batch, n):
    z = self.encoder(batch)
    w1 = self.decoder1(z)
    w2 = self.decoder2(z)
    w3 = self.decoder2(self.encoder(w1))
    loss1 = 1/n*torch.mean((batch-w1)**2)+(1-1/n)*torch.mean((batch-w3)**2)
    loss2 = 1/n*torch.mean((batch-w2)**2)-(1-1/n)*torch.mean((batch-w3)**2)
    if self.bug == "adversarial_sign_flipped":
      # classic sign slip: AE2 also minimizes its error on AE1's output, so nothing is adversarial
      loss2 = 1/n*torch.mean((batch-w2)**2)+(1-1/n)*torch.mean((batch-w3)**2)
    return loss1,loss2

  def validation_step(self, batch, n):
    with torch.no_grad():
        z = self.encoder(batch)
        w1 = self.decoder1(z)
        w2 = self.decoder2(z)
        w3 = self.decoder2(self.encoder(w1))
        loss1 = 1/n*torch.mean((batch-w1)**2)+(1-1/n)*torch.mean((batch-w3)**2)
        loss2 = 1/n*torch.mean((batch-w2)**2)-(1-1/n)*torch.mean((batch-w3)**2)
    return {'val_loss1': loss1, 'val_loss2': loss2}

  def validation_epoch_end(self, outputs):
    batch_losses1 = [x['val_loss1'] for x in outputs]
    epoch_loss1 = torch.stack(batch_losses1).mean()
    batch_losses2 = [x['val_loss2'] for x in outputs]
    epoch_loss2 = torch.stack(batch_losses2).mean()
    return {'val_loss1': epoch_loss1.item(), 'val_loss2': epoch_loss2.item()}


def evaluate(model, val_loader, n):
    outputs = [model.validation_step(to_device(batch,device), n) for [batch] in val_loader]
    return model.validation_epoch_end(outputs)


def testing(model, test_loader, alpha=.5, beta=.5):
    results=[]
    with torch.no_grad():
        for [batch] in test_loader:
            batch=to_device(batch,device)
            w1=model.decoder1(model.encoder(batch))
            w2=model.decoder2(model.encoder(w1))
            results.append(alpha*torch.mean((batch-w1)**2,axis=1)+beta*torch.mean((batch-w2)**2,axis=1))
    return results


def roc_auc_score(y_true, y_score):
    """(port) sklearn's roc_auc_score as the Mann-Whitney rank statistic."""
    y_true, y_score = np.asarray(y_true), np.asarray(y_score)
    order = np.argsort(y_score, kind="mergesort")
    ranks = np.empty(len(y_score))
    ranks[order] = np.arange(1, len(y_score) + 1)
    n_pos = y_true.sum()
    n_neg = len(y_true) - n_pos
    return float((ranks[y_true == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _synthetic_swat(seed):
    """(port) Sensors (sinusoids), actuators (square waves following them), drift and noise; attacks in segments."""
    rng = np.random.RandomState(seed)
    periods = rng.uniform(20, 80, size=N_CHANNELS // 2)
    phases = rng.uniform(0, 2 * np.pi, size=N_CHANNELS // 2)

    def series(t0, length):
        t = np.arange(t0, t0 + length)[:, None]
        sensors = 50 + 20 * np.sin(2 * np.pi * t / periods + phases) + 0.01 * t
        actuators = (sensors > 50).astype(float) * 2.0
        x = np.concatenate([sensors, actuators], axis=1)
        return x + rng.normal(0, 0.5, size=x.shape)

    normal = series(0, N_NORMAL)
    attack = series(N_NORMAL, N_ATTACK)
    labels = np.zeros(N_ATTACK)
    for start in rng.choice(np.arange(20, N_ATTACK - 40, 40), size=6, replace=False):
        c, length = rng.randint(N_CHANNELS), rng.randint(10, 30)
        seg = slice(start, start + length)
        if c >= N_CHANNELS // 2:
            attack[seg, c] = 2.0 - attack[seg, c]        # actuator flipped
        elif rng.rand() < 0.5:
            attack[seg, c] = attack[start, c]            # sensor stuck
        else:
            attack[seg, c] += 25.0                       # offset
        labels[seg] = 1.0
    return normal, attack, labels


class UsadView(nn.Module):
    """(port) AE1's reconstructions of the same UsadModel: ``(w1, w3)``, the two terms of ``loss1``."""

    def __init__(self, usad):
        super().__init__()
        self.usad = usad

    def forward(self, batch):
        w1 = self.usad.decoder1(self.usad.encoder(batch))
        return w1, self.usad.decoder2(self.usad.encoder(w1))


def _loaders(seed, window_size, BATCH_SIZE):
    normal, attack, labels = _synthetic_swat(seed)
    lo, hi = normal.min(axis=0), normal.max(axis=0)  # (port) MinMaxScaler fit on the normal period
    normal = (normal - lo) / (hi - lo)
    attack = (attack - lo) / (hi - lo)
    windows_normal=normal[np.arange(window_size)[None, :] + np.arange(normal.shape[0]-window_size)[:, None]]
    windows_attack=attack[np.arange(window_size)[None, :] + np.arange(attack.shape[0]-window_size)[:, None]]
    w_size=windows_normal.shape[1]*windows_normal.shape[2]

    windows_normal_train = windows_normal[:int(np.floor(.8 *  windows_normal.shape[0]))]
    windows_normal_val = windows_normal[int(np.floor(.8 *  windows_normal.shape[0])):int(np.floor(windows_normal.shape[0]))]

    train_loader = torch.utils.data.DataLoader(data_utils.TensorDataset(
        torch.from_numpy(windows_normal_train).float().view(([windows_normal_train.shape[0],w_size]))
    ) , batch_size=BATCH_SIZE, shuffle=False, num_workers=0)
    val_loader = torch.utils.data.DataLoader(data_utils.TensorDataset(
        torch.from_numpy(windows_normal_val).float().view(([windows_normal_val.shape[0],w_size]))
    ) , batch_size=BATCH_SIZE, shuffle=False, num_workers=0)
    test_loader = torch.utils.data.DataLoader(data_utils.TensorDataset(
        torch.from_numpy(windows_attack).float().view(([windows_attack.shape[0],w_size]))
    ) , batch_size=BATCH_SIZE, shuffle=False, num_workers=0)
    windows_labels=[]
    for i in range(len(labels)-window_size):
        windows_labels.append(list(np.int_(labels[i:i+window_size])))
    y_test = [1.0 if (np.sum(window) > 0) else 0 for window in windows_labels ]
    return train_loader, val_loader, test_loader, y_test, w_size


def _build(seed, bug=None):
    torch.manual_seed(seed)
    window_size=12
    BATCH_SIZE = 32  # (port) 7919
    hidden_size = 100
    train_loader, val_loader, test_loader, y_test, w_size = _loaders(seed, window_size, BATCH_SIZE)
    z_size=window_size*hidden_size
    model = UsadModel(w_size, z_size, bug=bug)
    model = to_device(model,device)

    # training(N_EPOCHS, model, train_loader, val_loader), its epoch loop unrolled
    opt_func=torch.optim.Adam
    optimizer1 = opt_func(list(model.encoder.parameters())+list(model.decoder1.parameters()))
    optimizer2 = opt_func(list(model.encoder.parameters())+list(model.decoder2.parameters()))
    if bug == "optimizer2_over_decoder1":
        # classic copy-paste slip: AE2's optimizer built over decoder1, so decoder2 never moves
        optimizer2 = opt_func(list(model.encoder.parameters())+list(model.decoder1.parameters()))
    state = {"epoch": 0, "it": iter(train_loader)}

    def train_step():
        try:
            [batch] = next(state["it"])
        except StopIteration:
            evaluate(model, val_loader, state["epoch"]+1)
            state["epoch"] += 1
            state["it"] = iter(train_loader)
            [batch] = next(state["it"])
        epoch = state["epoch"]
        batch=to_device(batch,device)

        #Train AE1
        loss1,loss2 = model.training_step(batch,epoch+1)
        first = loss1.detach()
        loss1.backward()
        optimizer1.step()
        if bug != "optimizer1_zero_grad_dropped":
            optimizer1.zero_grad()

        #Train AE2
        loss1,loss2 = model.training_step(batch,epoch+1)
        loss2.backward()
        optimizer2.step()
        optimizer2.zero_grad()
        return first

    def loss_fn(outputs, batch):
        w1, w3 = outputs
        n = state["epoch"] + 1
        return 1/n*torch.mean((batch-w1)**2)+(1-1/n)*torch.mean((batch-w3)**2)

    def eval_fn(view, batch):
        results=testing(view.usad,test_loader)
        y_pred=np.concatenate([torch.stack(results[:-1]).flatten().detach().cpu().numpy(),
                               results[-1].flatten().detach().cpu().numpy()])
        return roc_auc_score(y_test, y_pred)

    first = train_loader.dataset.tensors[0][:BATCH_SIZE]
    return Program(name="usad_swat", model=UsadView(model), batch=(first, first), loss_fn=loss_fn,
                   optimizer=optimizer1, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic copy-paste slip: optimizer2 built over encoder + decoder1, so decoder2 (AE2) is never updated
    Bug("optimizer2_over_decoder1", functools.partial(_build, bug="optimizer2_over_decoder1"), "four_structures",
        ("decoder2",)),
    # classic sign slip: loss2's adversarial term added instead of subtracted, AE2 no longer learns to tell AE1's
    # reconstructions from real windows
    Bug("adversarial_sign_flipped", functools.partial(_build, bug="adversarial_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: optimizer1.zero_grad() left out, AE1's gradients accumulate over every batch
    Bug("optimizer1_zero_grad_dropped", functools.partial(_build, bug="optimizer1_zero_grad_dropped"), "step_probe",
        (), kind="step.grad_accumulation"),
]
