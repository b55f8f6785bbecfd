"""T5 summarization fine-tuning from abhimishra91/transformers-tutorials (``transformers_summarization_wandb.ipynb``):
a ``CustomDataset`` that prefixes each article with ``summarize:`` and pads source and summary to fixed lengths,
the training function's teacher forcing with the pad positions of the labels set to -100,
``T5ForConditionalGeneration``'s own cross-entropy, Adam at 1e-4, and ``validate``'s beam-search generation.

Source: https://github.com/abhimishra91/transformers-tutorials
Commit: 3d5a9b1d735eb68648588526d77d6dda7735d631
Files: transformers_summarization_wandb.ipynb (``CustomDataset``, ``train``, ``validate``, ``main``)
License: MIT (Copyright (c) 2020 Abhishek Kumar Mishra; full text in LICENSES/abhimishra91-transformers-tutorials.txt)
Domain: seq2seq summarization (T5 from config, teacher forcing with hand-shifted targets, padded labels at -100)

Kept as written: ``CustomDataset`` (whitespace cleanup, ``batch_encode_plus(max_length, pad_to_max_length=True,
return_tensors='pt')`` for source and target, the four returned tensors), ``train``'s loop body but for the
labels (below: pads set to -100, ``outputs[0]``, zero_grad, backward, step), ``validate``'s ``generate`` arguments (num_beams 2,
repetition_penalty 2.5, length_penalty 1.0, early_stopping) and decoding, ``main``'s 80/20 ``df.sample`` split with
``random_state=SEED`` and its ``reset_index``, the loaders' parameters, ``torch.optim.Adam(lr=LEARNING_RATE)``.

Deviations from the original:
- the hand shift ``decoder_input_ids = y[:, :-1]``, ``lm_labels = y[:, 1:]`` is huggingface/transformers#5987
  (https://github.com/huggingface/transformers/issues/5987): T5's targets carry no start token, so it drops the
  first summary token from the labels and never shows the decoder the start token ``generate`` begins with. The
  correct program takes that issue's fix, ``lm_labels = y`` with pads at -100 and no ``decoder_input_ids`` (T5's
  ``_shift_right`` prepends ``decoder_start_token_id``); the as-written shift is the bug variant
  ``hand_shift_drops_first_token``;
- the news_summary.csv data, the t5-base weights and the SentencePiece T5Tokenizer are not here: the model is
  ``T5ForConditionalGeneration`` built from a small ``T5Config`` (d_model 64, d_kv 32, d_ff 128, 2 encoder and 2
  decoder layers, 2 heads, 8 relative-attention buckets) with random weights; the articles are synthetic, made from
  ``seed`` (8-14 filler words with 1-3 "headline" words among them; the summary is the headline words in order), in
  a ``pandas`` frame with the ``text`` / ``ctext`` columns; the tokenizer is a word-level stand-in with T5's
  conventions (pad 0, eos 1, unk 2; eos appended, padding to ``max_length``, truncation keeping the eos out as
  ``pad_to_max_length`` did) and the ``batch_encode_plus`` / ``decode`` calls the notebook makes;
- ``lm_labels=`` (removed from transformers) is ``labels=``;
- sizes and rate for 2 CPU cores: MAX_LEN 512 -> 24, SUMMARY_LEN 150 -> 8, 320 articles, TRAIN_BATCH_SIZE 2 -> 8,
  LEARNING_RATE 1e-4 -> 1e-3 (a randomly initialized T5 and 30 steps, not a fine-tuned t5-base over 2 epochs);
  ``validate``'s ``max_length`` 150 -> SUMMARY_LEN;
- wandb, printing, TPU and the predictions csv are left out; ``train_step`` is one batch of ``train`` (the shuffled
  loader, drawing with a ``torch.Generator(seed)``, restarts at each epoch's end); ``eval_fn`` is the exact-match
  rate of ``validate``'s generated summaries on 16 validation articles;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP031

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset
from transformers import T5Config, T5ForConditionalGeneration

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program


class CustomDataset(Dataset):

    def __init__(self, dataframe, tokenizer, source_len, summ_len):
        self.tokenizer = tokenizer
        self.data = dataframe
        self.source_len = source_len
        self.summ_len = summ_len
        self.text = self.data.text
        self.ctext = self.data.ctext

    def __len__(self):
        return len(self.text)

    def __getitem__(self, index):
        ctext = str(self.ctext[index])
        ctext = ' '.join(ctext.split())

        text = str(self.text[index])
        text = ' '.join(text.split())

        source = self.tokenizer.batch_encode_plus([ctext], max_length= self.source_len, pad_to_max_length=True,return_tensors='pt')
        target = self.tokenizer.batch_encode_plus([text], max_length= self.summ_len, pad_to_max_length=True,return_tensors='pt')

        source_ids = source['input_ids'].squeeze()
        source_mask = source['attention_mask'].squeeze()
        target_ids = target['input_ids'].squeeze()

        return {
            'source_ids': source_ids.to(dtype=torch.long),
            'source_mask': source_mask.to(dtype=torch.long),
            'target_ids': target_ids.to(dtype=torch.long),
            'target_ids_y': target_ids.to(dtype=torch.long)
        }


class _WordTokenizer:
    """(port) Stands in for T5Tokenizer: whole words, pad 0 / eos 1 / unk 2, eos appended."""

    pad_token_id, eos_token_id = 0, 1

    def __init__(self, words):
        self.itos = ['<pad>', '</s>', '<unk>'] + sorted(set(words))
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def batch_encode_plus(self, texts, max_length, pad_to_max_length, return_tensors):
        ids = [[self.stoi.get(w, 2) for w in t.split()][:max_length - 1] + [self.eos_token_id] for t in texts]
        ids = [x + [self.pad_token_id] * (max_length - len(x)) if pad_to_max_length else x for x in ids]
        return {'input_ids': torch.tensor(ids), 'attention_mask': (torch.tensor(ids) != self.pad_token_id).long()}

    def decode(self, ids, skip_special_tokens=True, clean_up_tokenization_spaces=True):
        return ' '.join(self.itos[int(i)] for i in ids if not (skip_special_tokens and int(i) < 3))


def _articles(rng, n):
    """(port) Filler words with 1-3 headline words among them; the summary is the headline words in order."""
    rows = []
    for _ in range(n):
        words = ['w%d' % rng.integers(0, 30) for _ in range(int(rng.integers(8, 15)))]
        slots = sorted(rng.choice(len(words), int(rng.integers(1, 4)), replace=False))
        heads = ['H%d' % rng.integers(0, 12) for _ in slots]
        for s, h in zip(slots, heads, strict=True):
            words[s] = h
        rows.append({'text': ' '.join(heads), 'ctext': ' '.join(words)})
    return pd.DataFrame(rows)


def _data(SEED, MAX_LEN, SUMMARY_LEN):
    df = _articles(np.random.default_rng(SEED), 320)
    df = df[['text','ctext']]
    df.ctext = 'summarize: ' + df.ctext
    tokenizer = _WordTokenizer(' '.join(df.ctext).split() + ' '.join(df.text).split())
    train_size = 0.8
    train_dataset=df.sample(frac=train_size,random_state = SEED)
    val_dataset=df.drop(train_dataset.index).reset_index(drop=True)
    train_dataset = train_dataset.reset_index(drop=True)
    training_set = CustomDataset(train_dataset, tokenizer, MAX_LEN, SUMMARY_LEN)
    val_set = CustomDataset(val_dataset.iloc[:16], tokenizer, MAX_LEN, SUMMARY_LEN)
    return tokenizer, training_set, val_set


def _build(seed, bug=None):
    TRAIN_BATCH_SIZE, VALID_BATCH_SIZE, LEARNING_RATE = 8, 2, 1e-3  # (port) 2, 2, 1e-4
    SEED, MAX_LEN, SUMMARY_LEN = seed, 24, 8  # (port) 42, 512, 150
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    tokenizer, training_set, val_set = _data(SEED, MAX_LEN, SUMMARY_LEN)
    training_loader = DataLoader(training_set, batch_size=TRAIN_BATCH_SIZE, shuffle=True, num_workers=0,
                                 generator=torch.Generator().manual_seed(SEED))
    val_loader = DataLoader(val_set, batch_size=VALID_BATCH_SIZE, shuffle=False, num_workers=0)
    config = T5Config(vocab_size=len(tokenizer.itos), d_model=64, d_kv=32, d_ff=128, num_layers=2,
                      num_decoder_layers=2, num_heads=2, relative_attention_num_buckets=8, pad_token_id=0,
                      eos_token_id=1, decoder_start_token_id=0)
    model = T5ForConditionalGeneration(config)
    optimizer = torch.optim.Adam(params =  model.parameters(), lr=LEARNING_RATE)
    st = {"it": iter(training_loader)}

    def batch_inputs(data):
        y = data['target_ids'].to(dtype = torch.long)
        ids = data['source_ids'].to(dtype = torch.long)
        mask = data['source_mask'].to(dtype = torch.long)
        if bug == "hand_shift_drops_first_token":  # as written at the commit
            y_ids = y[:, :-1].contiguous()
            lm_labels = y[:, 1:].clone().detach()
            lm_labels[y[:, 1:] == tokenizer.pad_token_id] = -100
            return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": y_ids, "labels": lm_labels}
        # (port) huggingface/transformers#5987's fix: T5 builds decoder_input_ids from the labels (_shift_right)
        lm_labels = y.clone().detach()
        if bug != "pad_not_masked":
            lm_labels[y == tokenizer.pad_token_id] = -100
        return {"input_ids": ids, "attention_mask": mask, "labels": lm_labels}

    def train_step():
        model.train()
        data = next(st["it"], None)
        if data is None:
            st["it"] = iter(training_loader)
            data = next(st["it"])
        inputs = batch_inputs(data)
        outputs = model(**inputs)
        loss = outputs[0]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        predictions, actuals = validate(tokenizer, model, val_loader, SUMMARY_LEN)
        model.train()
        return float(np.mean([p == a for p, a in zip(predictions, actuals, strict=True)]))

    batch = batch_inputs(next(iter(DataLoader(training_set, batch_size=TRAIN_BATCH_SIZE))))
    return Program(name="abhimishra_t5_summarization", model=model, batch=batch,
                   loss_fn=lambda outputs, _labels: outputs[0], optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn, loader=training_loader)


def validate(tokenizer, model, loader, max_length):
    model.eval()
    predictions = []
    actuals = []
    with torch.no_grad():
        for _, data in enumerate(loader, 0):
            y = data['target_ids'].to(dtype = torch.long)
            ids = data['source_ids'].to(dtype = torch.long)
            mask = data['source_mask'].to(dtype = torch.long)
            generated_ids = model.generate(
                input_ids = ids,
                attention_mask = mask,
                max_length=max_length,
                num_beams=2,
                repetition_penalty=2.5,
                length_penalty=1.0,
                early_stopping=True
                )
            preds = [tokenizer.decode(g, skip_special_tokens=True, clean_up_tokenization_spaces=True) for g in generated_ids]
            target = [tokenizer.decode(t, skip_special_tokens=True, clean_up_tokenization_spaces=True)for t in y]
            predictions.extend(preds)
            actuals.extend(target)
    return predictions, actuals


build = functools.partial(_build, bug=None)

BUGS = [
    # as written at the commit: decoder_input_ids = y[:, :-1] and labels y[:, 1:] by hand. T5's targets carry no
    # start token, so the first summary token is never a label and the decoder never sees the decoder_start_token
    # that generate() begins with (huggingface/transformers#5987,
    # https://github.com/huggingface/transformers/issues/5987; asked in this repository's #15,
    # https://github.com/abhimishra91/transformers-tutorials/issues/15).
    Bug("hand_shift_drops_first_token", functools.partial(_build, bug="hand_shift_drops_first_token"),
        "learning_ledger", ("TASK",)),
    # classic: the -100 line dropped, so the padded summary positions are trained to predict <pad> and dominate
    # the loss.
    Bug("pad_not_masked", functools.partial(_build, bug="pad_not_masked"), "learning_ledger", ("OBJECTIVE",)),
]
