"""A denoising model "from scratch" on MNIST from unit 1 of the Hugging Face diffusion models class: a minimal
``BasicUNet`` (three 5x5 convolutions down with max-pooling, three up with nearest upsampling and additive skip
connections, SiLU) trained to recover the clean image from ``corrupt(x, amount)`` (a mix of the image with uniform
noise, the amount drawn uniformly per image), MSE to the clean image, Adam lr 1e-3, batch 128.

Source: https://github.com/huggingface/diffusion-models-class
Commit: 8243e35b69c2a87fb8ac2f24dc66355a99d14511
Files: unit1/02_diffusion_models_from_scratch.ipynb (cells 5-6 data, 10 ``corrupt``, 17 ``BasicUNet``, 24 the
training loop)
License: Apache-2.0 (full text in LICENSES/huggingface-diffusion-models-class.txt)
Domain: generative, diffusion-style denoising (predict the clean image from a noise mix)

Kept as written: ``corrupt``, ``BasicUNet`` (channel widths 32/64/64, kernel 5, padding 2, SiLU, MaxPool2d(2),
Upsample(scale_factor=2), the in-place ``x += h.pop()`` skips), ``nn.MSELoss()``, Adam at lr 1e-3, the loop body
(``torch.rand`` noise amounts, ``corrupt``, ``loss_fn(pred, x)``, ``opt.zero_grad()``, ``backward``, ``opt.step()``).

Deviations from the original:
- sizes for 2 CPU cores: ``batch_size`` 128 -> 16 (the network and the 28x28 images are unchanged);
- data: torchvision's MNIST (``ToTensor``, pixels in [0, 1]) is replaced by 640 synthetic 28x28 one-channel "digits"
  made from ``seed`` (a fixed pair of thick strokes per class, shifted by up to two pixels, with pixel noise), in
  [0, 1]; the DataLoader shuffles with a seeded generator;
- the device is the CPU; the ``diffusers`` imports (used only by the notebook's later sections), the plots, the
  prints and the sampling cells are left out;
- one ``train_step`` is one iteration of the epoch loop; the Program's batch is one fixed draw ``(noisy_x, x)`` made
  at build, ``loss_fn`` the loop's ``nn.MSELoss()``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_IMAGES = 640

# ---- unit1/02_diffusion_models_from_scratch.ipynb ----------------------------------------------------------------


def corrupt(x, amount):
  """Corrupt the input `x` by mixing it with noise according to `amount`"""
  noise = torch.rand_like(x)
  amount = amount.view(-1, 1, 1, 1) # Sort shape so broadcasting works
  return x*(1-amount) + noise*amount


class BasicUNet(nn.Module):
    """A minimal UNet implementation."""
    def __init__(self, in_channels=1, out_channels=1):
        super().__init__()
        self.down_layers = torch.nn.ModuleList([
            nn.Conv2d(in_channels, 32, kernel_size=5, padding=2),
            nn.Conv2d(32, 64, kernel_size=5, padding=2),
            nn.Conv2d(64, 64, kernel_size=5, padding=2),
        ])
        self.up_layers = torch.nn.ModuleList([
            nn.Conv2d(64, 64, kernel_size=5, padding=2),
            nn.Conv2d(64, 32, kernel_size=5, padding=2),
            nn.Conv2d(32, out_channels, kernel_size=5, padding=2),
        ])
        self.act = nn.SiLU() # The activation function
        self.downscale = nn.MaxPool2d(2)
        self.upscale = nn.Upsample(scale_factor=2)

    def forward(self, x):
        h = []
        for i, l in enumerate(self.down_layers):
            x = self.act(l(x)) # Through the layer and the activation function
            if i < 2: # For all but the third (final) down layer:
              h.append(x) # Storing output for skip connection
              x = self.downscale(x) # Downscale ready for the next layer

        for i, l in enumerate(self.up_layers):
            if i > 0: # For all except the first up layer
              x = self.upscale(x) # Upscale
              x += h.pop() # Fetching stored output (skip connection)
            x = self.act(l(x)) # Through the layer and the activation function

        return x


# ---- the data (port) ---------------------------------------------------------------------------------------------


def synthetic_digits(n, seed, s=28):
    """Stands in for MNIST: 28x28 one-channel images in [0, 1]; class c is a fixed pair of thick strokes, shifted by
    up to two pixels, with pixel noise."""
    gen = torch.Generator().manual_seed(seed)
    templates = torch.zeros(10, s, s)
    for c in range(10):
        for _ in range(2):
            k = int(torch.randint(6, s - 6, (), generator=gen))
            lo = int(torch.randint(3, s // 2, (), generator=gen))
            hi = lo + int(torch.randint(7, s // 2, (), generator=gen))
            if float(torch.rand((), generator=gen)) < 0.5:
                templates[c, k - 2:k + 2, lo:hi] = 1.0
            else:
                templates[c, lo:hi, k - 2:k + 2] = 1.0
    labels = torch.arange(n) % 10
    shifts = torch.randint(-2, 3, (n, 2), generator=gen)
    imgs = torch.stack([torch.roll(templates[int(c)], shifts=tuple(sh.tolist()), dims=(0, 1))
                        for c, sh in zip(labels, shifts)])
    imgs = (0.9 * imgs + 0.1 * torch.rand(n, s, s, generator=gen)).clamp(0, 1)
    return TensorDataset(imgs.unsqueeze(1), labels)


# ---- cell 24 -----------------------------------------------------------------------------------------------------


def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = torch.device("cpu")
    dataset = synthetic_digits(N_IMAGES, seed)

    # Dataloader (you can mess with batch size)
    batch_size = 16  # (port) 128
    train_dataloader = DataLoader(dataset, batch_size=batch_size, shuffle=True,
                                  generator=torch.Generator().manual_seed(seed))

    # Create the network
    net = BasicUNet()
    net.to(device)

    # Our loss function
    loss_fn = nn.MSELoss()

    # The optimizer
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    state = {"it": iter(train_dataloader)}

    def train_step():  # one iteration of `for x, y in train_dataloader`
        try:
            x, y = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_dataloader)
            x, y = next(state["it"])  # noqa: RUF059  (as written)

        # Get some data and prepare the corrupted version
        x = x.to(device) # Data on the GPU
        noise_amount = torch.rand(x.shape[0]).to(device) # Pick random noise amounts
        noisy_x = corrupt(x, noise_amount) # Create our noisy x

        # Get the model prediction
        pred = net(noisy_x)

        # Calculate the loss
        if bug == "target_is_noisy_input":
            # the loss compares the prediction with the corrupted input it was given, not the clean image
            loss = loss_fn(pred, noisy_x)
        else:
            loss = loss_fn(pred, x) # How close is the output to the true 'clean' x?

        # Backprop and update the params:
        if bug != "zero_grad_dropped":
            opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    g = torch.Generator().manual_seed(seed + 1)
    x0 = dataset.tensors[0][:batch_size]
    amount = torch.rand(batch_size, generator=g).view(-1, 1, 1, 1)
    noisy0 = x0 * (1 - amount) + torch.rand(x0.shape, generator=g) * amount

    return Program(name="hfdiffclass_basicunet", model=net, batch=(noisy0, x0), loss_fn=loss_fn, optimizer=opt,
                   train_step=train_step, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the target is the corrupted input (`loss_fn(pred, noisy_x)`) instead of the clean `x`: the network
    # learns the identity on its input, not the denoising the sampler relies on.
    Bug("target_is_noisy_input", functools.partial(_build, bug="target_is_noisy_input"), "learning_ledger",
        ("TASK",)),
    # classic: opt.zero_grad() left out of the loop: gradients accumulate over every iteration.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
