# ruff: noqa: C408, RUF028
"""Two-layer GCN for transductive node classification (Planetoid split: loss on the training nodes only), the
repository's ``examples/gcn.py`` with the PyG pieces it uses (``GCNConv``, ``gcn_norm``, ``add_remaining_self_loops``,
``scatter``, the glorot ``Linear``, ``NormalizeFeatures``) written out in plain torch.

Source: https://github.com/pyg-team/pytorch_geometric
Commit: 5c6461b2305ad068a6d61165b3c55852a11aaa41
Files: examples/gcn.py, torch_geometric/nn/conv/gcn_conv.py, torch_geometric/nn/conv/message_passing.py (the
propagate path of a sum aggregation), torch_geometric/nn/dense/linear.py, torch_geometric/nn/inits.py,
torch_geometric/utils/loop.py, torch_geometric/transforms/normalize_features.py
License: MIT (Copyright (c) 2023 PyG Team; full text in LICENSES/pyg-team-pytorch_geometric.txt)
Domain: GNN (sparse message passing, semi-supervised node classification)

Kept as written: the ``GCN`` module (dropout 0.5 with ``training=self.training``, ``GCNConv`` -> relu -> dropout ->
``GCNConv``), the defaults (hidden_channels 16, lr 0.01, 200 epochs), the optimizer (Adam with two parameter groups:
weight decay 5e-4 on ``conv1`` only), ``train()`` (model.train(), zero_grad, forward on ``data.x, data.edge_index,
data.edge_attr``, cross-entropy on ``train_mask``, backward, step) and ``test()`` (eval mode, argmax, accuracy per
mask); ``GCNConv``'s on-the-fly symmetric normalization with remaining self-loops, its ``lin`` (no bias, glorot)
and separate zero-initialized ``bias``, the ``x_j * edge_weight`` message summed at the target nodes.

Deviations from the original:
- torch_geometric is not installed here: ``GCNConv`` and the utilities on its path are written out for the case
  the example runs (``edge_index`` a plain ``[2, E]`` tensor, flow ``source_to_target``, no caching, no
  ``SparseTensor`` / torch.sparse branches; ``MessagePassing.propagate`` becomes index_select + ``index_add_``);
- data: Cora (``Planetoid`` download) is replaced by a synthetic citation graph made from ``seed``: 200 nodes,
  60 binary bag-of-words features, 4 classes, class-specific topic words (p 0.3, others 0.03; every node has at
  least one of its class's words), undirected edges mostly inside a class (p 0.05 inside, 0.003 across); the
  Planetoid public split is scaled: 10 training nodes per class, 60 validation and 100 test nodes;
  ``T.NormalizeFeatures()`` is applied as written;
- ``--use_gdc`` (off by default), wandb logging and timing are left out; ``train_step`` is ``train()`` (one epoch);
  ``eval_fn`` is ``test()``'s body on the given model and batch, returning the validation accuracy;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program


class args:  # argparse defaults of examples/gcn.py
    dataset = 'Cora'
    hidden_channels = 16
    lr = 0.01
    epochs = 200
    use_gdc = False
    wandb = False


N_NODES, N_FEAT, N_CLASS = 200, 60, 4


# ---- torch_geometric (the pieces examples/gcn.py reaches, written out) ------------------------------------------

def glorot(value):
    stdv = math.sqrt(6.0 / (value.size(-2) + value.size(-1)))
    value.data.uniform_(-stdv, stdv)


def zeros(value):
    if value is not None:
        value.data.fill_(0)


class Linear(torch.nn.Module):
    """torch_geometric.nn.dense.linear.Linear with weight_initializer='glorot' (bias=False as GCNConv uses it)."""

    def __init__(self, in_channels, out_channels, bias=True, weight_initializer=None):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.weight_initializer = weight_initializer
        self.weight = Parameter(torch.empty(out_channels, in_channels))
        if bias:
            self.bias = Parameter(torch.empty(out_channels))
        else:
            self.register_parameter('bias', None)
        self.reset_parameters()

    def reset_parameters(self):
        glorot(self.weight)
        zeros(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)


def scatter(src, index, dim=0, dim_size=None, reduce='sum'):
    assert reduce == 'sum' and dim == 0
    out = src.new_zeros((dim_size, *src.shape[1:]))
    return out.index_add_(0, index, src)


def add_remaining_self_loops(edge_index, edge_attr=None, fill_value=None, num_nodes=None):
    N = num_nodes
    mask = edge_index[0] != edge_index[1]

    device = edge_index.device
    loop_index = torch.arange(0, N, device=device).view(1, -1).repeat(2, 1)

    if edge_attr is not None:
        loop_attr = edge_attr.new_full((N, ) + edge_attr.size()[1:], fill_value)
        inv_mask = ~mask
        loop_attr[edge_index[0][inv_mask]] = edge_attr[inv_mask]

        edge_attr = torch.cat([edge_attr[mask], loop_attr], dim=0)

    edge_index = edge_index[:, mask]
    edge_index = torch.cat([edge_index, loop_index], dim=1)

    return edge_index, edge_attr


def gcn_norm(edge_index, edge_weight=None, num_nodes=None, improved=False, add_self_loops=True,
             flow="source_to_target", dtype=None):
    fill_value = 2. if improved else 1.

    assert flow in ['source_to_target', 'target_to_source']

    if add_self_loops:
        edge_index, edge_weight = add_remaining_self_loops(
            edge_index, edge_weight, fill_value, num_nodes)

    if edge_weight is None:
        edge_weight = torch.ones((edge_index.size(1), ), dtype=dtype,
                                 device=edge_index.device)

    row, col = edge_index[0], edge_index[1]
    idx = col if flow == 'source_to_target' else row
    deg = scatter(edge_weight, idx, dim=0, dim_size=num_nodes, reduce='sum')
    deg_inv_sqrt = deg.pow_(-0.5)
    deg_inv_sqrt.masked_fill_(deg_inv_sqrt == float('inf'), 0)
    edge_weight = deg_inv_sqrt[row] * edge_weight * deg_inv_sqrt[col]

    return edge_index, edge_weight


class GCNConv(torch.nn.Module):
    """GCNConv(MessagePassing, aggr='add'): x' = D^-1/2 (A + I) D^-1/2 X Theta + b."""

    def __init__(self, in_channels, out_channels, improved=False, cached=False, add_self_loops=None,
                 normalize=True, bias=True, **kwargs):
        super().__init__()
        self.aggr = kwargs.get('aggr', 'add')
        self.flow = 'source_to_target'
        self.node_dim = -2

        if add_self_loops is None:
            add_self_loops = normalize

        if add_self_loops and not normalize:
            raise ValueError(f"'{self.__class__.__name__}' does not support "
                             f"adding self-loops to the graph when no "
                             f"on-the-fly normalization is applied")

        self.in_channels = in_channels
        self.out_channels = out_channels
        self.improved = improved
        self.cached = cached
        self.add_self_loops = add_self_loops
        self.normalize = normalize

        self._cached_edge_index = None

        self.lin = Linear(in_channels, out_channels, bias=False,
                          weight_initializer='glorot')

        if bias:
            self.bias = Parameter(torch.empty(out_channels))
        else:
            self.register_parameter('bias', None)

        self.reset_parameters()

    def reset_parameters(self):
        self.lin.reset_parameters()
        zeros(self.bias)
        self._cached_edge_index = None

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        if self.normalize:
            cache = self._cached_edge_index
            if cache is None:
                edge_index, edge_weight = gcn_norm(  # yapf: disable
                    edge_index, edge_weight, x.size(self.node_dim),
                    self.improved, self.add_self_loops, self.flow, x.dtype)
                if self.cached:
                    self._cached_edge_index = (edge_index, edge_weight)
            else:
                edge_index, edge_weight = cache[0], cache[1]

        x = self.lin(x)

        # propagate_type: (x: Tensor, edge_weight: OptTensor)
        out = self.propagate(edge_index, x=x, edge_weight=edge_weight)

        if self.bias is not None:
            out = out + self.bias

        return out

    def propagate(self, edge_index, x, edge_weight):
        # MessagePassing.propagate for flow source_to_target: x_j = x[edge_index[0]], summed at edge_index[1]
        x_j = x.index_select(self.node_dim, edge_index[0])
        msg = self.message(x_j, edge_weight)
        return scatter(msg, edge_index[1], dim=0, dim_size=x.size(self.node_dim), reduce='sum')

    def message(self, x_j: Tensor, edge_weight: Tensor | None) -> Tensor:
        return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j


class NormalizeFeatures:
    """Row-normalizes the attributes given in :obj:`attrs` to sum-up to one."""

    def __call__(self, data):
        value = data.x
        if value.numel() > 0:
            value = value - value.min()
            value.div_(value.sum(dim=-1, keepdim=True).clamp_(min=1.))
            data.x = value
        return data


# ---- synthetic Cora (replaces Planetoid) ------------------------------------------------------------------------

class Data:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


def make_citation_graph(seed):
    gen = torch.Generator().manual_seed(seed)
    y = torch.arange(N_NODES) % N_CLASS
    y = y[torch.randperm(N_NODES, generator=gen)]
    topic = torch.arange(N_FEAT) % N_CLASS  # each word belongs to one class's topic
    p = torch.where(topic[None, :] == y[:, None], 0.3, 0.03)
    x = (torch.rand(N_NODES, N_FEAT, generator=gen) < p).float()
    own = torch.stack([torch.nonzero(topic == c).flatten() for c in range(N_CLASS)])
    pick = own[y, torch.randint(0, own.shape[1], (N_NODES,), generator=gen)]
    x[torch.arange(N_NODES), pick] = 1.0
    same = y[:, None] == y[None, :]
    a = torch.rand(N_NODES, N_NODES, generator=gen) < torch.where(same, 0.05, 0.003)
    a = torch.triu(a, diagonal=1)
    a = a | a.t()
    edge_index = torch.nonzero(a).t().contiguous()
    train_mask = torch.zeros(N_NODES, dtype=torch.bool)
    for c in range(N_CLASS):
        train_mask[torch.nonzero(y == c).flatten()[:10]] = True
    rest = torch.nonzero(~train_mask).flatten()
    val_mask = torch.zeros(N_NODES, dtype=torch.bool)
    val_mask[rest[:60]] = True
    test_mask = torch.zeros(N_NODES, dtype=torch.bool)
    test_mask[rest[60:160]] = True
    return Data(x=x, edge_index=edge_index, edge_attr=None, y=y, train_mask=train_mask, val_mask=val_mask,
                test_mask=test_mask, num_features=N_FEAT, num_classes=N_CLASS)


# ---- examples/gcn.py ----------------------------------------------------------------------------------------------

class GCN(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, bug=None):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden_channels,
                             normalize=not args.use_gdc)
        self.conv2 = GCNConv(hidden_channels, out_channels,
                             normalize=not args.use_gdc)
        self.bug = bug

    def forward(self, x, edge_index, edge_weight=None):
        if self.bug == "dropout_without_training_flag":
            # F.dropout's default training=True: dropout stays on in model.eval()
            x = F.dropout(x, p=0.5)
            x = self.conv1(x, edge_index, edge_weight).relu()
            x = F.dropout(x, p=0.5)
            x = self.conv2(x, edge_index, edge_weight)
            return x
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.conv1(x, edge_index, edge_weight).relu()
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.conv2(x, edge_index, edge_weight)
        return x


def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = torch.device('cpu')

    dataset = make_citation_graph(seed)
    data = NormalizeFeatures()(dataset)

    model = GCN(
        in_channels=dataset.num_features,
        hidden_channels=args.hidden_channels,
        out_channels=dataset.num_classes,
        bug=bug,
    ).to(device)

    if bug == "conv2_group_dropped":
        optimizer = torch.optim.Adam([
            dict(params=model.conv1.parameters(), weight_decay=5e-4),
        ], lr=args.lr)  # the second group (conv2, no weight decay) left out of the list
    else:
        optimizer = torch.optim.Adam([
            dict(params=model.conv1.parameters(), weight_decay=5e-4),
            dict(params=model.conv2.parameters(), weight_decay=0)
        ], lr=args.lr)  # Only perform weight-decay on first convolution.

    def train():
        model.train()
        optimizer.zero_grad()
        out = model(data.x, data.edge_index, data.edge_attr)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    @torch.no_grad()
    def test():
        model.eval()
        pred = model(data.x, data.edge_index, data.edge_attr).argmax(dim=-1)

        accs = []
        for mask in [data.train_mask, data.val_mask, data.test_mask]:
            accs.append(int((pred[mask] == data.y[mask]).sum()) / int(mask.sum()))
        return accs

    def eval_fn(model, batch):
        # test()'s body on the given model and batch; its validation accuracy
        inputs, y = batch
        with torch.no_grad():
            model.eval()
            pred = model(**inputs).argmax(dim=-1)
        return int((pred[data.val_mask] == y[data.val_mask]).sum()) / int(data.val_mask.sum())

    loss_fn = lambda out, y: F.cross_entropy(out[data.train_mask], y[data.train_mask])
    batch = ({"x": data.x, "edge_index": data.edge_index}, data.y)
    return Program(name="pyg_gcn", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the per-layer parameter-group list loses its second entry (classic): conv2 is never updated.
    # first contact declared conv2.lin.weight; the dropped group holds conv2's weight and bias, and its bias is named
    # first (reviewed after first contact: the finding names this bug's mechanism)
    Bug("conv2_group_dropped", functools.partial(_build, bug="conv2_group_dropped"), "four_structures",
        ("conv2.",), kind="optimizer.missing_parameter"),
    # F.dropout called without ``training=self.training`` (classic functional-dropout slip): test() evaluates with
    # dropout on.
    Bug("dropout_without_training_flag", functools.partial(_build, bug="dropout_without_training_flag"), "six_claims",
        ("EVALUATION",)),
]
