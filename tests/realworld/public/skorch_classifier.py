"""skorch's README example: ``NeuralNetClassifier(MyModule, max_epochs=10, lr=0.1, iterator_train__shuffle=True)``
fit on a 20-feature two-class problem. The module ends in ``nn.Softmax``; the classifier's default criterion is
``nn.NLLLoss`` and its ``get_loss`` takes ``torch.log(y_pred + eps)`` first; the default optimizer is SGD; the
default ``train_split`` is ``ValidSplit(5, stratified=True)``; each batch goes through ``train_step`` (a closure
``step_fn``: zero_grad, ``train_step_single`` = train mode, ``infer``, ``get_loss``, backward; then
``optimizer.step(step_fn)``).

Source: https://github.com/skorch-dev/skorch
Commit: 5db0ddc962117a2c3a646910ecd2e70253ff8e87
Files: README.rst (the example), skorch/net.py (NeuralNet: initialize_*, train_step, train_step_single,
  validation_step, infer, get_loss, _zero_grad_optimizer, _step_optimizer, _set_training, get_iterator,
  run_single_epoch), skorch/classifier.py (NeuralNetClassifier: defaults, get_loss), skorch/dataset.py
  (Dataset, ValidSplit, unpack_data)
License: BSD-3-Clause (Copyright (c) 2017, Benjamin Bossan, Daniel Nouri, Marian Tietz; full text in
  LICENSES/skorch-dev-skorch.txt)
Domain: tabular classification through a scikit-learn-style wrapper (skorch)

Deviations from the original:
- skorch (and scikit-learn) are not installed here: the parts of ``NeuralNet`` / ``NeuralNetClassifier`` the fit
  runs are written out in one class with the same method names and bodies (callbacks, history, printing,
  parameter routing, ``set_params`` and caching are left out; ``notify`` calls are dropped);
- ``ValidSplit(5, stratified=True)`` uses scikit-learn's ``StratifiedKFold(5)`` first fold; written out here as
  the first fifth of each class's indices, in order, held out for validation;
- data: ``make_classification(1000, 20, n_informative=10, random_state=0)`` is replaced by 1000 Gaussian rows of
  20 float32 features made from ``seed``, labelled by the sign of a random linear function of the first 10
  (``int64`` labels, as the README casts them);
- ``fit``'s epoch loop is not run to the end: one ``train_step`` is one batch of ``run_single_epoch`` (the train
  iterator, shuffled, is restarted when it runs out, as the next epoch would); the validation epoch is the
  ``eval_fn`` (``validation_step`` over the validation iterator, mean loss);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: B008, RUF012  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- README.rst ------------------------------------------------------------------------------------------------

class MyModule(nn.Module):
    def __init__(self, num_units=10, nonlin=nn.ReLU()):
        super().__init__()

        self.dense0 = nn.Linear(20, num_units)
        self.nonlin = nonlin
        self.dropout = nn.Dropout(0.5)
        self.dense1 = nn.Linear(num_units, num_units)
        self.output = nn.Linear(num_units, 2)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, X, **kwargs):
        X = self.nonlin(self.dense0(X))
        X = self.dropout(X)
        X = self.nonlin(self.dense1(X))
        X = self.softmax(self.output(X))
        return X


# ---- skorch/dataset.py -----------------------------------------------------------------------------------------

def unpack_data(data):
    X, y = data
    return X, y


class Dataset(torch.utils.data.Dataset):
    def __init__(self, X, y=None):
        self.X = X
        self.y = y
        self._len = len(X)

    def __len__(self):
        return self._len

    def __getitem__(self, i):
        return self.X[i], self.y[i]


class ValidSplit:
    def __init__(self, cv=5, stratified=False):
        self.cv = cv
        self.stratified = stratified

    def __call__(self, dataset, y=None, groups=None):
        # sklearn's StratifiedKFold(cv).split(...)'s first fold, written out
        idx_valid = np.concatenate([np.flatnonzero(y == c)[:(y == c).sum() // self.cv] for c in np.unique(y)])
        idx_train = np.setdiff1d(np.arange(len(dataset)), idx_valid)
        dataset_train = torch.utils.data.Subset(dataset, idx_train)
        dataset_valid = torch.utils.data.Subset(dataset, idx_valid)
        return dataset_train, dataset_valid


# ---- skorch/net.py + skorch/classifier.py (the parts fit runs) -----------------------------------------------

class NeuralNetClassifier:
    _modules = ['module']
    _criteria = ['criterion']
    _optimizers = ['optimizer']

    def __init__(
            self,
            module,
            criterion=torch.nn.NLLLoss,
            optimizer=torch.optim.SGD,
            lr=0.01,
            max_epochs=10,
            batch_size=128,
            iterator_train=DataLoader,
            iterator_valid=DataLoader,
            dataset=Dataset,
            train_split=ValidSplit(5, stratified=True),
            device='cpu',
            iterator_train__shuffle=False,
            bug=None,
    ):
        self.module = module
        self.criterion = criterion
        self.optimizer = optimizer
        self.lr = lr
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.iterator_train = iterator_train
        self.iterator_valid = iterator_valid
        self.dataset = dataset
        self.train_split = train_split
        self.device = device
        self.iterator_train__shuffle = iterator_train__shuffle
        self.bug = bug

    def initialize(self):
        self.criterion_ = self.criterion()
        self.module_ = self.module()
        self.initialize_optimizer()
        return self

    def get_all_learnable_params(self):
        seen = set()
        for name in self._modules + self._criteria:
            module = getattr(self, name + '_')
            named_parameters = getattr(module, 'named_parameters', None)
            if not named_parameters:
                continue

            for param_name, param in named_parameters():
                if param in seen:
                    continue

                seen.add(param)
                yield param_name, param

    def initialize_optimizer(self):
        named_parameters = self.get_all_learnable_params()
        args, kwargs = (named_parameters,), {'lr': self.lr}
        args = ([param for _, param in args[0]],)
        self.optimizer_ = self.optimizer(*args, **kwargs)
        return self

    def _set_training(self, training=True):
        for module_name in self._modules + self._criteria:
            module = getattr(self, module_name + '_')
            if isinstance(module, torch.nn.Module):
                module.train(training)

    def infer(self, x, **fit_params):
        x = torch.as_tensor(x, device=self.device)
        return self.module_(x, **fit_params)

    def get_loss(self, y_pred, y_true, X=None, training=False):
        # NeuralNetClassifier.get_loss
        if isinstance(self.criterion_, torch.nn.NLLLoss):
            eps = torch.finfo(y_pred.dtype).eps
            y_pred = torch.log(y_pred + eps)
        # NeuralNet.get_loss
        y_true = torch.as_tensor(y_true, device=self.device)
        return self.criterion_(y_pred, y_true)

    def validation_step(self, batch, **fit_params):
        self._set_training(False)
        Xi, yi = unpack_data(batch)
        with torch.no_grad():
            y_pred = self.infer(Xi, **fit_params)
            loss = self.get_loss(y_pred, yi, X=Xi, training=False)
        return {
            'loss': loss,
            'y_pred': y_pred,
        }

    def train_step_single(self, batch, **fit_params):
        if self.bug == "trained_in_eval_mode":
            # the training step borrows validation_step's mode switch: dropout is off while training
            self._set_training(False)
        else:
            self._set_training(True)
        Xi, yi = unpack_data(batch)
        y_pred = self.infer(Xi, **fit_params)
        loss = self.get_loss(y_pred, yi, X=Xi, training=True)
        loss.backward()
        return {
            'loss': loss,
            'y_pred': y_pred,
        }

    def _zero_grad_optimizer(self, set_to_none=None):
        for name in self._optimizers:
            optimizer = getattr(self, name + '_')
            if set_to_none is None:
                optimizer.zero_grad()
            else:
                optimizer.zero_grad(set_to_none=set_to_none)

    def _step_optimizer(self, step_fn):
        for name in self._optimizers:
            optimizer = getattr(self, name + '_')
            if step_fn is None:
                optimizer.step()
            else:
                optimizer.step(step_fn)

    def train_step(self, batch, **fit_params):
        step_accumulator = []

        def step_fn():
            self._zero_grad_optimizer()
            step = self.train_step_single(batch, **fit_params)
            step_accumulator.append(step)
            return step['loss']

        self._step_optimizer(step_fn)
        return step_accumulator[0]

    def get_split_datasets(self, X, y=None, **fit_params):
        dataset = self.dataset(X, y)
        return self.train_split(dataset, y, **fit_params)

    def get_iterator(self, dataset, training=False):
        if training:
            kwargs = {'shuffle': self.iterator_train__shuffle}
            iterator = self.iterator_train
        else:
            kwargs = {}
            iterator = self.iterator_valid
        if 'batch_size' not in kwargs:
            kwargs['batch_size'] = self.batch_size
        return iterator(dataset, **kwargs)


def make_data(seed, n=1000, n_features=20, n_informative=10):
    """Gaussian features; the label is the sign of a random linear function of the first ``n_informative``."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, n_features))
    w = rng.standard_normal(n_informative)
    y = (X[:, :n_informative] @ w > 0)
    return X.astype(np.float32), y.astype(np.int64)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    X, y = make_data(seed)

    if bug == "cross_entropy_on_softmax":
        # CrossEntropyLoss chosen (the docs' recommendation of #852 / #637) while the module keeps its Softmax:
        # the loss takes the probabilities as logits (softmax applied twice)
        net = NeuralNetClassifier(
            MyModule,
            criterion=torch.nn.CrossEntropyLoss,
            max_epochs=10,
            lr=0.1,
            # Shuffle training data on each epoch
            iterator_train__shuffle=True,
            bug=bug,
        )
    else:
        net = NeuralNetClassifier(
            MyModule,
            max_epochs=10,
            lr=0.1,
            # Shuffle training data on each epoch
            iterator_train__shuffle=True,
            bug=bug,
        )
    net.initialize()

    dataset_train, dataset_valid = net.get_split_datasets(X, y)
    iterator_train = net.get_iterator(dataset_train, training=True)
    iterator_valid = net.get_iterator(dataset_valid, training=False)

    def batches():
        while True:  # one pass per epoch, as fit_loop's epochs do
            yield from iterator_train

    stream = batches()
    first = next(iter(net.get_iterator(dataset_train, training=False)))

    def train_step():
        batch = next(stream)
        step = net.train_step(batch)
        return step["loss"].detach()

    def eval_fn(model, batch):
        losses = [float(net.validation_step(b)["loss"]) for b in iterator_valid]
        return sum(losses) / len(losses)

    return Program(name="skorch_classifier", model=net.module_, batch=first,
                   loss_fn=lambda y_pred, y_true: net.get_loss(y_pred, y_true, training=True),
                   optimizer=net.optimizer_, train_step=train_step, eval_fn=eval_fn, loader=iterator_train)


build = functools.partial(_build, bug=None)

BUGS = [
    # CrossEntropyLoss on a module that still ends in Softmax: the mix-up between skorch's softmax+NLLLoss default
    # and CrossEntropyLoss discussed in https://github.com/skorch-dev/skorch/issues/637 and
    # https://github.com/skorch-dev/skorch/pull/852 (the quick start switched to CrossEntropyLoss without softmax);
    # it trains, on a squashed objective.
    Bug("cross_entropy_on_softmax", functools.partial(_build, bug="cross_entropy_on_softmax"), "learning_ledger",
        ("OBJECTIVE",)),
    # the module is put in eval mode for the training step (classic): dropout never acts during training.
    Bug("trained_in_eval_mode", functools.partial(_build, bug="trained_in_eval_mode"), "step_probe", ("dropout",)),
]
