# ruff: noqa: UP031, RUF059, TRY002
"""The GE2E speaker encoder of CorentinJ/Real-Time-Voice-Cloning (Wan et al., "Generalized End-to-End Loss for
Speaker Verification"): a 3-layer LSTM over 40-channel mel frames, the last layer's final hidden state through a
linear layer and ReLU, L2-normalized; the GE2E softmax loss over a (speakers x utterances x speakers) similarity
matrix against inclusive centroids of the other speakers and exclusive centroids of the utterance's own speaker,
scaled by a learnable weight and bias (their gradients scaled by 0.01), clipped to norm 3, Adam.

Source: https://github.com/CorentinJ/Real-Time-Voice-Cloning
Commit: 865eba8826bb6d76721a9d828a546724779c23ab
Files: encoder/model.py, encoder/train.py, encoder/params_model.py, encoder/params_data.py,
encoder/data_objects/ (random_cycler.py, speaker.py, utterance.py, speaker_batch.py, speaker_verification_dataset.py)
License: MIT (Copyright (c) 2019 Corentin Jemine and others; full text in LICENSES/CorentinJ-Real-Time-Voice-Cloning.txt)
Domain: speech, speaker verification (GE2E loss over speaker-major batches of partial utterances)

Kept as written: ``SpeakerEncoder`` (LSTM, linear, ReLU, the ``+ 1e-5`` normalization, ``similarity_weight`` 10
and ``similarity_bias`` -5, ``do_gradient_ops``, ``similarity_matrix`` with its per-speaker loop over inclusive
and exclusive centroids, ``loss``'s ``np.repeat`` ground truth and ``CrossEntropyLoss``), ``train``'s loop body
(inputs from the ``SpeakerBatch``, forward, ``embeds.view((speakers_per_batch, utterances_per_speaker, -1))``,
``model.zero_grad()``, backward, ``do_gradient_ops``, ``optimizer.step()``), ``RandomCycler``, ``Speaker``,
``Utterance.random_partial``, ``SpeakerBatch`` and the ``SpeakerVerificationDataLoader``'s collate.

Deviations from the original:
- data: the preprocessed LibriSpeech/VoxCeleb mel frames on disk are replaced by synthetic log-mel utterances
  made from ``seed`` (each speaker a smooth spectral envelope plus a harmonic comb at its own pitch, each
  utterance a random gain contour and noise over 40 frames); ``Utterance.get_frames`` returns the array,
  ``Speaker`` takes its utterances as a list (no ``_sources.txt``); the loader has no workers;
- sizes for 2 CPU cores: ``speakers_per_batch`` 64 -> 8, ``utterances_per_speaker`` 10 -> 5,
  ``partials_n_frames`` 160 -> 24, ``model_hidden_size`` 256 -> 48, ``model_embedding_size`` 256 -> 32,
  ``model_num_layers`` 3 kept; ``learning_rate_init`` 1e-4 -> 1e-3 so that 30 steps show the loss falling;
- ``np.int`` (removed from NumPy) is written ``int``; the EER (sklearn's ``roc_curve`` and scipy's ``brentq``,
  not installed here, and never backpropagated) is not computed: ``loss`` returns ``eer = None``;
  visdom, the profiler, UMAP projections and checkpoints are dropped;
- ``train_step`` is one iteration of the loop; the Program's batch is one ``SpeakerBatch``'s inputs; ``eval_fn``
  is the GE2E loss on a fixed batch in ``eval`` mode;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
from torch import nn
from torch.nn.utils import clip_grad_norm_

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# encoder/params_model.py
## Model parameters
model_hidden_size = 48  # (port) 256
model_embedding_size = 32  # (port) 256
model_num_layers = 3

## Training parameters
learning_rate_init = 1e-3  # (port) 1e-4
speakers_per_batch = 8  # (port) 64
utterances_per_speaker = 5  # (port) 10

# encoder/params_data.py
mel_n_channels = 40
partials_n_frames = 24  # (port) 160
UTTERANCE_FRAMES = 40  # (port) the synthetic utterances' length
N_SPEAKERS, UTTERANCES_EACH = 24, 8


# encoder/model.py
class SpeakerEncoder(nn.Module):
    def __init__(self, device, loss_device, bug=None):
        super().__init__()
        self.loss_device = loss_device
        self.bug = bug

        # Network defition
        self.lstm = nn.LSTM(input_size=mel_n_channels,
                            hidden_size=model_hidden_size,
                            num_layers=model_num_layers,
                            batch_first=True).to(device)
        self.linear = nn.Linear(in_features=model_hidden_size,
                                out_features=model_embedding_size).to(device)
        self.relu = torch.nn.ReLU().to(device)

        # Cosine similarity scaling (with fixed initial parameter values)
        self.similarity_weight = nn.Parameter(torch.tensor([10.])).to(loss_device)
        self.similarity_bias = nn.Parameter(torch.tensor([-5.])).to(loss_device)

        # Loss
        self.loss_fn = nn.CrossEntropyLoss().to(loss_device)

    def do_gradient_ops(self):
        # Gradient scale
        self.similarity_weight.grad *= 0.01
        self.similarity_bias.grad *= 0.01

        # Gradient clipping
        clip_grad_norm_(self.parameters(), 3, norm_type=2)

    def forward(self, utterances, hidden_init=None):
        """
        Computes the embeddings of a batch of utterance spectrograms.

        :param utterances: batch of mel-scale filterbanks of same duration as a tensor of shape
        (batch_size, n_frames, n_channels)
        :param hidden_init: initial hidden state of the LSTM as a tensor of shape (num_layers,
        batch_size, hidden_size). Will default to a tensor of zeros if None.
        :return: the embeddings as a tensor of shape (batch_size, embedding_size)
        """
        # Pass the input through the LSTM layers and retrieve all outputs, the final hidden state
        # and the final cell state.
        out, (hidden, cell) = self.lstm(utterances, hidden_init)

        # We take only the hidden state of the last layer
        embeds_raw = self.relu(self.linear(hidden[-1]))

        # L2-normalize it
        embeds = embeds_raw / (torch.norm(embeds_raw, dim=1, keepdim=True) + 1e-5)

        return embeds

    def similarity_matrix(self, embeds):
        """
        Computes the similarity matrix according the section 2.1 of GE2E.

        :param embeds: the embeddings as a tensor of shape (speakers_per_batch,
        utterances_per_speaker, embedding_size)
        :return: the similarity matrix as a tensor of shape (speakers_per_batch,
        utterances_per_speaker, speakers_per_batch)
        """
        speakers_per_batch, utterances_per_speaker = embeds.shape[:2]

        # Inclusive centroids (1 per speaker). Cloning is needed for reverse differentiation
        centroids_incl = torch.mean(embeds, dim=1, keepdim=True)
        centroids_incl = centroids_incl.clone() / (torch.norm(centroids_incl, dim=2, keepdim=True) + 1e-5)

        # Exclusive centroids (1 per utterance)
        centroids_excl = (torch.sum(embeds, dim=1, keepdim=True) - embeds)
        centroids_excl /= (utterances_per_speaker - 1)
        centroids_excl = centroids_excl.clone() / (torch.norm(centroids_excl, dim=2, keepdim=True) + 1e-5)

        # Similarity matrix. The cosine similarity of already 2-normed vectors is simply the dot
        # product of these vectors (which is just an element-wise multiplication reduced by a sum).
        # We vectorize the computation for efficiency.
        sim_matrix = torch.zeros(speakers_per_batch, utterances_per_speaker,
                                 speakers_per_batch).to(self.loss_device)
        mask_matrix = 1 - np.eye(speakers_per_batch, dtype=int)  # (port) np.int
        for j in range(speakers_per_batch):
            mask = np.where(mask_matrix[j])[0]
            sim_matrix[mask, :, j] = (embeds[mask] * centroids_incl[j]).sum(dim=2)
            if self.bug == "own_speaker_inclusive_centroid":
                sim_matrix[j, :, j] = (embeds[j] * centroids_incl[j]).sum(dim=1)
            else:
                sim_matrix[j, :, j] = (embeds[j] * centroids_excl[j]).sum(dim=1)

        sim_matrix = sim_matrix * self.similarity_weight + self.similarity_bias
        return sim_matrix

    def loss(self, embeds):
        """
        Computes the softmax loss according the section 2.1 of GE2E.

        :param embeds: the embeddings as a tensor of shape (speakers_per_batch,
        utterances_per_speaker, embedding_size)
        :return: the loss and the EER for this batch of embeddings.
        """
        speakers_per_batch, utterances_per_speaker = embeds.shape[:2]

        # Loss
        sim_matrix = self.similarity_matrix(embeds)
        sim_matrix = sim_matrix.reshape((speakers_per_batch * utterances_per_speaker,
                                         speakers_per_batch))
        if self.bug == "ground_truth_tiled":
            ground_truth = np.tile(np.arange(speakers_per_batch), utterances_per_speaker)
        else:
            ground_truth = np.repeat(np.arange(speakers_per_batch), utterances_per_speaker)
        target = torch.from_numpy(ground_truth).long().to(self.loss_device)
        loss = self.loss_fn(sim_matrix, target)

        # EER (not backpropagated): (port) sklearn/scipy are not installed; see the docstring
        eer = None

        return loss, eer


# encoder/data_objects/random_cycler.py
class RandomCycler:
    """
    Creates an internal copy of a sequence and allows access to its items in a constrained random
    order. For a source sequence of n items and one or several consecutive queries of a total
    of m items, the following guarantees hold (one implies the other):
        - Each item will be returned between m // n and ((m - 1) // n) + 1 times.
        - Between two appearances of the same item, there may be at most 2 * (n - 1) other items.
    """

    def __init__(self, source):
        if len(source) == 0:
            raise Exception("Can't create RandomCycler from an empty collection")
        self.all_items = list(source)
        self.next_items = []

    def sample(self, count: int):
        shuffle = lambda l: random.sample(l, len(l))

        out = []
        while count > 0:
            if count >= len(self.all_items):
                out.extend(shuffle(list(self.all_items)))
                count -= len(self.all_items)
                continue
            n = min(count, len(self.next_items))
            out.extend(self.next_items[:n])
            count -= n
            self.next_items = self.next_items[n:]
            if len(self.next_items) == 0:
                self.next_items = shuffle(list(self.all_items))
        return out

    def __next__(self):
        return self.sample(1)[0]


# encoder/data_objects/utterance.py
class Utterance:
    def __init__(self, frames):
        self.frames = frames  # (port) the frames themselves, not a .npy path

    def get_frames(self):
        return self.frames

    def random_partial(self, n_frames):
        frames = self.get_frames()
        if frames.shape[0] == n_frames:
            start = 0
        else:
            start = np.random.randint(0, frames.shape[0] - n_frames)
        end = start + n_frames
        return frames[start:end], (start, end)


# encoder/data_objects/speaker.py
class Speaker:
    def __init__(self, name, utterances):
        self.name = name
        self.utterances = utterances  # (port) given, not read from _sources.txt
        self.utterance_cycler = RandomCycler(self.utterances)

    def random_partial(self, count, n_frames):
        utterances = self.utterance_cycler.sample(count)

        a = [(u,) + u.random_partial(n_frames) for u in utterances]

        return a


# encoder/data_objects/speaker_batch.py
class SpeakerBatch:
    def __init__(self, speakers, utterances_per_speaker: int, n_frames: int):
        self.speakers = speakers
        self.partials = {s: s.random_partial(utterances_per_speaker, n_frames) for s in speakers}

        # Array of shape (n_speakers * n_utterances, n_frames, mel_n), e.g. for 3 speakers with
        # 4 utterances each of 160 frames of 40 mel coefficients: (12, 160, 40)
        self.data = np.array([frames for s in speakers for _, frames, _ in self.partials[s]])


# encoder/data_objects/speaker_verification_dataset.py
class SpeakerVerificationDataset(torch.utils.data.Dataset):
    def __init__(self, speakers):
        self.speakers = speakers
        self.speaker_cycler = RandomCycler(self.speakers)

    def __len__(self):
        return int(1e10)

    def __getitem__(self, index):
        return next(self.speaker_cycler)


class SpeakerVerificationDataLoader(torch.utils.data.DataLoader):
    def __init__(self, dataset, speakers_per_batch, utterances_per_speaker, num_workers=0):
        self.utterances_per_speaker = utterances_per_speaker
        super().__init__(dataset=dataset, batch_size=speakers_per_batch, shuffle=False, num_workers=num_workers,
                         collate_fn=self.collate, drop_last=False)

    def collate(self, speakers):
        return SpeakerBatch(speakers, self.utterances_per_speaker, partials_n_frames)


# ----------------------------------------------------------------------------------------------- (port) data
def synthetic_speakers(rng):
    """Log-mel utterances: a speaker's smooth envelope + a harmonic comb at its pitch, per-utterance gain and noise."""
    ch = np.arange(mel_n_channels)
    speakers = []
    for s in range(N_SPEAKERS):
        env = np.convolve(rng.normal(0, 1, mel_n_channels + 8), np.ones(9) / 3, mode="valid")
        pitch = rng.uniform(3, 9)
        comb = 0.8 * np.cos(2 * np.pi * ch / pitch)
        utts = []
        for _ in range(UTTERANCES_EACH):
            t = np.arange(UTTERANCE_FRAMES)[:, None]
            gain = 0.5 * np.sin(2 * np.pi * t / rng.uniform(8, 20) + rng.uniform(0, 6))
            frames = env[None, :] + comb[None, :] * (1 + gain) + rng.normal(0, 0.4, (UTTERANCE_FRAMES, mel_n_channels))
            utts.append(Utterance(frames.astype(np.float32)))
        speakers.append(Speaker("speaker%d" % s, utts))
    return speakers


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    rng = np.random.default_rng(seed)

    # Create a dataset and a dataloader
    dataset = SpeakerVerificationDataset(synthetic_speakers(rng))
    loader = SpeakerVerificationDataLoader(
        dataset,
        speakers_per_batch,
        utterances_per_speaker,
        num_workers=0,  # (port) 4
    )
    device = torch.device("cpu")
    loss_device = torch.device("cpu")

    # Create the model and the optimizer
    model = SpeakerEncoder(device, loss_device, bug=bug)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate_init)
    model.train()

    fixed = torch.from_numpy(SpeakerBatch(dataset.speakers[:speakers_per_batch], utterances_per_speaker,
                                          partials_n_frames).data)
    it = iter(loader)

    def train_step():
        speaker_batch = next(it)

        # Forward pass
        inputs = torch.from_numpy(speaker_batch.data).to(device)
        embeds = model(inputs)
        embeds_loss = embeds.view((speakers_per_batch, utterances_per_speaker, -1)).to(loss_device)
        loss, eer = model.loss(embeds_loss)

        # Backward pass
        if bug != "zero_grad_dropped":
            model.zero_grad()
        loss.backward()
        model.do_gradient_ops()
        optimizer.step()
        return loss.item()

    def loss_fn(embeds, _target=None):
        return model.loss(embeds.view((speakers_per_batch, utterances_per_speaker, -1)).to(loss_device))[0]

    def eval_fn(model, batch):
        was = model.training
        model.eval()
        with torch.no_grad():
            out = float(loss_fn(model(batch)))
        model.train(was)
        return out

    return Program(name="rtvc_ge2e_encoder", model=model, batch=fixed, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the utterance's own speaker scored against the inclusive centroid (classic GE2E slip: the paper's exclusive
    # centroid dropped), so every utterance is partly compared with itself and the loss is eased.
    Bug("own_speaker_inclusive_centroid", functools.partial(_build, bug="own_speaker_inclusive_centroid"),
        "learning_ledger", ("OBJECTIVE",)),
    # np.tile for np.repeat in the ground truth (classic): the speaker-major rows get speaker ids cycling
    # 0..S-1, so most rows are trained toward another speaker's column.
    Bug("ground_truth_tiled", functools.partial(_build, bug="ground_truth_tiled"), "learning_ledger", ("TASK",)),
    # model.zero_grad() left out of the loop (classic): the gradients of every step pile up; a slip of the whole
    # model's step.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
