"""GPT2-Chinese's training script: a Hugging Face GPT-2 built from a JSON config (random weights), a BERT-style
character tokenizer (``vocab_small.txt``), the corpus tokenized into ``num_pieces`` piece files (articles joined
with ``[MASK]`` at the start and ``[CLS]`` at the end, newlines as ``[SEP]``), every piece cut into ``n_ctx``-token
windows at ``stride``, pieces and windows shuffled each epoch; the model called with ``labels=input_ids`` (it shifts
them itself), gradient clipping at ``max_grad_norm`` 1.0 after each backward, AdamW (``correct_bias=True``) with a
linear warm-up / linear decay schedule, ``optimizer.step(); optimizer.zero_grad(); scheduler.step()`` every
``gradient_accumulation`` batches.

Source: https://github.com/Morizeyao/GPT2-Chinese
Commit: bbb44651be8361faef35d2a857451d231b5ebe14
Files: train.py (``build_files``, ``main``), config/model_config_test.json, tokenizations/tokenization_bert.py
License: MIT (Copyright (c) 2019 Zeyao Du; full text in LICENSES/Morizeyao-GPT2-Chinese.txt)
Domain: causal language model (Chinese characters, HF GPT-2 from config)

Deviations from the original:
- data: ``data/train.json`` (a list of Chinese articles) is replaced by synthetic articles made from ``seed``: 24
  CJK characters, each article a chain where the next character is a fixed successor of the current one (prob.
  0.85) or a random character, so a character is predictable from the one before it; ``build_files`` writes the
  piece files into a temporary directory as in the original and the loop reads them back;
- tokenizer: the repository's copy of the old ``BertTokenizer`` (``tokenizations/tokenization_bert.py``) is replaced
  by ``transformers.BertTokenizer`` on a vocabulary file written here (the 5 special tokens and the 24 characters):
  the same basic + WordPiece tokenization, each CJK character one token;
- the transformers 2.x names the script uses are gone: ``transformers.modeling_gpt2.GPT2Config/GPT2LMHeadModel`` ->
  ``transformers.GPT2Config/GPT2LMHeadModel``, ``transformers.AdamW(correct_bias=True)`` -> ``torch.optim.AdamW``
  (the same update), ``WarmupLinearSchedule(warmup_steps, t_total)`` -> ``get_linear_schedule_with_warmup`` (the same
  multiplier);
- sizes: config/model_config_test.json's n_ctx/n_positions 64 -> 32, n_embd 128 -> 32, n_head 2, n_layer 1,
  vocab_size 13317 -> 29 (the vocabulary here); stride 768 -> 16, num_pieces 100 -> 4, min_length 128 -> 16,
  batch_size 8 kept; lr 1.5e-4 -> 1e-3 and warmup_steps 2000 -> 5 so that the 30 steps of the self-check show
  learning (the original trains for 5 epochs on a large corpus);
- CUDA/DataParallel/apex fp16, tensorboard, printing and checkpoint saving are dropped; the script's module-level
  ``random.shuffle`` draws come from a ``random.Random(seed)``;
- one ``train_step`` is one iteration of the innermost ``for step in range(len(samples) // batch_size)`` loop (the
  next piece read and its windows shuffled when one runs out, the next epoch when all pieces are used); the Program's
  batch is the first batch of windows (``input_ids`` and ``labels`` the same tensor);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP032, RUF059  (the original's style is kept as written)

from __future__ import annotations

import functools
import json
import os
import pathlib
import random
import sys
import tempfile

import numpy as np
import torch
import transformers
from transformers import BertTokenizer, get_linear_schedule_with_warmup

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

CHARS = "天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏"
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

MODEL_CONFIG = {  # config/model_config_test.json, sizes reduced
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "n_ctx": 32,
    "n_embd": 32,
    "n_head": 2,
    "n_layer": 1,
    "n_positions": 32,
    "vocab_size": len(SPECIAL) + len(CHARS),
}


def make_corpus(rng, n_articles=48):
    succ = list(range(len(CHARS)))
    rng.shuffle(succ)
    lines = []
    for _ in range(n_articles):
        c = rng.randrange(len(CHARS))
        text = []
        for _ in range(rng.randint(40, 70)):
            text.append(CHARS[c])
            c = succ[c] if rng.random() < 0.85 else rng.randrange(len(CHARS))
        lines.append("".join(text))
    return lines


# train.py
def build_files(data_path, tokenized_data_path, num_pieces, full_tokenizer, min_length):
    with open(data_path, 'r', encoding='utf8') as f:
        lines = json.load(f)
        lines = [line.replace('\n', ' [SEP] ') for line in lines]  # 用[SEP]表示换行, 段落之间使用SEP表示段落结束
    all_len = len(lines)
    if not os.path.exists(tokenized_data_path):
        os.mkdir(tokenized_data_path)
    for i in range(num_pieces):
        sublines = lines[all_len // num_pieces * i: all_len // num_pieces * (i + 1)]
        if i == num_pieces - 1:
            sublines.extend(lines[all_len // num_pieces * (i + 1):])  # 把尾部例子添加到最后一个piece
        sublines = [full_tokenizer.tokenize(line) for line in sublines if
                    len(line) > min_length]  # 只考虑长度超过min_length的句子
        sublines = [full_tokenizer.convert_tokens_to_ids(line) for line in sublines]
        full_line = []
        for subline in sublines:
            full_line.append(full_tokenizer.convert_tokens_to_ids('[MASK]'))  # 文章开头添加MASK表示文章开始
            full_line.extend(subline)
            full_line.append(full_tokenizer.convert_tokens_to_ids('[CLS]'))  # 文章之间添加CLS表示文章结束
        with open(tokenized_data_path + 'tokenized_train_{}.txt'.format(i), 'w') as f:
            for id in full_line:
                f.write(str(id) + ' ')


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tmp = tempfile.mkdtemp(prefix="gpt2chinese_")
    raw_data_path = os.path.join(tmp, 'train.json')
    with open(raw_data_path, 'w', encoding='utf8') as f:
        json.dump(make_corpus(rng), f, ensure_ascii=False)
    vocab_path = os.path.join(tmp, 'vocab_small.txt')
    with open(vocab_path, 'w', encoding='utf8') as f:
        f.write('\n'.join(SPECIAL + list(CHARS)) + '\n')
    config_path = os.path.join(tmp, 'model_config.json')
    with open(config_path, 'w') as f:
        json.dump(MODEL_CONFIG, f)

    # the argparse defaults (sizes reduced, see the docstring)
    tokenized_data_path = os.path.join(tmp, 'tokenized') + os.sep
    epochs = 5
    batch_size = 8
    lr = 1e-3
    warmup_steps = 5
    stride = 16
    gradient_accumulation = 1
    max_grad_norm = 1.0
    num_pieces = 4
    min_length = 16

    model_config = transformers.GPT2Config.from_json_file(config_path)
    n_ctx = model_config.n_ctx
    full_tokenizer = BertTokenizer(vocab_file=vocab_path)
    full_tokenizer.max_len = 999999

    build_files(data_path=raw_data_path, tokenized_data_path=tokenized_data_path, num_pieces=num_pieces,
                full_tokenizer=full_tokenizer, min_length=min_length)

    model = transformers.GPT2LMHeadModel(config=model_config)
    model.train()

    full_len = 0
    for i in range(num_pieces):
        with open(tokenized_data_path + 'tokenized_train_{}.txt'.format(i), 'r') as f:
            full_len += len([int(item) for item in f.read().strip().split()])
    total_steps = int(full_len / stride * epochs / batch_size / gradient_accumulation)

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)  # transformers.AdamW(..., correct_bias=True)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=warmup_steps,
                                                num_training_steps=total_steps)

    def read_piece(i):
        with open(tokenized_data_path + 'tokenized_train_{}.txt'.format(i), 'r') as f:
            line = f.read().strip()
        tokens = line.split()
        tokens = [int(token) for token in tokens]
        start_point = 0
        samples = []
        while start_point < len(tokens) - n_ctx:
            samples.append(tokens[start_point: start_point + n_ctx])
            start_point += stride
        if start_point < len(tokens):
            samples.append(tokens[len(tokens) - n_ctx:])
        rng.shuffle(samples)
        return samples

    def batches():
        for _epoch in range(epochs):
            x = np.linspace(0, num_pieces - 1, num_pieces, dtype=np.int32)
            rng.shuffle(x)
            for i in x:
                samples = read_piece(i)
                for step in range(len(samples) // batch_size):  # drop last
                    #  prepare data
                    batch = samples[step * batch_size: (step + 1) * batch_size]
                    batch_inputs = []
                    for ids in batch:
                        int_ids = [int(x) for x in ids]
                        batch_inputs.append(int_ids)
                    yield torch.tensor(batch_inputs).long()

    state = {"it": batches(), "overall_step": 0, "running_loss": 0.0}

    def train_step():
        try:
            batch_inputs = next(state["it"])
        except StopIteration:
            state["it"] = batches()
            batch_inputs = next(state["it"])
        overall_step = state["overall_step"]

        #  forward pass
        if bug == "labels_pre_shifted":
            # the window shifted by hand for a model that shifts its labels itself
            outputs = model.forward(input_ids=batch_inputs[:, :-1], labels=batch_inputs[:, 1:])
        else:
            outputs = model.forward(input_ids=batch_inputs, labels=batch_inputs)
        loss, logits = outputs[:2]

        #  get loss
        if gradient_accumulation > 1:
            loss = loss / gradient_accumulation

        #  loss backward
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)

        #  optimizer step
        if (overall_step + 1) % gradient_accumulation == 0:
            state["running_loss"] += loss.item()
            optimizer.step()
            if bug != "no_zero_grad":
                optimizer.zero_grad()
            scheduler.step()
        state["overall_step"] += 1
        return loss.detach() * gradient_accumulation

    def eval_fn(model, batch):
        inputs, _labels = batch
        was_training = model.training
        model.eval()
        with torch.no_grad():
            loss = model(**inputs)[0]
        model.train(was_training)
        return float(loss)

    first = torch.tensor(read_piece(0)[:batch_size]).long()
    if bug == "labels_pre_shifted":
        inputs = {"input_ids": first[:, :-1], "labels": first[:, 1:]}
    else:
        inputs = {"input_ids": first, "labels": first}
    return Program(name="gpt2chinese_lm", model=model, batch=(inputs, inputs["labels"]),
                   loss_fn=lambda outputs, _labels: outputs[0], optimizer=optimizer, train_step=train_step,
                   eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the labels shifted by hand before a Hugging Face causal LM that shifts them again: every position is trained
    # to predict the character two ahead (classic).
    Bug("labels_pre_shifted", functools.partial(_build, bug="labels_pre_shifted"), "learning_ledger", ("TASK",)),
    # optimizer.zero_grad() dropped from the accumulation branch (classic): every batch's gradient adds to the
    # earlier ones.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
