"""ESIM (Chen et al., "Enhanced LSTM for Natural Language Inference"), Aurelien Coet's PyTorch implementation:
embedded premises and hypotheses through variational (RNN) dropout, a shared bi-LSTM encoder over packed, length-sorted
sequences, masked soft alignment in both directions, enhancement ``[a; a~; a - a~; a * a~]``, a ReLU projection, a
bi-LSTM composition, masked average and max pooling, a tanh MLP classifier; cross-entropy, Adam 4e-4, gradient-norm
clipping at 10.

Source: https://github.com/coetaur0/ESIM
Commit: 65611601ff9f17f76e1f246e8e46b5fc4bee13fc
Files: esim/model.py, esim/layers.py, esim/utils.py, esim/data.py (``NLIDataset``), scripts/training/train_snli.py,
scripts/training/utils.py (``train``, ``validate``), config/training/snli_training.json
License: Apache-2.0 (Copyright Aurelien Coet; full text in LICENSES/coetaur0-ESIM.txt)
Domain: sentence-pair classification, natural language inference (SNLI-shaped: entailment / neutral / contradiction)

Kept as written: ``ESIM`` and ``_init_esim_weights`` (xavier / orthogonal LSTM init, forget-gate bias 1),
``RNNDropout``, ``Seq2SeqEncoder`` (sort by length, pack, LSTM, pad, restore the order), ``SoftmaxAttention``,
``sort_by_seq_lens``, ``get_mask``, ``masked_softmax``, ``weighted_sum``, ``replace_masked``, ``correct_predictions``,
``NLIDataset`` (padding with index 0), ``train_snli.main``'s setup (``CrossEntropyLoss``, ``Adam(lr)``,
``ReduceLROnPlateau(mode="max", factor=0.5, patience=0)`` stepped on the validation accuracy after an epoch), and
``train``'s loop body (zero_grad, ``model(premises, premises_lengths, hypotheses, hypotheses_lengths)``,
``criterion(logits, labels)``, backward, ``clip_grad_norm_(max_gradient_norm)``, step) and ``validate``.

Deviations from the original:
- SNLI, its preprocessing (``preprocess_snli.py``: tokenizing, the word dictionary) and the GloVe 840B embeddings are
  not here: the pairs are synthetic, made from ``seed``, over a 60-word vocabulary (0 padding, 1 OOV, 2 BOS, 3 EOS
  as the preprocessor reserves them); a premise is 4-9 random content words; an entailed hypothesis is a subset of
  them, a neutral one brings words absent from the premise, a contradiction replaces one premise word by its
  "antonym" (the word 28 places on); ``embeddings`` is a random normal matrix (row 0 zero) standing for the
  preprocessor's GloVe matrix with random rows for words it lacks.
- sizes for 2 CPU cores: embedding 300 -> 32, ``hidden_size`` 300 -> 32, batch_size 32 kept; 640 training pairs,
  128 validation pairs; ``lr`` 4e-4 -> 2e-3 so 30 steps show the loss falling.
- ``train`` is not run an epoch at a time: ``train_step`` is one batch of its loop (the DataLoader, shuffled by a
  ``torch.Generator(seed)``, restarts when it runs out; the scheduler steps on ``validate``'s accuracy at each
  epoch's end, as ``main`` does), returning the loss; tqdm, timing, checkpoints, early stopping and the plots are
  dropped; ``eval_fn`` is ``validate``'s accuracy on the validation set.
- ``sort_by_seq_lens`` builds ``idx_range`` with ``torch.arange`` directly (``new_tensor`` of a tensor only warns).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

VOCAB = 60
ANTONYM = 28
EMBED = 32  # (port) 300
HIDDEN = 32  # (port) 300
BATCH = 32
LR = 0.002  # (port) 0.0004
MAX_GRAD_NORM = 10.0


# ------------------------------------------------------------------------------------------------ esim/utils.py
def sort_by_seq_lens(batch, sequences_lengths, descending=True):
    sorted_seq_lens, sorting_index =\
        sequences_lengths.sort(0, descending=descending)

    sorted_batch = batch.index_select(0, sorting_index)

    idx_range = torch.arange(0, len(sequences_lengths), device=sequences_lengths.device)  # (port) new_tensor(arange)
    _, reverse_mapping = sorting_index.sort(0, descending=False)
    restoration_index = idx_range.index_select(0, reverse_mapping)

    return sorted_batch, sorted_seq_lens, sorting_index, restoration_index


def get_mask(sequences_batch, sequences_lengths):
    batch_size = sequences_batch.size()[0]
    max_length = torch.max(sequences_lengths)
    mask = torch.ones(batch_size, max_length, dtype=torch.float)
    mask[sequences_batch[:, :max_length] == 0] = 0.0
    return mask


def masked_softmax(tensor, mask):
    tensor_shape = tensor.size()
    reshaped_tensor = tensor.view(-1, tensor_shape[-1])

    # Reshape the mask so it matches the size of the input tensor.
    while mask.dim() < tensor.dim():
        mask = mask.unsqueeze(1)
    mask = mask.expand_as(tensor).contiguous().float()
    reshaped_mask = mask.view(-1, mask.size()[-1])

    result = nn.functional.softmax(reshaped_tensor * reshaped_mask, dim=-1)
    result = result * reshaped_mask
    # 1e-13 is added to avoid divisions by zero.
    result = result / (result.sum(dim=-1, keepdim=True) + 1e-13)

    return result.view(*tensor_shape)


def weighted_sum(tensor, weights, mask):
    weighted_sum = weights.bmm(tensor)

    while mask.dim() < weighted_sum.dim():
        mask = mask.unsqueeze(1)
    mask = mask.transpose(-1, -2)
    mask = mask.expand_as(weighted_sum).contiguous().float()

    return weighted_sum * mask


def replace_masked(tensor, mask, value):
    mask = mask.unsqueeze(1).transpose(2, 1)
    reverse_mask = 1.0 - mask
    values_to_add = value * reverse_mask
    return tensor * mask + values_to_add


def correct_predictions(output_probabilities, targets):
    _, out_classes = output_probabilities.max(dim=1)
    correct = (out_classes == targets).sum()
    return correct.item()


# ----------------------------------------------------------------------------------------------- esim/layers.py
class RNNDropout(nn.Dropout):
    def forward(self, sequences_batch):
        ones = sequences_batch.data.new_ones(sequences_batch.shape[0],
                                             sequences_batch.shape[-1])
        dropout_mask = nn.functional.dropout(ones, self.p, self.training,
                                             inplace=False)
        return dropout_mask.unsqueeze(1) * sequences_batch


class Seq2SeqEncoder(nn.Module):
    def __init__(self,
                 rnn_type,
                 input_size,
                 hidden_size,
                 num_layers=1,
                 bias=True,
                 dropout=0.0,
                 bidirectional=False,
                 bug=None):
        assert issubclass(rnn_type, nn.RNNBase),\
            "rnn_type must be a class inheriting from torch.nn.RNNBase"

        super(Seq2SeqEncoder, self).__init__()

        self.rnn_type = rnn_type
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.dropout = dropout
        self.bidirectional = bidirectional
        self.bug = bug

        self._encoder = rnn_type(input_size,
                                 hidden_size,
                                 num_layers=num_layers,
                                 bias=bias,
                                 batch_first=True,
                                 dropout=dropout,
                                 bidirectional=bidirectional)

    def forward(self, sequences_batch, sequences_lengths):
        sorted_batch, sorted_lengths, _, restoration_idx =\
            sort_by_seq_lens(sequences_batch, sequences_lengths)
        packed_batch = nn.utils.rnn.pack_padded_sequence(sorted_batch,
                                                         sorted_lengths,
                                                         batch_first=True)

        outputs, _ = self._encoder(packed_batch, None)

        outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs,
                                                      batch_first=True)
        if self.bug == "restoration_idx_dropped":
            return outputs
        reordered_outputs = outputs.index_select(0, restoration_idx)

        return reordered_outputs


class SoftmaxAttention(nn.Module):
    def forward(self,
                premise_batch,
                premise_mask,
                hypothesis_batch,
                hypothesis_mask):
        # Dot product between premises and hypotheses in each sequence of
        # the batch.
        similarity_matrix = premise_batch.bmm(hypothesis_batch.transpose(2, 1)
                                                              .contiguous())

        # Softmax attention weights.
        prem_hyp_attn = masked_softmax(similarity_matrix, hypothesis_mask)
        hyp_prem_attn = masked_softmax(similarity_matrix.transpose(1, 2)
                                                        .contiguous(),
                                       premise_mask)

        # Weighted sums of the hypotheses for the the premises attention,
        # and vice-versa for the attention of the hypotheses.
        attended_premises = weighted_sum(hypothesis_batch,
                                         prem_hyp_attn,
                                         premise_mask)
        attended_hypotheses = weighted_sum(premise_batch,
                                           hyp_prem_attn,
                                           hypothesis_mask)

        return attended_premises, attended_hypotheses


# ------------------------------------------------------------------------------------------------ esim/model.py
class ESIM(nn.Module):
    def __init__(self,
                 vocab_size,
                 embedding_dim,
                 hidden_size,
                 embeddings=None,
                 padding_idx=0,
                 dropout=0.5,
                 num_classes=3,
                 device="cpu",
                 bug=None):
        super(ESIM, self).__init__()

        self.vocab_size = vocab_size
        self.embedding_dim = embedding_dim
        self.hidden_size = hidden_size
        self.num_classes = num_classes
        self.dropout = dropout
        self.device = device

        self._word_embedding = nn.Embedding(self.vocab_size,
                                            self.embedding_dim,
                                            padding_idx=padding_idx,
                                            _weight=embeddings)

        if self.dropout:
            self._rnn_dropout = RNNDropout(p=self.dropout)
            # self._rnn_dropout = nn.Dropout(p=self.dropout)

        self._encoding = Seq2SeqEncoder(nn.LSTM,
                                        self.embedding_dim,
                                        self.hidden_size,
                                        bidirectional=True,
                                        bug=bug)

        self._attention = SoftmaxAttention()

        self._projection = nn.Sequential(nn.Linear(4*2*self.hidden_size,
                                                   self.hidden_size),
                                         nn.ReLU())

        self._composition = Seq2SeqEncoder(nn.LSTM,
                                           self.hidden_size,
                                           self.hidden_size,
                                           bidirectional=True)

        self._classification = nn.Sequential(nn.Dropout(p=self.dropout),
                                             nn.Linear(2*4*self.hidden_size,
                                                       self.hidden_size),
                                             nn.Tanh(),
                                             nn.Dropout(p=self.dropout),
                                             nn.Linear(self.hidden_size,
                                                       self.num_classes))

        # Initialize all weights and biases in the model.
        self.apply(_init_esim_weights)

    def forward(self,
                premises,
                premises_lengths,
                hypotheses,
                hypotheses_lengths):
        premises_mask = get_mask(premises, premises_lengths).to(self.device)
        hypotheses_mask = get_mask(hypotheses, hypotheses_lengths)\
            .to(self.device)

        embedded_premises = self._word_embedding(premises)
        embedded_hypotheses = self._word_embedding(hypotheses)

        if self.dropout:
            embedded_premises = self._rnn_dropout(embedded_premises)
            embedded_hypotheses = self._rnn_dropout(embedded_hypotheses)

        encoded_premises = self._encoding(embedded_premises,
                                          premises_lengths)
        encoded_hypotheses = self._encoding(embedded_hypotheses,
                                            hypotheses_lengths)

        attended_premises, attended_hypotheses =\
            self._attention(encoded_premises, premises_mask,
                            encoded_hypotheses, hypotheses_mask)

        enhanced_premises = torch.cat([encoded_premises,
                                       attended_premises,
                                       encoded_premises - attended_premises,
                                       encoded_premises * attended_premises],
                                      dim=-1)
        enhanced_hypotheses = torch.cat([encoded_hypotheses,
                                         attended_hypotheses,
                                         encoded_hypotheses -
                                         attended_hypotheses,
                                         encoded_hypotheses *
                                         attended_hypotheses],
                                        dim=-1)

        projected_premises = self._projection(enhanced_premises)
        projected_hypotheses = self._projection(enhanced_hypotheses)

        if self.dropout:
            projected_premises = self._rnn_dropout(projected_premises)
            projected_hypotheses = self._rnn_dropout(projected_hypotheses)

        v_ai = self._composition(projected_premises, premises_lengths)
        v_bj = self._composition(projected_hypotheses, hypotheses_lengths)

        v_a_avg = torch.sum(v_ai * premises_mask.unsqueeze(1)
                                                .transpose(2, 1), dim=1)\
            / torch.sum(premises_mask, dim=1, keepdim=True)
        v_b_avg = torch.sum(v_bj * hypotheses_mask.unsqueeze(1)
                                                  .transpose(2, 1), dim=1)\
            / torch.sum(hypotheses_mask, dim=1, keepdim=True)

        v_a_max, _ = replace_masked(v_ai, premises_mask, -1e7).max(dim=1)
        v_b_max, _ = replace_masked(v_bj, hypotheses_mask, -1e7).max(dim=1)

        v = torch.cat([v_a_avg, v_a_max, v_b_avg, v_b_max], dim=1)

        logits = self._classification(v)
        probabilities = nn.functional.softmax(logits, dim=-1)

        return logits, probabilities


def _init_esim_weights(module):
    if isinstance(module, nn.Linear):
        nn.init.xavier_uniform_(module.weight.data)
        nn.init.constant_(module.bias.data, 0.0)

    elif isinstance(module, nn.LSTM):
        nn.init.xavier_uniform_(module.weight_ih_l0.data)
        nn.init.orthogonal_(module.weight_hh_l0.data)
        nn.init.constant_(module.bias_ih_l0.data, 0.0)
        nn.init.constant_(module.bias_hh_l0.data, 0.0)
        hidden_size = module.bias_hh_l0.data.shape[0] // 4
        module.bias_hh_l0.data[hidden_size:(2*hidden_size)] = 1.0

        if (module.bidirectional):
            nn.init.xavier_uniform_(module.weight_ih_l0_reverse.data)
            nn.init.orthogonal_(module.weight_hh_l0_reverse.data)
            nn.init.constant_(module.bias_ih_l0_reverse.data, 0.0)
            nn.init.constant_(module.bias_hh_l0_reverse.data, 0.0)
            module.bias_hh_l0_reverse.data[hidden_size:(2*hidden_size)] = 1.0


# ------------------------------------------------------------------------------------------------- esim/data.py
class NLIDataset(Dataset):
    def __init__(self,
                 data,
                 padding_idx=0,
                 max_premise_length=None,
                 max_hypothesis_length=None):
        self.premises_lengths = [len(seq) for seq in data["premises"]]
        self.max_premise_length = max_premise_length
        if self.max_premise_length is None:
            self.max_premise_length = max(self.premises_lengths)

        self.hypotheses_lengths = [len(seq) for seq in data["hypotheses"]]
        self.max_hypothesis_length = max_hypothesis_length
        if self.max_hypothesis_length is None:
            self.max_hypothesis_length = max(self.hypotheses_lengths)

        self.num_sequences = len(data["premises"])

        self.data = {"ids": [],
                     "premises": torch.ones((self.num_sequences,
                                             self.max_premise_length),
                                            dtype=torch.long) * padding_idx,
                     "hypotheses": torch.ones((self.num_sequences,
                                               self.max_hypothesis_length),
                                              dtype=torch.long) * padding_idx,
                     "labels": torch.tensor(data["labels"], dtype=torch.long)}

        for i, premise in enumerate(data["premises"]):
            self.data["ids"].append(data["ids"][i])
            end = min(len(premise), self.max_premise_length)
            self.data["premises"][i][:end] = torch.tensor(premise[:end])

            hypothesis = data["hypotheses"][i]
            end = min(len(hypothesis), self.max_hypothesis_length)
            self.data["hypotheses"][i][:end] = torch.tensor(hypothesis[:end])

    def __len__(self):
        return self.num_sequences

    def __getitem__(self, index):
        return {"id": self.data["ids"][index],
                "premise": self.data["premises"][index],
                "premise_length": min(self.premises_lengths[index],
                                      self.max_premise_length),
                "hypothesis": self.data["hypotheses"][index],
                "hypothesis_length": min(self.hypotheses_lengths[index],
                                         self.max_hypothesis_length),
                "label": self.data["labels"][index]}


# ---------------------------------------------------------------------------------------------- (port) the data
def synthetic_nli(rng, n):
    """Preprocessed-SNLI-shaped pairs: BOS/EOS around word ids; 0 entailment, 1 neutral, 2 contradiction."""
    content = np.arange(4, 4 + ANTONYM)  # words 4..31; word w's antonym is w + 28 (32..59)
    data = {"ids": [], "premises": [], "hypotheses": [], "labels": []}
    for i in range(n):
        premise = list(rng.choice(content, size=int(rng.integers(4, 10)), replace=False))
        label = int(rng.integers(0, 3))
        k = int(rng.integers(2, min(5, len(premise)) + 1))
        hypothesis = list(rng.choice(premise, size=k, replace=False))
        if label == 1:
            absent = [w for w in content if w not in premise]
            hypothesis[int(rng.integers(0, k))] = int(rng.choice(absent))
        elif label == 2:
            j = int(rng.integers(0, k))
            hypothesis[j] = int(hypothesis[j]) + ANTONYM
        data["ids"].append(i)
        data["premises"].append([2] + [int(w) for w in premise] + [3])
        data["hypotheses"].append([2] + [int(w) for w in hypothesis] + [3])
        data["labels"].append(label)
    return data


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    device = torch.device("cpu")
    hidden_size, dropout, num_classes, batch_size, lr, max_grad_norm = HIDDEN, 0.5, 3, BATCH, LR, MAX_GRAD_NORM

    train_data = NLIDataset(synthetic_nli(rng, 640))
    train_loader = DataLoader(train_data, shuffle=True, batch_size=batch_size,
                              generator=torch.Generator().manual_seed(seed))
    valid_data = NLIDataset(synthetic_nli(rng, 128))
    valid_loader = DataLoader(valid_data, shuffle=False, batch_size=batch_size)

    embeddings = torch.tensor(rng.normal(size=(VOCAB, EMBED)), dtype=torch.float)
    embeddings[0] = 0.0
    model = ESIM(embeddings.shape[0],
                 embeddings.shape[1],
                 hidden_size,
                 embeddings=embeddings,
                 dropout=dropout,
                 num_classes=num_classes,
                 device=device,
                 bug=bug).to(device)

    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer,
                                                           mode="max",
                                                           factor=0.5,
                                                           patience=0)

    def validate(model, dataloader, criterion):
        model.eval()
        device = model.device
        running_loss = 0.0
        running_accuracy = 0.0
        with torch.no_grad():
            for batch in dataloader:
                premises = batch["premise"].to(device)
                premises_lengths = batch["premise_length"].to(device)
                hypotheses = batch["hypothesis"].to(device)
                hypotheses_lengths = batch["hypothesis_length"].to(device)
                labels = batch["label"].to(device)

                logits, probs = model(premises,
                                      premises_lengths,
                                      hypotheses,
                                      hypotheses_lengths)
                loss = criterion(logits, labels)

                running_loss += loss.item()
                running_accuracy += correct_predictions(probs, labels)
        epoch_loss = running_loss / len(dataloader)
        epoch_accuracy = running_accuracy / (len(dataloader.dataset))
        return epoch_loss, epoch_accuracy

    st = {"it": None}

    def next_batch():
        if st["it"] is not None:
            batch = next(st["it"], None)
            if batch is not None:
                return batch
            # an epoch ended: main() validates and steps the scheduler on the accuracy
            _, valid_accuracy = validate(model, valid_loader, criterion)
            scheduler.step(valid_accuracy)
        st["it"] = iter(train_loader)
        return next(st["it"])

    def train_step():
        # Switch the model to train mode.
        model.train()
        batch = next_batch()

        # Move input and output data to the GPU if it is used.
        premises = batch["premise"].to(device)
        premises_lengths = batch["premise_length"].to(device)
        hypotheses = batch["hypothesis"].to(device)
        hypotheses_lengths = batch["hypothesis_length"].to(device)
        labels = batch["label"].to(device)

        if bug != "zero_grad_dropped":
            optimizer.zero_grad()

        logits, probs = model(premises,
                              premises_lengths,
                              hypotheses,
                              hypotheses_lengths)
        if bug == "loss_on_probabilities":
            loss = criterion(probs, labels)
        else:
            loss = criterion(logits, labels)
        loss.backward()

        nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        return loss.item()

    def loss_fn(outputs, labels):
        logits, probs = outputs
        if bug == "loss_on_probabilities":
            return criterion(probs, labels)
        return criterion(logits, labels)

    def eval_fn(model, _batch=None):
        was_training = model.training
        _, accuracy = validate(model, valid_loader, criterion)
        model.train(was_training)
        return accuracy

    first = next(iter(DataLoader(train_data, shuffle=False, batch_size=batch_size)))
    batch = ((first["premise"], first["premise_length"], first["hypothesis"], first["hypothesis_length"]),
             first["label"])
    return Program(name="esim_snli", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # Seq2SeqEncoder returns the padded outputs in length-sorted order, the restoration_idx index_select left out
    # (classic with sort-and-pack encoders): each premise's encoding is another example's, apart from its label.
    Bug("restoration_idx_dropped", functools.partial(_build, bug="restoration_idx_dropped"), "learning_ledger",
        ("TASK",)),
    # the model's softmax probabilities into CrossEntropyLoss in place of the logits (classic: the model returns
    # both).
    Bug("loss_on_probabilities", functools.partial(_build, bug="loss_on_probabilities"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizer.zero_grad() left out of train() (classic): gradients accumulate over every batch.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
