"""BiLSTM-CRF sequence tagger (embedding, packed bidirectional LSTM, a CRF whose inner linear layer maps features to
tag scores plus START/STOP, forward-algorithm partition function minus gold path score, Viterbi decoding) trained by
the package's ``train`` (``python -m bi_lstm_crf``): padded id tensors (pad 0) with a mask from ``sentences.gt(0)``,
``model.zero_grad()``, ``model.loss``, Adam (lr 1e-3, weight_decay 0), validation loss after each epoch.

Source: https://github.com/jidasheng/bi-lstm-crf
Commit: 2009d03215391e7867f8b91503894134770bd6bd
Files: bi_lstm_crf/app/train.py, bi_lstm_crf/model/model.py, bi_lstm_crf/model/crf.py,
bi_lstm_crf/app/preprocessing/preprocess.py, bi_lstm_crf/app/utils.py
License: MIT (Copyright (c) 2019 Dasheng Ji)
Domain: sequence tagging (BiLSTM-CRF, named-entity style BIO tags)

Deviations from the original:
- sizes: embedding_dim 100 -> 16, hidden_dim 128 -> 32, batch_size 1000 -> 32, max_seq_len 100 -> 16 (one RNN
  layer, lstm, lr 1e-3, weight_decay 0, val_split/test_split 0.2 as the defaults);
- data: the corpus directory (``vocab.json``, ``tags.json``, ``dataset.txt``) is replaced by a synthetic corpus made
  from ``seed``: sentences of 3-16 tokens over a 40-token vocabulary, tags O/B/I where a token of ids 1-8 opens an
  entity (B), tokens of ids 9-16 right after an entity continue it (I), everything else is O; the ``Preprocessor``
  is kept for ``sent_to_vector``/``tags_to_vector``/the split of ``load_dataset`` but built from these in-memory
  lists (no json files, no npz cache), with the same PAD 0 / OOV last convention and tags padded with 0;
- tqdm bars, the loss csv and model saving are left out; ``device`` is the CPU;
- the declared model is ``TaggerLoss(model)``, a module whose forward is ``model.loss(xs, tags)`` (the tagger's own
  ``forward`` is Viterbi decoding), with the batch ``((xs, tags), tags)``; the loop trains ``model`` itself;
- one ``train_step`` is one iteration of the epoch's ``for bi, (xb, yb) in enumerate(bar)`` loop (``model.train()``
  at each epoch start, ``__eval_model`` on the validation split at each epoch end); ``eval_fn`` is ``__eval_model``
  on the validation loader.
"""
# ruff: noqa: UP008, UP031, RUF059, RUF007, PLR0402, F841  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- bi_lstm_crf/model/crf.py ------------------------------------------------------------------------------------

def log_sum_exp(x):
    """calculate log(sum(exp(x))) = max(x) + log(sum(exp(x - max(x))))
    """
    max_score = x.max(-1)[0]
    return max_score + (x - max_score.unsqueeze(-1)).exp().sum(-1).log()


IMPOSSIBLE = -1e4


class CRF(nn.Module):
    """General CRF module.
    The CRF module contain a inner Linear Layer which transform the input from features space to tag space.

    :param in_features: number of features for the input
    :param num_tag: number of tags. DO NOT include START, STOP tags, they are included internal.
    """

    def __init__(self, in_features, num_tags, bug=None):
        super(CRF, self).__init__()
        self.bug = bug

        self.num_tags = num_tags + 2
        self.start_idx = self.num_tags - 2
        self.stop_idx = self.num_tags - 1

        self.fc = nn.Linear(in_features, self.num_tags)

        # transition factor, Tij mean transition from j to i
        self.transitions = nn.Parameter(torch.randn(self.num_tags, self.num_tags), requires_grad=True)
        self.transitions.data[self.start_idx, :] = IMPOSSIBLE
        self.transitions.data[:, self.stop_idx] = IMPOSSIBLE

    def forward(self, features, masks):
        """decode tags

        :param features: [B, L, C], batch of unary scores
        :param masks: [B, L] masks
        :return: (best_score, best_paths)
            best_score: [B]
            best_paths: [B, L]
        """
        features = self.fc(features)
        return self.__viterbi_decode(features, masks[:, :features.size(1)].float())

    def loss(self, features, ys, masks):
        """negative log likelihood loss
        B: batch size, L: sequence length, D: dimension

        :param features: [B, L, D]
        :param ys: tags, [B, L]
        :param masks: masks for padding, [B, L]
        :return: loss
        """
        features = self.fc(features)

        L = features.size(1)
        masks_ = masks[:, :L].float()

        forward_score = self.__forward_algorithm(features, masks_)
        gold_score = self.__score_sentence(features, ys[:, :L].long(), masks_)
        loss = (forward_score - gold_score).mean()
        return loss

    def __score_sentence(self, features, tags, masks):
        """Gives the score of a provided tag sequence

        :param features: [B, L, C]
        :param tags: [B, L]
        :param masks: [B, L]
        :return: [B] score in the log space
        """
        B, L, C = features.shape

        # emission score
        emit_scores = features.gather(dim=2, index=tags.unsqueeze(-1)).squeeze(-1)

        # transition score
        start_tag = torch.full((B, 1), self.start_idx, dtype=torch.long, device=tags.device)
        tags = torch.cat([start_tag, tags], dim=1)  # [B, L+1]
        trans_scores = self.transitions[tags[:, 1:], tags[:, :-1]]

        # last transition score to STOP tag
        if self.bug == "stop_transition_off_by_one":
            last_tag = tags.gather(dim=1, index=(masks.sum(1).long() - 1).unsqueeze(1)).squeeze(1)  # [B]
        else:
            last_tag = tags.gather(dim=1, index=masks.sum(1).long().unsqueeze(1)).squeeze(1)  # [B]
        last_score = self.transitions[self.stop_idx, last_tag]

        score = ((trans_scores + emit_scores) * masks).sum(1) + last_score
        return score

    def __viterbi_decode(self, features, masks):
        """decode to tags using viterbi algorithm

        :param features: [B, L, C], batch of unary scores
        :param masks: [B, L] masks
        :return: (best_score, best_paths)
            best_score: [B]
            best_paths: [B, L]
        """
        B, L, C = features.shape

        bps = torch.zeros(B, L, C, dtype=torch.long, device=features.device)  # back pointers

        # Initialize the viterbi variables in log space
        max_score = torch.full((B, C), IMPOSSIBLE, device=features.device)  # [B, C]
        max_score[:, self.start_idx] = 0

        for t in range(L):
            mask_t = masks[:, t].unsqueeze(1)  # [B, 1]
            emit_score_t = features[:, t]  # [B, C]

            # [B, 1, C] + [C, C]
            acc_score_t = max_score.unsqueeze(1) + self.transitions  # [B, C, C]
            acc_score_t, bps[:, t, :] = acc_score_t.max(dim=-1)
            acc_score_t += emit_score_t
            max_score = acc_score_t * mask_t + max_score * (1 - mask_t)  # max_score or acc_score_t

        # Transition to STOP_TAG
        max_score += self.transitions[self.stop_idx]
        best_score, best_tag = max_score.max(dim=-1)

        # Follow the back pointers to decode the best path.
        best_paths = []
        bps = bps.cpu().numpy()
        for b in range(B):
            best_tag_b = best_tag[b].item()
            seq_len = int(masks[b, :].sum().item())

            best_path = [best_tag_b]
            for bps_t in reversed(bps[b, :seq_len]):
                best_tag_b = bps_t[best_tag_b]
                best_path.append(best_tag_b)
            # drop the last tag and reverse the left
            best_paths.append(best_path[-2::-1])

        return best_score, best_paths

    def __forward_algorithm(self, features, masks):
        """calculate the partition function with forward algorithm.
        TRICK: log_sum_exp([x1, x2, x3, x4, ...]) = log_sum_exp([log_sum_exp([x1, x2]), log_sum_exp([x3, x4]), ...])

        :param features: features. [B, L, C]
        :param masks: [B, L] masks
        :return:    [B], score in the log space
        """
        B, L, C = features.shape

        scores = torch.full((B, C), IMPOSSIBLE, device=features.device)  # [B, C]
        scores[:, self.start_idx] = 0.
        trans = self.transitions.unsqueeze(0)  # [1, C, C]

        # Iterate through the sentence
        for t in range(L):
            emit_score_t = features[:, t].unsqueeze(2)  # [B, C, 1]
            score_t = scores.unsqueeze(1) + trans + emit_score_t  # [B, 1, C] + [1, C, C] + [B, C, 1] => [B, C, C]
            score_t = log_sum_exp(score_t)  # [B, C]

            mask_t = masks[:, t].unsqueeze(1)  # [B, 1]
            scores = score_t * mask_t + scores * (1 - mask_t)
        scores = log_sum_exp(scores + self.transitions[self.stop_idx])
        return scores


# ---- bi_lstm_crf/model/model.py ----------------------------------------------------------------------------------

class BiRnnCrf(nn.Module):
    def __init__(self, vocab_size, tagset_size, embedding_dim, hidden_dim, num_rnn_layers=1, rnn="lstm", bug=None):
        super(BiRnnCrf, self).__init__()
        self.bug = bug
        self.embedding_dim = embedding_dim
        self.hidden_dim = hidden_dim
        self.vocab_size = vocab_size
        self.tagset_size = tagset_size

        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        RNN = nn.LSTM if rnn == "lstm" else nn.GRU
        self.rnn = RNN(embedding_dim, hidden_dim // 2, num_layers=num_rnn_layers,
                       bidirectional=True, batch_first=True)
        self.crf = CRF(hidden_dim, self.tagset_size, bug=bug)

    def __build_features(self, sentences):
        if self.bug == "padding_in_mask":
            masks = sentences.ge(0)
        else:
            masks = sentences.gt(0)
        embeds = self.embedding(sentences.long())

        seq_length = masks.sum(1)
        sorted_seq_length, perm_idx = seq_length.sort(descending=True)
        embeds = embeds[perm_idx, :]

        pack_sequence = pack_padded_sequence(embeds, lengths=sorted_seq_length, batch_first=True)
        packed_output, _ = self.rnn(pack_sequence)
        lstm_out, _ = pad_packed_sequence(packed_output, batch_first=True)
        _, unperm_idx = perm_idx.sort()
        if self.bug != "lstm_out_left_sorted":
            lstm_out = lstm_out[unperm_idx, :]

        return lstm_out, masks

    def loss(self, xs, tags):
        features, masks = self.__build_features(xs)
        loss = self.crf.loss(features, tags, masks=masks)
        return loss

    def forward(self, xs):
        # Get the emission scores from the BiLSTM
        features, masks = self.__build_features(xs)
        scores, tag_seq = self.crf(features, masks)
        return scores, tag_seq


# ---- bi_lstm_crf/app/preprocessing (in memory) --------------------------------------------------------------------

PAD = "<PAD>"
OOV = "<OOV>"


class Preprocessor:
    """``Preprocessor`` built from in-memory vocabulary and tag lists (deviation: no json files, no npz cache)."""

    def __init__(self, vocab, tags):
        self.vocab, self.vocab_dict = list(vocab), {w: idx + 1 for idx, w in enumerate(vocab)}  # offset=1
        self.tags, self.tags_dict = list(tags), {w: idx for idx, w in enumerate(tags)}

        self.PAD_IDX = 0
        self.OOV_IDX = len(self.vocab)
        self.__adjust_vocab()

    def __adjust_vocab(self):
        self.vocab.insert(0, PAD)
        self.vocab_dict[PAD] = 0

        self.vocab.append(OOV)
        self.vocab_dict[OOV] = len(self.vocab) - 1

    def load_dataset(self, corpus, val_split, test_split, max_seq_len):
        xs, ys = [], []
        for sentence, tags in corpus:
            xs.append(self.sent_to_vector(sentence, max_seq_len=max_seq_len))
            ys.append(self.tags_to_vector(tags, max_seq_len=max_seq_len))
        xs, ys = np.asarray(xs), np.asarray(ys)

        xs, ys = map(
            torch.tensor, (xs, ys)
        )

        # split the dataset
        total_count = len(xs)
        assert total_count == len(ys)
        val_count = int(total_count * val_split)
        test_count = int(total_count * test_split)
        train_count = total_count - val_count - test_count
        assert train_count > 0 and val_count > 0

        indices = np.cumsum([0, train_count, val_count, test_count])
        datasets = [(xs[s:e], ys[s:e]) for s, e in zip(indices[:-1], indices[1:])]
        return datasets

    def sent_to_vector(self, sentence, max_seq_len=0):
        max_seq_len = max_seq_len if max_seq_len > 0 else len(sentence)
        vec = [self.vocab_dict.get(c, self.OOV_IDX) for c in sentence[:max_seq_len]]
        return vec + [self.PAD_IDX] * (max_seq_len - len(vec))

    def tags_to_vector(self, tags, max_seq_len=0):
        max_seq_len = max_seq_len if max_seq_len > 0 else len(tags)
        vec = [self.tags_dict[c] for c in tags[:max_seq_len]]
        return vec + [0] * (max_seq_len - len(vec))


def make_corpus(seed, n=600, vocab_size=40):
    """Synthetic tagged sentences (replaces dataset.txt): ids 1-8 open an entity, ids 9-16 continue it."""
    rng = np.random.RandomState(seed)
    corpus = []
    for _ in range(n):
        words = ["w%d" % w for w in rng.randint(1, vocab_size + 1, size=rng.randint(3, 17))]
        tags, inside = [], False
        for w in words:
            i = int(w[1:])
            if i <= 8:
                tags.append("B")
                inside = True
            elif inside and i <= 16:
                tags.append("I")
            else:
                tags.append("O")
                inside = False
        corpus.append((words, tags))
    return corpus


# ---- bi_lstm_crf/app/train.py ----------------------------------------------------------------------------------

class TaggerLoss(nn.Module):
    """``model.loss(xs, tags)`` as a module (deviation: the tagger's forward decodes; its training objective is the
    ``loss`` method, so the declared model is this view of the same tagger)."""

    def __init__(self, tagger):
        super().__init__()
        self.tagger = tagger

    def forward(self, xs, tags):
        return self.tagger.loss(xs, tags)


class Args:
    num_epoch = 1000
    lr = 1e-3
    weight_decay = 0.
    batch_size = 32
    max_seq_len = 16
    val_split = 0.2
    test_split = 0.2
    embedding_dim = 16
    hidden_dim = 32
    num_rnn_layers = 1
    rnn_type = "lstm"


def __eval_model(model, device, dataloader, desc):
    model.eval()
    with torch.no_grad():
        # eval
        losses, nums = zip(*[
            (model.loss(xb.to(device), yb.to(device)), len(xb))
            for xb, yb in dataloader])
        return np.sum(np.multiply(losses, nums)) / np.sum(nums)


_eval_model = __eval_model


def build_model(args, processor, load=True, verbose=False, bug=None):
    model = BiRnnCrf(len(processor.vocab), len(processor.tags),
                     embedding_dim=args.embedding_dim, hidden_dim=args.hidden_dim, num_rnn_layers=args.num_rnn_layers,
                     bug=bug)
    return model


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = Args()
    vocab = ["w%d" % i for i in range(1, 41)]
    preprocessor = Preprocessor(vocab, ["O", "B", "I"])
    model = build_model(args, preprocessor, load=False, verbose=True, bug=bug)

    # datasets
    (x_train, y_train), (x_val, y_val), (x_test, y_test) = preprocessor.load_dataset(
        make_corpus(seed), args.val_split, args.test_split, max_seq_len=args.max_seq_len)
    train_dl = DataLoader(TensorDataset(x_train, y_train), batch_size=args.batch_size, shuffle=True)
    valid_dl = DataLoader(TensorDataset(x_val, y_val), batch_size=args.batch_size * 2)

    optimizer = optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)

    device = torch.device("cpu")
    model.to(device)

    def epochs():
        val_loss = 0
        for epoch in range(args.num_epoch):
            # train
            model.train()
            for bi, (xb, yb) in enumerate(train_dl):
                model.zero_grad()

                loss = model.loss(xb.to(device), yb.to(device))
                loss.backward()
                optimizer.step()
                yield loss.detach()

            # evaluation
            val_loss = _eval_model(model, device, dataloader=valid_dl, desc="eval").item()

    loop = epochs()

    def train_step():
        return next(loop)

    def eval_fn(model, batch):
        tagger = model.tagger if isinstance(model, TaggerLoss) else model
        return float(_eval_model(tagger, device, dataloader=valid_dl, desc="eval"))

    first = (x_train[:args.batch_size], y_train[:args.batch_size])
    return Program(name="bilstmcrf_tagger", model=TaggerLoss(model), batch=(first, first[1]),
                   loss_fn=lambda loss, _tags: loss, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_dl)


build = functools.partial(_build)

BUGS = [
    # the mask built with ge(0) instead of gt(0) (classic; the mask's purpose, ignoring the padding in the loss, as
    # the author explains in https://github.com/jidasheng/bi-lstm-crf/issues/8): padded positions are scored as O tags
    # by the forward algorithm and the gold path.
    Bug("padding_in_mask", functools.partial(_build, bug="padding_in_mask"), "learning_ledger", ("OBJECTIVE",)),
    # the LSTM output left in length-sorted order (classic: the unpermute dropped): features of one sentence are
    # scored against the tags of another.
    Bug("lstm_out_left_sorted", functools.partial(_build, bug="lstm_out_left_sorted"), "learning_ledger", ("TASK",)),
    # the gold path's transition to STOP taken from the tag before the last one (classic off-by-one: the START column
    # prepended to ``tags`` forgotten in the gather index): the gold score is not the score of the gold path.
    Bug("stop_transition_off_by_one", functools.partial(_build, bug="stop_transition_off_by_one"),
        "learning_ledger", ("OBJECTIVE",)),
]
