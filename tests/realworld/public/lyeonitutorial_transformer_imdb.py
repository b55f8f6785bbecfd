# ruff: noqa: C403, C414, C417, PLR0402, RUF059, UP008
"""lyeoni's nlp-tutorial, ``text-classification-transformer``: sentiment classification of IMDb reviews with a
Transformer encoder written from scratch (``main.py`` + ``trainer.py`` + ``model.py``): reviews tokenized, cut to
``max_seq_len`` and right-padded with ``pad_token_id`` (``data_utils.convert_examples_to_features``), a
``TensorDataset`` under a shuffled ``DataLoader``; ``TransformerEncoder``: token embedding plus a frozen sinusoid
position table (position 0 for pads), post-LayerNorm encoder layers whose attention masks the padded keys with
``-1e9``, a max over the sequence, ``Linear(d_model, 2)`` and a ``Softmax`` inside the model; ``CrossEntropyLoss`` on
those probabilities (as written), Adam, ``zero_grad(); backward(); step()``; ``validate`` under ``eval()`` +
``no_grad`` after each epoch.

Source: https://github.com/lyeoni/nlp-tutorial
Commit: 8cc490adc6cc92d458548e0e73fbbf1db575f049
Files: text-classification-transformer/model.py, text-classification-transformer/trainer.py,
text-classification-transformer/main.py, text-classification-transformer/data_utils.py
License: MIT (Copyright (c) 2019 Hoyeon Lee), LICENSES/lyeoni-nlp-tutorial.txt
Domain: NLP classifier (sentence classification, Transformer encoder)

Deviations from the original:
- sizes: ``--hidden`` 256 -> 32, ``--n_layers`` 6 -> 2, ``--n_attn_heads`` 8 -> 4, ``--ffn_hidden`` 1024 -> 64,
  ``--max_seq_len`` 512 -> 24; batch 32, dropout 0.1 kept; ``--lr`` 1e-4 -> 1e-3 (the tiny synthetic task would need
  thousands of steps at 1e-4);
- data: prenlp's IMDB download and the sentencepiece tokenizer cannot run here: 640 training and 160 test
  "reviews" made from ``seed`` (6-22 ids drawn from 40 filler words, with 1-3 words of a positive or a negative
  list put at random places, label "pos" or "neg"), whose ids go through ``convert_examples_to_features`` and
  ``create_examples``'s sorted label dictionary as written (the tokenizer's vocabulary: pad 0, words from 1);
- no GPU (``.to(device)`` kept on the CPU); the progress prints and ``save`` left out; one ``train_step`` is one
  batch of ``Trainer.train`` (``validate`` at the end of each epoch, then the next epoch's shuffled loader);
  ``eval_fn`` is ``validate``'s accuracy on one batch.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SELF_CHECK_STEPS = 60
N_FILLER = 40
POSITIVE = list(range(N_FILLER + 1, N_FILLER + 7))
NEGATIVE = list(range(N_FILLER + 7, N_FILLER + 13))
VOCAB_SIZE = N_FILLER + 13


# ---- text-classification-transformer/model.py ----------------------------------------------------------------------

class ScaledDotProductAttention(nn.Module):
    def __init__(self, d_k):
        super(ScaledDotProductAttention, self).__init__()
        self.d_k = d_k

    def forward(self, q, k, v, attn_mask):
        # |q| : (batch_size, n_heads, q_len, d_k), |k| : (batch_size, n_heads, k_len, d_k), |v| : (batch_size, n_heads, v_len, d_v)
        # |attn_mask| : (batch_size, n_heads, seq_len(=q_len), seq_len(=k_len))

        attn_score = torch.matmul(q, k.transpose(-1, -2)) / np.sqrt(self.d_k)
        attn_score.masked_fill_(attn_mask, -1e9)
        # |attn_score| : (batch_size, n_heads, q_len, k_len)

        attn_weights = nn.Softmax(dim=-1)(attn_score)
        # |attn_weights| : (batch_size, n_heads, q_len, k_len)

        output = torch.matmul(attn_weights, v)
        # |output| : (batch_size, n_heads, q_len, d_v)

        return output, attn_weights

class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super(MultiHeadAttention, self).__init__()
        self.n_heads = n_heads
        self.d_k = self.d_v = d_model//n_heads

        self.WQ = nn.Linear(d_model, d_model)
        self.WK = nn.Linear(d_model, d_model)
        self.WV = nn.Linear(d_model, d_model)
        self.scaled_dot_product_attn = ScaledDotProductAttention(self.d_k)
        self.linear = nn.Linear(n_heads * self.d_v, d_model)

    def forward(self, Q, K, V, attn_mask):
        # |Q| : (batch_size, q_len, d_model), |K| : (batch_size, k_len, d_model), |V| : (batch_size, v_len, d_model)
        # |attn_mask| : (batch_size, seq_len(=q_len), seq_len(=k_len))
        batch_size = Q.size(0)

        q_heads = self.WQ(Q).view(batch_size, -1, self.n_heads, self.d_k).transpose(1, 2)
        k_heads = self.WK(K).view(batch_size, -1, self.n_heads, self.d_k).transpose(1, 2)
        v_heads = self.WV(V).view(batch_size, -1, self.n_heads, self.d_v).transpose(1, 2)
        # |q_heads| : (batch_size, n_heads, q_len, d_k), |k_heads| : (batch_size, n_heads, k_len, d_k), |v_heads| : (batch_size, n_heads, v_len, d_v)

        attn_mask = attn_mask.unsqueeze(1).repeat(1, self.n_heads, 1, 1)
        # |attn_mask| : (batch_size, n_heads, seq_len(=q_len), seq_len(=k_len))
        attn, attn_weights = self.scaled_dot_product_attn(q_heads, k_heads, v_heads, attn_mask)
        # |attn| : (batch_size, n_heads, q_len, d_v)
        # |attn_weights| : (batch_size, n_heads, q_len, k_len)

        attn = attn.transpose(1, 2).contiguous().view(batch_size, -1, self.n_heads * self.d_v)
        # |attn| : (batch_size, q_len, n_heads * d_v)
        output = self.linear(attn)
        # |output| : (batch_size, q_len, d_model)

        return output, attn_weights

class PositionWiseFeedForwardNetwork(nn.Module):
    def __init__(self, d_model, d_ff):
        super(PositionWiseFeedForwardNetwork, self).__init__()

        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.relu = nn.ReLU()

    def forward(self, inputs):
        # |inputs| : (batch_size, seq_len, d_model)

        output = self.relu(self.linear1(inputs))
        # |output| : (batch_size, seq_len, d_ff)
        output = self.linear2(output)
        # |output| : (batch_size, seq_len, d_model)

        return output

class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, p_drop, d_ff):
        super(EncoderLayer, self).__init__()

        self.mha = MultiHeadAttention(d_model, n_heads)
        self.dropout1 = nn.Dropout(p_drop)
        self.layernorm1 = nn.LayerNorm(d_model, eps=1e-6)

        self.ffn = PositionWiseFeedForwardNetwork(d_model, d_ff)
        self.dropout2 = nn.Dropout(p_drop)
        self.layernorm2 = nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, inputs, attn_mask):
        # |inputs| : (batch_size, seq_len, d_model)
        # |attn_mask| : (batch_size, seq_len, seq_len)

        attn_outputs, attn_weights = self.mha(inputs, inputs, inputs, attn_mask)
        attn_outputs = self.dropout1(attn_outputs)
        attn_outputs = self.layernorm1(inputs + attn_outputs)
        # |attn_outputs| : (batch_size, seq_len(=q_len), d_model)
        # |attn_weights| : (batch_size, n_heads, q_len, k_len)

        ffn_outputs = self.ffn(attn_outputs)
        ffn_outputs = self.dropout2(ffn_outputs)
        ffn_outputs = self.layernorm2(attn_outputs + ffn_outputs)
        # |ffn_outputs| : (batch_size, seq_len, d_model)

        return ffn_outputs, attn_weights

class TransformerEncoder(nn.Module):
    """TransformerEncoder is a stack of N encoder layers."""

    def __init__(self, vocab_size, seq_len, d_model=512, n_layers=6, n_heads=8, p_drop=0.1, d_ff=2048, pad_id=0,
                 bug=None):
        super(TransformerEncoder, self).__init__()
        self.pad_id = pad_id
        self.sinusoid_table = self.get_sinusoid_table(seq_len+1, d_model) # (seq_len+1, d_model)

        # layers
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_embedding = nn.Embedding.from_pretrained(self.sinusoid_table, freeze=True)
        self.layers = nn.ModuleList([EncoderLayer(d_model, n_heads, p_drop, d_ff) for _ in range(n_layers)])
        # layers to classify
        self.linear = nn.Linear(d_model, 2)
        # bug "softmax_over_batch": the classifier's Softmax normalizes over the batch axis (dim=0), not the classes
        self.softmax = nn.Softmax(dim=0 if bug == "softmax_over_batch" else -1)

    def forward(self, inputs):
        # |inputs| : (batch_size, seq_len)
        positions = torch.arange(inputs.size(1), device=inputs.device, dtype=inputs.dtype).repeat(inputs.size(0), 1) + 1
        position_pad_mask = inputs.eq(self.pad_id)
        positions.masked_fill_(position_pad_mask, 0)
        # |positions| : (batch_size, seq_len)

        outputs = self.embedding(inputs) + self.pos_embedding(positions)
        # |outputs| : (batch_size, seq_len, d_model)

        attn_pad_mask = self.get_attention_padding_mask(inputs, inputs, self.pad_id)
        # |attn_pad_mask| : (batch_size, seq_len, seq_len)

        attention_weights = []
        for layer in self.layers:
            outputs, attn_weights = layer(outputs, attn_pad_mask)
            # |outputs| : (batch_size, seq_len, d_model)
            # |attn_weights| : (batch_size, n_heads, seq_len, seq_len)
            attention_weights.append(attn_weights)

        outputs, _ = torch.max(outputs, dim=1)
        # |outputs| : (batch_size, d_model)
        outputs = self.softmax(self.linear(outputs))
        # |outputs| : (batch_size, 2)

        return outputs, attention_weights

    def get_attention_padding_mask(self, q, k, pad_id):
        attn_pad_mask = k.eq(pad_id).unsqueeze(1).repeat(1, q.size(1), 1)
        # |attn_pad_mask| : (batch_size, q_len, k_len)

        return attn_pad_mask

    def get_sinusoid_table(self, seq_len, d_model):
        def get_angle(pos, i, d_model):
            return pos / np.power(10000, (2 * (i//2)) / d_model)

        sinusoid_table = np.zeros((seq_len, d_model))
        for pos in range(seq_len):
            for i in range(d_model):
                if i%2 == 0:
                    sinusoid_table[pos, i] = np.sin(get_angle(pos, i, d_model))
                else:
                    sinusoid_table[pos, i] = np.cos(get_angle(pos, i, d_model))

        return torch.FloatTensor(sinusoid_table)


# ---- text-classification-transformer/data_utils.py -----------------------------------------------------------------

class InputExample:
    """A single training/test example for text classification.
    """
    def __init__(self, text, label):
        self.text = text
        self.label = label

class InputFeatures:
    """A single set of features of data.
    """
    def __init__(self, input_ids, label_id):
        self.input_ids = input_ids
        self.label_id = label_id

def convert_examples_to_features(examples, label_dict, tokenizer, max_seq_len):
    pad_token_id = tokenizer.pad_token_id

    features = []
    for i, example in enumerate(examples):
        tokens = tokenizer.tokenize(example.text)
        tokens = tokens[:max_seq_len]

        input_ids = tokenizer.convert_tokens_to_ids(tokens)
        padding_length = max_seq_len - len(input_ids)
        input_ids = input_ids + ([pad_token_id] * padding_length)
        label_id = label_dict.get(example.label)

        feature = InputFeatures(input_ids, label_id)
        features.append(feature)

    return features

def create_examples(args, tokenizer, dataset, bug=None):
    examples = []
    for text, label in dataset:
        example = InputExample(text, label)
        examples.append(example)

    labels = sorted(list(set([example.label for example in examples])))
    label_dict = {label: i for i, label in enumerate(labels)}

    features = convert_examples_to_features(examples, label_dict, tokenizer, args.max_seq_len)

    all_input_ids = torch.tensor([feature.input_ids for feature in features], dtype=torch.long)
    all_label_ids = torch.tensor([feature.label_id for feature in features], dtype=torch.long)
    if bug == "labels_shuffled_apart":
        # the label column shuffled on its own (a "shuffle both" helper applied to one tensor): each review keeps
        # the label of another review
        all_label_ids = all_label_ids[torch.randperm(len(all_label_ids))]

    dataset = TensorDataset(all_input_ids, all_label_ids)

    return dataset


class IdTokenizer:
    """Stands in for the sentencepiece tokenizer: the synthetic texts are already word ids (pad 0)."""
    pad_token_id = 0
    vocab_size = VOCAB_SIZE

    def tokenize(self, text):
        return text.split()

    def convert_tokens_to_ids(self, tokens):
        return [int(t) for t in tokens]


def make_reviews(rng, n):
    data = []
    for _ in range(n):
        label = "pos" if rng.random() < 0.5 else "neg"
        words = [int(w) for w in rng.integers(1, N_FILLER + 1, size=int(rng.integers(6, 23)))]
        for _ in range(int(rng.integers(1, 4))):
            words.insert(int(rng.integers(0, len(words) + 1)), int(rng.choice(POSITIVE if label == "pos" else NEGATIVE)))
        data.append((" ".join(str(w) for w in words), label))
    return data


# ---- text-classification-transformer/trainer.py + main.py ----------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    args = SimpleNamespace(dataset="imdb", batch_size=32, max_seq_len=24, epochs=7, lr=1e-3, no_cuda=True,
                           hidden=32, n_layers=2, n_attn_heads=4, dropout=0.1, ffn_hidden=64)
    tokenizer = IdTokenizer()
    train_dataset = create_examples(args, tokenizer, make_reviews(rng, 640), bug=bug)
    test_dataset = create_examples(args, tokenizer, make_reviews(rng, 160))
    train_loader = DataLoader(train_dataset, batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(test_dataset, batch_size=args.batch_size, shuffle=True)

    device = 'cpu'
    model = TransformerEncoder(vocab_size  = tokenizer.vocab_size,
                               seq_len     = args.max_seq_len,
                               d_model     = args.hidden,
                               n_layers    = args.n_layers,
                               n_heads     = args.n_attn_heads,
                               p_drop      = args.dropout,
                               d_ff        = args.ffn_hidden,
                               pad_id      = tokenizer.pad_token_id,
                               bug         = bug)
    model.to(device)

    optimizer = optim.Adam(model.parameters(), args.lr)
    criterion = nn.CrossEntropyLoss()

    def validate():
        losses, accs = 0, 0
        n_samples = len(test_loader.dataset)
        model.eval()
        with torch.no_grad():
            for i, batch in enumerate(test_loader):
                inputs, labels = map(lambda x: x.to(device), batch)
                outputs, attention_weights = model(inputs)
                loss = criterion(outputs, labels)
                losses += loss.item()
                acc = (outputs.argmax(dim=-1) == labels).sum()
                accs += acc.item()
        return accs / n_samples

    state = {"it": iter(train_loader), "epoch": 1}
    model.train()

    def train_step():
        batch = next(state["it"], None)
        if batch is None:  # end of Trainer.train: validate, then the next epoch
            validate()
            state["epoch"] += 1
            model.train()
            state["it"] = iter(train_loader)
            batch = next(state["it"])
        inputs, labels = map(lambda x: x.to(device), batch)
        # |inputs| : (batch_size, seq_len), |labels| : (batch_size)

        outputs, attention_weights = model(inputs)
        # |outputs| : (batch_size, 2), |attention_weights| : [(batch_size, n_attn_heads, seq_len, seq_len)] * n_layers

        loss = criterion(outputs, labels)

        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        inputs, labels = batch
        was_training = model.training
        model.eval()
        with torch.no_grad():
            outputs, _ = model(inputs)
        model.train(was_training)
        return float((outputs.argmax(dim=-1) == labels).float().mean())

    first = next(iter(DataLoader(train_dataset, batch_size=args.batch_size, shuffle=False)))
    return Program(name="lyeonitutorial_transformer_imdb", model=model, batch=(first[0], first[1]),
                   loss_fn=lambda out, y: criterion(out[0], y), optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # classic: the classifier's Softmax built with dim=0 on a (batch, classes) output: each class column is
    # normalized over the batch's reviews, and the cross-entropy no longer scores a distribution over the classes.
    Bug("softmax_over_batch", functools.partial(_build, bug="softmax_over_batch"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the label tensor permuted apart from the input ids before the TensorDataset: every review is
    # trained on the label of another one.
    Bug("labels_shuffled_apart", functools.partial(_build, bug="labels_shuffled_apart"), "learning_ledger",
        ("TASK",)),
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
