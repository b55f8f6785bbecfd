# ruff: noqa: UP008, TRY002
"""A Structured Self-Attentive Sentence Embedding (Lin et al., 2017), kaushalshetty/Structured-Self-Attention,
binary classification (IMDB): word embeddings, a one-layer LSTM, ``r`` attention hops
``softmax(W2 tanh(W1 H))`` over the timesteps, the hops' sentence embeddings averaged, a sigmoid output; BCELoss
in double precision plus ``C`` times the Frobenius penalty ``||A A^T - I||`` over the batch, gradient clipping at
0.5, RMSprop.

Source: https://github.com/kaushalshetty/Structured-Self-Attention
Commit: 84ed64f9cee75f84a5d871a46508a308182e4a6d
Files: attention/model.py, attention/train.py, classification.py, utils/data_loader.py, config.json,
model_params.json
License: MIT (Copyright (c) 2019 Kaushal Shetty; full text in LICENSES/kaushalshetty-Structured-Self-Attention.txt)
Domain: text classification (sentiment, binary; self-attentive LSTM sentence embedding with the penalization term)

Kept as written: ``StructuredSelfAttention`` (its own ``softmax`` over axis 1 by transposes and an implicit-dim
``F.softmax``, ``init_hidden`` with ``Variable`` zeros, the ``view(self.batch_size, self.max_len, -1)``, the sum of
the hops divided by ``r``, ``F.sigmoid`` output for ``type=0``, ``l2_matrix_norm`` returning a DoubleTensor),
``train``'s loop body for binary classification with regularization (``init_hidden`` per batch, the penalty with the
identity expanded to ``train_loader.batch_size``, ``criterion(y_pred.type(torch.DoubleTensor).squeeze(1) + 1e-8,
y) + C * penal / train_loader.batch_size``, zero_grad, backward, ``clip_grad_norm(..., 0.5)``, step),
``binary_classfication``'s ``BCELoss`` and ``RMSprop(attention_model.parameters())`` at its defaults,
``config.json`` (C 0.03, clip, 10 attention hops, no GloVe), ``model_params.json``'s LSTM 50 and ``d_a`` 100,
``load_data_set``'s binary branch (the last 1000 reviews held out, a ``drop_last`` loader without shuffling, labels
as DoubleTensor), ``evaluate``.

Deviations from the original:
- data: keras' IMDB download is replaced by synthetic reviews from ``seed`` (word ids with ``INDEX_FROM`` 3, a
  sentiment set by the balance of a few positive and negative cue words among neutral ones), 1400 reviews of
  which the last 400 are held out (1000 in the original); keras' ``pad_sequences`` (pre-padding and
  pre-truncation with 0) is written out in numpy;
- sizes for 2 CPU cores: ``batch_size`` 512 -> 32, ``timesteps`` 200 -> 32, ``vocab_size`` 20000 -> 300; the
  embedding dimension 100, the LSTM's 50, ``d_a`` 100 and ``r`` 10 kept;
- ``train_step`` is one iteration of ``train``'s inner loop (a new epoch restarts the loader), returning the loss;
  the accuracy bookkeeping and prints are dropped; ``eval_fn`` is ``evaluate`` on the held-out reviews, which sets
  ``attention_model.batch_size`` to the test size: the port restores the training batch size afterwards;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.data as data_utils
from torch.autograd import Variable

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# config.json, model_params.json
params_set = {"epochs": 2, "use_regularization": True, "C": 0.03, "clip": True, "use_embeddings": False,
              "attention_hops": 10}
model_params = {"batch_size": 32, "vocab_size": 300, "timesteps": 32, "lstm_hidden_dimension": 50,
                "d_a": 100}  # (port) 512, 20000, 200


# attention/model.py
class StructuredSelfAttention(torch.nn.Module):
    """
    The class is an implementation of the paper A Structured Self-Attentive Sentence Embedding including regularization
    and without pruning. Slight modifications have been done for speedup
    """

    def __init__(self,batch_size,lstm_hid_dim,d_a,r,max_len,emb_dim=100,vocab_size=None,use_pretrained_embeddings = False,embeddings=None,type=0,n_classes = 1):
        super(StructuredSelfAttention,self).__init__()

        self.embeddings,emb_dim = self._load_embeddings(use_pretrained_embeddings,embeddings,vocab_size,emb_dim)
        self.lstm = torch.nn.LSTM(emb_dim,lstm_hid_dim,1,batch_first=True)
        self.linear_first = torch.nn.Linear(lstm_hid_dim,d_a)
        self.linear_first.bias.data.fill_(0)
        self.linear_second = torch.nn.Linear(d_a,r)
        self.linear_second.bias.data.fill_(0)
        self.n_classes = n_classes
        self.linear_final = torch.nn.Linear(lstm_hid_dim,self.n_classes)
        self.batch_size = batch_size
        self.max_len = max_len
        self.lstm_hid_dim = lstm_hid_dim
        self.hidden_state = self.init_hidden()
        self.r = r
        self.type = type

    def _load_embeddings(self,use_pretrained_embeddings,embeddings,vocab_size,emb_dim):
        """Load the embeddings based on flag"""

        if use_pretrained_embeddings is True and embeddings is None:
            raise Exception("Send a pretrained word embedding as an argument")

        if not use_pretrained_embeddings and vocab_size is None:
            raise Exception("Vocab size cannot be empty")

        if not use_pretrained_embeddings:
            word_embeddings = torch.nn.Embedding(vocab_size,emb_dim,padding_idx=0)

        elif use_pretrained_embeddings:
            word_embeddings = torch.nn.Embedding(embeddings.size(0), embeddings.size(1))
            word_embeddings.weight = torch.nn.Parameter(embeddings)
            emb_dim = embeddings.size(1)

        return word_embeddings,emb_dim

    def softmax(self,input, axis=1):
        """
        Softmax applied to axis=n
        """

        input_size = input.size()
        trans_input = input.transpose(axis, len(input_size)-1)
        trans_size = trans_input.size()
        input_2d = trans_input.contiguous().view(-1, trans_size[-1])
        soft_max_2d = F.softmax(input_2d)
        soft_max_nd = soft_max_2d.view(*trans_size)
        return soft_max_nd.transpose(axis, len(input_size)-1)

    def init_hidden(self):
        return (Variable(torch.zeros(1,self.batch_size,self.lstm_hid_dim)),Variable(torch.zeros(1,self.batch_size,self.lstm_hid_dim)))

    def forward(self,x):
        embeddings = self.embeddings(x)
        outputs, self.hidden_state = self.lstm(embeddings.view(self.batch_size,self.max_len,-1),self.hidden_state)
        x = F.tanh(self.linear_first(outputs))
        x = self.linear_second(x)
        x = self.softmax(x,1)
        attention = x.transpose(1,2)
        sentence_embeddings = attention@outputs
        avg_sentence_embeddings = torch.sum(sentence_embeddings,1)/self.r

        if not bool(self.type):
            output = F.sigmoid(self.linear_final(avg_sentence_embeddings))

            return output,attention
        else:
            return F.log_softmax(self.linear_final(avg_sentence_embeddings)),attention

    #Regularization
    def l2_matrix_norm(self,m):
        """
        Frobenius norm calculation
        """
        return torch.sum(torch.sum(torch.sum(m**2,1),1)**0.5).type(torch.DoubleTensor)


# ------------------------------------------------------------------------------------------- (port) data
def pad_sequences(seqs, maxlen):
    """keras' pad_sequences at its defaults: pre-padding and pre-truncation with 0, int32."""
    out = np.zeros((len(seqs), maxlen), dtype=np.int32)
    for i, s in enumerate(seqs):
        s = s[-maxlen:]
        out[i, maxlen - len(s):] = s
    return out


def synthetic_imdb(rng, n, vocab_size, INDEX_FROM=3):
    """Reviews as lists of word ids (1 = <START>); positive iff positive cue words outnumber negative ones."""
    pos_cues = np.arange(INDEX_FROM + 1, INDEX_FROM + 9)
    neg_cues = np.arange(INDEX_FROM + 9, INDEX_FROM + 17)
    xs, ys = [], []
    for _ in range(n):
        length = rng.integers(12, 45)
        words = rng.integers(INDEX_FROM + 17, vocab_size, size=length)
        label = int(rng.random() < 0.5)
        n_major, n_minor = rng.integers(2, 5), rng.integers(0, 2)
        major, minor = (pos_cues, neg_cues) if label else (neg_cues, pos_cues)
        for w in list(rng.choice(major, n_major)) + list(rng.choice(minor, n_minor)):
            words[rng.integers(length)] = w
        xs.append([1] + [int(w) for w in words])
        ys.append(label)
    return np.array(xs, dtype=object), np.array(ys, dtype=np.int64)


def load_data_set(rng, max_len, vocab_size, batch_size, bug=None):
    """utils/data_loader.py, the binary (type 0) branch."""
    INDEX_FROM=3
    x, y = synthetic_imdb(rng, 1400, vocab_size, INDEX_FROM)  # (port) imdb.load_data, concatenated
    word_to_id = {"w%d" % i: i for i in range(INDEX_FROM, vocab_size)}  # noqa: UP031
    word_to_id["<PAD>"] = 0
    word_to_id["<START>"] = 1
    word_to_id["<UNK>"] = 2
    n_train = x.shape[0] - 400  # (port) 1000
    n_valid = 400

    x_train = x[:n_train]
    y_train = y[:n_train]
    if bug == "labels_from_other_rows":
        y_train = y[n_valid:n_valid + n_train]
    x_test = x[n_train:n_train+n_valid]
    y_test = y[n_train:n_train+n_valid]

    x_train_pad = pad_sequences(x_train,maxlen=max_len)
    x_test_pad = pad_sequences(x_test,maxlen=max_len)

    train_data = data_utils.TensorDataset(torch.from_numpy(x_train_pad).type(torch.LongTensor),torch.from_numpy(y_train).type(torch.DoubleTensor))
    train_loader = data_utils.DataLoader(train_data,batch_size=batch_size,drop_last=True)
    return train_loader,x_test_pad,y_test,word_to_id


# attention/train.py
def evaluate(attention_model,x_test,y_test):
    """
        cv results
    """

    attention_model.batch_size = x_test.shape[0]
    attention_model.hidden_state = attention_model.init_hidden()
    x_test_var = Variable(torch.from_numpy(x_test).type(torch.LongTensor))
    y_test_pred,_ = attention_model(x_test_var)
    if bool(attention_model.type):
        y_preds = torch.max(y_test_pred,1)[1]
        y_test_var = Variable(torch.from_numpy(y_test).type(torch.LongTensor))

    else:
        y_preds = torch.round(y_test_pred.type(torch.DoubleTensor).squeeze(1))
        y_test_var = Variable(torch.from_numpy(y_test).type(torch.DoubleTensor))

    return torch.eq(y_preds,y_test_var).data.sum()/x_test_var.size(0)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    MAXLENGTH = model_params['timesteps']
    train_loader,x_test_pad,y_test,word_to_id = load_data_set(rng,MAXLENGTH,model_params["vocab_size"],model_params['batch_size'],bug=bug)
    embeddings = None
    attention_model = StructuredSelfAttention(batch_size=train_loader.batch_size,lstm_hid_dim=model_params['lstm_hidden_dimension'],d_a = model_params["d_a"],r=params_set["attention_hops"],vocab_size=len(word_to_id),max_len=MAXLENGTH,type=0,n_classes=1,use_pretrained_embeddings=params_set["use_embeddings"],embeddings=embeddings)

    # binary_classfication
    if bug == "bce_with_logits_on_sigmoid":
        loss = torch.nn.BCEWithLogitsLoss()
    else:
        loss = torch.nn.BCELoss()
    optimizer = torch.optim.RMSprop(attention_model.parameters())
    criterion = loss
    use_regularization, C, clip = params_set["use_regularization"], params_set["C"], params_set["clip"]
    state = {"it": iter(train_loader)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        train = next_batch()
        attention_model.hidden_state = attention_model.init_hidden()
        x,y = Variable(train[0]),Variable(train[1])
        y_pred,att = attention_model(x)

        #penalization AAT - I
        if use_regularization:
            attT = att.transpose(1,2)
            identity = torch.eye(att.size(1))
            identity = Variable(identity.unsqueeze(0).expand(train_loader.batch_size,att.size(1),att.size(1)))
            penal = attention_model.l2_matrix_norm(att@attT - identity)

        #binary classification
        #Adding a very small value to prevent BCELoss from outputting NaN's
        if use_regularization:
            try:
                loss = criterion(y_pred.type(torch.DoubleTensor).squeeze(1)+1e-8,y) + C * penal/train_loader.batch_size

            except RuntimeError:
                raise Exception("BCELoss gets nan values on regularization. Either remove regularization or add very small values")
        else:
            loss = criterion(y_pred.type(torch.DoubleTensor).squeeze(1),y)

        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()

        #gradient clipping
        if clip:
            torch.nn.utils.clip_grad_norm(attention_model.parameters(),0.5)
        optimizer.step()
        return loss.item()

    def loss_fn(outputs, y):
        y_pred, att = outputs
        attT = att.transpose(1,2)
        identity = torch.eye(att.size(1))
        identity = Variable(identity.unsqueeze(0).expand(y_pred.size(0),att.size(1),att.size(1)))
        penal = attention_model.l2_matrix_norm(att@attT - identity)
        return criterion(y_pred.type(torch.DoubleTensor).squeeze(1)+1e-8,y) + C * penal/y_pred.size(0)

    def eval_fn(model, _batch=None):
        was = model.batch_size
        acc = evaluate(model, x_test_pad, y_test)
        model.batch_size = was  # (port) restored for the training loop
        model.hidden_state = model.init_hidden()
        return float(acc)

    first = next(iter(train_loader))
    return Program(name="structselfattn_imdb", model=attention_model, batch=(first[0], first[1]), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the labels sliced from another window of the concatenated reviews than the texts (classic index slip): the
    # training labels belong to other reviews.
    Bug("labels_from_other_rows", functools.partial(_build, bug="labels_from_other_rows"), "learning_ledger",
        ("TASK",)),
    # BCEWithLogitsLoss swapped in for BCELoss (the NaN the loop's comment guards against, "fixed" the usual way)
    # while forward still ends in F.sigmoid: the loss squashes the probabilities a second time (classic).
    Bug("bce_with_logits_on_sigmoid", functools.partial(_build, bug="bce_with_logits_on_sigmoid"),
        "learning_ledger", ("OBJECTIVE",)),
    # optimizer.zero_grad() after loss.backward() (classic): every gradient is erased before the step; a slip of
    # the whole model's step.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
