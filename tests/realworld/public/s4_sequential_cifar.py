# ruff: noqa: C414, PLR0402, UP032, B010, B009
"""The S4 repository's standalone training example: an ``S4Model`` backbone (linear encoder, a stack of residual
``S4D`` blocks, i.e. diagonal state-space convolution kernels computed from (A, B, C, dt) and applied by FFT, GELU,
dropout, a GLU output mixer, post-norm ``LayerNorm``, mean pooling over the sequence, linear decoder) trained on
sequential CIFAR-10 (each image flattened to a sequence of 1024 RGB pixels) with cross-entropy, AdamW whose S4 kernel
parameters (``log_dt``, ``log_A_real``, ``A_imag``) form their own group (lr <= 0.001, no weight decay, found by the
``_optim`` attribute the layer sets on them) and a per-epoch ``CosineAnnealingLR``.

Source: https://github.com/state-spaces/s4
Commit: e757cef57d89e448c413de7325ed5601aceaac13
Files: ``example.py`` (``S4Model``, ``setup_optimizer``, ``train``, ``eval``, the CIFAR-10 transform and the argparse
defaults), ``models/s4/s4d.py`` (``S4DKernel``, ``S4D``), ``src/models/nn/dropout.py`` (``DropoutNd``)
License: Apache-2.0 (full text in LICENSES/state-spaces-s4.txt)
Domain: sequence model (state-space model, sequence classification)

Kept as written: ``S4DKernel`` (log-uniform ``dt``, complex ``C`` stored as a real view, ``A = -exp(log_A_real) +
i A_imag``, the Vandermonde kernel, ``register`` setting ``_optim = {"weight_decay": 0.0, "lr": lr}``), ``S4D`` (FFT
convolution padded to 2L, the ``D`` skip, GELU, tied ``DropoutNd``, Conv1d + GLU), ``S4Model`` (post-norm, the
``nn.Dropout1d`` chosen for torch >= 1.12, ``lr=min(0.001, args.lr)`` for the kernels), ``setup_optimizer`` (AdamW
on the general parameters, one added group per unique ``_optim`` dict, CosineAnnealingLR over ``epochs``), the loop
body of ``train()`` (zero_grad, forward, ``CrossEntropyLoss``, backward, step) and ``eval()``'s accuracy, the
defaults lr 0.01, weight decay 0.01, dropout 0.1, 4 layers, post-norm, the CIFAR transform ``Normalize`` then
``x.view(3, L).t()``.

Deviations from the original:
- CIFAR-10 is not here (nor torchvision): the data are synthetic 3 x 8 x 8 "images" made from ``seed`` (L = 64):
  10 classes, each a fixed random smooth colour pattern, plus Gaussian noise; 640 training and 128 validation
  images (the 10% validation split of ``split_train_val``), normalized per channel, then ``x.view(3, L).t()`` as
  the transform does. The rule is learnable: the class is the pattern under the noise;
- sizes for 2 CPU cores: d_model 128 -> 32, d_state 64 -> 16, batch 64 -> 32, epochs 100 -> 20 (the cosine's
  period); the test loader, checkpointing, ``--resume`` and the tqdm bars are dropped;
- einops is not installed: ``repeat(torch.arange(N//2), 'n -> h n', h=H)`` is ``torch.arange(N//2).repeat(H, 1)``
  and ``DropoutNd``'s ``rearrange`` calls (only for ``transposed=False``, never used here) are ``movedim``;
- the epoch loop is unrolled: one ``train_step`` is one batch of ``train()`` (``model.train()`` and a new shuffle
  when an epoch starts, ``scheduler.step()`` when it ends); ``eval_fn`` is ``eval()`` on the validation split and
  returns the accuracy; the optimizer group printout is dropped;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn as nn
import torch.optim as optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

LR, WEIGHT_DECAY, EPOCHS, BATCH_SIZE = 0.01, 0.01, 20, 32
N_LAYERS, D_MODEL, D_STATE, DROPOUT, PRENORM = 4, 32, 16, 0.1, False
SIDE, N_TRAIN, N_VAL, N_CLASSES = 8, 640, 128, 10

dropout_fn = nn.Dropout1d  # example.py: torch >= 1.12


# src/models/nn/dropout.py
class DropoutNd(nn.Module):
    def __init__(self, p: float = 0.5, tie=True, transposed=True):
        """
        tie: tie dropout mask across sequence lengths (Dropout1d/2d/3d)
        """
        super().__init__()
        if p < 0 or p >= 1:
            raise ValueError("dropout probability has to be in [0, 1), " "but got {}".format(p))
        self.p = p
        self.tie = tie
        self.transposed = transposed
        self.binomial = torch.distributions.binomial.Binomial(probs=1-self.p)

    def forward(self, X):
        """X: (batch, dim, lengths...)."""
        if self.training:
            if not self.transposed: X = X.movedim(-1, 1)  # (port) rearrange 'b ... d -> b d ...'
            mask_shape = X.shape[:2] + (1,)*(X.ndim-2) if self.tie else X.shape
            mask = torch.rand(*mask_shape, device=X.device) < 1.-self.p
            X = X * mask * (1.0/(1-self.p))
            if not self.transposed: X = X.movedim(1, -1)  # (port) rearrange 'b d ... -> b ... d'
            return X
        return X


# models/s4/s4d.py
class S4DKernel(nn.Module):
    """Generate convolution kernel from diagonal SSM parameters."""

    def __init__(self, d_model, N=64, dt_min=0.001, dt_max=0.1, lr=None):
        super().__init__()
        # Generate dt
        H = d_model
        log_dt = torch.rand(H) * (
            math.log(dt_max) - math.log(dt_min)
        ) + math.log(dt_min)

        C = torch.randn(H, N // 2, dtype=torch.cfloat)
        self.C = nn.Parameter(torch.view_as_real(C))
        self.register("log_dt", log_dt, lr)

        log_A_real = torch.log(0.5 * torch.ones(H, N//2))
        A_imag = math.pi * torch.arange(N//2).repeat(H, 1)  # (port) einops repeat 'n -> h n'
        self.register("log_A_real", log_A_real, lr)
        self.register("A_imag", A_imag, lr)

    def forward(self, L):
        """
        returns: (..., c, L) where c is number of channels (default 1)
        """

        # Materialize parameters
        dt = torch.exp(self.log_dt) # (H)
        C = torch.view_as_complex(self.C) # (H N)
        A = -torch.exp(self.log_A_real) + 1j * self.A_imag # (H N)

        # Vandermonde multiplication
        dtA = A * dt.unsqueeze(-1)  # (H N)
        K = dtA.unsqueeze(-1) * torch.arange(L, device=A.device) # (H N L)
        C = C * (torch.exp(dtA)-1.) / A
        K = 2 * torch.einsum('hn, hnl -> hl', C, torch.exp(K)).real

        return K

    def register(self, name, tensor, lr=None):
        """Register a tensor with a configurable learning rate and 0 weight decay"""

        if lr == 0.0:
            self.register_buffer(name, tensor)
        else:
            self.register_parameter(name, nn.Parameter(tensor))

            optim = {"weight_decay": 0.0}
            if lr is not None: optim["lr"] = lr
            setattr(getattr(self, name), "_optim", optim)


class S4D(nn.Module):
    def __init__(self, d_model, d_state=64, dropout=0.0, transposed=True, **kernel_args):
        super().__init__()

        self.h = d_model
        self.n = d_state
        self.d_output = self.h
        self.transposed = transposed

        self.D = nn.Parameter(torch.randn(self.h))

        # SSM Kernel
        self.kernel = S4DKernel(self.h, N=self.n, **kernel_args)

        # Pointwise
        self.activation = nn.GELU()
        dropout_fn = DropoutNd
        self.dropout = dropout_fn(dropout) if dropout > 0.0 else nn.Identity()

        # position-wise output transform to mix features
        self.output_linear = nn.Sequential(
            nn.Conv1d(self.h, 2*self.h, kernel_size=1),
            nn.GLU(dim=-2),
        )

    def forward(self, u, **kwargs): # absorbs return_output and transformer src mask
        """ Input and output shape (B, H, L) """
        if not self.transposed: u = u.transpose(-1, -2)
        L = u.size(-1)

        # Compute SSM Kernel
        k = self.kernel(L=L) # (H L)

        # Convolution
        k_f = torch.fft.rfft(k, n=2*L) # (H L)
        u_f = torch.fft.rfft(u, n=2*L) # (B H L)
        y = torch.fft.irfft(u_f*k_f, n=2*L)[..., :L] # (B H L)

        # Compute D term in state space equation - essentially a skip connection
        y = y + u * self.D.unsqueeze(-1)

        y = self.dropout(self.activation(y))
        y = self.output_linear(y)
        if not self.transposed: y = y.transpose(-1, -2)
        return y, None # Return a dummy state to satisfy this repo's interface, but this can be modified


# example.py
class S4Model(nn.Module):

    def __init__(
        self,
        d_input,
        d_output=10,
        d_model=256,
        n_layers=4,
        dropout=0.2,
        prenorm=False,
    ):
        super().__init__()

        self.prenorm = prenorm

        # Linear encoder (d_input = 1 for grayscale and 3 for RGB)
        self.encoder = nn.Linear(d_input, d_model)

        # Stack S4 layers as residual blocks
        self.s4_layers = nn.ModuleList()
        self.norms = nn.ModuleList()
        self.dropouts = nn.ModuleList()
        for _ in range(n_layers):
            self.s4_layers.append(
                S4D(d_model, d_state=D_STATE, dropout=dropout, transposed=True, lr=min(0.001, LR))
            )
            self.norms.append(nn.LayerNorm(d_model))
            self.dropouts.append(dropout_fn(dropout))

        # Linear decoder
        self.decoder = nn.Linear(d_model, d_output)

    def forward(self, x):
        """
        Input x is shape (B, L, d_input)
        """
        x = self.encoder(x)  # (B, L, d_input) -> (B, L, d_model)

        x = x.transpose(-1, -2)  # (B, L, d_model) -> (B, d_model, L)
        for layer, norm, dropout in zip(self.s4_layers, self.norms, self.dropouts):
            # Each iteration of this loop will map (B, d_model, L) -> (B, d_model, L)

            z = x
            if self.prenorm:
                # Prenorm
                z = norm(z.transpose(-1, -2)).transpose(-1, -2)

            # Apply S4 block: we ignore the state input and output
            z, _ = layer(z)

            # Dropout on the output of the S4 block
            z = dropout(z)

            # Residual connection
            x = z + x

            if not self.prenorm:
                # Postnorm
                x = norm(x.transpose(-1, -2)).transpose(-1, -2)

        x = x.transpose(-1, -2)

        # Pooling: average pooling over the sequence length
        x = x.mean(dim=1)

        # Decode the outputs
        x = self.decoder(x)  # (B, d_model) -> (B, d_output)

        return x


def setup_optimizer(model, lr, weight_decay, epochs, bug=None):
    """
    S4 requires a specific optimizer setup.

    The S4 layer (A, B, C, dt) parameters typically
    require a smaller learning rate (typically 0.001), with no weight decay.

    The rest of the model can be trained with a higher learning rate (e.g. 0.004, 0.01)
    and weight decay (if desired).
    """

    # All parameters in the model
    all_parameters = list(model.parameters())

    # General parameters don't contain the special _optim key
    params = [p for p in all_parameters if not hasattr(p, "_optim")]

    # Create an optimizer with the general parameters
    optimizer = optim.AdamW(params, lr=lr, weight_decay=weight_decay)

    # Add parameters with special hyperparameters
    hps = [getattr(p, "_optim") for p in all_parameters if hasattr(p, "_optim")]
    hps = [
        dict(s) for s in sorted(list(dict.fromkeys(frozenset(hp.items()) for hp in hps)))
    ]  # Unique dicts
    if bug == "kernel_groups_not_added":
        hps = []
    for hp in hps:
        params = [p for p in all_parameters if getattr(p, "_optim", None) == hp]
        optimizer.add_param_group(
            {"params": params, **hp}
        )

    # Create a lr scheduler
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs)
    return optimizer, scheduler


def _synthetic_split(seed):
    """(port) 3 x 8 x 8 images: one smooth random colour pattern per class plus noise, as CIFAR's transform."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.randn(N_CLASSES, 3, 4, 4, generator=g)
    patterns = torch.nn.functional.interpolate(coarse, size=(SIDE, SIDE), mode="bilinear", align_corners=False)
    labels = torch.randint(0, N_CLASSES, (N_TRAIN + N_VAL,), generator=g)
    images = patterns[labels] + 0.8 * torch.randn(N_TRAIN + N_VAL, 3, SIDE, SIDE, generator=g)
    mean, std = images.mean(dim=(0, 2, 3), keepdim=True), images.std(dim=(0, 2, 3), keepdim=True)
    images = (images - mean) / std  # transforms.Normalize
    L = SIDE * SIDE
    x = images.view(-1, 3, L).transpose(1, 2)  # transforms.Lambda(lambda x: x.view(3, 1024).t())
    return (x[:N_TRAIN], labels[:N_TRAIN]), (x[N_TRAIN:], labels[N_TRAIN:])


def _build(seed, bug=None):
    torch.manual_seed(seed)
    (x_tr, y_tr), (x_va, y_va) = _synthetic_split(seed)
    trainset = torch.utils.data.TensorDataset(x_tr, y_tr)
    valset = torch.utils.data.TensorDataset(x_va, y_va)
    trainloader = torch.utils.data.DataLoader(trainset, batch_size=BATCH_SIZE, shuffle=True, num_workers=0,
                                              generator=torch.Generator().manual_seed(seed))
    valloader = torch.utils.data.DataLoader(valset, batch_size=BATCH_SIZE, shuffle=False, num_workers=0)
    model = S4Model(d_input=3, d_output=N_CLASSES, d_model=D_MODEL, n_layers=N_LAYERS, dropout=DROPOUT,
                    prenorm=PRENORM)
    criterion = nn.CrossEntropyLoss()
    optimizer, scheduler = setup_optimizer(model, lr=LR, weight_decay=WEIGHT_DECAY, epochs=EPOCHS, bug=bug)
    st = {"it": None, "batch_idx": 0}

    def train_step():
        if st["it"] is None:  # train(): an epoch starts
            model.train()
            st["it"] = iter(trainloader)
            st["batch_idx"] = 0
        inputs, targets = next(st["it"])
        if bug == "zero_grad_after_backward":
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
        optimizer.step()
        st["batch_idx"] += 1
        if st["batch_idx"] == len(trainloader):  # the epoch ends
            st["it"] = None
            scheduler.step()
        return loss.item()

    def eval_fn(model, _batch=None, dataloader=valloader):
        was = model.training
        model.eval()
        correct = 0
        total = 0
        with torch.no_grad():
            for inputs, targets in dataloader:
                outputs = model(inputs)
                _, predicted = outputs.max(1)
                total += targets.size(0)
                correct += predicted.eq(targets).sum().item()
        model.train(was)
        return 100.*correct/total

    batch = (x_tr[:BATCH_SIZE], y_tr[:BATCH_SIZE])
    return Program(name="s4_sequential_cifar", model=model, batch=batch, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the S4 kernel parameters (log_dt, log_A_real, A_imag: the ones carrying the ``_optim`` attribute)
    # are kept out of the general group and their own groups are never added, so they are never updated; C, D and
    # every other parameter train normally.
    Bug("kernel_groups_not_added", functools.partial(_build, bug="kernel_groups_not_added"), "four_structures",
        ("s4_layers.0.kernel",)),
    # classic: zero_grad moved after the backward, so every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
