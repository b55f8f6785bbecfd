# ruff: noqa: UP008
"""SimCTG (Su et al., "A Contrastive Framework for Neural Text Generation"), the repository's
``training_tutorial_on_wikitext103`` recipe: a GPT-2 language model (``simctg.simctggpt.SimCTGGPT``: the LM's
logits and its last hidden states) trained on the sum of the token-level MLE loss and the token-level contrastive
loss of ``simctg.lossfunction.SimCTGLoss`` (cosine similarities between the normalized last hidden states of one
sequence, a margin ranking of each token against the other non-pad tokens, pads masked out). ``Data`` pads each
sampled batch with the bos/eos id, feeds ``tokens[:, :-1]`` and scores ``tokens[:, 1:]`` with pads set to -100;
``model_training``: AdamW, linear warmup (10% of the steps) and decay, ``clip_grad_norm_`` after every backward,
the optimizer/scheduler step and ``zero_grad`` every ``gradient_accumulation_steps`` loop passes, ``eval_model``
(per-token loss from ``eval_loss``) every ``save_every`` updates.

Source: https://github.com/yxuansu/SimCTG
Commit: 3a91449c8f3133f2c183e481e705b1dbb268589c
Files: training_tutorial_on_wikitext103/train.py, training_tutorial_on_wikitext103/trainer.py,
training_tutorial_on_wikitext103/dataclass.py, training_tutorial_on_wikitext103/train.sh, simctg/lossfunction.py,
simctg/simctggpt.py
License: MIT (Copyright (c) 2022 Yixuan Su), LICENSES/yxuansu-SimCTG.txt
Domain: causal language model (GPT-2 with a contrastive token-representation loss)

Deviations from the original:
- model: ``GPT2LMHeadModel.from_pretrained('gpt2')`` cannot be downloaded: ``GPT2LMHeadModel(GPT2Config(...))``
  with n_embd 32, 2 layers, 2 heads, 32 positions and a 64-token vocabulary whose last id plays GPT-2's
  ``<|endoftext|>`` (the bos token ``Data`` pads with); the tokenizer is left out (``vocab_size`` is the config's);
- sizes (train.sh): ``--max_len`` 256 -> 24, ``--batch_size_per_gpu`` 8 kept, ``--gradient_accumulation_steps``
  16 -> 2 (``--effective_batch_size`` 16), ``--total_steps`` 40000 -> 300, ``--save_every`` 1000 -> 25,
  ``--learning_rate`` 2e-5 -> 1e-3 (a model trained from scratch on a short run); ``--margin`` 0.5 and
  ``--max_grad_norm`` 1.0 kept;
- ``transformers.optimization.AdamW`` no longer exists in transformers 5: ``torch.optim.AdamW`` with the same
  defaults the script relied on (weight decay 0) -- the HF class defaulted to ``weight_decay=0.0`` as well;
- data: WikiText-103 cannot be downloaded: 400 training and 64 test lines of 8-24 token ids from ``seed``, each a
  walk ``x[t+1] = (a * x[t] + c) mod 63`` with the line's own start and one of four (a, c) rules (learnable from
  the prefix), through ``pad_batch`` / ``process_output`` / ``parse_batch`` as written; ``random.sample`` batches;
- no GPU, no DataParallel, progress bars, logs and checkpoint saving left out; one ``train_step`` runs the
  ``while`` loop's passes up to and including the next parameter update (the first update comes after one pass,
  as written: ``all_batch_step`` starts at 1 and is incremented first) and returns that update's last loss;
  ``eval_fn`` is ``eval_model``'s per-token validation loss on one batch.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn
from torch.nn import CrossEntropyLoss
from torch.nn.utils import rnn
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SELF_CHECK_STEPS = 40
VOCAB = 64
EOS = VOCAB - 1
RULES = [(1, 1), (1, 5), (2, 3), (5, 7)]


# ---- simctg/lossfunction.py ----------------------------------------------------------------------------------------

train_fct = CrossEntropyLoss()
class SimCTGLoss(nn.Module):
    def __init__(self, margin, vocab_size, pad_token_id, bug=None):
        super(SimCTGLoss, self).__init__()
        '''
           margin: predefined margin to push similarity score away
           vocab_size: the vocabulary size of the tokenizer
           pad_token_id: indicating which tokens are padding token
        '''
        self.margin = margin
        self.vocab_size = vocab_size
        self.pad_token_id = pad_token_id
        self.bug = bug

    # the part for contrastive loss
    def build_mask_matrix(self, seqlen, valid_len_list):
        res_list = []
        base_mask = torch.ones(seqlen, seqlen) - torch.eye(seqlen, seqlen)
        base_mask = base_mask.type(torch.FloatTensor)
        bsz = len(valid_len_list)
        for i in range(bsz):
            one_base_mask = base_mask.clone()
            one_valid_len = valid_len_list[i]
            one_base_mask[:,one_valid_len:] = 0.
            one_base_mask[one_valid_len:, :] = 0.
            res_list.append(one_base_mask)
        res_mask = torch.stack(res_list, dim = 0)#torch.FloatTensor(res_list)
        assert res_mask.size() == torch.Size([bsz, seqlen, seqlen])
        return res_mask

    def contrastive_loss(self, score_matrix, input_ids):
        '''
           score_matrix: bsz x seqlen x seqlen
           input_ids: bsz x seqlen
        '''
        bsz, seqlen, _ = score_matrix.size()
        gold_score = torch.diagonal(score_matrix, offset=0, dim1=1, dim2=2) # bsz x seqlen
        gold_score = torch.unsqueeze(gold_score, -1)
        assert gold_score.size() == torch.Size([bsz, seqlen, 1])
        if self.bug == "difference_reversed":
            # the ranking written the other way round: other tokens' similarities minus the gold one
            difference_matrix = score_matrix - gold_score
        else:
            difference_matrix = gold_score - score_matrix
        assert difference_matrix.size() == torch.Size([bsz, seqlen, seqlen])
        loss_matrix = self.margin - difference_matrix # bsz x seqlen x seqlen
        loss_matrix = torch.nn.functional.relu(loss_matrix)

        ### input mask
        input_mask = torch.ones_like(input_ids).type(torch.FloatTensor)
        input_mask = input_mask.masked_fill(input_ids.eq(self.pad_token_id), 0.0)

        valid_len_list = torch.sum(input_mask, dim = -1).tolist()
        loss_mask = self.build_mask_matrix(seqlen, [int(item) for item in valid_len_list])
        masked_loss_matrix = loss_matrix * loss_mask

        loss_matrix = torch.sum(masked_loss_matrix, dim = -1)
        assert loss_matrix.size() == input_ids.size()
        loss_matrix = loss_matrix * input_mask
        cl_loss = torch.sum(loss_matrix) / torch.sum(loss_mask)
        return cl_loss

    def forward(self, last_hidden_states, logits, input_ids, labels):
        '''
            last_hidden_states: bsz x seqlen x embed_dim
            logits: bsz x seqlen x vocab_size
            input_ids: bsz x seqlen
            labels: bsz x seqlen
        '''
        bsz, seqlen = input_ids.size()
        assert labels.size() == input_ids.size()
        assert logits.size() == torch.Size([bsz, seqlen, self.vocab_size])
        # compute mle loss
        mle_loss = train_fct(logits.view(-1, self.vocab_size), labels.view(-1))

        # compute cl loss
        norm_rep = last_hidden_states / last_hidden_states.norm(dim=2, keepdim=True)
        cosine_scores = torch.matmul(norm_rep, norm_rep.transpose(1,2))
        assert cosine_scores.size() == torch.Size([bsz, seqlen, seqlen])
        cl_loss = self.contrastive_loss(cosine_scores, input_ids)
        return mle_loss, cl_loss


# ---- simctg/simctggpt.py -------------------------------------------------------------------------------------------

val_fct = CrossEntropyLoss(reduction='none')
class SimCTGGPT(nn.Module):
    def __init__(self, config):
        super(SimCTGGPT, self).__init__()
        self.model = GPT2LMHeadModel(config)
        self.vocab_size = config.vocab_size
        self.embed_dim = self.model.config.hidden_size

    def forward(self, input_ids, labels):
        bsz, seqlen = input_ids.size()
        outputs = self.model(input_ids=input_ids, output_hidden_states=True)
        logits = outputs.logits
        assert logits.size() == torch.Size([bsz, seqlen, self.vocab_size])
        last_hidden_states = outputs.hidden_states[-1]
        assert last_hidden_states.size() == torch.Size([bsz, seqlen, self.embed_dim])
        return last_hidden_states, logits

    def eval_loss(self, input_ids, labels):
        bsz, seqlen = input_ids.size()
        outputs = self.model(input_ids=input_ids, output_hidden_states=True)
        logits = outputs.logits
        assert logits.size() == torch.Size([bsz, seqlen, self.vocab_size])
        mle_loss = val_fct(logits.view(-1, self.vocab_size), labels.view(-1))
        assert mle_loss.size() == torch.Size([bsz * seqlen])
        mask_tmp = labels.masked_fill(~labels.eq(-100), 1.0)
        mask = mask_tmp.masked_fill(mask_tmp.eq(-100), 0.0)
        # sum
        mle_loss_sum = torch.sum(mle_loss)
        token_num_sum = torch.sum(mask)
        return mle_loss_sum, token_num_sum


# ---- training_tutorial_on_wikitext103/dataclass.py -----------------------------------------------------------------

class Data:
    def __init__(self, train_lines, test_lines, max_len, bug=None):
        self.max_len = max_len
        self.bug = bug
        self.train_token_id_list = self.process_one_file(train_lines)
        self.test_token_id_list = self.process_one_file(test_lines)
        self.train_num, self.test_num = len(self.train_token_id_list), len(self.test_token_id_list)
        self.pad_token_id = EOS  # tokenizer.convert_tokens_to_ids([tokenizer.bos_token])[0]

        self.train_idx_list = [i for i in range(self.train_num)]
        random.shuffle(self.train_idx_list)
        self.test_idx_list = [j for j in range(self.test_num)]
        self.test_current_idx = 0

    def process_one_file(self, lines):
        res_token_id_list = []
        for token_ids in lines:
            if len(token_ids) <= 1: # filter out too short sequence
                continue
            res_token_id_list.append(token_ids[:self.max_len])
        return res_token_id_list

    def pad_batch(self, batch_id_list):
        batch_id_list = [torch.LongTensor(item) for item in batch_id_list]
        batch_tensor = rnn.pad_sequence(batch_id_list, batch_first=True, padding_value=self.pad_token_id)
        batch_mask = torch.ones_like(batch_tensor)
        batch_mask = batch_mask.masked_fill(batch_tensor.eq(self.pad_token_id), 0.0).type(torch.FloatTensor)
        return batch_tensor, batch_mask

    def process_output(self, batch_tgt_id_list):
        batch_tgt_id_list = [torch.LongTensor(item) for item in batch_tgt_id_list]
        batch_tgt_tensor, _ = self.pad_batch(batch_tgt_id_list) # padded target sequence
        batch_tgt_input_tensor = batch_tgt_tensor[:, :-1].clone()
        if self.bug == "labels_not_shifted":
            # the targets cut like the inputs: each position is scored on its own token, not the next one
            batch_tgt_output_tensor = batch_tgt_tensor[:, :-1].clone()
        else:
            batch_tgt_output_tensor = batch_tgt_tensor[:, 1:].clone()
        return batch_tgt_input_tensor, batch_tgt_output_tensor

    def parse_batch(self, batch_id_list):
        batch_input, batch_labels = self.process_output(batch_id_list)
        if self.bug != "pad_labels_kept":
            batch_labels[batch_labels[:, :] == self.pad_token_id] = -100
        return batch_input, batch_labels

    def get_next_train_batch(self, batch_size):
        batch_idx_list = random.sample(self.train_idx_list, batch_size)
        batch_id_list = []
        for idx in batch_idx_list:
            batch_id_list.append(self.train_token_id_list[idx])
        batch_input_tensor, batch_labels = self.parse_batch(batch_id_list)
        return batch_input_tensor, batch_labels, None

    def get_next_validation_batch(self, batch_size, mode='test'):
        batch_id_list = []
        curr_select_idx, instance_num = self.test_current_idx, self.test_num
        if curr_select_idx + batch_size < instance_num:
            for i in range(batch_size):
                batch_id_list.append(self.test_token_id_list[curr_select_idx + i])
            self.test_current_idx += batch_size
        else:
            for i in range(batch_size):
                curr_idx = curr_select_idx + i
                if curr_idx > instance_num - 1:
                    curr_idx = 0
                    self.test_current_idx = 0
                batch_id_list.append(self.test_token_id_list[curr_idx])
            self.test_current_idx = 0
        batch_input_tensor, batch_labels = self.parse_batch(batch_id_list)
        return batch_input_tensor, batch_labels, None


def make_lines(rng, n):
    lines = []
    for _ in range(n):
        a, c = RULES[int(rng.integers(len(RULES)))]
        x = [int(rng.integers(0, EOS))]
        for _ in range(int(rng.integers(8, 25)) - 1):
            x.append((a * x[-1] + c) % EOS)
        lines.append(x)
    return lines


# ---- training_tutorial_on_wikitext103/trainer.py + train.py --------------------------------------------------------

def eval_model(args, model, data):
    dataset_batch_size = args.batch_size_per_gpu * args.number_of_gpu
    eval_step = int(data.test_num / dataset_batch_size) + 1
    val_loss, token_sum = 0., 0.
    model.eval()
    with torch.no_grad():
        for idx in range(eval_step):
            batch_input_tensor, batch_labels, _ = \
            data.get_next_validation_batch(batch_size=dataset_batch_size, mode='test')
            one_val_loss, one_val_token_sum = model.eval_loss(batch_input_tensor, batch_labels)
            one_val_loss = torch.sum(one_val_loss)
            one_val_token_sum = torch.sum(one_val_token_sum)
            val_loss += one_val_loss.item()
            token_sum += one_val_token_sum.item()
    model.train()
    val_loss = val_loss / token_sum
    return val_loss


def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    rng = np.random.default_rng(seed)
    args = SimpleNamespace(model_name="gpt2", max_len=24, number_of_gpu=1, batch_size_per_gpu=8,
                           gradient_accumulation_steps=2, effective_batch_size=16, total_steps=300,
                           print_every=10, save_every=25, learning_rate=1e-3, margin=0.5, max_grad_norm=1.0)
    data = Data(make_lines(rng, 400), make_lines(rng, 64), args.max_len, bug=bug)
    config = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=EOS, eos_token_id=EOS)
    model = SimCTGGPT(config)
    vocab_size = model.vocab_size

    margin, pad_token_id = args.margin, data.pad_token_id
    simctgloss = SimCTGLoss(margin, vocab_size, pad_token_id, bug=bug)

    batch_size_per_gpu, gradient_accumulation_steps, number_of_gpu, effective_batch_size = \
    args.batch_size_per_gpu, args.gradient_accumulation_steps, args.number_of_gpu, args.effective_batch_size
    assert effective_batch_size == batch_size_per_gpu * gradient_accumulation_steps * number_of_gpu
    total_steps, save_every = args.total_steps, args.save_every

    warmup_steps = int(0.1 * total_steps) # 10% of training steps are used for warmup
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.0)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=warmup_steps, num_training_steps=total_steps)
    optimizer.zero_grad()

    state = {"effective_batch_acm": 0, "all_batch_step": 1, "save_valid": False, "min_val_loss": 1e10}
    model.train()

    def train_step():
        while True:
            state["all_batch_step"] += 1
            train_batch_input_tensor, train_batch_labels, _ = data.get_next_train_batch(batch_size_per_gpu * number_of_gpu)
            last_hidden_states, logits = model(train_batch_input_tensor, train_batch_labels)
            mle_loss, cl_loss = simctgloss(last_hidden_states, logits, train_batch_input_tensor, train_batch_labels)

            loss = mle_loss + cl_loss
            loss = loss.mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)

            # parameter update
            updated = False
            if state["all_batch_step"] % gradient_accumulation_steps == 0:
                optimizer.step()
                scheduler.step()
                if bug != "zero_grad_dropped":
                    optimizer.zero_grad()
                state["effective_batch_acm"] += 1
                state["save_valid"] = True
                updated = True

            # saving result
            if state["effective_batch_acm"] % save_every == 0 and state["save_valid"]:
                state["save_valid"] = False
                one_val_loss = eval_model(args, model, data)
                state["min_val_loss"] = min(one_val_loss, state["min_val_loss"])
                model.train()
            if updated:
                return loss.detach()

    def eval_fn(model, batch):
        input_ids, labels = batch
        was_training = model.training
        model.eval()
        with torch.no_grad():
            loss_sum, token_sum = model.eval_loss(input_ids, labels)
        model.train(was_training)
        return float(loss_sum / token_sum)

    probe = Data(make_lines(np.random.default_rng(seed + 1), 8), [[1, 2]], args.max_len, bug=bug)
    input_ids, labels = probe.parse_batch(probe.train_token_id_list)
    batch = {"input_ids": input_ids, "labels": labels}

    def loss_fn(out, labels):
        # the loop's loss on the model's (last_hidden_states, logits); the contrastive part's pad mask reads the
        # declared batch's input ids
        last_hidden_states, logits = out
        mle_loss, cl_loss = simctgloss(last_hidden_states, logits, batch["input_ids"], labels)
        return (mle_loss + cl_loss).mean()

    return Program(name="simctg_gpt2_wikitext", model=model, batch=batch, loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step,
                   eval_fn=lambda model, batch: eval_fn(model, (batch["input_ids"], batch["labels"])))


build = functools.partial(_build)

BUGS = [
    # classic: process_output cuts the targets like the inputs (tokens[:, :-1]): each position is trained to
    # return the token it was given, not the next one.
    Bug("labels_not_shifted", functools.partial(_build, bug="labels_not_shifted"), "learning_ledger", ("TASK",)),
    # classic: the contrastive ranking's difference written the other way round (score_matrix - gold_score): the
    # loss pulls every token's representation towards the other tokens of its sequence instead of away from them.
    Bug("difference_reversed", functools.partial(_build, bug="difference_reversed"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: parse_batch's -100 line left out: the padding (the eos id) is scored as a target, so the model is
    # also trained to predict padding after every short line.
    Bug("pad_labels_kept", functools.partial(_build, bug="pad_labels_kept"), "learning_ledger", ("OBJECTIVE",)),
]
