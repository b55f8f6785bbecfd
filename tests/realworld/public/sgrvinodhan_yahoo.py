"""Hierarchical Attention Network (Yang et al. 2016) for document classification, from sgrvinod's
a-PyTorch-Tutorial-to-Text-Classification: word embeddings, a bidirectional word GRU over each sentence (packed, the
pads removed), word attention (tanh layer, a context vector, a softmax computed by hand over each sentence's words),
a bidirectional sentence GRU over the sentence vectors (packed per document), sentence attention the same way, a
linear classifier on the dropped-out document vector; ``CrossEntropyLoss``, Adam lr 1e-3 over the parameters that
require gradients (the embeddings fine-tuned), the learning rate shrunk by 0.1 after every epoch.

Source: https://github.com/sgrvinod/a-PyTorch-Tutorial-to-Text-Classification
Commit: ec11e234bbbae2adcd7d665489999410911a9fb4
Files: model.py, train.py, eval.py, datasets.py, utils.py (init_embedding, load_word2vec_embeddings,
  clip_gradient, adjust_learning_rate, create_input_files' encoding and padding)
License: MIT (Copyright (c) 2019 Sagar Vinodababu; full text in
  LICENSES/sgrvinod-a-PyTorch-Tutorial-to-Text-Classification.txt)
Domain: text classification, documents (Yahoo Answers topics)

Deviations from the original:
- data: the Yahoo Answers CSVs (NLTK sentence/word tokenizers, word2vec trained by gensim) are replaced by
  synthetic documents made from ``seed``: 5 topics, each with 4 cue words, and 30 filler words; a document has 2-5
  sentences of 3-8 filler words, one or two of them replaced by cue words of its topic in at least one sentence
  (and, in the other sentences, now and then a cue word of another topic); ``create_input_files``' encoding and
  padding as written (``<pad>`` 0, words with at least ``min_word_count`` occurrences, ``<unk>`` last),
  ``HANDataset.__getitem__`` as written on the in-memory dict; the word2vec vectors are ``init_embedding``'s
  uniform table (what ``load_word2vec_embeddings`` leaves for a word that word2vec does not know);
- sizes for 2 CPU cores: sentence_limit 15 -> 5, word_limit 20 -> 8, emb_size 200 -> 16, word_rnn_size and
  sentence_rnn_size 50 -> 16, word_att_size and sentence_att_size 100 -> 16, batch_size 64 -> 16, 10 classes -> 5;
  dropout 0.3, Adam, grad_clip None, one layer each kept; lr 1e-3 -> 2e-2 so that the 30 steps of the self-check
  (one epoch of 480 documents) show the loss falling;
- CPU only (``.to(device)`` is the CPU); the DataLoader has no workers and shuffles with a ``torch.Generator``
  seeded from ``seed``; checkpointing, timing meters and the training prints
  dropped (``adjust_learning_rate``'s prints kept);
- one ``train_step`` is one batch of ``train``'s loop (forward, loss, zero_grad, backward, step), the epoch's end
  running ``main``'s ``adjust_learning_rate(optimizer, 0.1)``; ``eval_fn`` is eval.py's accuracy (``model.eval()``,
  the arg-max of the scores) on a given batch, the training mode restored after it;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP031, RUF059, C408, C417, PLR0402

from __future__ import annotations

import functools
import pathlib
import sys
from collections import Counter

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SENTENCE_LIMIT = 5  # (port) 15
WORD_LIMIT = 8  # (port) 20
N_CLASSES = 5  # (port) the 10 Yahoo Answers topics
N_TRAIN = 480


# ---- model.py ----------------------------------------------------------------------------------------------------
class HierarchialAttentionNetwork(nn.Module):
    """
    The overarching Hierarchial Attention Network (HAN).
    """

    def __init__(self, n_classes, vocab_size, emb_size, word_rnn_size, sentence_rnn_size, word_rnn_layers,
                 sentence_rnn_layers, word_att_size, sentence_att_size, dropout=0.5, bug=None):
        """
        :param n_classes: number of classes
        :param vocab_size: number of words in the vocabulary of the model
        :param emb_size: size of word embeddings
        :param word_rnn_size: size of (bidirectional) word-level RNN
        :param sentence_rnn_size: size of (bidirectional) sentence-level RNN
        :param word_rnn_layers: number of layers in word-level RNN
        :param sentence_rnn_layers: number of layers in sentence-level RNN
        :param word_att_size: size of word-level attention layer
        :param sentence_att_size: size of sentence-level attention layer
        :param dropout: dropout
        """
        super(HierarchialAttentionNetwork, self).__init__()

        # Sentence-level attention module (which will, in-turn, contain the word-level attention module)
        self.sentence_attention = SentenceAttention(vocab_size, emb_size, word_rnn_size, sentence_rnn_size,
                                                    word_rnn_layers, sentence_rnn_layers, word_att_size,
                                                    sentence_att_size, dropout, bug=bug)

        # Classifier
        self.fc = nn.Linear(2 * sentence_rnn_size, n_classes)

        self.dropout = nn.Dropout(dropout)

    def forward(self, documents, sentences_per_document, words_per_sentence):
        """
        Forward propagation.

        :param documents: encoded document-level data, a tensor of dimensions (n_documents, sent_pad_len, word_pad_len)
        :param sentences_per_document: document lengths, a tensor of dimensions (n_documents)
        :param words_per_sentence: sentence lengths, a tensor of dimensions (n_documents, sent_pad_len)
        :return: class scores, attention weights of words, attention weights of sentences
        """
        # Apply sentence-level attention module (and in turn, word-level attention module) to get document embeddings
        document_embeddings, word_alphas, sentence_alphas = self.sentence_attention(documents, sentences_per_document,
                                                                                    words_per_sentence)  # (n_documents, 2 * sentence_rnn_size), (n_documents, max(sentences_per_document), max(words_per_sentence)), (n_documents, max(sentences_per_document))

        # Classify
        scores = self.fc(self.dropout(document_embeddings))  # (n_documents, n_classes)

        return scores, word_alphas, sentence_alphas


class SentenceAttention(nn.Module):
    """
    The sentence-level attention module.
    """

    def __init__(self, vocab_size, emb_size, word_rnn_size, sentence_rnn_size, word_rnn_layers, sentence_rnn_layers,
                 word_att_size, sentence_att_size, dropout, bug=None):
        """
        :param vocab_size: number of words in the vocabulary of the model
        :param emb_size: size of word embeddings
        :param word_rnn_size: size of (bidirectional) word-level RNN
        :param sentence_rnn_size: size of (bidirectional) sentence-level RNN
        :param word_rnn_layers: number of layers in word-level RNN
        :param sentence_rnn_layers: number of layers in sentence-level RNN
        :param word_att_size: size of word-level attention layer
        :param sentence_att_size: size of sentence-level attention layer
        :param dropout: dropout
        """
        super(SentenceAttention, self).__init__()

        # Word-level attention module
        self.word_attention = WordAttention(vocab_size, emb_size, word_rnn_size, word_rnn_layers, word_att_size,
                                            dropout, bug=bug)
        self.bug = bug

        # Bidirectional sentence-level RNN
        self.sentence_rnn = nn.GRU(2 * word_rnn_size, sentence_rnn_size, num_layers=sentence_rnn_layers,
                                   bidirectional=True, dropout=dropout, batch_first=True)

        # Sentence-level attention network
        self.sentence_attention = nn.Linear(2 * sentence_rnn_size, sentence_att_size)

        # Sentence context vector to take dot-product with
        self.sentence_context_vector = nn.Linear(sentence_att_size, 1,
                                                 bias=False)  # this performs a dot product with the linear layer's 1D parameter vector, which is the sentence context vector
        # You could also do this with:
        # self.sentence_context_vector = nn.Parameter(torch.FloatTensor(1, sentence_att_size))
        # self.sentence_context_vector.data.uniform_(-0.1, 0.1)
        # And then take the dot-product

        # Dropout
        self.dropout = nn.Dropout(dropout)

    def forward(self, documents, sentences_per_document, words_per_sentence):
        """
        Forward propagation.

        :param documents: encoded document-level data, a tensor of dimensions (n_documents, sent_pad_len, word_pad_len)
        :param sentences_per_document: document lengths, a tensor of dimensions (n_documents)
        :param words_per_sentence: sentence lengths, a tensor of dimensions (n_documents, sent_pad_len)
        :return: document embeddings, attention weights of words, attention weights of sentences
        """

        # Re-arrange as sentences by removing sentence-pads (DOCUMENTS -> SENTENCES)
        packed_sentences = pack_padded_sequence(documents,
                                                lengths=sentences_per_document.tolist(),
                                                batch_first=True,
                                                enforce_sorted=False)  # a PackedSequence object, where 'data' is the flattened sentences (n_sentences, word_pad_len)

        # Re-arrange sentence lengths in the same way (DOCUMENTS -> SENTENCES)
        packed_words_per_sentence = pack_padded_sequence(words_per_sentence,
                                                         lengths=sentences_per_document.tolist(),
                                                         batch_first=True,
                                                         enforce_sorted=False)  # a PackedSequence object, where 'data' is the flattened sentence lengths (n_sentences)

        # Find sentence embeddings by applying the word-level attention module
        sentences, word_alphas = self.word_attention(packed_sentences.data,
                                                     packed_words_per_sentence.data)  # (n_sentences, 2 * word_rnn_size), (n_sentences, max(words_per_sentence))
        sentences = self.dropout(sentences)

        # Apply the sentence-level RNN over the sentence embeddings (PyTorch automatically applies it on the PackedSequence)
        if self.bug == "packed_indices_dropped":
            # (bug) the PackedSequence rebuilt from data and batch_sizes only: it stays in length-sorted order
            packed_sentences, _ = self.sentence_rnn(PackedSequence(data=sentences,
                                                                   batch_sizes=packed_sentences.batch_sizes))
        else:
            packed_sentences, _ = self.sentence_rnn(PackedSequence(data=sentences,
                                                                   batch_sizes=packed_sentences.batch_sizes,
                                                                   sorted_indices=packed_sentences.sorted_indices,
                                                                   unsorted_indices=packed_sentences.unsorted_indices))  # a PackedSequence object, where 'data' is the output of the RNN (n_sentences, 2 * sentence_rnn_size)

        # Find attention vectors by applying the attention linear layer on the output of the RNN
        att_s = self.sentence_attention(packed_sentences.data)  # (n_sentences, att_size)
        att_s = torch.tanh(att_s)  # (n_sentences, att_size)
        # Take the dot-product of the attention vectors with the context vector (i.e. parameter of linear layer)
        att_s = self.sentence_context_vector(att_s).squeeze(1)  # (n_sentences)

        # Compute softmax over the dot-product manually
        # Manually because they have to be computed only over sentences in the same document

        # First, take the exponent
        max_value = att_s.max()  # scalar, for numerical stability during exponent calculation
        att_s = torch.exp(att_s - max_value)  # (n_sentences)

        # Re-arrange as documents by re-padding with 0s (SENTENCES -> DOCUMENTS)
        att_s, _ = pad_packed_sequence(PackedSequence(data=att_s,
                                                      batch_sizes=packed_sentences.batch_sizes,
                                                      sorted_indices=packed_sentences.sorted_indices,
                                                      unsorted_indices=packed_sentences.unsorted_indices),
                                       batch_first=True)  # (n_documents, max(sentences_per_document))

        # Calculate softmax values as now sentences are arranged in their respective documents
        sentence_alphas = att_s / torch.sum(att_s, dim=1, keepdim=True)  # (n_documents, max(sentences_per_document))

        # Similarly re-arrange sentence-level RNN outputs as documents by re-padding with 0s (SENTENCES -> DOCUMENTS)
        documents, _ = pad_packed_sequence(packed_sentences,
                                           batch_first=True)  # (n_documents, max(sentences_per_document), 2 * sentence_rnn_size)

        # Find document embeddings
        documents = documents * sentence_alphas.unsqueeze(
            2)  # (n_documents, max(sentences_per_document), 2 * sentence_rnn_size)
        documents = documents.sum(dim=1)  # (n_documents, 2 * sentence_rnn_size)

        # Also re-arrange word_alphas (SENTENCES -> DOCUMENTS)
        word_alphas, _ = pad_packed_sequence(PackedSequence(data=word_alphas,
                                                            batch_sizes=packed_sentences.batch_sizes,
                                                            sorted_indices=packed_sentences.sorted_indices,
                                                            unsorted_indices=packed_sentences.unsorted_indices),
                                             batch_first=True)  # (n_documents, max(sentences_per_document), max(words_per_sentence))

        return documents, word_alphas, sentence_alphas


class WordAttention(nn.Module):
    """
    The word-level attention module.
    """

    def __init__(self, vocab_size, emb_size, word_rnn_size, word_rnn_layers, word_att_size, dropout, bug=None):
        """
        :param vocab_size: number of words in the vocabulary of the model
        :param emb_size: size of word embeddings
        :param word_rnn_size: size of (bidirectional) word-level RNN
        :param word_rnn_layers: number of layers in word-level RNN
        :param word_att_size: size of word-level attention layer
        :param dropout: dropout
        """
        super(WordAttention, self).__init__()

        # Embeddings (look-up) layer
        self.embeddings = nn.Embedding(vocab_size, emb_size)

        # Bidirectional word-level RNN
        self.word_rnn = nn.GRU(emb_size, word_rnn_size, num_layers=word_rnn_layers, bidirectional=True,
                               dropout=dropout, batch_first=True)

        # Word-level attention network
        self.word_attention = nn.Linear(2 * word_rnn_size, word_att_size)

        # Word context vector to take dot-product with
        self.word_context_vector = nn.Linear(word_att_size, 1, bias=False)
        # You could also do this with:
        # self.word_context_vector = nn.Parameter(torch.FloatTensor(1, word_att_size))
        # self.word_context_vector.data.uniform_(-0.1, 0.1)
        # And then take the dot-product

        self.dropout = nn.Dropout(dropout)
        self.bug = bug

    def init_embeddings(self, embeddings):
        """
        Initialized embedding layer with pre-computed embeddings.

        :param embeddings: pre-computed embeddings
        """
        self.embeddings.weight = nn.Parameter(embeddings)

    def fine_tune_embeddings(self, fine_tune=False):
        """
        Allow fine-tuning of embedding layer? (Only makes sense to not-allow if using pre-trained embeddings).

        :param fine_tune: allow?
        """
        for p in self.embeddings.parameters():
            p.requires_grad = fine_tune

    def forward(self, sentences, words_per_sentence):
        """
        Forward propagation.

        :param sentences: encoded sentence-level data, a tensor of dimension (n_sentences, word_pad_len, emb_size)
        :param words_per_sentence: sentence lengths, a tensor of dimension (n_sentences)
        :return: sentence embeddings, attention weights of words
        """

        # Get word embeddings, apply dropout
        sentences = self.dropout(self.embeddings(sentences))  # (n_sentences, word_pad_len, emb_size)

        # Re-arrange as words by removing word-pads (SENTENCES -> WORDS)
        packed_words = pack_padded_sequence(sentences,
                                            lengths=words_per_sentence.tolist(),
                                            batch_first=True,
                                            enforce_sorted=False)  # a PackedSequence object, where 'data' is the flattened words (n_words, word_emb)

        # Apply the word-level RNN over the word embeddings (PyTorch automatically applies it on the PackedSequence)
        packed_words, _ = self.word_rnn(
            packed_words)  # a PackedSequence object, where 'data' is the output of the RNN (n_words, 2 * word_rnn_size)

        # Find attention vectors by applying the attention linear layer on the output of the RNN
        att_w = self.word_attention(packed_words.data)  # (n_words, att_size)
        att_w = torch.tanh(att_w)  # (n_words, att_size)
        # Take the dot-product of the attention vectors with the context vector (i.e. parameter of linear layer)
        att_w = self.word_context_vector(att_w).squeeze(1)  # (n_words)

        if self.bug == "word_attention_over_padding":
            # (bug) the scores computed on the re-padded outputs: the softmax runs over the pad positions too
            padded, _ = pad_packed_sequence(packed_words, batch_first=True)
            att_w = self.word_context_vector(torch.tanh(self.word_attention(padded))).squeeze(2)
            att_w = torch.exp(att_w - att_w.max())
            word_alphas = att_w / torch.sum(att_w, dim=1, keepdim=True)
            sentences = (padded * word_alphas.unsqueeze(2)).sum(dim=1)
            return sentences, word_alphas

        # Compute softmax over the dot-product manually
        # Manually because they have to be computed only over words in the same sentence

        # First, take the exponent
        max_value = att_w.max()  # scalar, for numerical stability during exponent calculation
        att_w = torch.exp(att_w - max_value)  # (n_words)

        # Re-arrange as sentences by re-padding with 0s (WORDS -> SENTENCES)
        att_w, _ = pad_packed_sequence(PackedSequence(data=att_w,
                                                      batch_sizes=packed_words.batch_sizes,
                                                      sorted_indices=packed_words.sorted_indices,
                                                      unsorted_indices=packed_words.unsorted_indices),
                                       batch_first=True)  # (n_sentences, max(words_per_sentence))

        # Calculate softmax values as now words are arranged in their respective sentences
        word_alphas = att_w / torch.sum(att_w, dim=1, keepdim=True)  # (n_sentences, max(words_per_sentence))

        # Similarly re-arrange word-level RNN outputs as sentences by re-padding with 0s (WORDS -> SENTENCES)
        sentences, _ = pad_packed_sequence(packed_words,
                                           batch_first=True)  # (n_sentences, max(words_per_sentence), 2 * word_rnn_size)

        # Find sentence embeddings
        sentences = sentences * word_alphas.unsqueeze(2)  # (n_sentences, max(words_per_sentence), 2 * word_rnn_size)
        sentences = sentences.sum(dim=1)  # (n_sentences, 2 * word_rnn_size)

        return sentences, word_alphas

# ---- utils.py ----------------------------------------------------------------------------------------------------

def init_embedding(input_embedding):
    """
    Initialize embedding tensor with values from the uniform distribution.

    :param input_embedding: embedding tensor
    """
    bias = np.sqrt(3.0 / input_embedding.size(1))
    nn.init.uniform_(input_embedding, -bias, bias)


def clip_gradient(optimizer, grad_clip):
    """
    Clip gradients computed during backpropagation to prevent gradient explosion.

    :param optimizer: optimized with the gradients to be clipped
    :param grad_clip: gradient clip value
    """
    for group in optimizer.param_groups:
        for param in group['params']:
            if param.grad is not None:
                param.grad.data.clamp_(-grad_clip, grad_clip)


def adjust_learning_rate(optimizer, scale_factor):
    """
    Shrinks learning rate by a specified factor.

    :param optimizer: optimizer whose learning rates must be decayed
    :param scale_factor: factor to scale by
    """

    print("\nDECAYING learning rate.")
    for param_group in optimizer.param_groups:
        param_group['lr'] = param_group['lr'] * scale_factor
    print("The new learning rate is %f\n" % (optimizer.param_groups[0]['lr'],))


# ---- (port) synthetic Yahoo-Answers-like documents ---------------------------------------------------------------

FILLER = [f"w{i}" for i in range(30)]
CUES = [[f"t{c}k{j}" for j in range(4)] for c in range(N_CLASSES)]


def synthetic_docs(rng, n):
    """Documents of 2-5 tokenized sentences; the label is the topic whose cue words appear (1-2 per cued sentence,
    at least one cued sentence), with an occasional distracting cue of another topic."""
    docs, labels = [], []
    for _ in range(n):
        label = int(rng.integers(N_CLASSES))
        n_sent = int(rng.integers(2, 6))
        cued = set(rng.choice(n_sent, size=int(rng.integers(1, n_sent + 1)), replace=False).tolist())
        doc = []
        for s in range(n_sent):
            words = list(rng.choice(FILLER, size=int(rng.integers(3, 9))))
            if s in cued:
                for _ in range(int(rng.integers(1, 3))):
                    words[int(rng.integers(len(words)))] = str(rng.choice(CUES[label]))
            elif rng.random() < 0.2:
                other = int((label + rng.integers(1, N_CLASSES)) % N_CLASSES)
                words[int(rng.integers(len(words)))] = str(rng.choice(CUES[other]))
            doc.append(words[:WORD_LIMIT])
        docs.append(doc[:SENTENCE_LIMIT])
        labels.append(label)
    return docs, labels


def encode(docs, word_map, sentence_limit, word_limit):
    """create_input_files' encoding and padding (documents, sentences per document, words per sentence)."""
    encoded_docs = list(map(lambda doc: list(
        map(lambda s: list(map(lambda w: word_map.get(w, word_map['<unk>']), s)) + [0] * (word_limit - len(s)),
            doc)) + [[0] * word_limit] * (sentence_limit - len(doc)), docs))
    sentences_per_document = list(map(lambda doc: len(doc), docs))
    words_per_sentence = list(
        map(lambda doc: list(map(lambda s: len(s), doc)) + [0] * (sentence_limit - len(doc)), docs))
    return encoded_docs, sentences_per_document, words_per_sentence


class HANDataset(torch.utils.data.Dataset):
    """
    A PyTorch Dataset class to be used in a PyTorch DataLoader to create batches.
    """
    def __init__(self, data):
        self.data = data  # (port) the dict torch.load reads from {split}_data.pth.tar

    def __getitem__(self, i):
        return torch.LongTensor(self.data['docs'][i]), \
               torch.LongTensor([self.data['sentences_per_document'][i]]), \
               torch.LongTensor(self.data['words_per_sentence'][i]), \
               torch.LongTensor([self.data['labels'][i]])

    def __len__(self):
        return len(self.data['labels'])


# ---- train.py ----------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    train_docs, train_labels = synthetic_docs(rng, N_TRAIN)

    # create_input_files: the word map
    min_word_count = 5
    word_counter = Counter(w for d in train_docs for s in d for w in s)
    word_map = dict()
    word_map['<pad>'] = 0
    for word, count in word_counter.items():
        if count >= min_word_count:
            word_map[word] = len(word_map)
    word_map['<unk>'] = len(word_map)

    def to_data(docs, labels):
        enc, spd, wps = encode(docs, word_map, SENTENCE_LIMIT, WORD_LIMIT)
        return {'docs': enc, 'labels': labels, 'sentences_per_document': spd, 'words_per_sentence': wps}

    # Model parameters
    n_classes = N_CLASSES
    word_rnn_size = 16  # (port) 50
    sentence_rnn_size = 16  # (port) 50
    word_rnn_layers = 1
    sentence_rnn_layers = 1
    word_att_size = 16  # (port) 100
    sentence_att_size = 16  # (port) 100
    dropout = 0.3
    fine_tune_word_embeddings = True

    # Training parameters
    batch_size = 16  # (port) 64
    lr = 2e-2  # (port) 1e-3
    grad_clip = None

    emb_size = 16  # (port) word2vec's 200
    embeddings = torch.FloatTensor(len(word_map), emb_size)
    init_embedding(embeddings)  # (port) load_word2vec_embeddings: words word2vec does not know keep these

    model = HierarchialAttentionNetwork(n_classes=n_classes,
                                        vocab_size=len(word_map),
                                        emb_size=emb_size,
                                        word_rnn_size=word_rnn_size,
                                        sentence_rnn_size=sentence_rnn_size,
                                        word_rnn_layers=word_rnn_layers,
                                        sentence_rnn_layers=sentence_rnn_layers,
                                        word_att_size=word_att_size,
                                        sentence_att_size=sentence_att_size,
                                        dropout=dropout, bug=bug)
    model.sentence_attention.word_attention.init_embeddings(
        embeddings)  # initialize embedding layer with pre-trained embeddings
    model.sentence_attention.word_attention.fine_tune_embeddings(fine_tune_word_embeddings)  # fine-tune
    optimizer = optim.Adam(params=filter(lambda p: p.requires_grad, model.parameters()), lr=lr)

    # Loss functions
    criterion = nn.CrossEntropyLoss()

    train_loader = torch.utils.data.DataLoader(HANDataset(to_data(train_docs, train_labels)), batch_size=batch_size,
                                               shuffle=True, num_workers=0,
                                               generator=torch.Generator().manual_seed(seed))
    state = {"it": iter(train_loader)}
    model.train()  # training mode enables dropout

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            # Decay learning rate every epoch
            adjust_learning_rate(optimizer, 0.1)
            model.train()  # training mode enables dropout (train()'s first line, each epoch)
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        documents, sentences_per_document, words_per_sentence, labels = next_batch()

        sentences_per_document = sentences_per_document.squeeze(1)  # (batch_size)
        labels = labels.squeeze(1)  # (batch_size)

        # Forward prop.
        scores, word_alphas, sentence_alphas = model(documents, sentences_per_document,
                                                     words_per_sentence)  # (n_documents, n_classes), (n_documents, max_doc_len_in_batch, max_sent_len_in_batch), (n_documents, max_doc_len_in_batch)

        # Loss
        loss = criterion(scores, labels)  # scalar

        # Back prop.
        optimizer.zero_grad()
        loss.backward()

        # Clip gradients
        if grad_clip is not None:
            clip_gradient(optimizer, grad_clip)

        # Update
        optimizer.step()
        return loss.detach()

    def loss_fn(outputs, labels):
        scores, word_alphas, sentence_alphas = outputs
        return criterion(scores, labels)

    def eval_fn(model, batch):
        """eval.py on one batch: model.eval(), the arg-max of the scores, the accuracy."""
        (documents, sentences_per_document, words_per_sentence), labels = batch
        was_training = model.training
        if bug != "eval_without_model_eval":
            model.eval()
        scores, word_alphas, sentence_alphas = model(documents, sentences_per_document, words_per_sentence)
        _, predictions = scores.max(dim=1)  # (n_documents)
        correct_predictions = torch.eq(predictions, labels).sum().item()
        model.train(was_training)
        return correct_predictions / labels.size(0)

    def as_batch(items):
        documents, spd, wps, labels = (torch.stack(t) for t in zip(*items))
        return (documents, spd.squeeze(1), wps), labels.squeeze(1)

    batch = as_batch([train_loader.dataset[i] for i in range(batch_size)])
    return Program(name="sgrvinodhan_yahoo", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the sentence GRU's PackedSequence rebuilt without sorted_indices/unsorted_indices (the form of PyTorch before
    # 1.1, where enforce_sorted did not exist; classic): the document vectors come back in length-sorted order and
    # no longer line up with their labels.
    Bug("packed_indices_dropped", functools.partial(_build, bug="packed_indices_dropped"), "learning_ledger",
        ("TASK",)),
    # the word attention's softmax taken over the re-padded outputs (classic): pad positions get weight, so a
    # sentence's vector depends on the longest sentence of the batch.
    Bug("word_attention_over_padding", functools.partial(_build, bug="word_attention_over_padding"),
        "learning_ledger", ("DEPENDENCY",)),
    # eval.py without model.eval() (classic): dropout stays on while measuring the accuracy.
    Bug("eval_without_model_eval", functools.partial(_build, bug="eval_without_model_eval"), "six_claims",
        ("EVALUATION",)),
]
