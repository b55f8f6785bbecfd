"""The data side of ``opennre_pcnn_att.py`` (kept apart for the 400-line limit of a port): ``BagREDataset`` and
``BagRELoader`` from thunlp/OpenNRE ``opennre/framework/data_loader.py`` at commit
8e42fd712f2ab01b48a7e7c4cb2bdea45ec6ff9a (MIT, full text in LICENSES/thunlp-OpenNRE.txt), and the synthetic
distant-supervision corpus that stands in for NYT10; the deviations are listed in ``opennre_pcnn_att.py``.
"""
# ruff: noqa: UP031  (the original's style is kept as written)

from __future__ import annotations

import numpy as np
import torch
from torch.utils import data


class BagREDataset(data.Dataset):
    """
    Bag-level relation extraction dataset. Note that relation of NA should be named as 'NA'.
    """
    def __init__(self, items, rel2id, tokenizer, entpair_as_bag=False, bag_size=0, bug=None):  # (port) items
        super().__init__()
        self.tokenizer = tokenizer
        self.rel2id = rel2id
        self.entpair_as_bag = entpair_as_bag
        self.bag_size = bag_size
        self.bug = bug
        self.data = list(items)
        # Construct bag-level dataset (a bag contains instances sharing the same relation fact)
        self.bag_scope = []
        self.name2id = {}
        self.bag_name = []
        self.facts = {}
        for idx, item in enumerate(self.data):
            fact = (item['h']['id'], item['t']['id'], item['relation'])
            if item['relation'] != 'NA':
                self.facts[fact] = 1
            if entpair_as_bag:
                name = (item['h']['id'], item['t']['id'])
            else:
                name = fact
            if name not in self.name2id:
                self.name2id[name] = len(self.name2id)
                self.bag_scope.append([])
                self.bag_name.append(name)
            self.bag_scope[self.name2id[name]].append(idx)

    def __len__(self):
        return len(self.bag_scope)

    def __getitem__(self, index):
        bag = self.bag_scope[index]
        seqs = None
        if self.bug == "label_from_bag_index":
            rel = self.rel2id[self.data[index]['relation']]
        else:
            rel = self.rel2id[self.data[bag[0]]['relation']]
        for sent_id in bag:
            item = self.data[sent_id]
            seq = list(self.tokenizer(item))
            if seqs is None:
                seqs = []
                for i in range(len(seq)):
                    seqs.append([])
            for i in range(len(seq)):
                seqs[i].append(seq[i])
        for i in range(len(seqs)):
            seqs[i] = torch.cat(seqs[i], 0) # (n, L), n is the size of bag
        return [rel, self.bag_name[index], len(bag)] + seqs

    def collate_fn(data):
        data = list(zip(*data))
        label, bag_name, count = data[:3]
        seqs = data[3:]
        for i in range(len(seqs)):
            seqs[i] = torch.cat(seqs[i], 0) # (sumn, L)
            seqs[i] = seqs[i].expand((torch.cuda.device_count() if torch.cuda.device_count() > 0 else 1, ) + seqs[i].size())
        scope = [] # (B, 2)
        start = 0
        for c in count:
            scope.append((start, start + c))
            start += c
        assert(start == seqs[0].size(1))
        scope = torch.tensor(scope).long()
        label = torch.tensor(label).long() # (B)
        return [label, bag_name, scope] + seqs

    def eval(self, pred_result, threshold=0.5):  # (port) the AUC only
        sorted_pred_result = sorted(pred_result, key=lambda x: x['score'], reverse=True)
        prec = []
        rec = []
        correct = 0
        total = len(self.facts)
        for i, item in enumerate(sorted_pred_result):
            if (item['entpair'][0], item['entpair'][1], item['relation']) in self.facts:
                correct += 1
            prec.append(float(correct) / float(i + 1))
            rec.append(float(correct) / float(total))
        x, y = np.array(rec), np.array(prec)
        auc = float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2))  # (port) sklearn.metrics.auc
        return {'auc': auc}


def BagRELoader(items, rel2id, tokenizer, batch_size, shuffle, entpair_as_bag=False, bag_size=0, num_workers=0,
                bug=None, generator=None):
    collate_fn = BagREDataset.collate_fn
    dataset = BagREDataset(items, rel2id, tokenizer, entpair_as_bag=entpair_as_bag, bag_size=bag_size, bug=bug)
    data_loader = data.DataLoader(dataset=dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            num_workers=num_workers,
            collate_fn=collate_fn,
            generator=generator)
    return data_loader


def _corpus(rng, n_pairs, n_ent=80, n_rel=4, n_filler=150):  # (port) the stand-in for nyt10_train.txt / _test.txt
    items = []
    for _ in range(n_pairs):
        h, t = (int(e) for e in rng.choice(n_ent, 2, replace=False))
        r = 0 if rng.random() < 0.2 else int(rng.integers(1, n_rel + 1))
        for _ in range(int(rng.integers(1, 5))):
            words = ['w%d' % k for k in rng.integers(n_filler, size=int(rng.integers(10, 21)))]
            a, b = sorted(rng.choice(np.arange(1, len(words) - 1), 2, replace=False))
            if r > 0 and rng.random() < 0.7:
                words[int(rng.integers(a + 1, b + 1))] = 'r%d_%d' % (r, rng.integers(3))
            words[a], words[b] = 'e%d' % h, 'e%d' % t
            if rng.random() < 0.5:  # the head mention after the tail one
                words[a], words[b] = words[b], words[a]
            hp, tp = (a, b) if words[a] == 'e%d' % h else (b, a)
            items.append({'token': words, 'h': {'id': 'm%d' % h, 'pos': [hp, hp + 1]},
                          't': {'id': 'm%d' % t, 'pos': [tp, tp + 1]}, 'relation': 'NA' if r == 0 else 'rel%d' % r})
    return items
