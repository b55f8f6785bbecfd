"""Fine-tuning the OpenAI GPT (the "finetuned transformer LM") on the ROCStories cloze task, from HuggingFace's
pytorch-openai-transformer-lm: a 12-layer post-LayerNorm decoder with token and learned position embeddings held in
one table (``[token, position]`` id pairs summed), a tied LM head over the truncated sequence and a multiple-choice
head read at the ``_classify_`` token of each of the two (story, ending) candidates; the loss is the choice
cross-entropy summed plus ``lm_coef`` times the masked LM loss, stepped by ``OpenAIAdam`` (per-parameter clipping,
warmup-linear schedule, decoupled L2) inside ``MultipleChoiceLossCompute``.

Source: https://github.com/huggingface/pytorch-openai-transformer-lm
Commit: bfd8e0989c684b79b800a49f8d9b74e559298ec2
Files: train.py, model_pytorch.py, loss.py, opt.py, utils.py (iter_data), datasets.py (rocstories), README command
``python train.py --dataset rocstories --desc rocstories --submit --analysis``
License: MIT (Copyright (c) 2018 OpenAI; full text in LICENSES/huggingface-pytorch-openai-transformer-lm.txt)
Domain: language, multiple-choice text classification with an auxiliary LM loss (GPT-1 DoubleHeadModel)

Kept as written: ``LayerNorm``, ``Conv1D``, ``Attention`` (the ``tril`` buffer, ``w * b + -1e9 * (1 - b)``),
``MLP``, ``Block``, ``TransformerModel``, ``LMHead`` (tied to the embedding), ``MultipleChoiceHead`` (the
``Dropout2d`` double transposition), ``DoubleHeadModel``, ``MultipleChoiceLossCompute`` (backward, step and
``zero_grad`` inside the loss call), ``OpenAIAdam`` with ``warmup_linear``, ``transform_roc``, ``iter_apply``,
``run_epoch``'s loop body, the argument defaults (lr 6.25e-5 aside, see below; warmup 0.002, l2 0.01,
max_grad_norm 1, lm_coef 0.5, n_batch 8, n_iter 3, dropouts 0.1, gelu), ``n_ctx`` computed from the data and
``vocab = n_vocab + n_special + n_ctx``.

Deviations from the original:
- the ROCStories csv files, the BPE encoder and the pretrained OpenAI weights (``load_openai_pretrained_model``)
  are not here: the model starts from its own random init, and the stories are synthetic token sequences made from
  ``seed`` (a 40-word vocabulary in two "moods"; a story is a 6-word walk mostly within one mood's words, the right
  ending 3 words of the story's mood, the wrong one 3 words of the other; the label says which ending is right),
  already encoded as ``encode_dataset`` would return them; 400 training and 64 validation stories.
- lr 6.25e-5 (the fine-tuning rate for pretrained weights) -> 1e-3, since training here starts from random weights
  (of a model 24 times narrower) and 30 steps must show the loss falling.
- sizes for 2 CPU cores: ``n_embd`` 768 -> 32, ``n_head`` 12 -> 4, ``n_layer`` 12 -> 2.
- ``OpenAIAdam.step``'s ``add_(scalar, tensor)`` / ``addcmul_(scalar, t1, t2)`` / ``addcdiv_(scalar, t1, t2)`` calls
  are written with ``alpha=`` / ``value=`` (the old overloads are gone from torch); ``nn.CrossEntropyLoss(reduce=
  False)`` is ``reduction='none'`` (the same).
- ``nn.DataParallel`` is dropped (one CPU); ``sklearn.utils.shuffle`` (not installed) is a numpy permutation drawn
  from ``np.random``; ``iter_data`` has no tqdm bar; logging, ``predict``, checkpoints and the analysis are dropped.
- ``run_epoch`` is not run an epoch at a time: ``train_step`` is one batch of its loop (a new shuffled epoch when
  the batches run out), returning the loss ``compute_loss_fct`` returns; ``eval_fn`` is ``log``'s validation cost
  (``iter_apply`` over the validation stories, divided by ``n_valid``).
- the Program's batch is the first ``n_batch`` training stories as ``(XMB, (XMB, YMB, MMB))``; its ``loss_fn`` is
  the same train loss ``MultipleChoiceLossCompute`` forms (clf sum + lm_coef * lm sum) without the backward and step.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, C408, UP032, RUF059, SIM113

from __future__ import annotations

import copy
import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.nn.parameter import Parameter
from torch.nn.utils import clip_grad_norm_
from torch.optim import Optimizer

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# model_pytorch.py
def gelu(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


def swish(x):
    return x * torch.sigmoid(x)


ACT_FNS = {
    'relu': nn.ReLU,
    'swish': swish,
    'gelu': gelu
}


class LayerNorm(nn.Module):
    "Construct a layernorm module in the OpenAI style (epsilon inside the square root)."

    def __init__(self, n_state, e=1e-5):
        super(LayerNorm, self).__init__()
        self.g = nn.Parameter(torch.ones(n_state))
        self.b = nn.Parameter(torch.zeros(n_state))
        self.e = e

    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.e)
        return self.g * x + self.b


class Conv1D(nn.Module):
    def __init__(self, nf, rf, nx):
        super(Conv1D, self).__init__()
        self.rf = rf
        self.nf = nf
        if rf == 1:  # faster 1x1 conv
            w = torch.empty(nx, nf)
            nn.init.normal_(w, std=0.02)
            self.w = Parameter(w)
            self.b = Parameter(torch.zeros(nf))
        else:  # was used to train LM
            raise NotImplementedError

    def forward(self, x):
        if self.rf == 1:
            size_out = x.size()[:-1] + (self.nf,)
            x = torch.addmm(self.b, x.view(-1, x.size(-1)), self.w)
            x = x.view(*size_out)
        else:
            raise NotImplementedError
        return x


class Attention(nn.Module):
    def __init__(self, nx, n_ctx, cfg, scale=False):
        super(Attention, self).__init__()
        n_state = nx  # in Attention: n_state=768 (nx=n_embd)
        # [switch nx => n_state from Block to Attention to keep identical to TF implem]
        assert n_state % cfg.n_head == 0
        self.register_buffer('b', torch.tril(torch.ones(n_ctx, n_ctx)).view(1, 1, n_ctx, n_ctx))
        self.n_head = cfg.n_head
        self.split_size = n_state
        self.scale = scale
        self.c_attn = Conv1D(n_state * 3, 1, nx)
        self.c_proj = Conv1D(n_state, 1, nx)
        self.attn_dropout = nn.Dropout(cfg.attn_pdrop)
        self.resid_dropout = nn.Dropout(cfg.resid_pdrop)
        self.bug = cfg.bug

    def _attn(self, q, k, v):
        w = torch.matmul(q, k)
        if self.scale:
            w = w / math.sqrt(v.size(-1))
        # w = w * self.b + -1e9 * (1 - self.b)  # TF implem method: mask_attn_weights
        # XD: self.b may be larger than w, so we need to crop it
        b = self.b[:, :, :w.size(-2), :w.size(-1)]
        if self.bug != "attention_mask_dropped":
            w = w * b + -1e9 * (1 - b)

        w = nn.Softmax(dim=-1)(w)
        w = self.attn_dropout(w)
        return torch.matmul(w, v)

    def merge_heads(self, x):
        x = x.permute(0, 2, 1, 3).contiguous()
        new_x_shape = x.size()[:-2] + (x.size(-2) * x.size(-1),)
        return x.view(*new_x_shape)  # in Tensorflow implem: fct merge_states

    def split_heads(self, x, k=False):
        new_x_shape = x.size()[:-1] + (self.n_head, x.size(-1) // self.n_head)
        x = x.view(*new_x_shape)  # in Tensorflow implem: fct split_states
        if k:
            return x.permute(0, 2, 3, 1)
        else:
            return x.permute(0, 2, 1, 3)

    def forward(self, x):
        x = self.c_attn(x)
        query, key, value = x.split(self.split_size, dim=2)
        query = self.split_heads(query)
        key = self.split_heads(key, k=True)
        value = self.split_heads(value)
        a = self._attn(query, key, value)
        a = self.merge_heads(a)
        a = self.c_proj(a)
        a = self.resid_dropout(a)
        return a


class MLP(nn.Module):
    def __init__(self, n_state, cfg):  # in MLP: n_state=3072 (4 * n_embd)
        super(MLP, self).__init__()
        nx = cfg.n_embd
        self.c_fc = Conv1D(n_state, 1, nx)
        self.c_proj = Conv1D(nx, 1, n_state)
        self.act = ACT_FNS[cfg.afn]
        self.dropout = nn.Dropout(cfg.resid_pdrop)

    def forward(self, x):
        h = self.act(self.c_fc(x))
        h2 = self.c_proj(h)
        return self.dropout(h2)


class Block(nn.Module):
    def __init__(self, n_ctx, cfg, scale=False):
        super(Block, self).__init__()
        nx = cfg.n_embd
        self.attn = Attention(nx, n_ctx, cfg, scale)
        self.ln_1 = LayerNorm(nx)
        self.mlp = MLP(4 * nx, cfg)
        self.ln_2 = LayerNorm(nx)

    def forward(self, x):
        a = self.attn(x)
        n = self.ln_1(x + a)
        m = self.mlp(n)
        h = self.ln_2(n + m)
        return h


class TransformerModel(nn.Module):
    """ Transformer model """

    def __init__(self, cfg, vocab=40990, n_ctx=512):
        super(TransformerModel, self).__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, cfg.n_embd)
        self.drop = nn.Dropout(cfg.embd_pdrop)
        block = Block(n_ctx, cfg, scale=True)
        self.h = nn.ModuleList([copy.deepcopy(block) for _ in range(cfg.n_layer)])

        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, x):
        x = x.view(-1, x.size(-2), x.size(-1))
        e = self.drop(self.embed(x))
        # Add the position information to the input embeddings
        h = e.sum(dim=2)
        for block in self.h:
            h = block(h)
        return h


class LMHead(nn.Module):
    """ Language Model Head for the transformer """

    def __init__(self, model, cfg, trunc_and_reshape=True):
        super(LMHead, self).__init__()
        self.n_embd = cfg.n_embd
        embed_shape = model.embed.weight.shape
        self.decoder = nn.Linear(embed_shape[1], embed_shape[0], bias=False)
        self.decoder.weight = model.embed.weight  # Tied weights
        self.trunc_and_reshape = trunc_and_reshape  # XD

    def forward(self, h):
        # Truncated Language modeling logits (we remove the last token)
        h_trunc = h[:, :-1].contiguous().view(-1, self.n_embd) \
            if self.trunc_and_reshape else h  # XD
        lm_logits = self.decoder(h_trunc)
        return lm_logits


class MultipleChoiceHead(nn.Module):
    """ Classifier Head for the transformer """

    def __init__(self, clf_token, cfg):
        super(MultipleChoiceHead, self).__init__()
        self.n_embd = cfg.n_embd
        self.clf_token = clf_token
        self.dropout = nn.Dropout2d(cfg.clf_pdrop)  # To reproduce the noise_shape parameter of TF implementation
        self.linear = nn.Linear(cfg.n_embd, 1)

        nn.init.normal_(self.linear.weight, std=0.02)
        nn.init.normal_(self.linear.bias, 0)

    def forward(self, h, x):
        # Classification logits
        clf_h = h.view(-1, self.n_embd)
        flat = x[..., 0].contiguous().view(-1)
        clf_h = clf_h[flat == self.clf_token, :]
        clf_h = clf_h.view(-1, x.size(1), self.n_embd, 1)
        # This double transposition is there to replicate the behavior
        # of the noise_shape argument in the tensorflow
        # implementation.  For more details, see
        # https://github.com/huggingface/pytorch-openai-transformer-lm/issues/11
        clf_h = self.dropout(clf_h.transpose(1, 2)).transpose(1, 2)
        clf_h = clf_h.contiguous().view(-1, self.n_embd)
        clf_logits = self.linear(clf_h)

        return clf_logits.view(-1, x.size(1))


class DoubleHeadModel(nn.Module):
    """ Transformer with language model and task specific heads """
    def __init__(self, cfg, clf_token, task_head_type, vocab=40990, n_ctx=512):
        super(DoubleHeadModel, self).__init__()
        self.transformer = TransformerModel(cfg, vocab=vocab, n_ctx=n_ctx)
        self.lm_head = LMHead(self.transformer, cfg)
        if task_head_type == 'multiple_choice':
            self.task_head = MultipleChoiceHead(clf_token, cfg)
        else:  # (port) the other heads are not used by the rocstories run
            raise ValueError(task_head_type)

    def forward(self, x):
        h = self.transformer(x)
        lm_logits = self.lm_head(h)
        task_logits = self.task_head(h, x)

        return lm_logits, task_logits


class dotdict(dict):
    """dot.notation access to dictionary attributes"""
    __getattr__ = dict.get
    __setattr__ = dict.__setitem__
    __delattr__ = dict.__delitem__


# loss.py
class MultipleChoiceLossCompute:
    "A Loss compute and train function for multiple choice tasks."

    def __init__(self, lm_criterion, clf_criterion, lm_coef, opt=None, bug=None):
        self.lm_criterion = lm_criterion
        self.clf_criterion = clf_criterion
        self.lm_coef = lm_coef
        self.opt = opt
        self.bug = bug

    def __call__(self, X, Y, M, clf_logits, lm_logits=None, only_return_losses=False):
        # Language modeling loss
        if lm_logits is not None:
            if self.bug == "lm_labels_not_shifted":
                x_shifted = X[:, :, :-1, 0].contiguous().view(-1)
            else:
                x_shifted = X[:, :, 1:, 0].contiguous().view(-1)  # Shape: 252
            M = M.view(-1, M.size(2))
            lm_losses = self.lm_criterion(lm_logits, x_shifted)
            lm_losses = lm_losses.view(X.size(0) * X.size(1), X.size(2) - 1)
            lm_losses = lm_losses * M[:, 1:]
            lm_losses = lm_losses.sum(1) / torch.sum(M[:, 1:], 1)
        # Classification loss
        clf_losses = self.clf_criterion(clf_logits, Y)
        if only_return_losses:
            return (clf_losses, lm_losses) if lm_logits is not None else clf_losses

        if self.lm_coef > 0 and lm_logits is not None:
            train_loss = clf_losses.sum() + self.lm_coef * lm_losses.sum()
        else:
            train_loss = clf_losses.sum()
        train_loss.backward()
        if self.opt is not None:
            self.opt.step()
            self.opt.zero_grad()
        return train_loss.item()


# opt.py
def warmup_cosine(x, warmup=0.002):
    s = 1 if x <= warmup else 0
    return s * (x / warmup) + (1 - s) * (0.5 * (1 + torch.cos(math.pi * x)))


def warmup_constant(x, warmup=0.002):
    s = 1 if x <= warmup else 0
    return s * (x / warmup) + (1 - s) * 1


def warmup_linear(x, warmup=0.002):
    s = 1 if x <= warmup else 0
    return (s * (x / warmup) + (1 - s)) * (1 - x)


SCHEDULES = {
    'warmup_cosine': warmup_cosine,
    'warmup_constant': warmup_constant,
    'warmup_linear': warmup_linear,
}


class OpenAIAdam(Optimizer):
    """Implements Open AI version of Adam algorithm with weight decay fix.
    """
    def __init__(self, params, lr, schedule, warmup, t_total,
                 b1=0.9, b2=0.999, e=1e-8, l2=0,
                 vector_l2=False, max_grad_norm=-1, **kwargs):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if schedule not in SCHEDULES:
            raise ValueError("Invalid schedule parameter: {}".format(schedule))
        if not 0 <= warmup:
            raise ValueError("Invalid warmup: {}".format(warmup))
        if not 0.0 <= b1 < 1.0:
            raise ValueError("Invalid b1 parameter: {}".format(b1))
        if not 0.0 <= b2 < 1.0:
            raise ValueError("Invalid b2 parameter: {}".format(b2))
        if not 0.0 <= e:
            raise ValueError("Invalid epsilon value: {}".format(e))
        defaults = dict(lr=lr, schedule=schedule, warmup=warmup, t_total=t_total,
                        b1=b1, b2=b2, e=e, l2=l2, vector_l2=vector_l2,
                        max_grad_norm=max_grad_norm)
        super(OpenAIAdam, self).__init__(params, defaults)

    def step(self, closure=None):
        """Performs a single optimization step.

        Arguments:
            closure (callable, optional): A closure that reevaluates the model
                and returns the loss.
        """
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data
                if grad.is_sparse:
                    raise RuntimeError('Adam does not support sparse gradients, please consider SparseAdam instead')

                state = self.state[p]

                # State initialization
                if len(state) == 0:
                    state['step'] = 0
                    # Exponential moving average of gradient values
                    state['exp_avg'] = torch.zeros_like(p.data)
                    # Exponential moving average of squared gradient values
                    state['exp_avg_sq'] = torch.zeros_like(p.data)

                exp_avg, exp_avg_sq = state['exp_avg'], state['exp_avg_sq']
                beta1, beta2 = group['b1'], group['b2']

                state['step'] += 1

                # Add grad clipping
                if group['max_grad_norm'] > 0:
                    clip_grad_norm_(p, group['max_grad_norm'])

                # Decay the first and second moment running average coefficient
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)  # (port) add_(1 - beta1, grad)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)  # (port) addcmul_(1 - beta2, grad, grad)
                denom = exp_avg_sq.sqrt().add_(group['e'])

                bias_correction1 = 1 - beta1 ** state['step']
                bias_correction2 = 1 - beta2 ** state['step']

                schedule_fct = SCHEDULES[group['schedule']]
                lr_scheduled = group['lr'] * schedule_fct(state['step'] / group['t_total'], group['warmup'])
                step_size = lr_scheduled * math.sqrt(bias_correction2) / bias_correction1

                p.data.addcdiv_(exp_avg, denom, value=-step_size)  # (port) addcdiv_(-step_size, exp_avg, denom)

                # Add weight decay at the end (fixed version)
                if (len(p.size()) > 1 or group['vector_l2']) and group['l2'] > 0:
                    p.data.add_(p.data, alpha=-lr_scheduled * group['l2'])  # (port) add_(-lr * l2, p.data)

        return loss


# utils.py (the tqdm bar dropped)
def iter_data(*datas, n_batch=128, truncate=False, verbose=False, max_batches=float("inf")):
    n = len(datas[0])
    if truncate:
        n = (n // n_batch) * n_batch
    n = min(n, max_batches * n_batch)
    n_batches = 0
    for i in range(0, n, n_batch):
        if n_batches >= max_batches:
            return
        if len(datas) == 1:
            yield datas[0][i:i + n_batch]
        else:
            yield (d[i:i + n_batch] for d in datas)
        n_batches += 1


N_VOCAB = 40  # (port) the 40000-entry BPE vocabulary


def synthetic_rocstories(rng, n):
    """(port) encoded stories, endings and labels: a 6-word walk mostly within one mood's 20 words, the right ending
    3 words of that mood, the wrong one 3 words of the other."""
    X1, X2, X3, Y = [], [], [], []
    half = N_VOCAB // 2
    for _ in range(n):
        mood = int(rng.integers(2))
        w = int(rng.integers(half))
        story = []
        for _ in range(6):
            word = mood * half + w if rng.random() < 0.85 else int(rng.integers(N_VOCAB))
            story.append(word)
            w = (w + int(rng.integers(1, 3))) % half
        right = [mood * half + int(v) for v in rng.integers(half, size=3)]
        wrong = [(1 - mood) * half + int(v) for v in rng.integers(half, size=3)]
        y = int(rng.integers(2))
        X1.append(story)
        X2.append(right if y == 0 else wrong)
        X3.append(wrong if y == 0 else right)
        Y.append(y)
    return X1, X2, X3, np.asarray(Y, dtype=np.int32)


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    args = dotdict(n_iter=3, n_batch=8, max_grad_norm=1, lr=1e-3,  # (port) lr 6.25e-5
                   lr_warmup=0.002, n_ctx=512, n_embd=32, n_head=4, n_layer=2,  # (port) 768, 12, 12
                   embd_pdrop=0.1, attn_pdrop=0.1, resid_pdrop=0.1, clf_pdrop=0.1, l2=0.01, vector_l2=False,
                   opt='adam', afn='gelu', lr_schedule='warmup_linear', lm_coef=0.5, b1=0.9, b2=0.999, e=1e-8,
                   n_valid=64, bug=bug)
    n_ctx = args.n_ctx
    device = torch.device("cpu")

    encoder = {}
    n_vocab = N_VOCAB
    (trX1, trX2, trX3, trY) = synthetic_rocstories(rng, 400)
    (vaX1, vaX2, vaX3, vaY) = synthetic_rocstories(rng, args.n_valid)
    encoder['_start_'] = n_vocab + len(encoder)
    encoder['_delimiter_'] = n_vocab + len(encoder)
    encoder['_classify_'] = n_vocab + len(encoder)
    clf_token = encoder['_classify_']
    n_special = 3
    max_len = n_ctx // 2 - 2
    n_ctx = min(max(
        [len(x1[:max_len]) + max(len(x2[:max_len]),
                                 len(x3[:max_len])) for x1, x2, x3 in zip(trX1, trX2, trX3)]
        + [len(x1[:max_len]) + max(len(x2[:max_len]),
                                   len(x3[:max_len])) for x1, x2, x3 in zip(vaX1, vaX2, vaX3)]
        ) + 3, n_ctx)
    vocab = n_vocab + n_special + n_ctx

    def transform_roc(X1, X2, X3):
        n_batch = len(X1)
        xmb = np.zeros((n_batch, 2, n_ctx, 2), dtype=np.int32)
        mmb = np.zeros((n_batch, 2, n_ctx), dtype=np.float32)
        start = encoder['_start_']
        delimiter = encoder['_delimiter_']
        for i, (x1, x2, x3), in enumerate(zip(X1, X2, X3)):
            x12 = [start] + x1[:max_len] + [delimiter] + x2[:max_len] + [clf_token]
            x13 = [start] + x1[:max_len] + [delimiter] + x3[:max_len] + [clf_token]
            l12 = len(x12)
            l13 = len(x13)
            xmb[i, 0, :l12, 0] = x12
            xmb[i, 1, :l13, 0] = x13
            mmb[i, 0, :l12] = 1
            mmb[i, 1, :l13] = 1
        # Position information that is added to the input embeddings in the TransformerModel
        xmb[:, :, :, 1] = np.arange(n_vocab + n_special, n_vocab + n_special + n_ctx)
        return xmb, mmb

    trX, trM = transform_roc(trX1, trX2, trX3)
    vaX, vaM = transform_roc(vaX1, vaX2, vaX3)

    n_train = len(trY)
    n_valid = len(vaY)
    n_batch_train = args.n_batch
    n_updates_total = (n_train // n_batch_train) * args.n_iter

    dh_model = DoubleHeadModel(args, clf_token, 'multiple_choice', vocab, n_ctx)

    criterion = nn.CrossEntropyLoss(reduction='none')  # (port) reduce=False
    model_opt = OpenAIAdam(dh_model.parameters(),
                           lr=args.lr,
                           schedule=args.lr_schedule,
                           warmup=args.lr_warmup,
                           t_total=n_updates_total,
                           b1=args.b1,
                           b2=args.b2,
                           e=args.e,
                           l2=args.l2,
                           vector_l2=args.vector_l2,
                           max_grad_norm=args.max_grad_norm)
    compute_loss_fct = MultipleChoiceLossCompute(criterion,
                                                 criterion,
                                                 args.lm_coef,
                                                 model_opt, bug=bug)
    dh_model.to(device)
    trYt = trY

    def shuffle(*arrays, random_state):  # (port) sklearn.utils.shuffle
        idx = random_state.permutation(len(arrays[0]))
        return [a[idx] for a in arrays]

    st = {"it": None}

    def next_batch():
        if st["it"] is not None:
            try:
                return next(st["it"])
            except StopIteration:
                pass
        st["it"] = iter_data(*shuffle(trX, trM, trYt, random_state=np.random),
                             n_batch=n_batch_train, truncate=True, verbose=True)
        return next(st["it"])

    def train_step():
        # one batch of run_epoch()
        xmb, mmb, ymb = next_batch()
        dh_model.train()
        XMB = torch.tensor(xmb, dtype=torch.long).to(device)
        YMB = torch.tensor(ymb, dtype=torch.long).to(device)
        MMB = torch.tensor(mmb).to(device)
        lm_logits, clf_logits = dh_model(XMB)
        return compute_loss_fct(XMB, YMB, MMB, clf_logits, lm_logits)

    def iter_apply(Xs, Ms, Ys):
        logits = []
        cost = 0
        with torch.no_grad():
            dh_model.eval()
            for xmb, mmb, ymb in iter_data(Xs, Ms, Ys, n_batch=n_batch_train, truncate=False, verbose=True):
                n = len(xmb)
                XMB = torch.tensor(xmb, dtype=torch.long).to(device)
                YMB = torch.tensor(ymb, dtype=torch.long).to(device)
                MMB = torch.tensor(mmb).to(device)
                _, clf_logits = dh_model(XMB)
                clf_logits *= n
                clf_losses = compute_loss_fct(XMB, YMB, MMB, clf_logits, only_return_losses=True)
                clf_losses *= n
                logits.append(clf_logits.to("cpu").numpy())
                cost += clf_losses.sum().item()
            logits = np.concatenate(logits, 0)
        return logits, cost

    def eval_fn(model, _batch=None):
        # log()'s validation cost
        va_logits, va_cost = iter_apply(vaX, vaM, vaY)
        va_cost = va_cost / n_valid
        return va_cost

    def loss_fn(outputs, targets):
        lm_logits, clf_logits = outputs
        X, Y, M = targets
        clf_losses, lm_losses = compute_loss_fct(X, Y, M, clf_logits, lm_logits, only_return_losses=True)
        return clf_losses.sum() + compute_loss_fct.lm_coef * lm_losses.sum()

    XMB = torch.tensor(trX[:n_batch_train], dtype=torch.long)
    batch = (XMB, (XMB, torch.tensor(trY[:n_batch_train], dtype=torch.long), torch.tensor(trM[:n_batch_train])))
    return Program(name="openaigptlm_rocstories", model=dh_model, batch=batch, loss_fn=loss_fn,
                   optimizer=model_opt, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the LM targets taken unshifted (X[:, :, :-1] for X[:, :, 1:]), so each position is scored on its own
    # input token; the same slip in the GPT port derived from this code: huggingface/transformers PR #404
    # (https://github.com/huggingface/transformers/pull/404, "Fix Language Modeling Loss").
    Bug("lm_labels_not_shifted", functools.partial(_build, bug="lm_labels_not_shifted"), "learning_ledger",
        ("TASK",)),
    # classic: the causal mask line left out of Attention._attn, so every position attends to the tokens after it
    # and the LM loss reads its own targets.
    Bug("attention_mask_dropped", functools.partial(_build, bug="attention_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
]
