"""Unsupervised Scalable Representation Learning for Multivariate Time Series (Franceschi, Dieuleveut & Jaggi,
NeurIPS 2019): a causal dilated CNN encoder (weight-normalized causal convolution blocks with leaky ReLUs and
residual connections, dilations doubling, adaptive max pooling over time, a linear layer) trained without labels by
the time-based triplet loss: for each series of the batch a random anchor sub-series, a positive sub-series inside
it and ``nb_random_samples`` negative sub-series from random training series, ``-logsigmoid(<anchor, positive>)``
plus ``negative_penalty / K`` times the ``-logsigmoid(-<anchor, negative>)`` terms; Adam, ``zero_grad`` /
``loss.backward()`` / ``step`` per batch of a shuffled DataLoader (``CausalCNNEncoderClassifier.fit_encoder``).

Source: https://github.com/White-Link/UnsupervisedScalableRepresentationLearningTimeSeries
Commit: 4aff59229113368ace606ad76e149a7916daa6f9
Files: scikit_wrappers.py (``TimeSeriesEncoderClassifier.__init__``, ``fit_encoder``), losses/triplet_loss.py
(``TripletLoss``), networks/causal_cnn.py, utils.py (``Dataset``), default_hyperparameters.json
License: Apache-2.0 (Copyright 2019 Jean-Yves Franceschi, Aymeric Dieuleveut, Martin Jaggi; the causal CNN partly
from locuslab/TCN, MIT; full text and NOTICE in LICENSES/White-Link-UnsupervisedScalableRepresentationLearningTimeSeries.txt)
Domain: time series, unsupervised representation learning (triplet loss with time-based sampling)

Deviations from the original:
- data: a UCR dataset (a download) is replaced by synthetic univariate series made from ``seed``: 4 classes, each
  a sum of two sinusoids with class-specific frequencies, random phase, amplitude jitter and noise, length 64,
  float32 (the labels only enter the SVM the original fits afterwards, which is not copied);
- sizes: default_hyperparameters.json's channels 40 -> 8, depth 10 -> 2, reduced_size 160 -> 16, out_channels
  320 -> 16, nb_random_samples 10 -> 4, batch_size 10 -> 8; lr 0.001 kept, kernel_size 3, negative_penalty 1,
  compared_length None kept; nb_steps 1500 only bounds the loop;
- ``TripletLoss`` draws its lengths, offsets and negatives from the global ``numpy.random``; here from a
  ``numpy.random.RandomState(seed)`` held by the loss (``self.rng``), the same calls; the DataLoader shuffles with a
  ``torch.Generator`` seeded from ``seed``;
- ``torch.nn.utils.weight_norm`` is used as written (deprecated in favour of the parametrization, same function);
- CUDA, verbose printing, early stopping (off by default: ``early_stopping`` None), saving and the SVM classifier
  (``fit_classifier``, sklearn) are dropped; ``save_memory`` keeps its default False;
- one ``train_step`` is one iteration of ``fit_encoder``'s ``for batch in train_generator`` loop; the Program's model
  is the encoder and its batch one draw of the triplet sampling: the anchors and, as targets, the positive and
  negative sub-series, with a ``loss_fn`` that encodes them and sums the same terms as ``TripletLoss.forward``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008  (the original's style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy
import torch

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

HYPER = {  # default_hyperparameters.json, sizes reduced
    "batch_size": 8,
    "channels": 8,
    "compared_length": None,
    "depth": 2,
    "nb_steps": 1500,
    "in_channels": 1,
    "kernel_size": 3,
    "penalty": None,
    "early_stopping": None,
    "lr": 0.001,
    "nb_random_samples": 4,
    "negative_penalty": 1,
    "out_channels": 16,
    "reduced_size": 16,
}


# networks/causal_cnn.py
class Chomp1d(torch.nn.Module):
    def __init__(self, chomp_size):
        super(Chomp1d, self).__init__()
        self.chomp_size = chomp_size

    def forward(self, x):
        return x[:, :, :-self.chomp_size]


class SqueezeChannels(torch.nn.Module):
    def __init__(self):
        super(SqueezeChannels, self).__init__()

    def forward(self, x):
        return x.squeeze(2)


class CausalConvolutionBlock(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, dilation,
                 final=False):
        super(CausalConvolutionBlock, self).__init__()

        # Computes left padding so that the applied convolutions are causal
        padding = (kernel_size - 1) * dilation

        # First causal convolution
        conv1 = torch.nn.utils.weight_norm(torch.nn.Conv1d(
            in_channels, out_channels, kernel_size,
            padding=padding, dilation=dilation
        ))
        # The truncation makes the convolution causal
        chomp1 = Chomp1d(padding)
        relu1 = torch.nn.LeakyReLU()

        # Second causal convolution
        conv2 = torch.nn.utils.weight_norm(torch.nn.Conv1d(
            out_channels, out_channels, kernel_size,
            padding=padding, dilation=dilation
        ))
        chomp2 = Chomp1d(padding)
        relu2 = torch.nn.LeakyReLU()

        # Causal network
        self.causal = torch.nn.Sequential(
            conv1, chomp1, relu1, conv2, chomp2, relu2
        )

        # Residual connection
        self.upordownsample = torch.nn.Conv1d(
            in_channels, out_channels, 1
        ) if in_channels != out_channels else None

        # Final activation function
        self.relu = torch.nn.LeakyReLU() if final else None

    def forward(self, x):
        out_causal = self.causal(x)
        res = x if self.upordownsample is None else self.upordownsample(x)
        if self.relu is None:
            return out_causal + res
        else:
            return self.relu(out_causal + res)


class CausalCNN(torch.nn.Module):
    def __init__(self, in_channels, channels, depth, out_channels,
                 kernel_size):
        super(CausalCNN, self).__init__()

        layers = []  # List of causal convolution blocks
        dilation_size = 1  # Initial dilation size

        for i in range(depth):
            in_channels_block = in_channels if i == 0 else channels
            layers += [CausalConvolutionBlock(
                in_channels_block, channels, kernel_size, dilation_size
            )]
            dilation_size *= 2  # Doubles the dilation size at each step

        # Last layer
        layers += [CausalConvolutionBlock(
            channels, out_channels, kernel_size, dilation_size
        )]

        self.network = torch.nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)


class CausalCNNEncoder(torch.nn.Module):
    def __init__(self, in_channels, channels, depth, reduced_size,
                 out_channels, kernel_size):
        super(CausalCNNEncoder, self).__init__()
        causal_cnn = CausalCNN(
            in_channels, channels, depth, reduced_size, kernel_size
        )
        reduce_size = torch.nn.AdaptiveMaxPool1d(1)
        squeeze = SqueezeChannels()  # Squeezes the third dimension (time)
        linear = torch.nn.Linear(reduced_size, out_channels)
        self.network = torch.nn.Sequential(
            causal_cnn, reduce_size, squeeze, linear
        )

    def forward(self, x):
        return self.network(x)


# losses/triplet_loss.py
class TripletLoss(torch.nn.modules.loss._Loss):
    def __init__(self, compared_length, nb_random_samples, negative_penalty, rng, bug=None):
        super(TripletLoss, self).__init__()
        self.compared_length = compared_length
        if self.compared_length is None:
            self.compared_length = numpy.inf
        self.nb_random_samples = nb_random_samples
        self.negative_penalty = negative_penalty
        self.rng = rng  # numpy.random in the original
        self.bug = bug

    def sample(self, batch, train):
        """The sampling lines of ``forward``: the anchors, positives and negatives as sub-series."""
        batch_size = batch.size(0)
        train_size = train.size(0)
        length = min(self.compared_length, train.size(2))

        # For each batch element, we pick nb_random_samples possible random
        # time series in the training set (choice of batches from where the
        # negative examples will be sampled)
        samples = self.rng.choice(
            train_size, size=(self.nb_random_samples, batch_size)
        )
        samples = torch.LongTensor(samples)

        # Choice of length of positive and negative samples
        length_pos_neg = self.rng.randint(1, high=length + 1)

        # We choose for each batch example a random interval in the time
        # series, which is the 'anchor'
        random_length = self.rng.randint(
            length_pos_neg, high=length + 1
        )  # Length of anchors
        beginning_batches = self.rng.randint(
            0, high=length - random_length + 1, size=batch_size
        )  # Start of anchors

        # The positive samples are chosen at random in the chosen anchors
        beginning_samples_pos = self.rng.randint(
            0, high=random_length - length_pos_neg + 1, size=batch_size
        )  # Start of positive samples in the anchors
        # Start of positive samples in the batch examples
        beginning_positive = beginning_batches + beginning_samples_pos
        # End of positive samples in the batch examples
        end_positive = beginning_positive + length_pos_neg

        # We randomly choose nb_random_samples potential negative samples for
        # each batch example
        beginning_samples_neg = self.rng.randint(
            0, high=length - length_pos_neg + 1,
            size=(self.nb_random_samples, batch_size)
        )

        anchors = torch.cat(
            [batch[
                j: j + 1, :,
                beginning_batches[j]: beginning_batches[j] + random_length
            ] for j in range(batch_size)]
        )
        positives = torch.cat(
            [batch[
                j: j + 1, :, end_positive[j] - length_pos_neg: end_positive[j]
            ] for j in range(batch_size)]
        )
        negatives = [
            torch.cat([train[samples[i, j]: samples[i, j] + 1][
                :, :,
                beginning_samples_neg[i, j]:
                beginning_samples_neg[i, j] + length_pos_neg
            ] for j in range(batch_size)])
            for i in range(self.nb_random_samples)
        ]
        return anchors, positives, negatives

    def terms(self, representation, positive_representation, negative_representations):
        """The loss lines of ``forward`` on the encoded sub-series."""
        batch_size = representation.size(0)
        size_representation = representation.size(1)
        # Positive loss: -logsigmoid of dot product between anchor and positive
        # representations
        loss = -torch.mean(torch.nn.functional.logsigmoid(torch.bmm(
            representation.view(batch_size, 1, size_representation),
            positive_representation.view(batch_size, size_representation, 1)
        )))

        multiplicative_ratio = self.negative_penalty / self.nb_random_samples
        for i in range(self.nb_random_samples):
            # Negative loss: -logsigmoid of minus the dot product between
            # anchor and negative representations
            negative_representation = negative_representations[i]
            if self.bug == "negative_sign_dropped":
                # the minus sign inside logsigmoid lost: negatives are pulled towards the anchor too
                neg_score = torch.bmm(
                    representation.view(batch_size, 1, size_representation),
                    negative_representation.view(batch_size, size_representation, 1))
            else:
                neg_score = -torch.bmm(
                    representation.view(batch_size, 1, size_representation),
                    negative_representation.view(batch_size, size_representation, 1))
            loss += multiplicative_ratio * -torch.mean(
                torch.nn.functional.logsigmoid(neg_score)
            )
        return loss

    def forward(self, batch, encoder, train, save_memory=False):
        anchors, positives, negatives = self.sample(batch, train)
        representation = encoder(anchors)  # Anchors representations
        positive_representation = encoder(positives)  # Positive samples representations
        negative_representations = [encoder(n) for n in negatives]
        return self.terms(representation, positive_representation, negative_representations)


# utils.py
class Dataset(torch.utils.data.Dataset):
    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return numpy.shape(self.dataset)[0]

    def __getitem__(self, index):
        return self.dataset[index]


def make_series(rs, n=64, length=64):
    freqs = [(1.0, 3.0), (2.0, 5.0), (4.0, 1.5), (6.0, 2.5)]
    t = numpy.arange(length) / length * 2 * math.pi
    X = numpy.zeros((n, 1, length), dtype=numpy.float32)
    y = rs.randint(0, len(freqs), size=n)
    for k in range(n):
        f1, f2 = freqs[y[k]]
        X[k, 0] = ((1 + 0.2 * rs.randn()) * numpy.sin(f1 * t + rs.uniform(0, 2 * math.pi))
                   + 0.5 * numpy.sin(f2 * t + rs.uniform(0, 2 * math.pi)) + 0.1 * rs.randn(length))
    return X, y


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rs = numpy.random.RandomState(seed)
    X, _y = make_series(rs)
    params = {k: HYPER[k] for k in ("in_channels", "channels", "depth", "reduced_size", "out_channels",
                                    "kernel_size")}
    encoder = CausalCNNEncoder(**params)
    loss = TripletLoss(HYPER["compared_length"], HYPER["nb_random_samples"], HYPER["negative_penalty"],
                       numpy.random.RandomState(seed + 1), bug=bug)
    optimizer = torch.optim.Adam(encoder.parameters(), lr=HYPER["lr"])

    # fit_encoder
    train = torch.from_numpy(X)
    train_torch_dataset = Dataset(X)
    train_generator = torch.utils.data.DataLoader(
        train_torch_dataset, batch_size=HYPER["batch_size"], shuffle=True,
        generator=torch.Generator().manual_seed(seed)
    )
    state = {"it": iter(train_generator), "i": 0}

    def train_step():
        try:
            batch = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_generator)
            batch = next(state["it"])
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        loss_value = loss(batch, encoder, train, save_memory=False)
        loss_value.backward()
        optimizer.step()
        state["i"] += 1
        return loss_value.detach()

    first = next(iter(torch.utils.data.DataLoader(train_torch_dataset, batch_size=HYPER["batch_size"])))
    anchors, positives, negatives = TripletLoss(
        HYPER["compared_length"], HYPER["nb_random_samples"], HYPER["negative_penalty"],
        numpy.random.RandomState(seed + 2)).sample(first, train)

    def loss_fn(representation, targets):
        pos, negs = targets
        return loss.terms(representation, encoder(pos), [encoder(n) for n in negs])

    return Program(name="srlts_triplet_causalcnn", model=encoder, batch=(anchors, (positives, negatives)),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the minus sign inside the negatives' logsigmoid dropped (classic): the loss pulls the negatives towards the
    # anchor as it does the positive, so every representation collapses to one direction.
    Bug("negative_sign_dropped", functools.partial(_build, bug="negative_sign_dropped"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizer.zero_grad() left out of fit_encoder's loop (classic): every batch's gradient adds to the earlier ones.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
