# ruff: noqa: UP031, RUF059
"""MidiBERT-Piano pre-training (Chou et al., "MidiBERT-Piano: Large-scale Pre-training for Symbolic Music
Understanding"): compound-word (CP) piano tokens, each a (Bar, Position, Pitch, Duration) tuple embedded per type,
scaled by ``sqrt(d)``, concatenated and merged by a linear layer into a Hugging Face ``BertModel`` built from a
config (``inputs_embeds``, attention mask off the Bar pad word); one linear head per token type on the last hidden
state; masked language modelling with 15% of the positions chosen per sequence (80% replaced by the mask word,
10% by a random tuple, 10% kept), per-type cross-entropy weighted by the loss mask and averaged with the types'
vocabulary sizes as weights; AdamW (weight decay 0.01), grad-norm clipping at 3.

Source: https://github.com/wazenmai/MIDI-BERT
Commit: 1bc4cab67d2e8c09c8e4e96b34e4e2adc8fde5b8
Files: MidiBERT/main.py, MidiBERT/model.py, MidiBERT/modelLM.py, MidiBERT/trainer.py, MidiBERT/midi_dataset.py,
data_creation/prepare_data/dict/make_dict.py, scripts/pretrain.sh
License: MIT (Copyright (c) MidiBERT-Piano development team; full text in LICENSES/wazenmai-MIDI-BERT.txt)
Domain: symbolic music, masked language modelling of compound-word piano tokens (BERT from config)

Kept as written: ``Embeddings``, ``MidiBert`` (four token-type embeddings, ``in_linear``, ``BertModel`` on
``inputs_embeds`` with ``output_hidden_states=True``, ``get_rand_tok``), ``MidiBertLM`` / ``MLM`` (one projection
per type on ``hidden_states[-1]``), ``BERTTrainer`` (``compute_loss``, ``get_mask_ind``, and ``iteration``'s body:
deep copy of the batch, 80/10/10 masking into ``loss_mask``, attention mask from the Bar pad word, forward, argmax
accuracies, permute to (b, f, s), per-type losses weighted by vocabulary size, ``model.zero_grad()``, backward,
``clip_grad_norm_(..., 3.0)``, step), the CP dictionary of make_dict.py (Bar 2 + 2 specials, Position 16 + 2,
Pitch 86 + 2, Duration 64 + 2), ``BertConfig(max_position_embeddings=max_seq_len,
position_embedding_type='relative_key_query', hidden_size=hs)``, ``load_data``'s shuffle and 85/15 split.

Deviations from the original:
- sizes for 2 CPU cores: ``max_seq_len`` 512 -> 32, ``hs`` 768 -> 32, the config's layers 12 -> 2, heads 12 -> 2,
  intermediate size 3072 -> 64 (passed to ``BertConfig`` besides the script's arguments), ``emb_sizes``
  [256] * 4 -> [32] * 4; ``batch_size`` 12 -> 8; lr 2e-5 -> 1e-3 so that the 30 steps of the self-check show the
  loss falling (the original runs up to 500 epochs);
- the installed transformers (5.x) has dropped BERT's relative position embeddings: the config still names
  ``relative_key_query`` but the model uses absolute positions;
- ``transformers.AdamW`` no longer exists: ``torch.optim.AdamW`` (the same decoupled update with bias correction)
  at the same lr and weight decay; ``np.long`` (removed from numpy) is ``np.int64``;
- data: the CP_data .npy files of POP909, Pop1K7, ASAP, Pianist8 and EMOPIA are not here: synthetic CP songs made
  from ``seed`` (4/4 bars of quarter notes at positions 1, 5, 9, 13 / 16, each bar an arpeggio of its random root
  (root, +4, +7, +12), a duration per song), 16-32 notes padded to ``max_seq_len`` with the pad words as the
  repository's preprocessing pads; the dictionary pickle is built by make_dict.py's code; the DataLoader shuffles
  with a ``torch.Generator(seed)``, no workers; CUDA / DataParallel dropped;
- ``random`` (the masking) and ``np.random`` (the split) are seeded from ``seed``;
- one ``train_step`` is one batch of ``iteration(train=True)`` returning its ``total_loss`` (the progress print,
  checkpoints and the epoch loop are dropped); ``eval_fn`` is ``valid()``'s loss on the validation loader;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import math
import pathlib
import random
import sys

import numpy as np
import torch
from torch import nn
from torch.nn.utils import clip_grad_norm_
from torch.utils.data import DataLoader, Dataset
from transformers import BertConfig, BertModel

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

MAX_SEQ_LEN = 32
HS = 32
BATCH_SIZE = 8
LR = 1e-3  # 2e-5 in main.py
MASK_PERCENT = 0.15


# data_creation/prepare_data/dict/make_dict.py (as a function instead of a pickle)
def make_dict():
    event2word = {'Bar': {}, 'Position': {}, 'Pitch': {}, 'Duration': {}}
    word2event = {'Bar': {}, 'Position': {}, 'Pitch': {}, 'Duration': {}}

    def special_tok(cnt, cls):
        event2word[cls][cls+' <PAD>'] = cnt
        word2event[cls][cnt] = cls+' <PAD>'
        cnt += 1

        event2word[cls][cls+' <MASK>'] = cnt
        word2event[cls][cnt] = cls+' <MASK>'
        cnt += 1

    # Bar
    cnt, cls = 0, 'Bar'
    event2word[cls]['Bar New'] = cnt
    word2event[cls][cnt] = 'Bar New'
    cnt += 1

    event2word[cls]['Bar Continue'] = cnt
    word2event[cls][cnt] = 'Bar Continue'
    cnt += 1
    special_tok(cnt, cls)

    # Position
    cnt, cls = 0, 'Position'
    for i in range(1, 17):
        event2word[cls][f'Position {i}/16'] = cnt
        word2event[cls][cnt] = f'Position {i}/16'
        cnt += 1

    special_tok(cnt, cls)

    # Note On
    cnt, cls = 0, 'Pitch'
    for i in range(22, 108):
        event2word[cls][f'Pitch {i}'] = cnt
        word2event[cls][cnt] = f'Pitch {i}'
        cnt += 1

    special_tok(cnt, cls)

    # Note Duration
    cnt, cls = 0, 'Duration'
    for i in range(64):
        event2word[cls][f'Duration {i}'] = cnt
        word2event[cls][cnt] = f'Duration {i}'
        cnt += 1

    special_tok(cnt, cls)
    return event2word, word2event


# MidiBERT/model.py
class Embeddings(nn.Module):
    def __init__(self, n_token, d_model):
        super().__init__()
        self.lut = nn.Embedding(n_token, d_model)
        self.d_model = d_model

    def forward(self, x):
        return self.lut(x) * math.sqrt(self.d_model)


# BERT model: similar approach to "felix"
class MidiBert(nn.Module):
    def __init__(self, bertConfig, e2w, w2e):
        super().__init__()

        self.bert = BertModel(bertConfig)
        bertConfig.d_model = bertConfig.hidden_size
        self.hidden_size = bertConfig.hidden_size
        self.bertConfig = bertConfig

        # token types: [Bar, Position, Pitch, Duration]
        self.n_tokens = []      # [3,18,88,66]
        self.classes = ['Bar', 'Position', 'Pitch', 'Duration']
        for key in self.classes:
            self.n_tokens.append(len(e2w[key]))
        self.emb_sizes = [32, 32, 32, 32]  # [256, 256, 256, 256] in the original
        self.e2w = e2w
        self.w2e = w2e

        # for deciding whether the current input_ids is a <PAD> token
        self.bar_pad_word = self.e2w['Bar']['Bar <PAD>']
        self.mask_word_np = np.array([self.e2w[etype]['%s <MASK>' % etype] for etype in self.classes],
                                     dtype=np.int64)
        self.pad_word_np = np.array([self.e2w[etype]['%s <PAD>' % etype] for etype in self.classes], dtype=np.int64)

        # word_emb: embeddings to change token ids into embeddings
        self.word_emb = []
        for i, _key in enumerate(self.classes):
            self.word_emb.append(Embeddings(self.n_tokens[i], self.emb_sizes[i]))
        self.word_emb = nn.ModuleList(self.word_emb)

        # linear layer to merge embeddings from different token types
        self.in_linear = nn.Linear(np.sum(self.emb_sizes), bertConfig.d_model)

    def forward(self, input_ids, attn_mask=None, output_hidden_states=True):
        # convert input_ids into embeddings and merge them through linear layer
        embs = []
        for i, _key in enumerate(self.classes):
            embs.append(self.word_emb[i](input_ids[..., i]))
        embs = torch.cat([*embs], dim=-1)
        emb_linear = self.in_linear(embs)

        # feed to bert
        y = self.bert(inputs_embeds=emb_linear, attention_mask=attn_mask, output_hidden_states=output_hidden_states)
        return y

    def get_rand_tok(self):
        c1, c2, c3, c4 = self.n_tokens[0], self.n_tokens[1], self.n_tokens[2], self.n_tokens[3]
        return np.array([random.choice(range(c1)), random.choice(range(c2)), random.choice(range(c3)),
                         random.choice(range(c4))])


# MidiBERT/modelLM.py
class MidiBertLM(nn.Module):
    def __init__(self, midibert: MidiBert):
        super().__init__()

        self.midibert = midibert
        self.mask_lm = MLM(self.midibert.e2w, self.midibert.n_tokens, self.midibert.hidden_size)

    def forward(self, x, attn):
        x = self.midibert(x, attn)
        return self.mask_lm(x)


class MLM(nn.Module):
    def __init__(self, e2w, n_tokens, hidden_size):
        super().__init__()

        # proj: project embeddings to logits for prediction
        self.proj = []
        for i, _etype in enumerate(e2w):
            self.proj.append(nn.Linear(hidden_size, n_tokens[i]))
        self.proj = nn.ModuleList(self.proj)

        self.e2w = e2w

    def forward(self, y):
        # feed to bert
        y = y.hidden_states[-1]

        # convert embeddings back to logits for prediction
        ys = []
        for i, _etype in enumerate(self.e2w):
            ys.append(self.proj[i](y))           # (batch_size, seq_len, dict_size)
        return ys


# MidiBERT/midi_dataset.py
class MidiDataset(Dataset):
    """
    Expected data shape: (data_num, data_len)
    """
    def __init__(self, X):
        self.data = X

    def __len__(self):
        return(len(self.data))

    def __getitem__(self, index):
        return torch.tensor(self.data[index])


# MidiBERT/trainer.py
class BERTTrainer:
    def __init__(self, midibert: MidiBert, train_dataloader, valid_dataloader,
                 lr, batch, max_seq_len, mask_percent, cpu, cuda_devices=None, bug=None):
        self.bug = bug
        self.device = torch.device('cpu')
        self.midibert = midibert        # save this for ckpt
        self.model = MidiBertLM(midibert).to(self.device)
        self.total_params = sum(p.numel() for p in self.model.parameters() if p.requires_grad)

        self.train_data = train_dataloader
        self.valid_data = valid_dataloader

        self.optim = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=0.01)
        self.batch = batch
        self.max_seq_len = max_seq_len
        self.mask_percent = mask_percent
        self.Lseq = [i for i in range(self.max_seq_len)]
        self.loss_func = nn.CrossEntropyLoss(reduction='none')

    def compute_loss(self, predict, target, loss_mask):
        loss = self.loss_func(predict, target)
        if self.bug == "loss_mask_not_applied":
            # classic: the per-position losses averaged over every position, the unmasked (copied) tokens and the
            # padding included
            return torch.mean(loss)
        loss = loss * loss_mask
        loss = torch.sum(loss) / torch.sum(loss_mask)
        return loss

    def get_mask_ind(self):
        mask_ind = random.sample(self.Lseq, round(self.max_seq_len * self.mask_percent))
        mask80 = random.sample(mask_ind, round(len(mask_ind)*0.8))
        left = list(set(mask_ind)-set(mask80))
        rand10 = random.sample(left, round(len(mask_ind)*0.1))
        cur10 = list(set(left)-set(rand10))
        return mask80, rand10, cur10

    def mask_batch(self, ori_seq_batch, max_seq_len):
        batch = ori_seq_batch.shape[0]
        if self.bug == "batch_masked_in_place":
            # classic: the deep copy dropped, so the masking writes into the targets as well
            input_ids = ori_seq_batch
        else:
            input_ids = copy.deepcopy(ori_seq_batch)
        loss_mask = torch.zeros(batch, max_seq_len)

        for b in range(batch):
            # get index for masking
            mask80, rand10, cur10 = self.get_mask_ind()
            # apply mask, random, remain current token
            for i in mask80:
                mask_word = torch.tensor(self.midibert.mask_word_np).to(self.device)
                input_ids[b][i] = mask_word
                loss_mask[b][i] = 1
            for i in rand10:
                rand_word = torch.tensor(self.midibert.get_rand_tok()).to(self.device)
                input_ids[b][i] = rand_word
                loss_mask[b][i] = 1
            for i in cur10:
                loss_mask[b][i] = 1

        loss_mask = loss_mask.to(self.device)

        # avoid attend to pad word
        attn_mask = (input_ids[:, :, 0] != self.midibert.bar_pad_word).float().to(self.device)   # (batch, seq_len)
        return input_ids, attn_mask, loss_mask

    def total_loss(self, y, ori_seq_batch, loss_mask):
        # reshape (b, s, f) -> (b, f, s)
        for i, _etype in enumerate(self.midibert.e2w):
            y[i] = y[i][:, ...].permute(0, 2, 1)

        # calculate losses
        losses, n_tok = [], []
        for i, etype in enumerate(self.midibert.e2w):
            n_tok.append(len(self.midibert.e2w[etype]))
            losses.append(self.compute_loss(y[i], ori_seq_batch[..., i], loss_mask))
        total_loss_all = [x*y for x, y in zip(losses, n_tok, strict=False)]
        total_loss = sum(total_loss_all)/sum(n_tok)   # weighted
        return total_loss, losses

    def iteration_step(self, ori_seq_batch, max_seq_len, train=True):
        """One batch of ``iteration``'s loop."""
        ori_seq_batch = ori_seq_batch.to(self.device)  # (batch, seq_len, 4)
        input_ids, attn_mask, loss_mask = self.mask_batch(ori_seq_batch, max_seq_len)

        y = self.model.forward(input_ids, attn_mask)

        # get the most likely choice with max
        outputs = []
        for i, _etype in enumerate(self.midibert.e2w):
            output = np.argmax(y[i].cpu().detach().numpy(), axis=-1)
            outputs.append(output)
        outputs = np.stack(outputs, axis=-1)
        outputs = torch.from_numpy(outputs).to(self.device)   # (batch, seq_len)

        # accuracy
        all_acc = []
        for i in range(4):
            acc = torch.sum((ori_seq_batch[:, :, i] == outputs[:, :, i]).float() * loss_mask)
            acc /= torch.sum(loss_mask)
            all_acc.append(acc)

        total_loss, losses = self.total_loss(y, ori_seq_batch, loss_mask)

        # udpate only in train
        if train:
            if self.bug != "zero_grad_dropped":
                self.model.zero_grad()
            total_loss.backward()
            clip_grad_norm_(self.model.parameters(), 3.0)
            self.optim.step()

        return total_loss, all_acc

    def valid(self):
        self.model.eval()
        total_losses = 0
        with torch.no_grad():
            for ori_seq_batch in self.valid_data:
                total_loss, _ = self.iteration_step(ori_seq_batch, self.max_seq_len, train=False)
                total_losses += total_loss.item()
        self.model.train()
        return round(total_losses/len(self.valid_data), 3)


def make_cp_songs(seed, n, e2w):
    """Synthetic CP songs: 4/4 bars of quarter notes (positions 1, 5, 9, 13 of 16), each bar an arpeggio (root,
    +4, +7, +12) of a random root, one duration per song; 16-32 notes, padded to MAX_SEQ_LEN with the pad words."""
    rng = np.random.RandomState(seed)
    pad = [e2w[k][f'{k} <PAD>'] for k in ('Bar', 'Position', 'Pitch', 'Duration')]
    songs = np.tile(np.array(pad, dtype=np.int64), (n, MAX_SEQ_LEN, 1))
    for s in range(n):
        n_notes = 4 * rng.randint(4, MAX_SEQ_LEN // 4 + 1)
        duration = e2w['Duration'][f'Duration {rng.choice([3, 7, 11])}']
        for j in range(n_notes):
            if j % 4 == 0:
                root = rng.randint(40, 80)
            bar = e2w['Bar']['Bar New'] if j % 4 == 0 else e2w['Bar']['Bar Continue']
            position = e2w['Position'][f'Position {4 * (j % 4) + 1}/16']
            pitch = e2w['Pitch'][f'Pitch {root + (0, 4, 7, 12)[j % 4]}']
            songs[s, j] = (bar, position, pitch, duration)
    return songs


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

    e2w, w2e = make_dict()

    # load_data: shuffle during training phase, 85/15 split
    training_data = make_cp_songs(seed, 160, e2w)
    index = np.arange(len(training_data))
    np.random.shuffle(index)
    training_data = training_data[index]
    split = int(len(training_data)*0.85)
    X_train, X_val = training_data[:split], training_data[split:]

    trainset = MidiDataset(X=X_train)
    validset = MidiDataset(X=X_val)

    train_loader = DataLoader(trainset, batch_size=BATCH_SIZE, shuffle=True,
                              generator=torch.Generator().manual_seed(seed))
    valid_loader = DataLoader(validset, batch_size=BATCH_SIZE)

    configuration = BertConfig(max_position_embeddings=MAX_SEQ_LEN,
                               position_embedding_type='relative_key_query',
                               hidden_size=HS, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    midibert = MidiBert(bertConfig=configuration, e2w=e2w, w2e=w2e)

    trainer = BERTTrainer(midibert, train_loader, valid_loader, LR, BATCH_SIZE, MAX_SEQ_LEN, MASK_PERCENT, True,
                          bug=bug)
    trainer.model.train()

    state = {"it": iter(train_loader)}

    def train_step():
        try:
            ori_seq_batch = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            ori_seq_batch = next(state["it"])
        total_loss, _ = trainer.iteration_step(ori_seq_batch, MAX_SEQ_LEN, train=True)
        return total_loss.detach()

    def eval_fn(model, batch):
        return trainer.valid()

    # the Program's batch: one masked batch as iteration() makes it
    ori0 = torch.as_tensor(X_train[:BATCH_SIZE])
    input_ids0, attn_mask0, loss_mask0 = trainer.mask_batch(ori0.clone(), MAX_SEQ_LEN)
    targets0 = ori0 if bug != "batch_masked_in_place" else input_ids0

    def loss_fn(y, targets):
        ori_seq_batch, loss_mask = targets
        return trainer.total_loss(list(y), ori_seq_batch, loss_mask)[0]

    return Program(name="midibert_cp", model=trainer.model, batch=((input_ids0, attn_mask0), (targets0, loss_mask0)),
                   loss_fn=loss_fn, optimizer=trainer.optim, train_step=train_step, eval_fn=eval_fn,
                   loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("batch_masked_in_place", functools.partial(_build, bug="batch_masked_in_place"), "learning_ledger",
        ("TASK",)),
    # where re-declared in review (2026-12-07): the loss ignoring the mask is what TASK's task.mask_unread
    # confirms (the loss unchanged when the mask is flipped), as batch_masked_in_place above is declared
    Bug("loss_mask_not_applied", functools.partial(_build, bug="loss_mask_not_applied"), "learning_ledger",
        ("TASK",)),
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
