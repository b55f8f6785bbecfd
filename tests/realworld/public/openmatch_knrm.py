# ruff: noqa: PLR0402, SIM401, UP008, UP034
"""THUNLP's OpenMatch (v1), ``train.py -task ranking -model knrm``: neural ad-hoc retrieval with K-NRM. The word
``Tokenizer`` turns each query and document into padded ids with 0/1 masks (``process``); ``Dataset`` yields
(query, positive document, negative document) triples, ``collate`` stacks them; ``KNRM``: a word ``Embedder``
(pretrained vectors, trainable, padding_idx 0), the ``KernelMatcher`` (cosine translation matrix of the masked
query/document embeddings, 21 RBF kernels with fixed means and widths, log-sum soft-TF pooling * 0.01) and a
``Linear(kernel_num, 1)`` scorer. ``train``: the positive and the negative document scored with the same query,
``MarginRankingLoss(margin=1)`` on their ``tanh``, the loss divided by ``gradient_accumulation_steps``, and every
``gradient_accumulation_steps`` batches ``clip_grad_norm_``, Adam over the parameters that require grad, the linear
warmup schedule, ``zero_grad``; ``dev`` scores the dev pairs under ``eval()`` + ``no_grad`` every ``eval_every``
updates.

Source: https://github.com/thunlp/OpenMatch
Commit: fbf198ad5353e35b8b67ea7539783db61b32d1f2 (the v1/ tree, last changed in 3f5c3a72150f78afdba8b794c23af955639769bf)
Files: v1/train.py, v1/train.sh, v1/OpenMatch/models/knrm.py, v1/OpenMatch/modules/embedders/embedder.py,
v1/OpenMatch/modules/matchers/kernel_matcher.py, v1/OpenMatch/data/datasets/dataset.py,
v1/OpenMatch/data/tokenizers/tokenizer.py, v1/OpenMatch/data/dataloader.py
License: MIT (Copyright (c) 2020 THUNLP), LICENSES/thunlp-OpenMatch.txt
Domain: retrieval (neural ranking, pairwise margin loss)

Deviations from the original:
- sizes: train.sh's ``-max_query_len 10`` -> 6, ``-max_doc_len 150`` -> 24, ``-batch_size 32`` -> 16,
  ``-n_kernels 21`` and ``-lr 1e-3`` kept; the parser's ``-gradient_accumulation_steps 4`` and ``-max_grad_norm 1.0``
  kept; ``-n_warmup_steps`` 1000 -> 4 (a short run); 300-dimensional GloVe vectors -> 16-dimensional;
- data: the toy jsonl files and ``glove.6B.300d.txt`` cannot be read here: 600 training triples from ``seed`` over a
  120-word vocabulary (a 2-4 word query; the positive document repeats some query words among filler words, the
  negative document is filler), tokenized by a whitespace ``WordTokenizer`` stand-in (no stop-word removal or
  stemming) through ``process`` as written; the embedding matrix is drawn from ``seed`` (row 0, the pad, zero);
  the dev set (a trec run with qrels in the original) is 64 more triples, scored pairwise;
- no GPU, no DataParallel / DistributedDataParallel (``sync_context`` is ``nullcontext``), ``num_workers`` 0;
  logging, ``save_trec``, checkpoint saving and pytrec_eval's ndcg@10 left out; one ``train_step`` runs the batches
  of one update (``gradient_accumulation_steps`` of them) and returns the last micro-batch's loss; ``eval_fn`` is
  the share of pairs whose positive document outscores the negative under ``eval()``.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from contextlib import nullcontext
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from transformers import get_linear_schedule_with_warmup

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SELF_CHECK_STEPS = 30
N_WORDS = 120
EMBED_DIM = 16


# ---- v1/OpenMatch/modules/embedders/embedder.py --------------------------------------------------------------------

class Embedder(nn.Module):
    def __init__(self, vocab_size, embed_dim, embed_matrix=None):
        super(Embedder, self).__init__()
        self._vocab_size = vocab_size
        self._embed_dim = embed_dim

        self._embedder = nn.Embedding(self._vocab_size, self._embed_dim, padding_idx=0)
        if embed_matrix is not None:
            self._embed_matrix = torch.tensor(embed_matrix)
            self._embedder.weight = nn.Parameter(self._embed_matrix, requires_grad=True)

    def forward(self, idx):
        embed = self._embedder(idx)
        return embed


# ---- v1/OpenMatch/modules/matchers/kernel_matcher.py ---------------------------------------------------------------

class KernelMatcher(nn.Module):
    def __init__(self, embed_dim, kernel_num=21):
        super(KernelMatcher, self).__init__()
        self._embed_dim = embed_dim
        self._kernel_num = kernel_num
        mus, sigmas = self.kernel_init(self._kernel_num)
        self._mus = nn.Parameter(mus, requires_grad=False)
        self._sigmas = nn.Parameter(sigmas, requires_grad=False)

    def kernel_init(self, kernel_num):
        mus = [1]
        bin_size = 2.0/(kernel_num-1)
        mus.append(1-bin_size/2)
        for i in range(1, kernel_num-1):
            mus.append(mus[i]-bin_size)
        mus = torch.tensor(mus).view(1, 1, 1, kernel_num)

        sigmas = [0.001]
        sigmas += [0.1]*(kernel_num-1)
        sigmas = torch.tensor(sigmas).view(1, 1, 1, kernel_num)
        return mus, sigmas

    def forward(self, k_embed, k_mask, v_embed, v_mask):
        k_embed = k_embed * k_mask.unsqueeze(-1)
        v_embed = v_embed * v_mask.unsqueeze(-1)
        k_by_v_mask = torch.bmm(k_mask.float().unsqueeze(-1), v_mask.float().unsqueeze(-1).transpose(1, 2))
        k_norm = F.normalize(k_embed, p=2, dim=2, eps=1e-10)
        v_norm = F.normalize(v_embed, p=2, dim=2, eps=1e-10)
        inter = (torch.bmm(k_norm, v_norm.transpose(1, 2)) * k_by_v_mask).unsqueeze(-1)

        kernel_outputs = torch.exp((-((inter-self._mus)**2)/(self._sigmas**2)/2))
        kernel_outputs = kernel_outputs.sum(dim=2).clamp(min=1e-10).log() * 1e-2
        logits = kernel_outputs.sum(dim=1)
        return logits


# ---- v1/OpenMatch/models/knrm.py -----------------------------------------------------------------------------------

class KNRM(nn.Module):
    def __init__(self, vocab_size, embed_dim, kernel_num=21, embed_matrix=None, task='ranking'):
        super(KNRM, self).__init__()
        self._vocab_size = vocab_size
        self._embed_dim = embed_dim
        self._kernel_num = kernel_num
        self._embed_matrix = embed_matrix
        self._task = task

        self._embedder = Embedder(self._vocab_size, self._embed_dim, self._embed_matrix)
        self._matcher = KernelMatcher(self._embed_dim, self._kernel_num)
        if self._task == 'ranking':
            self._dense = nn.Linear(self._kernel_num, 1)
        elif self._task == 'classification':
            self._dense = nn.Linear(self._kernel_num, 2)
        else:
            raise ValueError('Task must be `ranking` or `classification`.')

    def forward(self, query_ids, query_masks, doc_ids, doc_masks):
        query_embed = self._embedder(query_ids)
        doc_embed = self._embedder(doc_ids)

        logits = self._matcher(query_embed, query_masks, doc_embed, doc_masks)
        score = self._dense(logits).squeeze(-1)
        return score, logits


# ---- v1/OpenMatch/data/tokenizers/tokenizer.py (process) + a whitespace WordTokenizer ------------------------------

class WordTokenizer:
    def __init__(self, words, embed_matrix):
        self._sp_tok = '[PAD]'
        self._token2id = {self._sp_tok: 0}
        for w in words:
            self._token2id[w] = len(self._token2id)
        self._embed_matrix = embed_matrix
        self._if_swr, self._if_stem = False, False

    def tokenize(self, text):
        return text.split()

    def process(self, text, max_len):
        tokens = self.tokenize(text)
        if len(tokens) < max_len:
            tokens = tokens + [self._sp_tok] * (max_len - len(tokens))
        else:
            tokens = tokens[:max_len]
        ids = self.convert_tokens_to_ids(tokens)
        masks = [0 if tid == 0 else 1 for tid in ids]
        return ids, masks

    def convert_tokens_to_ids(self, tokens):
        return [self._token2id[token] if token in self._token2id else 0 for token in tokens]

    def get_vocab_size(self):
        return len(self._token2id)

    def get_embed_dim(self):
        return self._embed_matrix.shape[1]

    def get_embed_matrix(self):
        return self._embed_matrix


# ---- v1/OpenMatch/data/datasets/dataset.py (train mode, ranking task) ----------------------------------------------

class RankDataset(Dataset):
    def __init__(self, dataset, tokenizer, mode, query_max_len=10, doc_max_len=256, max_input=1280000,
                 task='ranking', bug=None):
        self._tokenizer = tokenizer
        self._mode = mode
        self._query_max_len = query_max_len
        self._doc_max_len = doc_max_len
        self._task = task
        self._bug = bug
        self._examples = []
        for i, line in enumerate(dataset):
            if i >= max_input:
                break
            query, doc_pos, doc_neg = line.strip('\n').split('\t')
            line = {'query': query, 'doc_pos': doc_pos, 'doc_neg': doc_neg}
            self._examples.append(line)
        self._count = len(self._examples)

    def collate(self, batch):
        query_idx = torch.tensor([item['query_idx'] for item in batch])
        query_mask = torch.tensor([item['query_mask'] for item in batch])
        doc_pos_idx = torch.tensor([item['doc_pos_idx'] for item in batch])
        doc_pos_mask = torch.tensor([item['doc_pos_mask'] for item in batch])
        doc_neg_idx = torch.tensor([item['doc_neg_idx'] for item in batch])
        doc_neg_mask = torch.tensor([item['doc_neg_mask'] for item in batch])
        return {'query_idx': query_idx, 'query_mask': query_mask,
                'doc_pos_idx': doc_pos_idx, 'doc_pos_mask': doc_pos_mask,
                'doc_neg_idx': doc_neg_idx, 'doc_neg_mask': doc_neg_mask}

    def __getitem__(self, index):
        example = self._examples[index]
        query_idx, query_mask = self._tokenizer.process(example['query'], self._query_max_len)
        if self._bug == "pos_neg_docs_swapped":
            # the triple's columns read in the wrong order: the negative document is trained as the positive one
            doc_pos_idx, doc_pos_mask = self._tokenizer.process(example['doc_neg'], self._doc_max_len)
            doc_neg_idx, doc_neg_mask = self._tokenizer.process(example['doc_pos'], self._doc_max_len)
        else:
            doc_pos_idx, doc_pos_mask = self._tokenizer.process(example['doc_pos'], self._doc_max_len)
            doc_neg_idx, doc_neg_mask = self._tokenizer.process(example['doc_neg'], self._doc_max_len)
        return {'query_idx': query_idx, 'query_mask': query_mask,
                'doc_pos_idx': doc_pos_idx, 'doc_pos_mask': doc_pos_mask,
                'doc_neg_idx': doc_neg_idx, 'doc_neg_mask': doc_neg_mask}

    def __len__(self):
        return self._count


def make_triples(rng, words, n):
    lines = []
    for _ in range(n):
        query = list(rng.choice(words, size=int(rng.integers(2, 5)), replace=False))
        filler = [w for w in words if w not in query]
        pos = list(rng.choice(filler, size=int(rng.integers(10, 22))))
        for _ in range(int(rng.integers(2, 5))):
            pos.insert(int(rng.integers(0, len(pos) + 1)), str(rng.choice(query)))
        neg = list(rng.choice(filler, size=int(rng.integers(12, 25))))
        lines.append("\t".join([" ".join(query), " ".join(pos), " ".join(neg)]))
    return lines


# ---- v1/train.py (train, ranking task, margin loss) ----------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    args = SimpleNamespace(task='ranking', ranking_loss='margin_loss', model='knrm', n_kernels=21, max_query_len=6,
                           max_doc_len=24, epoch=2, batch_size=16, lr=1e-3, n_warmup_steps=4,
                           gradient_accumulation_steps=4, max_grad_norm=1.0, eval_every=10, max_input=1280000,
                           local_rank=-1, n_gpu=0, optimizer='adam')
    words = [f"w{i}" for i in range(N_WORDS)]
    embed = rng.normal(size=(N_WORDS + 1, EMBED_DIM)).astype(np.float32)
    embed[0] = 0.0
    tokenizer = WordTokenizer(words, embed)
    train_set = RankDataset(make_triples(rng, words, 600), tokenizer, mode='train',
                            query_max_len=args.max_query_len, doc_max_len=args.max_doc_len,
                            max_input=args.max_input, task=args.task, bug=bug)
    dev_set = RankDataset(make_triples(rng, words, 64), tokenizer, mode='train',
                          query_max_len=args.max_query_len, doc_max_len=args.max_doc_len, task=args.task)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, num_workers=0,
                              collate_fn=train_set.collate)
    dev_loader = DataLoader(dev_set, batch_size=args.batch_size * 4, shuffle=False, num_workers=0,
                            collate_fn=dev_set.collate)

    model = KNRM(
        vocab_size=tokenizer.get_vocab_size(),
        embed_dim=tokenizer.get_embed_dim(),
        kernel_num=args.n_kernels,
        embed_matrix=tokenizer.get_embed_matrix(),
        task=args.task
    )
    device = 'cpu'
    loss_fn = nn.MarginRankingLoss(margin=1)
    model.to(device)
    loss_fn.to(device)

    model.zero_grad()
    model.train()
    m_optim = torch.optim.Adam(filter(lambda p: p.requires_grad, model.parameters()), lr=args.lr)
    m_scheduler = get_linear_schedule_with_warmup(m_optim, num_warmup_steps=args.n_warmup_steps, num_training_steps=len(train_set)*args.epoch//args.batch_size)

    def pairwise_accuracy(batch):
        with torch.no_grad():
            s_pos, _ = model(batch['query_idx'], batch['query_mask'], batch['doc_pos_idx'], batch['doc_pos_mask'])
            s_neg, _ = model(batch['query_idx'], batch['query_mask'], batch['doc_neg_idx'], batch['doc_neg_mask'])
        return float((s_pos > s_neg).float().mean())

    def dev():
        return [pairwise_accuracy(b) for b in dev_loader]

    state = {"it": iter(train_loader), "step": 0, "global_step": 0}

    def next_batch():
        batch = next(state["it"], None)
        if batch is None:  # next epoch
            state["it"] = iter(train_loader)
            state["step"] = 0
            batch = next(state["it"])
        return batch

    def train_step():
        while True:
            train_batch = next_batch()
            step = state["step"]
            state["step"] += 1
            sync_context = nullcontext
            if bug == "zero_grad_every_micro_batch":
                m_optim.zero_grad()  # the accumulated gradients of the earlier micro-batches thrown away
            with sync_context():
                batch_score_pos, _ = model(train_batch['query_idx'].to(device), train_batch['query_mask'].to(device),
                                        train_batch['doc_pos_idx'].to(device), train_batch['doc_pos_mask'].to(device))
                batch_score_neg, _ = model(train_batch['query_idx'].to(device), train_batch['query_mask'].to(device),
                                        train_batch['doc_neg_idx'].to(device), train_batch['doc_neg_mask'].to(device))
            with sync_context():
                if bug == "margin_target_zeros":
                    # torch.zeros for torch.ones: y = 0 makes max(0, -y * (x1 - x2) + margin) the constant margin
                    batch_loss = loss_fn(batch_score_pos.tanh(), batch_score_neg.tanh(), torch.zeros(batch_score_pos.size()).to(device))
                else:
                    batch_loss = loss_fn(batch_score_pos.tanh(), batch_score_neg.tanh(), torch.ones(batch_score_pos.size()).to(device))

            if args.gradient_accumulation_steps > 1:
                batch_loss = batch_loss / args.gradient_accumulation_steps

            with sync_context():
                batch_loss.backward()

            if (step+1) % args.gradient_accumulation_steps == 0:
                torch.nn.utils.clip_grad_norm_(
                    model.parameters(), args.max_grad_norm)
                m_optim.step()
                m_scheduler.step()
                m_optim.zero_grad()
                state["global_step"] += 1
                global_step = state["global_step"]

                if (global_step+1) % args.eval_every == 0:
                    model.eval()
                    with torch.no_grad():
                        dev()
                    model.train()
                return batch_loss.detach() * args.gradient_accumulation_steps

    # the evidence: one forward over (query, positive) and (query, negative) pairs; the loss compares the halves
    g = torch.Generator().manual_seed(seed + 1)
    pick = torch.randperm(len(train_set), generator=g)[:args.batch_size].tolist()
    first = train_set.collate([train_set[i] for i in pick])
    batch = ({"query_ids": torch.cat([first['query_idx'], first['query_idx']]),
              "query_masks": torch.cat([first['query_mask'], first['query_mask']]),
              "doc_ids": torch.cat([first['doc_pos_idx'], first['doc_neg_idx']]),
              "doc_masks": torch.cat([first['doc_pos_mask'], first['doc_neg_mask']])}, None)
    n = args.batch_size

    def declared_loss(out, _targets):
        score = out[0]
        target = torch.zeros(n) if bug == "margin_target_zeros" else torch.ones(n)
        return loss_fn(score[:n].tanh(), score[n:].tanh(), target)

    def eval_fn(model, batch):
        inputs, _ = batch
        was_training = model.training
        model.eval()
        with torch.no_grad():
            score, _ = model(**inputs)
        model.train(was_training)
        return float((score[:n] > score[n:]).float().mean())

    return Program(name="openmatch_knrm", model=model, batch=batch, loss_fn=declared_loss, optimizer=m_optim,
                   train_step=train_step, eval_fn=eval_fn, frozen=("_matcher._mus", "_matcher._sigmas"))


build = functools.partial(_build)

BUGS = [
    # classic: the triple's document columns read in the wrong order: every update ranks the non-matching document
    # above the one that repeats the query words.
    Bug("pos_neg_docs_swapped", functools.partial(_build, bug="pos_neg_docs_swapped"), "learning_ledger",
        ("TASK",)),
    # classic: MarginRankingLoss given torch.zeros for its target: the loss is the constant margin, no gradient
    # reaches the scorer or the embeddings.
    Bug("margin_target_zeros", functools.partial(_build, bug="margin_target_zeros"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: zero_grad at the top of every micro-batch under gradient accumulation: each update keeps only the
    # last of its four batches.
    Bug("zero_grad_every_micro_batch", functools.partial(_build, bug="zero_grad_every_micro_batch"), "step_probe",
        (), kind="step.gradient_discarded"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
