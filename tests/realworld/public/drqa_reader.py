# ruff: noqa: UP008, UP031, C419, PLR0402, C408, RUF012, RUF034
"""DrQA's Document Reader (Chen et al., ACL 2017): extractive question answering. Paragraph tokens are embedded
(fixed embeddings), joined with an aligned question embedding (``SeqAttnMatch``) and token features (exact match
cased/uncased, term frequency) and encoded by a stacked bidirectional LSTM with its layers concatenated; the question
by another, merged into one vector by self-attention (``LinearSeqAttn``); two bilinear attentions
(``BilinearSeqAttn``) score each paragraph token as the answer's start and end, log-softmax over the unpadded tokens
in training. ``DocReader.update`` adds the two ``nll_loss``es, clips the gradient norm at 10 and steps Adamax;
``train.py`` feeds length-sorted batches in random order (``SortedBatchSampler``), ``validate_unofficial`` decodes the
best span (``decode``: outer product of start and end probabilities, at most ``max_len`` tokens) and scores start,
end and exact match.

Source: https://github.com/facebookresearch/DrQA
Commit: 6d7c1b7087b86cfe9bdf84a279adb58dceada3cd
Files: ``drqa/reader/rnn_reader.py``, ``drqa/reader/layers.py`` (in ``_drqa_layers.py``), ``drqa/reader/model.py`` (``DocReader``:
``init_optimizer``, ``update``, ``reset_parameters``, ``predict``, ``decode``), ``drqa/reader/vector.py``,
``drqa/reader/data.py`` (``ReaderDataset``, ``SortedBatchSampler``), ``drqa/reader/utils.py``
(``build_feature_dict``), ``drqa/reader/config.py`` and ``scripts/reader/train.py`` (defaults, ``train``,
``validate_unofficial``, ``eval_accuracies``)
License: BSD-3-Clause (Copyright (c) 2017-present, Facebook, Inc.; full text in LICENSES/facebookresearch-DrQA.txt)
Domain: question answering, span extraction (BiLSTM reader, start/end pointers)

Kept as written: the layers and the reader's forward (dropout on embeddings and RNN inputs and outputs, the unpadded
RNN path in training and the packed one in eval, the in-place ``masked_fill_`` of padded scores), the feature
vectorization and ``batchify`` (padding masks, targets), ``SortedBatchSampler``, ``update``, ``decode`` and
``eval_accuracies``; the config defaults (LSTM, concatenated layers, ``self_attn`` question merge, qemb, dropout 0.4,
Adamax at its default lr, clipping 10, fixed embeddings, batch 32, ``max_len`` 15).

Deviations from the original:
- SQuAD, GloVe and the CoreNLP/spaCy annotations are not here: synthetic examples made from ``seed``: a paragraph of
  18-30 lower-case words from a 60-word vocabulary, a question ``what follows <key>`` whose key word occurs once in
  the paragraph, the answer the 1-2 words after it (640 training and 64 dev examples); the embeddings are random
  (and fixed, as ``fix_embeddings`` leaves them); ``use_lemma``, ``use_pos`` and ``use_ner`` are off (no
  annotations), so the features are in_question, in_question_uncased and tf. The rule is learnable;
- sizes for 2 CPU cores: embedding 300 -> 32, hidden 128 -> 32, 3 -> 2 layers for paragraph and question;
- today's torch and numpy: padding masks are ``torch.bool`` (``ByteTensor`` masks are refused by ``masked_fill_``),
  ``np.float_`` is ``np.float64``; the word ``Dictionary`` is a plain dict (``<NULL>`` 0, ``<UNK>`` 1); the CUDA,
  parallel and checkpoint paths, ``uniform_weights`` (``question_merge='avg'`` only) and logging are dropped;
- one ``train_step`` is one ``model.update(ex)`` of ``train()``; ``eval_fn`` is ``validate_unofficial`` on the dev
  set returning the exact-match percentage;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from collections import Counter

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.utils.data import Dataset, Sampler

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
import _drqa_layers as layers
from _api import Bug, Program

N_TRAIN, N_DEV, N_WORDS = 640, 64, 60


class Args:
    def __init__(self, **kw):
        self.__dict__.update(kw)


DEFAULTS = dict(  # drqa/reader/config.py and scripts/reader/train.py defaults (sizes as in the docstring)
    model_type="rnn", embedding_dim=32, hidden_size=32, doc_layers=2, question_layers=2, rnn_type="lstm",
    concat_rnn_layers=True, question_merge="self_attn", use_qemb=True, use_in_question=True, use_pos=False,
    use_ner=False, use_lemma=False, use_tf=True, dropout_emb=0.4, dropout_rnn=0.4, dropout_rnn_output=True,
    optimizer="adamax", learning_rate=0.1, grad_clipping=10, weight_decay=0, momentum=0, fix_embeddings=True,
    tune_partial=0, rnn_padding=False, max_len=15, batch_size=32, test_batch_size=128, sort_by_len=True,
)


# drqa/reader/rnn_reader.py
class RnnDocReader(nn.Module):
    RNN_TYPES = {'lstm': nn.LSTM, 'gru': nn.GRU, 'rnn': nn.RNN}

    def __init__(self, args, normalize=True, bug=None):
        super(RnnDocReader, self).__init__()
        self.args = args
        self.embedding = nn.Embedding(args.vocab_size, args.embedding_dim, padding_idx=0)
        if args.use_qemb:
            self.qemb_match = layers.SeqAttnMatch(args.embedding_dim)
        doc_input_size = args.embedding_dim + args.num_features
        if args.use_qemb:
            doc_input_size += args.embedding_dim
        self.doc_rnn = layers.StackedBRNN(
            input_size=doc_input_size, hidden_size=args.hidden_size, num_layers=args.doc_layers,
            dropout_rate=args.dropout_rnn, dropout_output=args.dropout_rnn_output,
            concat_layers=args.concat_rnn_layers, rnn_type=self.RNN_TYPES[args.rnn_type], padding=args.rnn_padding)
        self.question_rnn = layers.StackedBRNN(
            input_size=args.embedding_dim, hidden_size=args.hidden_size, num_layers=args.question_layers,
            dropout_rate=args.dropout_rnn, dropout_output=args.dropout_rnn_output,
            concat_layers=args.concat_rnn_layers, rnn_type=self.RNN_TYPES[args.rnn_type], padding=args.rnn_padding)
        doc_hidden_size = 2 * args.hidden_size
        question_hidden_size = 2 * args.hidden_size
        if args.concat_rnn_layers:
            doc_hidden_size *= args.doc_layers
            question_hidden_size *= args.question_layers
        if args.question_merge == 'self_attn':
            self.self_attn = layers.LinearSeqAttn(question_hidden_size)
        self.start_attn = layers.BilinearSeqAttn(doc_hidden_size, question_hidden_size, normalize=normalize, bug=bug)
        self.end_attn = layers.BilinearSeqAttn(doc_hidden_size, question_hidden_size, normalize=normalize, bug=bug)

    def forward(self, x1, x1_f, x1_mask, x2, x2_mask):
        x1_emb = self.embedding(x1)
        x2_emb = self.embedding(x2)
        if self.args.dropout_emb > 0:
            x1_emb = nn.functional.dropout(x1_emb, p=self.args.dropout_emb, training=self.training)
            x2_emb = nn.functional.dropout(x2_emb, p=self.args.dropout_emb, training=self.training)
        drnn_input = [x1_emb]
        if self.args.use_qemb:
            x2_weighted_emb = self.qemb_match(x1_emb, x2_emb, x2_mask)
            drnn_input.append(x2_weighted_emb)
        if self.args.num_features > 0:
            drnn_input.append(x1_f)
        doc_hiddens = self.doc_rnn(torch.cat(drnn_input, 2), x1_mask)
        question_hiddens = self.question_rnn(x2_emb, x2_mask)
        if self.args.question_merge == 'self_attn':
            q_merge_weights = self.self_attn(question_hiddens, x2_mask)
        question_hidden = layers.weighted_avg(question_hiddens, q_merge_weights)
        start_scores = self.start_attn(doc_hiddens, question_hidden, x1_mask)
        end_scores = self.end_attn(doc_hiddens, question_hidden, x1_mask)
        return start_scores, end_scores


# drqa/reader/model.py
class DocReader:
    def __init__(self, args, word_dict, feature_dict, normalize=True, bug=None):
        self.args = args
        self.word_dict = word_dict
        self.args.vocab_size = len(word_dict)
        self.feature_dict = feature_dict
        self.args.num_features = len(feature_dict)
        self.updates = 0
        self.bug = bug
        self.network = RnnDocReader(args, normalize, bug=bug)

    def init_optimizer(self, state_dict=None):
        if self.args.fix_embeddings:
            for p in self.network.embedding.parameters():
                p.requires_grad = False
        parameters = [p for p in self.network.parameters() if p.requires_grad]
        if self.args.optimizer == 'sgd':
            self.optimizer = optim.SGD(parameters, self.args.learning_rate, momentum=self.args.momentum,
                                       weight_decay=self.args.weight_decay)
        elif self.args.optimizer == 'adamax':
            self.optimizer = optim.Adamax(parameters, weight_decay=self.args.weight_decay)

    def update(self, ex):
        self.network.train()
        inputs = [e if e is None else e for e in ex[:5]]
        target_s = ex[5]
        target_e = ex[6]
        score_s, score_e = self.network(*inputs)
        if self.bug == "end_loss_on_start_target":
            loss = F.nll_loss(score_s, target_s) + F.nll_loss(score_e, target_s)
        else:
            loss = F.nll_loss(score_s, target_s) + F.nll_loss(score_e, target_e)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.network.parameters(), self.args.grad_clipping)
        self.optimizer.step()
        self.updates += 1
        return loss.item(), ex[0].size(0)  # reset_parameters() is a no-op with tune_partial 0

    def predict(self, ex):
        self.network.eval()
        inputs = [e for e in ex[:5]]
        with torch.no_grad():
            score_s, score_e = self.network(*inputs)
        return self.decode(score_s.data.cpu(), score_e.data.cpu(), 1, self.args.max_len)

    @staticmethod
    def decode(score_s, score_e, top_n=1, max_len=None):
        pred_s = []
        pred_e = []
        max_len = max_len or score_s.size(1)
        for i in range(score_s.size(0)):
            scores = torch.ger(score_s[i], score_e[i])
            scores.triu_().tril_(max_len - 1)
            scores = scores.numpy()
            scores_flat = scores.flatten()
            idx_sort = [np.argmax(scores_flat)]
            s_idx, e_idx = np.unravel_index(idx_sort, scores.shape)
            pred_s.append(s_idx)
            pred_e.append(e_idx)
        return pred_s, pred_e


# drqa/reader/vector.py (the lemma, pos and ner branches are off)
def vectorize(ex, model, single_answer=False):
    args = model.args
    word_dict = model.word_dict
    feature_dict = model.feature_dict
    document = torch.LongTensor([word_dict[w] for w in ex['document']])
    question = torch.LongTensor([word_dict[w] for w in ex['question']])
    features = torch.zeros(len(ex['document']), len(feature_dict)) if len(feature_dict) > 0 else None
    if args.use_in_question:
        q_words_cased = {w for w in ex['question']}
        q_words_uncased = {w.lower() for w in ex['question']}
        for i in range(len(ex['document'])):
            if ex['document'][i] in q_words_cased:
                features[i][feature_dict['in_question']] = 1.0
            if ex['document'][i].lower() in q_words_uncased:
                features[i][feature_dict['in_question_uncased']] = 1.0
    if args.use_tf:
        counter = Counter([w.lower() for w in ex['document']])
        l = len(ex['document'])
        for i, w in enumerate(ex['document']):
            features[i][feature_dict['tf']] = counter[w.lower()] * 1.0 / l
    if single_answer:
        start = torch.LongTensor(1).fill_(ex['answers'][0][0])
        end = torch.LongTensor(1).fill_(ex['answers'][0][1])
    else:
        start = [a[0] for a in ex['answers']]
        end = [a[1] for a in ex['answers']]
    return document, features, question, start, end, ex['id']


def batchify(batch):
    ids = [ex[-1] for ex in batch]
    docs = [ex[0] for ex in batch]
    features = [ex[1] for ex in batch]
    questions = [ex[2] for ex in batch]
    max_length = max([d.size(0) for d in docs])
    x1 = torch.LongTensor(len(docs), max_length).zero_()
    x1_mask = torch.ones(len(docs), max_length, dtype=torch.bool)  # (port) ByteTensor(...).fill_(1)
    x1_f = None if features[0] is None else torch.zeros(len(docs), max_length, features[0].size(1))
    for i, d in enumerate(docs):
        x1[i, :d.size(0)].copy_(d)
        x1_mask[i, :d.size(0)].fill_(0)
        if x1_f is not None:
            x1_f[i, :d.size(0)].copy_(features[i])
    max_length = max([q.size(0) for q in questions])
    x2 = torch.LongTensor(len(questions), max_length).zero_()
    x2_mask = torch.ones(len(questions), max_length, dtype=torch.bool)  # (port) ByteTensor(...).fill_(1)
    for i, q in enumerate(questions):
        x2[i, :q.size(0)].copy_(q)
        x2_mask[i, :q.size(0)].fill_(0)
    if torch.is_tensor(batch[0][3]):
        y_s = torch.cat([ex[3] for ex in batch])
        y_e = torch.cat([ex[4] for ex in batch])
    else:
        y_s = [ex[3] for ex in batch]
        y_e = [ex[4] for ex in batch]
    return x1, x1_f, x1_mask, x2, x2_mask, y_s, y_e, ids


# drqa/reader/data.py
class ReaderDataset(Dataset):
    def __init__(self, examples, model, single_answer=False):
        self.model = model
        self.examples = examples
        self.single_answer = single_answer

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, index):
        return vectorize(self.examples[index], self.model, self.single_answer)

    def lengths(self):
        return [(len(ex['document']), len(ex['question'])) for ex in self.examples]


class SortedBatchSampler(Sampler):
    def __init__(self, lengths, batch_size, shuffle=True):
        self.lengths = lengths
        self.batch_size = batch_size
        self.shuffle = shuffle

    def __iter__(self):
        lengths = np.array([(-l[0], -l[1], np.random.random()) for l in self.lengths],
                           dtype=[('l1', np.int_), ('l2', np.int_), ('rand', np.float64)])
        indices = np.argsort(lengths, order=('l1', 'l2', 'rand'))
        batches = [indices[i:i + self.batch_size] for i in range(0, len(indices), self.batch_size)]
        if self.shuffle:
            np.random.shuffle(batches)
        return iter([i for batch in batches for i in batch])

    def __len__(self):
        return len(self.lengths)


# drqa/reader/utils.py
def build_feature_dict(args, examples):
    def _insert(feature):
        if feature not in feature_dict:
            feature_dict[feature] = len(feature_dict)
    feature_dict = {}
    if args.use_in_question:
        _insert('in_question')
        _insert('in_question_uncased')
    if args.use_tf:
        _insert('tf')
    return feature_dict


# scripts/reader/train.py
def validate_unofficial(data_loader, model):
    """The exact-match percentage over the loader (start and end accuracies and logging left out)."""
    em, n = 0, 0
    for ex in data_loader:
        pred_s, pred_e = model.predict(ex)
        target_s, target_e = ex[-3:-1]
        for i in range(len(pred_s)):
            em += int(any([1 for _s, _e in zip(target_s[i], target_e[i]) if _s == pred_s[i] and _e == pred_e[i]]))
            n += 1
    return 100.0 * em / n


def _synthetic_examples(seed, n):
    """(port) ``what follows <key>``: the key word (one of 10) occurs once in the paragraph; the answer is the 1-2
    words after it."""
    rng = np.random.RandomState(seed)
    vocab = ["w%d" % i for i in range(N_WORDS)]
    exs = []
    for j in range(n):
        doc = list(rng.choice(vocab[10:], size=rng.randint(18, 31)))
        k = rng.randint(0, len(doc) - 3)
        doc[k] = vocab[rng.randint(10)]
        span = int(rng.randint(1, 3))
        exs.append({"id": j, "document": doc, "question": ["what", "follows", doc[k]], "answers": [(k + 1, k + span)]})
    return exs


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    args = Args(**DEFAULTS)
    exs = _synthetic_examples(seed, N_TRAIN + N_DEV)
    train_exs, dev_exs = exs[:N_TRAIN], exs[N_TRAIN:]
    word_dict = {"<NULL>": 0, "<UNK>": 1}
    for w in ["what", "follows"] + ["w%d" % i for i in range(N_WORDS)]:
        word_dict[w] = len(word_dict)
    feature_dict = build_feature_dict(args, train_exs)
    model = DocReader(args, word_dict, feature_dict, bug=bug)
    model.init_optimizer()
    train_dataset = ReaderDataset(train_exs, model, single_answer=True)
    train_sampler = SortedBatchSampler(train_dataset.lengths(), args.batch_size, shuffle=True)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler,
                                               num_workers=0, collate_fn=batchify)
    dev_dataset = ReaderDataset(dev_exs, model, single_answer=False)
    dev_sampler = SortedBatchSampler(dev_dataset.lengths(), args.test_batch_size, shuffle=False)
    dev_loader = torch.utils.data.DataLoader(dev_dataset, batch_size=args.test_batch_size, sampler=dev_sampler,
                                             num_workers=0, collate_fn=batchify)
    st = {"it": iter(train_loader)}

    def train_step():  # one model.update(ex) of train()
        try:
            ex = next(st["it"])
        except StopIteration:
            st["it"] = iter(train_loader)
            ex = next(st["it"])
        return model.update(ex)[0]

    def eval_fn(network, _batch=None):
        was = network.training
        out = validate_unofficial(dev_loader, model)
        network.train(was)
        return out

    first = batchify([train_dataset[i] for i in range(args.batch_size)])

    def loss_fn(scores, targets):
        return F.nll_loss(scores[0], targets[0]) + F.nll_loss(scores[1], targets[1])

    return Program(name="drqa_reader", model=model.network, batch=(tuple(first[:5]), tuple(first[5:7])),
                   loss_fn=loss_fn, optimizer=model.optimizer, train_step=train_step, eval_fn=eval_fn,
                   frozen=("embedding.weight",), loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: BilinearSeqAttn's masked_fill_ of the padded positions left out, so the start and end distributions
    # spread over padding tokens (and predictions can land there).
    Bug("span_scores_not_masked", functools.partial(_build, bug="span_scores_not_masked"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic copy-paste slip in update(): the end scores are scored against the start targets.
    Bug("end_loss_on_start_target", functools.partial(_build, bug="end_loss_on_start_target"), "learning_ledger",
        ("TASK",)),
]
