"""SASRec sequential recommender of pmixer/SASRec.pytorch: item and position embeddings (padding index 0, scaled by
sqrt(d)), causal ``nn.MultiheadAttention`` blocks (boolean mask ``~tril``) with post-norm and a point-wise Conv1d
feed-forward, trained on next-item prediction with one sampled negative per position: ``BCEWithLogitsLoss`` on the
positive and negative logits at the non-padding positions (``np.where(pos != 0)``), L2 on the item embeddings
(``l2_emb``), Adam(lr 1e-3, betas (0.9, 0.98)), xavier-normal initialisation with the padding rows zeroed.

Source: https://github.com/pmixer/SASRec.pytorch
Commit: fde8a9c08febc2c898dc269b1d98ab762c50d2be
Files: python/model.py, python/main.py, python/utils.py (sample_function, WarpSampler, evaluate)
License: Apache-2.0 (full text in LICENSES/pmixer-SASRec.pytorch.txt)
Domain: recommendation (sequential, BCE with sampled negatives)

Deviations from the original:
- sizes: maxlen 200 -> 16, hidden_units 50 -> 32, batch_size 128 -> 32 (num_blocks 2, num_heads 1, dropout 0.2,
  lr 1e-3, l2_emb 0, norm_first off unchanged);
- data: instead of the ml-1m text file, 64 synthetic users over 40 items made from ``seed``: every user's history
  (6-15 items) follows one fixed random successor map of the items (the next item is a function of the current
  one), as ``user_train`` after ``data_partition``;
- ``WarpSampler`` runs ``sample_function`` in three worker processes feeding a queue; here the same
  ``sample_function`` body runs in-process as a generator (no multiprocessing), with ``np.random`` a
  ``np.random.RandomState(seed)``; no CUDA (``args.device`` 'cpu'); argparse is an ``args`` namespace;
- one ``train_step`` is one iteration of ``main.py``'s inner loop (sample, forward, zero_grad, masked BCE, l2,
  backward, step); printing, checkpoints and the every-20-epochs evaluation are left out; ``eval_fn`` is
  ``evaluate``'s hit rate at 10 on one batch (``model.eval()``, the next item of each sequence ranked against 20
  sampled unrated items by ``predict``), restoring ``model.train()`` as ``main.py`` does after evaluating.
"""
# ruff: noqa: E722, S110, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import torch

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

USERNUM, ITEMNUM = 64, 40


# ---- python/model.py ---------------------------------------------------------------------------------------------

class PointWiseFeedForward(torch.nn.Module):
    def __init__(self, hidden_units, dropout_rate):

        super(PointWiseFeedForward, self).__init__()

        self.conv1 = torch.nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout1 = torch.nn.Dropout(p=dropout_rate)
        self.relu = torch.nn.ReLU()
        self.conv2 = torch.nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout2 = torch.nn.Dropout(p=dropout_rate)

    def forward(self, inputs):
        outputs = self.dropout2(self.conv2(self.relu(self.dropout1(self.conv1(inputs.transpose(-1, -2))))))
        outputs = outputs.transpose(-1, -2) # as Conv1D requires (N, C, Length)
        return outputs


class SASRec(torch.nn.Module):
    def __init__(self, user_num, item_num, args, bug=None):
        super(SASRec, self).__init__()

        self.user_num = user_num
        self.item_num = item_num
        self.dev = args.device
        self.norm_first = args.norm_first
        self.bug = bug

        self.item_emb = torch.nn.Embedding(self.item_num+1, args.hidden_units, padding_idx=0)
        self.pos_emb = torch.nn.Embedding(args.maxlen+1, args.hidden_units, padding_idx=0)
        self.emb_dropout = torch.nn.Dropout(p=args.dropout_rate)

        self.attention_layernorms = torch.nn.ModuleList() # to be Q for self-attention
        self.attention_layers = torch.nn.ModuleList()
        self.forward_layernorms = torch.nn.ModuleList()
        self.forward_layers = torch.nn.ModuleList()

        self.last_layernorm = torch.nn.LayerNorm(args.hidden_units, eps=1e-8)

        for _ in range(args.num_blocks):
            new_attn_layernorm = torch.nn.LayerNorm(args.hidden_units, eps=1e-8)
            self.attention_layernorms.append(new_attn_layernorm)

            new_attn_layer =  torch.nn.MultiheadAttention(args.hidden_units,
                                                            args.num_heads,
                                                            args.dropout_rate)
            self.attention_layers.append(new_attn_layer)

            new_fwd_layernorm = torch.nn.LayerNorm(args.hidden_units, eps=1e-8)
            self.forward_layernorms.append(new_fwd_layernorm)

            new_fwd_layer = PointWiseFeedForward(args.hidden_units, args.dropout_rate)
            self.forward_layers.append(new_fwd_layer)

    def log2feats(self, log_seqs):
        seqs = self.item_emb(torch.LongTensor(log_seqs).to(self.dev))
        seqs *= self.item_emb.embedding_dim ** 0.5
        poss = np.tile(np.arange(1, log_seqs.shape[1] + 1), [log_seqs.shape[0], 1])
        poss *= (log_seqs != 0)
        seqs += self.pos_emb(torch.LongTensor(poss).to(self.dev))
        seqs = self.emb_dropout(seqs)

        tl = seqs.shape[1] # time dim len for enforce causality
        if self.bug == "float_tril_mask":
            # the mask as proposed in https://github.com/pmixer/SASRec.pytorch/issues/6: a float 0/1 lower triangle,
            # which MultiheadAttention adds to the scores instead of blocking the future
            attention_mask = torch.tril(torch.ones((tl, tl), dtype=torch.float, device=self.dev))
        else:
            attention_mask = ~torch.tril(torch.ones((tl, tl), dtype=torch.bool, device=self.dev))

        for i in range(len(self.attention_layers)):
            seqs = torch.transpose(seqs, 0, 1)
            if self.norm_first:
                x = self.attention_layernorms[i](seqs)
                mha_outputs, _ = self.attention_layers[i](x, x, x,
                                                attn_mask=attention_mask)
                seqs = seqs + mha_outputs
                seqs = torch.transpose(seqs, 0, 1)
                seqs = seqs + self.forward_layers[i](self.forward_layernorms[i](seqs))
            else:
                mha_outputs, _ = self.attention_layers[i](seqs, seqs, seqs,
                                                attn_mask=attention_mask)
                seqs = self.attention_layernorms[i](seqs + mha_outputs)
                seqs = torch.transpose(seqs, 0, 1)
                seqs = self.forward_layernorms[i](seqs + self.forward_layers[i](seqs))

        log_feats = self.last_layernorm(seqs) # (U, T, C) -> (U, -1, C)

        return log_feats

    def forward(self, user_ids, log_seqs, pos_seqs, neg_seqs): # for training
        log_feats = self.log2feats(log_seqs) # user_ids hasn't been used yet

        pos_embs = self.item_emb(torch.LongTensor(pos_seqs).to(self.dev))
        neg_embs = self.item_emb(torch.LongTensor(neg_seqs).to(self.dev))

        pos_logits = (log_feats * pos_embs).sum(dim=-1)
        neg_logits = (log_feats * neg_embs).sum(dim=-1)

        return pos_logits, neg_logits # pos_pred, neg_pred

    def predict(self, user_ids, log_seqs, item_indices): # for inference
        log_feats = self.log2feats(log_seqs) # user_ids hasn't been used yet

        final_feat = log_feats[:, -1, :] # only use last QKV classifier, a waste

        item_embs = self.item_emb(torch.LongTensor(item_indices).to(self.dev)) # (U, I, C)

        logits = item_embs.matmul(final_feat.unsqueeze(-1)).squeeze(-1)

        return logits # preds # (U, I)


# ---- python/utils.py: the sampler, in-process ---------------------------------------------------------------------

def random_neq(l, r, s, random):
    t = random.randint(l, r)
    while t in s:
        t = random.randint(l, r)
    return t


def sample_function(user_train, usernum, itemnum, batch_size, maxlen, random):
    def sample(uid):

        # uid = np.random.randint(1, usernum + 1)
        while len(user_train[uid]) <= 1: uid = random.randint(1, usernum + 1)

        seq = np.zeros([maxlen], dtype=np.int32)
        pos = np.zeros([maxlen], dtype=np.int32)
        neg = np.zeros([maxlen], dtype=np.int32)
        nxt = user_train[uid][-1]
        idx = maxlen - 1

        ts = set(user_train[uid])
        for i in reversed(user_train[uid][:-1]):
            seq[idx] = i
            pos[idx] = nxt
            neg[idx] = random_neq(1, itemnum + 1, ts, random)          # Don't need "if nxt != 0"
            nxt = i
            idx -= 1
            if idx == -1: break

        return (uid, seq, pos, neg)

    uids = np.arange(1, usernum+1, dtype=np.int32)
    counter = 0
    while True:
        if counter % usernum == 0:
            random.shuffle(uids)
        one_batch = []
        for i in range(batch_size):
            one_batch.append(sample(uids[counter % usernum]))
            counter += 1
        yield zip(*one_batch)


def make_users(seed):
    rs = np.random.RandomState(seed + 1000)
    successor = rs.permutation(ITEMNUM) + 1  # item i (1..ITEMNUM) is followed by successor[i - 1]
    user_train = {}
    for u in range(1, USERNUM + 1):
        n = rs.randint(6, 16)
        items = [int(rs.randint(1, ITEMNUM + 1))]
        for _ in range(n - 1):
            items.append(int(successor[items[-1] - 1]))
        user_train[u] = items
    return user_train


def _build(seed, bug=None):
    torch.manual_seed(seed)
    random = np.random.RandomState(seed)
    args = SimpleNamespace(batch_size=32, lr=0.001, maxlen=16, hidden_units=32, num_blocks=2, num_heads=1,
                           dropout_rate=0.2, l2_emb=0.0, device="cpu", norm_first=False)
    user_train = make_users(seed)
    usernum, itemnum = USERNUM, ITEMNUM

    sampler = sample_function(user_train, usernum, itemnum, args.batch_size, args.maxlen, random)
    model = SASRec(usernum, itemnum, args, bug=bug).to(args.device) # no ReLU activation in original SASRec implementation?

    for name, param in model.named_parameters():
        try:
            torch.nn.init.xavier_normal_(param.data)
        except:
            pass # just ignore those failed init layers

    model.pos_emb.weight.data[0, :] = 0
    model.item_emb.weight.data[0, :] = 0

    model.train() # enable model training

    bce_criterion = torch.nn.BCEWithLogitsLoss() # torch.nn.BCELoss()
    adam_optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98))

    def train_step():
        u, seq, pos, neg = next(sampler) # tuples to ndarray
        u, seq, pos, neg = np.array(u), np.array(seq), np.array(pos), np.array(neg)
        pos_logits, neg_logits = model(u, seq, pos, neg)
        pos_labels, neg_labels = torch.ones(pos_logits.shape, device=args.device), torch.zeros(neg_logits.shape, device=args.device)
        adam_optimizer.zero_grad()
        if bug == "padding_in_loss":
            indices = np.where(pos >= 0)  # every position, the left padding included
        else:
            indices = np.where(pos != 0)
        loss = bce_criterion(pos_logits[indices], pos_labels[indices])
        loss += bce_criterion(neg_logits[indices], neg_labels[indices])
        for param in model.item_emb.parameters(): loss += args.l2_emb * torch.sum(param ** 2)
        loss.backward()
        adam_optimizer.step()
        return loss.detach()

    def loss_fn(outputs, pos):
        pos_logits, neg_logits = outputs
        pos_labels, neg_labels = torch.ones(pos_logits.shape), torch.zeros(neg_logits.shape)
        indices = np.where(pos >= 0) if bug == "padding_in_loss" else np.where(pos != 0)
        loss = bce_criterion(pos_logits[indices], pos_labels[indices])
        loss += bce_criterion(neg_logits[indices], neg_labels[indices])
        return loss

    def eval_fn(model, batch):
        """evaluate()'s HR@10: the item after each sequence ranked against 20 sampled items the user has not rated."""
        inputs, _pos = batch
        model.eval()
        hits, rs = 0, np.random.RandomState(0)
        for u, seq, pos in zip(inputs["user_ids"], inputs["log_seqs"], inputs["pos_seqs"]):
            rated = set(user_train[int(u)])
            rated.add(0)
            item_idx = [int(pos[-1])]
            for _ in range(20):
                t = rs.randint(1, itemnum + 1)
                while t in rated: t = rs.randint(1, itemnum + 1)
                item_idx.append(t)
            with torch.no_grad():
                predictions = -model.predict(*[np.array(l) for l in [[u], [seq], item_idx]])
            predictions = predictions[0] # - for 1st argsort DESC
            rank = predictions.argsort().argsort()[0].item()
            hits += rank < 10
        model.train()
        return hits / len(inputs["user_ids"])

    u, seq, pos, neg = (np.array(a) for a in next(sample_function(user_train, usernum, itemnum, args.batch_size,
                                                                   args.maxlen, np.random.RandomState(seed + 1))))
    batch = ({"user_ids": u, "log_seqs": seq, "pos_seqs": pos, "neg_seqs": neg}, pos)
    return Program(name="sasrecpytorch_sasrec", model=model, batch=batch, loss_fn=loss_fn, optimizer=adam_optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the float lower-triangular mask proposed in https://github.com/pmixer/SASRec.pytorch/issues/6 instead of the
    # negated boolean one: MultiheadAttention adds a float mask to the scores, so every position sees the future
    # (including the item it must predict).
    Bug("float_tril_mask", functools.partial(_build, bug="float_tril_mask"), "learning_ledger", ("DEPENDENCY",)),
    # the padding positions are not filtered out of the BCE terms (classic: padding not ignored in the loss).
    Bug("padding_in_loss", functools.partial(_build, bug="padding_in_loss"), "learning_ledger", ("OBJECTIVE",)),
]
