# ruff: noqa: UP031, C408, PLR0402, RUF059
"""VQ-CPC (van Niekerk et al., ZeroSpeech 2020): contrastive predictive coding on log-mel frames with a
vector-quantized bottleneck. A strided convolution and a LayerNorm / ReLU / Linear stack encode the frames, an EMA
codebook quantizes them (straight-through, commitment loss), an LSTM summarizes the past; per prediction step a
linear predictor scores the true future code against negatives drawn from other utterances of the same speaker
(cross-entropy, InfoNCE); Adam with a linear warm-up and step decay per epoch (``train_cpc.py``).

Source: https://github.com/bshall/VectorQuantizedCPC
Commit: bf007fd693cacbe00fc2882f4dca1a4bd34bdea1
Files: ``train_cpc.py``, ``model.py`` (``Encoder``, ``VQEmbeddingEMA``, ``CPCLoss``), ``scheduler.py``
(``WarmupScheduler``), ``dataset.py`` (``CPCDataset``), ``config/training/cpc.yaml``, ``config/model/default.yaml``,
``config/preprocessing/default.yaml``; the model and scheduler code is in the helper ``_vqcpc.py``
License: MIT (Copyright (c) 2020 Benjamin van Niekerk; full text in LICENSES/bshall-VectorQuantizedCPC.txt)
Domain: audio, self-supervised speech representation learning (CPC with a VQ-EMA bottleneck, speaker-grouped batches)

Kept as written: ``Encoder``, ``VQEmbeddingEMA`` (EMA codebook updates in training mode, commitment cost 0.25,
decay 0.999, straight-through estimator, perplexity), ``CPCLoss`` (``n_prediction_steps // 2`` steps used of the
``n_prediction_steps`` predictors built, negatives sampled within the speaker, scores scaled by ``sqrt(z_dim)``),
``WarmupScheduler``, ``CPCDataset``'s sampling (``n_utterances_per_speaker`` random utterances of a speaker, a random
window of ``sample_frames + n_prediction_steps`` frames each), the loop body of ``train_model`` (the view to
``[speakers * utterances, n_mels, T]``, zero_grad, ``loss = cpc_loss + vq_loss``, backward, step;
``scheduler.step()`` per epoch), Adam over ``chain(encoder.parameters(), cpc.parameters())`` at ``initial_lr``, the
config values not listed below (n_prediction_steps 12, n_negatives 17, warmup 150 epochs from 1e-5 to 4e-4,
milestone 20000, gamma 0.25).

Deviations from the original:
- the ZeroSpeech 2019 English mels (``preprocess.py`` with librosa) are not here: synthetic log-mel utterances made
  from ``seed``: 8 speakers x 6 utterances of 96 frames over 20 mel bins; each speaker has a spectral tilt, each
  utterance is a sequence of "phones" (one of 10 spectral templates held 3 to 6 frames, the next phone drawn from
  a fixed transition table) plus noise, so the future frames are predictable from the past;
- sizes for 2 CPU cores: n_mels 80 -> 20, channels 512 -> 64, n_embeddings 512 -> 64, z_dim 64 -> 32, c_dim 256 ->
  64, sample_frames 128 -> 32, n_speakers_per_batch 8 -> 4, n_utterances_per_speaker 8 -> 4, n_workers 8 -> 0;
- hydra, TensorBoard, tqdm, the checkpoints and the resume path are dropped; ``CPCDataset`` takes the utterances in
  memory instead of reading ``speakers.json`` / ``train.json`` / ``.mel.npy`` files (same filtering and sampling);
- ``train_model``'s epoch loop is unrolled: one ``train_step`` is one batch (``scheduler.step()`` when the loader
  runs out); the running averages and prints are dropped; ``eval_fn`` is the mean CPC prediction accuracy over
  the steps on a fixed batch in eval mode;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
from itertools import chain

import numpy as np
import torch
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _vqcpc import CPCLoss, Encoder, WarmupScheduler

CFG = {"sr": 16000, "hop_length": 160, "n_mels": 20, "channels": 64, "n_embeddings": 64, "z_dim": 32, "c_dim": 64,
       "sample_frames": 32, "n_speakers_per_batch": 4, "n_utterances_per_speaker": 4, "n_prediction_steps": 12,
       "n_negatives": 17, "warmup_epochs": 150, "initial_lr": 1e-5, "max_lr": 4e-4, "gamma": 0.25,
       "milestones": [20000]}
N_SPEAKERS, N_UTTERANCES, N_FRAMES, N_PHONES = 8, 6, 96, 10


# ---------------------------------------------------------------- dataset.py
class CPCDataset(Dataset):
    def __init__(self, utterances, n_sample_frames, n_utterances_per_speaker, hop_length, sr):
        # (port) ``utterances``: {speaker: [mel [n_mels, T], ...]} in place of root / speakers.json / train.json
        self.n_sample_frames = n_sample_frames
        self.n_utterances_per_speaker = n_utterances_per_speaker

        self.speakers = sorted(utterances)

        min_duration = n_sample_frames * hop_length / sr
        metadata_by_speaker = dict()
        for speaker in self.speakers:
            for mel in utterances[speaker]:
                duration = mel.shape[1] * hop_length / sr
                if duration > min_duration:
                    metadata_by_speaker.setdefault(speaker, []).append(mel)
        self.metadata = [
            (k, v) for k, v in metadata_by_speaker.items()
            if len(v) >= n_utterances_per_speaker]

    def __len__(self):
        return len(self.metadata)

    def __getitem__(self, index):
        speaker, paths = self.metadata[index]

        mels = list()
        paths = random.sample(paths, self.n_utterances_per_speaker)
        for path in paths:
            mel = path  # (port) np.load(path.with_suffix(".mel.npy"))
            pos = random.randint(0, mel.shape[1] - self.n_sample_frames)
            mel = mel[:, pos:pos + self.n_sample_frames]
            mels.append(mel)
        mels = np.stack(mels)

        return torch.from_numpy(mels), self.speakers.index(speaker)


def _synthetic_utterances(seed):
    """(port) speakers x utterances of phone sequences: templates held 3-6 frames, a fixed transition table."""
    rng = np.random.RandomState(seed)
    templates = rng.randn(N_PHONES, CFG["n_mels"])
    transition = rng.randint(0, N_PHONES, size=N_PHONES)
    utterances = {}
    for s in range(N_SPEAKERS):
        tilt = np.linspace(-1, 1, CFG["n_mels"]) * rng.randn()
        utterances["s%d" % s] = []
        for _ in range(N_UTTERANCES):
            frames, phone = [], rng.randint(N_PHONES)
            while len(frames) < N_FRAMES:
                frames += [templates[phone]] * rng.randint(3, 7)
                phone = transition[phone] if rng.rand() < 0.8 else rng.randint(N_PHONES)
            mel = np.stack(frames[:N_FRAMES], 1) + tilt[:, None] + 0.3 * rng.randn(CFG["n_mels"], N_FRAMES)
            utterances["s%d" % s].append(mel.astype(np.float32))
    return utterances


# ---------------------------------------------------------------- train_cpc.py
def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    cfg = CFG
    encoder = Encoder(in_channels=cfg["n_mels"], channels=cfg["channels"], n_embeddings=cfg["n_embeddings"],
                      z_dim=cfg["z_dim"], c_dim=cfg["c_dim"])
    cpc = CPCLoss(n_speakers_per_batch=cfg["n_speakers_per_batch"],
                  n_utterances_per_speaker=cfg["n_utterances_per_speaker"],
                  n_prediction_steps=cfg["n_prediction_steps"], n_negatives=cfg["n_negatives"],
                  z_dim=cfg["z_dim"], c_dim=cfg["c_dim"], bug=bug)
    optimizer = optim.Adam(chain(encoder.parameters(), cpc.parameters()), lr=cfg["initial_lr"])
    scheduler = WarmupScheduler(optimizer, warmup_epochs=cfg["warmup_epochs"], initial_lr=cfg["initial_lr"],
                                max_lr=cfg["max_lr"], milestones=cfg["milestones"], gamma=cfg["gamma"])
    dataset = CPCDataset(_synthetic_utterances(seed),
                         n_sample_frames=cfg["sample_frames"] + cfg["n_prediction_steps"],
                         n_utterances_per_speaker=cfg["n_utterances_per_speaker"],
                         hop_length=cfg["hop_length"], sr=cfg["sr"])
    dataloader = DataLoader(dataset, batch_size=cfg["n_speakers_per_batch"], shuffle=True, num_workers=0,
                            drop_last=True)
    st = {"it": iter(dataloader)}

    def train_step():
        try:
            mels, _ = next(st["it"])
        except StopIteration:  # the epoch ends
            scheduler.step()
            st["it"] = iter(dataloader)
            mels, _ = next(st["it"])
        mels = mels.view(cfg["n_speakers_per_batch"] * cfg["n_utterances_per_speaker"], cfg["n_mels"], -1)
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        z, c, vq_loss, perplexity = encoder(mels)
        cpc_loss, accuracy = cpc(z, c)
        loss = cpc_loss + vq_loss
        loss.backward()
        optimizer.step()
        return loss.item()

    mels0, _ = next(iter(DataLoader(dataset, batch_size=cfg["n_speakers_per_batch"], drop_last=True)))
    mels0 = mels0.view(cfg["n_speakers_per_batch"] * cfg["n_utterances_per_speaker"], cfg["n_mels"], -1)

    def loss_fn(outputs, _targets=None):
        z, c, vq_loss, _perplexity = outputs
        return cpc(z, c)[0] + vq_loss

    def eval_fn(model, batch):
        was = model.training
        model.eval()
        with torch.no_grad():
            z, c, _, _ = model(batch[0])
            accuracy = float(np.mean(cpc(z, c)[1]))
        model.train(was)
        return accuracy

    return Program(name="vqcpc_zerospeech", model=encoder, batch=(mels0, None), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic targets not shifted: the k-step predictor is scored against the code at offset k - 1 instead of k,
    # so the first step predicts the frame the context has just consumed.
    Bug("prediction_targets_not_shifted", functools.partial(_build, bug="prediction_targets_not_shifted"),
        "learning_ledger", ("TASK",)),
    # classic: optimizer.zero_grad() left out of the loop, the gradients pile up across steps.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # every parameter alike: declared by its mechanism (README rule 6)
]
