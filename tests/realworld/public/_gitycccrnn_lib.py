"""Dataset, greedy CTC decoder and evaluation of GitYCC's CRNN, for the port ``gitycccrnn_synth90k``: the
Synth90k reader (``Synth90kDataset``: lexicon into a dict, annotation lines ``path index``, grey image resized and
scaled to [-1, 1], 1-based character labels), ``synth90k_collate_fn``, ``ctc_decode`` with the greedy decoder and
``evaluate`` (summed CTC loss and exact-match accuracy under ``eval()`` and ``no_grad``).

Source: https://github.com/GitYCC/crnn-pytorch
Commit: f145a61e20e57a36b8f2d642f93c9ba2890cd042
Files: src/dataset.py, src/ctc_decoder.py, src/evaluate.py
License: MIT (Copyright (c) 2017 Jieru Mei, as found in the repository's LICENSE.md; full text in
LICENSES/GitYCC-crnn-pytorch.txt)

Deviations from the original: the files are read from an in-memory store (``FILES``, filled from ``seed`` by
``_write_synthetic_synth90k``) instead of the disk; only the greedy decoder is ported; ``evaluate`` drops tqdm and the
wrong-case list and runs on the CPU; the ``bug`` argument of ``Synth90kDataset`` selects the port's
``lexicon_counted_from_one`` variant (see ``gitycccrnn_synth90k.py``).
"""
# ruff: noqa: RUF012, UP024, UP031

from __future__ import annotations

import io
import os

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont
from torch.utils.data import Dataset

# ---- src/dataset.py (the files read from an in-memory store) ------------------------------------------------------

FILES = {}  # (port) path -> bytes: the lexicon, the annotation lists and the PNG images


def open(path, mode='r'):  # (port) the store stands in for the disk
    data = FILES[path]
    return io.BytesIO(data) if 'b' in mode else io.StringIO(data.decode())


class Synth90kDataset(Dataset):
    CHARS = '0123456789abcdefghijklmnopqrstuvwxyz'
    CHAR2LABEL = {char: i + 1 for i, char in enumerate(CHARS)}
    LABEL2CHAR = {label: char for char, label in CHAR2LABEL.items()}

    def __init__(self, root_dir=None, mode=None, paths=None, img_height=32, img_width=100, bug=None):
        self.bug = bug  # (port) the variant being built
        if root_dir and mode and not paths:
            paths, texts = self._load_from_raw_files(root_dir, mode)
        elif not root_dir and not mode and paths:
            texts = None

        self.paths = paths
        self.texts = texts
        self.img_height = img_height
        self.img_width = img_width

    def _load_from_raw_files(self, root_dir, mode):
        mapping = {}
        with open(os.path.join(root_dir, 'lexicon.txt'), 'r') as fr:
            # the variant counts the lexicon's lines from 1 while the annotation indexes count from 0
            for i, line in enumerate(fr.readlines(), 1 if self.bug == "lexicon_counted_from_one" else 0):
                mapping[i] = line.strip()

        paths_file = None
        if mode == 'train':
            paths_file = 'annotation_train.txt'
        elif mode == 'dev':
            paths_file = 'annotation_val.txt'
        elif mode == 'test':
            paths_file = 'annotation_test.txt'

        paths = []
        texts = []
        with open(os.path.join(root_dir, paths_file), 'r') as fr:
            for line in fr.readlines():
                path, index_str = line.strip().split(' ')
                path = os.path.join(root_dir, path)
                index = int(index_str)
                text = mapping[index]
                paths.append(path)
                texts.append(text)
        return paths, texts

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        path = self.paths[index]

        try:
            image = Image.open(open(path, 'rb')).convert('L')  # grey-scale
        except IOError:
            print('Corrupted image for %d' % index)
            return self[index + 1]

        image = image.resize((self.img_width, self.img_height), resample=Image.BILINEAR)
        image = np.array(image)
        image = image.reshape((1, self.img_height, self.img_width))
        image = (image / 127.5) - 1.0

        image = torch.FloatTensor(image)
        if self.texts:
            text = self.texts[index]
            target = [self.CHAR2LABEL[c] for c in text]
            target_length = [len(target)]

            target = torch.LongTensor(target)
            target_length = torch.LongTensor(target_length)
            return image, target, target_length
        else:
            return image


def synth90k_collate_fn(batch):
    images, targets, target_lengths = zip(*batch)
    images = torch.stack(images, 0)
    targets = torch.cat(targets, 0)
    target_lengths = torch.cat(target_lengths, 0)
    return images, targets, target_lengths


def _write_synthetic_synth90k(seed, root_dir, n_train=512, n_val=64):
    """(port) The Synth90k layout in ``FILES``: ``lexicon.txt`` (400 words, one a line), ``annotation_{train,val}.txt``
    (``./<split>/<i>.png <lexicon index>``, indexes 1 .. 399) and the word images: Pillow's default font, random
    size, offset, grey levels and noise, so the characters in an image are the lexicon word its annotation names."""
    rng = np.random.RandomState(seed)
    chars = list(Synth90kDataset.CHARS)
    words = [''.join(rng.choice(chars, size=rng.randint(3, 7))) for _ in range(400)]
    FILES[os.path.join(root_dir, 'lexicon.txt')] = ('\n'.join(words) + '\n').encode()
    for name, n in (('annotation_train.txt', n_train), ('annotation_val.txt', n_val)):
        lines = []
        for _ in range(n):
            index = int(rng.randint(1, len(words)))
            img = Image.new('L', (120, 36), color=int(rng.randint(0, 60)))
            font = ImageFont.load_default(size=int(rng.randint(16, 21)))
            ImageDraw.Draw(img).text((int(rng.randint(0, 12)), int(rng.randint(0, 8))), words[index],
                                     fill=int(rng.randint(180, 256)), font=font)
            arr = np.asarray(img, dtype=np.float64) + rng.randn(36, 120) * 12
            buf = io.BytesIO()
            Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(buf, format='PNG')
            path = f'./{name[11:-4]}/{len(lines)}.png'
            FILES[os.path.join(root_dir, path)] = buf.getvalue()
            lines.append(f'{path} {index}')
        FILES[os.path.join(root_dir, name)] = ('\n'.join(lines) + '\n').encode()


# ---- src/ctc_decoder.py (the greedy decoder) -------------------------------------------------------------------

def _reconstruct(labels, blank=0):
    new_labels = []
    # merge same labels
    previous = None
    for l in labels:
        if l != previous:
            new_labels.append(l)
            previous = l
    # delete blank
    new_labels = [l for l in new_labels if l != blank]

    return new_labels


def greedy_decode(emission_log_prob, blank=0, **kwargs):
    labels = np.argmax(emission_log_prob, axis=-1)
    labels = _reconstruct(labels, blank=blank)
    return labels


def ctc_decode(log_probs, label2char=None, blank=0, method='greedy', beam_size=10):
    emission_log_probs = np.transpose(log_probs.cpu().numpy(), (1, 0, 2))
    # size of emission_log_probs: (batch, length, class)

    decoders = {
        'greedy': greedy_decode,
    }
    decoder = decoders[method]

    decoded_list = []
    for emission_log_prob in emission_log_probs:
        decoded = decoder(emission_log_prob, blank=blank, beam_size=beam_size)
        if label2char:
            decoded = [label2char[l] for l in decoded]
        decoded_list.append(decoded)
    return decoded_list


# ---- src/evaluate.py ---------------------------------------------------------------------------------------------

def evaluate(crnn, dataloader, criterion,
             max_iter=None, decode_method='beam_search', beam_size=10):
    crnn.eval()

    tot_count = 0
    tot_loss = 0
    tot_correct = 0

    with torch.no_grad():
        for i, data in enumerate(dataloader):
            if max_iter and i >= max_iter:
                break
            device = 'cpu'

            images, targets, target_lengths = [d.to(device) for d in data]

            logits = crnn(images)
            log_probs = torch.nn.functional.log_softmax(logits, dim=2)

            batch_size = images.size(0)
            input_lengths = torch.LongTensor([logits.size(0)] * batch_size)

            loss = criterion(log_probs, targets, input_lengths, target_lengths)

            preds = ctc_decode(log_probs, method=decode_method, beam_size=beam_size)
            reals = targets.cpu().numpy().tolist()
            target_lengths = target_lengths.cpu().numpy().tolist()

            tot_count += batch_size
            tot_loss += loss.item()
            target_length_counter = 0
            for pred, target_length in zip(preds, target_lengths):
                real = reals[target_length_counter:target_length_counter + target_length]
                target_length_counter += target_length
                if pred == real:
                    tot_correct += 1

    evaluation = {
        'loss': tot_loss / tot_count,
        'acc': tot_correct / tot_count,
    }
    return evaluation
