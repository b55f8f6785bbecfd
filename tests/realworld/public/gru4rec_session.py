# ruff: noqa: E722, PLR0402, PLW0642, RUF059, UP004, UP008, UP039
"""GRU4REC: session-based recommendation with a recurrent network over session-parallel mini-batches (each row of
the batch follows one session click by click; a finished session's row is taken over by the next session and its
hidden state reset), one-hot item inputs, a 3-layer GRU, a tanh output layer scored against the batch's own target
items (sampled "in-batch" negatives), the TOP1-max ranking loss and Adagrad.

Source: https://github.com/hungpthanh/GRU4REC-pytorch
Commit: 666b84264c4afae757fe55c6997dcf0a4da1d44e
Files: ``lib/model.py`` (``GRU4REC``), ``lib/lossfunction.py`` (``LossFunction``, ``TOP1_max``), ``lib/optimizer.py``
(``Optimizer``), ``lib/dataset.py`` (``Dataset``, the session-parallel ``DataLoader``), ``lib/trainer.py``
(``Trainer.train_epoch``), ``lib/evaluation.py`` (``Evaluation.eval``), ``main.py`` (the argument defaults).
License: Apache-2.0 (full text in LICENSES/hungpthanh-GRU4REC-pytorch.txt)
Domain: recommendation, sequential (session-based next-item prediction)

Kept as written: ``GRU4REC`` (one-hot buffer, ``nn.GRU`` with ``dropout_hidden`` between layers, ``h2o`` + final
activation), the loss classes, the ``Optimizer`` wrapper, ``Dataset`` (item index map, sort by session and time,
click offsets) and the session-parallel ``DataLoader``, ``train_epoch``'s body (``zero_grad``; ``reset_hidden`` of the
finished sessions' rows, then ``detach``; forward; ``logit[:, target.view(-1)]``; loss; backward; step), and main.py's
defaults (num_layers 3, dropout_input 0, dropout_hidden 0.5, final_act tanh, loss TOP1-max, Adagrad lr 0.01,
weight_decay 0, embedding_dim -1: one-hot inputs, ``sigma`` None: PyTorch's default init).

Deviations from the original:
- data: the RecSys Challenge 2015 clicks are replaced by synthetic sessions made from ``seed``: 40 items, 400
  sessions of 4-9 clicks that start at a random item and walk with a per-session stride of 1 or 3 (``next =
  (previous + stride) mod 40``), so the next click depends on the session's history, not only the last click. They
  are written to an in-memory tab-separated text with the ``SessionID``/``ItemID``/``Time`` columns and read by
  ``Dataset`` with ``pd.read_csv`` as written (``sep`` given as tab, like the preprocessed files).
- sizes for 2 CPU cores: hidden_size 100 -> 32, batch_size 50 -> 16. The self-check runs 60 steps (the TOP1-max
  loss moves slowly under Adagrad 0.01).
- ``train_step`` is one iteration of ``train_epoch``'s inner loop (one session-parallel mini-batch); a new epoch
  (``self.model.train()``, ``init_hidden()``, a fresh ``DataLoader``) starts when the loader is exhausted. The
  per-epoch evaluation, checkpoints and tqdm are dropped; ``eval_fn`` is ``Evaluation.eval``'s body on one given
  batch (its loss and recall@20).
- ``Variable`` and the CUDA branches are dropped; device is the CPU. ``nn.Softmax()`` / ``nn.LogSoftmax()`` of the
  unused final activations get ``dim=1`` (PyTorch no longer infers it).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import io
import pathlib
import sys

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
import torch.optim as optim
from torch import nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

N_ITEMS = 40
N_SESSIONS = 400
SELF_CHECK_STEPS = 60


# ---- lib/model.py ------------------------------------------------------------------------------------------------

class GRU4REC(nn.Module):
    def __init__(self, input_size, hidden_size, output_size, num_layers=1, final_act='tanh',
                 dropout_hidden=.5, dropout_input=0, batch_size=50, embedding_dim=-1, use_cuda=False, bug=None):
        super(GRU4REC, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.num_layers = num_layers
        self.dropout_hidden = dropout_hidden
        self.dropout_input = dropout_input
        self.embedding_dim = embedding_dim
        self.batch_size = batch_size
        self.use_cuda = use_cuda
        self.device = torch.device('cuda' if use_cuda else 'cpu')
        self.onehot_buffer = self.init_emb()
        self.h2o = nn.Linear(hidden_size, output_size)
        self.create_final_activation(final_act)
        if self.embedding_dim != -1:
            self.look_up = nn.Embedding(input_size, self.embedding_dim)
            self.gru = nn.GRU(self.embedding_dim, self.hidden_size, self.num_layers, dropout=self.dropout_hidden)
        else:
            self.gru = nn.GRU(self.input_size, self.hidden_size, self.num_layers, dropout=self.dropout_hidden)
        self = self.to(self.device)
        self.bug = bug

    def create_final_activation(self, final_act):
        if final_act == 'tanh':
            self.final_activation = nn.Tanh()
        elif final_act == 'relu':
            self.final_activation = nn.ReLU()
        elif final_act == 'softmax':
            self.final_activation = nn.Softmax(dim=1)
        elif final_act == 'softmax_logit':
            self.final_activation = nn.LogSoftmax(dim=1)
        elif final_act.startswith('elu-'):
            self.final_activation = nn.ELU(alpha=float(final_act.split('-')[1]))
        elif final_act.startswith('leaky-'):
            self.final_activation = nn.LeakyReLU(negative_slope=float(final_act.split('-')[1]))

    def forward(self, input, hidden):
        '''
        Args:
            input (B,): a batch of item indices from a session-parallel mini-batch.
            target (B,): torch.LongTensor of next item indices from a session-parallel mini-batch.

        Returns:
            logit (B,C): Variable that stores the logits for the next items in the session-parallel mini-batch
            hidden: GRU hidden state
        '''

        if self.embedding_dim == -1:
            embedded = self.onehot_encode(input)
            if self.training and self.dropout_input > 0: embedded = self.embedding_dropout(embedded)
            embedded = embedded.unsqueeze(0)
        else:
            embedded = input.unsqueeze(0)
            embedded = self.look_up(embedded)

        if self.bug == "hidden_not_carried":
            # https://github.com/hungpthanh/GRU4REC-pytorch/issues/1: the GRU's new state bound to a misspelt name,
            # so the state passed in is returned and the next click never sees the session's history
            output, hdden = self.gru(embedded, hidden) #(num_layer, B, H)
        else:
            output, hidden = self.gru(embedded, hidden) #(num_layer, B, H)
        output = output.view(-1, output.size(-1))  #(B,H)
        logit = self.final_activation(self.h2o(output))

        return logit, hidden

    def init_emb(self):
        '''
        Initialize the one_hot embedding buffer, which will be used for producing the one-hot embeddings efficiently
        '''
        onehot_buffer = torch.FloatTensor(self.batch_size, self.output_size)
        onehot_buffer = onehot_buffer.to(self.device)
        return onehot_buffer

    def onehot_encode(self, input):
        """
        Returns a one-hot vector corresponding to the input
        Args:
            input (B,): torch.LongTensor of item indices
            buffer (B,output_size): buffer that stores the one-hot vector
        Returns:
            one_hot (B,C): torch.FloatTensor of one-hot vectors
        """
        self.onehot_buffer.zero_()
        index = input.view(-1, 1)
        one_hot = self.onehot_buffer.scatter_(1, index, 1)
        return one_hot

    def embedding_dropout(self, input):
        p_drop = torch.Tensor(input.size(0), 1).fill_(1 - self.dropout_input)
        mask = torch.bernoulli(p_drop).expand_as(input) / (1 - self.dropout_input)
        mask = mask.to(self.device)
        input = input * mask
        return input

    def init_hidden(self):
        '''
        Initialize the hidden state of the GRU
        '''
        try:
            h0 = torch.zeros(self.num_layers, self.batch_size, self.hidden_size).to(self.device)
        except:
            self.device = 'cpu'
            h0 = torch.zeros(self.num_layers, self.batch_size, self.hidden_size).to(self.device)
        return h0


# ---- lib/lossfunction.py (the classes main.py's loss types select) ------------------------------------------------

class LossFunction(nn.Module):
    def __init__(self, loss_type='TOP1', use_cuda=False):
        """ An abstract loss function that can supports custom loss functions compatible with PyTorch."""
        super(LossFunction, self).__init__()
        self.loss_type = loss_type
        self.use_cuda = use_cuda
        if loss_type == 'CrossEntropy':
            self._loss_fn = SampledCrossEntropyLoss(use_cuda)
        elif loss_type == 'TOP1':
            self._loss_fn = TOP1Loss()
        elif loss_type == 'BPR':
            self._loss_fn = BPRLoss()
        elif loss_type == 'TOP1-max':
            self._loss_fn = TOP1_max()
        elif loss_type == 'BPR-max':
            self._loss_fn = BPR_max()
        else:
            raise NotImplementedError

    def forward(self, logit):
        return self._loss_fn(logit)


class SampledCrossEntropyLoss(nn.Module):
    """ CrossEntropyLoss with n_classes = batch_size = the number of samples in the session-parallel mini-batch """
    def __init__(self, use_cuda):
        super(SampledCrossEntropyLoss, self).__init__()
        self.xe_loss = nn.CrossEntropyLoss()
        self.use_cuda = use_cuda

    def forward(self, logit):
        batch_size = logit.size(1)
        target = torch.arange(batch_size).long()
        return self.xe_loss(logit, target)


class BPRLoss(nn.Module):
    def __init__(self):
        super(BPRLoss, self).__init__()

    def forward(self, logit):
        # differences between the item scores
        diff = logit.diag().view(-1, 1).expand_as(logit) - logit
        # final loss
        loss = -torch.mean(F.logsigmoid(diff))
        return loss


class BPR_max(nn.Module):
    def __init__(self):
        super(BPR_max, self).__init__()
    def forward(self, logit):
        logit_softmax = F.softmax(logit, dim=1)
        diff = logit.diag().view(-1, 1).expand_as(logit) - logit
        loss = -torch.log(torch.mean(logit_softmax * torch.sigmoid(diff)))
        return loss


class TOP1Loss(nn.Module):
    def __init__(self):
        super(TOP1Loss, self).__init__()
    def forward(self, logit):
        diff = -(logit.diag().view(-1, 1).expand_as(logit) - logit)
        loss = torch.sigmoid(diff).mean() + torch.sigmoid(logit ** 2).mean()
        return loss


class TOP1_max(nn.Module):
    def __init__(self):
        super(TOP1_max, self).__init__()

    def forward(self, logit):
        logit_softmax = F.softmax(logit, dim=1)
        diff = -(logit.diag().view(-1, 1).expand_as(logit) - logit)
        loss = torch.mean(logit_softmax * (torch.sigmoid(diff) + torch.sigmoid(logit ** 2)))
        return loss


# ---- lib/optimizer.py --------------------------------------------------------------------------------------------

class Optimizer:
    def __init__(self, params, optimizer_type='Adagrad', lr=.05,
                 momentum=0, weight_decay=0, eps=1e-6):
        if optimizer_type == 'RMSProp':
            self.optimizer = optim.RMSprop(params, lr=lr, eps=eps, weight_decay=weight_decay, momentum=momentum)
        elif optimizer_type == 'Adagrad':
            self.optimizer = optim.Adagrad(params, lr=lr, weight_decay=weight_decay)
        elif optimizer_type == 'Adadelta':
            self.optimizer = optim.Adadelta(params, lr=lr, eps=eps, weight_decay=weight_decay)
        elif optimizer_type == 'Adam':
            self.optimizer = optim.Adam(params, lr=lr, eps=eps, weight_decay=weight_decay)
        elif optimizer_type == 'SparseAdam':
            self.optimizer = optim.SparseAdam(params, lr=lr, eps=eps)
        elif optimizer_type == 'SGD':
            self.optimizer = optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
        else:
            raise NotImplementedError

    def zero_grad(self):
        self.optimizer.zero_grad()

    def step(self):
        self.optimizer.step()


# ---- lib/dataset.py ----------------------------------------------------------------------------------------------

class Dataset(object):
    def __init__(self, path, sep=',', session_key='SessionID', item_key='ItemID', time_key='Time', n_sample=-1, itemmap=None, itemstamp=None, time_sort=False):
        # Read csv
        self.df = pd.read_csv(path, sep=sep, dtype={session_key: int, item_key: int, time_key: float})
        self.session_key = session_key
        self.item_key = item_key
        self.time_key = time_key
        self.time_sort = time_sort
        if n_sample > 0:
            self.df = self.df[:n_sample]

        # Add colummn item index to data
        self.add_item_indices(itemmap=itemmap)
        self.df.sort_values([session_key, time_key], inplace=True)
        self.click_offsets = self.get_click_offset()
        self.session_idx_arr = self.order_session_idx()

    def add_item_indices(self, itemmap=None):
        if itemmap is None:
            item_ids = self.df[self.item_key].unique()  # type is numpy.ndarray
            item2idx = pd.Series(data=np.arange(len(item_ids)),
                                 index=item_ids)
            # Build itemmap is a DataFrame that have 2 columns (self.item_key, 'item_idx)
            itemmap = pd.DataFrame({self.item_key: item_ids,
                                   'item_idx': item2idx[item_ids].values})
        self.itemmap = itemmap
        self.df = pd.merge(self.df, self.itemmap, on=self.item_key, how='inner')

    def get_click_offset(self):
        offsets = np.zeros(self.df[self.session_key].nunique() + 1, dtype=np.int32)
        offsets[1:] = self.df.groupby(self.session_key).size().cumsum()
        return offsets

    def order_session_idx(self):
        if self.time_sort:
            sessions_start_time = self.df.groupby(self.session_key)[self.time_key].min().values
            session_idx_arr = np.argsort(sessions_start_time)
        else:
            session_idx_arr = np.arange(self.df[self.session_key].nunique())
        return session_idx_arr

    @property
    def items(self):
        return self.itemmap[self.item_key].unique()


class DataLoader():
    def __init__(self, dataset, batch_size=50, bug=None):
        self.dataset = dataset
        self.batch_size = batch_size
        self.bug = bug

    def __iter__(self):
        # initializations
        df = self.dataset.df
        click_offsets = self.dataset.click_offsets
        session_idx_arr = self.dataset.session_idx_arr

        iters = np.arange(self.batch_size)
        maxiter = iters.max()
        start = click_offsets[session_idx_arr[iters]]
        end = click_offsets[session_idx_arr[iters] + 1]
        mask = []  # indicator for the sessions to be terminated
        finished = False

        while not finished:
            minlen = (end - start).min()
            # Item indices(for embedding) for clicks where the first sessions start
            idx_target = df.item_idx.values[start]

            for i in range(minlen - 1):
                # Build inputs & targets
                idx_input = idx_target
                if self.bug == "target_is_current_click":
                    idx_target = df.item_idx.values[start + i]
                else:
                    idx_target = df.item_idx.values[start + i + 1]
                input = torch.LongTensor(idx_input)
                target = torch.LongTensor(idx_target)
                yield input, target, mask

            # click indices where a particular session meets second-to-last element
            start = start + (minlen - 1)
            # see if how many sessions should terminate
            mask = np.arange(len(iters))[(end - start) <= 1]
            for idx in mask:
                maxiter += 1
                if maxiter >= len(click_offsets) - 1:
                    finished = True
                    break
                # update the next starting/ending point
                iters[idx] = maxiter
                start[idx] = click_offsets[session_idx_arr[maxiter]]
                end[idx] = click_offsets[session_idx_arr[maxiter] + 1]


def make_sessions(seed):
    """(port) synthetic clicks: next item = (previous + stride) mod N_ITEMS, stride 1 or 3 per session; as tsv text."""
    rng = np.random.default_rng(seed)
    lines = ["SessionID\tItemID\tTime"]
    t = 0.0
    for sid in range(N_SESSIONS):
        stride = int(rng.choice([1, 3]))
        items = [int(rng.integers(0, N_ITEMS))]
        for _ in range(int(rng.integers(4, 10)) - 1):
            items.append((items[-1] + stride) % N_ITEMS)
        for item in items:
            t += 1.0
            lines.append(f"{sid + 1}\t{int(item) + 1000}\t{t}")
    return io.StringIO("\n".join(lines) + "\n")


# ---- main.py + lib/trainer.py ------------------------------------------------------------------------------------

def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)

    train_data = Dataset(make_sessions(seed), sep='\t')

    input_size = len(train_data.items)
    hidden_size = 32
    num_layers = 3
    output_size = input_size
    batch_size = 16
    loss_function = LossFunction(loss_type='TOP1-max', use_cuda=False)
    model = GRU4REC(input_size, hidden_size, output_size, final_act='tanh',
                    num_layers=num_layers, use_cuda=False, batch_size=batch_size,
                    dropout_input=0, dropout_hidden=0.5, embedding_dim=-1, bug=bug)
    optimizer = Optimizer(model.parameters(), optimizer_type='Adagrad', lr=0.01,
                          weight_decay=0, momentum=0, eps=1e-6)
    device = torch.device('cpu')

    def reset_hidden(hidden, mask):
        """Helper function that resets hidden state when some sessions terminate"""
        if len(mask) != 0:
            hidden[:, mask, :] = 0
        return hidden

    state = {}

    def new_epoch():
        model.train()
        state["hidden"] = model.init_hidden()
        state["it"] = iter(DataLoader(train_data, batch_size, bug=bug))

    new_epoch()
    first_input, first_target, _ = next(iter(DataLoader(train_data, batch_size, bug=bug)))

    def train_step():
        try:
            input, target, mask = next(state["it"])
        except StopIteration:
            new_epoch()
            input, target, mask = next(state["it"])
        hidden = state["hidden"]
        input = input.to(device)
        target = target.to(device)
        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        hidden = reset_hidden(hidden, mask).detach()
        logit, hidden = model(input, hidden)
        # output sampling
        logit_sampled = logit[:, target.view(-1)]
        loss = loss_function(logit_sampled)
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        optimizer.step()
        state["hidden"] = hidden
        return loss.detach()

    def loss_fn(outputs, target):
        logit, _hidden = outputs
        logit_sampled = logit[:, target.view(-1)]
        return loss_function(logit_sampled)

    def eval_fn(model, batch):
        """Evaluation.eval's body on one batch: the loss and recall@20."""
        model.eval()
        with torch.no_grad():
            (input, hidden), target = batch
            logit, hidden = model(input, hidden)
            logit_sampled = logit[:, target.view(-1)]
            loss = loss_function(logit_sampled)
            _, indices = torch.topk(logit, 20, -1)
            recall = float((target.view(-1, 1).expand_as(indices) == indices).any(1).float().mean())
        model.train()
        return {"loss": loss.item(), "recall": recall}

    return Program(name="gru4rec_session", model=model, batch=((first_input, model.init_hidden()), first_target),
                   loss_fn=loss_fn, optimizer=optimizer.optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # https://github.com/hungpthanh/GRU4REC-pytorch/issues/1 ("Model forward function seems not to update hidden
    # state", a typo the author confirmed and fixed): the GRU's new state is bound to ``hdden`` and ``forward``
    # returns the state it was given, so every click is scored from a zero history.
    Bug("hidden_not_carried", functools.partial(_build, bug="hidden_not_carried"), "learning_ledger",
        ("DEPENDENCY",)),
    # the session-parallel loader's target taken at the input's own click (``start + i`` for ``start + i + 1``,
    # classic off-by-one): the model is trained to recommend the item just clicked.
    Bug("target_is_current_click", functools.partial(_build, bug="target_is_current_click"), "learning_ledger",
        ("TASK",)),
    # ``zero_grad`` moved between ``backward`` and ``step`` (classic): every step applies a zero gradient.
    # Every parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
