# ruff: noqa: UP039, C401
"""``speech/loader.py`` of awni/speech (Apache-2.0, commit a5909a3e18c072150101aeaf9103e03b69e5b53b; full text in
LICENSES/awni-speech.txt), for ``awnispeech_seq2seq``: ``Preprocessor``, ``compute_mean_std``, ``AudioDataset``,
``BatchRandomSampler``, ``make_loader`` and ``log_specgram`` as written, except: the utterances are given in memory
(dicts with ``audio``, ``text``, ``duration``) instead of json lines naming wave files, so ``log_specgram`` takes the
waveform at ``SAMPLE_RATE``; the character set is sorted (a set's order varies per process); ``num_workers=0``;
comments and docstrings dropped; ``Preprocessor.decode`` (used only by the CER) left out.
"""

from __future__ import annotations

import random

import numpy as np
import scipy.signal
import torch.utils.data as tud

SAMPLE_RATE = 8000


# speech/loader.py (utterances given in memory instead of json lines naming wave files)
class Preprocessor():

    END = "</s>"
    START = "<s>"

    def __init__(self, data, max_samples=100, start_and_end=True):
        audio_files = [d['audio'] for d in data]
        random.shuffle(audio_files)
        self.mean, self.std = compute_mean_std(audio_files[:max_samples])
        self._input_dim = self.mean.shape[0]
        chars = sorted(set(t for d in data for t in d['text']))  # (port) sorted: set order varies per process
        if start_and_end:
            chars.extend([self.END, self.START])
        self.start_and_end = start_and_end
        self.int_to_char = dict(enumerate(chars))
        self.char_to_int = {v : k for k, v in self.int_to_char.items()}

    def encode(self, text):
        text = list(text)
        if self.start_and_end:
            text = [self.START] + text + [self.END]
        return [self.char_to_int[t] for t in text]

    def preprocess(self, wave_file, text):
        inputs = log_specgram(wave_file, SAMPLE_RATE)
        inputs = (inputs - self.mean) / self.std
        targets = self.encode(text)
        return inputs, targets

    @property
    def input_dim(self):
        return self._input_dim

    @property
    def vocab_size(self):
        return len(self.int_to_char)


def compute_mean_std(audio_files):
    samples = [log_specgram(af, SAMPLE_RATE) for af in audio_files]
    samples = np.vstack(samples)
    mean = np.mean(samples, axis=0)
    std = np.std(samples, axis=0)
    return mean, std


class AudioDataset(tud.Dataset):

    def __init__(self, data, preproc, batch_size):
        self.preproc = preproc
        bucket_diff = 4
        max_len = max(len(x['text']) for x in data)
        num_buckets = max_len // bucket_diff
        buckets = [[] for _ in range(num_buckets)]
        for d in data:
            bid = min(len(d['text']) // bucket_diff, num_buckets - 1)
            buckets[bid].append(d)
        sort_fn = lambda x : (round(x['duration'], 1), len(x['text']))
        for b in buckets:
            b.sort(key=sort_fn)
        data = [d for b in buckets for d in b]
        self.data = data

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        datum = self.data[idx]
        datum = self.preproc.preprocess(datum["audio"], datum["text"])
        return datum


class BatchRandomSampler(tud.sampler.Sampler):

    def __init__(self, data_source, batch_size):
        it_end = len(data_source) - batch_size + 1
        self.batches = [range(i, i + batch_size) for i in range(0, it_end, batch_size)]
        self.data_source = data_source

    def __iter__(self):
        random.shuffle(self.batches)
        return (i for b in self.batches for i in b)

    def __len__(self):
        return len(self.data_source)


def make_loader(dataset_json, preproc, batch_size, num_workers=0):
    dataset = AudioDataset(dataset_json, preproc, batch_size)
    sampler = BatchRandomSampler(dataset, batch_size)
    loader = tud.DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=num_workers,
                            collate_fn=lambda batch : zip(*batch), drop_last=True)
    return loader


def log_specgram(audio, sample_rate, window_size=20, step_size=10, eps=1e-10):
    nperseg = int(window_size * sample_rate / 1e3)
    noverlap = int(step_size * sample_rate / 1e3)
    _, _, spec = scipy.signal.spectrogram(audio, fs=sample_rate, window='hann', nperseg=nperseg,
                                          noverlap=noverlap, detrend=False)
    return np.log(spec.T.astype(np.float32) + eps)
