"""Unsupervised SimCSE (sentence embeddings by contrastive learning: each sentence is encoded twice, dropout is the
only augmentation, the two pooled representations are positives, the other sentences of the batch the
negatives; cosine similarity over temperature 0.05 and cross-entropy against ``arange(batch)``), trained by the
repository's ``train.py`` with the HF ``Trainer``-based ``CLTrainer`` as ``run_unsup_example.sh`` runs it.

Source: https://github.com/princeton-nlp/SimCSE
Commit: 49fa580a853752ede55b8c76d9debf748e214d3f
Files: train.py, simcse/models.py, simcse/trainers.py (CLTrainer.train's loop body), run_unsup_example.sh
License: MIT (Copyright (c) 2021 Princeton Natural Language Processing; full text in LICENSES/princeton-nlp-SimCSE.txt)
Domain: contrastive representation learning on text (sentence embeddings, in-batch negatives)

Kept as written: ``MLPLayer``, ``Similarity``, ``Pooler``, ``cl_init``, ``cl_forward`` (views flattened, pooled,
regrouped, MLP, ``cos_sim``, the hard-negative and MLM branches, ``CrossEntropyLoss`` against ``arange``),
``sentemb_forward``, ``BertForCL``; train.py's argument dataclasses (SimCSE's fields and defaults),
``prepare_features`` (one-column data: the column used for both sentences), ``OurDataCollatorWithPadding`` (with
``mask_tokens``); ``CLTrainer.train``'s loop body (``training_step``, ``clip_grad_norm_`` to ``max_grad_norm``,
``optimizer.step()``, ``lr_scheduler.step()``, ``model.zero_grad()``, ``global_step``); the run of
run_unsup_example.sh (mlp_only_train, temp 0.05, learning_rate 3e-5, max_seq_length 32, batch size 64, one epoch, the
Trainer's AdamW and linear schedule).

Deviations from the original:
- the command line is ``--model_name_or_path bert-base-uncased --train_file data/wiki1m_for_simcse.txt
  --num_train_epochs 1 --per_device_train_batch_size 64 --learning_rate 3e-5 --max_seq_length 32 --pooler_type avg
  --mlp_only_train --temp 0.05 --do_train --seed <seed> --use_cpu --report_to none`` (parsed by the script's
  ``HfArgumentParser``); ``--pooler_type cls`` -> ``avg`` (one of the script's documented poolers) because nothing
  pre-trained can be downloaded: from random weights the [CLS] vector carries almost none of the sentence and the
  objective only learns to shrink the dropout noise (the loss settles at ln 64), while the average over the tokens
  learns at the script's lr; ``--fp16`` is dropped (CPU), ``--overwrite_output_dir`` (gone from transformers 5; nothing is saved), and so are the STS-B evaluation flags (``--evaluation_strategy steps
  --metric_for_best_model stsb_spearman --load_best_model_at_end --eval_steps 125 --do_eval``): ``CLTrainer.evaluate``
  runs SentEval on downloaded STS data;
- ``BertForCL.from_pretrained("bert-base-uncased", ...)`` becomes ``BertForCL(BertConfig(<tiny sizes>),
  model_args=model_args)`` (hidden 32, 2 layers, 2 heads, intermediate 64, vocab 104, 64 positions, BERT's dropout
  0.1); ``resize_token_embeddings(len(tokenizer))`` is kept;
- the tokenizer (``AutoTokenizer.from_pretrained``) is a word-level ``tokenizers`` tokenizer with BERT's special
  tokens and template, wrapped in ``PreTrainedTokenizerFast``;
- data: ``datasets`` is not installed and wiki1m cannot be downloaded: the one-column text file is a synthetic
  corpus made from ``seed`` (4096 "sentences" of 5-12 words over a 99-word vocabulary, words drawn from one of 8
  topics) held in a small stand-in for ``datasets.Dataset`` (``column_names``, ``map(batched=True,
  remove_columns=...)``);
- ``CLTrainer`` subclasses the ``Trainer`` of transformers 4.2 and copies its ``train``; here the installed
  ``Trainer`` is used: ``create_optimizer_and_scheduler(num_training_steps=max_steps)`` as ``CLTrainer.train`` calls
  it, and ``train_step`` is one iteration of ``CLTrainer.train``'s batch loop (above), a new epoch iterator when one
  ends; callbacks, ``_total_flos``, logging, checkpoints and saving are left out. ``OurTrainingArguments``'s device
  set-up override is left out (``--use_cpu``). ``Trainer(tokenizer=...)`` is ``Trainer(processing_class=...)`` in
  transformers 5, and ``cl_init``'s ``cls.init_weights()`` is ``cls.post_init()`` (transformers 5's
  ``init_weights`` needs the tied-weights set-up ``post_init`` does first); the unused imports of ``transformers.file_utils`` (docstring helpers) are left out;
- ``eval_fn`` replaces the SentEval STS-B evaluation: the contrastive loss in eval mode on a given batch;
- the ``metadata={"help": ...}`` of the argument dataclasses' fields is left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: F841, PLR0402, RUF012, SIM210, UP006, UP007, UP031, UP035, UP045
# (the original's code style is kept as written)

from __future__ import annotations

import functools
import os
import pathlib
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    BertConfig,
    HfArgumentParser,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
    default_data_collator,
    set_seed,
)
from transformers.modeling_outputs import BaseModelOutputWithPoolingAndCrossAttentions, SequenceClassifierOutput
from transformers.models.bert.modeling_bert import BertLMPredictionHead, BertModel, BertPreTrainedModel
from transformers.tokenization_utils_base import PaddingStrategy, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

hf_logging.set_verbosity_error()

VOCAB_WORDS = 100
N_SENTENCES = 4096


# ---- simcse/models.py -----------------------------------------------------------------------------------------

class MLPLayer(nn.Module):
    """
    Head for getting sentence representations over RoBERTa/BERT's CLS representation.
    """

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, features, **kwargs):
        x = self.dense(features)
        x = self.activation(x)

        return x

class Similarity(nn.Module):
    """
    Dot product or cosine similarity
    """

    def __init__(self, temp, bug=None):
        super().__init__()
        self.temp = temp
        self.cos = nn.CosineSimilarity(dim=-1)
        self.bug = bug

    def forward(self, x, y):
        if self.bug == "similarity_times_temperature":
            # the temperature multiplied instead of divided: logits in [-0.05, 0.05], a near-uniform softmax
            return self.cos(x, y) * self.temp
        return self.cos(x, y) / self.temp


class Pooler(nn.Module):
    """
    Parameter-free poolers to get the sentence embedding
    'cls': [CLS] representation with BERT/RoBERTa's MLP pooler.
    'cls_before_pooler': [CLS] representation without the original MLP pooler.
    'avg': average of the last layers' hidden states at each token.
    'avg_top2': average of the last two layers.
    'avg_first_last': average of the first and the last layers.
    """
    def __init__(self, pooler_type):
        super().__init__()
        self.pooler_type = pooler_type
        assert self.pooler_type in ["cls", "cls_before_pooler", "avg", "avg_top2", "avg_first_last"], "unrecognized pooling type %s" % self.pooler_type

    def forward(self, attention_mask, outputs):
        last_hidden = outputs.last_hidden_state
        pooler_output = outputs.pooler_output
        hidden_states = outputs.hidden_states

        if self.pooler_type in ['cls_before_pooler', 'cls']:
            return last_hidden[:, 0]
        elif self.pooler_type == "avg":
            return ((last_hidden * attention_mask.unsqueeze(-1)).sum(1) / attention_mask.sum(-1).unsqueeze(-1))
        elif self.pooler_type == "avg_first_last":
            first_hidden = hidden_states[1]
            last_hidden = hidden_states[-1]
            pooled_result = ((first_hidden + last_hidden) / 2.0 * attention_mask.unsqueeze(-1)).sum(1) / attention_mask.sum(-1).unsqueeze(-1)
            return pooled_result
        elif self.pooler_type == "avg_top2":
            second_last_hidden = hidden_states[-2]
            last_hidden = hidden_states[-1]
            pooled_result = ((last_hidden + second_last_hidden) / 2.0 * attention_mask.unsqueeze(-1)).sum(1) / attention_mask.sum(-1).unsqueeze(-1)
            return pooled_result
        else:
            raise NotImplementedError


def cl_init(cls, config):
    """
    Contrastive learning class init function.
    """
    cls.pooler_type = cls.model_args.pooler_type
    cls.pooler = Pooler(cls.model_args.pooler_type)
    if cls.model_args.pooler_type == "cls":
        cls.mlp = MLPLayer(config)
    cls.sim = Similarity(temp=cls.model_args.temp, bug=cls.bug)
    cls.post_init()  # (port) cls.init_weights() of transformers 4; in 5 it needs the set-up post_init does

def cl_forward(cls,
    encoder,
    input_ids=None,
    attention_mask=None,
    token_type_ids=None,
    position_ids=None,
    head_mask=None,
    inputs_embeds=None,
    labels=None,
    output_attentions=None,
    output_hidden_states=None,
    return_dict=None,
    mlm_input_ids=None,
    mlm_labels=None,
):
    return_dict = return_dict if return_dict is not None else cls.config.use_return_dict
    ori_input_ids = input_ids
    batch_size = input_ids.size(0)
    # Number of sentences in one instance
    # 2: pair instance; 3: pair instance with a hard negative
    num_sent = input_ids.size(1)

    mlm_outputs = None
    # Flatten input for encoding
    input_ids = input_ids.view((-1, input_ids.size(-1))) # (bs * num_sent, len)
    attention_mask = attention_mask.view((-1, attention_mask.size(-1))) # (bs * num_sent len)
    if token_type_ids is not None:
        token_type_ids = token_type_ids.view((-1, token_type_ids.size(-1))) # (bs * num_sent, len)

    # Get raw embeddings
    outputs = encoder(
        input_ids,
        # the padding mask left out of the encoder call: every position attends to the [PAD] tokens too
        attention_mask=None if cls.bug == "attention_mask_not_passed" else attention_mask,
        token_type_ids=token_type_ids,
        position_ids=position_ids,
        head_mask=head_mask,
        inputs_embeds=inputs_embeds,
        output_attentions=output_attentions,
        output_hidden_states=True if cls.model_args.pooler_type in ['avg_top2', 'avg_first_last'] else False,
        return_dict=True,
    )

    # MLM auxiliary objective
    if mlm_input_ids is not None:
        mlm_input_ids = mlm_input_ids.view((-1, mlm_input_ids.size(-1)))
        mlm_outputs = encoder(
            mlm_input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            head_mask=head_mask,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=True if cls.model_args.pooler_type in ['avg_top2', 'avg_first_last'] else False,
            return_dict=True,
        )

    # Pooling
    pooler_output = cls.pooler(attention_mask, outputs)
    pooler_output = pooler_output.view((batch_size, num_sent, pooler_output.size(-1))) # (bs, num_sent, hidden)

    # If using "cls", we add an extra MLP layer
    # (same as BERT's original implementation) over the representation.
    if cls.pooler_type == "cls":
        pooler_output = cls.mlp(pooler_output)

    # Separate representation
    z1, z2 = pooler_output[:,0], pooler_output[:,1]

    # Hard negative
    if num_sent == 3:
        z3 = pooler_output[:, 2]

    # Gather all embeddings if using distributed training
    if dist.is_initialized() and cls.training:
        # Gather hard negative
        if num_sent >= 3:
            z3_list = [torch.zeros_like(z3) for _ in range(dist.get_world_size())]
            dist.all_gather(tensor_list=z3_list, tensor=z3.contiguous())
            z3_list[dist.get_rank()] = z3
            z3 = torch.cat(z3_list, 0)

        # Dummy vectors for allgather
        z1_list = [torch.zeros_like(z1) for _ in range(dist.get_world_size())]
        z2_list = [torch.zeros_like(z2) for _ in range(dist.get_world_size())]
        # Allgather
        dist.all_gather(tensor_list=z1_list, tensor=z1.contiguous())
        dist.all_gather(tensor_list=z2_list, tensor=z2.contiguous())

        # Since allgather results do not have gradients, we replace the
        # current process's corresponding embeddings with original tensors
        z1_list[dist.get_rank()] = z1
        z2_list[dist.get_rank()] = z2
        # Get full batch embeddings: (bs x N, hidden)
        z1 = torch.cat(z1_list, 0)
        z2 = torch.cat(z2_list, 0)

    cos_sim = cls.sim(z1.unsqueeze(1), z2.unsqueeze(0))
    # Hard negative
    if num_sent >= 3:
        z1_z3_cos = cls.sim(z1.unsqueeze(1), z3.unsqueeze(0))
        cos_sim = torch.cat([cos_sim, z1_z3_cos], 1)

    labels = torch.arange(cos_sim.size(0)).long().to(cls.device)
    loss_fct = nn.CrossEntropyLoss()

    # Calculate loss with hard negatives
    if num_sent == 3:
        # Note that weights are actually logits of weights
        z3_weight = cls.model_args.hard_negative_weight
        weights = torch.tensor(
            [[0.0] * (cos_sim.size(-1) - z1_z3_cos.size(-1)) + [0.0] * i + [z3_weight] + [0.0] * (z1_z3_cos.size(-1) - i - 1) for i in range(z1_z3_cos.size(-1))]
        ).to(cls.device)
        cos_sim = cos_sim + weights

    loss = loss_fct(cos_sim, labels)

    # Calculate loss for MLM
    if mlm_outputs is not None and mlm_labels is not None:
        mlm_labels = mlm_labels.view(-1, mlm_labels.size(-1))
        prediction_scores = cls.lm_head(mlm_outputs.last_hidden_state)
        masked_lm_loss = loss_fct(prediction_scores.view(-1, cls.config.vocab_size), mlm_labels.view(-1))
        loss = loss + cls.model_args.mlm_weight * masked_lm_loss

    if not return_dict:
        output = (cos_sim,) + outputs[2:]
        return ((loss,) + output) if loss is not None else output
    return SequenceClassifierOutput(
        loss=loss,
        logits=cos_sim,
        hidden_states=outputs.hidden_states,
        attentions=outputs.attentions,
    )


def sentemb_forward(
    cls,
    encoder,
    input_ids=None,
    attention_mask=None,
    token_type_ids=None,
    position_ids=None,
    head_mask=None,
    inputs_embeds=None,
    labels=None,
    output_attentions=None,
    output_hidden_states=None,
    return_dict=None,
):

    return_dict = return_dict if return_dict is not None else cls.config.use_return_dict

    outputs = encoder(
        input_ids,
        attention_mask=attention_mask,
        token_type_ids=token_type_ids,
        position_ids=position_ids,
        head_mask=head_mask,
        inputs_embeds=inputs_embeds,
        output_attentions=output_attentions,
        output_hidden_states=True if cls.pooler_type in ['avg_top2', 'avg_first_last'] else False,
        return_dict=True,
    )

    pooler_output = cls.pooler(attention_mask, outputs)
    if cls.pooler_type == "cls" and not cls.model_args.mlp_only_train:
        pooler_output = cls.mlp(pooler_output)

    if not return_dict:
        return (outputs[0], pooler_output) + outputs[2:]

    return BaseModelOutputWithPoolingAndCrossAttentions(
        pooler_output=pooler_output,
        last_hidden_state=outputs.last_hidden_state,
        hidden_states=outputs.hidden_states,
    )


class BertForCL(BertPreTrainedModel):
    _keys_to_ignore_on_load_missing = [r"position_ids"]

    def __init__(self, config, *model_args, **model_kargs):
        super().__init__(config)
        self.model_args = model_kargs["model_args"]
        self.bug = model_kargs.get("bug")  # (port) the bug switch
        self.bert = BertModel(config, add_pooling_layer=False)

        if self.model_args.do_mlm:
            self.lm_head = BertLMPredictionHead(config)

        cl_init(self, config)

    def forward(self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        head_mask=None,
        inputs_embeds=None,
        labels=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        sent_emb=False,
        mlm_input_ids=None,
        mlm_labels=None,
    ):
        if sent_emb:
            return sentemb_forward(self, self.bert,
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                position_ids=position_ids,
                head_mask=head_mask,
                inputs_embeds=inputs_embeds,
                labels=labels,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=return_dict,
            )
        else:
            return cl_forward(self, self.bert,
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                position_ids=position_ids,
                head_mask=head_mask,
                inputs_embeds=inputs_embeds,
                labels=labels,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=return_dict,
                mlm_input_ids=mlm_input_ids,
                mlm_labels=mlm_labels,
            )


# ---- train.py: the argument dataclasses -----------------------------------------------------------------------

@dataclass
class ModelArguments:
    """
    Arguments pertaining to which model/config/tokenizer we are going to fine-tune, or train from scratch.
    """

    # Huggingface's original arguments
    model_name_or_path: Optional[str] = field(
        default=None,
    )
    model_type: Optional[str] = field(
        default=None,
    )
    config_name: Optional[str] = field(
        default=None,
    )
    tokenizer_name: Optional[str] = field(
        default=None,
    )
    cache_dir: Optional[str] = field(
        default=None,
    )
    use_fast_tokenizer: bool = field(
        default=True,
    )
    model_revision: str = field(
        default="main",
    )
    use_auth_token: bool = field(
        default=False,
    )

    # SimCSE's arguments
    temp: float = field(
        default=0.05,
    )
    pooler_type: str = field(
        default="cls",
    )
    hard_negative_weight: float = field(
        default=0,
    )
    do_mlm: bool = field(
        default=False,
    )
    mlm_weight: float = field(
        default=0.1,
    )
    mlp_only_train: bool = field(
        default=False,
    )


@dataclass
class DataTrainingArguments:
    """
    Arguments pertaining to what data we are going to input our model for training and eval.
    """

    # Huggingface's original arguments.
    dataset_name: Optional[str] = field(
        default=None,
    )
    dataset_config_name: Optional[str] = field(
        default=None,
    )
    overwrite_cache: bool = field(
        default=False,
    )
    validation_split_percentage: Optional[int] = field(
        default=5,
    )
    preprocessing_num_workers: Optional[int] = field(
        default=None,
    )

    # SimCSE's arguments
    train_file: Optional[str] = field(
        default=None,
    )
    max_seq_length: Optional[int] = field(
        default=32,
    )
    pad_to_max_length: bool = field(
        default=False,
    )
    mlm_probability: float = field(
        default=0.15,
    )

    def __post_init__(self):
        if self.dataset_name is None and self.train_file is None and self.validation_file is None:
            raise ValueError("Need either a dataset name or a training/validation file.")
        else:
            if self.train_file is not None:
                extension = self.train_file.split(".")[-1]
                assert extension in ["csv", "json", "txt"], "`train_file` should be a csv, a json or a txt file."


@dataclass
class OurTrainingArguments(TrainingArguments):
    # Evaluation
    ## By default, we evaluate STS (dev) during training (for selecting best checkpoints) and evaluate
    ## both STS and transfer tasks (dev) at the end of training. Using --eval_transfer will allow evaluating
    ## both STS and transfer tasks (dev) during training.
    eval_transfer: bool = field(
        default=False,
    )


# ---- (port) the data, the tokenizer and ``datasets`` ----------------------------------------------------------

def make_tokenizer():
    """Word-level tokenizer: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, words w0..w99; BERT's template."""
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    for k in range(VOCAB_WORDS - 1):
        vocab[f"w{k}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=512,
                                   model_input_names=["input_ids", "token_type_ids", "attention_mask"])


class _Dataset:
    """The few ``datasets.Dataset`` methods the script uses, over a dict of columns."""

    def __init__(self, columns):
        self.columns = columns

    @property
    def column_names(self):
        return list(self.columns)

    def map(self, function, batched=True, remove_columns=(), **_kwargs):
        out = {k: v for k, v in self.columns.items() if k not in remove_columns}
        out.update({k: list(v) for k, v in function({k: list(v) for k, v in self.columns.items()}).items()})
        return _Dataset(out)

    def __len__(self):
        return len(next(iter(self.columns.values())))

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.columns.items()}


def make_datasets(seed):
    """``load_dataset("text", data_files={"train": "data/wiki1m_for_simcse.txt"})``: one column "text" of
    sentences of 5-12 words, each sentence's words drawn from one of 8 topics of the vocabulary w0..w98."""
    rng = np.random.RandomState(seed)
    topics = np.array_split(rng.permutation(VOCAB_WORDS - 1), 8)
    text = []
    for _ in range(N_SENTENCES):
        words = rng.choice(topics[rng.randint(8)], size=rng.randint(5, 13))
        text.append(" ".join(f"w{w}" for w in words))
    return {"train": _Dataset({"text": text})}


# ---- train.py main() ------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, OurTrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=[
        "--model_name_or_path", "bert-base-uncased", "--train_file", "data/wiki1m_for_simcse.txt",
        "--output_dir", os.path.join(tempfile.gettempdir(), "simcse_port"), "--num_train_epochs", "1",
        "--per_device_train_batch_size", "64", "--learning_rate", "3e-5", "--max_seq_length", "32",
        "--pooler_type", "avg", "--mlp_only_train", "--temp", "0.05", "--do_train",
        "--seed", str(seed), "--use_cpu", "--report_to", "none"])

    # Set seed before initializing model.
    set_seed(training_args.seed)

    datasets = make_datasets(seed)

    # Load pretrained model and tokenizer (here: a tiny BERT config from scratch, see the module docstring)
    config = BertConfig(vocab_size=4 + VOCAB_WORDS, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    tokenizer = make_tokenizer()
    if 'bert' in model_args.model_name_or_path:
        model = BertForCL(config, model_args=model_args, bug=bug)
    else:
        raise NotImplementedError

    model.resize_token_embeddings(len(tokenizer))

    # Prepare features
    column_names = datasets["train"].column_names
    sent2_cname = None
    if len(column_names) == 2:
        # Pair datasets
        sent0_cname = column_names[0]
        sent1_cname = column_names[1]
    elif len(column_names) == 3:
        # Pair datasets with hard negatives
        sent0_cname = column_names[0]
        sent1_cname = column_names[1]
        sent2_cname = column_names[2]
    elif len(column_names) == 1:
        # Unsupervised datasets
        sent0_cname = column_names[0]
        sent1_cname = column_names[0]
    else:
        raise NotImplementedError

    def prepare_features(examples):
        # padding = longest (default)
        #   If no sentence in the batch exceed the max length, then use
        #   the max sentence length in the batch, otherwise use the
        #   max sentence length in the argument and truncate those that
        #   exceed the max length.
        # padding = max_length (when pad_to_max_length, for pressure test)
        #   All sentences are padded/truncated to data_args.max_seq_length.
        total = len(examples[sent0_cname])

        # Avoid "None" fields
        for idx in range(total):
            if examples[sent0_cname][idx] is None:
                examples[sent0_cname][idx] = " "
            if examples[sent1_cname][idx] is None:
                examples[sent1_cname][idx] = " "

        sentences = examples[sent0_cname] + examples[sent1_cname]

        # If hard negative exists
        if sent2_cname is not None:
            for idx in range(total):
                if examples[sent2_cname][idx] is None:
                    examples[sent2_cname][idx] = " "
            sentences += examples[sent2_cname]

        sent_features = tokenizer(
            sentences,
            max_length=data_args.max_seq_length,
            truncation=True,
            padding="max_length" if data_args.pad_to_max_length else False,
        )

        features = {}
        if sent2_cname is not None:
            for key in sent_features:
                features[key] = [[sent_features[key][i], sent_features[key][i+total], sent_features[key][i+total*2]] for i in range(total)]
        else:
            for key in sent_features:
                features[key] = [[sent_features[key][i], sent_features[key][i+total]] for i in range(total)]

        return features

    if training_args.do_train:
        train_dataset = datasets["train"].map(
            prepare_features,
            batched=True,
            num_proc=data_args.preprocessing_num_workers,
            remove_columns=column_names,
            load_from_cache_file=not data_args.overwrite_cache,
        )

    # Data collator
    @dataclass
    class OurDataCollatorWithPadding:

        tokenizer: PreTrainedTokenizerBase
        padding: Union[bool, str, PaddingStrategy] = True
        max_length: Optional[int] = None
        pad_to_multiple_of: Optional[int] = None
        mlm: bool = True
        mlm_probability: float = data_args.mlm_probability

        def __call__(self, features: List[Dict[str, Union[List[int], List[List[int]], torch.Tensor]]]) -> Dict[str, torch.Tensor]:
            special_keys = ['input_ids', 'attention_mask', 'token_type_ids', 'mlm_input_ids', 'mlm_labels']
            bs = len(features)
            if bs > 0:
                num_sent = len(features[0]['input_ids'])
            else:
                return
            flat_features = []
            for feature in features:
                for i in range(num_sent):
                    flat_features.append({k: feature[k][i] if k in special_keys else feature[k] for k in feature})

            batch = self.tokenizer.pad(
                flat_features,
                padding=self.padding,
                max_length=self.max_length,
                pad_to_multiple_of=self.pad_to_multiple_of,
                return_tensors="pt",
            )
            if model_args.do_mlm:
                batch["mlm_input_ids"], batch["mlm_labels"] = self.mask_tokens(batch["input_ids"])

            batch = {k: batch[k].view(bs, num_sent, -1) if k in special_keys else batch[k].view(bs, num_sent, -1)[:, 0] for k in batch}

            if "label" in batch:
                batch["labels"] = batch["label"]
                del batch["label"]
            if "label_ids" in batch:
                batch["labels"] = batch["label_ids"]
                del batch["label_ids"]

            return batch

        def mask_tokens(
            self, inputs: torch.Tensor, special_tokens_mask: Optional[torch.Tensor] = None
        ) -> Tuple[torch.Tensor, torch.Tensor]:
            """
            Prepare masked tokens inputs/labels for masked language modeling: 80% MASK, 10% random, 10% original.
            """
            inputs = inputs.clone()
            labels = inputs.clone()
            # We sample a few tokens in each sequence for MLM training (with probability `self.mlm_probability`)
            probability_matrix = torch.full(labels.shape, self.mlm_probability)
            if special_tokens_mask is None:
                special_tokens_mask = [
                    self.tokenizer.get_special_tokens_mask(val, already_has_special_tokens=True) for val in labels.tolist()
                ]
                special_tokens_mask = torch.tensor(special_tokens_mask, dtype=torch.bool)
            else:
                special_tokens_mask = special_tokens_mask.bool()
            probability_matrix.masked_fill_(special_tokens_mask, value=0.0)
            masked_indices = torch.bernoulli(probability_matrix).bool()
            labels[~masked_indices] = -100  # We only compute loss on masked tokens

            # 80% of the time, we replace masked input tokens with tokenizer.mask_token ([MASK])
            indices_replaced = torch.bernoulli(torch.full(labels.shape, 0.8)).bool() & masked_indices
            inputs[indices_replaced] = self.tokenizer.convert_tokens_to_ids(self.tokenizer.mask_token)

            # 10% of the time, we replace masked input tokens with random word
            indices_random = torch.bernoulli(torch.full(labels.shape, 0.5)).bool() & masked_indices & ~indices_replaced
            random_words = torch.randint(len(self.tokenizer), labels.shape, dtype=torch.long)
            inputs[indices_random] = random_words[indices_random]

            # The rest of the time (10% of the time) we keep the masked input tokens unchanged
            return inputs, labels

    data_collator = default_data_collator if data_args.pad_to_max_length else OurDataCollatorWithPadding(tokenizer)

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset if training_args.do_train else None,
        processing_class=tokenizer,
        data_collator=data_collator,
    )
    trainer.model_args = model_args

    # CLTrainer.train, before the epoch loop
    train_dataloader = trainer.get_train_dataloader()
    num_update_steps_per_epoch = len(train_dataloader) // trainer.args.gradient_accumulation_steps
    num_update_steps_per_epoch = max(num_update_steps_per_epoch, 1)
    max_steps = int(num_update_steps_per_epoch * trainer.args.num_train_epochs)
    trainer.create_optimizer_and_scheduler(num_training_steps=max_steps)
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    model.zero_grad()
    steps_in_epoch = len(train_dataloader)

    loop = {"epoch": -1, "iterator": None, "step": steps_in_epoch}

    def train_step():
        """One iteration of CLTrainer.train's batch loop."""
        if loop["step"] + 1 >= steps_in_epoch:  # the next epoch
            loop["epoch"] += 1
            loop["iterator"], loop["step"] = iter(train_dataloader), -1
        inputs = next(loop["iterator"])
        loop["step"] += 1
        step, epoch = loop["step"], loop["epoch"]

        tr_loss = trainer.training_step(model, inputs)

        if (step + 1) % trainer.args.gradient_accumulation_steps == 0 or (
            # last step in epoch but step is always smaller than gradient_accumulation_steps
            steps_in_epoch <= trainer.args.gradient_accumulation_steps
            and (step + 1) == steps_in_epoch
        ):
            # Gradient clipping
            if trainer.args.max_grad_norm is not None and trainer.args.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), trainer.args.max_grad_norm)

            # Optimizer step
            trainer.optimizer.step()

            trainer.lr_scheduler.step()

            model.zero_grad()

            trainer.state.global_step += 1
            trainer.state.epoch = epoch + (step + 1) / steps_in_epoch
        return tr_loss

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            loss = model(**batch).loss
        return float(loss)

    first = data_collator([train_dataset[i] for i in range(training_args.per_device_train_batch_size)])
    return Program(name="simcse_unsup", model=model, batch=first, loss_fn=lambda outputs, _labels: outputs.loss,
                   optimizer=trainer.optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # Similarity multiplies the cosine by the temperature instead of dividing: the logits shrink to +-0.05 and the
    # InfoNCE objective is almost flat (classic scale slip).
    Bug("similarity_times_temperature", functools.partial(_build, bug="similarity_times_temperature"),
        "learning_ledger", ("OBJECTIVE",)),
    # cl_forward calls the encoder without the attention mask of the dynamically padded batch: every sentence's [CLS]
    # attends to the padding, so the embedding depends on the longest sentence of the batch (classic: the mask not
    # reaching the model).
    Bug("attention_mask_not_passed", functools.partial(_build, bug="attention_mask_not_passed"), "learning_ledger",
        ("DEPENDENCY",)),
]
