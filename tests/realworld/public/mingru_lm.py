"""minGRU character language model trained by the repository's enwik8 script: ``minLM`` (token embedding, per layer
a pre-RMSNorm ``minGRU`` in log space, computed in parallel by the Heinsen associative scan, with a residual, then
a pre-RMSNorm GELU feedforward with a residual; a final RMSNorm and a bias-free logit projection), the loss
``cross_entropy(logits, x[:, 1:])`` on inputs ``x[:, :-1]`` computed inside the model (``return_loss = True``), Adam
lr 1e-4, 4 micro-batches accumulated per update (each loss divided by ``GRAD_ACCUM_EVERY``),
``clip_grad_norm_(0.5)``, then ``step`` and ``zero_grad``.

Source: https://github.com/lucidrains/minGRU-pytorch
Commit: 38b26e119a2e85e70ea53825dc09b91b021afa06
Files: train.py, minGRU_pytorch/minLM.py, minGRU_pytorch/minGRU.py
License: MIT (Copyright (c) 2024 Phil Wang; full text in LICENSES/lucidrains-minGRU-pytorch.txt)
Domain: language model, recurrent (minGRU, "Were RNNs All We Needed?"), character level

Kept as written: ``minGRU`` (``to_hidden_and_gate``, the sequential branch for one step, the parallel branch:
``log_coeffs = -softplus(gate)``, ``log_z = -softplus(-gate)``, ``log_g``, ``heinsen_associative_scan_log``, the
output projection when ``expansion_factor != 1``), ``minLM`` (every branch; ``enable_conv`` and ``dropout`` at the
script's defaults, off; ``use_lstm = False`` so ``minLSTM`` is not built and not copied), train.py's
``TextSamplerDataset``, ``cycle``, the optimizer, and the loop body (train mode, the accumulation loop, clip, step,
zero_grad) and the validation step.

Deviations from the original:
- sizes for 2 CPU cores: dim 512 -> 64, depth 6 -> 2, SEQ_LEN 512 -> 64 (BATCH_SIZE 4, GRAD_ACCUM_EVERY 4 and the
  clipping at 0.5 unchanged); LEARNING_RATE 1e-4 -> 3e-3 so that the 30 steps of the self-check show the loss falling
  (the original runs 1e5 batches);
- data: enwik8 (``data/enwik8.gz``) is replaced by a synthetic byte stream made from ``seed``: lower-case words of 3-6
  letters from a lexicon of 24, each followed by a space (the next byte is predictable inside a word); 12,000 bytes
  split 10,000 / 2,000 for training and validation as the original splits 90e6 / 5e6; ``__getitem__``'s
  ``torch.randint`` draws from the global RNG seeded by ``build``; ``.cuda()`` calls dropped (CPU);
- one ``train_step`` is one iteration of the training loop; ``eval_fn`` is the validation step on a given batch; the
  tqdm progress bar, printing, and the generation every 500 batches (``base_decoding``, top-k, gumbel sampling) are
  left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP028

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import Identity, Linear, Module, ModuleList, RMSNorm
from torch.optim import Adam
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# constants

BATCH_SIZE = 4
GRAD_ACCUM_EVERY = 4
LEARNING_RATE = 3e-3  # (port) 1e-4
SEQ_LEN = 64  # (port) 512


# ---- minGRU_pytorch/minGRU.py -----------------------------------------------------------------------------------
# https://arxiv.org/abs/2410.01201v1

def exists(v):
    return v is not None

def default(v, d):
    return v if exists(v) else d

# appendix B
# https://github.com/glassroom/heinsen_sequence

def heinsen_associative_scan_log(log_coeffs, log_values, bug = None):
    dim = 2 if bug == "scan_over_features" else 1
    a_star = log_coeffs.cumsum(dim = dim)
    log_h0_plus_b_star = (log_values - a_star).logcumsumexp(dim = dim)
    log_h = a_star + log_h0_plus_b_star
    return log_h.exp()

# appendix B.3

def g(x):
    return torch.where(x >= 0, x + 0.5, x.sigmoid())

def log_g(x):
    return torch.where(x >= 0, (F.relu(x) + 0.5).log(), -F.softplus(-x))

# log-space version of minGRU - B.3.1
# they enforce the hidden states to be positive

class minGRU(Module):
    def __init__(self, dim, expansion_factor = 1., proj_out = None, bug = None):
        super().__init__()
        self.bug = bug

        dim_inner = int(dim * expansion_factor)
        proj_out = default(proj_out, expansion_factor != 1.)

        self.to_hidden_and_gate = Linear(dim, dim_inner * 2, bias = False)
        self.to_out = Linear(dim_inner, dim, bias = False) if proj_out else Identity()

    def forward(self, x, prev_hidden = None, return_next_prev_hidden = False):
        seq_len = x.shape[1]
        hidden, gate = self.to_hidden_and_gate(x).chunk(2, dim = -1)

        if seq_len == 1:
            # handle sequential

            hidden = g(hidden)
            gate = gate.sigmoid()
            out = torch.lerp(prev_hidden, hidden, gate) if exists(prev_hidden) else (hidden * gate)
        else:
            # parallel

            log_coeffs = -F.softplus(gate)

            log_z = -F.softplus(-gate)
            log_tilde_h = log_g(hidden)
            log_values = log_z + log_tilde_h

            if exists(prev_hidden):
                log_values = torch.cat((prev_hidden.log(), log_values), dim = 1)
                log_coeffs = F.pad(log_coeffs, (0, 0, 1, 0))

            out = heinsen_associative_scan_log(log_coeffs, log_values, bug = self.bug)
            out = out[:, -seq_len:]

        next_prev_hidden = out[:, -1:]

        out = self.to_out(out)

        if not return_next_prev_hidden:
            return out

        return out, next_prev_hidden


# ---- minGRU_pytorch/minLM.py ------------------------------------------------------------------------------------

def FeedForward(dim, mult = 4):
    dim_inner = int(dim * mult)
    return nn.Sequential(
        nn.Linear(dim, dim_inner),
        nn.GELU(),
        nn.Linear(dim_inner, dim)
    )

# conv

class CausalDepthWiseConv1d(Module):
    def __init__(self, dim, kernel_size):
        super().__init__()
        self.kernel_size = kernel_size
        self.net = nn.Sequential(
            nn.Conv1d(dim, dim, kernel_size = kernel_size, groups = dim),
            nn.Conv1d(dim, dim, kernel_size = 1)
        )
    def forward(self, x):
        x = x.transpose(1, 2) # b n d -> b d n
        x = F.pad(x, (self.kernel_size - 1, 0), value = 0.)
        x = self.net(x)
        return x.transpose(1, 2) # b d n -> b n d

# main class

class minLM(Module):
    def __init__(
        self,
        *,
        num_tokens,
        dim,
        depth,
        ff_mult = 4,
        expansion = 1.5,
        conv_kernel_size = 3,
        use_lstm = False,
        enable_conv = False,
        dropout = 0.,
        bug = None
    ):
        super().__init__()
        self.bug = bug
        self.token_emb = nn.Embedding(num_tokens, dim)

        self.layers = ModuleList([])

        assert not use_lstm  # (port) minLSTM is not copied
        min_rnn_klass = functools.partial(minGRU, bug = bug)

        for _ in range(depth):
            self.layers.append(ModuleList([
                CausalDepthWiseConv1d(dim, conv_kernel_size) if enable_conv else None,
                RMSNorm(dim),
                min_rnn_klass(dim, expansion_factor = expansion),
                RMSNorm(dim),
                FeedForward(dim, mult = ff_mult),
                nn.Dropout(dropout) if dropout > 0. else None
            ]))

        self.norm = RMSNorm(dim)
        self.to_logits = nn.Linear(dim, num_tokens, bias = False)

        self.can_cache = not enable_conv

    def forward(
        self,
        x,
        return_loss = False,
        return_prev_hiddens = False,
        prev_hiddens = None
    ):

        if return_loss:
            if self.bug == "labels_not_shifted":
                x, labels = x[:, :-1], x[:, :-1]
            else:
                x, labels = x[:, :-1], x[:, 1:]

        x = self.token_emb(x)

        # handle previous hiddens, for recurrent decoding

        if exists(prev_hiddens):
            x = x[:, -1:]

        next_prev_hiddens = []
        prev_hiddens = iter(default(prev_hiddens, []))

        for conv, norm, mingru, ff_norm, ff, dropout in self.layers:

            # conv

            if exists(conv):
                assert len(list(prev_hiddens)) == 0, 'caching not supported for conv version'
                x = conv(x) + x

            # min gru

            prev_hidden = next(prev_hiddens, None)

            min_gru_out, next_prev_hidden = mingru(
                norm(x),
                prev_hidden,
                return_next_prev_hidden = True
            )

            x = min_gru_out + x
            next_prev_hiddens.append(next_prev_hidden)

            # feedforward

            x = ff(ff_norm(x)) + x

            # dropout

            if exists(dropout):
                x = dropout(x)

        embed = self.norm(x)
        logits = self.to_logits(embed)

        if not return_loss:
            if not return_prev_hiddens:
                return logits

            return logits, next_prev_hiddens

        loss = F.cross_entropy(
            logits.transpose(1, 2),
            labels
        )

        return loss


# ---- train.py ---------------------------------------------------------------------------------------------------

def cycle(loader):
    while True:
        for data in loader:
            yield data

class TextSamplerDataset(Dataset):
    def __init__(self, data, seq_len):
        super().__init__()
        self.data = data
        self.seq_len = seq_len

    def __len__(self):
        return self.data.size(0) // self.seq_len

    def __getitem__(self, index):
        rand_start = torch.randint(0, self.data.size(0) - self.seq_len, (1,))
        full_seq = self.data[rand_start : rand_start + self.seq_len + 1].long()
        return full_seq


def make_bytes(gen, n):
    """(port) Lower-case words (3-6 letters) drawn from a lexicon of 24, each followed by a space."""
    lexicon = [torch.randint(97, 123, (int(torch.randint(3, 7, (1,), generator=gen)),), generator=gen).tolist()
               for _ in range(24)]
    out = []
    while len(out) < n:
        out.extend(lexicon[int(torch.randint(len(lexicon), (1,), generator=gen))] + [32])
    return torch.tensor(out[:n], dtype=torch.uint8)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)

    # the min{GRU|LSTM} char language model

    model = minLM(
        num_tokens = 256,
        dim = 64,  # (port) 512
        depth = 2,  # (port) 6
        use_lstm = False, # set to True for minLSTM
        bug = bug,
    )

    # prepare enwik8 data (synthetic, see the module docstring)

    data = make_bytes(gen, 12000)
    data_train, data_val = data[:10000], data[10000:]

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    val_dataset = TextSamplerDataset(data_val, SEQ_LEN)
    train_data_loader = DataLoader(train_dataset, batch_size = BATCH_SIZE)
    val_loader = DataLoader(val_dataset, batch_size = BATCH_SIZE)

    # optimizer

    optim = Adam(model.parameters(), lr = LEARNING_RATE)

    train_loader = cycle(train_data_loader)
    val_loader = cycle(val_loader)

    first = torch.stack([train_dataset[i] for i in range(BATCH_SIZE)])

    def train_step():
        model.train()

        for _ in range(GRAD_ACCUM_EVERY):
            data = next(train_loader)

            loss = model(data, return_loss = True)

            (loss / GRAD_ACCUM_EVERY).backward()

            if bug == "zero_grad_every_micro_batch":
                optim.zero_grad()

        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)

        optim.step()
        optim.zero_grad()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            valid_data = batch[0]

            loss = model(valid_data, return_loss = True)
        return float(loss)

    return Program(name="mingru_lm", model=model, batch=(first,), loss_fn=lambda loss, _targets: loss,
                   optimizer=optim, train_step=train_step, eval_fn=eval_fn, loader=train_data_loader)


build = functools.partial(_build)

BUGS = [
    # inputs and labels sliced alike (classic: x[:, :-1] for x[:, 1:]): the model is taught to copy the byte it reads.
    Bug("labels_not_shifted", functools.partial(_build, bug="labels_not_shifted"), "learning_ledger", ("TASK",)),
    # the associative scan run along the feature axis instead of the sequence axis (classic dim slip): no hidden
    # state carries anything from earlier bytes, so each prediction sees the current byte only.
    Bug("scan_over_features", functools.partial(_build, bug="scan_over_features"), "learning_ledger",
        ("DEPENDENCY",)),
    # optim.zero_grad() inside the accumulation loop after each backward (classic): every micro-batch's gradient is
    # erased, the last one's too, so optimizer.step applies none. Kind re-declared in review (2026-12-07): that is
    # step.zero_grad_before_step (gradients cleared between the backward and the step), not a discarded part.
    Bug("zero_grad_every_micro_batch", functools.partial(_build, bug="zero_grad_every_micro_batch"), "step_probe",
        (), kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
