# ruff: noqa: UP008, PLR0402
"""RealNVP density estimation as ikostrikov/pytorch-flows trains it with ``--flow realnvp --dataset MOONS``: five
blocks of an affine ``CouplingLayer`` (scale net with tanh, translate net with relu, alternating binary mask) followed
by a ``BatchNormFlow`` (batch statistics in training, running statistics in eval, its log-det), in a
``FlowSequential`` whose ``log_probs`` adds the standard-normal log density of ``u`` to the summed log-determinants;
orthogonal init of every Linear, Adam(lr 1e-4, weight_decay 1e-6), ``-model.log_probs(data).mean()`` per batch, and
at each epoch's end the BatchNormFlow momentum trick (momentum 0, one no-grad pass over the whole training set so the
running statistics are the data's, momentum back to 1).

Source: https://github.com/ikostrikov/pytorch-flows
Commit: bf12ed91b86867b38d74982f5e2d44c248604df9
Files: main.py (arguments, model construction for ``realnvp``, init, optimizer, ``train``, ``validate``),
flows.py (CouplingLayer, BatchNormFlow, FlowSequential), datasets/moons.py (MOONS)
License: MIT (Copyright (c) 2018 Ilya Kostrikov; full text in LICENSES/ikostrikov-pytorch-flows.txt)
Domain: generative model, normalizing flow (RealNVP coupling + batch-norm flow, maximum likelihood)

Kept as written: CouplingLayer (its unused ``init`` closure too), BatchNormFlow, FlowSequential (``forward`` in
``direct`` and ``inverse`` mode, ``log_probs``, ``sample``), main.py's ``realnvp`` construction (``mask =
torch.arange(0, num_inputs) % 2``, ``mask = 1 - mask`` after each block, num_blocks 5, num_hidden 64 for MOONS),
the orthogonal init loop, ``optim.Adam(model.parameters(), lr=args.lr, weight_decay=1e-6)`` with lr 1e-4, batch
size 100, ``train``'s loop body (``optimizer.zero_grad()``, ``loss = -model.log_probs(data, cond_data).mean()``,
``backward``, ``step``) and its end-of-epoch momentum pass, ``validate`` (``model.eval()``, summed negative
log-likelihood under ``no_grad``, divided by the number of points).

Deviations from the original:
- data: ``sklearn.datasets.make_moons(n_samples=30000, shuffle=True, noise=0.05)`` is written out in numpy (two half
  circles, shuffled, Gaussian noise 0.05) from ``numpy.random.RandomState(seed)``, and cut to 3000 points (the same
  80/10/10 split: 2400 / 300 / 300) for 2 CPU cores; one epoch is 24 batches.
- one ``train_step`` is one iteration of ``train``'s batch loop; after an epoch's last batch it also runs the
  end-of-epoch momentum pass ``train`` runs. The epoch loop's ``validate`` / early stopping / ``best_model`` copy,
  tqdm, tensorboardX, the moons plots and the final test are left out; ``eval_fn`` is ``validate`` on the batch it is
  given (returns the mean negative log-likelihood). No GPU, no ``num_workers``.
- argparse is replaced by its default values with ``--flow realnvp --dataset MOONS``; the ``cond`` (MNIST) branch
  is left out (``cond_data`` is always None); the other flows' branches and classes are not ported.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# ---------------------------------------------------------------- flows.py
class BatchNormFlow(nn.Module):
    """ An implementation of a batch normalization layer from
    Density estimation using Real NVP
    (https://arxiv.org/abs/1605.08803).
    """

    def __init__(self, num_inputs, momentum=0.0, eps=1e-5):
        super(BatchNormFlow, self).__init__()

        self.log_gamma = nn.Parameter(torch.zeros(num_inputs))
        self.beta = nn.Parameter(torch.zeros(num_inputs))
        self.momentum = momentum
        self.eps = eps

        self.register_buffer('running_mean', torch.zeros(num_inputs))
        self.register_buffer('running_var', torch.ones(num_inputs))

    def forward(self, inputs, cond_inputs=None, mode='direct'):
        if mode == 'direct':
            if self.training:
                self.batch_mean = inputs.mean(0)
                self.batch_var = (
                    inputs - self.batch_mean).pow(2).mean(0) + self.eps

                self.running_mean.mul_(self.momentum)
                self.running_var.mul_(self.momentum)

                self.running_mean.add_(self.batch_mean.data *
                                       (1 - self.momentum))
                self.running_var.add_(self.batch_var.data *
                                      (1 - self.momentum))

                mean = self.batch_mean
                var = self.batch_var
            else:
                mean = self.running_mean
                var = self.running_var

            x_hat = (inputs - mean) / var.sqrt()
            y = torch.exp(self.log_gamma) * x_hat + self.beta
            return y, (self.log_gamma - 0.5 * torch.log(var)).sum(
                -1, keepdim=True)
        else:
            if self.training:
                mean = self.batch_mean
                var = self.batch_var
            else:
                mean = self.running_mean
                var = self.running_var

            x_hat = (inputs - self.beta) / torch.exp(self.log_gamma)

            y = x_hat * var.sqrt() + mean

            return y, (-self.log_gamma + 0.5 * torch.log(var)).sum(
                -1, keepdim=True)


class CouplingLayer(nn.Module):
    """ An implementation of a coupling layer
    from RealNVP (https://arxiv.org/abs/1605.08803).
    """

    def __init__(self,
                 num_inputs,
                 num_hidden,
                 mask,
                 num_cond_inputs=None,
                 s_act='tanh',
                 t_act='relu',
                 bug=None):
        super(CouplingLayer, self).__init__()
        self.bug = bug

        self.num_inputs = num_inputs
        self.mask = mask

        activations = {'relu': nn.ReLU, 'sigmoid': nn.Sigmoid, 'tanh': nn.Tanh}
        s_act_func = activations[s_act]
        t_act_func = activations[t_act]

        if num_cond_inputs is not None:
            total_inputs = num_inputs + num_cond_inputs
        else:
            total_inputs = num_inputs

        self.scale_net = nn.Sequential(
            nn.Linear(total_inputs, num_hidden), s_act_func(),
            nn.Linear(num_hidden, num_hidden), s_act_func(),
            nn.Linear(num_hidden, num_inputs))
        self.translate_net = nn.Sequential(
            nn.Linear(total_inputs, num_hidden), t_act_func(),
            nn.Linear(num_hidden, num_hidden), t_act_func(),
            nn.Linear(num_hidden, num_inputs))

        def init(m):
            if isinstance(m, nn.Linear):
                m.bias.data.fill_(0)
                nn.init.orthogonal_(m.weight.data)

    def forward(self, inputs, cond_inputs=None, mode='direct'):
        mask = self.mask

        if self.bug == "conditioner_input_unmasked":
            # the mask not applied to the conditioner's input: the scale and shift of a coordinate depend on the
            # coordinate itself, so ``log_s.sum`` is no longer the Jacobian's log-determinant
            masked_inputs = inputs
        else:
            masked_inputs = inputs * mask
        if cond_inputs is not None:
            masked_inputs = torch.cat([masked_inputs, cond_inputs], -1)

        if mode == 'direct':
            log_s = self.scale_net(masked_inputs) * (1 - mask)
            t = self.translate_net(masked_inputs) * (1 - mask)
            s = torch.exp(log_s)
            if self.bug == "coupling_logdet_sign_flipped":
                # the inverse's log-determinant returned by the direct pass
                return inputs * s + t, -log_s.sum(-1, keepdim=True)
            return inputs * s + t, log_s.sum(-1, keepdim=True)
        else:
            log_s = self.scale_net(masked_inputs) * (1 - mask)
            t = self.translate_net(masked_inputs) * (1 - mask)
            s = torch.exp(-log_s)
            return (inputs - t) * s, -log_s.sum(-1, keepdim=True)


class FlowSequential(nn.Sequential):
    """ A sequential container for flows.
    In addition to a forward pass it implements a backward pass and
    computes log jacobians.
    """

    def forward(self, inputs, cond_inputs=None, mode='direct', logdets=None):
        """ Performs a forward or backward pass for flow modules.
        Args:
            inputs: a tuple of inputs and logdets
            mode: to run direct computation or inverse
        """
        self.num_inputs = inputs.size(-1)

        if logdets is None:
            logdets = torch.zeros(inputs.size(0), 1, device=inputs.device)

        assert mode in ['direct', 'inverse']
        if mode == 'direct':
            for module in self._modules.values():
                inputs, logdet = module(inputs, cond_inputs, mode)
                logdets += logdet
        else:
            for module in reversed(self._modules.values()):
                inputs, logdet = module(inputs, cond_inputs, mode)
                logdets += logdet

        return inputs, logdets

    def log_probs(self, inputs, cond_inputs = None):
        u, log_jacob = self(inputs, cond_inputs)
        log_probs = (-0.5 * u.pow(2) - 0.5 * math.log(2 * math.pi)).sum(
            -1, keepdim=True)
        return (log_probs + log_jacob).sum(-1, keepdim=True)

    def sample(self, num_samples=None, noise=None, cond_inputs=None):
        if noise is None:
            noise = torch.Tensor(num_samples, self.num_inputs).normal_()
        device = next(self.parameters()).device
        noise = noise.to(device)
        if cond_inputs is not None:
            cond_inputs = cond_inputs.to(device)
        samples = self.forward(noise, cond_inputs, mode='inverse')[0]
        return samples


# ---------------------------------------------------------------- datasets/moons.py (sklearn's make_moons written out)
def make_moons(n_samples, shuffle, noise, rng):
    n_samples_out = n_samples // 2
    n_samples_in = n_samples - n_samples_out
    outer_circ_x = np.cos(np.linspace(0, np.pi, n_samples_out))
    outer_circ_y = np.sin(np.linspace(0, np.pi, n_samples_out))
    inner_circ_x = 1 - np.cos(np.linspace(0, np.pi, n_samples_in))
    inner_circ_y = 1 - np.sin(np.linspace(0, np.pi, n_samples_in)) - .5
    X = np.vstack([np.append(outer_circ_x, inner_circ_x), np.append(outer_circ_y, inner_circ_y)]).T
    if shuffle:
        X = X[rng.permutation(n_samples)]
    X = X + rng.normal(scale=noise, size=X.shape)
    return X, None


class MOONS:
    class Data:
        def __init__(self, data):

            self.x = data.astype(np.float32)
            self.N = self.x.shape[0]

    def __init__(self, rng):

        trn, val, tst = load_data(rng)

        self.trn = self.Data(trn)
        self.val = self.Data(val)
        self.tst = self.Data(tst)

        self.n_dims = self.trn.x.shape[1]


def load_data(rng):
    x = make_moons(n_samples=3000, shuffle=True, noise=0.05, rng=rng)[0]
    return x[:2400], x[2400:2700], x[2700:]


# ---------------------------------------------------------------- main.py
def _build(seed, bug=None):
    args = types.SimpleNamespace(batch_size=100, test_batch_size=1000, epochs=1000, lr=0.0001, dataset='MOONS',
                                 flow='realnvp', no_cuda=True, cond=False, num_blocks=5, seed=seed,
                                 log_interval=1000)
    device = torch.device("cpu")

    torch.manual_seed(args.seed)

    dataset = MOONS(np.random.RandomState(args.seed))

    train_tensor = torch.from_numpy(dataset.trn.x)
    train_dataset = torch.utils.data.TensorDataset(train_tensor)
    num_cond_inputs = None

    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=True)

    num_inputs = dataset.n_dims
    num_hidden = {
        'POWER': 100,
        'GAS': 100,
        'HEPMASS': 512,
        'MINIBOONE': 512,
        'BSDS300': 512,
        'MOONS': 64,
        'MNIST': 1024
    }[args.dataset]

    modules = []

    mask = torch.arange(0, num_inputs) % 2
    mask = mask.to(device).float()

    for _ in range(args.num_blocks):
        modules += [
            CouplingLayer(
                num_inputs, num_hidden, mask, num_cond_inputs,
                s_act='tanh', t_act='relu', bug=bug),
            BatchNormFlow(num_inputs)
        ]
        mask = 1 - mask

    model = FlowSequential(*modules)

    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.orthogonal_(module.weight)
            if hasattr(module, 'bias') and module.bias is not None:
                module.bias.data.fill_(0)

    model.to(device)

    optimizer = optim.Adam(model.parameters(), lr=args.lr, weight_decay=1e-6)

    def train():
        """``train(epoch)``, yielding each batch's loss."""
        while True:
            model.train()
            train_loss = 0

            for batch_idx, data in enumerate(train_loader):
                if isinstance(data, list):
                    if len(data) > 1:
                        cond_data = data[1].float()
                        cond_data = cond_data.to(device)
                    else:
                        cond_data = None

                    data = data[0]
                data = data.to(device)
                optimizer.zero_grad()
                loss = -model.log_probs(data, cond_data).mean()
                train_loss += loss.item()
                loss.backward()
                optimizer.step()

                if batch_idx == len(train_loader) - 1:
                    # (port) the end of the epoch, as train() ends it
                    for module in model.modules():
                        if isinstance(module, BatchNormFlow):
                            module.momentum = 0

                    with torch.no_grad():
                        model(train_loader.dataset.tensors[0].to(data.device))

                    for module in model.modules():
                        if isinstance(module, BatchNormFlow):
                            module.momentum = 1

                yield loss.detach()

    steps = train()

    def loss_fn(outputs, _targets):
        """``-model.log_probs(data).mean()`` on the model's outputs (``u``, the summed log-determinants)."""
        u, log_jacob = outputs
        log_probs = (-0.5 * u.pow(2) - 0.5 * math.log(2 * math.pi)).sum(
            -1, keepdim=True)
        return -(log_probs + log_jacob).sum(-1, keepdim=True).mean()

    def eval_fn(model, batch):
        """``validate`` on one batch: the mean negative log-likelihood in eval mode."""
        was_training = model.training
        if bug != "validate_in_train_mode":
            model.eval()
        val_loss = 0
        data = batch[0]
        with torch.no_grad():
            val_loss += -model.log_probs(data, None).sum().item()  # sum up batch loss
        model.train(was_training)  # (port) the next epoch's train() sets train mode again
        return val_loss / data.size(0)

    batch = (torch.from_numpy(dataset.val.x[:args.batch_size]),)
    return Program(name="pytorchflows_realnvp", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=lambda: next(steps), eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the coupling layer's direct pass returns the inverse's log-determinant (``-log_s``); the likelihood
    # rewards contracting the data instead of spreading it to the base density.
    Bug("coupling_logdet_sign_flipped", functools.partial(_build, bug="coupling_logdet_sign_flipped"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: the binary mask not applied to the conditioner's input (``masked_inputs = inputs``); each
    # coordinate's scale and shift see the coordinate itself.
    # where re-declared in review (2026-12-07): a mask that lets an output read the input it transforms breaks the triangular
    # Jacobian, which OBJECTIVE's objective.log_det_mismatch confirms against autograd (its hint names the masks)
    Bug("conditioner_input_unmasked", functools.partial(_build, bug="conditioner_input_unmasked"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: ``validate`` without ``model.eval()``; BatchNormFlow normalizes the validation batch by its own
    # statistics instead of the training data's running statistics (and, while its momentum is 0, overwrites them).
    Bug("validate_in_train_mode", functools.partial(_build, bug="validate_in_train_mode"), "six_claims",
        ("EVALUATION",)),
]
