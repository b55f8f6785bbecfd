# ruff: noqa: PLR0402, UP008, RUF012, RUF059, PLC0206, SIM118
"""NRMS news recommendation from yusanshi/news-recommendation: a news encoder (word embedding, dropout, multi-head
self-attention with exp-normalized scores, dropout, additive attention) applied to every candidate and every
clicked news title, a user encoder (multi-head self-attention + additive attention over the clicked news vectors),
dot-product click scores over 1 + K candidates (the clicked one first), cross-entropy with target 0, Adam.

Source: https://github.com/yusanshi/news-recommendation
Commit: 8323a4f8ca30dc91eab715b55b069cf1f981728d
Files: ``src/train.py`` (``train``), ``src/config.py`` (``BaseConfig``, ``NRMSConfig``), ``src/dataset.py``
(``BaseDataset``), ``src/model/NRMS/`` (``__init__.py``, ``news_encoder.py``, ``user_encoder.py``),
``src/model/general/attention/additive.py``, ``src/model/general/attention/multihead_self.py``,
``src/model/general/click_predictor/dot_product.py``
License: MIT (Copyright (c) 2020 yusanshi; full text in LICENSES/yusanshi-news-recommendation.txt)
Domain: recommendation, news click prediction (NRMS: multi-head self-attentive news and user encoders, 1 + K
negative-sampled candidates, softmax cross-entropy)

Kept as written: ``NRMS``, ``NewsEncoder`` (``padding_idx=0``, ``F.dropout(..., training=self.training)`` twice),
``UserEncoder``, ``AdditiveAttention`` (the tensorboard hooks unused as in NRMS), ``ScaledDotProductAttention`` /
``MultiHeadSelfAttention`` (xavier init, ``exp`` scores normalized with 1e-8, no mask), ``DotProductClickPredictor``,
``BaseDataset.__getitem__`` (candidates as given, clicked history cut to ``num_clicked_news_a_user`` and left-padded
with the all-zero title), train.py's loop body (``next(dataloader)`` with a fresh shuffled DataLoader when it runs
out, ``drop_last``, ``y = zeros``, ``CrossEntropyLoss``, zero_grad / backward / step), ``negative_sampling_ratio``
2, ``dropout_probability`` 0.2.

Deviations from the original:
- MIND and ``data_preprocess.py``'s tsv files are not here: news titles and behaviors are synthetic, made from
  ``seed`` (12 topics, each with its own 30 title words, drawn 70% of the time, over a shared vocabulary of 30 common words; every user
  prefers two topics; a behavior row holds the user's clicked history, one clicked candidate of a preferred topic
  first and K = 2 unclicked ones of other topics, as the preprocessing writes them). ``BaseDataset`` reads these rows
  from lists instead of pandas tables; the news dict maps ids to ``{"title": tensor}`` as ``news2dict`` does.
- sizes for 2 CPU cores: ``batch_size`` 128 -> 32, ``num_clicked_news_a_user`` 50 -> 10, ``num_words_title`` 20 ->
  10, ``word_embedding_dim`` 300 -> 60, ``num_attention_heads`` 15 -> 6, ``query_vector_dim`` 200 -> 40,
  ``num_words`` from the synthetic vocabulary; ``learning_rate`` 1e-4 -> 3e-3 so that 30 steps show learning;
  ``num_workers`` 0 (the DataLoader shuffles with a seeded generator); no pretrained word embedding.
- the loop over batches is not run as a whole: ``train_step`` is one iteration of it, returning the loss;
  tensorboard, tqdm, checkpoints and early stopping are dropped; ``eval_fn`` is the training loss on held-out
  behavior rows under ``eval()`` (``evaluate.py``'s AUC/MRR/nDCG over MIND's impressions are not ported).
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
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

device = torch.device("cpu")
N_TOPICS, TOPIC_WORDS, COMMON_WORDS = 12, 30, 30


class config:  # (port) BaseConfig + NRMSConfig, sizes as listed in the docstring
    dataset_attributes = {"news": ['title'], "record": []}
    batch_size = 32  # (port) 128
    learning_rate = 0.003  # (port) 0.0001
    num_workers = 0
    num_clicked_news_a_user = 10  # (port) 50
    num_words_title = 10  # (port) 20
    negative_sampling_ratio = 2  # K
    dropout_probability = 0.2
    num_words = 1 + N_TOPICS * TOPIC_WORDS + COMMON_WORDS
    word_embedding_dim = 60  # (port) 300
    query_vector_dim = 40  # (port) 200
    num_attention_heads = 6  # (port) 15


# src/model/general/attention/additive.py
class AdditiveAttention(torch.nn.Module):
    """
    A general additive attention module.
    Originally for NAML.
    """
    def __init__(self,
                 query_vector_dim,
                 candidate_vector_dim,
                 writer=None,
                 tag=None,
                 names=None):
        super(AdditiveAttention, self).__init__()
        self.linear = nn.Linear(candidate_vector_dim, query_vector_dim)
        self.attention_query_vector = nn.Parameter(
            torch.empty(query_vector_dim).uniform_(-0.1, 0.1))
        # For tensorboard
        self.writer = writer
        self.tag = tag
        self.names = names
        self.local_step = 1

    def forward(self, candidate_vector):
        """
        Args:
            candidate_vector: batch_size, candidate_size, candidate_vector_dim
        Returns:
            (shape) batch_size, candidate_vector_dim
        """
        # batch_size, candidate_size, query_vector_dim
        temp = torch.tanh(self.linear(candidate_vector))
        # batch_size, candidate_size
        candidate_weights = F.softmax(torch.matmul(
            temp, self.attention_query_vector),
                                      dim=1)
        # batch_size, candidate_vector_dim
        target = torch.bmm(candidate_weights.unsqueeze(dim=1),
                           candidate_vector).squeeze(dim=1)
        return target


# src/model/general/attention/multihead_self.py
class ScaledDotProductAttention(nn.Module):
    def __init__(self, d_k):
        super(ScaledDotProductAttention, self).__init__()
        self.d_k = d_k

    def forward(self, Q, K, V, attn_mask=None):
        scores = torch.matmul(Q, K.transpose(-1, -2)) / np.sqrt(self.d_k)
        scores = torch.exp(scores)
        if attn_mask is not None:
            scores = scores * attn_mask
        attn = scores / (torch.sum(scores, dim=-1, keepdim=True) + 1e-8)

        context = torch.matmul(attn, V)
        return context, attn


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, d_model, num_attention_heads):
        super(MultiHeadSelfAttention, self).__init__()
        self.d_model = d_model
        self.num_attention_heads = num_attention_heads
        assert d_model % num_attention_heads == 0
        self.d_k = d_model // num_attention_heads
        self.d_v = d_model // num_attention_heads

        self.W_Q = nn.Linear(d_model, d_model)
        self.W_K = nn.Linear(d_model, d_model)
        self.W_V = nn.Linear(d_model, d_model)

        self._initialize_weights()

    def _initialize_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight, gain=1)

    def forward(self, Q, K=None, V=None, length=None):
        if K is None:
            K = Q
        if V is None:
            V = Q
        batch_size = Q.size(0)

        q_s = self.W_Q(Q).view(batch_size, -1, self.num_attention_heads,
                               self.d_k).transpose(1, 2)
        k_s = self.W_K(K).view(batch_size, -1, self.num_attention_heads,
                               self.d_k).transpose(1, 2)
        v_s = self.W_V(V).view(batch_size, -1, self.num_attention_heads,
                               self.d_v).transpose(1, 2)

        if length is not None:
            maxlen = Q.size(1)
            attn_mask = torch.arange(maxlen).to(device).expand(
                batch_size, maxlen) < length.to(device).view(-1, 1)
            attn_mask = attn_mask.unsqueeze(1).expand(batch_size, maxlen,
                                                      maxlen)
            attn_mask = attn_mask.unsqueeze(1).repeat(1,
                                                      self.num_attention_heads,
                                                      1, 1)
        else:
            attn_mask = None

        context, attn = ScaledDotProductAttention(self.d_k)(q_s, k_s, v_s,
                                                            attn_mask)
        context = context.transpose(1, 2).contiguous().view(
            batch_size, -1, self.num_attention_heads * self.d_v)
        return context


# src/model/NRMS/news_encoder.py
class NewsEncoder(torch.nn.Module):
    def __init__(self, config, pretrained_word_embedding, bug=None):
        super(NewsEncoder, self).__init__()
        self.config = config
        self.bug = bug
        if pretrained_word_embedding is None:
            self.word_embedding = nn.Embedding(config.num_words,
                                               config.word_embedding_dim,
                                               padding_idx=0)
        else:
            self.word_embedding = nn.Embedding.from_pretrained(
                pretrained_word_embedding, freeze=False, padding_idx=0)

        self.multihead_self_attention = MultiHeadSelfAttention(
            config.word_embedding_dim, config.num_attention_heads)
        self.additive_attention = AdditiveAttention(config.query_vector_dim,
                                                    config.word_embedding_dim)

    def forward(self, news):
        """
        Args:
            news:
                {
                    "title": batch_size * num_words_title
                }
        Returns:
            (shape) batch_size, word_embedding_dim
        """
        if self.bug == "dropout_without_training_flag":
            news_vector = F.dropout(self.word_embedding(news["title"].to(device)),
                                    p=self.config.dropout_probability)
        else:
            # batch_size, num_words_title, word_embedding_dim
            news_vector = F.dropout(self.word_embedding(news["title"].to(device)),
                                    p=self.config.dropout_probability,
                                    training=self.training)
        # batch_size, num_words_title, word_embedding_dim
        multihead_news_vector = self.multihead_self_attention(news_vector)
        if self.bug == "dropout_without_training_flag":
            multihead_news_vector = F.dropout(multihead_news_vector,
                                              p=self.config.dropout_probability)
        else:
            multihead_news_vector = F.dropout(multihead_news_vector,
                                              p=self.config.dropout_probability,
                                              training=self.training)
        # batch_size, word_embedding_dim
        final_news_vector = self.additive_attention(multihead_news_vector)
        return final_news_vector


# src/model/NRMS/user_encoder.py
class UserEncoder(torch.nn.Module):
    def __init__(self, config):
        super(UserEncoder, self).__init__()
        self.config = config
        self.multihead_self_attention = MultiHeadSelfAttention(
            config.word_embedding_dim, config.num_attention_heads)
        self.additive_attention = AdditiveAttention(config.query_vector_dim,
                                                    config.word_embedding_dim)

    def forward(self, user_vector):
        """
        Args:
            user_vector: batch_size, num_clicked_news_a_user, word_embedding_dim
        Returns:
            (shape) batch_size, word_embedding_dim
        """
        # batch_size, num_clicked_news_a_user, word_embedding_dim
        multihead_user_vector = self.multihead_self_attention(user_vector)
        # batch_size, word_embedding_dim
        final_user_vector = self.additive_attention(multihead_user_vector)
        return final_user_vector


# src/model/general/click_predictor/dot_product.py
class DotProductClickPredictor(torch.nn.Module):
    def __init__(self):
        super(DotProductClickPredictor, self).__init__()

    def forward(self, candidate_news_vector, user_vector):
        # batch_size, candidate_size
        probability = torch.bmm(candidate_news_vector,
                                user_vector.unsqueeze(dim=-1)).squeeze(dim=-1)
        return probability


# src/model/NRMS/__init__.py
class NRMS(torch.nn.Module):
    """
    NRMS network.
    Input 1 + K candidate news and a list of user clicked news, produce the click probability.
    """
    def __init__(self, config, pretrained_word_embedding=None, bug=None):
        super(NRMS, self).__init__()
        self.config = config
        self.news_encoder = NewsEncoder(config, pretrained_word_embedding, bug=bug)
        self.user_encoder = UserEncoder(config)
        self.click_predictor = DotProductClickPredictor()

    def forward(self, candidate_news, clicked_news):
        # batch_size, 1 + K, word_embedding_dim
        candidate_news_vector = torch.stack(
            [self.news_encoder(x) for x in candidate_news], dim=1)
        # batch_size, num_clicked_news_a_user, word_embedding_dim
        clicked_news_vector = torch.stack(
            [self.news_encoder(x) for x in clicked_news], dim=1)
        # batch_size, word_embedding_dim
        user_vector = self.user_encoder(clicked_news_vector)
        # batch_size, 1 + K
        click_probability = self.click_predictor(candidate_news_vector,
                                                 user_vector)
        return click_probability


# src/dataset.py
class BaseDataset(Dataset):
    def __init__(self, behaviors_parsed, news2dict, bug=None):
        super(BaseDataset, self).__init__()
        self.behaviors_parsed = behaviors_parsed  # (port) rows instead of a pandas table
        self.news2dict = news2dict
        self.bug = bug
        padding_all = {
            'title': [0] * config.num_words_title,
        }
        for key in padding_all.keys():
            padding_all[key] = torch.tensor(padding_all[key])

        self.padding = {
            k: v
            for k, v in padding_all.items()
            if k in config.dataset_attributes['news']
        }

    def __len__(self):
        return len(self.behaviors_parsed)

    def __getitem__(self, idx):
        item = {}
        row = self.behaviors_parsed[idx]
        item["clicked"] = list(map(int, row["clicked"].split()))
        item["candidate_news"] = [
            self.news2dict[x] for x in row["candidate_news"].split()
        ]
        if self.bug == "candidates_shuffled":
            random.shuffle(item["candidate_news"])
        item["clicked_news"] = [
            self.news2dict[x]
            for x in row["clicked_news"].split()[:config.num_clicked_news_a_user]
        ]
        repeated_times = config.num_clicked_news_a_user - \
            len(item["clicked_news"])
        assert repeated_times >= 0
        item["clicked_news"] = [self.padding
                                ] * repeated_times + item["clicked_news"]

        return item


# ----------------------------------------------------------------------------------------------- (port) data
def _synthetic(rng, n_news, n_rows):
    topic_of = rng.integers(0, N_TOPICS, size=n_news)
    lengths = rng.integers(5, config.num_words_title + 1, size=n_news)
    own = 1 + topic_of[:, None] * TOPIC_WORDS + rng.integers(0, TOPIC_WORDS, size=(n_news, config.num_words_title))
    common = 1 + N_TOPICS * TOPIC_WORDS + rng.integers(0, COMMON_WORDS, size=(n_news, config.num_words_title))
    words = np.where(rng.random((n_news, config.num_words_title)) < 0.7, own, common)
    words[np.arange(config.num_words_title)[None, :] >= lengths[:, None]] = 0
    news2dict = {f'N{i}': {'title': torch.tensor(words[i])} for i in range(n_news)}
    by_topic = {t: [f'N{i}' for i in np.flatnonzero(topic_of == t)] for t in range(N_TOPICS)}
    rows = []
    for _ in range(n_rows):
        liked = rng.choice(N_TOPICS, size=2, replace=False)
        others = [t for t in range(N_TOPICS) if t not in liked]
        n_hist = int(rng.integers(3, config.num_clicked_news_a_user + 4))
        hist = [str(rng.choice(by_topic[int(rng.choice(liked))])) for _ in range(n_hist)]
        pos = str(rng.choice(by_topic[int(rng.choice(liked))]))
        negs = [str(rng.choice(by_topic[int(rng.choice(others))])) for _ in range(config.negative_sampling_ratio)]
        rows.append({"clicked_news": ' '.join(hist), "candidate_news": ' '.join([pos] + negs),
                     "clicked": ' '.join(['1'] + ['0'] * config.negative_sampling_ratio)})
    return news2dict, rows


def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    rng = np.random.default_rng(seed)
    news2dict, rows = _synthetic(rng, 600, 1200)
    train_rows, val_rows = rows[:1024], rows[1024:]

    model = NRMS(config, None, bug=bug).to(device)

    dataset = BaseDataset(train_rows, news2dict, bug=bug)
    gen = torch.Generator().manual_seed(seed)

    def make_loader():
        return DataLoader(dataset,
                          batch_size=config.batch_size,
                          shuffle=True,
                          num_workers=config.num_workers,
                          drop_last=True,
                          generator=gen)

    st = {"dataloader": iter(make_loader())}
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(),
                                 lr=config.learning_rate)

    def train_step():
        try:
            minibatch = next(st["dataloader"])
        except StopIteration:
            st["dataloader"] = iter(make_loader())
            minibatch = next(st["dataloader"])

        y_pred = model(minibatch["candidate_news"],
                       minibatch["clicked_news"])

        y = torch.zeros(len(y_pred)).long().to(device)
        loss = criterion(y_pred, y)

        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    val_loader = DataLoader(BaseDataset(val_rows, news2dict), batch_size=config.batch_size, shuffle=False)

    def eval_fn(model, _batch=None):
        was = model.training
        model.eval()
        losses = []
        with torch.no_grad():
            for minibatch in val_loader:
                y_pred = model(minibatch["candidate_news"], minibatch["clicked_news"])
                losses.append(criterion(y_pred, torch.zeros(len(y_pred)).long()).item())
        model.train(was)
        return float(np.mean(losses))

    first = next(iter(DataLoader(BaseDataset(train_rows[:config.batch_size], news2dict),
                                 batch_size=config.batch_size, shuffle=False)))
    batch = ((first["candidate_news"], first["clicked_news"]), torch.zeros(config.batch_size).long())

    return Program(name="newsrec_nrms", model=model, batch=batch, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the candidates shuffled in __getitem__ while the target stays 0: the clicked news is no longer the first
    # candidate (classic: the label's position lost).
    Bug("candidates_shuffled", functools.partial(_build, bug="candidates_shuffled"), "learning_ledger", ("TASK",)),
    # F.dropout without training=self.training: dropout stays on at evaluation (classic).
    Bug("dropout_without_training_flag", functools.partial(_build, bug="dropout_without_training_flag"),
        "six_claims", ("EVALUATION",)),
    # optimizer.zero_grad() left out of the loop: gradients pile up across batches (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
