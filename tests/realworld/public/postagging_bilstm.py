# ruff: noqa: PLR0402, RUF059
"""Part-of-speech tagging with a two-layer bidirectional LSTM over word embeddings, from Ben Trevett's
pytorch-pos-tagging (tutorial 1).

Source: https://github.com/bentrevett/pytorch-pos-tagging
Commit: cab8ae73b51ef2901cd88457f25b8f1d9cbd98a7
Files: ``1_bilstm.ipynb``
License: MIT (Copyright (c) 2019 Ben Trevett; full text in LICENSES/bentrevett-pytorch-pos-tagging.txt)
Domain: sequence tagging, part of speech (UDPOS-shaped: universal dependency tags, sequence-first batches)

Kept as written: ``BiLSTMPOSTagger`` (embedding with ``padding_idx``, dropout on the embeddings, two-layer
bidirectional LSTM with inter-layer dropout, dropout then a linear layer on every output), the hyperparameters
that are not sizes (``N_LAYERS`` 2, bidirectional, ``DROPOUT`` 0.25), ``init_weights`` (every parameter
``normal_(0, 0.1)``), the pretrained vectors copied into the embedding and the pad row zeroed,
``optim.Adam(model.parameters())`` at its defaults, ``nn.CrossEntropyLoss(ignore_index = TAG_PAD_IDX)``, ``train``'s
loop body (zero_grad, predictions ``[sent len, batch, tags]`` viewed to ``[-1, tags]`` against the tags viewed to
``[-1]``, backward, step) and ``evaluate``'s loss under ``model.eval()`` / ``no_grad``; the fields as torchtext
builds them (``TEXT`` lower-cased with ``<unk>`` 0 and ``<pad>`` 1, ``min_freq`` 2; ``UD_TAGS`` with no unk, so
``<pad>`` is tag 0; both vocabularies ordered by frequency), ``BucketIterator``'s batches padded to the longest
sentence, sequence first.

Deviations from the original:
- UDPOS and GloVe are not here: the sentences are made from ``seed`` by a small grammar over UD tags (DET ADJ*
  NOUN VERB ... with ADP phrases, adverbs and punctuation), many words belonging to two tags (a noun or a verb by
  their place in the sentence), 800 training and 160 validation sentences; the "GloVe" vectors are a random table
  (``unk_init = torch.Tensor.normal_`` for every word, as for words GloVe lacks). The PTB tags field is dropped
  (the tutorial trains on ``udtags`` only).
- sizes for 2 CPU cores: ``EMBEDDING_DIM`` 100 -> 32, ``HIDDEN_DIM`` 128 -> 32, ``BATCH_SIZE`` 128 -> 64.
- ``BucketIterator`` is written out: shuffled batches of sentences of similar length (sorted within pools of
  ``100 * batch_size`` as torchtext does, here the whole set), padded with ``<pad>``.
- one ``train_step`` is one batch of ``train`` (the accuracy bookkeeping is dropped; the next epoch starts when the
  batches run out); ``eval_fn`` is ``evaluate``'s loss on the validation batches; checkpoints and prints dropped.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import collections
import functools
import pathlib
import random
import sys

import torch
import torch.nn as nn
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program


class BiLSTMPOSTagger(nn.Module):
    def __init__(self,
                 input_dim,
                 embedding_dim,
                 hidden_dim,
                 output_dim,
                 n_layers,
                 bidirectional,
                 dropout,
                 pad_idx):

        super().__init__()

        self.embedding = nn.Embedding(input_dim, embedding_dim, padding_idx = pad_idx)

        self.lstm = nn.LSTM(embedding_dim,
                            hidden_dim,
                            num_layers = n_layers,
                            bidirectional = bidirectional,
                            dropout = dropout if n_layers > 1 else 0)

        self.fc = nn.Linear(hidden_dim * 2 if bidirectional else hidden_dim, output_dim)

        self.dropout = nn.Dropout(dropout)

    def forward(self, text):

        #text = [sent len, batch size]

        #pass text through embedding layer
        embedded = self.dropout(self.embedding(text))

        #embedded = [sent len, batch size, emb dim]

        #pass embeddings into LSTM
        outputs, (hidden, cell) = self.lstm(embedded)

        #outputs holds the backward and forward hidden states in the final layer
        #hidden and cell are the backward and forward hidden and cell states at the final time-step

        #output = [sent len, batch size, hid dim * n directions]
        #hidden/cell = [n layers * n directions, batch size, hid dim]

        #we use our outputs to make a prediction of what the tag should be
        predictions = self.fc(self.dropout(outputs))

        #predictions = [sent len, batch size, output dim]

        return predictions


def init_weights(m):
    for name, param in m.named_parameters():
        nn.init.normal_(param.data, mean = 0, std = 0.1)


# ----------------------------------------------------------------------------------------------- (port) data
LEXICON = {
    "DET": ["the", "a", "this", "every", "some"],
    "ADJ": ["old", "red", "quick", "quiet", "large", "green"],
    "NOUN": ["dog", "house", "river", "teacher", "city", "book", "light", "run", "plant", "watch"],
    "VERB": ["sees", "finds", "likes", "builds", "light", "run", "plant", "watch", "reads"],
    "ADP": ["in", "near", "under", "with"],
    "ADV": ["slowly", "often", "today"],
    "PRON": ["she", "he", "they"],
    "PUNCT": [".", "!"],
}


def synthetic_sentence(rng):
    """A UD-tagged sentence from a small grammar; 'light', 'run', 'plant', 'watch' are NOUN or VERB by place."""
    def noun_phrase():
        if rng.random() < 0.2:
            return [("PRON", rng.choice(LEXICON["PRON"]))]
        np_ = [("DET", rng.choice(LEXICON["DET"]))]
        np_ += [("ADJ", rng.choice(LEXICON["ADJ"])) for _ in range(rng.randint(0, 2))]
        return np_ + [("NOUN", rng.choice(LEXICON["NOUN"]))]

    sent = noun_phrase() + [("VERB", rng.choice(LEXICON["VERB"]))] + noun_phrase()
    if rng.random() < 0.5:
        sent += [("ADP", rng.choice(LEXICON["ADP"]))] + noun_phrase()
    if rng.random() < 0.3:
        sent.insert(len(sent), ("ADV", rng.choice(LEXICON["ADV"])))
    sent.append(("PUNCT", rng.choice(LEXICON["PUNCT"])))
    words = [w.capitalize() if i == 0 else w for i, (_, w) in enumerate(sent)]
    return words, [t for t, _ in sent]


def _build(seed, bug=None):
    random.seed(seed)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    train_data = [synthetic_sentence(rng) for _ in range(800)]
    valid_data = [synthetic_sentence(rng) for _ in range(160)]

    # TEXT = data.Field(lower = True); UD_TAGS = data.Field(unk_token = None); build_vocab(min_freq = MIN_FREQ)
    MIN_FREQ = 2
    word_freqs = collections.Counter(w.lower() for words, _ in train_data for w in words)
    tag_freqs = collections.Counter(t for _, tags in train_data for t in tags)
    text_itos = ["<unk>", "<pad>"] + [w for w, c in sorted(word_freqs.items(), key=lambda kv: (-kv[1], kv[0]))
                                      if c >= MIN_FREQ]
    tag_itos = ["<pad>"] + [t for t, _ in sorted(tag_freqs.items(), key=lambda kv: (-kv[1], kv[0]))]
    text_stoi = collections.defaultdict(int, {w: i for i, w in enumerate(text_itos)})
    tag_stoi = {t: i for i, t in enumerate(tag_itos)}

    BATCH_SIZE = 64  # (port) 128
    gen = torch.Generator().manual_seed(seed)

    def pad_batch(examples):
        max_len = max(len(words) for words, _ in examples)
        text = torch.full((max_len, len(examples)), text_stoi["<pad>"], dtype=torch.long)
        tags = torch.full((max_len, len(examples)), tag_stoi["<pad>"], dtype=torch.long)
        for j, (words, ts) in enumerate(examples):
            text[:len(words), j] = torch.tensor([text_stoi[w.lower()] for w in words])
            tags[:len(ts), j] = torch.tensor([tag_stoi[t] for t in ts])
        return text, tags

    def bucket_batches(dataset, shuffle):
        # BucketIterator: sort by length inside the pool, cut into batches, shuffle the batches
        order = torch.randperm(len(dataset), generator=gen).tolist() if shuffle else list(range(len(dataset)))
        order = sorted(order, key=lambda i: len(dataset[i][0]))
        batches = [order[i:i + BATCH_SIZE] for i in range(0, len(order), BATCH_SIZE)]
        if shuffle:
            batches = [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]
        return [pad_batch([dataset[i] for i in b]) for b in batches]

    valid_iterator = bucket_batches(valid_data, shuffle=False)

    INPUT_DIM = len(text_itos)
    EMBEDDING_DIM = 32  # (port) 100
    HIDDEN_DIM = 32  # (port) 128
    OUTPUT_DIM = len(tag_itos)
    N_LAYERS = 2
    BIDIRECTIONAL = True
    DROPOUT = 0.25
    PAD_IDX = text_stoi["<pad>"]

    model = BiLSTMPOSTagger(INPUT_DIM,
                            EMBEDDING_DIM,
                            HIDDEN_DIM,
                            OUTPUT_DIM,
                            N_LAYERS,
                            BIDIRECTIONAL,
                            DROPOUT,
                            PAD_IDX)
    model.apply(init_weights)
    pretrained_embeddings = torch.Tensor(INPUT_DIM, EMBEDDING_DIM).normal_()  # (port) TEXT.vocab.vectors
    model.embedding.weight.data.copy_(pretrained_embeddings)
    model.embedding.weight.data[PAD_IDX] = torch.zeros(EMBEDDING_DIM)

    optimizer = optim.Adam(model.parameters())
    TAG_PAD_IDX = tag_stoi["<pad>"]
    if bug == "pad_tags_not_ignored":
        criterion = nn.CrossEntropyLoss()
    else:
        criterion = nn.CrossEntropyLoss(ignore_index = TAG_PAD_IDX)

    st = {"batches": []}

    def train_step():
        if not st["batches"]:
            st["batches"] = bucket_batches(train_data, shuffle=True)
        text, tags = st["batches"].pop(0)
        model.train()

        optimizer.zero_grad()

        #text = [sent len, batch size]

        predictions = model(text)

        #predictions = [sent len, batch size, output dim]
        #tags = [sent len, batch size]

        predictions = predictions.view(-1, predictions.shape[-1])
        if bug == "tags_flattened_batch_first":
            tags = tags.t().reshape(-1)
        else:
            tags = tags.view(-1)

        #predictions = [sent len * batch size, output dim]
        #tags = [sent len * batch size]

        loss = criterion(predictions, tags)

        loss.backward()

        optimizer.step()

        return loss.item()

    def evaluate(model, _batch=None):
        epoch_loss = 0
        if bug != "evaluate_in_train_mode":
            model.eval()
        with torch.no_grad():
            for text, tags in valid_iterator:
                predictions = model(text)
                predictions = predictions.view(-1, predictions.shape[-1])
                tags = tags.view(-1)
                loss = criterion(predictions, tags)
                epoch_loss += loss.item()
        model.train()
        return epoch_loss / len(valid_iterator)

    def loss_fn(predictions, tags):
        return criterion(predictions.view(-1, predictions.shape[-1]), tags.view(-1))

    batch = pad_batch(train_data[:BATCH_SIZE])
    return Program(name="postagging_bilstm", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=evaluate, batch_axis=1)


build = functools.partial(_build, bug=None)

BUGS = [
    # nn.CrossEntropyLoss() without ignore_index: the <pad> positions are scored as tags (classic).
    Bug("pad_tags_not_ignored", functools.partial(_build, bug="pad_tags_not_ignored"), "learning_ledger",
        ("OBJECTIVE",)),
    # the [sent len, batch] tags flattened batch-first (tags.t().reshape(-1)) against sequence-first predictions
    # (classic layout slip): each prediction scored against another word's tag.
    Bug("tags_flattened_batch_first", functools.partial(_build, bug="tags_flattened_batch_first"),
        "learning_ledger", ("TASK",)),
    # evaluate() without model.eval(): dropout on at validation (classic).
    Bug("evaluate_in_train_mode", functools.partial(_build, bug="evaluate_in_train_mode"), "six_claims",
        ("EVALUATION",)),
]
