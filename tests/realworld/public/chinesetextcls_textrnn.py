"""TextRNN (2-layer bidirectional LSTM over character embeddings, the last time step's output into a linear
classifier) trained by the repository's ``run.py --model TextRNN --embedding random``: ``init_network`` (xavier
weights, zero biases, embedding left out), Adam lr 1e-3 over ``model.parameters()``, the ``train`` loop of
``train_eval.py`` (``outputs = model(trains)``, ``model.zero_grad()``, ``F.cross_entropy``, backward, step) over the
``DatasetIterater`` of ``utils.py`` (texts padded with ``<PAD>`` at the end to ``pad_size``).

Source: https://github.com/649453932/Chinese-Text-Classification-Pytorch
Commit: 6cb26819af7b646275aff8a4693676f2849e67f6
Files: run.py, train_eval.py, utils.py, models/TextRNN.py
License: MIT (Copyright (c) 2019 huwenxing; full text in LICENSES/649453932-Chinese-Text-Classification-Pytorch.txt)
Domain: text classification (character-level BiLSTM)

Deviations from the original:
- sizes: vocabulary 10002 (THUCNews chars) -> 40 (+ ``<UNK>``, ``<PAD>``), embed 300 -> 32, hidden_size 128 -> 32,
  num_classes 10 -> 4, batch_size 128 -> 16, pad_size 32 -> 16 (num_layers 2, dropout 0.5, lr unchanged);
- data: THUCNews is replaced by synthetic "texts" made from ``seed``: each class owns 10 of the 40 characters, a
  text of 6-16 characters draws 70% of them from its class's set and the rest from all 40; the label is the
  class. Texts are tokenized, padded/cut and mapped to ids by ``load_dataset``'s lines (copied), no files;
- ``Config`` keeps only the fields the model and loop read (no paths, no pretrained embedding, device cpu);
- one ``train_step`` is one batch of the inner loop (the ``DatasetIterater`` restarts at each epoch's end); the
  every-100-batches evaluation / checkpoint / tensorboard logging and the early stop are left out, and
  ``eval_fn`` is ``evaluate``'s loss on a given batch (``model.eval()``, ``no_grad``; the loop's ``model.train()``
  after it is kept at the start of the step's next call as in the loop);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP004, UP008, PLR0402

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

UNK, PAD = '<UNK>', '<PAD>'  # 未知字，padding符号
N_CHARS = 40
N_CLASSES = 4


# ---- models/TextRNN.py ------------------------------------------------------------------------------------------

class Config(object):

    """配置参数"""
    def __init__(self, n_vocab):
        self.model_name = 'TextRNN'
        self.embedding_pretrained = None                                # --embedding random
        self.device = torch.device('cpu')                               # 设备

        self.dropout = 0.5                                              # 随机失活
        self.num_classes = N_CLASSES                                    # 类别数
        self.n_vocab = n_vocab                                          # 词表大小，在运行时赋值
        self.num_epochs = 10                                            # epoch数
        self.batch_size = 16                                            # mini-batch大小
        self.pad_size = 16                                              # 每句话处理成的长度(短填长切)
        self.learning_rate = 1e-3                                       # 学习率
        self.embed = 32                                                 # 字向量维度
        self.hidden_size = 32                                           # lstm隐藏层
        self.num_layers = 2                                             # lstm层数


class Model(nn.Module):
    def __init__(self, config):
        super(Model, self).__init__()
        if config.embedding_pretrained is not None:
            self.embedding = nn.Embedding.from_pretrained(config.embedding_pretrained, freeze=False)
        else:
            self.embedding = nn.Embedding(config.n_vocab, config.embed, padding_idx=config.n_vocab - 1)
        self.lstm = nn.LSTM(config.embed, config.hidden_size, config.num_layers,
                            bidirectional=True, batch_first=True, dropout=config.dropout)
        self.fc = nn.Linear(config.hidden_size * 2, config.num_classes)

    def forward(self, x):
        x, _ = x
        out = self.embedding(x)  # [batch_size, seq_len, embeding]=[128, 32, 300]
        out, _ = self.lstm(out)
        out = self.fc(out[:, -1, :])  # 句子最后时刻的 hidden state
        return out


# ---- utils.py ----------------------------------------------------------------------------------------------------

def build_dataset(config, lines, vocab, bug=None):
    tokenizer = lambda x: [y for y in x]  # char-level

    def load_dataset(lines, pad_size=32):
        contents = []
        for line in lines:
            lin = line.strip()
            if not lin:
                continue
            content, label = lin.split('\t')
            words_line = []
            token = tokenizer(content)
            seq_len = len(token)
            if pad_size:
                if len(token) < pad_size:
                    token.extend([PAD] * (pad_size - len(token)))
                else:
                    token = token[:pad_size]
                    seq_len = pad_size
            for word in token:
                words_line.append(vocab.get(word, vocab.get(UNK)))
            contents.append((words_line, int(label), seq_len))
        return contents  # [([...], 0), ([...], 1), ...]
    return load_dataset(lines, config.pad_size)


class DatasetIterater(object):
    def __init__(self, batches, batch_size, device, bug=None):
        self.batch_size = batch_size
        self.batches = batches
        self.n_batches = len(batches) // batch_size
        self.residue = False  # 记录batch数量是否为整数
        if len(batches) % self.n_batches != 0:
            self.residue = True
        self.index = 0
        self.device = device
        self.bug = bug

    def _to_tensor(self, datas):
        x = torch.LongTensor([_[0] for _ in datas]).to(self.device)
        if self.bug == "labels_misaligned":
            # the labels collected in a different order than the texts (off by one within the batch)
            y = torch.LongTensor([_[1] for _ in datas[1:] + datas[:1]]).to(self.device)
        else:
            y = torch.LongTensor([_[1] for _ in datas]).to(self.device)

        seq_len = torch.LongTensor([_[2] for _ in datas]).to(self.device)
        return (x, seq_len), y

    def __next__(self):
        if self.residue and self.index == self.n_batches:
            batches = self.batches[self.index * self.batch_size: len(self.batches)]
            self.index += 1
            batches = self._to_tensor(batches)
            return batches

        elif self.index >= self.n_batches:
            self.index = 0
            raise StopIteration
        else:
            batches = self.batches[self.index * self.batch_size: (self.index + 1) * self.batch_size]
            self.index += 1
            batches = self._to_tensor(batches)
            return batches

    def __iter__(self):
        return self

    def __len__(self):
        if self.residue:
            return self.n_batches + 1
        else:
            return self.n_batches


# ---- train_eval.py -----------------------------------------------------------------------------------------------

# 权重初始化，默认xavier
def init_network(model, method='xavier', exclude='embedding', seed=123):
    for name, w in model.named_parameters():
        if exclude not in name:
            if 'weight' in name:
                if method == 'xavier':
                    nn.init.xavier_normal_(w)
                elif method == 'kaiming':
                    nn.init.kaiming_normal_(w)
                else:
                    nn.init.normal_(w)
            elif 'bias' in name:
                nn.init.constant_(w, 0)
            else:
                pass


# ---- synthetic corpus (replaces THUCNews) -------------------------------------------------------------------------

CHARS = [chr(0x4E00 + i) for i in range(N_CHARS)]


def make_lines(rng, n):
    lines = []
    for _ in range(n):
        label = int(rng.integers(N_CLASSES))
        own = CHARS[label * 10:(label + 1) * 10]
        length = int(rng.integers(6, 17))
        text = "".join(own[rng.integers(10)] if rng.random() < 0.7 else CHARS[rng.integers(N_CHARS)]
                       for _ in range(length))
        lines.append(f"{text}\t{label}")
    return lines


def _build(seed, bug=None):
    rng = np.random.default_rng(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    vocab = {c: i for i, c in enumerate(CHARS)}
    vocab.update({UNK: len(vocab), PAD: len(vocab) + 1})

    config = Config(len(vocab))
    train_data = build_dataset(config, make_lines(rng, 320), vocab)
    train_iter = DatasetIterater(train_data, config.batch_size, config.device, bug=bug)

    model = Model(config).to(config.device)
    init_network(model)

    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    state = {"it": iter(train_iter)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:  # the next epoch
            state["it"] = iter(train_iter)
            return next(state["it"])

    first = DatasetIterater(train_data, config.batch_size, config.device, bug=bug)._to_tensor(
        train_data[:config.batch_size])

    def train_step():
        model.train()
        trains, labels = next_batch()
        outputs = model(trains)
        if bug != "no_zero_grad":
            model.zero_grad()
        loss = F.cross_entropy(outputs, labels)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        texts, labels = batch
        model.eval()
        with torch.no_grad():
            outputs = model(texts)
            loss = F.cross_entropy(outputs, labels)
        return float(loss)

    return Program(name="chinesetextcls_textrnn", model=model, batch=first,
                   loss_fn=lambda outputs, labels: F.cross_entropy(outputs, labels), optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_iter)


build = functools.partial(_build)

BUGS = [
    # `model.zero_grad()` dropped from the loop: every batch's gradient is added to all the earlier ones.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
    # the iterator pairs each text with the next text's label: the labels no longer follow from the texts.
    Bug("labels_misaligned", functools.partial(_build, bug="labels_misaligned"), "learning_ledger", ("TASK",)),
]
