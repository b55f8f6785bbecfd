"""BERT + CRF named-entity recognition from lonePatient's BERT-NER-Pytorch (``run_ner_crf.py``): ``BertCrfForNer``
(BERT, dropout, a linear emission layer, a CRF whose log-likelihood is negated into the loss), BIOS tags over
characters (the CNER Chinese-resume label list), AdamW over six parameter groups (BERT at ``learning_rate``, the CRF
and the classifier at ``crf_learning_rate``, bias / LayerNorm without decay), linear warm-up and decay, gradient-norm
clipping, Viterbi decoding and entity-level F1 (``SeqEntityScore``) in ``evaluate``.

Source: https://github.com/lonePatient/BERT-NER-Pytorch
Commit: 7c938a2ded28d8d379fef1879e07da08df5a1eb8
Files: run_ner_crf.py (``train``, ``evaluate``), models/bert_for_ner.py (``BertCrfForNer``), models/layers/crf.py,
processors/ner_seq.py (``convert_examples_to_features``, ``collate_fn``, ``CnerProcessor``), processors/utils_ner.py
(``get_entity_bios``), metrics/ner_metrics.py (``SeqEntityScore``), tools/finetuning_argparse.py,
scripts/run_ner_crf.sh
License: MIT (Copyright (c) 2020 Weitang Liu; full text in LICENSES/lonePatient-BERT-NER-Pytorch.txt)
Domain: sequence labelling, named-entity recognition (character-level BIOS tags, BERT from config + CRF)

Kept as written: ``BertCrfForNer`` (``outputs = (-1*loss,)+outputs``), the ``CRF`` module (forward with
``reduction='mean'``, ``_compute_score``, ``_compute_normalizer``, ``_viterbi_decode``), ``CnerProcessor``'s labels and
its ``_create_examples`` (M-/E- mapped to I-, and the first line skipped, as in the original), ``convert_examples_to_
features`` ([CLS] / [SEP] labelled 'O', padding with 0), ``collate_fn`` (cut to the batch's longest), ``train``'s
optimizer groups, ``get_linear_schedule_with_warmup`` with ``warmup_proportion`` 0.1 over ``len(loader) * epochs``,
and its loop body (``model.train()``, the inputs dict with ``labels = batch[3]`` and ``token_type_ids = batch[2]``,
``outputs[0]``, backward, ``clip_grad_norm_(max_grad_norm)``, step, scheduler step, ``model.zero_grad()``),
``evaluate``'s decoding and its ``SeqEntityScore`` update loop over each sentence's inner positions.

Deviations from the original:
- the CNER files and the pretrained bert-base-chinese weights are not here: ``BertCrfForNer`` is built from a small
  ``BertConfig`` (hidden 64, 2 layers, 2 heads, intermediate 128, 23 labels) with random weights, and the sentences
  are synthetic resume-like character sequences made from ``seed`` (filler characters tagged O; NAME, ORG, EDU,
  TITLE, LOC, RACE entities drawn from their own character sets, one-character NAME/ORG/RACE tagged S-, longer ones
  B-/I-), read as ``_read_text`` would return them; the tokenizer is a character vocabulary with BertTokenizer's
  ``tokenize`` (whitespace split of the joined characters) and ``convert_tokens_to_ids``.
- sizes and rates for 2 CPU cores: ``train_max_seq_length`` 128 -> 32, ``per_gpu_train_batch_size`` 24 -> 16,
  256 training and 64 dev sentences, ``num_train_epochs`` 4; ``learning_rate`` 3e-5 -> 1e-3 and ``crf_learning_
  rate`` 1e-3 -> 1e-2 (a randomly initialized BERT and 30 steps, not a fine-tuned one over epochs).
- ``BertCrfForNer.__init__`` ends with ``self.post_init()`` for ``self.init_weights()`` (transformers 5 needs the
  former to set up the model; it runs the same weight initialization);
- ``transformers.AdamW`` (removed from transformers 5) is ``torch.optim.AdamW`` (the same update with
  ``correct_bias=True``); the CRF's ``mask.byte()`` is ``mask.bool()`` where it feeds ``torch.where`` (which takes
  only boolean conditions now).
- ``train`` is not run an epoch at a time: ``train_step`` is one batch of its loop (``gradient_accumulation_steps``
  1, no fp16 / DataParallel / checkpoints / progress bar), the RandomSampler drawing with a ``torch.Generator(seed)``;
  it returns the loss. ``eval_fn`` is ``evaluate``'s entity F1 on the dev set.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP031, PLR0402, UP035, UP045, UP006, SIM102, UP004, RUF059, PLR1736

from __future__ import annotations

import functools
import pathlib
import sys
from collections import Counter
from typing import List, Optional

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler, TensorDataset
from transformers import BertConfig, BertModel, BertPreTrainedModel, get_linear_schedule_with_warmup

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

MAX_SEQ = 32  # (port) 128
BATCH = 16  # (port) 24
LEARNING_RATE = 1e-3  # (port) 3e-5
CRF_LEARNING_RATE = 1e-2  # (port) 1e-3


# ---- models/layers/crf.py ------------------------------------------------------------------------------------------
class CRF(nn.Module):
    def __init__(self, num_tags: int, batch_first: bool = False) -> None:
        if num_tags <= 0:
            raise ValueError(f'invalid number of tags: {num_tags}')
        super().__init__()
        self.num_tags = num_tags
        self.batch_first = batch_first
        self.start_transitions = nn.Parameter(torch.empty(num_tags))
        self.end_transitions = nn.Parameter(torch.empty(num_tags))
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags))

        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.uniform_(self.start_transitions, -0.1, 0.1)
        nn.init.uniform_(self.end_transitions, -0.1, 0.1)
        nn.init.uniform_(self.transitions, -0.1, 0.1)

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}(num_tags={self.num_tags})'

    def forward(self, emissions: torch.Tensor,
                tags: torch.LongTensor,
                mask: Optional[torch.ByteTensor] = None,
                reduction: str = 'mean') -> torch.Tensor:
        if reduction not in ('none', 'sum', 'mean', 'token_mean'):
            raise ValueError(f'invalid reduction: {reduction}')
        if mask is None:
            mask = torch.ones_like(tags, dtype=torch.uint8, device=tags.device)
        if mask.dtype != torch.bool:  # (port) torch.uint8 / mask.byte()
            mask = mask.bool()
        self._validate(emissions, tags=tags, mask=mask)

        if self.batch_first:
            emissions = emissions.transpose(0, 1)
            tags = tags.transpose(0, 1)
            mask = mask.transpose(0, 1)

        # shape: (batch_size,)
        numerator = self._compute_score(emissions, tags, mask)
        # shape: (batch_size,)
        denominator = self._compute_normalizer(emissions, mask)
        # shape: (batch_size,)
        llh = numerator - denominator

        if reduction == 'none':
            return llh
        if reduction == 'sum':
            return llh.sum()
        if reduction == 'mean':
            return llh.mean()
        return llh.sum() / mask.float().sum()

    def decode(self, emissions: torch.Tensor,
               mask: Optional[torch.ByteTensor] = None,
               nbest: Optional[int] = None,
               pad_tag: Optional[int] = None) -> List[List[List[int]]]:
        if nbest is None:
            nbest = 1
        if mask is None:
            mask = torch.ones(emissions.shape[:2], dtype=torch.uint8,
                              device=emissions.device)
        if mask.dtype != torch.bool:  # (port) torch.uint8 / mask.byte()
            mask = mask.bool()
        self._validate(emissions, mask=mask)

        if self.batch_first:
            emissions = emissions.transpose(0, 1)
            mask = mask.transpose(0, 1)

        return self._viterbi_decode(emissions, mask, pad_tag).unsqueeze(0)  # (port) nbest 1 only

    def _validate(self, emissions: torch.Tensor,
                  tags: Optional[torch.LongTensor] = None,
                  mask: Optional[torch.ByteTensor] = None) -> None:
        if emissions.dim() != 3:
            raise ValueError(f'emissions must have dimension of 3, got {emissions.dim()}')
        if emissions.size(2) != self.num_tags:
            raise ValueError(
                f'expected last dimension of emissions is {self.num_tags}, '
                f'got {emissions.size(2)}')
        if tags is not None:
            if emissions.shape[:2] != tags.shape:
                raise ValueError(
                    'the first two dimensions of emissions and tags must match, '
                    f'got {tuple(emissions.shape[:2])} and {tuple(tags.shape)}')
        if mask is not None:
            if emissions.shape[:2] != mask.shape:
                raise ValueError(
                    'the first two dimensions of emissions and mask must match, '
                    f'got {tuple(emissions.shape[:2])} and {tuple(mask.shape)}')
            no_empty_seq = not self.batch_first and mask[0].all()
            no_empty_seq_bf = self.batch_first and mask[:, 0].all()
            if not no_empty_seq and not no_empty_seq_bf:
                raise ValueError('mask of the first timestep must all be on')

    def _compute_score(self, emissions: torch.Tensor,
                       tags: torch.LongTensor,
                       mask: torch.ByteTensor) -> torch.Tensor:
        # emissions: (seq_length, batch_size, num_tags)
        # tags: (seq_length, batch_size)
        # mask: (seq_length, batch_size)
        seq_length, batch_size = tags.shape
        mask = mask.float()

        # Start transition score and first emission
        # shape: (batch_size,)
        score = self.start_transitions[tags[0]]
        score += emissions[0, torch.arange(batch_size), tags[0]]

        for i in range(1, seq_length):
            # Transition score to next tag, only added if next timestep is valid (mask == 1)
            # shape: (batch_size,)
            score += self.transitions[tags[i - 1], tags[i]] * mask[i]

            # Emission score for next tag, only added if next timestep is valid (mask == 1)
            # shape: (batch_size,)
            score += emissions[i, torch.arange(batch_size), tags[i]] * mask[i]

        # End transition score
        # shape: (batch_size,)
        seq_ends = mask.long().sum(dim=0) - 1
        # shape: (batch_size,)
        last_tags = tags[seq_ends, torch.arange(batch_size)]
        # shape: (batch_size,)
        score += self.end_transitions[last_tags]

        return score

    def _compute_normalizer(self, emissions: torch.Tensor,
                            mask: torch.ByteTensor) -> torch.Tensor:
        # emissions: (seq_length, batch_size, num_tags)
        # mask: (seq_length, batch_size)
        seq_length = emissions.size(0)

        # Start transition score and first emission; score has size of
        # (batch_size, num_tags) where for each batch, the j-th column stores
        # the score that the first timestep has tag j
        # shape: (batch_size, num_tags)
        score = self.start_transitions + emissions[0]

        for i in range(1, seq_length):
            # Broadcast score for every possible next tag
            # shape: (batch_size, num_tags, 1)
            broadcast_score = score.unsqueeze(2)

            # Broadcast emission score for every possible current tag
            # shape: (batch_size, 1, num_tags)
            broadcast_emissions = emissions[i].unsqueeze(1)

            # Compute the score tensor of size (batch_size, num_tags, num_tags) where
            # for each sample, entry at row i and column j stores the sum of scores of all
            # possible tag sequences so far that end with transitioning from tag i to tag j
            # and emitting
            # shape: (batch_size, num_tags, num_tags)
            next_score = broadcast_score + self.transitions + broadcast_emissions

            # Sum over all possible current tags, but we're in score space, so a sum
            # becomes a log-sum-exp: for each sample, entry i stores the sum of scores of
            # all possible tag sequences so far, that end in tag i
            # shape: (batch_size, num_tags)
            next_score = torch.logsumexp(next_score, dim=1)

            # Set score to the next score if this timestep is valid (mask == 1)
            # shape: (batch_size, num_tags)
            score = torch.where(mask[i].unsqueeze(1), next_score, score)

        # End transition score
        # shape: (batch_size, num_tags)
        score += self.end_transitions

        # Sum (log-sum-exp) over all possible tags
        # shape: (batch_size,)
        return torch.logsumexp(score, dim=1)

    def _viterbi_decode(self, emissions: torch.FloatTensor,
                        mask: torch.ByteTensor,
                        pad_tag: Optional[int] = None) -> List[List[int]]:
        # emissions: (seq_length, batch_size, num_tags)
        # mask: (seq_length, batch_size)
        # return: (batch_size, seq_length)
        if pad_tag is None:
            pad_tag = 0

        device = emissions.device
        seq_length, batch_size = mask.shape

        # Start transition and first emission
        # shape: (batch_size, num_tags)
        score = self.start_transitions + emissions[0]
        history_idx = torch.zeros((seq_length, batch_size, self.num_tags),
                                  dtype=torch.long, device=device)
        oor_idx = torch.zeros((batch_size, self.num_tags),
                              dtype=torch.long, device=device)
        oor_tag = torch.full((seq_length, batch_size), pad_tag,
                             dtype=torch.long, device=device)

        for i in range(1, seq_length):
            broadcast_score = score.unsqueeze(2)
            broadcast_emission = emissions[i].unsqueeze(1)
            next_score = broadcast_score + self.transitions + broadcast_emission
            next_score, indices = next_score.max(dim=1)
            score = torch.where(mask[i].unsqueeze(-1), next_score, score)
            indices = torch.where(mask[i].unsqueeze(-1), indices, oor_idx)
            history_idx[i - 1] = indices

        # End transition score
        # shape: (batch_size, num_tags)
        end_score = score + self.end_transitions
        _, end_tag = end_score.max(dim=1)

        # shape: (batch_size,)
        seq_ends = mask.long().sum(dim=0) - 1

        # insert the best tag at each sequence end (last position with mask == 1)
        history_idx = history_idx.transpose(1, 0).contiguous()
        history_idx.scatter_(1, seq_ends.view(-1, 1, 1).expand(-1, 1, self.num_tags),
                             end_tag.view(-1, 1, 1).expand(-1, 1, self.num_tags))
        history_idx = history_idx.transpose(1, 0).contiguous()

        # The most probable path for each sequence
        best_tags_arr = torch.zeros((seq_length, batch_size),
                                    dtype=torch.long, device=device)
        best_tags = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
        for idx in range(seq_length - 1, -1, -1):
            best_tags = torch.gather(history_idx[idx], 1, best_tags)
            best_tags_arr[idx] = best_tags.data.view(batch_size)

        return torch.where(mask, best_tags_arr, oor_tag).transpose(0, 1)


# ---- models/bert_for_ner.py ----------------------------------------------------------------------------------------
class BertCrfForNer(BertPreTrainedModel):
    def __init__(self, config):
        super(BertCrfForNer, self).__init__(config)
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.crf = CRF(num_tags=config.num_labels, batch_first=True)
        self.post_init()  # (port) self.init_weights(): transformers 5 sets up tied-weight keys in post_init
        self.bug = getattr(config, "port_bug", None)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None,labels=None):
        outputs =self.bert(input_ids = input_ids,attention_mask=attention_mask,token_type_ids=token_type_ids)
        sequence_output = outputs[0]
        sequence_output = self.dropout(sequence_output)
        logits = self.classifier(sequence_output)
        outputs = (logits,)
        if labels is not None:
            loss = self.crf(emissions = logits, tags=labels, mask=attention_mask)
            if self.bug == "crf_loss_not_negated":
                outputs =(loss,)+outputs
            else:
                outputs =(-1*loss,)+outputs
        return outputs # (loss), scores


# ---- processors/ner_seq.py, processors/utils_ner.py, metrics/ner_metrics.py ----------------------------------------
class InputExample:
    def __init__(self, guid, text_a, labels):
        self.guid = guid
        self.text_a = text_a
        self.labels = labels


class InputFeatures:
    def __init__(self, input_ids, input_mask, input_len, segment_ids, label_ids):
        self.input_ids = input_ids
        self.input_mask = input_mask
        self.segment_ids = segment_ids
        self.label_ids = label_ids
        self.input_len = input_len


def collate_fn(batch):
    all_input_ids, all_attention_mask, all_token_type_ids, all_lens, all_labels = map(torch.stack, zip(*batch))
    max_len = max(all_lens).item()
    all_input_ids = all_input_ids[:, :max_len]
    all_attention_mask = all_attention_mask[:, :max_len]
    all_token_type_ids = all_token_type_ids[:, :max_len]
    all_labels = all_labels[:,:max_len]
    return all_input_ids, all_attention_mask, all_token_type_ids, all_labels,all_lens


def convert_examples_to_features(examples,label_list,max_seq_length,tokenizer,
                                 cls_token_at_end=False,cls_token="[CLS]",cls_token_segment_id=1,
                                 sep_token="[SEP]",pad_on_left=False,pad_token=0,pad_token_segment_id=0,
                                 sequence_a_segment_id=0,mask_padding_with_zero=True,):
    label_map = {label: i for i, label in enumerate(label_list)}
    features = []
    for (ex_index, example) in enumerate(examples):
        if isinstance(example.text_a,list):
            example.text_a = " ".join(example.text_a)
        tokens = tokenizer.tokenize(example.text_a)
        label_ids = [label_map[x] for x in example.labels]
        # Account for [CLS] and [SEP] with "- 2".
        special_tokens_count = 2
        if len(tokens) > max_seq_length - special_tokens_count:
            tokens = tokens[: (max_seq_length - special_tokens_count)]
            label_ids = label_ids[: (max_seq_length - special_tokens_count)]
        tokens += [sep_token]
        label_ids += [label_map['O']]
        segment_ids = [sequence_a_segment_id] * len(tokens)
        if cls_token_at_end:
            tokens += [cls_token]
            label_ids += [label_map['O']]
            segment_ids += [cls_token_segment_id]
        else:
            tokens = [cls_token] + tokens
            label_ids = [label_map['O']] + label_ids
            segment_ids = [cls_token_segment_id] + segment_ids
        input_ids = tokenizer.convert_tokens_to_ids(tokens)
        # The mask has 1 for real tokens and 0 for padding tokens. Only real
        # tokens are attended to.
        input_mask = [1 if mask_padding_with_zero else 0] * len(input_ids)
        input_len = len(label_ids)
        # Zero-pad up to the sequence length.
        padding_length = max_seq_length - len(input_ids)
        if pad_on_left:
            input_ids = ([pad_token] * padding_length) + input_ids
            input_mask = ([0 if mask_padding_with_zero else 1] * padding_length) + input_mask
            segment_ids = ([pad_token_segment_id] * padding_length) + segment_ids
            label_ids = ([pad_token] * padding_length) + label_ids
        else:
            input_ids += [pad_token] * padding_length
            input_mask += [0 if mask_padding_with_zero else 1] * padding_length
            segment_ids += [pad_token_segment_id] * padding_length
            label_ids += [pad_token] * padding_length

        assert len(input_ids) == max_seq_length
        assert len(input_mask) == max_seq_length
        assert len(segment_ids) == max_seq_length
        assert len(label_ids) == max_seq_length
        features.append(InputFeatures(input_ids=input_ids, input_mask=input_mask,input_len = input_len,
                                      segment_ids=segment_ids, label_ids=label_ids))
    return features


class CnerProcessor:
    def get_labels(self):
        """See base class."""
        return ["X",'B-CONT','B-EDU','B-LOC','B-NAME','B-ORG','B-PRO','B-RACE','B-TITLE',
                'I-CONT','I-EDU','I-LOC','I-NAME','I-ORG','I-PRO','I-RACE','I-TITLE',
                'O','S-NAME','S-ORG','S-RACE',"[START]", "[END]"]

    def _create_examples(self, lines, set_type):
        """Creates examples for the training and dev sets."""
        examples = []
        for (i, line) in enumerate(lines):
            if i == 0:
                continue
            guid = "%s-%s" % (set_type, i)
            text_a= line['words']
            # BIOS
            labels = []
            for x in line['labels']:
                if 'M-' in x:
                    labels.append(x.replace('M-','I-'))
                elif 'E-' in x:
                    labels.append(x.replace('E-', 'I-'))
                else:
                    labels.append(x)
            examples.append(InputExample(guid=guid, text_a=text_a, labels=labels))
        return examples


def get_entity_bios(seq,id2label):
    chunks = []
    chunk = [-1, -1, -1]
    for indx, tag in enumerate(seq):
        if not isinstance(tag, str):
            tag = id2label[tag]
        if tag.startswith("S-"):
            if chunk[2] != -1:
                chunks.append(chunk)
            chunk = [-1, -1, -1]
            chunk[1] = indx
            chunk[2] = indx
            chunk[0] = tag.split('-')[1]
            chunks.append(chunk)
            chunk = (-1, -1, -1)
        if tag.startswith("B-"):
            if chunk[2] != -1:
                chunks.append(chunk)
            chunk = [-1, -1, -1]
            chunk[1] = indx
            chunk[0] = tag.split('-')[1]
        elif tag.startswith('I-') and chunk[1] != -1:
            _type = tag.split('-')[1]
            if _type == chunk[0]:
                chunk[2] = indx
            if indx == len(seq) - 1:
                chunks.append(chunk)
        else:
            if chunk[2] != -1:
                chunks.append(chunk)
            chunk = [-1, -1, -1]
    return chunks


class SeqEntityScore(object):
    def __init__(self, id2label,markup='bios'):
        self.id2label = id2label
        self.markup = markup
        self.reset()

    def reset(self):
        self.origins = []
        self.founds = []
        self.rights = []

    def compute(self, origin, found, right):
        recall = 0 if origin == 0 else (right / origin)
        precision = 0 if found == 0 else (right / found)
        f1 = 0. if recall + precision == 0 else (2 * precision * recall) / (precision + recall)
        return recall, precision, f1

    def result(self):
        origin = len(self.origins)
        found = len(self.founds)
        right = len(self.rights)
        recall, precision, f1 = self.compute(origin, found, right)
        return {'acc': precision, 'recall': recall, 'f1': f1}, Counter([x[0] for x in self.origins])

    def update(self, label_paths, pred_paths):
        for label_path, pre_path in zip(label_paths, pred_paths):
            label_entities = get_entity_bios(label_path, self.id2label)
            pre_entities = get_entity_bios(pre_path, self.id2label)
            self.origins.extend(label_entities)
            self.founds.extend(pre_entities)
            self.rights.extend([pre_entity for pre_entity in pre_entities if pre_entity in label_entities])


# ---- (port) data and tokenizer -------------------------------------------------------------------------------------
ENTITY_TYPES = ("NAME", "ORG", "EDU", "TITLE", "LOC", "RACE")
SINGLE = ("NAME", "ORG", "RACE")


def synthetic_lines(rng, n):
    """``_read_text``'s records: {'words': [...chars], 'labels': [...BMES tags]}, resume-like sentences."""
    lines = []
    for _ in range(n):
        words, labels = [], []
        while len(words) < 22:
            if rng.random() < 0.55:
                for _ in range(int(rng.integers(1, 4))):
                    words.append("f%d" % rng.integers(0, 20))
                    labels.append("O")
            else:
                t = int(rng.integers(0, len(ENTITY_TYPES)))
                typ = ENTITY_TYPES[t]
                length = int(rng.integers(1 if typ in SINGLE else 2, 5))
                chars = ["%s%d" % (typ.lower(), rng.integers(0, 6)) for _ in range(length)]
                if length == 1:
                    tags = ["S-" + typ]
                else:
                    tags = ["B-" + typ] + ["M-" + typ] * (length - 2) + ["E-" + typ]
                words += chars
                labels += tags
        lines.append({"words": words, "labels": labels})
    return lines


class CharTokenizer:
    """BertTokenizer's ``tokenize`` / ``convert_tokens_to_ids`` on a character vocabulary (port)."""

    def __init__(self):
        chars = ["f%d" % i for i in range(20)] + ["%s%d" % (t.lower(), i) for t in ENTITY_TYPES for i in range(6)]
        self.vocab = {tok: i for i, tok in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars)}

    def tokenize(self, text):
        return text.split()

    def convert_tokens_to_ids(self, tokens):
        return [self.vocab.get(t, 1) for t in tokens]


def load_and_cache_examples(examples, label_list, tokenizer):
    features = convert_examples_to_features(examples=examples, tokenizer=tokenizer, label_list=label_list,
                                            max_seq_length=MAX_SEQ, cls_token_at_end=False, pad_on_left=False,
                                            cls_token="[CLS]", cls_token_segment_id=0, sep_token="[SEP]",
                                            pad_token=0, pad_token_segment_id=0)
    all_input_ids = torch.tensor([f.input_ids for f in features], dtype=torch.long)
    all_input_mask = torch.tensor([f.input_mask for f in features], dtype=torch.long)
    all_segment_ids = torch.tensor([f.segment_ids for f in features], dtype=torch.long)
    all_label_ids = torch.tensor([f.label_ids for f in features], dtype=torch.long)
    all_lens = torch.tensor([f.input_len for f in features], dtype=torch.long)
    return TensorDataset(all_input_ids, all_input_mask, all_segment_ids, all_lens, all_label_ids)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    processor = CnerProcessor()
    label_list = processor.get_labels()
    id2label = {i: label for i, label in enumerate(label_list)}
    tokenizer = CharTokenizer()
    train_dataset = load_and_cache_examples(processor._create_examples(synthetic_lines(rng, 257), "train"),
                                            label_list, tokenizer)
    eval_dataset = load_and_cache_examples(processor._create_examples(synthetic_lines(rng, 65), "dev"),
                                           label_list, tokenizer)

    config = BertConfig(vocab_size=len(tokenizer.vocab), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=64, num_labels=len(label_list))
    config.port_bug = bug
    model = BertCrfForNer(config)

    num_train_epochs, weight_decay, adam_epsilon, max_grad_norm, warmup_proportion = 4.0, 0.01, 1e-8, 1.0, 0.1
    train_sampler = RandomSampler(train_dataset, generator=torch.Generator().manual_seed(seed))
    train_dataloader = DataLoader(train_dataset, sampler=train_sampler, batch_size=BATCH, collate_fn=collate_fn)
    t_total = len(train_dataloader) * num_train_epochs
    # Prepare optimizer and schedule (linear warmup and decay)
    no_decay = ["bias", "LayerNorm.weight"]
    bert_param_optimizer = list(model.bert.named_parameters())
    crf_param_optimizer = list(model.crf.named_parameters())
    linear_param_optimizer = list(model.classifier.named_parameters())
    optimizer_grouped_parameters = [
        {'params': [p for n, p in bert_param_optimizer if not any(nd in n for nd in no_decay)],
         'weight_decay': weight_decay, 'lr': LEARNING_RATE},
        {'params': [p for n, p in bert_param_optimizer if any(nd in n for nd in no_decay)], 'weight_decay': 0.0,
         'lr': LEARNING_RATE},

        {'params': [p for n, p in crf_param_optimizer if not any(nd in n for nd in no_decay)],
         'weight_decay': weight_decay, 'lr': CRF_LEARNING_RATE},
        {'params': [p for n, p in crf_param_optimizer if any(nd in n for nd in no_decay)], 'weight_decay': 0.0,
         'lr': CRF_LEARNING_RATE},

        {'params': [p for n, p in linear_param_optimizer if not any(nd in n for nd in no_decay)],
         'weight_decay': weight_decay, 'lr': CRF_LEARNING_RATE},
        {'params': [p for n, p in linear_param_optimizer if any(nd in n for nd in no_decay)], 'weight_decay': 0.0,
         'lr': CRF_LEARNING_RATE}
    ]
    if bug == "crf_left_out_of_optimizer":
        del optimizer_grouped_parameters[2:4]
    warmup_steps = int(t_total * warmup_proportion)
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=LEARNING_RATE, eps=adam_epsilon)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=warmup_steps,
                                                num_training_steps=t_total)
    model.zero_grad()
    st = {"it": None}

    def next_batch():
        batch = next(st["it"], None) if st["it"] is not None else None
        if batch is None:
            st["it"] = iter(train_dataloader)
            batch = next(st["it"])
        return batch

    def train_step():
        batch = next_batch()
        model.train()
        batch = tuple(t for t in batch)
        if bug == "labels_from_token_type_ids":
            inputs = {"input_ids": batch[0], "attention_mask": batch[1], "labels": batch[2]}
        else:
            inputs = {"input_ids": batch[0], "attention_mask": batch[1], "labels": batch[3]}
        inputs["token_type_ids"] = batch[2]
        outputs = model(**inputs)
        loss = outputs[0]  # model outputs are always tuple in pytorch-transformers (see doc)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        scheduler.step()  # Update learning rate schedule
        model.zero_grad()
        return loss.item()

    def evaluate(model, _batch=None):
        was_training = model.training
        metric = SeqEntityScore(id2label, markup='bios')
        eval_dataloader = DataLoader(eval_dataset, sampler=SequentialSampler(eval_dataset), batch_size=BATCH,
                                     collate_fn=collate_fn)
        for step, batch in enumerate(eval_dataloader):
            model.eval()
            with torch.no_grad():
                inputs = {"input_ids": batch[0], "attention_mask": batch[1], "labels": batch[3]}
                inputs["token_type_ids"] = batch[2]
                outputs = model(**inputs)
                tmp_eval_loss, logits = outputs[:2]
                tags = model.crf.decode(logits, inputs['attention_mask'])
            out_label_ids = inputs['labels'].cpu().numpy().tolist()
            input_lens = batch[4].cpu().numpy().tolist()
            tags = tags.squeeze(0).cpu().numpy().tolist()
            for i, label in enumerate(out_label_ids):
                temp_1 = []
                temp_2 = []
                for j, m in enumerate(label):
                    if j == 0:
                        continue
                    elif j == input_lens[i] - 1:
                        metric.update(pred_paths=[temp_2], label_paths=[temp_1])
                        break
                    else:
                        temp_1.append(id2label[out_label_ids[i][j]])
                        temp_2.append(id2label[tags[i][j]])
        model.train(was_training)
        eval_info, _ = metric.result()
        return eval_info['f1']

    def loss_fn(outputs, _labels):
        return outputs[0]

    first = collate_fn([train_dataset[i] for i in range(BATCH)])
    batch = {"input_ids": first[0], "attention_mask": first[1], "labels": first[3], "token_type_ids": first[2]}
    return Program(name="bertnerpytorch_crf", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=evaluate, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the CRF's log-likelihood returned as the loss without ``-1*`` (classic sign slip): minimizing it pushes the
    # gold paths' likelihood down.
    Bug("crf_loss_not_negated", functools.partial(_build, bug="crf_loss_not_negated"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``labels = batch[2]`` for ``batch[3]`` (classic index slip over collate_fn's tuple): the token-type ids, all
    # zeros, are the tags the CRF learns.
    Bug("labels_from_token_type_ids", functools.partial(_build, bug="labels_from_token_type_ids"),
        "learning_ledger", ("TASK",)),
    # the two CRF groups dropped from optimizer_grouped_parameters (classic with hand-built groups): the
    # transitions stay at their uniform init. Re-pointed after first contact from ("crf.transitions",): both groups
    # hold all three CRF tensors, and the finding names the first of them (crf.start_transitions).
    Bug("crf_left_out_of_optimizer", functools.partial(_build, bug="crf_left_out_of_optimizer"), "four_structures",
        ("crf.",)),
]
