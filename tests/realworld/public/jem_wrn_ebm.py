"""JEM, "Your Classifier is Secretly an Energy Based Model" (Grathwohl et al. 2020), from ``train_wrn_ebm.py``: a
Wide-ResNet classifier (``CCF``) whose logits' logsumexp is the unnormalized log-density of ``x``; each iteration adds
``-(f(x_data).mean() - f(x_q).mean())`` for negatives ``x_q`` drawn by persistent SGLD from a replay buffer (5%
re-initialized uniformly, 20 steps of ``x += sgld_lr * grad + sgld_std * noise`` under ``f.eval()``) to the
cross-entropy of ``f.classify`` on a second, labelled stream; Adam lr 1e-4 with a linear warm-up written into the
param groups per iteration. The README's CIFAR-10 command sets the configuration (``--p_x_weight 1.0
--p_y_given_x_weight 1.0 --p_x_y_weight 0.0 --sigma .03 --warmup_iters 1000``, no norm, unconditional sampling).

Source: https://github.com/wgrathwohl/JEM
Commit: 3d01161547109b464eee87304f07b2dac8519d03
Files: train_wrn_ebm.py, wideresnet.py (in the helper ``_jem_lib.py``), README.md (the training command)
License: Apache-2.0 (Copyright 2019 The Google Research Authors, per the files' headers; full text in
LICENSES/wgrathwohl-JEM.txt)
Domain: generative + discriminative, energy-based model (joint classifier / EBM with SGLD and a replay buffer)

Kept as written: ``wideresnet.py``'s ``wide_basic``, ``get_norm`` (the ``norm=None`` path), ``Wide_ResNet``;
``train_wrn_ebm.py``'s ``F``, ``CCF``, ``cycle``, ``init_random``, ``get_model_and_buffer`` (no checkpoint),
``get_sample_q`` (``sample_p_0``, ``sample_q``), ``eval_classification`` and the loop body of ``main`` (warm-up,
the ``p_x`` term with unconditional sampling and the ``p_y_given_x`` term, summed in ``jem_loss``, the divergence
check, ``zero_grad``/``backward``/``step``).

Deviations from the original:
- sizes for 2 CPU cores: WRN-28-10 -> WRN-10-1 (one block per stage, stages 16/16/32/64), batch 64 -> 16,
  ``n_steps`` 20 -> 5, ``buffer_size`` 10000 -> 1000, ``warmup_iters`` 1000 -> 10 and lr 1e-4 -> 3e-4 so that the
  30 self-check steps train (the original warms up over 1000 of 140000 iterations); images 32x32 -> 16x16
  (``im_sz``), so ``Wide_ResNet``'s final ``avg_pool2d(out, 8)`` is ``avg_pool2d(out, im_sz // 4)``;
- data: CIFAR-10 (torchvision download) is replaced by synthetic 16x16 RGB images made from ``seed`` (ten classes,
  each a colour and a stripe frequency and direction, with noise), split 5000 -> 64 for validation as ``get_data``
  does with ``np.random.seed(1234)``; torchvision's transforms are written out in torch (reflect pad 4, random
  16x16 crop, horizontal flip, normalize by .5/.5, plus ``sigma`` Gaussian noise) and applied per example in the
  datasets' ``__getitem__``; both loaders shuffle with ``torch.Generator``s made from ``seed``, ``num_workers=0``;
- the branches the README command switches off are left out: ``p_x_y`` (weight 0), class-conditional sampling,
  ``labels_per_class``, loading a checkpoint; ``get_data``'s ``DataSubset`` is ``torch.utils.data.Subset`` (the same
  indexing), the test split is not built; the ``1e8`` divergence check raises instead of ``1/0``;
- ``conv_init`` is not called upstream either (PyTorch's default init); the ``print`` in ``Wide_ResNet`` is dropped;
- ``t.autograd.Variable(init_sample, requires_grad=True)`` is ``init_sample.clone().requires_grad_(True)`` (the same
  leaf); ``nn.CrossEntropyLoss(reduce=False)`` in ``eval_classification`` is ``reduction="none"``;
- CUDA, tqdm, prints, plots, checkpoints, the lr decay at epochs 160/180 and the per-epoch evaluation schedule are
  left out (``eval_fn`` is ``eval_classification``'s accuracy on the first validation batch under ``eval()`` and
  ``no_grad``);
- one ``train_step`` is one iteration of ``main``'s inner loop and returns ``L``; the Program's batch is the data and
  SGLD samples of one step (inputs to ``f``'s energy) with the labelled pair, its ``loss_fn`` the loop's ``L``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, UP028

from __future__ import annotations

import argparse
import functools
import pathlib
import sys

import numpy as np
import torch as t
import torch.nn as nn
import torch.nn.functional as tnnF
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _jem_lib import Wide_ResNet

seed = 1
im_sz = 16  # (port) 32
n_ch = 3


# ---- train_wrn_ebm.py ---------------------------------------------------------------------------------------------

class F(nn.Module):
    def __init__(self, depth=28, width=2, norm=None, dropout_rate=0.0, n_classes=10):
        super(F, self).__init__()
        self.f = Wide_ResNet(depth, width, norm=norm, dropout_rate=dropout_rate)
        self.energy_output = nn.Linear(self.f.last_dim, 1)
        self.class_output = nn.Linear(self.f.last_dim, n_classes)

    def forward(self, x, y=None):
        penult_z = self.f(x)
        return self.energy_output(penult_z).squeeze()

    def classify(self, x):
        penult_z = self.f(x)
        return self.class_output(penult_z).squeeze()


class CCF(F):
    def __init__(self, depth=28, width=2, norm=None, dropout_rate=0.0, n_classes=10):
        super(CCF, self).__init__(depth, width, norm=norm, dropout_rate=dropout_rate, n_classes=n_classes)

    def forward(self, x, y=None):
        logits = self.classify(x)
        if y is None:
            return logits.logsumexp(1)
        else:
            return t.gather(logits, 1, y[:, None])


def cycle(loader):
    while True:
        for data in loader:
            yield data


def init_random(args, bs):
    return t.FloatTensor(bs, n_ch, im_sz, im_sz).uniform_(-1, 1)


def get_model_and_buffer(args, device, sample_q):
    model_cls = F if args.uncond else CCF
    f = model_cls(args.depth, args.width, args.norm, dropout_rate=args.dropout_rate, n_classes=args.n_classes)
    if not args.uncond:
        assert args.buffer_size % args.n_classes == 0, "Buffer size must be divisible by args.n_classes"
    # make replay buffer
    replay_buffer = init_random(args, args.buffer_size)
    f = f.to(device)
    return f, replay_buffer


def get_sample_q(args, device):
    def sample_p_0(replay_buffer, bs, y=None):
        if len(replay_buffer) == 0:
            return init_random(args, bs), []
        buffer_size = len(replay_buffer) if y is None else len(replay_buffer) // args.n_classes
        inds = t.randint(0, buffer_size, (bs,))
        # if cond, convert inds to class conditional inds
        if y is not None:
            inds = y.cpu() * buffer_size + inds
            assert not args.uncond, "Can't drawn conditional samples without giving me y"
        buffer_samples = replay_buffer[inds]
        random_samples = init_random(args, bs)
        choose_random = (t.rand(bs) < args.reinit_freq).float()[:, None, None, None]
        samples = choose_random * random_samples + (1 - choose_random) * buffer_samples
        return samples.to(device), inds

    def sample_q(f, replay_buffer, y=None, n_steps=args.n_steps):
        """this func takes in replay_buffer now so we have the option to sample from
        scratch (i.e. replay_buffer==[]).  See test_wrn_ebm.py for example.
        """
        f.eval()
        # get batch size
        bs = args.batch_size if y is None else y.size(0)
        # generate initial samples and buffer inds of those samples (if buffer is used)
        init_sample, buffer_inds = sample_p_0(replay_buffer, bs=bs, y=y)
        x_k = init_sample.clone().requires_grad_(True)  # (port) t.autograd.Variable(init_sample, requires_grad=True)
        # sgld
        for _k in range(n_steps):
            f_prime = t.autograd.grad(f(x_k, y=y).sum(), [x_k], retain_graph=True)[0]
            x_k.data += args.sgld_lr * f_prime + args.sgld_std * t.randn_like(x_k)
        f.train()
        final_samples = x_k.detach()
        # update replay buffer
        if len(replay_buffer) > 0:
            replay_buffer[buffer_inds] = final_samples.cpu()
        return final_samples
    return sample_q


def eval_classification(f, dload, device):
    corrects, losses = [], []
    for x_p_d, y_p_d in dload:
        x_p_d, y_p_d = x_p_d.to(device), y_p_d.to(device)
        logits = f.classify(x_p_d)
        loss = nn.CrossEntropyLoss(reduction="none")(logits, y_p_d).cpu().numpy()
        losses.extend(loss)
        correct = (logits.max(1)[1] == y_p_d).float().cpu().numpy()
        corrects.extend(correct)
    loss = np.mean(losses)
    correct = np.mean(corrects)
    return correct, loss


# ---- the README's CIFAR-10 command, at port sizes -------------------------------------------------------------------

def make_args():
    return argparse.Namespace(
        dataset="cifar10", lr=3e-4, decay_epochs=[160, 180], decay_rate=.3, clf_only=False,  # (port) lr 1e-4
        labels_per_class=-1, optimizer="adam", batch_size=16, n_epochs=200, warmup_iters=10,  # (port) 64, 1000
        p_x_weight=1.0, p_y_given_x_weight=1.0, p_x_y_weight=0.0, dropout_rate=0.0, sigma=.03, weight_decay=0.0,
        norm=None, n_steps=5, width=1, depth=10, uncond=False, class_cond_p_x_sample=False,  # (port) 20, 10, 28
        buffer_size=1000, reinit_freq=.05, sgld_lr=1.0, sgld_std=1e-2, print_every=100, n_valid=64,  # (port) 10000
        n_classes=10)


class SyntheticCIFAR(Dataset):
    """Ten classes of 16x16 RGB images in [0, 1] (a class colour times stripes of a class frequency and direction,
    plus noise), with ``get_data``'s train transform written out: reflect pad 4, random crop, horizontal flip,
    normalize by .5/.5, ``sigma`` Gaussian noise."""

    def __init__(self, seed, sigma, train, n=512):
        gen = t.Generator().manual_seed(seed)
        colours = 0.3 + 0.7 * t.rand(10, 3, 1, 1, generator=gen)
        freq = 1 + t.randint(0, 3, (10,), generator=gen).float()
        angle = t.rand(10, generator=gen) * 3.1416
        ys, xs = t.meshgrid(t.linspace(-1, 1, im_sz), t.linspace(-1, 1, im_sz), indexing="ij")
        self.labels = t.arange(n) % 10
        phase = (t.cos(angle)[:, None, None] * xs + t.sin(angle)[:, None, None] * ys) * freq[:, None, None] * 3.1416
        stripes = (t.sin(phase) + 1) / 2
        imgs = colours[self.labels] * stripes[self.labels].unsqueeze(1)
        self.images = (imgs + 0.05 * t.randn(n, 3, im_sz, im_sz, generator=gen)).clamp(0, 1)
        self.sigma, self.train = sigma, train

    def __getitem__(self, i):
        x = self.images[i]
        if self.train:
            x = tnnF.pad(x[None], (4, 4, 4, 4), mode="reflect")[0]
            dy, dx = (int(v) for v in t.randint(0, 9, (2,)))
            x = x[:, dy:dy + im_sz, dx:dx + im_sz]
            if float(t.rand(())) < 0.5:
                x = x.flip(2)
        x = (x - .5) / .5
        return x + self.sigma * t.randn_like(x), self.labels[i]

    def __len__(self):
        return len(self.labels)


def get_data(args, data_seed):
    full_train = SyntheticCIFAR(data_seed, args.sigma, train=True)
    all_inds = list(range(len(full_train)))
    # set seed
    np.random.seed(1234)
    # shuffle
    np.random.shuffle(all_inds)
    valid_inds, train_inds = all_inds[:args.n_valid], all_inds[args.n_valid:]
    train_labeled_inds = train_inds  # labels_per_class = -1
    dset_train = t.utils.data.Subset(full_train, train_inds)
    dset_train_labeled = t.utils.data.Subset(full_train, train_labeled_inds)
    dset_valid = t.utils.data.Subset(SyntheticCIFAR(data_seed, args.sigma, train=False), valid_inds)
    dload_train = DataLoader(dset_train, batch_size=args.batch_size, shuffle=True, drop_last=True,
                             generator=t.Generator().manual_seed(data_seed))
    dload_train_labeled = DataLoader(dset_train_labeled, batch_size=args.batch_size, shuffle=True, drop_last=True,
                                     generator=t.Generator().manual_seed(data_seed + 1))
    dload_valid = DataLoader(dset_valid, batch_size=args.batch_size, shuffle=False, drop_last=False)
    return dload_train, cycle(dload_train_labeled), dload_valid


def jem_loss(args, f, fp_all, fq_all, x_lab, y_lab, bug=None):
    """The objective ``main`` sums: ``-(fp - fq)`` for log p(x) plus the cross-entropy for log p(y|x)."""
    L = 0.
    fp = fp_all.mean()
    fq = fq_all.mean()
    l_p_x = -(fq - fp) if bug == "p_x_sign_flipped" else -(fp - fq)
    L += args.p_x_weight * l_p_x
    logits = f.classify(x_lab)
    l_p_y_given_x = nn.CrossEntropyLoss()(logits, y_lab)
    L += args.p_y_given_x_weight * l_p_y_given_x
    return L


def _build(seed_, bug=None):
    args = make_args()
    t.manual_seed(seed_)
    device = t.device('cpu')
    dload_train, dload_train_labeled, dload_valid = get_data(args, seed_)
    sample_q = get_sample_q(args, device)
    f, replay_buffer = get_model_and_buffer(args, device, sample_q)
    params = f.class_output.parameters() if args.clf_only else f.parameters()
    optim = t.optim.Adam(params, lr=args.lr, betas=[.9, .999], weight_decay=args.weight_decay)
    state = {"cur_iter": 0, "train": cycle(dload_train)}

    def train_step():
        cur_iter = state["cur_iter"]
        if cur_iter <= args.warmup_iters:
            lr = args.lr * cur_iter / float(args.warmup_iters)
            for param_group in optim.param_groups:
                param_group['lr'] = lr

        x_p_d, _ = next(state["train"])
        x_lab, y_lab = dload_train_labeled.__next__()
        if bug == "labels_from_other_stream":
            x_lab = x_p_d  # the unlabelled stream's images with the labelled stream's labels

        x_q = sample_q(f, replay_buffer)  # sample from log-sumexp
        fp_all = f(x_p_d)
        fq_all = f(x_q)
        L = jem_loss(args, f, fp_all, fq_all, x_lab, y_lab, bug)

        # break if the loss diverged...easier for poppa to run experiments this way
        if L.abs().item() > 1e8:
            raise FloatingPointError("BAD BOIIIIIIIIII")  # (port) print + 1/0

        if bug == "zero_grad_after_backward":
            L.backward()
            optim.zero_grad()
        else:
            optim.zero_grad()
            L.backward()
        optim.step()
        state["cur_iter"] = cur_iter + 1
        return L.detach()

    def loss_fn(energies, targets):  # main's L on f's outputs for cat([x_p_d, x_q])
        n, x_lab, y_lab = targets
        return jem_loss(args, f, energies[:n], energies[n:], x_lab, y_lab, bug)

    def eval_fn(model, batch):
        model.eval()
        with t.no_grad():
            correct, _ = eval_classification(model, [batch], device)
        model.train()
        return float(correct)

    x0, y0 = next(iter(DataLoader(dload_train.dataset, batch_size=args.batch_size)))
    xl, yl = (x0, y0) if bug != "labels_from_other_stream" else (x0, y0.roll(1))
    batch = (t.cat([x0, init_random(args, args.batch_size)]), (args.batch_size, xl, yl))
    return Program(name="jem_wrn_ebm", model=f, batch=batch, loss_fn=loss_fn, optimizer=optim,
                   train_step=train_step, eval_fn=lambda m, b: eval_fn(m, next(iter(dload_valid))),
                   loader=dload_train)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip: log p(x)'s term written -(fq - fp): the data's logsumexp is pushed down and the SGLD samples'
    # up, the opposite of the likelihood gradient the sampler follows.
    Bug("p_x_sign_flipped", functools.partial(_build, bug="p_x_sign_flipped"), "learning_ledger", ("OBJECTIVE",)),
    # classic: the classifier fed the unlabelled stream's images ``x_p_d`` with the labelled stream's ``y_lab`` (two
    # loaders shuffled apart): the cross-entropy pairs images with other images' labels.
    Bug("labels_from_other_stream", functools.partial(_build, bug="labels_from_other_stream"), "learning_ledger",
        ("TASK",)),
    # classic: ``optim.zero_grad()`` moved after ``L.backward()``: every step applies an all-zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
