"""A bidirectional LSTM language model (ELMo-style: the forward states of positions ``:-2`` and the backward
states of positions ``2:`` concatenated predict the token in between, through two linear layers and a
``LogSoftmax``) trained by the repository's ``lm_trainer.py`` with ``--model_type BiLSTM``: sentences tokenized
with BOS/EOS and padded to ``max_seq_len``, ``NLLLoss(ignore_index=pad)``, Adam with its default lr,
``zero_grad`` / backward / ``clip_grad_norm_(10)`` / step on every batch.

Source: https://github.com/lyeoni/pretraining-for-language-understanding
Commit: 799dfcc025751123e6c15b37f0a5319d7b24a403
Files: lm_trainer.py, models.py (BiLSTMLM), dataset_utils.py (Corpus), tokenization.py (Vocab, Tokenizer)
License: Apache-2.0
Domain: bidirectional language model (pre-training for language understanding)

Deviations from the original:
- sizes: embedding_size 256 -> 16, hidden_size 1024 -> 32, n_layers 3 -> 2 (dropout_p 0.2 kept), max_seq_len
  32 -> 16, batch_size 512 -> 32; clip_value 10, Adam's defaults and the loss unchanged;
- data: the Wikipedia corpus files and the Mecab tokenizer are replaced by 640 synthetic sentences made from
  ``seed`` and split on whitespace (4-13 words of a 30-word vocabulary, each word followed by its successor
  under a fixed random map 80% of the time, else a random word); the vocabulary is built by the repository's
  ``Vocab`` on them with the special tokens ``<unk>``, ``<s>``, ``</s>``, ``<pad>`` (``build_vocab.py``'s pickle
  left out); ``Corpus`` takes the list of lines instead of a file path;
- ``.cuda()`` calls dropped (CPU), multi-GPU (``DataParallelModel``) left out;
- one ``train_step`` is one iteration of ``train()``'s batch loop (the DataLoader re-iterated each epoch);
  tqdm, printing, perplexity bookkeeping and the checkpoint per epoch are left out; ``eval_fn`` is the loss on
  a batch of held-out sentences under ``eval()`` and ``no_grad`` (the script has no evaluation of its own).
"""

# ruff: noqa: PLR0402, UP004, UP008, SIM118, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
from torch import optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


class Config:
    model_type = "BiLSTM"
    max_seq_len = 16
    multi_gpu = False
    cuda = False
    batch_size = 32
    clip_value = 10
    shuffle = True
    embedding_size = 16
    hidden_size = 32
    n_layers = 2
    dropout_p = .2


# ---- tokenization.py ------------------------------------------------------------------------------------------------

class Vocab(object):
    def __init__(self, list_of_tokens, embedding_vec=None, unk_token=None,
                 bos_token=None, eos_token=None, pad_token=None, min_freq=1, lower=True):
        self.list_of_tokens = list_of_tokens
        self.embedding_vec = embedding_vec
        self.unk_token = unk_token
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.pad_token = pad_token
        self.min_freq = min_freq
        self.lower = lower
        self.stoi, self.itos, self.freqs = {}, {}, {}

        # Initialize with special tokens
        for sti, special_token in enumerate([self.unk_token, self.bos_token, self.eos_token, self.pad_token]):
            if special_token:
                self.stoi[special_token] = sti
                self.itos[sti] = special_token

    def build(self):
        # If the token doesn't appear in the vocabulary at least once
        for ti, token in enumerate(self.list_of_tokens):
            # Lowercase the token
            if self.lower:
                token = token.lower()

            # Count the frequencies of tokens in whole list of tokens
            if token not in self.freqs.keys():
                self.freqs[token] = 1
            else:
                self.freqs[token] += 1

        # Sort by frequency in 'descending' order
        self.freqs = dict(sorted(self.freqs.items(), key=lambda x: x[1], reverse=True))

        # Minimum frequency required for a token
        unique_tokens = []
        for token, freq in self.freqs.items():
            if freq >= self.min_freq:
                unique_tokens.append(token)

        # Build vocab mapping tokens to numerical index
        for token in unique_tokens:
            self.itos[self.__len__()] = token
            self.stoi[token] = self.__len__()

    def __len__(self):
        return len(self.stoi)


class Tokenizer(object):
    def __init__(self, tokenization_fn, vocab=None, max_seq_length=128):
        self.tokenization_fn = tokenization_fn
        self.vocab = vocab
        self.max_seq_length = max_seq_length

    def tokenize(self, text):
        tokens = self.tokenization_fn(text)
        if self.vocab:
            # Lowercase the token
            if self.vocab.lower:
                tokens = [token.lower() for token in tokens]

            # Add beginning of sentence token
            if self.vocab.bos_token:
                tokens = [self.vocab.bos_token] + tokens

            # Add end of sentence token
            if self.vocab.eos_token:
                tokens = tokens + [self.vocab.eos_token]

            # Add padding token
            if self.vocab.pad_token and len(tokens) < self.max_seq_length:
                tokens += [self.vocab.pad_token] * (self.max_seq_length-len(tokens))

            # Truncate to the maximum sequence length
            if len(tokens) > self.max_seq_length:
                tokens = tokens[:self.max_seq_length]

        return tokens

    def transform(self, tokens):
        if self.vocab:
            return [self.vocab.stoi[token] if token in self.vocab.stoi else self.vocab.stoi[self.vocab.unk_token]
                    for token in tokens]

    def tokenize_and_transform(self, text):
        if self.vocab:
            return self.transform(self.tokenize(text))


# ---- dataset_utils.py -----------------------------------------------------------------------------------------------

class Corpus(Dataset):
    def __init__(self, corpus_lines, tokenizer, model_type, cuda):
        self.corpus = []
        self.tokenizer = tokenizer
        self.model_type = model_type
        self.cuda = cuda

        for li, line in enumerate(corpus_lines):
            self.corpus.append(line.strip())

    def __getitem__(self, index):
        tokens_indices = self.tokenizer.tokenize_and_transform(self.corpus[index])
        tokens_indices = torch.tensor(tokens_indices)

        if self.model_type == 'LSTM':
            return tokens_indices[:-1], tokens_indices[1:]
        elif self.model_type == 'BiLSTM':
            return tokens_indices, tokens_indices[1:-1]

    def __len__(self):
        return len(self.corpus)


# ---- models.py ------------------------------------------------------------------------------------------------------

class BiLSTMLM(nn.Module):
    def __init__(self, input_size, embedding_size, hidden_size, output_size,
                 n_layers, dropout_p, bug=None):

        super(BiLSTMLM, self).__init__()

        self.input_size = input_size
        self.embedding_size = embedding_size
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.n_layers = n_layers
        self.dropout_p = dropout_p
        self.bug = bug

        # layers
        self.embedding = nn.Embedding(input_size, embedding_size)
        self.lstm = nn.LSTM(embedding_size, hidden_size,
                            num_layers=n_layers,
                            dropout=dropout_p,
                            bidirectional=True,
                            batch_first=True)
        self.fc = nn.Linear(hidden_size*2, hidden_size)
        self.fc2 = nn.Linear(hidden_size, hidden_size//2)
        self.fc3 = nn.Linear(hidden_size//2, output_size)
        self.softmax = nn.LogSoftmax(dim=-1)

    def forward(self, input):
        # |input| = (batch_size, max_seq_len)

        embeds = self.embedding(input)
        # |embeds| = (batch_size, max_seq_len, embedding_size)

        lstm_out, hidden = self.lstm(embeds)
        # |lstm_out| = (batch_size, max_seq_len, num_directions*hidden_size)

        if self.bug == "context_not_offset":
            # both directions read at the target's own position: each state has already seen the token it predicts
            forward_out = lstm_out[:, 1:-1, :self.hidden_size]
            backward_out = lstm_out[:, 1:-1, self.hidden_size:]
        else:
            forward_out = lstm_out[:, :-2, :self.hidden_size]
            backward_out = lstm_out[:, 2:, self.hidden_size:]
        # |forward_out| = (batch_size, max_seq_len-2, hidden_size)
        # |backward_out| = (batch_size, max_seq_len-2, hidden_size)

        context = torch.cat((forward_out, backward_out), dim=-1)
        # |context| = (batch_size, max_seq_len-2, 2*hidden_size)

        fc_out = self.fc2(self.fc(context))
        # |fc_out| = (batch_size, max_seq_len-2, hidden_size//2)
        if self.bug == "nll_on_raw_scores":
            return self.fc3(fc_out)  # the LogSoftmax left out: NLLLoss takes the raw scores
        output = self.softmax(self.fc3(fc_out))
        # |output| = (batch_size, max_seq_len-2, output_size)

        return output


# ---- synthetic corpus -----------------------------------------------------------------------------------------------

def make_lines(gen, n, succ, n_words=30):
    """Sentences of 4-13 words; each word is followed by its successor ``succ[w]`` 80% of the time."""
    lines = []
    for _ in range(n):
        length = int(torch.randint(4, 14, (1,), generator=gen))
        w = int(torch.randint(0, n_words, (1,), generator=gen))
        words = [w]
        for _ in range(length - 1):
            w = int(succ[w]) if torch.rand(1, generator=gen) < 0.8 else int(torch.randint(0, n_words, (1,),
                                                                                           generator=gen))
            words.append(w)
        lines.append(" ".join(f"w{i}" for i in words))
    return lines


# ---- lm_trainer.py --------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = Config()
    succ = torch.randperm(30, generator=gen)
    train_lines, test_lines = make_lines(gen, 640, succ), make_lines(gen, 64, succ)

    # Load vocabulary
    vocab = Vocab([t for line in train_lines for t in line.split()], unk_token='<unk>', bos_token='<s>',
                  eos_token='</s>', pad_token='<pad>')
    vocab.build()

    tokenizer = Tokenizer(tokenization_fn=str.split, vocab=vocab, max_seq_length=config.max_seq_len)

    # Build dataloader
    train_loader = DataLoader(dataset=Corpus(corpus_lines=train_lines,
                                             tokenizer=tokenizer,
                                             model_type=config.model_type,
                                             cuda=config.cuda),
                              batch_size=config.batch_size,
                              shuffle=config.shuffle,
                              drop_last=True,
                              generator=torch.Generator().manual_seed(seed))
    test_loader = DataLoader(dataset=Corpus(corpus_lines=test_lines,
                                            tokenizer=tokenizer,
                                            model_type=config.model_type,
                                            cuda=config.cuda),
                             batch_size=config.batch_size,
                             shuffle=config.shuffle,
                             drop_last=True,
                             generator=torch.Generator().manual_seed(seed + 1))

    # Build model
    model = BiLSTMLM(input_size=len(vocab),
                     embedding_size=config.embedding_size,
                     hidden_size=config.hidden_size,
                     output_size=len(vocab),
                     n_layers=config.n_layers,
                     dropout_p=config.dropout_p,
                     bug=bug)

    loss_fn = nn.NLLLoss(ignore_index=vocab.stoi[vocab.pad_token])
    optimizer = optim.Adam(model.parameters())

    state = {"it": iter(train_loader)}

    def train_step():
        try:
            batch = next(state["it"])
        except StopIteration:  # the next epoch
            state["it"] = iter(train_loader)
            batch = next(state["it"])
        model.train()
        inputs, targets = batch
        # |inputs|, |targets| = (batch_size, seq_len), (batch_size, seq_len)

        preds = model(inputs)
        # |preds| = (batch_size, seq_len, len(vocab))

        preds = preds.view(-1, len(vocab)).contiguous()
        # |preds| = (batch_size*seq_len, len(vocab))

        targets = targets.view(-1).contiguous()
        # |targets| = (batch_size*seq_len)

        loss = loss_fn(preds, targets)

        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), config.clip_value)
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            inputs, targets = batch
            preds = model(inputs).view(-1, len(vocab)).contiguous()
            loss = loss_fn(preds, targets.view(-1).contiguous())
        model.train()
        return float(loss)

    first = next(iter(test_loader))
    return Program(name="lyeonilm_bilstm", model=model, batch=(first[0], first[1]),
                   loss_fn=lambda preds, targets: loss_fn(preds.view(-1, len(vocab)), targets.reshape(-1)),
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # forward and backward states both read at the target's position (lstm_out[:, 1:-1]) instead of the
    # neighbours' (:-2 and 2:): each state has already read the token it is asked to predict.
    Bug("context_not_offset", functools.partial(_build, bug="context_not_offset"), "learning_ledger",
        ("DEPENDENCY",)),
    # the LogSoftmax left out of the model: NLLLoss on raw scores is minimized by making the target's score
    # large without bound, not by a distribution over the vocabulary.
    Bug("nll_on_raw_scores", functools.partial(_build, bug="nll_on_raw_scores"), "learning_ledger", ("OBJECTIVE",)),
    # optimizer.zero_grad() moved between backward() and step(): every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
