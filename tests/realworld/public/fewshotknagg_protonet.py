"""Prototypical Networks for few-shot classification, Oscar Knagg's ``few-shot`` library: the 4-block
conv-bn-relu-pool ``get_few_shot_encoder`` run in double precision, episodes drawn by ``NShotTaskSampler`` (k classes
x n support samples, then k x q query samples disjoint from the support), dummy labels from
``create_nshot_task_label``, ``proto_net_episode`` (prototypes = mean support embedding, squared L2 distances,
``(-distances).log_softmax(dim=1)`` into ``NLLLoss``), Adam lr 1e-3 halved every ``drop_lr_every`` epochs.

Source: https://github.com/oscarknagg/few-shot
Commit: 672de83a853cc2d5e9fe304dc100b4a735c10c15
Files: experiments/proto_nets.py, few_shot/proto.py, few_shot/models.py, few_shot/core.py, few_shot/utils.py,
few_shot/train.py, few_shot/callbacks.py (LearningRateScheduler)
License: MIT (Copyright (c) 2019 Oscar Knagg; full text in LICENSES/oscarknagg-few-shot.txt)
Domain: meta-learning, few-shot classification (metric-based episodes)

Deviations from the original:
- sizes: the encoder's 64 channels -> 16; k_train 60 -> 5 (n_train 1, q_train 5 as in the defaults);
  episodes_per_epoch 100 -> 10; drop_lr_every 20 (Omniglot) kept, counted in epochs of 10 episodes;
- data: Omniglot (a DataFrame of image files, 28x28 after the prepare script) is replaced by synthetic 28x28
  "characters" made from ``seed``: 30 classes, each a random stroke template, 12 samples per class made by shifting
  the template by up to 2 pixels and adding noise; the dataset keeps the ``df`` (``id``, ``class_id``) that
  ``NShotTaskSampler`` reads; ``np.random`` is seeded with ``seed`` (the sampler draws from it);
- ``.cuda()`` / ``torch.device('cuda')`` dropped (CPU only); the double dtype is kept;
- one ``train_step`` is one batch of ``fit``'s loop: ``prepare_batch`` then ``proto_net_episode(..., train=True)``;
  at the end of each epoch (``episodes_per_epoch`` steps) ``LearningRateScheduler``'s ``lr_schedule`` runs on the
  param groups as the callback does; the metrics, the other callbacks (evaluation, checkpoint, CSV) and printing
  are left out; ``loader`` yields the prepared ``(x, y)`` task batches; ``eval_fn`` is ``proto_net_episode(..., train=False)`` on one episode, returning the accuracy;
- ``NShotTaskSampler.__init__`` calls ``Sampler.__init__()`` without the dataset (this torch's ``Sampler`` takes
  no argument);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP035, UP006, RUF013, RUF059

from __future__ import annotations

import functools
import pathlib
import sys
from typing import Callable, Iterable, List, Tuple

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.nn import Module
from torch.optim import Adam, Optimizer
from torch.utils.data import DataLoader, Sampler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

EPSILON = 1e-8
WIDTH = 16
n_train, k_train, q_train = 1, 5, 5
n_test, k_test, q_test = 1, 5, 1
distance = 'l2'
episodes_per_epoch = 10
drop_lr_every = 20


# few_shot/utils.py
def pairwise_distances(x: torch.Tensor,
                       y: torch.Tensor,
                       matching_fn: str) -> torch.Tensor:
    n_x = x.shape[0]
    n_y = y.shape[0]

    if matching_fn == 'l2':
        distances = (
                x.unsqueeze(1).expand(n_x, n_y, -1) -
                y.unsqueeze(0).expand(n_x, n_y, -1)
        ).pow(2).sum(dim=2)
        return distances
    elif matching_fn == 'cosine':
        normalised_x = x / (x.pow(2).sum(dim=1, keepdim=True).sqrt() + EPSILON)
        normalised_y = y / (y.pow(2).sum(dim=1, keepdim=True).sqrt() + EPSILON)

        expanded_x = normalised_x.unsqueeze(1).expand(n_x, n_y, -1)
        expanded_y = normalised_y.unsqueeze(0).expand(n_x, n_y, -1)

        cosine_similarities = (expanded_x * expanded_y).sum(dim=2)
        return 1 - cosine_similarities
    elif matching_fn == 'dot':
        expanded_x = x.unsqueeze(1).expand(n_x, n_y, -1)
        expanded_y = y.unsqueeze(0).expand(n_x, n_y, -1)

        return -(expanded_x * expanded_y).sum(dim=2)
    else:
        raise(ValueError('Unsupported similarity function'))


# few_shot/models.py
class Flatten(nn.Module):
    def forward(self, input):
        return input.view(input.size(0), -1)


def conv_block(in_channels: int, out_channels: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(),
        nn.MaxPool2d(kernel_size=2, stride=2)
    )


def get_few_shot_encoder(num_input_channels=1) -> nn.Module:
    return nn.Sequential(
        conv_block(num_input_channels, WIDTH),
        conv_block(WIDTH, WIDTH),
        conv_block(WIDTH, WIDTH),
        conv_block(WIDTH, WIDTH),
        Flatten(),
    )


# few_shot/core.py
class NShotTaskSampler(Sampler):
    def __init__(self,
                 dataset: torch.utils.data.Dataset,
                 episodes_per_epoch: int = None,
                 n: int = None,
                 k: int = None,
                 q: int = None,
                 num_tasks: int = 1,
                 fixed_tasks: List[Iterable[int]] = None):
        super(NShotTaskSampler, self).__init__()
        self.episodes_per_epoch = episodes_per_epoch
        self.dataset = dataset
        if num_tasks < 1:
            raise ValueError('num_tasks must be > 1.')

        self.num_tasks = num_tasks
        self.k = k
        self.n = n
        self.q = q
        self.fixed_tasks = fixed_tasks

        self.i_task = 0

    def __len__(self):
        return self.episodes_per_epoch

    def __iter__(self):
        for _ in range(self.episodes_per_epoch):
            batch = []

            for task in range(self.num_tasks):
                if self.fixed_tasks is None:
                    # Get random classes
                    episode_classes = np.random.choice(self.dataset.df['class_id'].unique(), size=self.k, replace=False)
                else:
                    # Loop through classes in fixed_tasks
                    episode_classes = self.fixed_tasks[self.i_task % len(self.fixed_tasks)]
                    self.i_task += 1

                df = self.dataset.df[self.dataset.df['class_id'].isin(episode_classes)]

                support_k = {k: None for k in episode_classes}
                for k in episode_classes:
                    # Select support examples
                    support = df[df['class_id'] == k].sample(self.n)
                    support_k[k] = support

                    for i, s in support.iterrows():
                        batch.append(s['id'])

                for k in episode_classes:
                    query = df[(df['class_id'] == k) & (~df['id'].isin(support_k[k]['id']))].sample(self.q)
                    for i, q in query.iterrows():
                        batch.append(q['id'])

            yield np.stack(batch)


def prepare_nshot_task(n: int, k: int, q: int, bug=None) -> Callable:
    def prepare_nshot_task_(batch: Tuple[torch.Tensor, torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        x = x.double()
        # Create dummy 0-(num_classes - 1) label
        if bug == "labels_interleaved":
            y = torch.arange(0, k * q).long() % k
        else:
            y = create_nshot_task_label(k, q)
        return x, y

    return prepare_nshot_task_


def create_nshot_task_label(k: int, q: int) -> torch.Tensor:
    y = torch.arange(0, k, 1 / q).long()
    return y


# few_shot/proto.py
def proto_net_episode(model: Module,
                      optimiser: Optimizer,
                      loss_fn: Callable,
                      x: torch.Tensor,
                      y: torch.Tensor,
                      n_shot: int,
                      k_way: int,
                      q_queries: int,
                      distance: str,
                      train: bool,
                      bug=None):
    if train:
        # Zero gradients
        model.train()
        if bug != "zero_grad_dropped":
            optimiser.zero_grad()
    else:
        model.eval()

    # Embed all samples
    embeddings = model(x)

    loss, y_pred = episode_loss(embeddings, y, loss_fn, n_shot, k_way, distance, bug=bug)

    if train:
        # Take gradient step
        loss.backward()
        optimiser.step()
    else:
        pass

    return loss, y_pred


def episode_loss(embeddings, y, loss_fn, n_shot, k_way, distance, bug=None):
    # (the body of proto_net_episode between the forward and the backward, as written)
    # Samples are ordered by the NShotWrapper class as follows:
    # k lots of n support samples from a particular class
    # k lots of q query samples from those classes
    support = embeddings[:n_shot*k_way]
    queries = embeddings[n_shot*k_way:]
    prototypes = compute_prototypes(support, k_way, n_shot)

    # Calculate squared distances between all queries and all prototypes
    # Output should have shape (q_queries * k_way, k_way) = (num_queries, k_way)
    distances = pairwise_distances(queries, prototypes, distance)

    # Calculate log p_{phi} (y = k | x)
    if bug == "nll_on_negative_distances":
        log_p_y = (-distances)
    else:
        log_p_y = (-distances).log_softmax(dim=1)
    loss = loss_fn(log_p_y, y)

    # Prediction probabilities are softmax over distances
    y_pred = (-distances).softmax(dim=1)
    return loss, y_pred


def compute_prototypes(support: torch.Tensor, k: int, n: int) -> torch.Tensor:
    # Reshape so the first dimension indexes by class then take the mean
    # along that dimension to generate the "prototypes" for each class
    class_prototypes = support.reshape(k, n, -1).mean(dim=1)
    return class_prototypes


class SyntheticCharacters(torch.utils.data.Dataset):
    """30 classes of 28x28 stroke templates; a sample is its class template shifted by up to 2 pixels plus noise.
    ``df`` has the ``id`` / ``class_id`` columns ``NShotTaskSampler`` reads (the original's OmniglotDataset)."""

    def __init__(self, seed, n_classes=30, per_class=12):
        gen = torch.Generator().manual_seed(seed)
        templates = torch.zeros(n_classes, 28, 28)
        for c in range(n_classes):
            for _ in range(3):
                r0, c0 = torch.randint(4, 24, (2,), generator=gen).tolist()
                dr, dc = torch.randint(-1, 2, (2,), generator=gen).tolist()
                for t in range(8):
                    r, cc = min(max(r0 + dr * t, 1), 26), min(max(c0 + dc * t, 1), 26)
                    templates[c, r - 1:r + 2, cc - 1:cc + 2] = 1.0
        xs, ys = [], []
        for c in range(n_classes):
            for _ in range(per_class):
                sr, sc = torch.randint(-2, 3, (2,), generator=gen).tolist()
                img = torch.roll(templates[c], shifts=(sr, sc), dims=(0, 1))
                xs.append((img + 0.2 * torch.randn(28, 28, generator=gen)).unsqueeze(0))
                ys.append(c)
        self.x = torch.stack(xs)
        self.y = ys
        self.df = pd.DataFrame({'id': np.arange(len(ys)), 'class_id': ys})

    def __getitem__(self, item):
        return self.x[item], self.y[item]

    def __len__(self):
        return len(self.y)


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)

    background = SyntheticCharacters(seed)
    background_taskloader = DataLoader(
        background,
        batch_sampler=NShotTaskSampler(background, episodes_per_epoch, n_train, k_train, q_train),
    )
    evaluation = SyntheticCharacters(seed + 1000)
    evaluation_taskloader = DataLoader(
        evaluation,
        batch_sampler=NShotTaskSampler(evaluation, episodes_per_epoch, n_test, k_test, q_test),
    )

    model = get_few_shot_encoder(1)
    model.to(dtype=torch.double)

    optimiser = Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.NLLLoss()

    def lr_schedule(epoch, lr):
        # Drop lr every 2000 episodes
        if epoch % drop_lr_every == 0:
            return lr / 2
        else:
            return lr

    prepare_batch = prepare_nshot_task(n_train, k_train, q_train, bug=bug)
    first = prepare_batch(next(iter(DataLoader(
        background, batch_sampler=NShotTaskSampler(background, 1, n_train, k_train, q_train)))))
    state = {"it": iter(background_taskloader), "epoch": 1}

    def train_step():
        try:
            batch = next(state["it"])
        except StopIteration:  # the epoch ends: LearningRateScheduler.on_epoch_end, then the next epoch
            for param_group in optimiser.param_groups:
                param_group['lr'] = lr_schedule(state["epoch"], param_group['lr'])
            state["epoch"] += 1
            state["it"] = iter(background_taskloader)
            batch = next(state["it"])
        x, y = prepare_batch(batch)
        loss, y_pred = proto_net_episode(model, optimiser, loss_fn, x, y, n_shot=n_train, k_way=k_train,
                                         q_queries=q_train, train=True, distance=distance, bug=bug)
        return loss.detach()

    eval_prepare = prepare_nshot_task(n_test, k_test, q_test)

    def eval_fn(model, batch):
        x, y = eval_prepare(next(iter(evaluation_taskloader)))
        loss, y_pred = proto_net_episode(model, optimiser, loss_fn, x, y, n_shot=n_test, k_way=k_test,
                                         q_queries=q_test, train=False, distance=distance)
        return float((y_pred.argmax(dim=-1) == y).double().mean())

    class PreparedTasks:
        # fit's ``x, y = prepare_batch(batch)`` over the task loader
        def __iter__(self):
            for batch in background_taskloader:
                yield prepare_batch(batch)

    return Program(name="fewshotknagg_protonet", model=model, batch=first,
                   loss_fn=lambda out, y: episode_loss(out, y, loss_fn, n_train, k_train, distance, bug=bug)[0],
                   optimizer=optimiser, train_step=train_step, eval_fn=eval_fn, loader=PreparedTasks())


build = functools.partial(_build)

BUGS = [
    Bug("labels_interleaved", functools.partial(_build, bug="labels_interleaved"),
        "learning_ledger", ("TASK",)),
    Bug("nll_on_negative_distances", functools.partial(_build, bug="nll_on_negative_distances"),
        "learning_ledger", ("OBJECTIVE",)),
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
