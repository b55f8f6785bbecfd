# ruff: noqa: UP008, PLR1716, PIE808
"""DLRM (bottom MLP, sum-pooled sparse EmbeddingBags, pairwise dot interaction, top MLP ending in a sigmoid) for
click-through-rate prediction, from Facebook Research's reference implementation.

Source: https://github.com/facebookresearch/dlrm, commit 090956ee2319ddd349a42232958aefccfe3f7b0a,
files ``dlrm_s_pytorch.py`` (``DLRM_Net``, ``LRPolicyScheduler``, ``loss_fn_wrap``, ``run``'s training loop),
``dlrm_data_pytorch.py`` (``generate_uniform_input_batch``), ``bench/dlrm_s_criteo_kaggle.sh``.
License: MIT (Copyright (c) Facebook, Inc. and its affiliates; full text in LICENSES/facebookresearch-dlrm.txt).
Domain: recommendation / click-through rate.

Kept as written: ``DLRM_Net.create_mlp`` (numpy Xavier-style init; the top MLP's last layer followed by
``nn.Sigmoid`` as ``run`` passes ``sigmoid_top=ln_top.size - 2``), ``create_emb`` (``nn.EmbeddingBag(mode="sum",
sparse=True)`` with uniform init), ``apply_mlp``, ``apply_emb``, ``interact_features`` (op "dot": ``bmm`` of the
stacked features, the strictly lower triangle, concatenated to the dense output), ``sequential_forward`` (with the
``loss_threshold`` clamp), ``BCELoss(reduction="mean")`` for ``--loss-function=bce``, ``loss_fn_wrap``, the
``num_int`` / ``ln_top`` arithmetic of ``run``, SGD over ``dlrm.parameters()``, ``LRPolicyScheduler`` (no warmup,
no decay: the defaults), and the loop body (forward, loss, ``zero_grad``, ``backward``, ``step``,
``lr_scheduler.step()``); the input format of ``generate_uniform_input_batch`` (dense ``[n, m_den]``, per-table
lists of offsets and indices).

Deviations from the original:
- data: ``generate_uniform_input_batch`` is copied with its ``ra`` a ``numpy.random.RandomState(seed)``; the target
  is not random but a click rule the model can learn (a click when the dense features' sum plus hidden per-index
  scores of the first table's bag is above a threshold). 16 batches of 128 are made at build and cycled
  (``--num-batches`` style).
- sizes: arch-sparse-feature-size 8, embedding sizes 20-15-10, mlp-bot 4-16-8, mlp-top 16-1, num-indices-per-lookup
  3, mini-batch 128, learning rate 0.1 and ``--loss-function=bce`` (the Kaggle script's choices).
- ``DLRM_Net`` keeps only the single-device path: the distributed, data-parallel, QR/mixed-dimension embedding,
  weighted-pooling and quantization branches (all off by default) are left out; ``record_function`` wrappers,
  timing, printing, testing, mlperf logging and checkpointing are dropped. ``np.random.seed(seed)`` replaces
  ``--numpy-rand-seed``.
- ``train_step`` is one iteration of the ``for j, inputBatch in enumerate(train_ld)`` loop (mlperf logging off);
  it returns ``E``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn
from torch.optim.lr_scheduler import _LRScheduler

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program


class LRPolicyScheduler(_LRScheduler):
    def __init__(self, optimizer, num_warmup_steps, decay_start_step, num_decay_steps):
        self.num_warmup_steps = num_warmup_steps
        self.decay_start_step = decay_start_step
        self.decay_end_step = decay_start_step + num_decay_steps
        self.num_decay_steps = num_decay_steps

        if self.decay_start_step < self.num_warmup_steps:
            sys.exit("Learning rate warmup must finish before the decay starts")

        super(LRPolicyScheduler, self).__init__(optimizer)

    def get_lr(self):
        step_count = self._step_count
        if step_count < self.num_warmup_steps:
            # warmup
            scale = 1.0 - (self.num_warmup_steps - step_count) / self.num_warmup_steps
            lr = [base_lr * scale for base_lr in self.base_lrs]
            self.last_lr = lr
        elif self.decay_start_step <= step_count and step_count < self.decay_end_step:
            # decay
            decayed_steps = step_count - self.decay_start_step
            scale = ((self.num_decay_steps - decayed_steps) / self.num_decay_steps) ** 2
            min_lr = 0.0000001
            lr = [max(min_lr, base_lr * scale) for base_lr in self.base_lrs]
            self.last_lr = lr
        else:
            if self.num_decay_steps > 0:
                # freeze at last, either because we're after decay
                # or because we're between warmup and decay
                lr = self.last_lr
            else:
                # do not adjust
                lr = self.base_lrs
        return lr


### define dlrm in PyTorch ###
class DLRM_Net(nn.Module):
    def create_mlp(self, ln, sigmoid_layer):
        # build MLP layer by layer
        layers = nn.ModuleList()
        for i in range(0, ln.size - 1):
            n = ln[i]
            m = ln[i + 1]

            # construct fully connected operator
            LL = nn.Linear(int(n), int(m), bias=True)

            # initialize the weights
            # with torch.no_grad():
            # custom Xavier input, output or two-sided fill
            mean = 0.0  # std_dev = np.sqrt(variance)
            std_dev = np.sqrt(2 / (m + n))  # np.sqrt(1 / m) # np.sqrt(1 / n)
            W = np.random.normal(mean, std_dev, size=(m, n)).astype(np.float32)
            std_dev = np.sqrt(1 / m)  # np.sqrt(2 / (m + 1))
            bt = np.random.normal(mean, std_dev, size=m).astype(np.float32)
            # approach 1
            LL.weight.data = torch.tensor(W, requires_grad=True)
            LL.bias.data = torch.tensor(bt, requires_grad=True)
            layers.append(LL)

            # construct sigmoid or relu operator
            if i == sigmoid_layer:
                layers.append(nn.Sigmoid())
            else:
                layers.append(nn.ReLU())

        # approach 1: use ModuleList
        # return layers
        # approach 2: use Sequential container to wrap all layers
        return torch.nn.Sequential(*layers)

    def create_emb(self, m, ln, weighted_pooling=None):
        emb_l = nn.ModuleList()
        v_W_l = []
        for i in range(0, ln.size):
            n = ln[i]

            # construct embedding operator
            EE = nn.EmbeddingBag(n, m, mode="sum", sparse=True)
            # initialize embeddings
            # nn.init.uniform_(EE.weight, a=-np.sqrt(1 / n), b=np.sqrt(1 / n))
            W = np.random.uniform(
                low=-np.sqrt(1 / n), high=np.sqrt(1 / n), size=(n, m)
            ).astype(np.float32)
            # approach 1
            EE.weight.data = torch.tensor(W, requires_grad=True)
            if weighted_pooling is None:
                v_W_l.append(None)
            else:
                v_W_l.append(torch.ones(n, dtype=torch.float32))
            emb_l.append(EE)
        return emb_l, v_W_l

    def __init__(
        self,
        m_spa=None,
        ln_emb=None,
        ln_bot=None,
        ln_top=None,
        arch_interaction_op=None,
        arch_interaction_itself=False,
        sigmoid_bot=-1,
        sigmoid_top=-1,
        sync_dense_params=True,
        loss_threshold=0.0,
        ndevices=-1,
        weighted_pooling=None,
        loss_function="bce",
    ):
        super(DLRM_Net, self).__init__()

        if (
            (m_spa is not None)
            and (ln_emb is not None)
            and (ln_bot is not None)
            and (ln_top is not None)
            and (arch_interaction_op is not None)
        ):
            # save arguments
            self.ndevices = ndevices
            self.output_d = 0
            self.parallel_model_batch_size = -1
            self.parallel_model_is_not_prepared = True
            self.arch_interaction_op = arch_interaction_op
            self.arch_interaction_itself = arch_interaction_itself
            self.sync_dense_params = sync_dense_params
            self.loss_threshold = loss_threshold
            self.loss_function = loss_function
            self.weighted_pooling = weighted_pooling

            # create operators
            if ndevices <= 1:
                self.emb_l, w_list = self.create_emb(m_spa, ln_emb, weighted_pooling)
                self.v_W_l = w_list
            self.bot_l = self.create_mlp(ln_bot, sigmoid_bot)
            self.top_l = self.create_mlp(ln_top, sigmoid_top)

            # specify the loss function
            if self.loss_function == "mse":
                self.loss_fn = torch.nn.MSELoss(reduction="mean")
            elif self.loss_function == "bce":
                self.loss_fn = torch.nn.BCELoss(reduction="mean")
            elif self.loss_function == "bce_with_logits":  # bug variant: see BUGS
                self.loss_fn = torch.nn.BCEWithLogitsLoss(reduction="mean")
            else:
                sys.exit(
                    "ERROR: --loss-function=" + self.loss_function + " is not supported"
                )

    def apply_mlp(self, x, layers):
        # approach 2: use Sequential container to wrap all layers
        return layers(x)

    def apply_emb(self, lS_o, lS_i, emb_l, v_W_l):
        # WARNING: notice that we are processing the batch at once. We implicitly
        # assume that the data is laid out such that:
        # 1. each embedding is indexed with a group of sparse indices,
        #   corresponding to a single lookup
        # 2. for each embedding the lookups are further organized into a batch
        # 3. for a list of embedding tables there is a list of batched lookups

        ly = []
        for k, sparse_index_group_batch in enumerate(lS_i):
            sparse_offset_group_batch = lS_o[k]

            # embedding lookup
            # We are using EmbeddingBag, which implicitly uses sum operator.
            # The embeddings are represented as tall matrices, with sum
            # happening vertically across 0 axis, resulting in a row vector
            # E = emb_l[k]

            if v_W_l[k] is not None:
                per_sample_weights = v_W_l[k].gather(0, sparse_index_group_batch)
            else:
                per_sample_weights = None

            E = emb_l[k]
            V = E(
                sparse_index_group_batch,
                sparse_offset_group_batch,
                per_sample_weights=per_sample_weights,
            )

            ly.append(V)

        # print(ly)
        return ly

    def interact_features(self, x, ly):
        if self.arch_interaction_op == "dot":
            # concatenate dense and sparse features
            (batch_size, d) = x.shape
            T = torch.cat([x] + ly, dim=1).view((batch_size, -1, d))
            # perform a dot product
            Z = torch.bmm(T, torch.transpose(T, 1, 2))
            # append dense feature with the interactions (into a row vector)
            # approach 2: unique
            _, ni, nj = Z.shape
            # approach 2: custom
            offset = 1 if self.arch_interaction_itself else 0
            li = torch.tensor([i for i in range(ni) for j in range(i + offset)])
            lj = torch.tensor([j for i in range(nj) for j in range(i + offset)])
            Zflat = Z[:, li, lj]
            # concatenate dense features and interactions
            R = torch.cat([x] + [Zflat], dim=1)
        elif self.arch_interaction_op == "cat":
            # concatenation features (into a row vector)
            R = torch.cat([x] + ly, dim=1)
        else:
            sys.exit(
                "ERROR: --arch-interaction-op="
                + self.arch_interaction_op
                + " is not supported"
            )

        return R

    def forward(self, dense_x, lS_o, lS_i):
        # single device run
        return self.sequential_forward(dense_x, lS_o, lS_i)

    def sequential_forward(self, dense_x, lS_o, lS_i):
        # process dense features (using bottom mlp), resulting in a row vector
        x = self.apply_mlp(dense_x, self.bot_l)

        # process sparse features(using embeddings), resulting in a list of row vectors
        ly = self.apply_emb(lS_o, lS_i, self.emb_l, self.v_W_l)

        # interact features (dense and sparse)
        z = self.interact_features(x, ly)

        # obtain probability of a click (using top mlp)
        p = self.apply_mlp(z, self.top_l)

        # clamp output if needed
        if 0.0 < self.loss_threshold and self.loss_threshold < 1.0:
            z = torch.clamp(p, min=self.loss_threshold, max=(1.0 - self.loss_threshold))
        else:
            z = p

        return z


def generate_uniform_input_batch(
    ra,
    m_den,
    ln_emb,
    n,
    num_indices_per_lookup,
    num_indices_per_lookup_fixed,
    length,
):
    # dense feature
    Xt = torch.tensor(ra.rand(n, m_den).astype(np.float32))

    # sparse feature (sparse indices)
    lS_emb_offsets = []
    lS_emb_indices = []
    # for each embedding generate a list of n lookups,
    # where each lookup is composed of multiple sparse indices
    for size in ln_emb:
        lS_batch_offsets = []
        lS_batch_indices = []
        offset = 0
        for _ in range(n):
            # num of sparse indices to be used per embedding (between
            if num_indices_per_lookup_fixed:
                sparse_group_size = np.int64(num_indices_per_lookup)
            else:
                # random between [1,num_indices_per_lookup])
                r = ra.random(1)
                sparse_group_size = np.int64(
                    np.round(max([1.0], r * min(size, num_indices_per_lookup)))
                )
            # sparse indices to be used per embedding
            r = ra.random(sparse_group_size)
            sparse_group = np.unique(np.round(r * (size - 1)).astype(np.int64))
            # reset sparse_group_size in case some index duplicates were removed
            sparse_group_size = np.int32(sparse_group.size)
            # store lengths and indices
            if length:  # for caffe2 version
                lS_batch_offsets += [sparse_group_size]
            else:
                lS_batch_offsets += [offset]
            lS_batch_indices += sparse_group.tolist()
            # update offset for next iteration
            offset += sparse_group_size
        lS_emb_offsets.append(torch.tensor(lS_batch_offsets))
        lS_emb_indices.append(torch.tensor(lS_batch_indices))

    return (Xt, lS_emb_offsets, lS_emb_indices)


def click_rule(Xt, lS_o, lS_i, scores):
    """The learnable target (not in the original, whose random targets carry no rule): a click when the dense
    features' sum plus the first table's bag of hidden index scores is above the middle."""
    bag = nn.functional.embedding_bag(lS_i[0], torch.tensor(scores)[:, None], lS_o[0], mode="sum")[:, 0]
    return ((Xt.sum(1) - Xt.shape[1] / 2.0 + bag) > 0).float().view(-1, 1)


M_SPA, LN_EMB, LN_BOT, MLP_TOP = 8, np.array([20, 15, 10]), np.array([4, 16, 8]), "16-1"
MINI_BATCH, NUM_BATCHES, LR, NUM_INDICES = 128, 16, 0.1, 3


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    ra = np.random.RandomState(seed)
    scores = ra.normal(0, 1.0, size=LN_EMB[0]).astype(np.float32)
    train_ld = []
    for _ in range(NUM_BATCHES):
        X, lS_o, lS_i = generate_uniform_input_batch(ra, LN_BOT[0], LN_EMB, MINI_BATCH, NUM_INDICES, False, False)
        T = click_rule(X, lS_o, lS_i, scores)
        train_ld.append((X, lS_o, lS_i, T))

    m_spa = M_SPA
    ln_emb = LN_EMB
    ln_bot = LN_BOT
    num_fea = ln_emb.size + 1  # num sparse + num dense features
    m_den_out = ln_bot[ln_bot.size - 1]
    num_int = (num_fea * (num_fea - 1)) // 2 + m_den_out
    arch_mlp_top_adjusted = str(num_int) + "-" + MLP_TOP
    ln_top = np.fromstring(arch_mlp_top_adjusted, dtype=int, sep="-")

    dlrm = DLRM_Net(
        m_spa,
        ln_emb,
        ln_bot,
        ln_top,
        arch_interaction_op="dot",
        arch_interaction_itself=False,
        sigmoid_bot=-1,
        sigmoid_top=ln_top.size - 2,
        sync_dense_params=True,
        loss_threshold=0.0,
        ndevices=-1,
        weighted_pooling=None,
        loss_function="bce_with_logits" if bug == "bce_with_logits_on_probabilities" else "bce",
    )

    if bug == "optimizer_without_embeddings":  # classic: the embedding tables left out of the optimizer's groups
        parameters = [
            {"params": dlrm.bot_l.parameters(), "lr": LR},
            {"params": dlrm.top_l.parameters(), "lr": LR},
        ]
    else:
        parameters = dlrm.parameters()
    optimizer = torch.optim.SGD(parameters, lr=LR)
    lr_scheduler = LRPolicyScheduler(optimizer, 0, 0, 0)

    def loss_fn_wrap(Z, T):
        return dlrm.loss_fn(Z, T)

    state = {"j": 0}

    def train_step():
        X, lS_o, lS_i, T = train_ld[state["j"] % len(train_ld)]
        state["j"] += 1

        # forward pass
        Z = dlrm(X, lS_o, lS_i)

        # loss
        E = loss_fn_wrap(Z, T)

        # scaled error gradient propagation
        # (where we do not accumulate gradients across mini-batches)
        optimizer.zero_grad()
        # backward pass
        E.backward()

        # optimizer
        optimizer.step()
        lr_scheduler.step()
        return E.detach()

    X, lS_o, lS_i, T = train_ld[0]
    return Program(name="dlrm_ctr", model=dlrm, batch=((X, lS_o, lS_i), T), loss_fn=loss_fn_wrap,
                   optimizer=optimizer, train_step=train_step, loader=train_ld)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: --loss-function switched to a with-logits BCE while the top MLP still ends in nn.Sigmoid, so the
    # probabilities go through a second sigmoid inside the loss.
    Bug("bce_with_logits_on_probabilities", functools.partial(_build, bug="bce_with_logits_on_probabilities"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: the optimizer's parameter groups list the bottom and top MLPs only (as the distributed branch's
    # groups would without the embedding group); the embedding tables never move.
    Bug("optimizer_without_embeddings", functools.partial(_build, bug="optimizer_without_embeddings"),
        "four_structures", ("emb_l",)),
]
