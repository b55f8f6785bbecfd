"""Document classification with a Hierarchical Attention Network from Renovamen's Text-Classification: words embedded
and run through a bidirectional GRU over each sentence (packed by ``words_per_sentence``), word attention
(``u_w(tanh(W_w h))`` softmaxed over the words) pooling each sentence, a bidirectional GRU over the sentences of each
document (packed by ``sentences_per_document``), sentence attention pooling the document, dropout and a linear
classifier; ``nn.CrossEntropyLoss``, Adam over the parameters that require grad, and the learning rate multiplied by
``lr_decay`` (0.3) after every epoch, as ``train.py`` / ``trainer/trainer.py`` run it with ``configs/ag_news/han.yaml``.

Source: https://github.com/Renovamen/Text-Classification
Commit: 4a4aa4001c402ed4371ebaabe1393b27794e5992
Files: train.py, trainer/trainer.py, models/__init__.py, models/HAN/han.py, models/HAN/sent_encoder.py,
  models/HAN/word_encoder.py, datasets/dataloader.py, datasets/preprocess/document.py, utils/common.py
  (adjust_learning_rate), test.py, configs/ag_news/han.yaml
License: MIT (Copyright (c) 2020-2021 Xiaohan Zou; full text in LICENSES/Renovamen-Text-Classification.txt)
Domain: text classification (hierarchical attention over sentences and words)

Deviations from the original:
- sizes: sentence_limit 15 -> 5, word_limit 20 -> 8, emb_size 256 -> 16, word/sentence RNN size 50 -> 16,
  word/sentence attention size 100 -> 16, batch size 64 -> 16 (dropout 0.3, lr 0.001, lr_decay 0.3, grad_clip
  null, one RNN layer each, as configured);
- ``emb_pretrain: True`` loads GloVe (a download): the embeddings are initialized at random instead (the
  config's own ``emb_pretrain: False`` path, ``set_embeddings(None)``);
- data: AG News (CSV files, NLTK sentence/word tokenizers) is replaced by 1024 training and 32 test documents made
  from ``seed``: 2-5 sentences of 3-8 words, each word drawn from the 4-word vocabulary of the document's topic
  (4 topics, as AG News has 4 classes) with probability 0.8, else from a shared 40-word filler vocabulary; the word map (``<pad>`` 0, words seen at
  least ``min_word_count`` 5 times, ``<unk>``), ``encode_and_pad`` and ``DocDataset.__getitem__`` are as written;
  the dataset holds the encoded lists in memory (the original ``torch.load``s them from ``TRAIN_data.pth.tar``);
- ``.to(device)`` calls are dropped (CPU); ``clip_gradient`` and ``adjust_learning_rate`` (utils/common.py) are
  defined inside ``build`` without their prints, and ``clip_gradient`` is given the trainer's ``grad_clip`` (the
  original passes an undefined name on that never-taken branch, as grad_clip is null); ``DataLoader(num_workers=4, pin_memory=True)`` runs without workers or
  pinning; the tensorboard writer, the ``AverageMeter``s, printing and checkpoint saving are left out;
- one ``train_step`` is one batch of ``Trainer.train`` (the HAN branch); the epoch loop's ``model.train()`` at the
  start of an epoch and ``adjust_learning_rate(optimizer, lr_decay)`` at its end run when the loader is exhausted;
  ``eval_fn`` is ``test.py``'s accuracy on a given batch (``model.eval()``, ``no_grad``); the self-check runs 60
  steps (``SELF_CHECK_STEPS``: at lr 0.001 the loss's fall over 30 steps is within the batches' noise);
- the classes' long parameter docstrings are shortened; the ``bug`` switches select the variants in ``BUGS``; with
  ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP006, UP035, C417, C408, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import sys
from collections import Counter
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SELF_CHECK_STEPS = 60


class Config:
    """configs/ag_news/han.yaml (sizes shrunk, see the module docstring)."""
    model_name = 'han'
    dataset = 'ag_news'
    sentence_limit = 5
    word_limit = 8
    min_word_count = 5
    emb_pretrain = False
    emb_size = 16
    fine_tune_word_embeddings = True
    word_rnn_size = 16
    sentence_rnn_size = 16
    word_rnn_layers = 1
    sentence_rnn_layers = 1
    word_att_size = 16
    sentence_att_size = 16
    dropout = 0.3
    start_epoch = 0
    batch_size = 16
    lr = 0.001
    lr_decay = 0.3
    num_epochs = 5
    grad_clip = None


CLASSES = ['World', 'Sports', 'Business', 'Sci / Tech']  # datasets/info/ag_news.py


# ---- models/HAN/word_encoder.py ----------------------------------------------------------------------------------

class WordEncoder(nn.Module):
    """
    Word-level attention module
    """
    def __init__(
        self,
        vocab_size: int,
        embeddings: torch.Tensor,
        emb_size: int,
        fine_tune: bool,
        word_rnn_size: int,
        word_rnn_layers: int,
        word_att_size: int,
        dropout: float
    ) -> None:
        super(WordEncoder, self).__init__()

        # word embedding layer
        self.embeddings = nn.Embedding(vocab_size, emb_size)
        self.set_embeddings(embeddings, fine_tune)

        # word-level RNN (bidirectional GRU)
        self.word_rnn = nn.GRU(
            emb_size, word_rnn_size,
            num_layers = word_rnn_layers,
            bidirectional = True,
            dropout = (0 if word_rnn_layers == 1 else dropout),
            batch_first = True
        )

        # word-level attention network
        self.W_w = nn.Linear(2 * word_rnn_size, word_att_size)

        # word context vector u_w
        self.u_w = nn.Linear(word_att_size, 1, bias=False)

        self.dropout = nn.Dropout(dropout)
        self.tanh = nn.Tanh()
        self.softmax = nn.Softmax(dim=1)

    def set_embeddings(self, embeddings: torch.Tensor, fine_tune: bool = True) -> None:
        """
        Set weights for embedding layer
        """
        if embeddings is None:
            # initialize embedding layer with the uniform distribution
            self.embeddings.weight.data.uniform_(-0.1, 0.1)
        else:
            # initialize embedding layer with pre-trained embeddings
            self.embeddings.weight = nn.Parameter(embeddings, requires_grad = fine_tune)

    def forward(
        self, sentences: torch.Tensor, words_per_sentence: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        # word embedding, apply dropout
        sentences = self.dropout(self.embeddings(sentences)) # (n_sentences, word_pad_len, emb_size)

        # pack sequences (remove word-pads, SENTENCES -> WORDS)
        packed_words = pack_padded_sequence(
            sentences,
            lengths = words_per_sentence.tolist(),
            batch_first = True,
            enforce_sorted = False
        )  # a PackedSequence object, where 'data' is the flattened words (n_words, word_emb)

        # run through word-level RNN (PyTorch automatically applies it on the PackedSequence)
        packed_words, _ = self.word_rnn(packed_words) # a PackedSequence object, where 'data' is the output of the RNN (n_words, 2 * word_rnn_size)

        # unpack sequences (re-pad with 0s, WORDS -> SENTENCES)
        # we do unpacking here because attention weights have to be computed only over words in the same sentence
        sentences, _ = pad_packed_sequence(packed_words, batch_first=True)  # (n_sentences, max(words_per_sentence), 2 * word_rnn_size)

        # word-level attention
        # eq.5: u_it = tanh(W_w h_it + b_w)
        u_it = self.W_w(sentences)  # (n_sentences, max(words_per_sentence), att_size)
        u_it = self.tanh(u_it)  # (n_sentences, max(words_per_sentence), att_size)

        # eq.6: alpha_it = softmax(u_it u_w)
        word_alphas = self.u_w(u_it).squeeze(2)  # (n_sentences, max(words_per_sentence))
        word_alphas = self.softmax(word_alphas)  # (n_sentences, max(words_per_sentence))

        # form sentence vectors
        # eq.7: s_i = \sum_t α_it h_it
        sentences = sentences * word_alphas.unsqueeze(2)  # (n_sentences, max(words_per_sentence), 2 * word_rnn_size)
        sentences = sentences.sum(dim=1)  # (n_sentences, 2 * word_rnn_size)

        return sentences, word_alphas


# ---- models/HAN/sent_encoder.py ----------------------------------------------------------------------------------

class SentenceEncoder(nn.Module):
    """
    Sentence-level attention module
    """
    def __init__(
        self,
        vocab_size: int,
        embeddings: torch.Tensor,
        emb_size: int,
        fine_tune: bool,
        word_rnn_size: int,
        sentence_rnn_size: int,
        word_rnn_layers: int,
        sentence_rnn_layers: int,
        word_att_size: int,
        sentence_att_size: int,
        dropout: float,
        bug = None
    ) -> None:
        super(SentenceEncoder, self).__init__()

        # word encoder
        self.word_encoder = WordEncoder(
            vocab_size = vocab_size,
            embeddings = embeddings,
            emb_size = emb_size,
            fine_tune = fine_tune,
            word_rnn_size = word_rnn_size,
            word_rnn_layers = word_rnn_layers,
            word_att_size = word_att_size,
            dropout = dropout
        )

        # sentence-level RNN (bidirectional GRU)
        self.sentence_rnn = nn.GRU(
            2 * word_rnn_size, sentence_rnn_size,
            num_layers = sentence_rnn_layers,
            bidirectional = True,
            dropout = (0 if sentence_rnn_layers == 1 else dropout),
            batch_first = True
        )

        # sentence-level attention network
        self.W_s = nn.Linear(2 * sentence_rnn_size, sentence_att_size)

        # sentence context vector u_s to take dot-product with
        self.u_s = nn.Linear(sentence_att_size, 1, bias=False)  # this performs a dot product with the linear layer's 1D parameter vector, which is the sentence context vector

        # dropout
        self.dropout = nn.Dropout(dropout)
        self.tanh = nn.Tanh()
        if bug == "sentence_softmax_over_documents":
            # the sentence weights normalized over the documents of the batch (dim 0) instead of the sentences
            self.softmax = nn.Softmax(dim=0)
        else:
            self.softmax = nn.Softmax(dim=1)

    def forward(
        self,
        documents: torch.Tensor,
        sentences_per_document: torch.Tensor,
        words_per_sentence: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # pack sequences (remove word-pads, DOCUMENTS -> SENTENCES)
        packed_sentences = pack_padded_sequence(
            documents,
            lengths = sentences_per_document.tolist(),
            batch_first = True,
            enforce_sorted = False
        )  # a PackedSequence object, where 'data' is the flattened sentences (n_sentences, word_pad_len)

        # re-arrange sentence lengths in the same way (DOCUMENTS -> SENTENCES)
        packed_words_per_sentence = pack_padded_sequence(
            words_per_sentence,
            lengths = sentences_per_document.tolist(),
            batch_first = True,
            enforce_sorted = False
        )  # a PackedSequence object, where 'data' is the flattened sentence lengths (n_sentences)

        # word encoder, get sentence vectors
        sentences, word_alphas = self.word_encoder(
            packed_sentences.data,
            packed_words_per_sentence.data
        )  # (n_sentences, 2 * word_rnn_size), (n_sentences, max(words_per_sentence))
        sentences = self.dropout(sentences)

        # run through sentence-level RNN (PyTorch automatically applies it on the PackedSequence)
        packed_sentences, _ = self.sentence_rnn(PackedSequence(
            data = sentences,
            batch_sizes = packed_sentences.batch_sizes,
            sorted_indices = packed_sentences.sorted_indices,
            unsorted_indices = packed_sentences.unsorted_indices
        ))  # a PackedSequence object, where 'data' is the output of the RNN (n_sentences, 2 * sentence_rnn_size)

        # unpack sequences (re-pad with 0s, SENTENCES -> DOCUMENTS)
        # we do unpacking here because attention weights have to be computed only over sentences in the same document
        documents, _ = pad_packed_sequence(packed_sentences, batch_first=True)  # (n_documents, max(sentences_per_document), 2 * sentence_rnn_size)

        # sentence-level attention
        # eq.8: u_i = tanh(W_s h_i + b_s)
        u_i = self.W_s(documents)  # (n_documents, max(sentences_per_document), att_size)
        u_i = self.tanh(u_i)  # (n_documents, max(sentences_per_document), att_size)

        # eq.9: alpha_i = softmax(u_i u_s)
        sent_alphas = self.u_s(u_i).squeeze(2)  # (n_documents, max(sentences_per_document))
        sent_alphas = self.softmax(sent_alphas)  # (n_documents, max(sentences_per_document))

        # form document vectors
        # eq.10: v = \sum_i α_i h_i
        documents = documents * sent_alphas.unsqueeze(2)  # (n_documents, max(sentences_per_document), 2 * sentence_rnn_size)
        documents = documents.sum(dim=1)  # (n_documents, 2 * sentence_rnn_size)

        # also re-arrange word_alphas (SENTENCES -> DOCUMENTS)
        word_alphas, _ = pad_packed_sequence(PackedSequence(
            data = word_alphas,
            batch_sizes = packed_sentences.batch_sizes,
            sorted_indices = packed_sentences.sorted_indices,
            unsorted_indices = packed_sentences.unsorted_indices
        ), batch_first = True)  # (n_documents, max(sentences_per_document), max(words_per_sentence))

        return documents, word_alphas, sent_alphas


# ---- models/HAN/han.py -------------------------------------------------------------------------------------------

class HAN(nn.Module):
    """
    Implementation of Hierarchial Attention Network (HAN) proposed in paper [1].
    """
    def __init__(
        self,
        n_classes: int,
        vocab_size: int,
        embeddings: torch.Tensor,
        emb_size: int,
        fine_tune: bool,
        word_rnn_size: int,
        sentence_rnn_size: int,
        word_rnn_layers: int,
        sentence_rnn_layers: int,
        word_att_size: int,
        sentence_att_size: int,
        dropout: float = 0.5,
        bug = None
    ) -> None:
        super(HAN, self).__init__()

        # sentence encoder
        self.sentence_encoder = SentenceEncoder(
            vocab_size, embeddings, emb_size, fine_tune,
            word_rnn_size, sentence_rnn_size,
            word_rnn_layers, sentence_rnn_layers,
            word_att_size, sentence_att_size,
            dropout, bug = bug
        )

        # classifier
        self.fc = nn.Linear(2 * sentence_rnn_size, n_classes)

        self.dropout = nn.Dropout(dropout)
        self.bug = bug

    def forward(
        self,
        documents: torch.Tensor,
        sentences_per_document: torch.Tensor,
        words_per_sentence: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # sentence encoder, get document vectors
        document_embeddings, word_alphas, sentence_alphas = self.sentence_encoder(
            documents,
            sentences_per_document,
            words_per_sentence
        )  # (n_documents, 2 * sentence_rnn_size), (n_documents, max(sentences_per_document), max(words_per_sentence)), (n_documents, max(sentences_per_document))

        # classify
        # eq.11: p = softmax(W_c v + b_c)
        scores = self.fc(self.dropout(document_embeddings))  # (n_documents, n_classes)
        if self.bug == "softmax_before_cross_entropy":
            # eq.11's softmax written into the model while the loss stays nn.CrossEntropyLoss
            scores = F.softmax(scores, dim=1)

        return scores, word_alphas, sentence_alphas


# ---- datasets/preprocess/document.py, datasets/dataloader.py -----------------------------------------------------

def encode_and_pad(
    input_docs: list, word_map: Dict[str, int], sentence_limit: int, word_limit: int
) -> Tuple[list, list, list]:
    """
    Encode sentences, and pad them to fit word_limit.
    """
    encoded_docs = list(
        map(lambda doc: list(
            map(lambda s: list(
                map(lambda w: word_map.get(w, word_map['<unk>']), s)
            ) + [0] * (word_limit - len(s)), doc)
        ) + [[0] * word_limit] * (sentence_limit - len(doc)), input_docs)
    )
    sentences_per_document = list(map(lambda doc: len(doc), input_docs))
    words_per_sentence = list(
        map(lambda doc: list(
            map(lambda s: len(s), doc)
        ) + [0] * (sentence_limit - len(doc)), input_docs)
    )
    return encoded_docs, sentences_per_document, words_per_sentence


def build_word_map(word_counter, min_word_count):
    # create word map (run_prepro)
    word_map = dict()
    word_map['<pad>'] = 0
    for word, count in word_counter.items():
        if count >= min_word_count:
            word_map[word] = len(word_map)
    word_map['<unk>'] = len(word_map)
    return word_map


class DocDataset(Dataset):
    """
    A PyTorch Dataset class to be used in a PyTorch DataLoader to create batches
    (for document classification).
    """
    def __init__(self, data) -> None:
        self.data = data

    def __getitem__(self, i: int) -> Tuple[torch.LongTensor, torch.LongTensor, torch.LongTensor]:
        return torch.LongTensor(self.data['docs'][i]), \
               torch.LongTensor([self.data['sentences_per_document'][i]]), \
               torch.LongTensor(self.data['words_per_sentence'][i]), \
               torch.LongTensor([self.data['labels'][i]])

    def __len__(self) -> int:
        return len(self.data['labels'])


FILLERS = [f"w{i}" for i in range(40)]
TOPIC_WORDS = [[f"t{c}_{i}" for i in range(4)] for c in range(len(CLASSES))]


def make_docs(rng, n, config):
    """Documents as lists of tokenized sentences (what read_csv returns), truncated to the limits, and labels."""
    docs, labels, counter = [], [], Counter()
    for _ in range(n):
        label = rng.randrange(len(CLASSES))
        doc = []
        for _ in range(rng.randint(2, 5)):
            words = [rng.choice(TOPIC_WORDS[label]) if rng.random() < 0.8 else rng.choice(FILLERS)
                     for _ in range(rng.randint(3, 8))]
            doc.append(words[:config.word_limit])
            counter.update(words)
        docs.append(doc[:config.sentence_limit])
        labels.append(label)
    return docs, labels, counter


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    config = Config()

    train_docs, train_labels, word_counter = make_docs(rng, 1024, config)
    word_map = build_word_map(word_counter, config.min_word_count)
    docs, spd, wps = encode_and_pad(train_docs, word_map, config.sentence_limit, config.word_limit)
    train_data = {'docs': docs, 'labels': train_labels, 'sentences_per_document': spd, 'words_per_sentence': wps}
    test_docs, test_labels, _ = make_docs(rng, 32, config)
    docs, spd, wps = encode_and_pad(test_docs, word_map, config.sentence_limit, config.word_limit)
    test_data = {'docs': docs, 'labels': test_labels, 'sentences_per_document': spd, 'words_per_sentence': wps}

    # load_data(config, 'train', True)
    train_loader = DataLoader(
        DocDataset(train_data),
        batch_size = config.batch_size,
        shuffle = True,
    )
    vocab_size = len(word_map)
    n_classes = len(CLASSES)
    embeddings = None
    emb_size = config.emb_size

    # models.make(...)
    model = HAN(
        n_classes = n_classes,
        vocab_size = vocab_size,
        embeddings = embeddings,
        emb_size = emb_size,
        fine_tune = config.fine_tune_word_embeddings,
        word_rnn_size = config.word_rnn_size,
        sentence_rnn_size = config.sentence_rnn_size,
        word_rnn_layers = config.word_rnn_layers,
        sentence_rnn_layers = config.sentence_rnn_layers,
        word_att_size = config.word_att_size,
        sentence_att_size = config.sentence_att_size,
        dropout = config.dropout,
        bug = bug
    )

    optimizer = optim.Adam(
        params = filter(lambda p: p.requires_grad, model.parameters()),
        lr = config.lr
    )

    # loss functions
    loss_function = nn.CrossEntropyLoss()

    grad_clip = config.grad_clip
    lr_decay = config.lr_decay
    state = {"it": None}

    def adjust_learning_rate(optimizer: optim.Optimizer, scale_factor: float) -> None:
        """
        Shrink learning rate by a specified factor.
        """
        for param_group in optimizer.param_groups:
            param_group['lr'] = param_group['lr'] * scale_factor

    def clip_gradient(optimizer: optim.Optimizer, grad_clip: float) -> None:
        """
        Clip gradients computed during backpropagation to avoid explosion of gradients.
        """
        for group in optimizer.param_groups:
            for param in group['params']:
                if param.grad is not None:
                    param.grad.data.clamp_(-grad_clip, grad_clip)

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch
                # decay learning rate every epoch
                adjust_learning_rate(optimizer, lr_decay)
            model.train()  # training mode enables dropout
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        batch = next_batch()
        documents, sentences_per_document, words_per_sentence, labels = batch

        # documents: (batch_size, sentence_limit, word_limit); words_per_sentence: (batch_size, sentence_limit)
        sentences_per_document = sentences_per_document.squeeze(1)  # (batch_size)
        labels = labels.squeeze(1)  # (batch_size)

        # forward
        scores, _, _ = model(
            documents,
            sentences_per_document,
            words_per_sentence
        )  # (n_documents, n_classes), (n_documents, max_doc_len_in_batch, max_sent_len_in_batch), (n_documents, max_doc_len_in_batch)

        # calc loss
        loss = loss_function(scores, labels)  # scalar

        # backward
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss.backward()

        # clip gradients
        if grad_clip is not None:
            clip_gradient(optimizer, grad_clip)

        # update weights
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        """test.py's accuracy on one batch."""
        model.eval()
        with torch.no_grad():
            (documents, sentences_per_document, words_per_sentence), labels = batch
            scores, word_alphas, sentence_alphas = model(documents, sentences_per_document, words_per_sentence)
            _, predictions = scores.max(dim=1)  # (n_documents)
            correct_predictions = torch.eq(predictions, labels).sum().item()
        model.train()
        return correct_predictions / labels.size(0)

    def loss_fn(outputs, labels):
        scores = outputs[0]
        return loss_function(scores, labels)

    test_set = DocDataset(test_data)
    items = [test_set[i] for i in range(config.batch_size)]
    documents0 = torch.stack([it[0] for it in items])
    spd0 = torch.stack([it[1] for it in items]).squeeze(1)
    wps0 = torch.stack([it[2] for it in items])
    labels0 = torch.stack([it[3] for it in items]).squeeze(1)
    return Program(name="renovamentc_han", model=model, batch=((documents0, spd0, wps0), labels0), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task="classification")


build = functools.partial(_build)

BUGS = [
    # classic: the paper's eq.11 softmax written into the model (its comment quotes it) while the loss stays
    # nn.CrossEntropyLoss, which applies log-softmax itself.
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic axis slip: the sentence attention softmaxed over the batch's documents (dim 0) instead of over each
    # document's sentences: a document's vector depends on the other documents of the batch.
    Bug("sentence_softmax_over_documents", functools.partial(_build, bug="sentence_softmax_over_documents"),
        "learning_ledger", ("DEPENDENCY",)),
    # classic: self.optimizer.zero_grad() left out: every update carries all earlier gradients.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
