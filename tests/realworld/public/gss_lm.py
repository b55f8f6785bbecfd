"""Gated State Spaces language model (GSS, "Pseudocode 3.2": a GELU-gated unit whose gate comes from a diagonal
state-space (DSS) layer, the DSS kernel ``K = Re(C * (exp(Lambda) - 1) / Lambda @ exp(Lambda * l))`` applied as a
causal long convolution through an FFT zero-padded to twice the length, plus a learned residual ``D``) trained as a
byte-level causal language model by the repository's enwik8 script: ``AutoregressiveWrapper`` (inputs ``x[:, :-1]``,
labels ``x[:, 1:]``, cross-entropy inside the model), Adam lr 2e-4, 4 micro-batches accumulated per update (the loss
summed, not divided, as written), ``clip_grad_norm_(0.5)``.

Source: https://github.com/lucidrains/gated-state-spaces-pytorch
Commit: d484cf5a17382e50749d561a401f727234e10a06
Files: train.py, gated_state_spaces_pytorch/gss.py, gated_state_spaces_pytorch/autoregressive_wrapper.py
License: MIT (Copyright (c) 2022 Phil Wang)
Domain: causal language model (state-space sequence model, byte level)

Deviations from the original:
- sizes: dim 512 -> 32, depth 8 -> 2, dss_kernel_N 512 -> 32, dss_kernel_H 256 -> 32 (dim_expansion_factor 4
  kept), SEQ_LEN 4096 -> 64 (BATCH_SIZE 4, GRADIENT_ACCUMULATE_EVERY 4, lr and clipping unchanged);
- einops is not available: the ``rearrange`` calls are written out as unsqueeze/transpose in plain torch;
- ``.cuda()`` calls dropped (CPU);
- data: enwik8 is replaced by a synthetic byte stream made from ``seed`` (lower-case "words" of 3-6 bytes, each
  repeated 3-6 times, so a byte is predictable from the bytes before it); the dataset class is unchanged;
- one ``train_step`` is one iteration of the training loop (4 micro-batches, clip, step, zero_grad); the validation
  (``eval_fn``) is the script's validation on a given batch; printing and generation (``generate``) are left out.
"""
# ruff: noqa: UP028  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import einsum, nn
from torch.fft import irfft, rfft
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

BATCH_SIZE = 4
GRADIENT_ACCUMULATE_EVERY = 4
LEARNING_RATE = 2e-4
SEQ_LEN = 64
SELF_CHECK_STEPS = 40


def exists(val):
    return val is not None


# ---- gated_state_spaces_pytorch/gss.py --------------------------------------------------------------------------

class DSS(nn.Module):
    def __init__(
        self,
        *,
        dim,
        kernel_N = 512,
        dss_kernel_lambda_imag_exp = True,
        bug = None
    ):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.bug = bug

        # Lambda

        self.Lambda_real = nn.Parameter(torch.randn(kernel_N))
        self.Lambda_imag = nn.Parameter(torch.randn(kernel_N))

        # C

        self.C_real = nn.Parameter(torch.randn(dim, kernel_N))
        self.C_imag = nn.Parameter(torch.randn(dim, kernel_N))

        # params D

        self.param_D = nn.Parameter(torch.randn(dim))

        # whether to exponentiate lambda imag @albertfgu says it is not accurate to s4 original designs (but it is present in the pseudocode)

        self.dss_kernel_lambda_imag_exp = dss_kernel_lambda_imag_exp

    def forward(self, x):
        """
        einstein notation:
        b - batch
        l - sequence length
        d - dimension
        """

        device, seq_len = x.device, x.shape[1]
        u = self.norm(x)

        # learned weighted residual

        residual = u * self.param_D

        # derive simple dss kernel

        Lambda_imag = self.Lambda_imag.exp() if self.dss_kernel_lambda_imag_exp else self.Lambda_imag

        Lambda = -self.Lambda_real.exp() + 1j * Lambda_imag
        C = self.C_real + 1j * self.C_imag

        arange = torch.arange(seq_len, device = device)

        S = (Lambda.unsqueeze(1) * arange.unsqueeze(0)).exp()  # rearrange: 'n -> n 1', 'l -> 1 l'
        C = C * (Lambda.exp() - 1) / Lambda

        K = einsum('h n, n l -> l h', C, S).real

        # conv1d fft O(nlog(n))

        if self.bug == "fft_not_padded":
            # the FFT taken at the sequence's own length: the product is a circular convolution, so the kernel's
            # tail wraps round and every position also mixes in the positions after it
            u_f = rfft(u, n = seq_len, dim = -2)
            K_f = rfft(K, n = seq_len, dim = -2)
            y = irfft(u_f * K_f, seq_len, dim = -2)[..., :seq_len, :]
        else:
            u_f = rfft(u, n = seq_len * 2, dim = -2)
            K_f = rfft(K, n = seq_len * 2, dim = -2)

            y = irfft(u_f * K_f, seq_len * 2, dim = -2)[..., :seq_len, :]

        return y + residual


class GSS(nn.Module):
    """ Pseudocode 3.2 """

    def __init__(
        self,
        *,
        dim,
        dim_expansion_factor = 4,
        dss_kernel_N = 512,
        dss_kernel_H = 256,
        reverse_seq = False,
        dss_kernel_lambda_imag_exp = True,
        bug = None
    ):
        super().__init__()
        self.reverse_seq = reverse_seq
        self.norm = nn.LayerNorm(dim)

        dim_hidden = int(dim_expansion_factor * dim)
        self.to_u = nn.Sequential(nn.Linear(dim, dim_hidden, bias = False), nn.GELU())
        self.to_v = nn.Sequential(nn.Linear(dim, dss_kernel_H, bias = False), nn.GELU())

        self.dss = DSS(dim = dss_kernel_H, kernel_N = dss_kernel_N,
                       dss_kernel_lambda_imag_exp = dss_kernel_lambda_imag_exp, bug = bug)

        self.to_gate = nn.Linear(dss_kernel_H, dim_hidden, bias = False)
        self.to_out = nn.Linear(dim_hidden, dim)

    def forward(self, x):
        if self.reverse_seq:
            x = torch.flip(x, dims = (1,))

        residual, x = x.clone(), self.norm(x)

        u = self.to_u(x)
        v = self.to_v(x)

        v = self.dss(v)

        uc = self.to_gate(v)
        out = self.to_out(uc * u)

        out = out + residual

        if self.reverse_seq:
            out = torch.flip(out, dims = (1,))

        return out


# Gated State Spaces LM

class GatedStateSpacesLM(nn.Module):
    def __init__(
        self,
        *,
        num_tokens,
        dim,
        depth,
        dim_expansion_factor = 4,
        dss_kernel_N = 512,
        dss_kernel_H = 256,
        dss_kernel_lambda_imag_exp = True,
        bug = None
    ):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)

        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(
                GSS(
                    dim = dim,
                    dss_kernel_H = dss_kernel_H,
                    dss_kernel_N = dss_kernel_N,
                    dim_expansion_factor = dim_expansion_factor,
                    dss_kernel_lambda_imag_exp = dss_kernel_lambda_imag_exp,
                    bug = bug
                )
            )

        self.to_logits = nn.Linear(dim, num_tokens, bias = False)

    def forward(self, x, labels = None):
        x = self.token_emb(x)

        for gss in self.layers:
            x = gss(x)

        logits = self.to_logits(x)

        if not exists(labels):
            return logits

        logits = logits.transpose(1, 2)  # rearrange(logits, 'b n c -> b c n')
        return F.cross_entropy(logits, labels)


# ---- gated_state_spaces_pytorch/autoregressive_wrapper.py (training path) -----------------------------------------

class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, pad_value=0, max_seq_len=4096, bug=None):
        super().__init__()
        self.max_seq_len = max_seq_len
        self.pad_value = pad_value
        self.net = net
        self.bug = bug

    def forward(self, x, **kwargs):
        if self.bug == "labels_not_shifted":
            inp, labels = x[:, :-1], x[:, :-1]
        else:
            inp, labels = x[:, :-1], x[:, 1:]
        return self.net(inp, labels = labels, **kwargs)


# ---- train.py ------------------------------------------------------------------------------------------------------

def cycle(loader):
    while True:
        for data in loader:
            yield data


class TextSamplerDataset(Dataset):
    def __init__(self, data, seq_len):
        super().__init__()
        self.data = data
        self.seq_len = seq_len

    def __getitem__(self, index):
        rand_start = torch.randint(0, self.data.size(0) - self.seq_len, (1,))
        full_seq = self.data[rand_start : rand_start + self.seq_len + 1].long()
        return full_seq

    def __len__(self):
        return self.data.size(0) // self.seq_len


def make_bytes(gen, n):
    """Lower-case words of 3-6 bytes, each repeated 3-6 times: after a word's first occurrence its bytes repeat."""
    out = []
    while len(out) < n:
        word = torch.randint(97, 123, (int(torch.randint(3, 7, (1,), generator=gen)),), generator=gen).tolist()
        out.extend((word + [32]) * int(torch.randint(3, 7, (1,), generator=gen)))
    return torch.tensor(out[:n], dtype=torch.uint8)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    X = make_bytes(gen, 12000)
    trX, vaX = X[:10000], X[10000:]
    data_train, data_val = trX, vaX

    # instantiate GPT-like decoder model

    model = GatedStateSpacesLM(
        num_tokens = 256,
        dim = 32,
        depth = 2,
        dss_kernel_N = 32,
        dss_kernel_H = 32,
        bug = bug
    )

    model = AutoregressiveWrapper(model, bug = bug)

    train_dataset = TextSamplerDataset(data_train, SEQ_LEN)
    val_dataset = TextSamplerDataset(data_val, SEQ_LEN)
    train_data_loader = DataLoader(train_dataset, batch_size=BATCH_SIZE)
    train_loader = cycle(train_data_loader)

    # optimizer

    optim = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    def train_step():
        model.train()

        for __ in range(GRADIENT_ACCUMULATE_EVERY):
            loss = model(next(train_loader))
            loss.backward()

        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        if bug != "zero_grad_dropped":
            optim.zero_grad()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            loss = model(batch[0])
        return float(loss)

    first = torch.stack([val_dataset[i] for i in range(BATCH_SIZE)])
    return Program(name="gss_lm", model=model, batch=(first,), loss_fn=lambda loss, _targets: loss, optimizer=optim,
                   train_step=train_step, eval_fn=eval_fn, loader=train_data_loader)


build = functools.partial(_build)

BUGS = [
    # labels taken from the same positions as the inputs (the shift dropped): the model learns to copy its input.
    Bug("labels_not_shifted", functools.partial(_build, bug="labels_not_shifted"), "learning_ledger", ("TASK",)),
    # rfft / irfft at n = seq_len instead of 2 * seq_len: the long convolution becomes circular and each position
    # reads the bytes after it, among them the one it predicts.
    Bug("fft_not_padded", functools.partial(_build, bug="fft_not_padded"), "learning_ledger", ("DEPENDENCY",)),
    # optim.zero_grad() dropped after the step: gradients accumulate across updates.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
