# ruff: noqa: F841, RUF046, RUF059, UP034
"""Context-Aware Attentive Knowledge Tracing (AKT, Ghosh, Heffernan & Lan, KDD 2020), ``--model akt_pid``: question
and interaction embeddings with Rasch-model variations (a scalar difficulty per problem id times a per-concept
vector), a question encoder and a knowledge encoder/retriever of monotonic attention (scores damped by
``exp(-softplus(gamma) * distance)``), the retriever masked so the current response is never seen, an MLP on
[retrieved knowledge, question embedding], summed BCE-with-logits over the unpadded responses + l2 on the
difficulties, Adam.

Source: https://github.com/arghosh/AKT
Commit: 01b7e8d7d7c862cabc9467108e3e7f2555653a88
Files: ``akt.py`` (``AKT``, ``Architecture``, ``TransformerLayer``, ``MultiHeadAttention``, ``attention``), ``run.py``
(``train``, ``test``, ``compute_auc``), ``main.py`` (``train_one_dataset``, argparse defaults, ``assist2009_pid``
settings), ``utils.py`` (``load_model``), ``load_data.py`` (``PID_DATA``: zero-padded ``[n_seq, seqlen]`` arrays,
``qa = q + a * n_question``)
License: MIT (Copyright (c) 2020 Aritra Ghosh; full text in LICENSES/arghosh-AKT.txt)
Domain: knowledge tracing (predict a student's next response from the interaction history)

Kept as written: the ``akt.py`` classes and ``attention`` (kq_same 1, ``separate_qa=False``, n_heads 8, the ``out``
MLP's 256 units, difficulties reset to 0, the ``np.triu`` no-peek masks, ``zero_pad`` on the retriever, the
in-place ``masked_fill_``), ``train``'s loop body (sequences shuffled each epoch, zero_grad, the batch transposed for
``akt``, ``target = floor((qa - 1) / n_question)`` (-1 on padding), ``loss, pred, true_ct = net(q, qa, target,
pid)``, backward, the ``maxgradnorm`` branch (off: -1), step), ``test`` (``net.eval()``, ``no_grad``),
Adam(betas (0.9, 0.999), eps 1e-8), l2 1e-5, dropout 0.05, n_block 1, batch_size 24.

Deviations from the original:
- the ASSISTments 2009 csv files are not here: ``PID_DATA.load_data``'s arrays are generated from ``seed``: 240
  training and 48 validation students with 15 to 40 attempts (zero-padded); 10 concepts, 50 problem ids (each of
  one concept, with a difficulty); an answer is correct with probability ``sigmoid(1.5 * mastery[concept] -
  difficulty)`` and each attempt raises that mastery by 0.4 (drawn per student and concept): learnable from the
  history, as knowledge tracing is;
- sizes for 2 CPU cores: seqlen 200 -> 40, n_question 110 -> 10, n_pid 16891 -> 50, d_model 256 -> 32, the
  model's ``d_ff`` 2048 -> 64 and ``final_fc_dim`` 512 -> 64 (``load_model`` leaves both at their defaults); lr
  1e-5 -> 1e-3 so that the 30 steps of the self-check show learning;
- comments, no-op docstrings and line wraps of ``akt.py`` are dropped (module size); ``device`` is the CPU; sklearn
  is not here: ``compute_auc`` is the rank-sum AUC written out in numpy; accuracy and ``binaryEntropy`` are dropped;
- ``train``'s batch loop is unrolled: one ``train_step`` is one batch (the shuffle at each epoch's start), the
  epoch's bookkeeping is dropped; ``eval_fn`` is ``test`` on the validation sequences returning the AUC;
  checkpointing, result files and the early stop are dropped; the Program's batch is the first training batch as
  the model takes it, its ``loss_fn`` the loss the model returns;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.init import constant_, xavier_uniform_

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

device = torch.device("cpu")
BUG = {"name": None}  # (port) the variant being built; read by the copied lines it switches
N_TRAIN, N_VALID, MIN_LEN = 240, 48, 15  # (port) synthetic students


class AKT(nn.Module):
    def __init__(self, n_question, n_pid, d_model, n_blocks,
                 kq_same, dropout, model_type, final_fc_dim=512, n_heads=8, d_ff=2048,  l2=1e-5, separate_qa=False):
        super().__init__()
        self.n_question = n_question
        self.dropout = dropout
        self.kq_same = kq_same
        self.n_pid = n_pid
        self.l2 = l2
        self.model_type = model_type
        self.separate_qa = separate_qa
        embed_l = d_model
        if self.n_pid > 0:
            self.difficult_param = nn.Embedding(self.n_pid+1, 1)
            self.q_embed_diff = nn.Embedding(self.n_question+1, embed_l)
            self.qa_embed_diff = nn.Embedding(2 * self.n_question + 1, embed_l)
        self.q_embed = nn.Embedding(self.n_question+1, embed_l)
        if self.separate_qa:
            self.qa_embed = nn.Embedding(2*self.n_question+1, embed_l)
        else:
            self.qa_embed = nn.Embedding(2, embed_l)
        self.model = Architecture(n_question=n_question, n_blocks=n_blocks, n_heads=n_heads, dropout=dropout,
                                    d_model=d_model, d_feature=d_model / n_heads, d_ff=d_ff,  kq_same=self.kq_same, model_type=self.model_type)
        self.out = nn.Sequential(nn.Linear(d_model + embed_l, final_fc_dim), nn.ReLU(), nn.Dropout(self.dropout),
                                 nn.Linear(final_fc_dim, 256), nn.ReLU(), nn.Dropout(self.dropout), nn.Linear(256, 1))
        self.reset()

    def reset(self):
        for p in self.parameters():
            if p.size(0) == self.n_pid+1 and self.n_pid > 0:
                torch.nn.init.constant_(p, 0.)

    def forward(self, q_data, qa_data, target, pid_data=None):
        q_embed_data = self.q_embed(q_data)  # BS, seqlen,  d_model# c_ct
        if self.separate_qa:
            qa_embed_data = self.qa_embed(qa_data)
        else:
            qa_data = (qa_data-q_data)//self.n_question  # rt
            qa_embed_data = self.qa_embed(qa_data)+q_embed_data
        if self.n_pid > 0:
            q_embed_diff_data = self.q_embed_diff(q_data)  # d_ct
            pid_embed_data = self.difficult_param(pid_data)  # uq
            q_embed_data = q_embed_data + pid_embed_data * q_embed_diff_data  # uq *d_ct + c_ct
            qa_embed_diff_data = self.qa_embed_diff(qa_data)  # f_(ct,rt) or #h_rt
            if self.separate_qa:
                qa_embed_data = qa_embed_data + pid_embed_data * qa_embed_diff_data  # uq* f_(ct,rt) + e_(ct,rt)
            else:
                qa_embed_data = qa_embed_data + pid_embed_data * (qa_embed_diff_data+q_embed_diff_data)  # + uq *(h_rt+d_ct)
            c_reg_loss = (pid_embed_data ** 2.).sum() * self.l2
        else:
            c_reg_loss = 0.
        d_output = self.model(q_embed_data, qa_embed_data)  # 211x512
        concat_q = torch.cat([d_output, q_embed_data], dim=-1)
        output = self.out(concat_q)
        labels = target.reshape(-1)
        m = nn.Sigmoid()
        preds = (output.reshape(-1))  # logit
        mask = labels > -0.9
        if BUG["name"] == "padding_not_masked":
            mask = labels > -2.
        masked_labels = labels[mask].float()
        masked_preds = preds[mask]
        loss = nn.BCEWithLogitsLoss(reduction='none')
        output = loss(masked_preds, masked_labels)
        return output.sum()+c_reg_loss, m(preds), mask.sum()


class Architecture(nn.Module):
    def __init__(self, n_question,  n_blocks, d_model, d_feature, d_ff, n_heads, dropout, kq_same, model_type):
        super().__init__()
        self.d_model = d_model
        self.model_type = model_type
        if model_type in {'akt'}:
            self.blocks_1 = nn.ModuleList([TransformerLayer(d_model=d_model, d_feature=d_model // n_heads, d_ff=d_ff,
                                                            dropout=dropout, n_heads=n_heads, kq_same=kq_same)
                                           for _ in range(n_blocks)])
            self.blocks_2 = nn.ModuleList([TransformerLayer(d_model=d_model, d_feature=d_model // n_heads, d_ff=d_ff,
                                                            dropout=dropout, n_heads=n_heads, kq_same=kq_same)
                                           for _ in range(n_blocks*2)])

    def forward(self, q_embed_data, qa_embed_data):
        seqlen, batch_size = q_embed_data.size(1), q_embed_data.size(0)
        qa_pos_embed = qa_embed_data
        q_pos_embed = q_embed_data
        y = qa_pos_embed
        seqlen, batch_size = y.size(1), y.size(0)
        x = q_pos_embed
        for block in self.blocks_1:  # encode qas
            y = block(mask=1, query=y, key=y, values=y)
        flag_first = True
        for block in self.blocks_2:
            if flag_first:  # peek current question
                x = block(mask=1, query=x, key=x, values=x, apply_pos=False)
                flag_first = False
            else:  # dont peek current response
                x = block(mask=1 if BUG["name"] == "retriever_peeks_current_response" else 0,
                          query=x, key=x, values=y, apply_pos=True)
                flag_first = True
        return x


class TransformerLayer(nn.Module):
    def __init__(self, d_model, d_feature, d_ff, n_heads, dropout,  kq_same):
        super().__init__()
        kq_same = kq_same == 1
        self.masked_attn_head = MultiHeadAttention(d_model, d_feature, n_heads, dropout, kq_same=kq_same)
        self.layer_norm1 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.activation = nn.ReLU()
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.layer_norm2 = nn.LayerNorm(d_model)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, mask, query, key, values, apply_pos=True):
        seqlen, batch_size = query.size(1), query.size(0)
        nopeek_mask = np.triu(np.ones((1, 1, seqlen, seqlen)), k=mask).astype('uint8')
        src_mask = (torch.from_numpy(nopeek_mask) == 0).to(device)
        if mask == 0:  # If 0, zero-padding is needed.
            query2 = self.masked_attn_head(query, key, values, mask=src_mask, zero_pad=True)
        else:
            query2 = self.masked_attn_head(query, key, values, mask=src_mask, zero_pad=False)
        query = query + self.dropout1((query2))
        query = self.layer_norm1(query)
        if apply_pos:
            query2 = self.linear2(self.dropout(self.activation(self.linear1(query))))
            query = query + self.dropout2((query2))
            query = self.layer_norm2(query)
        return query


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, d_feature, n_heads, dropout, kq_same, bias=True):
        super().__init__()
        self.d_model = d_model
        self.d_k = d_feature
        self.h = n_heads
        self.kq_same = kq_same
        self.v_linear = nn.Linear(d_model, d_model, bias=bias)
        self.k_linear = nn.Linear(d_model, d_model, bias=bias)
        if kq_same is False:
            self.q_linear = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.proj_bias = bias
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.gammas = nn.Parameter(torch.zeros(n_heads, 1, 1))
        torch.nn.init.xavier_uniform_(self.gammas)
        self._reset_parameters()

    def _reset_parameters(self):
        xavier_uniform_(self.k_linear.weight)
        xavier_uniform_(self.v_linear.weight)
        if self.kq_same is False:
            xavier_uniform_(self.q_linear.weight)
        if self.proj_bias:
            constant_(self.k_linear.bias, 0.)
            constant_(self.v_linear.bias, 0.)
            if self.kq_same is False:
                constant_(self.q_linear.bias, 0.)
            constant_(self.out_proj.bias, 0.)

    def forward(self, q, k, v, mask, zero_pad):
        bs = q.size(0)
        k = self.k_linear(k).view(bs, -1, self.h, self.d_k)
        if self.kq_same is False:
            q = self.q_linear(q).view(bs, -1, self.h, self.d_k)
        else:
            q = self.k_linear(q).view(bs, -1, self.h, self.d_k)
        v = self.v_linear(v).view(bs, -1, self.h, self.d_k)
        k = k.transpose(1, 2)
        q = q.transpose(1, 2)
        v = v.transpose(1, 2)
        gammas = self.gammas
        scores = attention(q, k, v, self.d_k, mask, self.dropout, zero_pad, gammas)
        concat = scores.transpose(1, 2).contiguous().view(bs, -1, self.d_model)
        output = self.out_proj(concat)
        return output


def attention(q, k, v, d_k, mask, dropout, zero_pad, gamma=None):
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)  # BS, 8, seqlen, seqlen
    bs, head, seqlen = scores.size(0), scores.size(1), scores.size(2)
    x1 = torch.arange(seqlen).expand(seqlen, -1).to(device)
    x2 = x1.transpose(0, 1).contiguous()
    with torch.no_grad():
        scores_ = scores.masked_fill(mask == 0, -1e32)
        scores_ = F.softmax(scores_, dim=-1)  # BS,8,seqlen,seqlen
        scores_ = scores_ * mask.float().to(device)
        distcum_scores = torch.cumsum(scores_, dim=-1)  # bs, 8, sl, sl
        disttotal_scores = torch.sum(scores_, dim=-1, keepdim=True)  # bs, 8, sl, 1
        position_effect = torch.abs(x1-x2)[None, None, :, :].type(torch.FloatTensor).to(device)  # 1, 1, seqlen, seqlen
        dist_scores = torch.clamp((disttotal_scores-distcum_scores)*position_effect, min=0.)
        dist_scores = dist_scores.sqrt().detach()
    m = nn.Softplus()
    gamma = -1. * m(gamma).unsqueeze(0)  # 1,8,1,1
    total_effect = torch.clamp(torch.clamp((dist_scores*gamma).exp(), min=1e-5), max=1e5)
    scores = scores * total_effect
    if BUG["name"] == "masked_fill_not_inplace":
        scores.masked_fill(mask == 0, -1e32)
    else:
        scores.masked_fill_(mask == 0, -1e32)
    scores = F.softmax(scores, dim=-1)  # BS,8,seqlen,seqlen
    if zero_pad:
        pad_zero = torch.zeros(bs, head, 1, seqlen).to(device)
        scores = torch.cat([pad_zero, scores[:, :, 1:, :]], dim=2)
    scores = dropout(scores)
    output = torch.matmul(scores, v)
    return output


# run.py
def compute_auc(all_target, all_pred):
    # (port) metrics.roc_auc_score written out: the rank-sum AUC (ties averaged)
    ranks = np.empty(len(all_pred))
    ranks[np.argsort(all_pred, kind="mergesort")] = np.arange(1, len(all_pred) + 1)
    for v in np.unique(all_pred):
        tie = all_pred == v
        ranks[tie] = ranks[tie].mean()
    pos = all_target == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _one_batch(params, q_one_seq, qa_one_seq, pid_one_seq):
    """The lines of ``train`` / ``test`` that turn a column slice into the model's inputs (akt, pid)."""
    input_q, input_qa = np.transpose(q_one_seq[:, :]), np.transpose(qa_one_seq[:, :])  # Shape (bs, seqlen)
    target, input_pid = np.transpose(qa_one_seq[:, :]), np.transpose(pid_one_seq[:, :])
    target = (target - 1) / params.n_question
    target_1 = np.floor(target)
    input_q, input_qa = torch.from_numpy(input_q).long().to(device), torch.from_numpy(input_qa).long().to(device)
    target, input_pid = torch.from_numpy(target_1).float().to(device), torch.from_numpy(input_pid).long().to(device)
    return (input_q, input_qa, target, input_pid), target_1


def test(net, params, q_data, qa_data, pid_data):
    net.eval()
    N = int(math.ceil(float(len(q_data)) / float(params.batch_size)))
    q_data, qa_data, pid_data = q_data.T, qa_data.T, pid_data.T
    pred_list, target_list = [], []
    for idx in range(N):
        sl = slice(idx*params.batch_size, (idx+1)*params.batch_size)
        inputs, target_1 = _one_batch(params, q_data[:, sl], qa_data[:, sl], pid_data[:, sl])
        with torch.no_grad():
            loss, pred, ct = net(*inputs)
        pred, target = pred.cpu().numpy(), target_1.reshape((-1,))
        nopadding_index = np.flatnonzero(target >= -0.9).tolist()
        pred_list.append(pred[nopadding_index])
        target_list.append(target[nopadding_index])
    return compute_auc(np.concatenate(target_list, axis=0), np.concatenate(pred_list, axis=0))


def _synthetic(rng, n_seq, params, concept_of, difficulty):
    """(port) PID_DATA.load_data's arrays: zero-padded q, qa = q + a * n_question and pid, [n_seq, seqlen]."""
    q, qa, pid = (np.zeros((n_seq, params.seqlen)) for _ in range(3))
    for s in range(n_seq):
        mastery = rng.normal(0, 1, params.n_question + 1)
        for t in range(rng.randint(MIN_LEN, params.seqlen + 1)):
            p = rng.randint(1, params.n_pid + 1)
            c = concept_of[p]
            a = rng.rand() < 1 / (1 + np.exp(-(1.5 * mastery[c] - difficulty[p])))
            mastery[c] += 0.4
            q[s, t], qa[s, t], pid[s, t] = c, c + a * params.n_question, p
    return q, qa, pid


def _build(seed, bug=None):
    BUG["name"] = bug
    params = types.SimpleNamespace(max_iter=300, train_set=1, seed=seed, optim='adam', batch_size=24, lr=1e-3,
                                   maxgradnorm=-1., final_fc_dim=64, d_model=32, d_ff=64, dropout=0.05, n_block=1,
                                   n_head=8, kq_same=1, l2=1e-5, model='akt_pid', dataset='assist2009_pid',
                                   n_question=10, seqlen=40, n_pid=50)
    rng = np.random.RandomState(seed)
    concept_of = np.concatenate([[0], rng.randint(1, params.n_question + 1, params.n_pid)])
    difficulty = np.concatenate([[0.], rng.normal(0, 1, params.n_pid)])
    train_q, train_qa, train_pid = _synthetic(rng, N_TRAIN, params, concept_of, difficulty)
    valid_q, valid_qa, valid_pid = _synthetic(rng, N_VALID, params, concept_of, difficulty)
    np.random.seed(seed), torch.manual_seed(seed)

    # utils.load_model (d_ff and final_fc_dim given the reduced sizes) and train_one_dataset's optimizer
    model = AKT(n_question=params.n_question, n_pid=params.n_pid, n_blocks=params.n_block, d_model=params.d_model,
                dropout=params.dropout, kq_same=params.kq_same, model_type='akt', l2=params.l2,
                final_fc_dim=params.final_fc_dim, d_ff=params.d_ff).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=params.lr, betas=(0.9, 0.999), eps=1e-8)
    N, st = int(math.ceil(len(train_q) / params.batch_size)), {"idx": 0}

    def train_step():
        if st["idx"] == 0:  # train(): a new epoch
            model.train()
            shuffled_ind = np.arange(train_q.shape[0])
            np.random.shuffle(shuffled_ind)
            st["q"], st["qa"], st["pid"] = (train_q.T[:, shuffled_ind], train_qa.T[:, shuffled_ind],
                                            train_pid.T[:, shuffled_ind])
        idx = st["idx"]
        optimizer.zero_grad()
        sl = slice(idx*params.batch_size, (idx+1)*params.batch_size)
        inputs, target_1 = _one_batch(params, st["q"][:, sl], st["qa"][:, sl], st["pid"][:, sl])
        loss, pred, true_ct = model(*inputs)
        loss.backward()
        if params.maxgradnorm > 0.:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=params.maxgradnorm)
        optimizer.step()
        st["idx"] = (idx + 1) % N
        return loss.item()

    def eval_fn(net, _batch=None):
        was, auc = net.training, test(net, params, valid_q, valid_qa, valid_pid)
        net.train(was)
        return auc

    inputs, _ = _one_batch(params, train_q.T[:, :params.batch_size], train_qa.T[:, :params.batch_size],
                           train_pid.T[:, :params.batch_size])
    return Program(name="akt_assist", model=model, batch=(inputs, inputs[2]), loss_fn=lambda out, _t: out[0],
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the slip reported in bigdata-ustc/EduKTM's copy of this attention
    # (https://github.com/bigdata-ustc/EduKTM/issues/39, #52, PR #53): ``masked_fill`` instead of the in-place
    # ``masked_fill_``, so the no-peek mask is dropped and every position attends to the future responses.
    Bug("masked_fill_not_inplace", functools.partial(_build, bug="masked_fill_not_inplace"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic: the knowledge retriever built with mask=1 (the question encoder's "peek current" mask), so the
    # prediction at t reads the encoding of the response at t it is asked to predict (the leak asked about in
    # https://github.com/pykt-team/pykt-toolkit/issues/182).
    Bug("retriever_peeks_current_response", functools.partial(_build, bug="retriever_peeks_current_response"),
        "learning_ledger", ("TASK",)),
    # classic: the padding mask of the loss dropped, the padded steps' -1 labels enter the BCE.
    Bug("padding_not_masked", functools.partial(_build, bug="padding_not_masked"), "learning_ledger",
        ("OBJECTIVE",)),
]
