"""Sequence-to-sequence with attention from IBM's pytorch-seq2seq, as ``examples/sample.py`` trains it on the
repository's toy reverse task (``scripts/generate_toy_data.py``): a bidirectional GRU ``EncoderRNN`` over packed
variable-length inputs, a GRU ``DecoderRNN`` with dot-product ``Attention`` (hidden size doubled for the
bidirectional encoder, dropout 0.2), parameters initialised uniform(-0.08, 0.08), the ``Perplexity`` loss (a summed
``NLLLoss`` over log-softmax outputs with the padding token's weight set to 0), and ``SupervisedTrainer._train_batch``
(teacher forcing with probability 0.5 per batch, ``model.zero_grad()``, ``loss.backward()``, the ``Optimizer``
wrapper: Adam with ``clip_grad_norm_(max_grad_norm=5)``).

Source: https://github.com/IBM/pytorch-seq2seq
Commit: f146087a9a271e9b50f46561e090324764b081fb
Files: examples/sample.py, scripts/generate_toy_data.py, seq2seq/models/{EncoderRNN,DecoderRNN,attention,baseRNN,
       seq2seq}.py, seq2seq/loss/loss.py, seq2seq/optim/optim.py, seq2seq/trainer/supervised_trainer.py,
       seq2seq/evaluator/evaluator.py, seq2seq/dataset/fields.py
License: Apache-2.0 (Copyright 2017- IBM Corporation; full text in LICENSES/IBM-pytorch-seq2seq.txt)
Domain: sequence-to-sequence with attention (RNN encoder-decoder, teacher forcing)

Deviations from the original:
- sizes: hidden_size 128 -> 32 (the decoder's 256 -> 64), toy data 10000 -> 2000 training and 1000 -> 200 dev pairs
  (lengths 1-10 as in generate_toy_data.py); batch_size 32, max_len 50, dropout, init, Adam, max_grad_norm 5 and
  teacher_forcing_ratio 0.5 as in sample.py;
- torchtext (``SourceField``/``TargetField``, ``TabularDataset``, ``BucketIterator``) is not installed: the fields are
  written out as a vocabulary (``<unk>`` 0, ``<pad>`` 1, then tokens by frequency, as ``build_vocab`` orders them;
  the target side adds ``<sos>``/``<eos>`` around each sequence) and an iterator that shuffles the training pairs
  each epoch, cuts them into batches of 32 and sorts each batch by source length, longest first
  (``sort_within_batch=True``, needed by the packed encoder); the dataset is generated in memory from ``seed``
  instead of being read from data.txt;
- the classes' docstrings (documentation only) are left out, as is the unused ``TopKDecoder``;
- ``SupervisedTrainer(random_seed=seed)`` (sample.py leaves it unset) seeds ``random`` (the teacher-forcing coin) and
  torch; the experiment directory and checkpoints are not written; no CUDA;
- one ``train_step`` is one batch of ``_train_epoches`` (``model.train(True)`` at the start of each epoch, then
  ``_train_batch``, which returns the batch's perplexity as in the original); the end-of-epoch evaluation and
  ``optimizer.update`` (no scheduler is set in sample.py) are outside the step; ``eval_fn`` is ``Evaluator.evaluate``'s
  loop body on a given batch and returns the token accuracy (``model(**inputs)``, teacher forcing off); the declared ``loss_fn`` is the trainer's loss loop
  over the decoder's step outputs (``loss.eval_batch`` per step, the summed NLL ``acc_loss`` that is back-propagated).
"""
# ruff: noqa: C408, F841, PLR0402, RUF059, SIM102, SIM210, TRY004, UP004, UP008, UP030, UP032  (original style kept)

from __future__ import annotations

import functools
import itertools
import math
import pathlib
import random
import sys
from collections import Counter

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- seq2seq/models/baseRNN.py ----------------------------------------------------------------------------------

class BaseRNN(nn.Module):
    SYM_MASK = "MASK"
    SYM_EOS = "EOS"

    def __init__(self, vocab_size, max_len, hidden_size, input_dropout_p, dropout_p, n_layers, rnn_cell):
        super(BaseRNN, self).__init__()
        self.vocab_size = vocab_size
        self.max_len = max_len
        self.hidden_size = hidden_size
        self.n_layers = n_layers
        self.input_dropout_p = input_dropout_p
        self.input_dropout = nn.Dropout(p=input_dropout_p)
        if rnn_cell.lower() == 'lstm':
            self.rnn_cell = nn.LSTM
        elif rnn_cell.lower() == 'gru':
            self.rnn_cell = nn.GRU
        else:
            raise ValueError("Unsupported RNN Cell: {0}".format(rnn_cell))
        self.dropout_p = dropout_p

    def forward(self, *args, **kwargs):
        raise NotImplementedError()


# ---- seq2seq/models/EncoderRNN.py -------------------------------------------------------------------------------

class EncoderRNN(BaseRNN):
    def __init__(self, vocab_size, max_len, hidden_size,
                 input_dropout_p=0, dropout_p=0,
                 n_layers=1, bidirectional=False, rnn_cell='gru', variable_lengths=False,
                 embedding=None, update_embedding=True):
        super(EncoderRNN, self).__init__(vocab_size, max_len, hidden_size,
                input_dropout_p, dropout_p, n_layers, rnn_cell)

        self.variable_lengths = variable_lengths
        self.embedding = nn.Embedding(vocab_size, hidden_size)
        if embedding is not None:
            self.embedding.weight = nn.Parameter(embedding)
        self.embedding.weight.requires_grad = update_embedding
        self.rnn = self.rnn_cell(hidden_size, hidden_size, n_layers,
                                 batch_first=True, bidirectional=bidirectional, dropout=dropout_p)

    def forward(self, input_var, input_lengths=None):
        embedded = self.embedding(input_var)
        embedded = self.input_dropout(embedded)
        if self.variable_lengths:
            embedded = nn.utils.rnn.pack_padded_sequence(embedded, input_lengths, batch_first=True)
        output, hidden = self.rnn(embedded)
        if self.variable_lengths:
            output, _ = nn.utils.rnn.pad_packed_sequence(output, batch_first=True)
        return output, hidden


# ---- seq2seq/models/attention.py --------------------------------------------------------------------------------

class Attention(nn.Module):
    def __init__(self, dim):
        super(Attention, self).__init__()
        self.linear_out = nn.Linear(dim*2, dim)
        self.mask = None

    def set_mask(self, mask):
        self.mask = mask

    def forward(self, output, context):
        batch_size = output.size(0)
        hidden_size = output.size(2)
        input_size = context.size(1)
        # (batch, out_len, dim) * (batch, in_len, dim) -> (batch, out_len, in_len)
        attn = torch.bmm(output, context.transpose(1, 2))
        if self.mask is not None:
            attn.data.masked_fill_(self.mask, -float('inf'))
        attn = F.softmax(attn.view(-1, input_size), dim=1).view(batch_size, -1, input_size)

        # (batch, out_len, in_len) * (batch, in_len, dim) -> (batch, out_len, dim)
        mix = torch.bmm(attn, context)

        # concat -> (batch, out_len, 2*dim)
        combined = torch.cat((mix, output), dim=2)
        # output -> (batch, out_len, dim)
        output = F.tanh(self.linear_out(combined.view(-1, 2 * hidden_size))).view(batch_size, -1, hidden_size)

        return output, attn


# ---- seq2seq/models/DecoderRNN.py -------------------------------------------------------------------------------

class DecoderRNN(BaseRNN):
    KEY_ATTN_SCORE = 'attention_score'
    KEY_LENGTH = 'length'
    KEY_SEQUENCE = 'sequence'

    def __init__(self, vocab_size, max_len, hidden_size,
            sos_id, eos_id,
            n_layers=1, rnn_cell='gru', bidirectional=False,
            input_dropout_p=0, dropout_p=0, use_attention=False, bug=None):
        super(DecoderRNN, self).__init__(vocab_size, max_len, hidden_size,
                input_dropout_p, dropout_p,
                n_layers, rnn_cell)

        self.bidirectional_encoder = bidirectional
        self.rnn = self.rnn_cell(hidden_size, hidden_size, n_layers, batch_first=True, dropout=dropout_p)

        self.output_size = vocab_size
        self.max_length = max_len
        self.use_attention = use_attention
        self.eos_id = eos_id
        self.sos_id = sos_id
        self.bug = bug

        self.init_input = None

        self.embedding = nn.Embedding(self.output_size, self.hidden_size)
        if use_attention:
            self.attention = Attention(self.hidden_size)

        self.out = nn.Linear(self.hidden_size, self.output_size)

    def forward_step(self, input_var, hidden, encoder_outputs, function):
        batch_size = input_var.size(0)
        output_size = input_var.size(1)
        embedded = self.embedding(input_var)
        embedded = self.input_dropout(embedded)

        output, hidden = self.rnn(embedded, hidden)

        attn = None
        if self.use_attention:
            output, attn = self.attention(output, encoder_outputs)

        predicted_softmax = function(self.out(output.contiguous().view(-1, self.hidden_size)), dim=1).view(batch_size, output_size, -1)
        return predicted_softmax, hidden, attn

    def forward(self, inputs=None, encoder_hidden=None, encoder_outputs=None,
                    function=F.log_softmax, teacher_forcing_ratio=0):
        ret_dict = dict()
        if self.use_attention:
            ret_dict[DecoderRNN.KEY_ATTN_SCORE] = list()

        inputs, batch_size, max_length = self._validate_args(inputs, encoder_hidden, encoder_outputs,
                                                             function, teacher_forcing_ratio)
        decoder_hidden = self._init_state(encoder_hidden)

        use_teacher_forcing = True if random.random() < teacher_forcing_ratio else False

        decoder_outputs = []
        sequence_symbols = []
        lengths = np.array([max_length] * batch_size)

        def decode(step, step_output, step_attn):
            decoder_outputs.append(step_output)
            if self.use_attention:
                ret_dict[DecoderRNN.KEY_ATTN_SCORE].append(step_attn)
            symbols = decoder_outputs[-1].topk(1)[1]
            sequence_symbols.append(symbols)

            eos_batches = symbols.data.eq(self.eos_id)
            if eos_batches.dim() > 0:
                eos_batches = eos_batches.cpu().view(-1).numpy()
                update_idx = ((lengths > step) & eos_batches) != 0
                lengths[update_idx] = len(sequence_symbols)
            return symbols

        # Manual unrolling is used to support random teacher forcing.
        # If teacher_forcing_ratio is True or False instead of a probability, the unrolling can be done in graph
        if use_teacher_forcing:
            if self.bug == "teacher_forcing_not_shifted":
                # the decoder fed the target sequence without the <sos> shift: at each step it reads the very
                # token it has to predict
                decoder_input = inputs[:, 1:]
            else:
                decoder_input = inputs[:, :-1]
            decoder_output, decoder_hidden, attn = self.forward_step(decoder_input, decoder_hidden, encoder_outputs,
                                                                     function=function)

            for di in range(decoder_output.size(1)):
                step_output = decoder_output[:, di, :]
                if attn is not None:
                    step_attn = attn[:, di, :]
                else:
                    step_attn = None
                decode(di, step_output, step_attn)
        else:
            decoder_input = inputs[:, 0].unsqueeze(1)
            for di in range(max_length):
                decoder_output, decoder_hidden, step_attn = self.forward_step(decoder_input, decoder_hidden, encoder_outputs,
                                                                         function=function)
                step_output = decoder_output.squeeze(1)
                symbols = decode(di, step_output, step_attn)
                decoder_input = symbols

        ret_dict[DecoderRNN.KEY_SEQUENCE] = sequence_symbols
        ret_dict[DecoderRNN.KEY_LENGTH] = lengths.tolist()

        return decoder_outputs, decoder_hidden, ret_dict

    def _init_state(self, encoder_hidden):
        """ Initialize the encoder hidden state. """
        if encoder_hidden is None:
            return None
        if isinstance(encoder_hidden, tuple):
            encoder_hidden = tuple([self._cat_directions(h) for h in encoder_hidden])
        else:
            encoder_hidden = self._cat_directions(encoder_hidden)
        return encoder_hidden

    def _cat_directions(self, h):
        """ If the encoder is bidirectional, do the following transformation.
            (#directions * #layers, #batch, hidden_size) -> (#layers, #batch, #directions * hidden_size)
        """
        if self.bidirectional_encoder:
            if self.bug == "bidirectional_hidden_viewed":
                # the two directions merged with a view instead of a concatenation: each decoder row starts from
                # the hidden states of two different sequences of the batch
                h = h.view(h.size(0) // 2, h.size(1), h.size(2) * 2)
            else:
                h = torch.cat([h[0:h.size(0):2], h[1:h.size(0):2]], 2)
        return h

    def _validate_args(self, inputs, encoder_hidden, encoder_outputs, function, teacher_forcing_ratio):
        if self.use_attention:
            if encoder_outputs is None:
                raise ValueError("Argument encoder_outputs cannot be None when attention is used.")

        # inference batch size
        if inputs is None and encoder_hidden is None:
            batch_size = 1
        else:
            if inputs is not None:
                batch_size = inputs.size(0)
            else:
                if self.rnn_cell is nn.LSTM:
                    batch_size = encoder_hidden[0].size(1)
                elif self.rnn_cell is nn.GRU:
                    batch_size = encoder_hidden.size(1)

        # set default input and max decoding length
        if inputs is None:
            if teacher_forcing_ratio > 0:
                raise ValueError("Teacher forcing has to be disabled (set 0) when no inputs is provided.")
            inputs = torch.LongTensor([self.sos_id] * batch_size).view(batch_size, 1)
            max_length = self.max_length
        else:
            max_length = inputs.size(1) - 1 # minus the start of sequence symbol

        return inputs, batch_size, max_length


# ---- seq2seq/models/seq2seq.py ----------------------------------------------------------------------------------

class Seq2seq(nn.Module):
    def __init__(self, encoder, decoder, decode_function=F.log_softmax):
        super(Seq2seq, self).__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.decode_function = decode_function

    def flatten_parameters(self):
        self.encoder.rnn.flatten_parameters()
        self.decoder.rnn.flatten_parameters()

    def forward(self, input_variable, input_lengths=None, target_variable=None,
                teacher_forcing_ratio=0):
        encoder_outputs, encoder_hidden = self.encoder(input_variable, input_lengths)
        result = self.decoder(inputs=target_variable,
                              encoder_hidden=encoder_hidden,
                              encoder_outputs=encoder_outputs,
                              function=self.decode_function,
                              teacher_forcing_ratio=teacher_forcing_ratio)
        return result


# ---- seq2seq/loss/loss.py ---------------------------------------------------------------------------------------

class Loss(object):
    def __init__(self, name, criterion):
        self.name = name
        self.criterion = criterion
        if not issubclass(type(self.criterion), nn.modules.loss._Loss):
            raise ValueError("Criterion has to be a subclass of torch.nn._Loss")
        # accumulated loss
        self.acc_loss = 0
        # normalization term
        self.norm_term = 0

    def reset(self):
        """ Reset the accumulated loss. """
        self.acc_loss = 0
        self.norm_term = 0

    def get_loss(self):
        raise NotImplementedError

    def eval_batch(self, outputs, target):
        raise NotImplementedError

    def cuda(self):
        self.criterion.cuda()

    def backward(self):
        if type(self.acc_loss) is int:
            raise ValueError("No loss to back propagate.")
        self.acc_loss.backward()


class NLLLoss(Loss):
    _NAME = "Avg NLLLoss"

    def __init__(self, weight=None, mask=None, size_average=True):
        self.mask = mask
        self.size_average = size_average
        if mask is not None:
            if weight is None:
                raise ValueError("Must provide weight with a mask.")
            weight[mask] = 0

        super(NLLLoss, self).__init__(
            self._NAME,
            nn.NLLLoss(weight=weight, size_average=size_average))

    def get_loss(self):
        if isinstance(self.acc_loss, int):
            return 0
        # total loss for all batches
        loss = self.acc_loss.data.item()
        if self.size_average:
            # average loss per batch
            loss /= self.norm_term
        return loss

    def eval_batch(self, outputs, target):
        self.acc_loss += self.criterion(outputs, target)
        self.norm_term += 1


class Perplexity(NLLLoss):
    _NAME = "Perplexity"
    _MAX_EXP = 100

    def __init__(self, weight=None, mask=None):
        super(Perplexity, self).__init__(weight=weight, mask=mask, size_average=False)

    def eval_batch(self, outputs, target):
        self.acc_loss += self.criterion(outputs, target)
        if self.mask is None:
            self.norm_term += np.prod(target.size())
        else:
            self.norm_term += target.data.ne(self.mask).sum()

    def get_loss(self):
        nll = super(Perplexity, self).get_loss()
        nll /= self.norm_term.item()
        if nll > Perplexity._MAX_EXP:
            print("WARNING: Loss exceeded maximum value, capping to e^100")
            return math.exp(Perplexity._MAX_EXP)
        return math.exp(nll)


# ---- seq2seq/optim/optim.py -------------------------------------------------------------------------------------

class Optimizer(object):
    _ARG_MAX_GRAD_NORM = 'max_grad_norm'

    def __init__(self, optim, max_grad_norm=0):
        self.optimizer = optim
        self.scheduler = None
        self.max_grad_norm = max_grad_norm

    def set_scheduler(self, scheduler):
        self.scheduler = scheduler

    def step(self):
        """ Performs a single optimization step, including gradient norm clipping if necessary. """
        if self.max_grad_norm > 0:
            params = itertools.chain.from_iterable([group['params'] for group in self.optimizer.param_groups])
            torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        self.optimizer.step()

    def update(self, loss, epoch):
        if self.scheduler is None:
            pass
        elif isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            self.scheduler.step(loss)
        else:
            self.scheduler.step()


# ---- seq2seq/dataset/fields.py + torchtext, written out ---------------------------------------------------------

class Vocab(object):
    """torchtext's Vocab as ``Field.build_vocab`` makes it: specials <unk>, <pad> first, then by frequency."""

    def __init__(self, sequences):
        counter = Counter(tok for seq in sequences for tok in seq)
        self.itos = ['<unk>', '<pad>'] + sorted(counter, key=lambda tok: (-counter[tok], tok))
        self.stoi = {tok: i for i, tok in enumerate(self.itos)}

    def __len__(self):
        return len(self.itos)


class SourceField(object):
    pad_token = '<pad>'

    def build_vocab(self, examples):
        self.vocab = Vocab([src for src, _ in examples])

    def process(self, seqs):
        """batch_first=True, include_lengths=True: (padded ids, lengths)."""
        lengths = [len(s) for s in seqs]
        out = torch.full((len(seqs), max(lengths)), self.vocab.stoi[self.pad_token], dtype=torch.long)
        for i, s in enumerate(seqs):
            out[i, :len(s)] = torch.tensor([self.vocab.stoi.get(t, 0) for t in s])
        return out, torch.tensor(lengths)


class TargetField(object):
    """batch_first=True, <sos> and <eos> added around each sequence."""

    SYM_SOS = '<sos>'
    SYM_EOS = '<eos>'
    pad_token = '<pad>'

    def preprocessing(self, seq):
        return [self.SYM_SOS] + seq + [self.SYM_EOS]

    def build_vocab(self, examples):
        self.vocab = Vocab([self.preprocessing(tgt) for _, tgt in examples])
        self.sos_id = self.vocab.stoi[self.SYM_SOS]
        self.eos_id = self.vocab.stoi[self.SYM_EOS]

    def process(self, seqs):
        seqs = [self.preprocessing(s) for s in seqs]
        out = torch.full((len(seqs), max(len(s) for s in seqs)), self.vocab.stoi[self.pad_token], dtype=torch.long)
        for i, s in enumerate(seqs):
            out[i, :len(s)] = torch.tensor([self.vocab.stoi.get(t, 0) for t in s])
        return out


def generate_dataset(rng, size, max_len=10):
    """scripts/generate_toy_data.py: digit sequences of length 1..max_len and their reverse."""
    rows = []
    for _ in range(size):
        length = rng.randint(1, max_len)
        seq = []
        for _ in range(length):
            seq.append(str(rng.randint(0, 9)))
        rows.append((seq, list(reversed(seq))))
    return rows


class BucketIterator(object):
    """``torchtext.data.BucketIterator(sort=False, sort_within_batch=True, sort_key=len(src), repeat=False)``:
    shuffled each epoch when training, each batch sorted by source length, longest first."""

    def __init__(self, dataset, batch_size, src, tgt, rng, train=True):
        self.dataset, self.batch_size, self.src, self.tgt, self.rng, self.train = (
            dataset, batch_size, src, tgt, rng, train)

    def __len__(self):
        return math.ceil(len(self.dataset) / self.batch_size)

    def __iter__(self):
        order = list(range(len(self.dataset)))
        if self.train:
            self.rng.shuffle(order)
        for start in range(0, len(order), self.batch_size):
            minibatch = [self.dataset[i] for i in order[start:start + self.batch_size]]
            minibatch = sorted(minibatch, key=lambda ex: len(ex[0]), reverse=True)
            yield {'src': self.src.process([ex[0] for ex in minibatch]),
                   'tgt': self.tgt.process([ex[1] for ex in minibatch])}


# ---- examples/sample.py + seq2seq/trainer/supervised_trainer.py -------------------------------------------------

def _build(seed, bug=None):
    data_rng = random.Random(seed)
    train_rows = generate_dataset(data_rng, 2000)
    dev_rows = generate_dataset(data_rng, 200)

    # Prepare dataset
    src = SourceField()
    tgt = TargetField()
    max_len = 50
    def len_filter(example):
        return len(example[0]) <= max_len and len(example[1]) <= max_len
    train = [ex for ex in train_rows if len_filter(ex)]
    dev = [ex for ex in dev_rows if len_filter(ex)]
    src.build_vocab(train)
    tgt.build_vocab(train)
    input_vocab = src.vocab
    output_vocab = tgt.vocab

    # Prepare loss
    weight = torch.ones(len(tgt.vocab))
    pad = tgt.vocab.stoi[tgt.pad_token]
    if bug == "pad_not_masked":
        # Perplexity built without the padding mask (the loss's pad handling discussed in
        # https://github.com/IBM/pytorch-seq2seq/issues/144): every <pad> after a short target is a training target
        loss = Perplexity(weight)
    else:
        loss = Perplexity(weight, pad)

    # train (SupervisedTrainer.__init__: seeds random and torch, here with the build's seed)
    random.seed(seed)
    torch.manual_seed(seed)
    batch_size = 32
    teacher_forcing_ratio = 0.5

    # Initialize model
    hidden_size=32
    bidirectional = True
    encoder = EncoderRNN(len(src.vocab), max_len, hidden_size,
                         bidirectional=bidirectional, variable_lengths=True)
    decoder = DecoderRNN(len(tgt.vocab), max_len, hidden_size * 2 if bidirectional else hidden_size,
                         dropout_p=0.2, use_attention=True, bidirectional=bidirectional,
                         eos_id=tgt.eos_id, sos_id=tgt.sos_id, bug=bug)
    seq2seq = Seq2seq(encoder, decoder)

    for param in seq2seq.parameters():
        param.data.uniform_(-0.08, 0.08)

    # SupervisedTrainer.train: the default optimizer
    optimizer = Optimizer(optim.Adam(seq2seq.parameters()), max_grad_norm=5)
    model = seq2seq

    def _train_batch(input_variable, input_lengths, target_variable, model, teacher_forcing_ratio):
        # Forward propagation
        decoder_outputs, decoder_hidden, other = model(input_variable, input_lengths, target_variable,
                                                       teacher_forcing_ratio=teacher_forcing_ratio)
        # Get loss
        loss.reset()
        for step, step_output in enumerate(decoder_outputs):
            batch_size = target_variable.size(0)
            loss.eval_batch(step_output.contiguous().view(batch_size, -1), target_variable[:, step + 1])
        # Backward propagation
        model.zero_grad()
        loss.backward()
        optimizer.step()

        return loss.get_loss()

    batch_iterator = BucketIterator(train, batch_size, src, tgt, random.Random(seed + 1))
    state = {"generator": None}

    def train_step():
        """One batch of SupervisedTrainer._train_epoches."""
        try:
            batch = next(state["generator"])
        except (StopIteration, TypeError):
            state["generator"] = batch_iterator.__iter__()
            model.train(True)
            batch = next(state["generator"])
        input_variables, input_lengths = batch['src']
        target_variables = batch['tgt']
        return _train_batch(input_variables, input_lengths.tolist(), target_variables, model, teacher_forcing_ratio)

    def eval_fn(model, batch):
        """Evaluator.evaluate's loop body on one batch: the token accuracy."""
        model.eval()
        inputs, target_variables = batch
        match = 0
        total = 0
        with torch.no_grad():
            decoder_outputs, decoder_hidden, other = model(**inputs)
            seqlist = other['sequence']
            for step, step_output in enumerate(decoder_outputs):
                target = target_variables[:, step + 1]
                non_padding = target.ne(pad)
                correct = seqlist[step].view(-1).eq(target).masked_select(non_padding).sum().item()
                match += correct
                total += non_padding.sum().item()
        return match / total if total else float('nan')

    def loss_fn(outputs, target_variable):
        decoder_outputs, decoder_hidden, other = outputs
        loss.reset()
        for step, step_output in enumerate(decoder_outputs):
            batch_size = target_variable.size(0)
            loss.eval_batch(step_output.contiguous().view(batch_size, -1), target_variable[:, step + 1])
        return loss.acc_loss

    first = next(iter(BucketIterator(train, batch_size, src, tgt, None, train=False)))
    batch = ({"input_variable": first['src'][0], "input_lengths": first['src'][1].tolist(),
              "target_variable": first['tgt']}, first['tgt'])
    return Program(name="ibmseq2seq_attention", model=model, batch=batch, loss_fn=loss_fn,
                   optimizer=optimizer.optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build)

BUGS = [
    # The Perplexity loss built without its padding mask (the loss's pad handling is the subject of
    # https://github.com/IBM/pytorch-seq2seq/issues/144): <pad> positions after every short target are learned.
    Bug("pad_not_masked", functools.partial(_build, bug="pad_not_masked"), "learning_ledger", ("OBJECTIVE",)),
    # Teacher forcing fed inputs[:, 1:] instead of inputs[:, :-1] (classic): the decoder reads the token it predicts.
    Bug("teacher_forcing_not_shifted", functools.partial(_build, bug="teacher_forcing_not_shifted"),
        "learning_ledger", ("TASK",)),
    # The bidirectional encoder's final states merged by a view instead of a concatenation of the two directions
    # (classic layout slip): the decoder's initial state mixes two sequences of the batch.
    Bug("bidirectional_hidden_viewed", functools.partial(_build, bug="bidirectional_hidden_viewed"), "tensor_trace",
        ("decoder",)),
]
