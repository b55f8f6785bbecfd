# ruff: noqa: UP004, UP008, UP031, PLR0402, RUF059, C408
"""BERT + CRF named-entity recognition from Louis-udm/NER-BERT-CRF (``NER_BERT_CRF.py``, its "BertModel + CRF"
part): a hand-written batched CRF over BERT emissions (the loss ``mean(forward_score - gold_score)`` over the whole
padded length), BertAdam over four parameter groups with the BERT warm-up also set by hand, Viterbi F1 evaluation.

Source: https://github.com/Louis-udm/NER-BERT-CRF
Commit: 1ccb1033a3fb05020fecb8c395b7f8588ff07776
Files: NER_BERT_CRF.py (``CoNLLDataProcessor``, ``example2feature``, ``NerDataset``, ``f1_score``,
``log_sum_exp_batch``, ``BERT_CRF_NER``, the optimizer groups, ``warmup_linear``, ``evaluate``, the training loop);
``BertAdam`` from pytorch_pretrained_bert (https://github.com/huggingface/transformers
``pytorch_pretrained_bert/optimization.py`` at 04038cc12a8cf1f4a36c6818ba82da896599160d, Apache-2.0)
License: MIT (Copyright (c) 2019 Louis Zhibin Lv; full text in LICENSES/Louis-udm-NER-BERT-CRF.txt)
Domain: token classification, named-entity recognition (BERT from config + a hand-written batched CRF)

Kept as written: ``log_sum_exp_batch``, ``BERT_CRF_NER`` (all its methods, the -10000 constraints, the inits),
the label list, ``example2feature``, ``NerDataset.pad`` (padding with 0, the X label), ``f1_score``, the four
parameter groups and their rates and decays, ``BertAdam(..., warmup=0.1, t_total=total_train_steps)``,
``warmup_linear``, and the loop body (loss, backward, ``lr_this_step`` written into every group, step, zero_grad).

Deviations from the original:
- CoNLL-2003, the bert-base-cased weights and BertTokenizer are not here: ``BertModel`` is transformers' built from a
  small ``BertConfig`` (hidden 32, 2 layers, 2 heads, intermediate 64) with random weights, the sentences are
  synthetic CoNLL-like ones made from ``seed`` (filler words tagged O; PER, ORG, LOC, MISC names drawn from their own
  word sets, one or two words long, tagged B-/I-), and the tokenizer is a fixed word -> sub-words table (a third of
  the words split in two, the second piece labelled X as ``example2feature`` does);
- ``self.hidden_size = 768`` is the config's; ``output_all_encoded_layers=False`` is ``return_dict=False`` (the same
  pair); the unused ``init_bert_weights``, ``InputFeatures`` and the processor's file readers are left out;
- ``BertAdam`` is written out (not installed) with the group key ``weight_decay`` the script's groups use
  (``weight_decay_rate`` in the version above), keyword ``alpha=`` / ``value=`` for the removed positional forms;
- sizes and rates for 2 CPU cores: 256 training and 64 dev sentences, batch_size 32 -> 16, max_seq_length 180 -> 32,
  total_train_epochs 15 -> 4; learning_rate0 5e-5 -> 5e-3 and lr0_crf_fc 8e-5 -> 8e-3 (a randomly initialized BERT
  and 30 steps, not a fine-tuned one over epochs); no checkpoint loading or saving, no printing;
- ``train_step`` is one batch of the loop (gradient_accumulation_steps 1; the DataLoader shuffles with a
  ``torch.Generator(seed)``, no workers) and returns the loss; ``eval_fn`` is ``evaluate``'s F1 on the dev set. The
  model's ``forward`` decodes, so ``loss_fn`` is ``neg_log_likelihood`` on the declared batch, as the loop calls it;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
As in the original, the gold path of a padded sentence crosses the [SEP] -> X transition held at -10000 by the
constraint, so the loss sits in the thousands and falls through the emissions and that one transition.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils import clip_grad_norm_
from torch.optim import Optimizer
from torch.utils import data
from transformers import BertConfig, BertModel

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program

max_seq_length = 32
batch_size = 16


# pytorch_pretrained_bert/optimization.py (written out)
def warmup_linear(x, warmup=0.002):
    if x < warmup:
        return x/warmup
    return 1.0 - x


SCHEDULES = {'warmup_linear': warmup_linear}


class BertAdam(Optimizer):
    def __init__(self, params, lr, warmup=-1, t_total=-1, schedule='warmup_linear',
                 b1=0.9, b2=0.999, e=1e-6, weight_decay=0.01, max_grad_norm=1.0):
        defaults = dict(lr=lr, schedule=schedule, warmup=warmup, t_total=t_total,
                        b1=b1, b2=b2, e=e, weight_decay=weight_decay, max_grad_norm=max_grad_norm)
        super(BertAdam, self).__init__(params, defaults)

    def step(self):
        for group in self.param_groups:
            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data
                state = self.state[p]
                if len(state) == 0:
                    state.update(step=0, next_m=torch.zeros_like(p.data), next_v=torch.zeros_like(p.data))
                next_m, next_v = state['next_m'], state['next_v']
                beta1, beta2 = group['b1'], group['b2']
                if group['max_grad_norm'] > 0:
                    clip_grad_norm_(p, group['max_grad_norm'])
                next_m.mul_(beta1).add_(grad, alpha=1 - beta1)
                next_v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                update = next_m / (next_v.sqrt() + group['e'])
                if group['weight_decay'] > 0.0:
                    update += group['weight_decay'] * p.data
                if group['t_total'] != -1:
                    schedule_fct = SCHEDULES[group['schedule']]
                    lr_scheduled = group['lr'] * schedule_fct(state['step']/group['t_total'], group['warmup'])
                else:
                    lr_scheduled = group['lr']
                update_with_lr = lr_scheduled * update
                p.data.add_(-update_with_lr)
                state['step'] += 1


# NER_BERT_CRF.py
class InputExample(object):
    def __init__(self, guid, words, labels):
        self.guid, self.words, self.labels = guid, words, labels


class CoNLLDataProcessor(object):
    def __init__(self):
        self._label_types = [ 'X', '[CLS]', '[SEP]', 'O', 'I-LOC', 'B-PER', 'I-PER', 'I-ORG', 'I-MISC', 'B-MISC', 'B-LOC', 'B-ORG']
        self._num_labels = len(self._label_types)
        self._label_map = {label: i for i,
                           label in enumerate(self._label_types)}

    def _create_examples(self, all_lists):
        return [InputExample(guid=i, words=one_lists[0], labels=one_lists[-1]) for (i, one_lists) in enumerate(all_lists)]


def example2feature(example, tokenizer, label_map, max_seq_length, bug=None):
    add_label, tokens, predict_mask = 'X', ['[CLS]'], [0]
    label_ids = [] if bug == "cls_label_dropped" else [label_map['[CLS]']]
    for i, w in enumerate(example.words):
        sub_words = tokenizer.tokenize(w)
        if not sub_words:
            sub_words = ['[UNK]']
        tokens.extend(sub_words)
        for j in range(len(sub_words)):
            if j == 0:
                predict_mask.append(1)
                label_ids.append(label_map[example.labels[i]])
            else:
                # '##xxx' -> 'X' (see bert paper)
                predict_mask.append(0)
                label_ids.append(label_map[add_label])
    # truncate
    if len(tokens) > max_seq_length - 1:
        tokens = tokens[0:(max_seq_length - 1)]
        predict_mask = predict_mask[0:(max_seq_length - 1)]
        label_ids = label_ids[0:(max_seq_length - 1)]
    tokens.append('[SEP]')
    predict_mask.append(0)
    label_ids.append(label_map['[SEP]'])
    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    segment_ids, input_mask = [0] * len(input_ids), [1] * len(input_ids)
    return input_ids, input_mask, segment_ids, predict_mask, label_ids


class NerDataset(data.Dataset):
    def __init__(self, examples, tokenizer, label_map, max_seq_length, bug=None):
        self.examples, self.tokenizer, self.label_map, self.max_seq_length, self.bug = examples, tokenizer, label_map, max_seq_length, bug

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, idx):
        return example2feature(self.examples[idx], self.tokenizer, self.label_map, max_seq_length, self.bug)

    @classmethod
    def pad(cls, batch):
        seqlen_list = [len(sample[0]) for sample in batch]
        maxlen = np.array(seqlen_list).max()
        f = lambda x, seqlen: [sample[x] + [0] * (seqlen - len(sample[x])) for sample in batch] # 0: X for padding
        input_ids_list = torch.LongTensor(f(0, maxlen))
        input_mask_list = torch.LongTensor(f(1, maxlen))
        segment_ids_list = torch.LongTensor(f(2, maxlen))
        predict_mask_list = torch.BoolTensor(f(3, maxlen))
        label_ids_list = torch.LongTensor(f(4, maxlen))
        return input_ids_list, input_mask_list, segment_ids_list, predict_mask_list, label_ids_list


def f1_score(y_true, y_pred):
    '''
    0,1,2,3 are [CLS],[SEP],[X],O
    '''
    ignore_id=3
    num_proposed = len(y_pred[y_pred>ignore_id])
    num_correct = (np.logical_and(y_true==y_pred, y_true>ignore_id)).sum()
    num_gold = len(y_true[y_true>ignore_id])
    precision, recall = (num_correct / num_proposed if num_proposed else 1.0), (num_correct / num_gold if num_gold else 1.0)
    return precision, recall, (2*precision*recall / (precision + recall) if precision + recall else 0)


def log_sum_exp_batch(log_Tensor, axis=-1): # shape (batch_size,n,m)
    return torch.max(log_Tensor, axis)[0]+torch.log(torch.exp(log_Tensor-torch.max(log_Tensor, axis)[0].view(log_Tensor.shape[0],-1,1)).sum(axis))


class BERT_CRF_NER(nn.Module):
    def __init__(self, bert_model, start_label_id, stop_label_id, num_labels, max_seq_length, batch_size, device, bug=None):
        super(BERT_CRF_NER, self).__init__()
        self.hidden_size = bert_model.config.hidden_size  # (port) 768 in the original
        self.start_label_id, self.stop_label_id, self.num_labels = start_label_id, stop_label_id, num_labels
        self.batch_size, self.device, self.bug = batch_size, device, bug
        self.bert = bert_model
        self.dropout = torch.nn.Dropout(0.2)
        self.hidden2label = nn.Linear(self.hidden_size, self.num_labels)
        # Matrix of transition parameters.  Entry i,j is the score of transitioning *to* i *from* j.
        self.transitions = nn.Parameter(torch.randn(self.num_labels, self.num_labels))
        self.transitions.data[start_label_id, :] = -10000
        self.transitions.data[:, stop_label_id] = -10000
        nn.init.xavier_uniform_(self.hidden2label.weight)
        nn.init.constant_(self.hidden2label.bias, 0.0)

    def _forward_alg(self, feats):
        T, batch_size = feats.shape[1], feats.shape[0]
        log_alpha = torch.Tensor(batch_size, 1, self.num_labels).fill_(-10000.).to(self.device)
        log_alpha[:, 0, self.start_label_id] = 0
        for t in range(1, T):
            log_alpha = (log_sum_exp_batch(self.transitions + log_alpha, axis=-1) + feats[:, t]).unsqueeze(1)
        return log_sum_exp_batch(log_alpha)

    def _get_bert_features(self, input_ids, segment_ids, input_mask):
        bert_seq_out, _ = self.bert(input_ids, token_type_ids=segment_ids, attention_mask=input_mask, return_dict=False)
        bert_seq_out = self.dropout(bert_seq_out)
        return self.hidden2label(bert_seq_out)

    def _score_sentence(self, feats, label_ids):
        T, batch_size = feats.shape[1], feats.shape[0]
        batch_transitions = self.transitions.expand(batch_size,self.num_labels,self.num_labels)
        batch_transitions = batch_transitions.flatten(1)
        score = torch.zeros((feats.shape[0],1)).to(self.device)
        for t in range(1, T):
            index = label_ids[:, t]*self.num_labels+label_ids[:, t-1]
            if self.bug == "gold_transitions_transposed":
                index = label_ids[:, t-1]*self.num_labels+label_ids[:, t]
            score = score + \
                batch_transitions.gather(-1, index.view(-1,1)) \
                    + feats[:, t].gather(-1, label_ids[:, t].view(-1,1)).view(-1,1)
        return score

    def _viterbi_decode(self, feats):
        T, batch_size = feats.shape[1], feats.shape[0]
        log_delta = torch.Tensor(batch_size, 1, self.num_labels).fill_(-10000.).to(self.device)
        log_delta[:, 0, self.start_label_id] = 0
        psi = torch.zeros((batch_size, T, self.num_labels), dtype=torch.long).to(self.device)  # psi[0]=0000 useless
        for t in range(1, T):
            log_delta, psi[:, t] = torch.max(self.transitions + log_delta, -1)
            log_delta = (log_delta + feats[:, t]).unsqueeze(1)
        path = torch.zeros((batch_size, T), dtype=torch.long).to(self.device)
        max_logLL_allz_allx, path[:, -1] = torch.max(log_delta.squeeze(), -1)
        for t in range(T-2, -1, -1):
            path[:, t] = psi[:, t+1].gather(-1,path[:, t+1].view(-1,1)).squeeze()
        return max_logLL_allz_allx, path

    def neg_log_likelihood(self, input_ids, segment_ids, input_mask, label_ids):
        bert_feats = self._get_bert_features(input_ids, segment_ids, input_mask)
        forward_score = self._forward_alg(bert_feats)
        gold_score = self._score_sentence(bert_feats, label_ids)
        return torch.mean(forward_score - gold_score)

    # this forward is just for predict, not for train
    def forward(self, input_ids, segment_ids, input_mask):
        bert_feats = self._get_bert_features(input_ids, segment_ids, input_mask)
        score, label_seq_ids = self._viterbi_decode(bert_feats)
        return score, label_seq_ids


def evaluate(model, _batch=None, dev_dataloader=None):
    was_training = model.training
    model.eval()
    all_preds, all_labels = [], []
    with torch.no_grad():
        for batch in dev_dataloader:
            input_ids, input_mask, segment_ids, predict_mask, label_ids = batch
            _, predicted_label_seq_ids = model(input_ids, segment_ids, input_mask)
            valid_predicted = torch.masked_select(predicted_label_seq_ids, predict_mask)
            valid_label_ids = torch.masked_select(label_ids, predict_mask)
            all_preds.extend(valid_predicted.tolist())
            all_labels.extend(valid_label_ids.tolist())
    model.train(was_training)
    precision, recall, f1 = f1_score(np.array(all_labels), np.array(all_preds))
    return float(f1)


class _SubwordTokenizer:  # (port) stands in for BertTokenizer
    def __init__(self, words, rng):
        self.vocab = {'[PAD]': 0, '[UNK]': 1, '[CLS]': 2, '[SEP]': 3}
        self.pieces = {w: ([w, '##' + w] if rng.random() < 1 / 3 else [w]) for w in words}
        for parts in self.pieces.values():
            for p in parts:
                self.vocab.setdefault(p, len(self.vocab))

    tokenize = lambda self, w: list(self.pieces.get(w, []))
    convert_tokens_to_ids = lambda self, tokens: [self.vocab.get(t, 1) for t in tokens]


_TYPES = ('PER', 'ORG', 'LOC', 'MISC')


def _sentences(rng, n):
    out = []
    for _ in range(n):
        words, labels = [], []
        for _ in range(int(rng.integers(1, 3))):
            for _ in range(int(rng.integers(1, 4))):
                words.append('w%d' % rng.integers(0, 24))
                labels.append('O')
            kind = _TYPES[int(rng.integers(0, 4))]
            for k in range(int(rng.integers(1, 3))):
                words.append('%s%d' % (kind.lower(), rng.integers(0, 6)))
                labels.append(('B-' if k == 0 else 'I-') + kind)
        out.append((words + ['w%d' % rng.integers(0, 24)], labels + ['O']))
    return out


def _data(seed, rng, bug):
    conllProcessor = CoNLLDataProcessor()
    label_list, label_map = conllProcessor._label_types, conllProcessor._label_map
    train_examples, dev_examples = (conllProcessor._create_examples(_sentences(rng, n)) for n in (256, 64))
    words = ['w%d' % i for i in range(24)] + ['%s%d' % (k.lower(), i) for k in _TYPES for i in range(6)]
    tokenizer = _SubwordTokenizer(words, rng)
    train_dataset = NerDataset(train_examples, tokenizer, label_map, max_seq_length, bug)
    dev_dataset = NerDataset(dev_examples, tokenizer, label_map, max_seq_length, bug)
    train_dataloader = data.DataLoader(dataset=train_dataset, batch_size=batch_size, shuffle=True,
                                       collate_fn=NerDataset.pad, generator=torch.Generator().manual_seed(seed))
    dev_dataloader = data.DataLoader(dataset=dev_dataset, batch_size=batch_size, shuffle=False,
                                     collate_fn=NerDataset.pad)
    return label_list, label_map, tokenizer, train_dataset, train_dataloader, dev_dataloader


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    device = torch.device('cpu')
    learning_rate0, lr0_crf_fc = 5e-3, 8e-3  # (port) 5e-5, 8e-5
    weight_decay_finetune, weight_decay_crf_fc = 1e-5, 5e-6
    total_train_epochs, gradient_accumulation_steps, warmup_proportion = 4, 1, 0.1
    label_list, label_map, tokenizer, train_dataset, train_dataloader, dev_dataloader = _data(seed, rng, bug)
    total_train_steps = int(len(train_dataset) / batch_size / gradient_accumulation_steps * total_train_epochs)
    config = BertConfig(vocab_size=len(tokenizer.vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    model = BERT_CRF_NER(BertModel(config), label_map['[CLS]'], label_map['[SEP]'],
                         len(label_list), max_seq_length, batch_size, device, bug=bug)
    param_optimizer = list(model.named_parameters())
    no_decay = ['bias', 'LayerNorm.bias', 'LayerNorm.weight']
    new_param = ['transitions', 'hidden2label.weight', 'hidden2label.bias']
    crf_fc = ('transition','hidden2label.weight') if bug == "transitions_name_typo" else ('transitions','hidden2label.weight')
    optimizer_grouped_parameters = [
        {'params': [p for n, p in param_optimizer if not any(nd in n for nd in no_decay) and not any(nd in n for nd in new_param)], 'weight_decay': weight_decay_finetune},
        {'params': [p for n, p in param_optimizer if any(nd in n for nd in no_decay) and not any(nd in n for nd in new_param)], 'weight_decay': 0.0},
        {'params': [p for n, p in param_optimizer if n in crf_fc], 'lr':lr0_crf_fc, 'weight_decay': weight_decay_crf_fc},
        {'params': [p for n, p in param_optimizer if n == 'hidden2label.bias'], 'lr':lr0_crf_fc, 'weight_decay': 0.0}
    ]
    optimizer = BertAdam(optimizer_grouped_parameters, lr=learning_rate0, warmup=warmup_proportion, t_total=total_train_steps)
    st = {"it": iter(train_dataloader), "global_step_th": 0}
    model.train()
    optimizer.zero_grad()

    def train_step():
        batch = next(st["it"], None)
        if batch is None:
            st["it"] = iter(train_dataloader)
            batch = next(st["it"])
        model.train()
        input_ids, input_mask, segment_ids, predict_mask, label_ids = batch
        neg_log_likelihood = model.neg_log_likelihood(input_ids, segment_ids, input_mask, label_ids)
        neg_log_likelihood.backward()
        # modify learning rate with special warm up BERT uses
        lr_this_step = learning_rate0 * warmup_linear(st["global_step_th"]/total_train_steps, warmup_proportion)
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr_this_step
        optimizer.step()
        optimizer.zero_grad()
        st["global_step_th"] += 1
        return neg_log_likelihood.item()

    first = NerDataset.pad([train_dataset[i] for i in range(batch_size)])
    batch = {"input_ids": first[0], "segment_ids": first[2], "input_mask": first[1], "labels": first[4]}

    def loss_fn(_outputs, labels):
        # the model's forward decodes; the loop's loss is neg_log_likelihood on the same batch
        return model.neg_log_likelihood(first[0], first[2], first[1], labels)

    return Program(name="nerbertcrf_conll", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=functools.partial(evaluate, dev_dataloader=dev_dataloader),
                   loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the gold path's transition read as from-i-to-j (``label[t-1]*n + label[t]``) while the forward
    # algorithm reads to-i-from-j: the gold score is not one of the paths the partition sums, and the loss is no
    # longer a negative log-likelihood (it can go below zero).
    Bug("gold_transitions_transposed", functools.partial(_build, bug="gold_transitions_transposed"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic name slip in hand-built groups: 'transition' for 'transitions' in the CRF group's name list, so the
    # transition matrix is in no group and never moves.
    Bug("transitions_name_typo", functools.partial(_build, bug="transitions_name_typo"), "four_structures",
        ("transitions",)),
    # classic: the [CLS] label left out of label_ids in example2feature, so every label sits one position left of
    # its token (pad fills the end with X).
    Bug("cls_label_dropped", functools.partial(_build, bug="cls_label_dropped"), "learning_ledger", ("TASK",)),
]
