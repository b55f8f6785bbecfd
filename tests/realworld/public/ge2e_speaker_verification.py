"""Text-independent speaker verification with the generalized end-to-end (GE2E) softmax loss, from HarryVolek's
PyTorch_Speaker_Verification: a 3-layer LSTM over log-mel frames, the last frame projected and L2-normalized as the
d-vector, a batch of N speakers x M utterances shuffled through the network and un-permuted, the similarity of every
utterance to every speaker centroid (its own speaker's centroid leaving the utterance out) scaled by a learned
``w`` and shifted by a learned ``b``, the softmax GE2E loss summed; SGD over the embedder and the loss's ``w, b``,
separate gradient clipping (3.0 and 1.0); evaluation by the equal error rate of enrollment vs verification halves.

Source: https://github.com/HarryVolek/PyTorch_Speaker_Verification
Commit: 10e159a8d3255503c0184cde4eb7097968857a31
Files: train_speech_embedder.py, speech_embedder_net.py, utils.py, data_load.py (SpeakerDatasetTIMITPreprocessed),
config/config.yaml
License: BSD-3-Clause (Copyright (c) 2019, HarryVolek; full text in LICENSES/HarryVolek-PyTorch_Speaker_Verification.txt)
Domain: speech, speaker verification (d-vector LSTM embedder, GE2E softmax loss, EER)

Kept as written: ``SpeechEmbedder`` (LSTM with zero biases and xavier-normal weights, the last frame, the
projection, ``x / torch.norm(x, dim=1)``), ``GE2ELoss`` (``w`` 10, ``b`` -5, the ``torch.clamp(self.w, 1e-6)`` whose
result is discarded, as upstream), ``get_centroids``, ``get_utterance_centroids``, ``get_cossim``, ``calc_loss``,
``train``'s loop body (the reshape to ``N*M`` utterances, ``random.sample`` permutation and its inverse, zero_grad,
forward, un-permute, reshape to ``(N, M, proj)``, loss, backward, the two ``clip_grad_norm_`` calls, step) and its
optimizer (SGD over two parameter groups, lr 0.01 from the config), ``SpeakerDatasetTIMITPreprocessed.__getitem__``
(a random speaker by ``random.sample``, M random utterances by ``np.random.randint``, the first 160 frames cut, the
transpose to ``[M, frames, n_mels]``) and ``test``'s EER sweep.

Deviations from the original:
- TIMIT and the preprocessed ``.npy`` speaker files are not here: each synthetic "speaker" (24 in training, 8 in
  test) is a spectral envelope over the 40 mel bands plus a formant-like slow modulation, made from ``seed``; each
  utterance is that envelope with its own loudness, a random time shift of the modulation and frame noise,
  ``[utterances, n_mels, frames]`` as the ``.npy`` files hold. The dataset reads these arrays instead of files.
- sizes for 2 CPU cores: ``hidden`` 768 -> 48, ``proj`` 256 -> 32, ``num_layer`` 3 kept, frames 180/160 -> 24;
  N 4 and M 5 kept (test M 6 kept).
- ``hp`` (the YAML config) is a small dotdict holding the same keys; the device is the CPU; the DataLoader has no
  workers; logging and checkpoints are dropped.
- ``train`` is not run an epoch at a time: ``train_step`` is one batch of its loop (a new loader iterator when the
  epoch ends), returning the loss; ``eval_fn`` is ``test``'s EER over one test batch (the model passed in, not a
  checkpoint loaded, and put back in training mode after).
- the Program's batch is one ``[N*M, frames, n_mels]`` draw with the speaker index of every utterance; its
  ``loss_fn`` is the reshape to ``(N, M, proj)`` and ``ge2e_loss`` (the labels only fix the arrangement).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, PIE808

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

FRAMES = 24  # (port) 180 frames in the files, 160 kept by the dataset


class _Dot(dict):
    __getattr__ = dict.get


hp = _Dot(training=True, device="cpu",
          data=_Dot(nmels=40, tisv_frame=FRAMES),
          model=_Dot(hidden=48, num_layer=3, proj=32),  # (port) 768, 3, 256
          train=_Dot(N=4, M=5, num_workers=0, lr=0.01),
          test=_Dot(N=4, M=6, num_workers=0))


# utils.py
def get_centroids(embeddings):
    centroids = embeddings.mean(dim=1)
    return centroids


def get_utterance_centroids(embeddings):
    """
    Returns the centroids for each utterance of a speaker, where
    the utterance centroid is the speaker centroid without considering
    this utterance

    Shape of embeddings should be:
        (speaker_ct, utterance_per_speaker_ct, embedding_size)
    """
    sum_centroids = embeddings.sum(dim=1)
    # we want to subtract out each utterance, prior to calculating the
    # the utterance centroid
    sum_centroids = sum_centroids.reshape(
        sum_centroids.shape[0], 1, sum_centroids.shape[-1]
    )
    # we want the mean but not including the utterance itself, so -1
    num_utterances = embeddings.shape[1] - 1
    centroids = (sum_centroids - embeddings) / num_utterances
    return centroids


def get_cossim(embeddings, centroids):
    # number of utterances per speaker
    num_utterances = embeddings.shape[1]
    utterance_centroids = get_utterance_centroids(embeddings)

    # flatten the embeddings and utterance centroids to just utterance,
    # so we can do cosine similarity
    utterance_centroids_flat = utterance_centroids.view(
        utterance_centroids.shape[0] * utterance_centroids.shape[1],
        -1
    )
    embeddings_flat = embeddings.view(
        embeddings.shape[0] * num_utterances,
        -1
    )
    # the cosine distance between utterance and the associated centroids
    # for that utterance
    # this is each speaker's utterances against his own centroid, but each
    # comparison centroid has the current utterance removed
    cos_same = F.cosine_similarity(embeddings_flat, utterance_centroids_flat)

    # now we get the cosine distance between each utterance and the other speakers'
    # centroids
    # to do so requires comparing each utterance to each centroid. To keep the
    # operation fast, we vectorize by using matrices L (embeddings) and
    # R (centroids) where L has each utterance repeated sequentially for all
    # comparisons and R has the entire centroids frame repeated for each utterance
    centroids_expand = centroids.repeat((num_utterances * embeddings.shape[0], 1))
    embeddings_expand = embeddings_flat.unsqueeze(1).repeat(1, embeddings.shape[0], 1)
    embeddings_expand = embeddings_expand.view(
        embeddings_expand.shape[0] * embeddings_expand.shape[1],
        embeddings_expand.shape[-1]
    )
    cos_diff = F.cosine_similarity(embeddings_expand, centroids_expand)
    cos_diff = cos_diff.view(
        embeddings.size(0),
        num_utterances,
        centroids.size(0)
    )
    # assign the cosine distance for same speakers to the proper idx
    same_idx = list(range(embeddings.size(0)))
    cos_diff[same_idx, :, same_idx] = cos_same.view(embeddings.shape[0], num_utterances)
    cos_diff = cos_diff + 1e-6
    return cos_diff


def calc_loss(sim_matrix):
    same_idx = list(range(sim_matrix.size(0)))
    pos = sim_matrix[same_idx, :, same_idx]
    neg = (torch.exp(sim_matrix).sum(dim=2) + 1e-6).log_()
    per_embedding_loss = -1 * (pos - neg)
    loss = per_embedding_loss.sum()
    return loss, per_embedding_loss


# speech_embedder_net.py
class SpeechEmbedder(nn.Module):

    def __init__(self):
        super(SpeechEmbedder, self).__init__()
        self.LSTM_stack = nn.LSTM(hp.data.nmels, hp.model.hidden, num_layers=hp.model.num_layer, batch_first=True)
        for name, param in self.LSTM_stack.named_parameters():
            if 'bias' in name:
                nn.init.constant_(param, 0.0)
            elif 'weight' in name:
                nn.init.xavier_normal_(param)
        self.projection = nn.Linear(hp.model.hidden, hp.model.proj)

    def forward(self, x):
        x, _ = self.LSTM_stack(x.float())  # (batch, frames, n_mels)
        # only use last frame
        x = x[:, x.size(1) - 1]
        x = self.projection(x.float())
        x = x / torch.norm(x, dim=1).unsqueeze(1)
        return x


class GE2ELoss(nn.Module):

    def __init__(self, device):
        super(GE2ELoss, self).__init__()
        self.w = nn.Parameter(torch.tensor(10.0).to(device), requires_grad=True)
        self.b = nn.Parameter(torch.tensor(-5.0).to(device), requires_grad=True)
        self.device = device

    def forward(self, embeddings):
        torch.clamp(self.w, 1e-6)
        centroids = get_centroids(embeddings)
        cossim = get_cossim(embeddings, centroids)
        sim_matrix = self.w * cossim.to(self.device) + self.b
        loss, _ = calc_loss(sim_matrix)
        return loss


# data_load.py, SpeakerDatasetTIMITPreprocessed (the .npy speaker files held in memory)
class SpeakerDatasetTIMITPreprocessed(Dataset):

    def __init__(self, speakers, shuffle=True, utter_start=0, training=True):
        self.speakers = speakers
        self.utter_num = hp.train.M if training else hp.test.M
        self.file_list = list(range(len(speakers)))
        self.shuffle = shuffle
        self.utter_start = utter_start

    def __len__(self):
        return len(self.file_list)

    def __getitem__(self, idx):

        np_file_list = self.file_list

        if self.shuffle:
            selected_file = random.sample(np_file_list, 1)[0]  # select random speaker
        else:
            selected_file = np_file_list[idx]

        utters = self.speakers[selected_file]  # load utterance spectrogram of selected speaker
        if self.shuffle:
            utter_index = np.random.randint(0, utters.shape[0], self.utter_num)  # select M utterances per speaker
            utterance = utters[utter_index]
        else:
            utterance = utters[self.utter_start: self.utter_start + self.utter_num]  # [batch(M), n_mels, frames]

        utterance = utterance[:, :, :FRAMES]  # TODO implement variable length batch size

        utterance = torch.tensor(np.transpose(utterance, axes=(0, 2, 1)))  # transpose [batch, frames, n_mels]
        return utterance


def synthetic_speakers(rng, n_speakers, n_utters=12):
    """(port) ``[utterances, n_mels, frames]`` log-mel arrays per speaker: a spectral envelope and a slow
    formant-like modulation of its own, each utterance with its own loudness, shift and noise."""
    speakers = []
    bands = np.arange(hp.data.nmels)
    t = np.arange(FRAMES + 4)
    for _ in range(n_speakers):
        centres = rng.uniform(0, hp.data.nmels, size=3)
        envelope = sum(np.exp(-0.5 * ((bands - c) / rng.uniform(2, 5)) ** 2) for c in centres)
        rate = rng.uniform(0.2, 0.8)
        phase_band = rng.uniform(0, 2 * np.pi, size=hp.data.nmels)
        utters = []
        for _ in range(n_utters):
            shift = rng.uniform(0, 2 * np.pi)
            loud = rng.normal(0, 0.3)
            mod = 0.5 * np.sin(rate * t[None, :FRAMES] + phase_band[:, None] + shift)
            spec = 2.0 * envelope[:, None] * (1 + mod) + loud + rng.normal(0, 0.3, size=(hp.data.nmels, FRAMES))
            utters.append(spec)
        speakers.append(np.stack(utters).astype(np.float32))
    return speakers


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    train_speakers = synthetic_speakers(rng, 24)
    test_speakers = synthetic_speakers(rng, 8)

    device = torch.device(hp.device)

    train_dataset = SpeakerDatasetTIMITPreprocessed(train_speakers)
    train_loader = DataLoader(train_dataset, batch_size=hp.train.N, shuffle=True, num_workers=hp.train.num_workers,
                              drop_last=True, generator=torch.Generator().manual_seed(seed))
    test_dataset = SpeakerDatasetTIMITPreprocessed(test_speakers, training=False)
    test_loader = DataLoader(test_dataset, batch_size=hp.test.N, shuffle=True, num_workers=hp.test.num_workers,
                             drop_last=True, generator=torch.Generator().manual_seed(seed + 1))

    embedder_net = SpeechEmbedder().to(device)
    ge2e_loss = GE2ELoss(device)
    # Both net and loss have trainable parameters
    optimizer = torch.optim.SGD([
        {'params': embedder_net.parameters()},
        {'params': ge2e_loss.parameters()}
    ], lr=hp.train.lr)

    embedder_net.train()
    st = {"it": iter(train_loader)}

    def next_batch():
        try:
            return next(st["it"])
        except StopIteration:
            st["it"] = iter(train_loader)
            return next(st["it"])

    def train_step():
        mel_db_batch = next_batch()
        mel_db_batch = mel_db_batch.to(device)

        mel_db_batch = torch.reshape(mel_db_batch, (hp.train.N * hp.train.M, mel_db_batch.size(2),
                                                    mel_db_batch.size(3)))
        perm = random.sample(range(0, hp.train.N * hp.train.M), hp.train.N * hp.train.M)
        unperm = list(perm)
        for i, j in enumerate(perm):
            unperm[j] = i
        mel_db_batch = mel_db_batch[perm]
        # gradient accumulates
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()

        embeddings = embedder_net(mel_db_batch)
        if bug == "embeddings_not_unpermuted":
            embeddings = embeddings[perm]
        else:
            embeddings = embeddings[unperm]
        embeddings = torch.reshape(embeddings, (hp.train.N, hp.train.M, embeddings.size(1)))

        # get loss, call backward, step optimizer
        loss = ge2e_loss(embeddings)  # wants (Speaker, Utterances, embedding)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(embedder_net.parameters(), 3.0)
        torch.nn.utils.clip_grad_norm_(ge2e_loss.parameters(), 1.0)
        optimizer.step()
        return loss.item()

    def test(model, _batch=None):
        # test(model_path)'s EER over one test batch, on the model passed in
        model.eval()
        mel_db_batch = next(iter(test_loader))
        with torch.no_grad():
            enrollment_batch, verification_batch = torch.split(mel_db_batch, int(mel_db_batch.size(1) / 2), dim=1)

            enrollment_batch = torch.reshape(enrollment_batch, (hp.test.N * hp.test.M // 2, enrollment_batch.size(2),
                                                                enrollment_batch.size(3)))
            verification_batch = torch.reshape(verification_batch, (hp.test.N * hp.test.M // 2,
                                                                    verification_batch.size(2),
                                                                    verification_batch.size(3)))

            perm = random.sample(range(0, verification_batch.size(0)), verification_batch.size(0))
            unperm = list(perm)
            for i, j in enumerate(perm):
                unperm[j] = i

            verification_batch = verification_batch[perm]
            enrollment_embeddings = model(enrollment_batch)
            verification_embeddings = model(verification_batch)
            verification_embeddings = verification_embeddings[unperm]

            enrollment_embeddings = torch.reshape(enrollment_embeddings, (hp.test.N, hp.test.M // 2,
                                                                          enrollment_embeddings.size(1)))
            verification_embeddings = torch.reshape(verification_embeddings, (hp.test.N, hp.test.M // 2,
                                                                              verification_embeddings.size(1)))

            enrollment_centroids = get_centroids(enrollment_embeddings)

            sim_matrix = get_cossim(verification_embeddings, enrollment_centroids)

            # calculating EER
            diff = 1
            EER = 0
            for thres in [0.01 * i + 0.5 for i in range(50)]:
                sim_matrix_thresh = sim_matrix > thres

                FAR = (sum([sim_matrix_thresh[i].float().sum() - sim_matrix_thresh[i, :, i].float().sum()
                            for i in range(int(hp.test.N))])
                       / (hp.test.N - 1.0) / (float(hp.test.M / 2)) / hp.test.N)

                FRR = (sum([hp.test.M / 2 - sim_matrix_thresh[i, :, i].float().sum() for i in range(int(hp.test.N))])
                       / (float(hp.test.M / 2)) / hp.test.N)

                # Save threshold when FAR = FRR (=EER)
                if diff > abs(FAR - FRR):
                    diff = abs(FAR - FRR)
                    EER = (FAR + FRR) / 2
        model.train()
        return float(EER)

    def loss_fn(embeddings, speaker):
        return ge2e_loss(torch.reshape(embeddings, (hp.train.N, hp.train.M, embeddings.size(1))))

    # the Program's batch: one loader draw, utterances grouped by speaker, with each utterance's speaker index
    first = torch.stack([torch.tensor(np.transpose(train_speakers[s][:hp.train.M, :, :FRAMES], (0, 2, 1)))
                         for s in range(hp.train.N)])
    batch = (first.reshape(hp.train.N * hp.train.M, FRAMES, hp.data.nmels),
             torch.arange(hp.train.N).repeat_interleave(hp.train.M))

    return Program(name="ge2e_speaker_verification", model=embedder_net, batch=batch, loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=test)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the embeddings indexed by the permutation again instead of its inverse, so the (N, M) reshape
    # groups utterances of different speakers under one centroid.
    Bug("embeddings_not_unpermuted", functools.partial(_build, bug="embeddings_not_unpermuted"), "learning_ledger",
        ("TASK",)),
    # classic: optimizer.zero_grad() left out of the loop body; every parameter is touched alike (README rule 6).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
