"""HuggingFace's ``transfer-learning-conv-ai``: a persona-grounded dialog agent fine-tuned as a GPT-2 double-heads
model (``GPT2DoubleHeadsModel``): every training example is one dialog turn with ``num_candidates`` candidate
replies, each built by ``build_input_from_segments`` as ``<bos> persona <speaker> history ... <speaker> reply <eos>``
with speaker token types; the language-modelling labels cover only the gold reply (the last candidate, the rest
-100), the multiple-choice head reads the last token of every candidate and is trained to pick the gold one
(``mc_labels = num_candidates - 1``); the loss ``(lm_loss * lm_coef + mc_loss * mc_coef) /
gradient_accumulation_steps``, gradient clipping, AdamW with ``correct_bias=True``, an optimizer step every
``gradient_accumulation_steps`` iterations, and a learning rate decreasing linearly from lr to zero over the run
(ignite's ``PiecewiseLinear`` at every iteration start).

Source: https://github.com/huggingface/transfer-learning-conv-ai
Commit: d4c760731e8f062abd3d61ccdc8fa29ccb5e3485
Files: train.py (pad_dataset, add_special_tokens_, build_input_from_segments, get_data_loaders, train/update)
License: MIT (LICENCE; train.py: Copyright (c) 2019-present, HuggingFace Inc.)
Domain: dialog language model (GPT-2 double heads: next-token LM + next-utterance classification)

Deviations from the original:
- no weights or tokenizer can be downloaded: the model is ``GPT2DoubleHeadsModel`` built from a tiny ``GPT2Config``
  (n_embd 32, 2 layers, 2 heads, 64 positions) with random weights, and the tokenizer is a stand-in with a
  40-word vocabulary (``encoder``, ``add_special_tokens``, ``convert_tokens_to_ids``: what the script uses);
  ``add_special_tokens_`` is unchanged and resizes the embeddings for the five special tokens as written;
- data: PERSONA-CHAT (``get_dataset``) is replaced by 384 synthetic dialogs made from ``seed`` (two persona
  sentences, a history of 1-3 utterances of 3-4 words); the gold reply is the last history utterance with every
  word shifted by 7 in the vocabulary, the distractor a random utterance; ``get_data_loaders`` builds the
  instances, pads and batches them as written (personality_permutations 1, num_candidates 2, max_history 2);
- transformers has renamed ``lm_labels`` to ``labels`` and returns an output object: the loss terms are read as
  ``outputs.loss`` / ``outputs.mc_loss``; ``transformers.AdamW`` is gone: ``torch.optim.AdamW`` with
  weight_decay 0.0 (transformers' AdamW default) does the same bias-corrected update;
- ignite's ``Engine``/``PiecewiseLinear`` are not installed: the same linear decay is set on the param groups at the
  start of every iteration; one ``train_step`` is one optimizer update, i.e. ``gradient_accumulation_steps``
  iterations of ``update`` (the engine's iteration counter kept across calls);
- sizes and rates: because the model starts from random weights, lr 6.25e-5 -> 2e-3; gradient_accumulation_steps
  8 -> 2; train_batch_size 4 -> 8; n_epochs 3 (the decay reaches zero after 144 iterations, 72 updates);
- no distributed training, fp16, TensorBoard, checkpoints or progress bar; ``eval_fn`` is the ``inference`` of the
  evaluator on one batch (accuracy of the multiple-choice head; the ``logger.info(tokenizer.decode(...))`` line is
  left out).
"""

from __future__ import annotations

import functools
import pathlib
import sys
from collections import defaultdict
from itertools import chain

import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import GPT2Config, GPT2DoubleHeadsModel

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SPECIAL_TOKENS = ["<bos>", "<eos>", "<speaker1>", "<speaker2>", "<pad>"]
ATTR_TO_SPECIAL_TOKEN = {'bos_token': '<bos>', 'eos_token': '<eos>', 'pad_token': '<pad>',
                         'additional_special_tokens': ['<speaker1>', '<speaker2>']}
MODEL_INPUTS = ["input_ids", "mc_token_ids", "lm_labels", "mc_labels", "token_type_ids"]
PADDED_INPUTS = ["input_ids", "lm_labels", "token_type_ids"]

WORDS, N_DIALOGS, SHIFT = 40, 384, 7


class Args:
    num_candidates = 2
    max_history = 2
    train_batch_size = 8
    gradient_accumulation_steps = 2
    lr = 2e-3
    lm_coef = 1.0
    mc_coef = 1.0
    max_norm = 1.0
    n_epochs = 3
    personality_permutations = 1
    distributed = False
    device = "cpu"


class TinyTokenizer:
    """Stand-in for GPT2Tokenizer: a word vocabulary plus the special tokens the script adds."""

    def __init__(self):
        self.encoder = {f"w{i}": i for i in range(WORDS)}

    def add_special_tokens(self, attr):
        added = 0
        for tok in [attr['bos_token'], attr['eos_token'], attr['pad_token'], *attr['additional_special_tokens']]:
            if tok not in self.encoder:
                self.encoder[tok] = len(self.encoder)
                added += 1
        return added

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return self.encoder[tokens]
        return [self.encoder[t] for t in tokens]


def pad_dataset(dataset, padding=0):
    """ Pad the dataset. This could be optimized by defining a Dataset class and padding at the batch level, but this is simpler. """
    max_l = max(len(x) for x in dataset["input_ids"])
    for name in PADDED_INPUTS:
        dataset[name] = [x + [padding if name != "lm_labels" else -100] * (max_l - len(x)) for x in dataset[name]]
    return dataset


def add_special_tokens_(model, tokenizer):
    """ Add special tokens to the tokenizer and the model if they have not already been added. """
    orig_num_tokens = len(tokenizer.encoder)
    num_added_tokens = tokenizer.add_special_tokens(ATTR_TO_SPECIAL_TOKEN) # doesn't add if they are already there
    if num_added_tokens > 0:
        model.resize_token_embeddings(new_num_tokens=orig_num_tokens + num_added_tokens)


def build_input_from_segments(persona, history, reply, tokenizer, lm_labels=False, with_eos=True):
    """ Build a sequence of input from 3 segments: persona, history and last reply. """
    bos, eos, speaker1, speaker2 = tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS[:-1])
    sequence = [[bos] + list(chain(*persona))] + history + [reply + ([eos] if with_eos else [])]
    sequence = [sequence[0]] + [[speaker2 if (len(sequence)-i) % 2 else speaker1] + s for i, s in enumerate(sequence[1:])]
    instance = {}
    instance["input_ids"] = list(chain(*sequence))
    instance["token_type_ids"] = [speaker2 if i % 2 else speaker1 for i, s in enumerate(sequence) for _ in s]
    instance["mc_token_ids"] = len(instance["input_ids"]) - 1
    instance["lm_labels"] = [-100] * len(instance["input_ids"])
    if lm_labels:
        instance["lm_labels"] = ([-100] * sum(len(s) for s in sequence[:-1])) + [-100] + sequence[-1][1:]
    return instance


def get_dataset(gen):
    """PERSONA-CHAT's shape: personality sentences and utterances with candidates (the gold one last)."""
    def utt():
        return torch.randint(0, WORDS, (int(torch.randint(3, 5, (1,), generator=gen)),), generator=gen).tolist()
    dialogs = []
    for _ in range(N_DIALOGS):
        history = [utt() for _ in range(int(torch.randint(1, 4, (1,), generator=gen)))]
        gold = [(w + SHIFT) % WORDS for w in history[-1]]
        dialogs.append({"personality": [utt(), utt()],
                        "utterances": [{"history": history, "candidates": [utt(), gold]}]})
    return {"train": dialogs}


def get_data_loaders(args, tokenizer, gen, bug=None):
    """ Prepare the dataset for training and evaluation """
    personachat = get_dataset(gen)

    datasets = {"train": defaultdict(list)}
    for dataset_name, dataset in personachat.items():
        num_candidates = len(dataset[0]["utterances"][0]["candidates"])
        if args.num_candidates > 0 and dataset_name == 'train':
            num_candidates = min(args.num_candidates, num_candidates)
        for dialog in dataset:
            persona = dialog["personality"].copy()
            for _ in range(args.personality_permutations):
                for utterance in dialog["utterances"]:
                    history = utterance["history"][-(2*args.max_history+1):]
                    for j, candidate in enumerate(utterance["candidates"][-num_candidates:]):
                        lm_labels = bool(j == num_candidates-1)
                        if bug == "lm_labels_on_every_candidate":
                            lm_labels = True  # the distractor replies get LM targets too
                        instance = build_input_from_segments(persona, history, candidate, tokenizer, lm_labels)
                        for input_name, input_array in instance.items():
                            datasets[dataset_name][input_name].append(input_array)
                    datasets[dataset_name]["mc_labels"].append(num_candidates - 1)
                    datasets[dataset_name]["n_candidates"] = num_candidates
                persona = [persona[-1]] + persona[:-1]  # permuted personalities

    tensor_datasets = {"train": []}
    for dataset_name, dataset in datasets.items():
        dataset = pad_dataset(dataset, padding=tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS[-1]))
        for input_name in MODEL_INPUTS:
            tensor = torch.tensor(dataset[input_name])
            if input_name != "mc_labels":
                tensor = tensor.view((-1, datasets[dataset_name]["n_candidates"]) + tensor.shape[1:])
            tensor_datasets[dataset_name].append(tensor)

    train_dataset = TensorDataset(*tensor_datasets["train"])
    train_loader = DataLoader(train_dataset, batch_size=args.train_batch_size, shuffle=(not args.distributed),
                              generator=torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen))))
    return train_loader


def as_inputs(batch):
    input_ids, mc_token_ids, lm_labels, mc_labels, token_type_ids = batch
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "mc_token_ids": mc_token_ids,
            "mc_labels": mc_labels, "labels": lm_labels}


def _make_update(model, optimizer, args, state, total, bug=None):
    # Training function (one engine iteration)
    def update(batch):
        state["iteration"] += 1
        # Linearly decrease the learning rate from lr to zero (PiecewiseLinear at ITERATION_STARTED)
        for group in optimizer.param_groups:
            group["lr"] = args.lr * max(0.0, 1.0 - (state["iteration"] - 1) / total)
        if bug == "zero_grad_every_micro_batch":
            optimizer.zero_grad()
        model.train()
        batch = tuple(input_tensor.to(args.device) for input_tensor in batch)
        input_ids, mc_token_ids, lm_labels, mc_labels, token_type_ids = batch
        outputs = model(
            input_ids, token_type_ids=token_type_ids, mc_token_ids=mc_token_ids,
            mc_labels=mc_labels, labels=lm_labels
        )
        lm_loss, mc_loss = outputs.loss, outputs.mc_loss
        loss = (lm_loss * args.lm_coef + mc_loss * args.mc_coef) / args.gradient_accumulation_steps
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
        if state["iteration"] % args.gradient_accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
        return loss.item()
    return update


def _build(seed, bug=None):
    args = Args()
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    tokenizer = TinyTokenizer()
    model = GPT2DoubleHeadsModel(GPT2Config(vocab_size=len(tokenizer.encoder), n_embd=32, n_layer=2, n_head=2,
                                            n_positions=64))
    # Add special tokens if they are not already added
    add_special_tokens_(model, tokenizer)
    params = model.transformer.parameters() if bug == "mc_head_left_out_of_optimizer" else model.parameters()
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)

    train_loader = get_data_loaders(args, tokenizer, gen, bug=bug)
    total = args.n_epochs * len(train_loader)
    state = {"iteration": 0, "it": iter(train_loader)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            return next(state["it"])

    update = _make_update(model, optimizer, args, state, total, bug)

    def train_step():
        losses = [update(next_batch()) for _ in range(args.gradient_accumulation_steps)]
        return torch.tensor(sum(losses))

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            inputs = as_inputs(tuple(batch[k] for k in ("input_ids", "mc_token_ids", "labels", "mc_labels",
                                                           "token_type_ids")))
            # if we dont send labels to model, it doesnt return losses
            out = model(inputs["input_ids"], token_type_ids=inputs["token_type_ids"],
                        mc_token_ids=inputs["mc_token_ids"])
        model.train()
        return float((out.mc_logits.argmax(-1) == inputs["mc_labels"]).float().mean())

    first = as_inputs(next(iter(DataLoader(train_loader.dataset, batch_size=args.train_batch_size))))
    return Program(name="convai_gpt2_doubleheads", model=model, batch=first,
                   loss_fn=lambda out, labels: out.loss * args.lm_coef + out.mc_loss * args.mc_coef,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # lm_labels=True for every candidate (``bool(j == num_candidates-1)`` dropped): the LM is also trained to
    # produce the random distractor replies, targets that nothing in the dialog predicts.
    Bug("lm_labels_on_every_candidate", functools.partial(_build, bug="lm_labels_on_every_candidate"),
        "learning_ledger", ("TASK",)),
    # AdamW over model.transformer only: the new multiple-choice head (a SequenceSummary on top of GPT-2) never
    # trains; the LM head is tied to the token embeddings and still learns.
    Bug("mc_head_left_out_of_optimizer", functools.partial(_build, bug="mc_head_left_out_of_optimizer"),
        "four_structures", ("multiple_choice_head",)),
    # optimizer.zero_grad() at the start of every iteration under gradient accumulation: each update uses only
    # the last micro-batch's gradient (classic misplaced zero_grad).
    Bug("zero_grad_every_micro_batch", functools.partial(_build, bug="zero_grad_every_micro_batch"), "step_probe",
        (), kind="step.gradient_discarded"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
