"""CRNN text recognition of bes-dev/crnn-pytorch: the repository's ``CRNN`` (a torchvision ResNet-18 trunk up to
``layer4``, the feature map's width axis projected to ``seq_proj[1]`` time steps by a 1x1 convolution, a 2-layer
bidirectional GRU from a zero hidden state, a linear layer to the alphabet plus the CTC blank, softmax only outside
training) wrapped in ``nn.DataParallel`` by ``load_model``, trained by ``train.py`` on the repository's own synthetic
``TestDataset`` (random strings over ``digits + ascii_uppercase``, one glyph per slot, label ``abc.find(c) + 1``):
``text_collate``, Adam lr 1e-3 with weight decay 1e-4, the repository's iteration ``StepLR`` (x0.1 every 500
iterations, reset at ``max_iter``), warp-ctc ``CTCLoss`` divided by the batch size, ``clip_grad_norm`` 10.

Source: https://github.com/bes-dev/crnn-pytorch
Commit: f8d1236a5f8e8eb90b3a80bdd72f58f777da79e7
Files: ``train.py`` (``main``), ``models/crnn.py`` (``CRNN``), ``models/model_loader.py`` (``load_model``),
``lr_policy.py`` (``StepLR``), ``dataset/test_data.py`` (``TestDataset``), ``dataset/collate_fn.py``
(``text_collate``), ``test.py`` (``test``)
License: BSD-2-Clause (Copyright (c) 2008, Sergei Belousov aka BeS; full text in LICENSES/bes-dev-crnn-pytorch.txt)
Domain: vision, OCR (CNN + bidirectional GRU + CTC)

Deviations from the original:
- no torchvision: ``models.resnet18`` is ``_tv_resnet.resnet18`` (same module names, ``pretrained=True`` weights are
  not available: random initialization), widths 64..512 -> 8..64;
- no warp-ctc: ``warpctc_pytorch.CTCLoss`` (softmax inside, summed over the batch) is ``nn.CTCLoss(reduction='sum')``
  on ``preds.log_softmax(2)`` (the same loss and gradient); ``clip_grad_norm`` is ``clip_grad_norm_``,
  ``loss.data[0]`` is ``loss.item()``, ``Variable`` is dropped;
- no OpenCV: ``TestDataset.get_sample`` draws each character as a fixed random 20x14 glyph (made from ``seed``, one
  per character) at a random place of its slot, in place of ``cv2.putText`` with a random rotation and scale; the
  image is drawn at its final height 32 (the original draws at 64 and resizes); the training transform
  (``Rotation`` and ``Resize`` by cv2) is left out;
- sizes for 2 CPU cores: 8 characters at 320x32 with ``seq_proj`` 10x20 -> 4 characters at 160x32 with ``seq_proj``
  5x10 (the same 2 time steps per character), GRU hidden 128 -> 32, batch 256 -> 8, an epoch of 10000 fresh strings
  -> a fixed set of 96 drawn from ``seed`` (``random`` and ``np.random`` are seeded instances);
- one ``train_step`` is one iteration of ``main``'s loop (a new ``DataLoader`` each epoch as written); the test phase
  (``--test-epoch`` unset by default) and the snapshots are left out; ``eval_fn`` is ``test``'s exact-match accuracy
  on one batch (``net.eval()``, ``decode=True``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, RUF059, B006, UP004, C417, C408  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import string
import sys

import numpy as np
import torch
from torch import Tensor, nn, optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
_UP = str(pathlib.Path(__file__).resolve().parents[1])
if _UP not in sys.path:
    sys.path.insert(0, _UP)
import _tv_resnet as models
from _api import Bug, Program

N_CHARS, N_SAMPLES, WIDTH, HIDDEN = 4, 96, 8, 32


# ---- models/crnn.py ------------------------------------------------------------------------------------------

class CRNN(nn.Module):
    def __init__(self,
                 abc=string.digits,
                 backend='resnet18',
                 rnn_hidden_size=128,
                 rnn_num_layers=2,
                 rnn_dropout=0,
                 seq_proj=[0, 0],
                 bug=None):
        super(CRNN, self).__init__()

        self.abc = abc
        self.num_classes = len(self.abc)
        self.bug = bug

        self.feature_extractor = getattr(models, backend)(width=WIDTH)  # (port) no pretrained weights
        self.cnn = nn.Sequential(
            self.feature_extractor.conv1,
            self.feature_extractor.bn1,
            self.feature_extractor.relu,
            self.feature_extractor.maxpool,
            self.feature_extractor.layer1,
            self.feature_extractor.layer2,
            self.feature_extractor.layer3,
            self.feature_extractor.layer4
        )

        self.fully_conv = seq_proj[0] == 0
        if not self.fully_conv:
            self.proj = nn.Conv2d(seq_proj[0], seq_proj[1], kernel_size=1)

        self.rnn_hidden_size = rnn_hidden_size
        self.rnn_num_layers = rnn_num_layers
        self.rnn = nn.GRU(self.get_block_size(self.cnn),
                          rnn_hidden_size, rnn_num_layers,
                          batch_first=False,
                          dropout=rnn_dropout, bidirectional=True)
        self.linear = nn.Linear(rnn_hidden_size * 2, self.num_classes + 1)
        self.softmax = nn.Softmax(dim=2)

    def forward(self, x, decode=False):
        hidden = self.init_hidden(x.size(0), next(self.parameters()).is_cuda)
        features = self.cnn(x)
        features = self.features_to_sequence(features)
        seq, hidden = self.rnn(features, hidden)
        seq = self.linear(seq)
        if not self.training or self.bug == "softmax_in_training":
            seq = self.softmax(seq)
            if decode:
                seq = self.decode(seq)
        return seq

    def init_hidden(self, batch_size, gpu=False):
        h0 = torch.zeros(self.rnn_num_layers * 2,
                         batch_size,
                         self.rnn_hidden_size)
        if gpu:
            h0 = h0.cuda()
        return h0

    def features_to_sequence(self, features):
        b, c, h, w = features.size()
        assert h == 1, "the height of out must be 1"
        if not self.fully_conv:
            features = features.permute(0, 3, 2, 1)
            features = self.proj(features)
            features = features.permute(1, 0, 2, 3)
        else:
            features = features.permute(3, 0, 2, 1)
        features = features.squeeze(2)
        return features

    def get_block_size(self, layer):
        return layer[-1][-1].bn2.weight.size()[0]

    def pred_to_string(self, pred):
        seq = []
        for i in range(pred.shape[0]):
            label = np.argmax(pred[i])
            seq.append(label - 1)
        out = []
        for i in range(len(seq)):
            if len(out) == 0:
                if seq[i] != -1:
                    out.append(seq[i])
            else:
                if seq[i] != -1 and seq[i] != seq[i - 1]:
                    out.append(seq[i])
        out = ''.join(self.abc[i] for i in out)
        return out

    def decode(self, pred):
        pred = pred.permute(1, 0, 2).cpu().data.numpy()
        seq = []
        for i in range(pred.shape[0]):
            seq.append(self.pred_to_string(pred[i]))
        return seq


# ---- models/model_loader.py ----------------------------------------------------------------------------------

def load_model(abc, seq_proj=[0, 0], backend='resnet18', snapshot=None, cuda=True, bug=None):
    net = CRNN(abc=abc, seq_proj=seq_proj, backend=backend, rnn_hidden_size=HIDDEN, bug=bug)
    net = nn.DataParallel(net)
    if cuda:
        net = net.cuda()
    return net


# ---- lr_policy.py --------------------------------------------------------------------------------------------

class StepLR(object):
    def __init__(self, optimizer, step_size=1000, max_iter=10000):
        self.optimizer = optimizer
        self.max_iter = max_iter
        self.step_size = step_size
        self.last_iter = -1
        self.base_lrs = list(map(lambda group: group['lr'], optimizer.param_groups))

    def get_lr(self):
        return self.optimizer.param_groups[0]['lr']

    def step(self, last_iter=None):
        if last_iter is not None:
            self.last_iter = last_iter
        if self.last_iter + 1 == self.max_iter:
            self.last_iter = -1
        self.last_iter = (self.last_iter + 1) % self.max_iter
        for ids, param_group in enumerate(self.optimizer.param_groups):
            param_group['lr'] = self.base_lrs[ids] * 0.1 ** (self.last_iter // self.step_size)


# ---- dataset/test_data.py (cv2 drawing replaced by fixed glyphs; seeded generators) ----------------------------

class TestDataset(Dataset):
    def __init__(self,
                 epoch_len=10000,
                 seq_len=8,
                 transform=None,
                 abc=string.digits,
                 seed=0,
                 bug=None):
        super().__init__()
        self.abc = abc
        self.epoch_len = epoch_len
        self.seq_len = seq_len
        self.transform = transform
        self.bug = bug
        self.random = random.Random(seed)
        self.np_random = np.random.RandomState(seed)
        self.glyphs = (self.np_random.uniform(size=(len(abc), 20, 14)) < 0.45).astype(np.uint8) * 255
        self.samples = [self.get_sample() for _ in range(epoch_len)]  # (port) a fixed epoch

    def __len__(self):
        return self.epoch_len

    def get_abc(self):
        return self.abc

    def set_mode(self, mode='train'):
        return

    def generate_string(self):
        return ''.join(self.random.choice(self.abc) for _ in range(self.seq_len))

    def get_sample(self):
        h, w = 32, int(self.seq_len * 32 * 1.25)
        pw = int(w / self.seq_len)
        seq = []
        img = np.zeros((h, w), dtype=np.uint8)
        text = self.generate_string()
        for i in range(len(text)):
            c = text[i]
            if self.bug == "labels_collide_with_blank":
                seq.append(self.abc.find(c))
            else:
                seq.append(self.abc.find(c) + 1)
            hs, ws = 20, 14
            symb = self.glyphs[self.abc.find(c)]  # (port) in place of cv2.putText, rotation and scale
            y = self.np_random.randint(hs, h)
            x = self.np_random.randint(i * pw, (i + 1) * pw - ws)
            img[y-hs:y, x:x+ws] = symb
        img = np.repeat(img[:, :, None], 3, axis=2)  # cv2.COLOR_GRAY2BGR
        return img, seq

    def __getitem__(self, idx):
        img, seq = self.samples[idx]
        sample = {"img": img, "seq": seq, "seq_len": len(seq), "aug": True}
        if self.transform:
            sample = self.transform(sample)
        return sample


# ---- dataset/collate_fn.py -----------------------------------------------------------------------------------

def text_collate(batch):
    img = list()
    seq = list()
    seq_len = list()
    for sample in batch:
        img.append(torch.from_numpy(sample["img"].transpose((2, 0, 1))).float())
        seq.extend(sample["seq"])
        seq_len.append(sample["seq_len"])
    img = torch.stack(img)
    seq = torch.Tensor(seq).int()
    seq_len = torch.Tensor(seq_len).int()
    batch = {"img": img, "seq": seq, "seq_len": seq_len}
    return batch


# ---- train.py ------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    abc = string.digits + string.ascii_uppercase
    seq_proj = "5x10"
    backend = "resnet18"
    base_lr, step_size, max_iter, batch_size = 1e-3, 500, 6000, 8
    gpu = '0'
    cuda = False  # (port) CPU

    data = TestDataset(epoch_len=N_SAMPLES, seq_len=N_CHARS, transform=None, abc=abc, seed=seed, bug=bug)
    seq_proj = [int(x) for x in seq_proj.split('x')]
    net = load_model(data.get_abc(), seq_proj, backend, None, cuda, bug=bug)
    optimizer = optim.Adam(net.parameters(), lr=base_lr, weight_decay=0.0001)
    lr_scheduler = StepLR(optimizer, step_size=step_size, max_iter=max_iter)
    ctc = nn.CTCLoss(reduction='sum')  # (port) warp-ctc: softmax inside, summed

    def loss_function(preds, labels, pred_lens, label_lens):
        if bug == "softmax_in_training":
            return ctc(preds, labels, pred_lens, label_lens)  # the model's softmax output taken as log-probs
        return ctc(preds.log_softmax(2), labels, pred_lens, label_lens)

    gen = torch.Generator().manual_seed(seed)
    state = {"it": None, "epoch_count": 0}

    def next_sample():
        while True:
            try:
                sample = next(state["it"])
            except (StopIteration, TypeError):
                if state["it"] is not None:
                    state["epoch_count"] += 1
                data_loader = DataLoader(data, batch_size=batch_size, num_workers=0, shuffle=True,
                                         collate_fn=text_collate, generator=gen)
                state["it"] = iter(data_loader)
                sample = next(state["it"])
            # for multi-gpu support
            if sample["img"].size(0) % len(gpu.split(',')) != 0:
                continue
            return sample

    def train_step():
        sample = next_sample()
        optimizer.zero_grad()
        imgs = sample["img"]
        labels = sample["seq"].view(-1)
        label_lens = sample["seq_len"].int()
        preds = net(imgs).cpu()
        pred_lens = Tensor([preds.size(0)] * batch_size).int()
        loss = loss_function(preds, labels, pred_lens, label_lens) / batch_size
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), 10.0)
        optimizer.step()
        lr_scheduler.step()
        return loss.item()

    def eval_fn(model, batch):
        imgs, (labels, label_lens) = batch
        model.eval()
        with torch.no_grad():
            out = model(imgs, decode=True)
        gt = (labels.numpy() - 1).tolist()
        lens = label_lens.numpy().tolist()
        pos, tp = 0, 0
        for i in range(len(out)):
            gts = ''.join(abc[c] for c in gt[pos:pos+lens[i]])
            pos += lens[i]
            tp += int(gts == out[i])
        model.train()
        return tp / len(out)

    first = text_collate([data[i] for i in range(batch_size)])
    batch = (first["img"], (first["seq"].view(-1), first["seq_len"]))

    def loss_fn(preds, targets):
        labels, label_lens = targets
        pred_lens = Tensor([preds.size(0)] * preds.size(1)).int()
        return loss_function(preds, labels, pred_lens, label_lens) / preds.size(1)

    return Program(name="besdevcrnn_ocr", model=net, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, batch_axis=0)


build = functools.partial(_build)

BUGS = [
    # The softmax ``forward`` keeps for evaluation applied in training too, its probabilities handed to the CTC loss
    # as log-probabilities (the softmax/log_softmax confusion around ``nn.CTCLoss`` asked about in
    # https://github.com/zhiqwang/sightseq/issues/10).
    Bug("softmax_in_training", functools.partial(_build, bug="softmax_in_training"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``abc.find(c)`` without the ``+ 1``: the first character of the alphabet ('0') is encoded as the CTC blank
    # and every other label is shifted onto its neighbour's output.
    Bug("labels_collide_with_blank", functools.partial(_build, bug="labels_collide_with_blank"), "learning_ledger",
        ("TASK",)),
]
