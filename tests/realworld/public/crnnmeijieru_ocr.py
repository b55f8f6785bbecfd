# ruff: noqa: UP008, UP004, UP032, UP030
"""CRNN (Shi, Bai & Yao, TPAMI 2016), meijieru's PyTorch implementation: text recognition by a VGG-style conv
stack that collapses a 32-pixel-high grey image to one row of features, read as a sequence by two stacked
bidirectional LSTMs (``BidirectionalLSTM``: LSTM then a per-step ``Linear``), trained with CTC against the label
string (``strLabelConverter``: characters to 1-based indices, 0 the blank), the loss summed over the batch and
divided by the batch size; DCGAN-style ``weights_init``, Adadelta (the README's ``--adadelta``).

Source: https://github.com/meijieru/crnn.pytorch
Commit: 3cc7904c5ba20b18fcdc2d02ac2b24a9be9eafaf
Files: train.py, models/crnn.py, utils.py, dataset.py, README.md (the training command)
License: MIT (Copyright (c) 2017 Jieru Mei; full text in LICENSES/meijieru-crnn.pytorch.txt)
Domain: vision, text recognition (CNN + bi-LSTM sequence model, CTC loss, greedy decoding)

Kept as written: ``CRNN``, ``BidirectionalLSTM``, ``weights_init``, ``strLabelConverter``, ``loadData`` into the
preallocated ``image`` / ``text`` / ``length`` buffers, ``resizeNormalize``, ``alignCollate``, ``trainBatch``
(``preds_size`` of ``T`` for every image, ``criterion(...) / batch_size``, ``crnn.zero_grad()``, backward, step),
the loop's ``requires_grad = True`` / ``crnn.train()`` before every batch, ``val``'s greedy decoding and accuracy.

Deviations from the original:
- ``warpctc_pytorch.CTCLoss`` is not installable: ``criterion`` is a ``CTCLoss`` module with warp-ctc's contract
  written on ``F.ctc_loss`` (raw activations in, the softmax taken inside, blank 0, summed over the batch);
- data: the lmdb of word images is replaced by in-memory PIL grey images made from ``seed``: 3 to 6 characters
  of the alphabet in Pillow's default font (size 16-20) at a random offset, with noise; 512 training and 64
  validation images; ``lmdbDataset`` reads that list (``target_transform`` unused, dropped); ``--alphabet
  0123456789`` (digits) so the small model leaves the all-blank plateau within a few hundred steps;
  ``--random_sample`` is on (the default branch passes both ``shuffle=True`` and a sampler, which ``DataLoader``
  refuses), ``--workers`` 0; ``alignCollate``'s ``keep_ratio`` branch (off by default) is not ported;
- sizes for 2 CPU cores: conv widths ``nm`` / 8 (64 .. 512 -> 8 .. 64), ``--nh`` 256 -> 48, ``--batchSize`` 64 ->
  16; ``--imgH`` 32 and ``--imgW`` 100 kept; only the selected ``--adadelta`` optimizer branch is written;
- updates: ``collections.Iterable`` -> ``collections.abc``, ``train_iter.next()`` -> ``next(train_iter)``,
  ``loadData``'s ``v.data.resize_`` -> ``v.resize_`` (resizing ``.data`` no longer resizes the tensor), the no-op
  ``Variable`` wrappers of the buffers dropped; in ``val``, ``preds.squeeze(2)`` after ``max(2)`` (from when
  ``max`` kept the dimension) is dropped and the accuracy returned; the ``averager`` of the printed losses, the
  prints, ``--cuda`` / DataParallel and checkpoints are dropped;
- one ``train_step`` is one pass of the ``while i < len(train_loader)`` body (a new ``iter(train_loader)`` when an
  epoch ends); ``eval_fn`` is ``val`` on the validation images (word accuracy);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import collections.abc
import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw, ImageFont
from torch import nn, optim
from torch.autograd import Variable
from torch.utils.data import Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


class opt:  # (port) train.py's argparse namespace, README command (--adadelta --random_sample), sizes shrunk
    batchSize = 16  # 64
    imgH = 32
    imgW = 100
    nh = 48  # 256
    alphabet = '0123456789'  # '0123456789abcdefghijklmnopqrstuvwxyz'
    adadelta = True
    keep_ratio = False
    workers = 0  # 2

# models/crnn.py
class BidirectionalLSTM(nn.Module):

    def __init__(self, nIn, nHidden, nOut):
        super(BidirectionalLSTM, self).__init__()
        self.rnn = nn.LSTM(nIn, nHidden, bidirectional=True)
        self.embedding = nn.Linear(nHidden * 2, nOut)

    def forward(self, input):
        recurrent, _ = self.rnn(input)
        T, b, h = recurrent.size()
        t_rec = recurrent.view(T * b, h)
        output = self.embedding(t_rec)  # [T * b, nOut]
        output = output.view(T, b, -1)
        return output

class CRNN(nn.Module):

    def __init__(self, imgH, nc, nclass, nh, n_rnn=2, leakyRelu=False):
        super(CRNN, self).__init__()
        assert imgH % 16 == 0, 'imgH has to be a multiple of 16'
        ks = [3, 3, 3, 3, 3, 3, 2]
        ps = [1, 1, 1, 1, 1, 1, 0]
        ss = [1, 1, 1, 1, 1, 1, 1]
        nm = [8, 16, 32, 32, 64, 64, 64]  # (port) [64, 128, 256, 256, 512, 512, 512] / 8
        cnn = nn.Sequential()

        def convRelu(i, batchNormalization=False):
            nIn = nc if i == 0 else nm[i - 1]
            nOut = nm[i]
            cnn.add_module('conv{0}'.format(i),
                           nn.Conv2d(nIn, nOut, ks[i], ss[i], ps[i]))
            if batchNormalization:
                cnn.add_module('batchnorm{0}'.format(i), nn.BatchNorm2d(nOut))
            if leakyRelu:
                cnn.add_module('relu{0}'.format(i),
                               nn.LeakyReLU(0.2, inplace=True))
            else:
                cnn.add_module('relu{0}'.format(i), nn.ReLU(True))
        convRelu(0)
        cnn.add_module('pooling{0}'.format(0), nn.MaxPool2d(2, 2))  # 64x16x64
        convRelu(1)
        cnn.add_module('pooling{0}'.format(1), nn.MaxPool2d(2, 2))  # 128x8x32
        convRelu(2, True)
        convRelu(3)
        cnn.add_module('pooling{0}'.format(2),
                       nn.MaxPool2d((2, 2), (2, 1), (0, 1)))  # 256x4x16
        convRelu(4, True)
        convRelu(5)
        cnn.add_module('pooling{0}'.format(3),
                       nn.MaxPool2d((2, 2), (2, 1), (0, 1)))  # 512x2x16
        convRelu(6, True)  # 512x1x16
        self.cnn = cnn
        self.rnn = nn.Sequential(
            BidirectionalLSTM(nm[-1], nh, nh),  # (port) 512 is nm[-1]
            BidirectionalLSTM(nh, nh, nclass))

    def forward(self, input):
        # conv features
        conv = self.cnn(input)
        b, c, h, w = conv.size()
        assert h == 1, "the height of conv must be 1"
        conv = conv.squeeze(2)
        conv = conv.permute(2, 0, 1)  # [w, b, c]
        if getattr(self, "bug", None) == "view_not_permute":
            conv = conv.permute(1, 2, 0).reshape(w, b, c)  # the [b, c, w] map reshaped instead of permuted
        # rnn features
        output = self.rnn(conv)
        return output

class CTCLoss(nn.Module):
    """(port) warpctc_pytorch.CTCLoss's contract: raw activations [T, b, C], softmax inside, blank 0, summed."""

    def forward(self, acts, labels, act_lens, label_lens):
        return F.ctc_loss(acts.float().log_softmax(2), labels.long(), act_lens.long(), label_lens.long(),
                          blank=0, reduction='sum')

# utils.py
class strLabelConverter(object):

    def __init__(self, alphabet, ignore_case=True):
        self._ignore_case = ignore_case
        if self._ignore_case:
            alphabet = alphabet.lower()
        self.alphabet = alphabet + '-'  # for `-1` index
        self.dict = {}
        for i, char in enumerate(alphabet):
            # NOTE: 0 is reserved for 'blank' required by wrap_ctc
            self.dict[char] = i + 1

    def encode(self, text):
        if isinstance(text, str):
            text = [
                self.dict[char.lower() if self._ignore_case else char]
                for char in text
            ]
            length = [len(text)]
        elif isinstance(text, collections.abc.Iterable):
            length = [len(s) for s in text]
            text = ''.join(text)
            text, _ = self.encode(text)
        return (torch.IntTensor(text), torch.IntTensor(length))

    def decode(self, t, length, raw=False):
        if length.numel() == 1:
            length = length[0]
            assert t.numel() == length, "text with length: {} does not match declared length: {}".format(t.numel(), length)
            if raw:
                return ''.join([self.alphabet[i - 1] for i in t])
            else:
                char_list = []
                for i in range(length):
                    if t[i] != 0 and (not (i > 0 and t[i - 1] == t[i])):
                        char_list.append(self.alphabet[t[i] - 1])
                return ''.join(char_list)
        else:
            # batch mode
            assert t.numel() == length.sum(), "texts with length: {} does not match declared length: {}".format(t.numel(), length.sum())
            texts = []
            index = 0
            for i in range(length.numel()):
                l = length[i]
                texts.append(
                    self.decode(
                        t[index:index + l], torch.IntTensor([l]), raw=raw))
                index += l
            return texts

def loadData(v, data):
    v.resize_(data.size()).copy_(data)  # (port) v.data.resize_ no longer resizes v itself

# dataset.py
class lmdbDataset(Dataset):
    # (port) the lmdb environment replaced by an in-memory list of (PIL image, label) pairs

    def __init__(self, root=None, transform=None):
        self.samples = root
        self.nSamples = len(root)
        self.transform = transform

    def __len__(self):
        return self.nSamples

    def __getitem__(self, index):
        assert index <= len(self), 'index range error'
        img, label = self.samples[index]
        img = img.convert('L')
        if self.transform is not None:
            img = self.transform(img)
        return (img, label)

class resizeNormalize(object):

    def __init__(self, size, interpolation=Image.BILINEAR):
        self.size = size
        self.interpolation = interpolation

    def __call__(self, img):
        img = img.resize(self.size, self.interpolation)
        img = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0)[None]  # (port) transforms.ToTensor()
        img.sub_(0.5).div_(0.5)
        return img

class alignCollate(object):

    def __init__(self, imgH=32, imgW=100, keep_ratio=False, min_ratio=1):
        self.imgH = imgH
        self.imgW = imgW
        self.keep_ratio = keep_ratio
        self.min_ratio = min_ratio

    def __call__(self, batch):
        images, labels = zip(*batch)
        imgH = self.imgH
        imgW = self.imgW
        transform = resizeNormalize((imgW, imgH))
        images = [transform(image) for image in images]
        images = torch.cat([t.unsqueeze(0) for t in images], 0)
        return images, labels

def _synthetic_words(rng, n):
    """(port) Word images: 3-6 characters of the alphabet in Pillow's default font, random offset and noise."""
    out = []
    for _ in range(n):
        word = ''.join(rng.choice(list(opt.alphabet), size=rng.randint(3, 7)))
        img = Image.new('L', (120, 36), color=int(rng.randint(0, 60)))
        font = ImageFont.load_default(size=int(rng.randint(16, 21)))
        ImageDraw.Draw(img).text((int(rng.randint(0, 12)), int(rng.randint(0, 8))), word,
                                 fill=int(rng.randint(180, 256)), font=font)
        arr = np.asarray(img, dtype=np.float64) + rng.randn(36, 120) * 12
        out.append((Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)), word))
    return out

# custom weights initialization called on crnn
def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        m.weight.data.normal_(0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        m.weight.data.normal_(1.0, 0.02)
        m.bias.data.fill_(0)

def _val(crnn, net, dataset, criterion, converter, image, text, length, max_iter=100):
    for p in crnn.parameters():
        p.requires_grad = False
    net.eval()
    data_loader = torch.utils.data.DataLoader(
        dataset, shuffle=True, batch_size=opt.batchSize, num_workers=int(opt.workers))
    val_iter = iter(data_loader)
    i = 0
    n_correct = 0
    max_iter = min(max_iter, len(data_loader))
    for i in range(max_iter):
        data = next(val_iter)
        i += 1
        cpu_images, cpu_texts = data
        batch_size = cpu_images.size(0)
        loadData(image, cpu_images)
        t, l = converter.encode(cpu_texts)
        loadData(text, t)
        loadData(length, l)
        preds = crnn(image)
        preds_size = Variable(torch.IntTensor([preds.size(0)] * batch_size))
        cost = criterion(preds, text, preds_size, length) / batch_size  # noqa: F841 (the display's loss)
        _, preds = preds.max(2)
        preds = preds.transpose(1, 0).contiguous().view(-1)
        sim_preds = converter.decode(preds.data, preds_size.data, raw=False)
        for pred, target in zip(sim_preds, cpu_texts):
            if pred == target.lower():
                n_correct += 1
    accuracy = n_correct / float(max_iter * opt.batchSize)
    return accuracy

def _data(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    train_dataset = lmdbDataset(root=_synthetic_words(rng, 512))
    sampler = None  # --random_sample
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=opt.batchSize,
        shuffle=True, sampler=sampler,
        num_workers=int(opt.workers),
        collate_fn=alignCollate(imgH=opt.imgH, imgW=opt.imgW, keep_ratio=opt.keep_ratio))
    test_dataset = lmdbDataset(root=_synthetic_words(rng, 64), transform=resizeNormalize((100, 32)))
    return train_dataset, train_loader, test_dataset

def _setup(bug):
    nclass = len(opt.alphabet) + 1
    nc = 1
    converter = strLabelConverter(opt.alphabet)
    criterion = CTCLoss()
    if bug == "ctc_on_raw_outputs":
        criterion = torch.nn.CTCLoss(reduction='sum')
    crnn = CRNN(opt.imgH, nc, nclass, opt.nh)
    crnn.bug = bug  # (port) the variant being built
    crnn.apply(weights_init)

    image = torch.FloatTensor(opt.batchSize, 3, opt.imgH, opt.imgH)
    text = torch.IntTensor(opt.batchSize * 5)
    length = torch.IntTensor(opt.batchSize)

    # setup optimizer (opt.adadelta)
    optimizer = optim.Adadelta(crnn.parameters())
    return converter, criterion, crnn, image, text, length, optimizer

def _build(seed, bug=None):
    train_dataset, train_loader, test_dataset = _data(seed)
    converter, criterion, crnn, image, text, length, optimizer = _setup(bug)
    st = {"train_iter": iter(train_loader), "i": 0}

    def trainBatch(net, criterion, optimizer):
        data = next(st["train_iter"])
        cpu_images, cpu_texts = data
        batch_size = cpu_images.size(0)
        loadData(image, cpu_images)
        if bug == "texts_sorted":
            cpu_texts = sorted(cpu_texts, key=len)  # grouped by length "for CTC", the images left in place
        t, l = converter.encode(cpu_texts)
        loadData(text, t)
        loadData(length, l)
        preds = crnn(image)
        preds_size = Variable(torch.IntTensor([preds.size(0)] * batch_size))
        cost = criterion(preds, text, preds_size, length) / batch_size
        crnn.zero_grad()
        cost.backward()
        optimizer.step()
        return cost

    def train_step():
        if st["i"] >= len(train_loader):  # the next epoch
            st["train_iter"], st["i"] = iter(train_loader), 0
        for p in crnn.parameters():
            p.requires_grad = True
        crnn.train()
        cost = trainBatch(crnn, criterion, optimizer)
        st["i"] += 1
        return cost.item()

    def eval_fn(model, _batch=None):
        return _val(crnn, model, test_dataset, criterion, converter, image, text, length)

    images0, texts0 = next(iter(torch.utils.data.DataLoader(
        train_dataset, batch_size=opt.batchSize,
        collate_fn=alignCollate(imgH=opt.imgH, imgW=opt.imgW, keep_ratio=opt.keep_ratio))))
    t0, l0 = converter.encode(texts0)

    def loss_fn(preds, targets):
        text_, length_ = targets
        preds_size = torch.IntTensor([preds.size(0)] * preds.size(1))
        return criterion(preds, text_, preds_size, length_) / preds.size(1)

    return Program(name="crnnmeijieru_ocr", model=crnn, batch=(images0, (t0, l0)), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)

build = functools.partial(_build, bug=None)

BUGS = [
    # torch.nn.CTCLoss for warp-ctc (the swap of https://github.com/meijieru/crnn.pytorch/issues/238) without the
    # log_softmax it needs (https://github.com/clovaai/deep-text-recognition-benchmark/issues/129).
    Bug("ctc_on_raw_outputs", functools.partial(_build, bug="ctc_on_raw_outputs"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the label strings sorted by length before encoding, the images left in loader order.
    Bug("texts_sorted", functools.partial(_build, bug="texts_sorted"), "learning_ledger", ("TASK",)),
    # classic: the [b, c, w] feature map reshaped to [w, b, c] instead of permuted (images and channels mixed).
    Bug("view_not_permute", functools.partial(_build, bug="view_not_permute"), "tensor_trace", ("rnn",)),
]
