# ruff: noqa: PLR0402, RUF059, F841, TRY002, UP034  (the original's style is kept as written)
"""Bag-level distantly supervised relation extraction with PCNN + selective attention (Lin et al., ACL 2016) from
thunlp/OpenNRE, trained as ``example/train_bag_cnn.py`` does (``--encoder pcnn --aggr att``): every sentence
mentioning an entity pair is encoded by a piecewise CNN (word and two relative-position embeddings, one Conv1d, a
max pool over each of the three pieces the two entities cut the sentence into, ReLU, dropout), the sentences of a
bag (all sentences of one training fact) are weighted by a softmax over their scores against the gold relation's
row of the classifier (times a learned diagonal), the weighted sum goes through dropout and the classifier, and the
bag's cross-entropy is minimized by SGD (lr 0.1, weight decay 1e-5); at evaluation each relation's own query
builds its own bag representation and the held-out bags (one per entity pair) are scored by the area under the
precision-recall curve.

Source: https://github.com/thunlp/OpenNRE
Commit: 8e42fd712f2ab01b48a7e7c4cb2bdea45ec6ff9a
Files: ``example/train_bag_cnn.py``, ``opennre/framework/bag_re.py`` (``BagRE.__init__``, ``train_model``,
``eval_model``), ``opennre/framework/data_loader.py`` (``BagREDataset``, ``BagRELoader``),
``opennre/model/bag_attention.py`` (``BagAttention``), ``opennre/encoder/pcnn_encoder.py`` (``PCNNEncoder``),
``opennre/encoder/base_encoder.py`` (``BaseEncoder.__init__``), ``opennre/tokenization/utils.py``
(``convert_by_vocab``)
License: MIT (Copyright (c) 2019 Tianyu Gao; full text in LICENSES/thunlp-OpenNRE.txt)
Domain: NLP, relation extraction (multi-instance learning over bags of sentences)

Kept as written: ``PCNNEncoder`` (the fixed one-hot ``mask_embedding``, ``_minus`` -100 on the other pieces before
the ReLU and the max pool, hidden size times 3), ``BaseEncoder.__init__`` ([UNK] / [PAD] appended, position
embeddings of ``2 * max_length`` rows with padding index 0), the tokenizer's position and piece-mask arithmetic,
``BagAttention.forward`` for ``bag_size`` 0 (the per-sentence query from the bag's label in training, the
per-relation queries and the softmax-then-diagonal scores in evaluation), ``BagREDataset`` (bags of facts for
training, of entity pairs for evaluation, the label of the bag's first sentence, ``collate_fn``'s scopes),
``BagRE``'s criterion, optimizer and loop body (``model(label, scope, *args, bag_size)``, the loss, backward, step,
zero_grad), ``eval_model`` and the AUC of ``BagREDataset.eval``; the script's defaults (pcnn, att, bag_size 0,
lr 0.1, sgd, weight decay 1e-5, kernel 3, padding 1, position_size 5, dropout 0.5).

Deviations from the original:
- NYT10 / Wiki distant data and GloVe are not here: a synthetic distant-supervision corpus is made from ``seed``: 80
  entities, 4 relations plus NA; each of 240 training facts (one in five NA) has a bag of 1 to 4 token sentences
  of 10 to 20 words with the head and tail mentions placed at random, and a sentence of a positive fact holds one of
  its relation's 3 trigger words between the two mentions with probability 0.7 (the others are noise, as distant
  supervision gives); 80 held-out entity pairs are made the same way; sentences come pre-tokenized (``'token'``
  items, so the text branch of ``tokenize`` and nltk are not copied); word embeddings start random
  (``word2vec=None``);
- sizes for 2 CPU cores: max_length 128 -> 32, hidden_size 230 -> 32, word_size 50 -> 16, batch_size 160 -> 32;
  SGD at lr 0.1 needs more than 30 steps to show learning here: the self-check runs 90 (12 epochs of 240 bags);
- CPU only: ``nn.DataParallel`` and the ``.cuda()`` moves are dropped (``self.model.module`` is the model);
  ``num_workers`` 8 -> 0, no pin_memory; the ``bag_size > 0`` branches, the mask-less calls (for the CNN encoder)
  and the unused text tokenization are not copied; tqdm, checkpoints and the metric's other entries (F1s, P@N; sklearn is not installed) are dropped, the
  AUC (``sklearn.metrics.auc``, the trapezoid rule) written with numpy;
- one ``train_step`` is one iteration of ``train_model``'s loop (``self.train()`` each step, a new shuffled epoch
  when it runs out), returning the loss; ``eval_fn`` is ``eval_model`` on the held-out pairs (AUC); the Program's
  batch is the first training batch as ``((label, scope, token, pos1, pos2, mask), label)``;
- ``BagREDataset``, ``BagRELoader`` and the synthetic corpus are in ``_opennre_bags.py`` (the port's line limit);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _opennre_bags import BagREDataset, BagRELoader, _corpus


def convert_by_vocab(vocab, items, max_seq_length = None, blank_id = 0, unk_id = 1, uncased = True):
    """Converts a sequence of [tokens|ids] using the vocab."""
    output = []
    for item in items:
        if uncased:
            item = item.lower()
        if item in vocab:
            output.append(vocab[item])
        else:
            output.append(unk_id)
    if max_seq_length != None:
        if len(output) > max_seq_length:
            output = output[:max_seq_length]
        else:
            while len(output) < max_seq_length:
                output.append(blank_id)
    return output


class PCNNEncoder(nn.Module):  # (port) BaseEncoder.__init__ folded in

    def __init__(self, token2id, max_length=128, hidden_size=230, word_size=50, position_size=5,
                 blank_padding=True, word2vec=None, kernel_size=3, padding_size=1, dropout=0.0,
                 activation_function=F.relu, mask_entity=False):
        super().__init__()
        # BaseEncoder
        self.token2id = token2id
        self.max_length = max_length
        self.num_token = len(token2id)
        self.num_position = max_length * 2
        self.mask_entity = mask_entity
        self.word_size = word_size
        self.position_size = position_size
        self.hidden_size = hidden_size
        self.input_size = word_size + position_size * 2
        self.blank_padding = blank_padding
        if not '[UNK]' in self.token2id:
            self.token2id['[UNK]'] = len(self.token2id)
            self.num_token += 1
        if not '[PAD]' in self.token2id:
            self.token2id['[PAD]'] = len(self.token2id)
            self.num_token += 1
        self.word_embedding = nn.Embedding(self.num_token, self.word_size)
        self.pos1_embedding = nn.Embedding(2 * max_length, self.position_size, padding_idx=0)
        self.pos2_embedding = nn.Embedding(2 * max_length, self.position_size, padding_idx=0)
        # PCNNEncoder
        self.drop = nn.Dropout(dropout)
        self.kernel_size = kernel_size
        self.padding_size = padding_size
        self.act = activation_function
        self.conv = nn.Conv1d(self.input_size, self.hidden_size, self.kernel_size, padding=self.padding_size)
        self.pool = nn.MaxPool1d(self.max_length)
        self.mask_embedding = nn.Embedding(4, 3)
        self.mask_embedding.weight.data.copy_(torch.FloatTensor([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]))
        self.mask_embedding.weight.requires_grad = False
        self._minus = -100
        self.hidden_size *= 3

    def forward(self, token, pos1, pos2, mask):
        # Check size of tensors
        if len(token.size()) != 2 or token.size() != pos1.size() or token.size() != pos2.size():
            raise Exception("Size of token, pos1 ans pos2 should be (B, L)")
        x = torch.cat([self.word_embedding(token),
                       self.pos1_embedding(pos1),
                       self.pos2_embedding(pos2)], 2) # (B, L, EMBED)
        x = x.transpose(1, 2) # (B, EMBED, L)
        x = self.conv(x) # (B, H, L)
        mask = 1 - self.mask_embedding(mask).transpose(1, 2) # (B, L) -> (B, L, 3) -> (B, 3, L)
        pool1 = self.pool(self.act(x + self._minus * mask[:, 0:1, :])) # (B, H, 1)
        pool2 = self.pool(self.act(x + self._minus * mask[:, 1:2, :]))
        pool3 = self.pool(self.act(x + self._minus * mask[:, 2:3, :]))
        x = torch.cat([pool1, pool2, pool3], 1) # (B, 3H, 1)
        x = x.squeeze(2) # (B, 3H)
        x = self.drop(x)
        return x

    def tokenize(self, item):  # (port) the 'token' branch only
        sentence = item['token']
        pos_head = item['h']['pos']
        pos_tail = item['t']['pos']
        tokens = sentence
        # Token -> index
        indexed_tokens = convert_by_vocab(self.token2id, tokens, self.max_length, self.token2id['[PAD]'], self.token2id['[UNK]'])
        # Position -> index
        pos1 = []
        pos2 = []
        pos1_in_index = min(pos_head[0], self.max_length)
        pos2_in_index = min(pos_tail[0], self.max_length)
        for i in range(len(tokens)):
            pos1.append(min(i - pos1_in_index + self.max_length, 2 * self.max_length - 1))
            pos2.append(min(i - pos2_in_index + self.max_length, 2 * self.max_length - 1))
        while len(pos1) < self.max_length:
            pos1.append(0)
        while len(pos2) < self.max_length:
            pos2.append(0)
        indexed_tokens = indexed_tokens[:self.max_length]
        pos1 = pos1[:self.max_length]
        pos2 = pos2[:self.max_length]
        indexed_tokens = torch.tensor(indexed_tokens).long().unsqueeze(0) # (1, L)
        pos1 = torch.tensor(pos1).long().unsqueeze(0) # (1, L)
        pos2 = torch.tensor(pos2).long().unsqueeze(0) # (1, L)
        # Mask
        mask = []
        pos_min = min(pos1_in_index, pos2_in_index)
        pos_max = max(pos1_in_index, pos2_in_index)
        for i in range(len(tokens)):
            if i <= pos_min:
                mask.append(1)
            elif i <= pos_max:
                mask.append(2)
            else:
                mask.append(3)
        while len(mask) < self.max_length:
            mask.append(0)
        mask = mask[:self.max_length]
        mask = torch.tensor(mask).long().unsqueeze(0) # (1, L)
        return indexed_tokens, pos1, pos2, mask


class BagAttention(nn.Module):
    """
    Instance attention for bag-level relation extraction.
    """

    def __init__(self, sentence_encoder, num_class, rel2id, use_diag=True):
        super().__init__()
        self.sentence_encoder = sentence_encoder
        self.num_class = num_class
        self.fc = nn.Linear(self.sentence_encoder.hidden_size, num_class)
        self.softmax = nn.Softmax(-1)
        self.rel2id = rel2id
        self.id2rel = {}
        self.drop = nn.Dropout()
        for rel, id in rel2id.items():
            self.id2rel[id] = rel
        if use_diag:
            self.use_diag = True
            self.diag = nn.Parameter(torch.ones(self.sentence_encoder.hidden_size))
        else:
            self.use_diag = False

    def forward(self, label, scope, token, pos1, pos2, mask=None, train=True, bag_size=0):  # (port) bag_size 0 only
        begin, end = scope[0][0], scope[-1][1]
        token = token[:, begin:end, :].view(-1, token.size(-1))
        pos1 = pos1[:, begin:end, :].view(-1, pos1.size(-1))
        pos2 = pos2[:, begin:end, :].view(-1, pos2.size(-1))
        if mask is not None:
            mask = mask[:, begin:end, :].view(-1, mask.size(-1))
        scope = torch.sub(scope, torch.zeros_like(scope).fill_(begin))
        # Attention
        if train:
            rep = self.sentence_encoder(token, pos1, pos2, mask) # (nsum, H)
            bag_rep = []
            query = torch.zeros((rep.size(0))).long()
            for i in range(len(scope)):
                query[scope[i][0]:scope[i][1]] = label[i]
            att_mat = self.fc.weight[query] # (nsum, H)
            if self.use_diag:
                att_mat = att_mat * self.diag.unsqueeze(0)
            att_score = (rep * att_mat).sum(-1) # (nsum)
            for i in range(len(scope)):
                bag_mat = rep[scope[i][0]:scope[i][1]] # (n, H)
                softmax_att_score = self.softmax(att_score[scope[i][0]:scope[i][1]]) # (n)
                bag_rep.append((softmax_att_score.unsqueeze(-1) * bag_mat).sum(0)) # (n, 1) * (n, H) -> (n, H) -> (H)
            bag_rep = torch.stack(bag_rep, 0) # (B, H)
            bag_rep = self.drop(bag_rep)
            bag_logits = self.fc(bag_rep) # (B, N)
            if getattr(self, "bug", None) == "softmax_before_cross_entropy":
                bag_logits = self.softmax(bag_logits)
        else:
            rep = []
            bs = 256
            total_bs = len(token) // bs + (1 if len(token) % bs != 0 else 0)
            for b in range(total_bs):
                with torch.no_grad():
                    left = bs * b
                    right = min(bs * (b + 1), len(token))
                    rep.append(self.sentence_encoder(token[left:right], pos1[left:right], pos2[left:right], mask[left:right]).detach()) # (nsum, H)
            rep = torch.cat(rep, 0)
            bag_logits = []
            att_mat = self.fc.weight.transpose(0, 1)
            if self.use_diag:
                att_mat = att_mat * self.diag.unsqueeze(1)
            att_score = torch.matmul(rep, att_mat) # (nsum, H) * (H, N) -> (nsum, N)
            for i in range(len(scope)):
                bag_mat = rep[scope[i][0]:scope[i][1]] # (n, H)
                softmax_att_score = self.softmax(att_score[scope[i][0]:scope[i][1]].transpose(0, 1)) # (N, (softmax)n)
                rep_for_each_rel = torch.matmul(softmax_att_score, bag_mat) # (N, n) * (n, H) -> (N, H)
                logit_for_each_rel = self.softmax(self.fc(rep_for_each_rel)) # ((each rel)N, (logit)N)
                logit_for_each_rel = logit_for_each_rel.diag() # (N)
                bag_logits.append(logit_for_each_rel)
            bag_logits = torch.stack(bag_logits, 0) # after **softmax**
        return bag_logits


class args:  # (port) train_bag_cnn.py's defaults, sizes as in the docstring
    bag_size = 0
    batch_size = 32  # (port) 160
    lr = 0.1
    optim = 'sgd'
    weight_decay = 1e-5
    max_length = 32  # (port) 128
    hidden_size = 32  # (port) 230
    word_size = 16  # (port) 50, GloVe's width


def _eval_model(model, eval_loader):  # BagRE.eval_model (self.model.module is the model)
    was = model.training
    model.eval()
    with torch.no_grad():
        pred_result = []
        for iter, data in enumerate(eval_loader):
            label = data[0]
            bag_name = data[1]
            scope = data[2]
            args_ = data[3:]
            logits = model(None, scope, *args_, train=False, bag_size=args.bag_size) # results after softmax
            logits = logits.cpu().numpy()
            for i in range(len(logits)):
                for relid in range(model.num_class):
                    if model.id2rel[relid] != 'NA':
                        pred_result.append({
                            'entpair': bag_name[i][:2],
                            'relation': model.id2rel[relid],
                            'score': logits[i][relid]
                        })
        result = eval_loader.dataset.eval(pred_result)
    model.train(was)  # (port) the next epoch's self.train()
    return result


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    train_items, val_items = _corpus(rng, 240), _corpus(rng, 80)
    rel2id = {'NA': 0, 'rel1': 1, 'rel2': 2, 'rel3': 3, 'rel4': 4}
    word2id = {}
    for item in train_items:  # (port) the vocabulary of the training tokens instead of glove.6B.50d_word2id.json
        for w in item['token']:
            word2id.setdefault(w, len(word2id))

    sentence_encoder = PCNNEncoder(token2id=word2id, max_length=args.max_length, word_size=args.word_size,
                                   position_size=5, hidden_size=args.hidden_size, blank_padding=True, kernel_size=3,
                                   padding_size=1, word2vec=None, dropout=0.5)
    model = BagAttention(sentence_encoder, len(rel2id), rel2id)
    model.bug = bug

    # BagRE.__init__
    train_loader = BagRELoader(train_items, model.rel2id, model.sentence_encoder.tokenize, args.batch_size, True,
                               bag_size=args.bag_size, entpair_as_bag=False, bug=bug,
                               generator=torch.Generator().manual_seed(seed))
    val_loader = BagRELoader(val_items, model.rel2id, model.sentence_encoder.tokenize, args.batch_size, False,
                             bag_size=args.bag_size, entpair_as_bag=True)
    criterion = nn.CrossEntropyLoss()
    params = model.parameters()
    optimizer = optim.SGD(params, args.lr, weight_decay=args.weight_decay)
    st = {"it": iter(train_loader)}

    def train_step():  # BagRE.train_model's loop body
        model.train()
        try:
            data = next(st["it"])
        except StopIteration:
            st["it"] = iter(train_loader)
            data = next(st["it"])
        label = data[0]
        bag_name = data[1]
        scope = data[2]
        args_ = data[3:]
        logits = model(label, scope, *args_, bag_size=args.bag_size)
        loss = criterion(logits, label)
        score, pred = logits.max(-1) # (B)
        # Optimize
        loss.backward()
        optimizer.step()
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        return loss.item()

    def eval_fn(m, _batch=None):
        return _eval_model(m, val_loader)['auc']

    first = BagREDataset.collate_fn([train_loader.dataset[i] for i in range(args.batch_size)])
    inputs = (first[0], first[2], *first[3:])
    return Program(name="opennre_pcnn_att", model=model, batch=(inputs, first[0]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)
SELF_CHECK_STEPS = 90

BUGS = [
    # classic index slip: the bag's label read from ``self.data[index]`` (a sentence indexed by the bag's number)
    # instead of its first sentence ``self.data[bag[0]]``, so most bags carry another fact's relation.
    Bug("label_from_bag_index", functools.partial(_build, bug="label_from_bag_index"), "learning_ledger", ("TASK",)),
    # classic: the training logits softmaxed (as the evaluation path returns them) before nn.CrossEntropyLoss, which
    # applies its own log-softmax.
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: self.optimizer.zero_grad() left out of the loop: gradients pile up across batches.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
