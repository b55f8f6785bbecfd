# ruff: noqa: UP008, PLR0402, RUF059, PIE790, SIM102
"""GRU keyword spotter from microsoft/ELL's audio training tools (``train_classifier.py --architecture GRU
--num_layers 2``, the "Training an audio keyword spotter with PyTorch" tutorial): featurized audio rows (frames of
log-mel features), two stacked ``nn.GRU`` layers over the sequence-first batch whose hidden states are kept on the
module (detached) and cleared by ``init_hidden()`` before every batch, a linear layer on the last frame's output and
``log_softmax``, NLLLoss, RMSprop with the config's defaults (lr 1e-3, alpha 0, weight decay 1e-5), keyword labels
indexed from ``categories.txt`` with ``<null>`` as class 0, and ``evaluate``'s accuracy.

Source: https://github.com/microsoft/ELL
Commit: 2a3f938ca4becebdc448bfdfd8ebf7f5ab437265
Files: tools/utilities/pythonlibs/audio/training/train_classifier.py (``KeywordSpotter`` with ``fit``,
``batch_accuracy``, ``evaluate``; ``GRUKeywordSpotter``; ``AudioDataset``; ``create_model``; ``train``),
tools/utilities/pythonlibs/audio/training/training_config.py (the option defaults)
License: MIT (Copyright (c) Microsoft Corporation; full text in LICENSES/microsoft-ELL.txt)
Domain: speech, keyword spotting (stacked GRUs over featurized audio, last-frame classification)

Kept as written: ``KeywordSpotter.__init__`` (it sets ``self.training = False``), ``GRUKeywordSpotter`` (``gru1``,
``gru2``, ``hidden2keyword``, the hidden states detached and kept, ``gru_out[-1, :, :]`` into ``log_softmax``),
``batch_accuracy``, ``evaluate`` (``eval``, ``init_hidden`` per batch, no_grad), ``AudioDataset`` (``<null>`` -> 0,
``get_data_loader``'s shuffled ``drop_last`` DataLoader, the ``normalize`` option off as in the defaults), the
defaults of ``ModelOptions`` / ``TrainingOptions`` / ``OptimizerOptions`` (RMSprop, no scheduler, not rolling), and
the non-rolling body of ``fit``'s batch loop (``audio.transpose(1, 0)``, ``init_hidden()``, ``zero_grad``, forward,
NLLLoss, backward, the scheduler step when there is one, optimizer step).

Deviations from the original:
- the speech commands recordings and ELL's compiled mel featurizer are not here: the featurized rows are synthetic,
  made from ``seed``, as ``make_dataset.py`` would store them (``features`` reshaped to ``(rows, window_size,
  input_size)``, string ``labels``): five keywords plus ``<null>``, each keyword a smooth log-mel-like template over
  the frames, every row its keyword's template shifted by up to 3 frames, scaled and noised (``<null>`` rows are
  noise alone); ``categories.txt`` is that list of six;
- sizes for 2 CPU cores: 32 frames of 20 features per row, hidden_units 128 -> 32, batch_size 128 -> 32, 640
  training and 160 validation rows;
- ``fit`` is not run an epoch at a time: ``train_step`` is one batch of its loop (the shuffled loader restarts at
  each epoch's end); the per-epoch validation print, the ``detail`` log, AzureML, ONNX export, saving and the
  rolling-training branch are left out; ``fit``'s preamble (mean / std, the optimizer and scheduler choice) runs at
  build; ``eval_fn`` is ``evaluate``'s accuracy on the validation rows;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program


# training_config.py (defaults)
class ModelOptions:
    def __init__(self):
        self.architecture = "GRU"
        self.num_layers = 2
        self.hidden_units = 32  # (port) 128


class DatasetOptions:
    def __init__(self):
        self.normalize = False


class OptimizerOptions:
    def __init__(self):
        self.weight_decay = 1e-5
        self.momentum = 0  # RMSprop
        self.centered = False  # RMSprop
        self.alpha = 0  # ASGD, RMSprop
        self.eps = 1e-8


class TrainingOptions:
    def __init__(self):
        self.max_epochs = 30
        self.learning_rate = 1e-3
        self.lr_scheduler = None
        self.batch_size = 32  # (port) 128
        self.optimizer = "RMSprop"
        self.optimizer_options = OptimizerOptions()
        self.rolling = False


# train_classifier.py
class KeywordSpotter(nn.Module):
    """ This baseclass provides the PyTorch Module pattern for defining and training keyword spotters """

    def __init__(self, input_dim, num_keywords, batch_first=False):
        super(KeywordSpotter, self).__init__()
        self.input_dim = input_dim
        self.num_keywords = num_keywords
        self.batch_first = batch_first
        self.training = False
        self.tracking = False
        self.init_hidden()

    def init_hidden(self):
        """ Clear any  hidden state """
        pass

    def batch_accuracy(self, scores, labels):
        """ Compute the training accuracy of the results of a single mini-batch """
        batch_size = scores.shape[0]
        passed = 0
        results = []
        for i in range(batch_size):
            expected = labels[i]
            actual = scores[i].argmax()
            results += [int(actual)]
            if expected == actual:
                passed += 1
        return (float(passed) * 100.0 / float(batch_size), passed, results)

    def evaluate(self, test_data, batch_size, device=None, outfile=None):
        """
        Evaluate the given test data and print the pass rate
        """
        self.eval()
        passed = 0
        total = 0
        if test_data.mean is not None:
            mean = torch.from_numpy(np.array([[test_data.mean]])).to(device)
            std = torch.from_numpy(np.array([[test_data.std]])).to(device)
        else:
            mean = None
            std = None
        self.zero_grad()
        results = []
        with torch.no_grad():
            for i_batch, (audio, labels) in enumerate(test_data.get_data_loader(batch_size)):
                batch_size = audio.shape[0]
                audio = audio.transpose(1, 0)  # GRU wants seq,batch,feature
                if mean is not None:
                    audio = (audio - mean) / std
                total += batch_size
                self.init_hidden()
                keyword_scores = self(audio)
                last_accuracy, ok, actual = self.batch_accuracy(keyword_scores, labels)
                results += actual
                passed += ok
        return (passed, total, passed / total)


class GRUKeywordSpotter(KeywordSpotter):
    """This class is a PyTorch Module that implements a 1, 2 or 3 layer GRU based audio classifier"""

    def __init__(self, input_dim, num_keywords, model, bug=None):
        self.hidden_units = model.hidden_units
        self.num_layers = model.num_layers
        super(GRUKeywordSpotter, self).__init__(input_dim, num_keywords)
        self.bug = bug
        # The GRU takes audio sequences as input, and outputs hidden states
        # with dimensionality hidden_units.
        self.gru1 = nn.GRU(input_dim, self.hidden_units)
        self.gru2 = None
        if self.num_layers > 1:
            self.gru2 = nn.GRU(self.hidden_units, self.hidden_units)
        self.gru3 = None
        last_output_size = self.hidden_units
        if self.num_layers > 2:
            self.gru3 = nn.GRU(self.hidden_units, num_keywords)
            last_output_size = num_keywords
        # The linear layer is a fully connected layer that maps from hidden state space
        # to number of expected keywords
        self.hidden2keyword = nn.Linear(last_output_size, num_keywords)
        self.init_hidden()

    def init_hidden(self):
        """ Clear the hidden state for the GRU nodes """
        self.hidden1 = None
        self.hidden2 = None
        self.hidden3 = None

    def forward(self, input):
        """ Perform the forward processing of the given input and return the prediction """
        # input is shape: [seq,batch,feature]
        if self.tracking:
            if self.mean is not None:
                input = (input - self.mean) / self.std
        gru_out, self.hidden1 = self.gru1(input, self.hidden1)
        # we have to detach the hidden states because we may keep them longer than 1 iteration.
        self.hidden1 = self.hidden1.detach()
        if self.gru2 is not None:
            gru_out, self.hidden2 = self.gru2(gru_out, self.hidden2)
            self.hidden2 = self.hidden2.detach()
        if self.gru3 is not None:
            gru_out, self.hidden3 = self.gru3(gru_out, self.hidden3)
            self.hidden3 = self.hidden3.detach()
        # ... by taking only the prediction at the end of the word is better way to perform keyword spotting.
        keyword_space = self.hidden2keyword(gru_out[0 if self.bug == "readout_at_first_frame" else -1, :, :])
        result = F.log_softmax(keyword_space, dim=0 if self.bug == "log_softmax_over_batch" else 1)
        return result


class AudioDataset(Dataset):
    """
    Featurized Audio in PyTorch Dataset so we can get a DataLoader that is needed for
    mini-batch training.
    """

    def __init__(self, dataset, config, keywords, seed=0):
        self.dataset = dataset  # (port) the arrays np.load(filename) returns
        parameters = self.dataset["parameters"]
        self.sample_rate = int(parameters[0])
        self.audio_size = int(parameters[1])
        self.input_size = int(parameters[2])
        self.window_size = int(parameters[3])
        self.shift = int(parameters[4])
        self.features = self.dataset["features"].astype(np.float32)
        self.num_rows = len(self.features)
        self.features = self.features.reshape((self.num_rows, self.window_size, self.input_size))
        if config.normalize:
            mean = self.features.mean(axis=0)
            std = self.features.std(axis=0)
            self.mean = mean.mean(axis=0).astype(np.float32)
            std = std.mean(axis=0)
            # self.std is a divisor, so make sure it contains no zeros
            self.std = np.array(np.where(std == 0, 1, std)).astype(np.float32)
        else:
            self.mean = None
            self.std = None
        self.label_names = self.dataset["labels"]
        self.keywords = keywords
        self.num_keywords = len(self.keywords)
        self.labels = self.to_long_vector()
        self.generator = torch.Generator().manual_seed(seed)  # (port) the shuffle's generator

    def get_data_loader(self, batch_size):
        """ Get a DataLoader that can enumerate shuffled batches of data in this dataset """
        return DataLoader(self, batch_size=batch_size, shuffle=True, drop_last=True, generator=self.generator)

    def to_long_vector(self):
        """ convert the expected labels to a list of integer indexes into the array of keywords """
        indexer = [(0 if x == "<null>" else self.keywords.index(x)) for x in self.label_names]
        return np.array(indexer, dtype=np.longlong)

    def __len__(self):
        return self.num_rows

    def __getitem__(self, idx):
        audio = self.features[idx]  # batch index is second dimension
        label = self.labels[idx]
        sample = (audio, label)
        return sample


def _templates(rng, keywords, window_size=32, input_size=20):
    """(port) One smooth log-mel-like template per keyword (<null> has none)."""
    t = np.linspace(0, 1, window_size)[:, None]
    f = np.linspace(0, 1, input_size)[None, :]
    templates = [np.zeros((window_size, input_size))]
    for _ in keywords[1:]:
        a, b, c, d = rng.uniform(0.5, 3.0, 4)
        templates.append(2.0 * np.sin(np.pi * (a * t + b * f)) * np.cos(np.pi * (c * t - d * f)))
    return templates


def _featurized(rng, keywords, templates, rows):
    """(port) Stands in for make_dataset.py's npz: each row its keyword's template shifted, scaled and noised."""
    window_size, input_size = templates[0].shape
    labels = rng.integers(0, len(keywords), rows)
    feats = np.stack([np.roll(templates[k], int(rng.integers(-3, 4)), axis=0) * rng.uniform(0.7, 1.3)
                      + rng.normal(scale=0.5, size=(window_size, input_size)) - 4.0 for k in labels])
    return {"parameters": np.array([16000, 512, input_size, window_size, 160]),
            "features": feats.reshape(rows, -1), "labels": np.array([keywords[k] for k in labels])}


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    keywords = ["<null>", "yes", "no", "up", "down", "go"]  # (port) categories.txt
    model_options, dataset_options, options = ModelOptions(), DatasetOptions(), TrainingOptions()
    templates = _templates(rng, keywords)
    training_data = AudioDataset(_featurized(rng, keywords, templates, 640), dataset_options, keywords, seed)
    validation_data = AudioDataset(_featurized(rng, keywords, templates, 160), dataset_options, keywords, seed + 1)
    model = GRUKeywordSpotter(training_data.input_size, training_data.num_keywords, model_options, bug=bug)

    # fit's preamble
    self = model
    self.mean = None
    self.std = None
    loss_function = nn.NLLLoss()
    initial_rate = options.learning_rate
    oo = options.optimizer_options
    self.training = True
    optimizer = optim.RMSprop(self.parameters(), lr=initial_rate, weight_decay=oo.weight_decay,
                              eps=oo.eps, alpha=oo.alpha, momentum=oo.momentum, centered=oo.centered)
    scheduler = None
    batch_size = options.batch_size
    st = {"it": iter(training_data.get_data_loader(batch_size))}

    def train_step():
        batch = next(st["it"], None)
        if batch is None:
            st["it"] = iter(training_data.get_data_loader(batch_size))
            batch = next(st["it"])
        self.train()
        audio, labels = batch
        if not self.batch_first:
            audio = audio.transpose(1, 0)  # GRU wants seq,batch,feature
        self.init_hidden()
        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        # optionally normalize the audio
        if self.mean is not None:
            audio = (audio - self.mean) / self.std
        # Run our forward pass.
        keyword_scores = self(audio)
        # Compute the loss, gradients
        loss = loss_function(keyword_scores, labels)
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        # move to next learning rate
        if scheduler:
            scheduler.step()
        optimizer.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        passed, total, rate = model.evaluate(validation_data, batch_size)
        model.train()
        return rate

    audio, labels = next(iter(DataLoader(training_data, batch_size=batch_size)))
    return Program(name="ell_gru_kws", model=model, batch=(audio.transpose(1, 0), labels), loss_fn=loss_function,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, batch_axis=1)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the keyword read from the first frame's GRU output (gru_out[0]) instead of the last, so the
    # prediction sees one frame of the word.
    Bug("readout_at_first_frame", functools.partial(_build, bug="readout_at_first_frame"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic axis slip: log_softmax over dim 0, the batch, so each keyword's scores are normalized across examples.
    Bug("log_softmax_over_batch", functools.partial(_build, bug="log_softmax_over_batch"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: optimizer.zero_grad() between backward and step, so every step applies a zero gradient (weight decay
    # alone moves the weights).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
