# ruff: noqa: C408
"""airbench94 from KellerJordan/cifar10-airbench (``legacy/airbench94.py``, the uncompiled airbench94): a small
conv net whose first layer is a frozen 2x2 patch-whitening convolution initialized from the training images'
patch covariance (eigenvectors scaled by the eigenvalues, with their negatives; only its bias trains, for the first
3 epochs), three conv / max-pool / BatchNorm (frozen weights, eps 1e-12, momentum 0.6) / GELU groups with Dirac
initialization, a scaled linear head; label-smoothed cross-entropy summed over the batch; Nesterov SGD in the
decoupled parametrization (lr and weight decay per 1024 examples, a 64x rate for the BatchNorm biases), a linear
warm-up / warm-down ``LambdaLR``, Lookahead every 5 steps towards an EMA with a cubic decay schedule; the loader
flips and translates the whole set at once and alternates the flip every epoch; evaluation with test-time
augmentation.

Source: https://github.com/KellerJordan/cifar10-airbench
Commit: f1c599c4af24aca803e3e65a6a7e52a502e09d0e
Files: ``legacy/airbench94.py`` (``hyp``, ``batch_flip_lr``, ``batch_crop``, ``CifarLoader``, ``Flatten``, ``Mul``,
``BatchNorm``, ``Conv``, ``ConvGroup``, ``make_net``, ``get_patches``, ``get_whitening_parameters``,
``init_whitening_conv``, ``LookaheadState``, ``infer``, ``evaluate``, ``main``)
License: MIT (Copyright (c) 2024 Keller Jordan; full text in LICENSES/KellerJordan-cifar10-airbench.txt)
Domain: vision, image classification (fast CIFAR-10 recipe: whitening init, Nesterov SGD, Lookahead EMA, TTA)

Kept as written: the functions and classes named above (in the helper ``_airbench94.py``), ``hyp`` but for the sizes
below, ``main``'s set-up (``kilostep_scale``, the un-decoupled ``lr`` / ``wd`` / ``lr_biases``, the two parameter
groups split on ``'norm'``, ``get_lr``, ``alpha_schedule``, the whitening of the first training images) and its loop
body (the whitening bias frozen after ``whiten_bias_epochs``, ``model.train()``, forward, ``loss_fn(...).sum()``,
``zero_grad(set_to_none=True)``, backward, step, ``scheduler.step()``, the Lookahead update every 5 steps and the
final one, ``evaluate`` after each epoch).

Deviations from the original:
- CIFAR-10 is not here: ``CifarLoader`` is given 640 training and 256 test 32x32 images made from ``seed``
  (the torchvision download and ``train.pt`` cache replaced): each of 10 classes is a random 4x4 colour pattern
  upsampled, made left-right symmetric, plus noise; a class is the pattern an image correlates with most
  (``task_probe``); ``T.Normalize`` is written out;
- no GPU: ``.half()``, ``.cuda()``, ``channels_last``, the CUDA events and ``cudnn.benchmark`` are dropped (float32
  on CPU); the timing, the printed table, the 25 runs, the ``'warmup'`` run and the saved log are dropped;
- sizes for 2 CPU cores: widths 64/256/256 -> 16/32/32, batch 1024 -> 32 (the rates stay per 1024 examples, as
  ``hyp`` states them), the test loader's batch 2000 -> 256;
- ``main``'s loop is unrolled: one ``train_step`` is one batch (the epoch's set-up at its first batch, ``evaluate``
  at its end); ``eval_fn`` is ``infer``'s mirror-and-translate TTA accuracy on one batch (``model.eval()`` first);
- after ``total_train_steps`` (where ``main`` stops) further ``train_step`` calls train without Lookahead;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from math import ceil
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
import _airbench94 as ab
from _api import Bug, Program

N_TRAIN, N_TEST = 640, 256  # (port) synthetic CIFAR-10
SELF_CHECK_STEPS = 40


def _synthetic(gen, n, templates):
    labels = torch.randint(0, 10, (n,), generator=gen)
    x = 0.5 + 1.2 * templates[labels] + 0.06 * torch.randn(n, 3, 32, 32, generator=gen)
    return (x.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1), labels


def _templates(gen):
    t = F.interpolate(torch.rand(10, 3, 4, 4, generator=gen), size=(32, 32), mode="bilinear", align_corners=False)
    t = (t + t.flip(-1)) / 2
    return t - t.mean(dim=(1, 2, 3), keepdim=True)


def _setup(hyp, model, train_loader):
    """``main``'s optimizer, schedule and Lookahead set-up, as written."""
    batch_size = hyp['opt']['batch_size']
    epochs = hyp['opt']['train_epochs']
    momentum = hyp['opt']['momentum']
    kilostep_scale = 1024 * (1 + 1 / (1 - momentum))
    lr = hyp['opt']['lr'] / kilostep_scale  # un-decoupled learning rate for PyTorch SGD
    wd = hyp['opt']['weight_decay'] * batch_size / kilostep_scale
    lr_biases = lr * hyp['opt']['bias_scaler']
    total_train_steps = ceil(len(train_loader) * epochs)

    norm_biases = [p for k, p in model.named_parameters() if 'norm' in k and p.requires_grad]
    other_params = [p for k, p in model.named_parameters() if 'norm' not in k and p.requires_grad]
    param_configs = [dict(params=norm_biases, lr=lr_biases, weight_decay=wd/lr_biases),
                     dict(params=other_params, lr=lr, weight_decay=wd/lr)]
    optimizer = torch.optim.SGD(param_configs, momentum=momentum, nesterov=True)

    def get_lr(step):
        warmup_steps = int(total_train_steps * 0.23)
        warmdown_steps = total_train_steps - warmup_steps
        if step < warmup_steps:
            frac = step / warmup_steps
            return 0.2 * (1 - frac) + 1.0 * frac
        else:
            frac = (step - warmup_steps) / warmdown_steps
            return 1.0 * (1 - frac) + 0.07 * frac
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, get_lr)
    alpha_schedule = 0.95**5 * (torch.arange(total_train_steps+1) / total_train_steps)**3
    lookahead_state = ab.LookaheadState(model)
    return optimizer, scheduler, alpha_schedule, lookahead_state, total_train_steps


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    templates = _templates(gen)
    hyp = ab.make_hyp()
    loss_fn = nn.CrossEntropyLoss(label_smoothing=hyp['opt']['label_smoothing'], reduction='none')
    test_loader = ab.CifarLoader(_synthetic(gen, N_TEST, templates), train=False, batch_size=256)
    train_loader = ab.CifarLoader(_synthetic(gen, N_TRAIN, templates), train=True,
                                  batch_size=hyp['opt']['batch_size'], aug=hyp['aug'], bug=bug)
    model = ab.make_net(hyp)
    optimizer, scheduler, alpha_schedule, lookahead_state, total_train_steps = _setup(hyp, model, train_loader)
    train_images = train_loader.normalize(train_loader.images[:5000])
    ab.init_whitening_conv(model[0], train_images)
    state = {"it": None, "epoch": -1, "steps": 0}

    def train_step():
        try:
            inputs, labels = next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:
                ab.evaluate(model, test_loader, tta_level=0)
            state["epoch"] += 1
            model[0].bias.requires_grad = (state["epoch"] < hyp['opt']['whiten_bias_epochs'])
            model.train()
            state["it"] = iter(train_loader)
            inputs, labels = next(state["it"])

        outputs = model(inputs)
        if bug == "loss_mean_not_sum":
            loss = loss_fn(outputs, labels).mean()
        else:
            loss = loss_fn(outputs, labels).sum()
        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad(set_to_none=True)
        else:
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        optimizer.step()
        scheduler.step()

        state["steps"] += 1
        if state["steps"] % 5 == 0 and state["steps"] <= total_train_steps:  # (port) past the end: no index
            lookahead_state.update(model, decay=alpha_schedule[state["steps"]].item())
        if state["steps"] == total_train_steps:
            lookahead_state.update(model, decay=1.0)
        return loss.detach()

    return _program(model, train_loader, loss_fn, optimizer, train_step, templates)


def _program(model, train_loader, loss_fn, optimizer, train_step, templates):
    def eval_fn(model, batch):
        was = model.training
        logits = ab.infer(model, SimpleNamespace(images=batch[0], normalize=lambda x: x), tta_level=2)
        model.train(was)
        return float((logits.argmax(1) == batch[1]).float().mean())

    def task_probe(x):
        """The labelling rule: the template the un-normalized image correlates with most."""
        raw = x * ab.CIFAR_STD.view(1, 3, 1, 1) + ab.CIFAR_MEAN.view(1, 3, 1, 1) - 0.5
        return torch.einsum("bchw,kchw->bk", raw, templates).argmax(dim=1)

    batch = (train_loader.normalize(train_loader.images[:32]), train_loader.labels[:32])
    return Program(name="airbench_cifar", model=model, batch=batch, loss_fn=lambda out, y: loss_fn(out, y).sum(),
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=task_probe,
                   task="classification", loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the loader's batch labels sliced by position while the images are taken at the shuffled indices:
    # every batch pairs images with other images' labels.
    Bug("labels_not_shuffled_with_images", functools.partial(_build, bug="labels_not_shuffled_with_images"),
        "learning_ledger", ("TASK",)),
    # classic: the per-example losses averaged instead of summed, while the rates are stated per 1024 examples of a
    # summed loss: every step is batch_size times too small.
    Bug("loss_mean_not_sum", functools.partial(_build, bug="loss_mean_not_sum"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: zero_grad moved between backward and step: SGD steps on no gradient, only the weight decay acts.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
