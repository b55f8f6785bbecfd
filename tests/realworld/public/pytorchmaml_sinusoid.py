# ruff: noqa: PLR0402, UP008, UP030, UP032, C408, B006, UP028, TRY004, UP004, B008
"""Model-Agnostic Meta-Learning on sinusoid regression, from Tristan Deleu's pytorch-maml (with the torchmeta pieces
it runs on): a ``MetaMLPModel`` 1-40-40-1 whose ``forward`` takes an optional dict of parameters; per task one
inner gradient step of size 0.1 on the MSE of 5 support points (``gradient_update_parameters`` with
``create_graph=True``: second-order MAML), the outer MSE of the adapted parameters on 15 query points averaged over a
batch of 25 tasks, Adam 1e-3 on the meta-parameters.

Source: https://github.com/tristandeleu/pytorch-maml
Commit: 44104272a0140b35e2223ba68750e7e715315653
Files: ``train.py`` (arguments and loop), ``maml/metalearners/maml.py`` (``ModelAgnosticMetaLearning``:
``get_outer_loss``, ``adapt``, ``train_iter``), ``maml/model.py`` (``MetaMLPModel``, ``ModelMLPSinusoid``),
``maml/datasets.py`` (the ``sinusoid`` benchmark), ``maml/utils.py`` (``tensors_to_device``, ``ToTensor1D``)
(+ torchmeta, https://github.com/tristandeleu/pytorch-meta at d55d89ebd47f340180267106bde3e4b723f23762:
``torchmeta/modules/`` (``MetaModule``, ``MetaLinear``, ``MetaSequential``), ``torchmeta/utils/gradient_based.py``
(``gradient_update_parameters``), ``torchmeta/toy/sinusoid.py`` (``Sinusoid``, ``SinusoidTask``),
``torchmeta/utils/data/dataloader.py`` (``BatchMetaCollate``))
License: MIT (Copyright (c) 2019 Tristan Deleu; full text in LICENSES/tristandeleu-pytorch-maml.txt; torchmeta: MIT,
Copyright (c) 2019-2020 Tristan Deleu, LICENSES/tristandeleu-pytorch-meta.txt)
Domain: meta-learning (second-order MAML, few-shot regression)

Kept as written: ``MetaModule`` (``meta_named_parameters``, ``get_subdict``), ``MetaLinear``, ``MetaSequential``,
``gradient_update_parameters``, ``MetaMLPModel``, ``ModelMLPSinusoid(hidden_sizes=[40, 40])``, ``Sinusoid`` /
``SinusoidTask`` (amplitude in [0.1, 5], phase in [0, pi], inputs uniform in [-5, 5], no noise, ``ToTensor1D``
transforms), ``BatchMetaCollate`` over ``default_collate``, ``ModelAgnosticMetaLearning`` (``get_outer_loss``,
``adapt`` with ``self.model.zero_grad()`` before each inner update, ``first_order=(not self.model.training) or
first_order``, scalar ``step_size`` tensor), train.py's defaults for ``--dataset sinusoid`` (``num_shots`` 5,
``num_shots_test`` 15, ``batch_size`` 25, ``num_steps`` 1, ``step_size`` 0.1, ``meta_lr`` 0.001, ``F.mse_loss``,
Adam over ``benchmark.model.parameters()``).

Deviations from the original:
- torchmeta is not installed: the pieces listed above are written out (only what the sinusoid benchmark uses; the
  ``MetaDataset`` base keeps its ``np_random``, seeded with ``seed``). ``ClassSplitter(shuffle=True,
  num_train_per_class=5, num_test_per_class=15)`` is written as a split of each task's 20 points into the first 5
  (train) and the last 15 (test) of a permutation drawn from a ``RandomState(seed)`` (torchmeta seeds that permutation
  with ``hash(task)``, which differs from run to run; the points are i.i.d. either way).
- ``BatchMetaDataLoader`` is torch's ``DataLoader`` with ``BatchMetaCollate(default_collate)``, ``shuffle=True`` with a
  ``torch.Generator`` seeded from ``seed``, no workers, no pinned memory; ``num_tasks`` 1000000 -> 100000.
- ``train_iter`` is a generator that yields each batch's results between the outer loss and its backward; here one
  ``train_step`` is one pass of its loop body (``zero_grad``, ``get_outer_loss``, backward, step) and returns the
  mean outer loss. The epochs, ``evaluate`` on the validation tasks, tqdm, logging, folders and ``torch.save`` are
  dropped; ``eval_fn`` is the mean outer loss (after adaptation) on one fixed batch of 25 other tasks, computed as
  ``evaluate_iter`` computes it (``model.eval()``, hence first-order adaptation).
- the Program's model is the ``MetaMLPModel``, its batch the query set of the first task of the first batch, its
  ``loss_fn`` ``F.mse_loss`` (the model without adapted parameters: what the meta-parameters predict before adaptation).
- the classification-only lines of ``get_outer_loss`` and ``adapt`` (accuracies before and after adaptation) are left
  out: the sinusoid targets are floating point, so they never run.
- the device is the CPU; the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run
  as written.
"""

from __future__ import annotations

import functools
import pathlib
import re
import sys
import warnings
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import default_collate
from torch.utils.data.dataset import Dataset as TorchDataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

NUM_TASKS = 100000  # (port) 1000000


# ---- torchmeta/modules/module.py ----------------------------------------------------------------------------------

class MetaModule(nn.Module):
    """
    Base class for PyTorch meta-learning modules. These modules accept an
    additional argument `params` in their `forward` method.
    """
    def __init__(self):
        super(MetaModule, self).__init__()
        self._children_modules_parameters_cache = dict()

    def meta_named_parameters(self, prefix='', recurse=True):
        gen = self._named_members(
            lambda module: module._parameters.items()
            if isinstance(module, MetaModule) else [],
            prefix=prefix, recurse=recurse)
        for elem in gen:
            yield elem

    def meta_parameters(self, recurse=True):
        for name, param in self.meta_named_parameters(recurse=recurse):
            yield param

    def get_subdict(self, params, key=None):
        if params is None:
            return None

        all_names = tuple(params.keys())
        if (key, all_names) not in self._children_modules_parameters_cache:
            if key is None:
                self._children_modules_parameters_cache[(key, all_names)] = all_names

            else:
                key_escape = re.escape(key)
                key_re = re.compile(r'^{0}\.(.+)'.format(key_escape))

                self._children_modules_parameters_cache[(key, all_names)] = [
                    key_re.sub(r'\1', k) for k in all_names if key_re.match(k) is not None]

        names = self._children_modules_parameters_cache[(key, all_names)]
        if not names:
            warnings.warn('Module `{0}` has no parameter corresponding to the '
                          'submodule named `{1}` in the dictionary `params` '
                          'provided as an argument to `forward()`. Using the '
                          'default parameters for this submodule. The list of '
                          'the parameters in `params`: [{2}].'.format(
                          self.__class__.__name__, key, ', '.join(all_names)),
                          stacklevel=2)
            return None

        return OrderedDict([(name, params[f'{key}.{name}']) for name in names])


# ---- torchmeta/modules/linear.py, container.py --------------------------------------------------------------------

class MetaLinear(nn.Linear, MetaModule):
    __doc__ = nn.Linear.__doc__

    def forward(self, input, params=None):
        if params is None:
            params = OrderedDict(self.named_parameters())
        bias = params.get('bias', None)
        return F.linear(input, params['weight'], bias)


class MetaSequential(nn.Sequential, MetaModule):
    __doc__ = nn.Sequential.__doc__

    def forward(self, input, params=None):
        for name, module in self._modules.items():
            if isinstance(module, MetaModule):
                input = module(input, params=self.get_subdict(params, name))
            elif isinstance(module, nn.Module):
                input = module(input)
            else:
                raise TypeError('The module must be either a torch module '
                    '(inheriting from `nn.Module`), or a `MetaModule`. '
                    'Got type: `{0}`'.format(type(module)))
        return input


# ---- torchmeta/utils/gradient_based.py ----------------------------------------------------------------------------

def gradient_update_parameters(model,
                               loss,
                               params=None,
                               step_size=0.5,
                               first_order=False,
                               bug=None):
    if not isinstance(model, MetaModule):
        raise ValueError('The model must be an instance of `torchmeta.modules.'
                         'MetaModule`, got `{0}`'.format(type(model)))

    if params is None:
        params = OrderedDict(model.meta_named_parameters())

    grads = torch.autograd.grad(loss,
                                params.values(),
                                create_graph=not first_order)

    updated_params = OrderedDict()

    if isinstance(step_size, (dict, OrderedDict)):
        for (name, param), grad in zip(params.items(), grads):
            updated_params[name] = param - step_size[name] * grad

    else:
        for (name, param), grad in zip(params.items(), grads):
            if bug == "inner_update_ascends":
                updated_params[name] = param + step_size * grad
            else:
                updated_params[name] = param - step_size * grad

    return updated_params


# ---- torchmeta/toy/sinusoid.py (+ the Task / MetaDataset bases it uses) -------------------------------------------

class Task(TorchDataset):
    def __init__(self, index, num_classes):
        self.index = index
        self.num_classes = num_classes


class SubsetTask(Task):
    def __init__(self, dataset, indices):
        super(SubsetTask, self).__init__(dataset.index, dataset.num_classes)
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, index):
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)


class ClassSplitter:
    """(port) torchmeta's ``ClassSplitter`` for a regression task: one class holding every point, the points
    permuted by a seeded generator, the first ``num_train_per_class`` to ``train``, the next to ``test``."""

    def __init__(self, shuffle=True, num_train_per_class=None, num_test_per_class=None, random_state_seed=0):
        self.shuffle = shuffle
        self.splits = OrderedDict([('train', num_train_per_class), ('test', num_test_per_class)])
        self.np_random = np.random.RandomState(seed=random_state_seed)

    def __call__(self, task):
        num_samples = len(task)
        dataset_indices = self.np_random.permutation(num_samples) if self.shuffle else np.arange(num_samples)
        out, ptr = OrderedDict(), 0
        for split, num_split in self.splits.items():
            out[split] = SubsetTask(task, list(dataset_indices[ptr:ptr + num_split]))
            ptr += num_split
        return out


class Sinusoid:
    def __init__(self, num_samples_per_task, num_tasks=1000000,
                 noise_std=None, transform=None, target_transform=None,
                 dataset_transform=None, seed=None):
        self.target_transform = target_transform
        self.dataset_transform = dataset_transform
        self.np_random = np.random.RandomState(seed=seed)  # (port) MetaDataset.seed()
        self.num_samples_per_task = num_samples_per_task
        self.num_tasks = num_tasks
        self.noise_std = noise_std
        self.transform = transform

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
        amplitude, phase = self.amplitudes[index], self.phases[index]
        task = SinusoidTask(index, amplitude, phase, self._input_range,
            self.noise_std, self.num_samples_per_task, self.transform,
            self.target_transform, np_random=self.np_random)

        if self.dataset_transform is not None:
            task = self.dataset_transform(task)

        return task


class SinusoidTask(Task):
    def __init__(self, index, amplitude, phase, input_range, noise_std,
                 num_samples, transform=None, target_transform=None,
                 np_random=None):
        super(SinusoidTask, self).__init__(index, None) # Regression task
        self.amplitude = amplitude
        self.phase = phase
        self.input_range = input_range
        self.num_samples = num_samples
        self.noise_std = noise_std

        self.transform = transform
        self.target_transform = target_transform

        if np_random is None:
            np_random = np.random.RandomState(None)

        self._inputs = np_random.uniform(input_range[0], input_range[1],
            size=(num_samples, 1))
        self._targets = amplitude * np.sin(self._inputs - phase)
        if (noise_std is not None) and (noise_std > 0.):
            self._targets += noise_std * np_random.randn(num_samples, 1)

    def __len__(self):
        return self.num_samples

    def __getitem__(self, index):
        input, target = self._inputs[index], self._targets[index]

        if self.transform is not None:
            input = self.transform(input)

        if self.target_transform is not None:
            target = self.target_transform(target)

        return (input, target)


# ---- torchmeta/utils/data/dataloader.py ---------------------------------------------------------------------------

class BatchMetaCollate(object):

    def __init__(self, collate_fn):
        super().__init__()
        self.collate_fn = collate_fn

    def collate_task(self, task):
        if isinstance(task, TorchDataset):
            return self.collate_fn([task[idx] for idx in range(len(task))])
        elif isinstance(task, OrderedDict):
            return OrderedDict([(key, self.collate_task(subtask))
                for (key, subtask) in task.items()])
        else:
            raise NotImplementedError()

    def __call__(self, batch):
        return self.collate_fn([self.collate_task(task) for task in batch])


# ---- maml/utils.py ------------------------------------------------------------------------------------------------

def tensors_to_device(tensors, device=torch.device('cpu')):
    """Place a collection of tensors in a specific device"""
    if isinstance(tensors, torch.Tensor):
        return tensors.to(device=device)
    elif isinstance(tensors, (list, tuple)):
        return type(tensors)(tensors_to_device(tensor, device=device)
            for tensor in tensors)
    elif isinstance(tensors, (dict, OrderedDict)):
        return type(tensors)([(name, tensors_to_device(tensor, device=device))
            for (name, tensor) in tensors.items()])
    else:
        raise NotImplementedError()


class ToTensor1D(object):
    """Convert a `numpy.ndarray` to tensor. Unlike `ToTensor` from torchvision,
    this converts numpy arrays regardless of the number of dimensions.

    Converts automatically the array to `float32`.
    """
    def __call__(self, array):
        return torch.from_numpy(array.astype('float32'))

    def __repr__(self):
        return self.__class__.__name__ + '()'


# ---- maml/model.py ------------------------------------------------------------------------------------------------

class MetaMLPModel(MetaModule):
    """Multi-layer Perceptron architecture from [1]."""
    def __init__(self, in_features, out_features, hidden_sizes):
        super(MetaMLPModel, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.hidden_sizes = hidden_sizes

        layer_sizes = [in_features] + hidden_sizes
        self.features = MetaSequential(OrderedDict([('layer{0}'.format(i + 1),
            MetaSequential(OrderedDict([
                ('linear', MetaLinear(hidden_size, layer_sizes[i + 1], bias=True)),
                ('relu', nn.ReLU())
            ]))) for (i, hidden_size) in enumerate(layer_sizes[:-1])]))
        self.classifier = MetaLinear(hidden_sizes[-1], out_features, bias=True)

    def forward(self, inputs, params=None):
        features = self.features(inputs, params=self.get_subdict(params, 'features'))
        logits = self.classifier(features, params=self.get_subdict(params, 'classifier'))
        return logits


def ModelMLPSinusoid(hidden_sizes=[40, 40]):
    return MetaMLPModel(1, 1, hidden_sizes)


# ---- maml/metalearners/maml.py ------------------------------------------------------------------------------------

class ModelAgnosticMetaLearning(object):
    """Meta-learner class for Model-Agnostic Meta-Learning [1]."""
    def __init__(self, model, optimizer=None, step_size=0.1, first_order=False,
                 learn_step_size=False, per_param_step_size=False,
                 num_adaptation_steps=1, scheduler=None,
                 loss_function=F.cross_entropy, device=None, bug=None):
        self.model = model.to(device=device)
        self.optimizer = optimizer
        self.step_size = step_size
        self.first_order = first_order
        self.num_adaptation_steps = num_adaptation_steps
        self.scheduler = scheduler
        self.loss_function = loss_function
        self.device = device
        self.bug = bug

        if per_param_step_size:
            self.step_size = OrderedDict((name, torch.tensor(step_size,
                dtype=param.dtype, device=self.device,
                requires_grad=learn_step_size)) for (name, param)
                in model.meta_named_parameters())
        else:
            self.step_size = torch.tensor(step_size, dtype=torch.float32,
                device=self.device, requires_grad=learn_step_size)

        if (self.optimizer is not None) and learn_step_size:
            self.optimizer.add_param_group({'params': self.step_size.values()
                if per_param_step_size else [self.step_size]})

    def get_outer_loss(self, batch):
        if 'test' not in batch:
            raise RuntimeError('The batch does not contain any test dataset.')

        _, test_targets = batch['test']
        num_tasks = test_targets.size(0)
        is_classification_task = (not test_targets.dtype.is_floating_point)
        results = {
            'num_tasks': num_tasks,
            'inner_losses': np.zeros((self.num_adaptation_steps,
                num_tasks), dtype=np.float32),
            'outer_losses': np.zeros((num_tasks,), dtype=np.float32),
            'mean_outer_loss': 0.
        }

        test_inputs_all, test_targets_all = batch['test']
        if self.bug == "test_targets_rolled":
            test_targets_all = torch.roll(test_targets_all, 1, dims=0)

        mean_outer_loss = torch.tensor(0., device=self.device)
        for task_id, (train_inputs, train_targets, test_inputs, test_targets) \
                in enumerate(zip(*batch['train'], test_inputs_all, test_targets_all)):
            params, adaptation_results = self.adapt(train_inputs, train_targets,
                is_classification_task=is_classification_task,
                num_adaptation_steps=self.num_adaptation_steps,
                step_size=self.step_size, first_order=self.first_order)

            results['inner_losses'][:, task_id] = adaptation_results['inner_losses']

            with torch.set_grad_enabled(self.model.training):
                if self.bug == "adapted_params_dropped":
                    test_logits = self.model(test_inputs)
                else:
                    test_logits = self.model(test_inputs, params=params)
                outer_loss = self.loss_function(test_logits, test_targets)
                results['outer_losses'][task_id] = outer_loss.item()
                mean_outer_loss += outer_loss

        mean_outer_loss.div_(num_tasks)
        results['mean_outer_loss'] = mean_outer_loss.item()

        return mean_outer_loss, results

    def adapt(self, inputs, targets, is_classification_task=None,
              num_adaptation_steps=1, step_size=0.1, first_order=False):
        if is_classification_task is None:
            is_classification_task = (not targets.dtype.is_floating_point)
        params = None

        results = {'inner_losses': np.zeros(
            (num_adaptation_steps,), dtype=np.float32)}

        for _step in range(num_adaptation_steps):
            logits = self.model(inputs, params=params)
            inner_loss = self.loss_function(logits, targets)
            results['inner_losses'][_step] = inner_loss.item()

            self.model.zero_grad()
            params = gradient_update_parameters(self.model, inner_loss,
                step_size=step_size, params=params,
                first_order=(not self.model.training) or first_order, bug=self.bug)

        return params, results

    def train_step(self, dataloader_iter):
        """(port) one pass of ``train_iter``'s loop body."""
        self.model.train()
        batch = next(dataloader_iter)

        self.optimizer.zero_grad()

        batch = tensors_to_device(batch, device=self.device)
        outer_loss, results = self.get_outer_loss(batch)

        outer_loss.backward()
        self.optimizer.step()
        return results['mean_outer_loss']


# ---- maml/datasets.py (sinusoid) and train.py ---------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    num_shots, num_shots_test, batch_size = 5, 15, 25
    device = torch.device('cpu')

    dataset_transform = ClassSplitter(shuffle=True,
                                      num_train_per_class=num_shots,
                                      num_test_per_class=num_shots_test,
                                      random_state_seed=seed)
    transform = ToTensor1D()

    meta_train_dataset = Sinusoid(num_shots + num_shots_test,
                                  num_tasks=NUM_TASKS,
                                  transform=transform,
                                  target_transform=transform,
                                  dataset_transform=dataset_transform, seed=seed)
    meta_val_dataset = Sinusoid(num_shots + num_shots_test,
                                num_tasks=NUM_TASKS,
                                transform=transform,
                                target_transform=transform,
                                dataset_transform=dataset_transform, seed=seed + 1)

    model = ModelMLPSinusoid(hidden_sizes=[40, 40])
    loss_function = F.mse_loss

    meta_train_dataloader = DataLoader(meta_train_dataset, batch_size=batch_size, shuffle=True,
                                       collate_fn=BatchMetaCollate(default_collate),
                                       generator=torch.Generator().manual_seed(seed))
    val_batch = BatchMetaCollate(default_collate)([meta_val_dataset[i] for i in range(batch_size)])

    meta_optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    metalearner = ModelAgnosticMetaLearning(model,
                                            meta_optimizer,
                                            first_order=False,
                                            num_adaptation_steps=1,
                                            step_size=0.1,
                                            loss_function=loss_function,
                                            device=device, bug=bug)

    st = {"it": iter(meta_train_dataloader)}
    first = next(iter(DataLoader(meta_train_dataset, batch_size=batch_size, shuffle=True,
                                 collate_fn=BatchMetaCollate(default_collate),
                                 generator=torch.Generator().manual_seed(seed + 7))))
    test_inputs, test_targets = first['test']
    batch = (test_inputs[0], test_targets[0])

    def train_step():
        try:
            return metalearner.train_step(st["it"])
        except StopIteration:
            st["it"] = iter(meta_train_dataloader)
            return metalearner.train_step(st["it"])

    def eval_fn(net, _batch=None):
        was_training = net.training
        net.eval()  # evaluate_iter: model.eval(), so the adaptation is first-order
        _, results = metalearner.get_outer_loss(val_batch)
        net.train(was_training)
        return results['mean_outer_loss']

    return Program(name="pytorchmaml_sinusoid", model=model, batch=batch, loss_fn=F.mse_loss,
                   optimizer=meta_optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``param + step_size * grad`` in the inner update (classic sign slip): each task's adaptation climbs its own
    # support loss, and the meta-parameters are trained for what follows that ascent.
    Bug("inner_update_ascends", functools.partial(_build, bug="inner_update_ascends"), "learning_ledger",
        ("OBJECTIVE",)),
    # the query forward called as ``self.model(test_inputs)``, without ``params=params`` (classic): the adapted
    # parameters never reach the outer loss, so nothing the support set says about the task informs the prediction.
    Bug("adapted_params_dropped", functools.partial(_build, bug="adapted_params_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
    # the query targets rolled by one task against their inputs (classic misalignment): each task's adapted model is
    # scored on another sinusoid's values.
    Bug("test_targets_rolled", functools.partial(_build, bug="test_targets_rolled"), "learning_ledger", ("TASK",)),
]
