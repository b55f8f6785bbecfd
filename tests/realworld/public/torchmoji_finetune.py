"""torchMoji (the PyTorch DeepMoji) fine-tuned on a binary sentiment benchmark as ``examples/finetune_youtube_last.py``
runs it through ``torchmoji.finetuning.finetune``: ``torchmoji_transfer(nb_classes=2)`` (embedding with tanh and
``Dropout2d``, two bidirectional hard-sigmoid LSTMs over packed sequences sorted by length, attention over the
concatenated LSTM outputs and embeddings with a length mask, final dropout, one logit), ``BCEWithLogitsLoss`` through
``calc_loss``, Adam with the 'full'/'new' parameter groups (L2 ``embed_l2`` on the embedding, the output layer at lr
1e-3), ``DeepMojiBatchSampler`` drawing ``epoch_size`` random examples per epoch, and ``fit_model``'s step
(``model.train()``, zero_grad, loss, backward, ``clip_grad_norm(1)``, step, then the batch's accuracy through
``evaluate_using_acc``, which leaves the model in eval mode).

Source: https://github.com/huggingface/torchMoji
Commit: 9dd01df645dd84b3645633f55067c0bbcac90011
Files: examples/finetune_youtube_last.py, torchmoji/model_def.py, torchmoji/finetuning.py, torchmoji/lstm.py,
torchmoji/attlayer.py, torchmoji/global_variables.py
License: MIT (Copyright (c) 2017 Bjarke Felbo, Han Thi Nguyen, Thomas Wolf; full text in
LICENSES/huggingface-torchMoji.txt)
Domain: text classification (fine-tuning an LSTM-attention sentence encoder, packed variable-length batches)

Deviations from the original:
- no pretrained weights are downloaded: the example's ``method='last'`` (which freezes everything but the output
  layer of a pretrained model) becomes ``method='new'``, the library's method for a model without pretrained weights
  (``torchmoji_transfer(nb_classes, weight_path=None)``, lr 1e-3, the same parameter groups as 'full');
- sizes for 2 CPU cores: embedding_dim 256 -> 16, hidden_size 512 -> 16 (written in ``TorchMoji.__init__``),
  NB_TOKENS 50000 -> 64, batch_size 250 -> 32, epoch_size 5000 -> 960;
- data: SS-Youtube is replaced by synthetic token sequences made from ``seed`` (4 to 12 ids in 1-32, 0 is padding at
  the end as the tokenizer pads): the label is 1 when the sequence holds more of the tokens 1-8 than of 9-16;
- torch 0.3 idioms: ``Variable`` wrappers dropped; ``TorchMoji.forward``'s return-format adaptation is dropped (on
  current torch the ``Variable`` given by ``fit_model`` is a ``LongTensor``, so the branch meant for raw tensors
  would return ``outputs.data`` and cut the graph); ``nn.init.uniform``/``xavier_uniform``/``orthogonal``/
  ``constant`` and ``clip_grad_norm`` are their in-place ``_`` forms;
  ``nn.Dropout2d`` on the packed 2-D embeddings is kept as written (current torch applies it element-wise, with a
  deprecation warning);
- left out as unused here: the weight loading (``load_specific_weights``, no weights), ``DeepMojiBatchSampler``'s
  upsample branch (``upsample=False`` as called), the multi-class branch's ``sklearn`` ``accuracy_score`` (written as a
  mean of matches), the other finetuning methods and metrics;
- one ``train_step`` is one iteration of ``fit_model``'s inner loop; the epoch-end validation, checkpointing, early
  stopping and prints are left out; ``eval_fn`` is ``evaluate_using_acc`` on a given batch.
"""
# ruff: noqa: UP008

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn, optim
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.sampler import BatchSampler, SequentialSampler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _torchmoji_finetune_lib import Attention, LSTMHardSigmoid

NB_TOKENS = 64
EPOCH_SIZE = 960
BATCH_SIZE = 32


# ---- torchmoji/model_def.py ---------------------------------------------------------------------------------------

def torchmoji_transfer(nb_classes, weight_path=None, extend_embedding=0,
                      embed_dropout_rate=0.1, final_dropout_rate=0.5, bug=None):
    model = TorchMoji(nb_classes=nb_classes,
                     nb_tokens=NB_TOKENS + extend_embedding,
                     embed_dropout_rate=embed_dropout_rate,
                     final_dropout_rate=final_dropout_rate,
                     output_logits=True, bug=bug)
    return model


class TorchMoji(nn.Module):
    def __init__(self, nb_classes, nb_tokens, feature_output=False, output_logits=False,
                 embed_dropout_rate=0, final_dropout_rate=0, return_attention=False, bug=None):
        super(TorchMoji, self).__init__()

        embedding_dim = 16
        hidden_size = 16
        attention_size = 4 * hidden_size + embedding_dim

        self.feature_output = feature_output
        self.embed_dropout_rate = embed_dropout_rate
        self.final_dropout_rate = final_dropout_rate
        self.return_attention = return_attention
        self.hidden_size = hidden_size
        self.output_logits = output_logits
        self.nb_classes = nb_classes
        self.bug = bug

        self.add_module('embed', nn.Embedding(nb_tokens, embedding_dim))
        # dropout2D: embedding channels are dropped out instead of words
        # many exampels in the datasets contain few words that losing one or more words can alter the emotions completely
        self.add_module('embed_dropout', nn.Dropout2d(embed_dropout_rate))
        self.add_module('lstm_0', LSTMHardSigmoid(embedding_dim, hidden_size, batch_first=True, bidirectional=True))
        self.add_module('lstm_1', LSTMHardSigmoid(hidden_size*2, hidden_size, batch_first=True, bidirectional=True))
        self.add_module('attention_layer', Attention(attention_size=attention_size, return_attention=return_attention))
        if not feature_output:
            self.add_module('final_dropout', nn.Dropout(final_dropout_rate))
            if output_logits:
                self.add_module('output_layer', nn.Sequential(nn.Linear(attention_size, nb_classes if self.nb_classes > 2 else 1)))
            else:
                self.add_module('output_layer', nn.Sequential(nn.Linear(attention_size, nb_classes if self.nb_classes > 2 else 1),
                                                              nn.Softmax() if self.nb_classes > 2 else nn.Sigmoid()))
        self.init_weights()
        # Put model in evaluation mode by default
        self.eval()

    def init_weights(self):
        """
        Here we reproduce Keras default initialization weights for consistency with Keras version
        """
        ih = (param.data for name, param in self.named_parameters() if 'weight_ih' in name)
        hh = (param.data for name, param in self.named_parameters() if 'weight_hh' in name)
        b = (param.data for name, param in self.named_parameters() if 'bias' in name)
        nn.init.uniform_(self.embed.weight.data, a=-0.5, b=0.5)
        for t in ih:
            nn.init.xavier_uniform_(t)
        for t in hh:
            nn.init.orthogonal_(t)
        for t in b:
            nn.init.constant_(t, 0)
        if not self.feature_output:
            nn.init.xavier_uniform_(self.output_layer[0].weight.data)

    def forward(self, input_seqs):
        # If we don't have a packed inputs, let's pack it
        reorder_output = False
        if not isinstance(input_seqs, PackedSequence):
            ho = self.lstm_0.weight_hh_l0.data.new(2, input_seqs.size()[0], self.hidden_size).zero_()
            co = self.lstm_0.weight_hh_l0.data.new(2, input_seqs.size()[0], self.hidden_size).zero_()
            # Reorder batch by sequence length
            input_lengths = torch.LongTensor([torch.max(input_seqs[i, :].data.nonzero()) + 1 for i in range(input_seqs.size()[0])])
            input_lengths, perm_idx = input_lengths.sort(0, descending=True)
            input_seqs = input_seqs[perm_idx][:, :input_lengths.max()]
            # Pack sequence and work on data tensor to reduce embeddings/dropout computations
            packed_input = pack_padded_sequence(input_seqs, input_lengths.cpu().numpy(), batch_first=True)
            reorder_output = True
        else:
            ho = self.lstm_0.weight_hh_l0.data.data.new(2, input_seqs.size()[0], self.hidden_size).zero_()
            co = self.lstm_0.weight_hh_l0.data.data.new(2, input_seqs.size()[0], self.hidden_size).zero_()
            input_lengths = input_seqs.batch_sizes
            packed_input = input_seqs

        hidden = (ho, co)
        # Embed with an activation function to bound the values of the embeddings
        x = self.embed(packed_input.data)
        x = nn.Tanh()(x)
        # pyTorch 2D dropout2d operate on axis 1 which is fine for us
        x = self.embed_dropout(x)
        # Update packed sequence data for RNN
        packed_input = PackedSequence(x, packed_input.batch_sizes)
        # skip-connection from embedding to output eases gradient-flow and allows access to lower-level features
        # ordering of the way the merge is done is important for consistency with the pretrained model
        lstm_0_output, _ = self.lstm_0(packed_input, hidden)
        lstm_1_output, _ = self.lstm_1(lstm_0_output, hidden)
        # Update packed sequence data for attention layer
        packed_input = PackedSequence(torch.cat((lstm_1_output.data,
                                                 lstm_0_output.data,
                                                 packed_input.data), dim=1),
                                      packed_input.batch_sizes)

        input_seqs, _ = pad_packed_sequence(packed_input, batch_first=True)

        x, att_weights = self.attention_layer(input_seqs, input_lengths)
        # output class probabilities or penultimate feature vector
        if not self.feature_output:
            x = self.final_dropout(x)
            outputs = self.output_layer(x)
        else:
            outputs = x
        # Reorder output if needed
        if reorder_output and self.bug != "output_not_reordered":
            reorered = outputs.data.new(outputs.size())
            reorered[perm_idx] = outputs
            outputs = reorered

        if self.return_attention:
            return outputs, att_weights
        else:
            return outputs


# ---- torchmoji/finetuning.py --------------------------------------------------------------------------------------

def calc_loss(loss_op, pred, yv):
    if type(loss_op) is nn.CrossEntropyLoss:
        return loss_op(pred.squeeze(), yv.squeeze())
    else:
        return loss_op(pred.squeeze(), yv.squeeze().float())


def evaluate_using_acc(model, test_gen):
    # Validate on test_data
    model.eval()
    accs = []
    for i, data in enumerate(test_gen):
        x, y = data
        outs = model(x)
        if model.nb_classes > 2:
            pred = torch.max(outs, 1)[1]
            acc = float((pred.squeeze() == y.squeeze()).double().mean())
        else:
            pred = (outs >= 0).long()
            acc = (pred == y).double().sum() / len(pred)
        accs.append(acc)
    return np.mean(accs)


def get_data_loader(X_in, y_in, batch_size, extended_batch_sampler=True, epoch_size=25000, upsample=False, seed=42):
    dataset = DeepMojiDataset(X_in, y_in)

    if extended_batch_sampler:
        batch_sampler = DeepMojiBatchSampler(y_in, batch_size, epoch_size=epoch_size, upsample=upsample, seed=seed)
    else:
        batch_sampler = BatchSampler(SequentialSampler(y_in), batch_size, drop_last=False)

    return DataLoader(dataset, batch_sampler=batch_sampler, num_workers=0)


class DeepMojiDataset(Dataset):
    def __init__(self, X_in, y_in):
        # Check if we have Torch.LongTensor inputs (assume Numpy array otherwise)
        if not isinstance(X_in, torch.LongTensor):
            X_in = torch.from_numpy(X_in.astype('int64')).long()
        if not isinstance(y_in, torch.LongTensor):
            y_in = torch.from_numpy(y_in.astype('int64')).long()

        self.X_in = torch.split(X_in, 1, dim=0)
        self.y_in = torch.split(y_in, 1, dim=0)

    def __len__(self):
        return len(self.X_in)

    def __getitem__(self, idx):
        return self.X_in[idx].squeeze(), self.y_in[idx].squeeze()


class DeepMojiBatchSampler:
    def __init__(self, y_in, batch_size, epoch_size, upsample, seed):
        self.batch_size = batch_size
        self.epoch_size = epoch_size
        self.upsample = upsample

        np.random.seed(seed)

        ind = range(len(y_in))

        # Randomly sample observations in a balanced way
        self.sample_ind = np.random.choice(ind, epoch_size, replace=True)

    def __iter__(self):
        # Hand-off data using batch_size
        for i in range(int(self.epoch_size/self.batch_size)):
            start = i * self.batch_size
            end = min(start + self.batch_size, self.epoch_size)
            yield self.sample_ind[start:end]

    def __len__(self):
        # Take care of the last (maybe incomplete) batch
        return (self.epoch_size + self.batch_size - 1) // self.batch_size


def make_benchmark(seed, n):
    """Token sequences of 4-12 ids (1..32), zero-padded to 12; label 1 when tokens 1-8 outnumber tokens 9-16."""
    rng = np.random.RandomState(seed)
    X = np.zeros((n, 12), dtype='int64')
    y = np.zeros(n, dtype='int64')
    for i in range(n):
        length = rng.randint(4, 13)
        X[i, :length] = rng.randint(1, 33, size=length)
        pos, neg = ((X[i] >= 1) & (X[i] <= 8)).sum(), ((X[i] >= 9) & (X[i] <= 16)).sum()
        if pos == neg:
            X[i, 0] = rng.randint(1, 17)
            pos, neg = ((X[i] >= 1) & (X[i] <= 8)).sum(), ((X[i] >= 9) & (X[i] <= 16)).sum()
        y[i] = int(pos > neg)
    return X, y


def finetune_optimizer(model, lr, embed_l2, bug=None):
    """``finetune``'s optimizer for the 'full' and 'new' methods."""
    # Add L2 regulation on embeddings only
    embed_params_id = [id(p) for p in model.embed.parameters()]
    output_layer_params_id = [id(p) for p in model.output_layer.parameters()]
    base_params = [p for p in model.parameters()
                   if id(p) not in embed_params_id and id(p) not in output_layer_params_id and p.requires_grad]
    embed_params = [p for p in model.parameters() if id(p) in embed_params_id and p.requires_grad]
    output_layer_params = [p for p in model.parameters() if id(p) in output_layer_params_id and p.requires_grad]
    groups = [
        {'params': base_params},
        {'params': embed_params, 'weight_decay': embed_l2},
        {'params': output_layer_params, 'lr': 0.001},
        ]
    if bug == "output_layer_group_dropped":
        groups = groups[:2]  # the output layer's group left out of the list
    adam = optim.Adam(groups, lr=lr)
    return adam


def _build(seed, bug=None):
    torch.manual_seed(seed)
    nb_classes = 2
    X, y = make_benchmark(seed, 1200)
    texts, labels = [X[:1000], X[1000:1100], X[1100:]], [y[:1000], y[1000:1100], y[1100:]]
    method, embed_l2 = 'new', 1E-6

    model = torchmoji_transfer(nb_classes, None, bug=bug)

    # finetune(): loaders, lr by method, loss, optimizer
    train_gen = get_data_loader(texts[0], labels[0], BATCH_SIZE,
                                extended_batch_sampler=True, epoch_size=EPOCH_SIZE, seed=seed)
    if method in ['last', 'new']:
        lr = 0.001
    elif method in ['full', 'chain-thaw']:
        lr = 0.0001

    loss_op = nn.BCEWithLogitsLoss() if nb_classes <= 2 \
         else nn.CrossEntropyLoss()

    adam = finetune_optimizer(model, lr, embed_l2, bug)

    state = {'it': iter(train_gen)}

    def next_batch():
        try:
            return next(state['it'])
        except StopIteration:
            state['it'] = iter(train_gen)
            return next(state['it'])

    def train_step():
        # fit_model(): one step of the inner loop
        X_train, y_train = next_batch()
        if bug != "trained_in_eval_mode":
            model.train()
        adam.zero_grad()
        output = model(X_train)
        loss = calc_loss(loss_op, output, y_train)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1)
        adam.step()

        evaluate_using_acc(model, [(X_train.data, y_train.data)])
        return loss.detach()

    def eval_fn(model, batch):
        with torch.no_grad():
            return float(evaluate_using_acc(model, [batch]))

    first = next(iter(get_data_loader(texts[0], labels[0], BATCH_SIZE, extended_batch_sampler=False)))
    return Program(name="torchmoji_finetune", model=model, batch=first,
                   loss_fn=lambda output, target: calc_loss(loss_op, output, target), optimizer=adam,
                   train_step=train_step, eval_fn=eval_fn, loader=train_gen, task="classification")


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the forward sorts the batch by length for packing and the scatter back to the input order is left out:
    # each prediction is scored against the label of another sentence.
    Bug("output_not_reordered", functools.partial(_build, bug="output_not_reordered"), "learning_ledger", ("TASK",)),
    # classic: ``model.train()`` left out of the step: the model, built in eval mode and put back in eval mode by the
    # step's own ``evaluate_using_acc``, trains with both dropouts off.
    Bug("trained_in_eval_mode", functools.partial(_build, bug="trained_in_eval_mode"), "step_probe",
        ("embed_dropout",), kind="step.trained_in_eval_mode"),
    # classic: the output layer's parameter group left out of Adam's list: the classifier keeps its initial weights.
    Bug("output_layer_group_dropped", functools.partial(_build, bug="output_layer_group_dropped"), "four_structures",
        ("output_layer",)),
]
