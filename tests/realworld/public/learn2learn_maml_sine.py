"""MAML on sine-wave regression with learn2learn's ``MAML`` wrapper: a 1-32-32-1 ReLU MLP wrapped in
``l2l.algorithms.MAML(model, lr=0.01, first_order=False, allow_unused=True)``; per task a ``clone()`` (every
parameter ``torch.clone``d into the module's ``_parameters``, so the graph reaches the meta-parameters), five
``adapt`` steps on the MSE of the 10 even-indexed points (second-order ``autograd.grad`` and ``update_module``,
which swaps ``p + p.update`` into the module), the MSE of the adapted clone on the 10 odd-indexed points, averaged
over 16 tasks; Adam 1e-3 on ``maml.parameters()``.

Source: https://github.com/learnables/learn2learn
Commit: db5cee3795490071282bbdfa81179ef732349196
Files: ``examples/maml_sine.py``, ``learn2learn/algorithms/maml.py`` (``maml_update``, ``MAML``),
``learn2learn/algorithms/base_learner.py`` (``BaseLearner``), ``learn2learn/utils/__init__.py`` (``clone_module``,
``update_module``) (+ torchmeta's ``Sinusoid`` / ``SinusoidTask``, https://github.com/tristandeleu/pytorch-meta at
d55d89ebd47f340180267106bde3e4b723f23762, ``torchmeta/toy/sinusoid.py``)
License: MIT (Copyright (c) 2019 Debajyoti Datta, Ian Bunner, Praateek Mahajan, Sebastien Arnold; full text in
LICENSES/learnables-learn2learn.txt; torchmeta: MIT, LICENSES/tristandeleu-pytorch-meta.txt)
Domain: meta-learning (second-order MAML through a module-cloning wrapper, few-shot regression)

Kept as written: ``SineModel``, ``main``'s defaults (``shots`` 10, ``tasks_per_batch`` 16, ``num_tasks`` 160000,
``adapt_lr`` 0.01, ``meta_lr`` (changed, below), ``adapt_steps`` 5, ``hidden_dim`` 32), the MAML wrapper, ``Adam(maml.
parameters(), meta_lr)``, ``nn.MSELoss(reduction='mean')``, and the loop body (per task ``maml.clone()``, the
``[::2]`` / ``[1::2]`` support/query split of ``2*shots`` points, ``adapt_steps`` adaptations, the query loss summed
and divided by the effective batch size, ``opt.zero_grad()``, backward, ``opt.step()``); ``clone_module``,
``update_module``, ``maml_update``, ``MAML.adapt`` / ``clone`` and ``BaseLearner`` line for line (docstrings
shortened).

Deviations from the original:
- learn2learn and torchmeta are not installed: the pieces listed above are written out. torchmeta's ``Sinusoid``
  (amplitude in [0.1, 5], phase in [0, pi], inputs uniform in [-5, 5], no noise) draws from a ``RandomState(seed)``;
  ``BatchMetaDataLoader(tasksets, batch_size=16)`` (``shuffle=True``) is written as a ``torch.randperm`` of the task
  indices from a ``torch.Generator`` seeded with ``seed``, each batch the stacked ``[16, 20, 1]`` float64 inputs and
  targets (what ``BatchMetaCollate`` gives for a regression task); ``num_tasks`` 160000 -> 16000 (the amplitudes and
  phases are drawn at the first access, as in torchmeta).
- ``train_step`` is one iteration of ``for iter, batch in enumerate(dataloader)`` and returns
  ``meta_train_loss.item()``; the print every 200 iterations is dropped. ``eval_fn`` is the same meta loss (after
  adaptation) on one fixed batch of 16 other tasks, without the optimizer step.
- the Program's model is the ``MAML`` wrapper the optimizer trains (parameters ``module.hidden1.weight``, ...), its
  batch the query set of the first task of one batch, its ``loss_fn`` the ``MSELoss`` (what the meta-parameters
  predict before adaptation).
- ``meta_lr`` 0.001 -> 0.01 and the self-check runs 60 steps (``SELF_CHECK_STEPS``): the meta loss of a batch of
  16 random sinusoids varies more from batch to batch than 30 steps at 0.001 move it (the original runs 10000).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, SIM201

from __future__ import annotations

import functools
import pathlib
import sys
import traceback

import numpy as np
import torch
from torch import nn, optim
from torch.autograd import grad

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program


# ------------------------------------------------------------------------------ learn2learn/utils/__init__.py
def clone_module(module, memo=None):
    """Creates a copy of a module, whose parameters/buffers/submodules are created using PyTorch's torch.clone()."""
    # NOTE: This function might break in future versions of PyTorch.
    # TODO: This function might require that module.forward()
    #       was called in order to work properly, if forward() instanciates
    #       new variables.
    # NOTE: This can probably be implemented more cleanly with
    #       clone = recursive_shallow_copy(model)
    #       clone._apply(lambda t: t.clone())

    if memo is None:
        # Maps original data_ptr to the cloned tensor.
        # Useful when a Module uses parameters from another Module; see:
        # https://github.com/learnables/learn2learn/issues/174
        memo = {}

    # First, create a copy of the module.
    # Adapted from:
    # https://github.com/pytorch/pytorch/blob/65bad41cbec096aa767b3752843eddebf845726f/torch/nn/modules/module.py#L1171
    if not isinstance(module, torch.nn.Module):
        return module
    clone = module.__new__(type(module))
    clone.__dict__ = module.__dict__.copy()
    clone._parameters = clone._parameters.copy()
    clone._buffers = clone._buffers.copy()
    clone._modules = clone._modules.copy()

    # Second, re-write all parameters
    if hasattr(clone, '_parameters'):
        for param_key in module._parameters:
            if module._parameters[param_key] is not None:
                param = module._parameters[param_key]
                param_ptr = param.data_ptr
                if param_ptr in memo:
                    clone._parameters[param_key] = memo[param_ptr]
                else:
                    cloned = param.clone()
                    clone._parameters[param_key] = cloned
                    memo[param_ptr] = cloned

    # Third, handle the buffers if necessary
    if hasattr(clone, '_buffers'):
        for buffer_key in module._buffers:
            if clone._buffers[buffer_key] is not None and \
                    clone._buffers[buffer_key].requires_grad:
                buff = module._buffers[buffer_key]
                buff_ptr = buff.data_ptr
                if buff_ptr in memo:
                    clone._buffers[buffer_key] = memo[buff_ptr]
                else:
                    cloned = buff.clone()
                    clone._buffers[buffer_key] = cloned
                    memo[buff_ptr] = cloned

    # Then, recurse for each submodule
    if hasattr(clone, '_modules'):
        for module_key in clone._modules:
            clone._modules[module_key] = clone_module(
                module._modules[module_key],
                memo=memo,
            )

    # Finally, rebuild the flattened parameters for RNNs
    # See this issue for more details:
    # https://github.com/learnables/learn2learn/issues/139
    if hasattr(clone, 'flatten_parameters'):
        clone = clone._apply(lambda x: x)
    return clone


def update_module(module, updates=None, memo=None):
    r"""Updates the parameters of a module in-place, in a way that preserves differentiability: p <- p + u."""
    if memo is None:
        memo = {}
    if updates is not None:
        params = list(module.parameters())
        if not len(updates) == len(list(params)):
            msg = 'WARNING:update_module(): Parameters and updates have different length. ('
            msg += str(len(params)) + ' vs ' + str(len(updates)) + ')'
            print(msg)
        for p, g in zip(params, updates):
            p.update = g

    # Update the params
    for param_key in module._parameters:
        p = module._parameters[param_key]
        if p in memo:
            module._parameters[param_key] = memo[p]
        else:
            if p is not None and hasattr(p, 'update') and p.update is not None:
                updated = p + p.update
                p.update = None
                memo[p] = updated
                module._parameters[param_key] = updated

    # Second, handle the buffers if necessary
    for buffer_key in module._buffers:
        buff = module._buffers[buffer_key]
        if buff in memo:
            module._buffers[buffer_key] = memo[buff]
        else:
            if buff is not None and hasattr(buff, 'update') and buff.update is not None:
                updated = buff + buff.update
                buff.update = None
                memo[buff] = updated
                module._buffers[buffer_key] = updated

    # Then, recurse for each submodule
    for module_key in module._modules:
        module._modules[module_key] = update_module(
            module._modules[module_key],
            updates=None,
            memo=memo,
        )

    # Finally, rebuild the flattened parameters for RNNs
    # See this issue for more details:
    # https://github.com/learnables/learn2learn/issues/139
    if hasattr(module, 'flatten_parameters'):
        module._apply(lambda x: x)
    return module


# ------------------------------------------------------------------------- learn2learn/algorithms/base_learner.py
class BaseLearner(nn.Module):

    def __init__(self, module=None):
        super(BaseLearner, self).__init__()
        self.module = module

    def __getattr__(self, attr):
        try:
            return super(BaseLearner, self).__getattr__(attr)
        except AttributeError:
            return getattr(self.__dict__['_modules']['module'], attr)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


# --------------------------------------------------------------------------------- learn2learn/algorithms/maml.py
SELF_CHECK_STEPS = 60

_BUG = {"name": None}  # (port) the variant being built; the library function has no argument for it


def maml_update(model, lr, grads=None):
    """Performs a MAML update on model using grads and lr (re-routes the Python object, no in-place operation)."""
    if grads is not None:
        params = list(model.parameters())
        if not len(grads) == len(list(params)):
            msg = 'WARNING:maml_update(): Parameters and gradients have different length. ('
            msg += str(len(params)) + ' vs ' + str(len(grads)) + ')'
            print(msg)
        for p, g in zip(params, grads):
            if g is not None:
                if _BUG["name"] == "inner_update_ascends":
                    p.update = lr * g
                else:
                    p.update = - lr * g
    return update_module(model)


class MAML(BaseLearner):
    """High-level implementation of *Model-Agnostic Meta-Learning* (``clone()`` and ``adapt()``)."""

    def __init__(self,
                 model,
                 lr,
                 first_order=False,
                 allow_unused=None,
                 allow_nograd=False):
        super(MAML, self).__init__()
        self.module = model
        self.lr = lr
        self.first_order = first_order
        self.allow_nograd = allow_nograd
        if allow_unused is None:
            allow_unused = allow_nograd
        self.allow_unused = allow_unused

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def adapt(self,
              loss,
              first_order=None,
              allow_unused=None,
              allow_nograd=None):
        """Takes a gradient step on the loss and updates the cloned parameters in place."""
        if first_order is None:
            first_order = self.first_order
        if allow_unused is None:
            allow_unused = self.allow_unused
        if allow_nograd is None:
            allow_nograd = self.allow_nograd
        second_order = not first_order

        if allow_nograd:
            # Compute relevant gradients
            diff_params = [p for p in self.module.parameters() if p.requires_grad]
            grad_params = grad(loss,
                               diff_params,
                               retain_graph=second_order,
                               create_graph=second_order,
                               allow_unused=allow_unused)
            gradients = []
            grad_counter = 0

            # Handles gradients for non-differentiable parameters
            for param in self.module.parameters():
                if param.requires_grad:
                    gradient = grad_params[grad_counter]
                    grad_counter += 1
                else:
                    gradient = None
                gradients.append(gradient)
        else:
            try:
                gradients = grad(loss,
                                 self.module.parameters(),
                                 retain_graph=second_order,
                                 create_graph=second_order,
                                 allow_unused=allow_unused)
            except RuntimeError:
                traceback.print_exc()
                print('learn2learn: Maybe try with allow_nograd=True and/or allow_unused=True ?')

        # Update the module
        self.module = maml_update(self.module, self.lr, gradients)

    def clone(self, first_order=None, allow_unused=None, allow_nograd=None):
        """Returns a `MAML`-wrapped copy of the module whose parameters and buffers are `torch.clone`d."""
        if first_order is None:
            first_order = self.first_order
        if allow_unused is None:
            allow_unused = self.allow_unused
        if allow_nograd is None:
            allow_nograd = self.allow_nograd
        return MAML(clone_module(self.module),
                    lr=self.lr,
                    first_order=first_order,
                    allow_unused=allow_unused,
                    allow_nograd=allow_nograd)


# --------------------------------------------------------------------------- torchmeta/toy/sinusoid.py (abridged)
class Sinusoid:
    def __init__(self, num_samples_per_task, num_tasks=1000000, noise_std=None, seed=0):
        self.num_samples_per_task = num_samples_per_task
        self.num_tasks = num_tasks
        self.noise_std = noise_std
        self.np_random = np.random.RandomState(seed)  # (port) MetaDataset.seed

        self._input_range = np.array([-5.0, 5.0])
        self._amplitude_range = np.array([0.1, 5.0])
        self._phase_range = np.array([0, np.pi])

        self._amplitudes = None
        self._phases = None

    @property
    def amplitudes(self):
        if self._amplitudes is None:
            self._amplitudes = self.np_random.uniform(self._amplitude_range[0],
                self._amplitude_range[1], size=self.num_tasks)
        return self._amplitudes

    @property
    def phases(self):
        if self._phases is None:
            self._phases = self.np_random.uniform(self._phase_range[0],
                self._phase_range[1], size=self.num_tasks)
        return self._phases

    def __len__(self):
        return self.num_tasks

    def __getitem__(self, index):
        # SinusoidTask: the inputs and targets of one task
        amplitude, phase = self.amplitudes[index], self.phases[index]
        _inputs = self.np_random.uniform(self._input_range[0], self._input_range[1],
            size=(self.num_samples_per_task, 1))
        _targets = amplitude * np.sin(_inputs - phase)
        if (self.noise_std is not None) and (self.noise_std > 0.):
            _targets += self.noise_std * self.np_random.randn(self.num_samples_per_task, 1)
        return _inputs, _targets


def batch_meta_loader(tasksets, batch_size, generator):
    """(port) BatchMetaDataLoader(tasksets, batch_size=batch_size): shuffled tasks, stacked into [B, N, 1]."""
    order = torch.randperm(len(tasksets), generator=generator).tolist()
    for i in range(0, len(order), batch_size):
        tasks = [tasksets[j] for j in order[i:i + batch_size]]
        yield (torch.from_numpy(np.stack([t[0] for t in tasks])), torch.from_numpy(np.stack([t[1] for t in tasks])))


# ------------------------------------------------------------------------------------------ examples/maml_sine.py
class SineModel(nn.Module):

    def __init__(self, dim):
        super().__init__()
        self.hidden1 = nn.Linear(1, dim)
        self.hidden2 = nn.Linear(dim, dim)
        self.hidden3 = nn.Linear(dim, 1)

    def forward(self, x):
        x = nn.functional.relu(self.hidden1(x))
        x = nn.functional.relu(self.hidden2(x))
        x = self.hidden3(x)
        return x


def _build(seed, bug=None,
        shots=10,
        tasks_per_batch=16,
        num_tasks=16000,  # (port) 160000
        adapt_lr=0.01,
        meta_lr=0.01,  # (port) 0.001
        adapt_steps=5,
        hidden_dim=32,
):
    _BUG["name"] = bug
    torch.manual_seed(seed)
    # load the dataset
    tasksets = Sinusoid(num_samples_per_task=2*shots, num_tasks=num_tasks, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    st = {"loader": batch_meta_loader(tasksets, tasks_per_batch, generator)}

    # create the model
    model = SineModel(dim=hidden_dim)
    maml = MAML(model, lr=adapt_lr, first_order=False, allow_unused=True)
    opt = optim.Adam(maml.parameters(), meta_lr)
    lossfn = nn.MSELoss(reduction='mean')

    def meta_loss(batch):
        _BUG["name"] = bug
        meta_train_loss = 0.0

        # for each task in the batch
        effective_batch_size = batch[0].shape[0]
        for i in range(effective_batch_size):
            learner = maml.clone()

            # divide the data into support and query sets
            train_inputs, train_targets = batch[0][i].float(), batch[1][i].float()
            x_support, y_support = train_inputs[::2], train_targets[::2]
            if bug == "query_targets_from_support":
                x_query, y_query = train_inputs[1::2], train_targets[::2]
            else:
                x_query, y_query = train_inputs[1::2], train_targets[1::2]

            for _ in range(adapt_steps): # adaptation_steps
                support_preds = learner(x_support)
                support_loss=lossfn(support_preds, y_support)
                learner.adapt(support_loss)

            query_preds = learner(x_query)
            query_loss = lossfn(query_preds, y_query)
            meta_train_loss += query_loss

        meta_train_loss = meta_train_loss / effective_batch_size
        return meta_train_loss

    def train_step():
        # one iteration of: for iter, batch in enumerate(dataloader)
        try:
            batch = next(st["loader"])
        except StopIteration:
            st["loader"] = batch_meta_loader(tasksets, tasks_per_batch, generator)
            batch = next(st["loader"])
        meta_train_loss = meta_loss(batch)

        if bug == "zero_grad_after_backward":
            meta_train_loss.backward()
            opt.zero_grad()
            opt.step()
        else:
            opt.zero_grad()
            meta_train_loss.backward()
            opt.step()
        return meta_train_loss.item()

    eval_tasks = Sinusoid(num_samples_per_task=2*shots, num_tasks=tasks_per_batch, seed=seed + 1)
    eval_batch = next(batch_meta_loader(eval_tasks, tasks_per_batch, torch.Generator().manual_seed(seed + 1)))

    def eval_fn(_model, _batch=None):
        return float(meta_loss(eval_batch).detach())

    first = next(batch_meta_loader(eval_tasks, tasks_per_batch, torch.Generator().manual_seed(seed + 2)))
    batch = (first[0][0].float()[1::2], first[1][0].float()[1::2])
    return Program(name="learn2learn_maml_sine", model=maml, batch=batch, loss_fn=lossfn, optimizer=opt,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the query targets sliced with the support's ``[::2]`` (classic slicing slip): each query input is scored
    # against the target of its neighbouring support point.
    Bug("query_targets_from_support", functools.partial(_build, bug="query_targets_from_support"),
        "learning_ledger", ("TASK",)),
    # ``p.update = lr * g`` in ``maml_update`` (classic sign slip): every adaptation climbs the support loss, and the
    # meta-parameters are trained for what follows that ascent.
    Bug("inner_update_ascends", functools.partial(_build, bug="inner_update_ascends"), "learning_ledger",
        ("OBJECTIVE",)),
    # opt.zero_grad() between the backward and the step (classic): the meta-gradient is erased before it is applied.
    # A whole-model step slip: declared by its mechanism (README rule 6).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
