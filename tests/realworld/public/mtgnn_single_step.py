"""MTGNN (Wu et al., "Connecting the Dots: Multivariate Time Series Forecasting with Graph Neural Networks", KDD
2020) from nnzhan/MTGNN, trained as ``train_single_step.py`` does: a graph learning layer (two node embeddings,
``tanh``/``relu`` of their antisymmetric product, top-k sparsified with a little noise), dilated inception temporal
convolutions (kernels 2, 3, 6, 7) with tanh/sigmoid gating, mix-hop propagation over the learned graph and its
transpose, skip connections, a node-indexed LayerNorm, single-step forecasting of every series ``horizon`` steps
ahead; the summed L1 loss on the outputs and targets rescaled by each series' maximum, ``model.zero_grad()`` per
batch, and the repository's ``Optim`` wrapper (gradient clipping, then Adam with ``weight_decay`` from
``--weight_decay``).

Source: https://github.com/nnzhan/MTGNN
Commit: f811746fa7022ebf336f9ecd2434af5f365ecbf6
Files: ``train_single_step.py`` (``train``, ``evaluate``, ``main``, the argparse defaults), ``net.py`` (``gtnet``),
``layer.py`` (``nconv``, ``linear``, ``mixprop``, ``dilated_inception``, ``graph_constructor``, ``LayerNorm``),
``util.py`` (``DataLoaderS``, ``normal_std``), ``trainer.py`` (``Optim``)
License: MIT (Copyright (c) 2020 Zonghan Wu; full text in LICENSES/nnzhan-MTGNN.txt)
Domain: time series, multivariate forecasting with a learned graph (spatio-temporal GNN, single step)

Kept as written: the classes above (``gtnet`` with ``gcn_true`` and ``buildA_true``, ``layer_norm_affline=False`` as
``main`` passes it), ``DataLoaderS`` (normalization 2: each series divided by its maximum absolute value; windows of
``seq_in_len`` steps, the target ``horizon`` steps after the window's end; ``get_batches`` shuffled with
``torch.randperm``), ``Optim`` (note: ``self.params`` is the ``model.parameters()`` generator, which
``_makeOptimizer`` consumes, so the ``clip_grad_norm_`` in ``Optim.step`` gets an exhausted generator, as written),
``train``'s loop body (``model.zero_grad()``, the input unsqueezed and transposed to ``[B, 1, N, T]``, the node
permutation every ``step_size`` iterations and the ``num_split`` sub-graphs, ``torch.squeeze`` of the output, the
loss on ``output * scale`` and ``ty * scale``, ``loss.backward()``, ``optim.step()``), the criterion
``nn.L1Loss(size_average=False)`` (``--L1Loss`` True), ``evaluate`` (RSE, RAE, correlation on a split).

Deviations from the original:
- the solar-energy csv is not here: the data is a synthetic ``[800, 8]`` array made from ``seed``: every series a
  daily cycle (period 24, its own phase) mixed with the previous series one step earlier, plus noise, positive
  like the solar data; split 0.6 / 0.2 / 0.2 as ``main`` does; ``DataLoaderS`` takes the array instead of a file
  name (the ``open``/``np.loadtxt`` line);
- sizes for 2 CPU cores: num_nodes 137 -> 8, subgraph_size 20 -> 4, node_dim 40 -> 8, seq_in_len 168 -> 24,
  layers 5 -> 2, conv_channels / residual_channels 16 -> 8, skip_channels 32 -> 16, end_channels 64 -> 32,
  horizon 3, batch_size 32, dilation_exponential 2, gcn_depth 2, dropout 0.3, propalpha 0.05, tanhalpha 3, clip 5,
  weight_decay 1e-5, num_split 1, step_size 100 kept; lr 1e-4 -> 1e-3 so that the 30 steps of the self-check show
  learning; ``device`` is the CPU;
- one ``train_step`` is one iteration of ``train``'s loop over ``get_batches`` (a fresh shuffled pass when one
  ends), returning the summed L1 loss of the batch; the epoch loop, the checkpoints, the ten repeated runs and the
  prints are dropped; ``eval_fn`` is ``evaluate``'s RSE on the validation split;
- the Program's batch is the first training batch, as ``train`` shapes it (``[B, 1, N, T]`` inputs, ``[B, N]``
  targets), its ``loss_fn`` the criterion on the squeezed output and the targets, both times the scale;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP004, UP008, UP031, PLR0402, RUF012, PLR1704, B020  (the original's style is kept as written)

from __future__ import annotations

import functools
import math
import numbers
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.autograd import Variable
from torch.nn import init

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


class args:  # (port) train_single_step.py's argparse defaults, sizes as listed in the docstring
    optim = 'adam'
    L1Loss = True
    normalize = 2
    gcn_true = True
    buildA_true = True
    gcn_depth = 2
    num_nodes = 8  # (port) 137
    dropout = 0.3
    subgraph_size = 4  # (port) 20
    node_dim = 8  # (port) 40
    dilation_exponential = 2
    conv_channels = 8  # (port) 16
    residual_channels = 8  # (port) 16
    skip_channels = 16  # (port) 32
    end_channels = 32  # (port) 64
    in_dim = 1
    seq_in_len = 24  # (port) 24*7
    seq_out_len = 1
    horizon = 3
    layers = 2  # (port) 5
    batch_size = 32
    lr = 0.001  # (port) 0.0001
    weight_decay = 0.00001
    clip = 5
    propalpha = 0.05
    tanhalpha = 3
    num_split = 1
    step_size = 100


device = torch.device('cpu')


# layer.py (the classes gtnet uses)

class nconv(nn.Module):
    def __init__(self):
        super(nconv,self).__init__()

    def forward(self,x, A):
        x = torch.einsum('ncwl,vw->ncvl',(x,A))
        return x.contiguous()


class linear(nn.Module):
    def __init__(self,c_in,c_out,bias=True):
        super(linear,self).__init__()
        self.mlp = torch.nn.Conv2d(c_in, c_out, kernel_size=(1, 1), padding=(0,0), stride=(1,1), bias=bias)

    def forward(self,x):
        return self.mlp(x)



class mixprop(nn.Module):
    def __init__(self,c_in,c_out,gdep,dropout,alpha):
        super(mixprop, self).__init__()
        self.nconv = nconv()
        self.mlp = linear((gdep+1)*c_in,c_out)
        self.gdep = gdep
        self.dropout = dropout
        self.alpha = alpha


    def forward(self,x,adj):
        adj = adj + torch.eye(adj.size(0)).to(x.device)
        d = adj.sum(1)
        h = x
        out = [h]
        a = adj / d.view(-1, 1)
        for i in range(self.gdep):
            h = self.alpha*x + (1-self.alpha)*self.nconv(h,a)
            out.append(h)
        ho = torch.cat(out,dim=1)
        ho = self.mlp(ho)
        return ho


class dilated_inception(nn.Module):
    def __init__(self, cin, cout, dilation_factor=2):
        super(dilated_inception, self).__init__()
        self.tconv = nn.ModuleList()
        self.kernel_set = [2,3,6,7]
        cout = int(cout/len(self.kernel_set))
        for kern in self.kernel_set:
            self.tconv.append(nn.Conv2d(cin,cout,(1,kern),dilation=(1,dilation_factor)))

    def forward(self,input):
        x = []
        for i in range(len(self.kernel_set)):
            x.append(self.tconv[i](input))
        for i in range(len(self.kernel_set)):
            x[i] = x[i][...,-x[-1].size(3):]
        x = torch.cat(x,dim=1)
        return x


class graph_constructor(nn.Module):
    def __init__(self, nnodes, k, dim, device, alpha=3, static_feat=None):
        super(graph_constructor, self).__init__()
        self.nnodes = nnodes
        if static_feat is not None:
            xd = static_feat.shape[1]
            self.lin1 = nn.Linear(xd, dim)
            self.lin2 = nn.Linear(xd, dim)
        else:
            self.emb1 = nn.Embedding(nnodes, dim)
            self.emb2 = nn.Embedding(nnodes, dim)
            self.lin1 = nn.Linear(dim,dim)
            self.lin2 = nn.Linear(dim,dim)

        self.device = device
        self.k = k
        self.dim = dim
        self.alpha = alpha
        self.static_feat = static_feat

    def forward(self, idx):
        if self.static_feat is None:
            nodevec1 = self.emb1(idx)
            nodevec2 = self.emb2(idx)
        else:
            nodevec1 = self.static_feat[idx,:]
            nodevec2 = nodevec1

        nodevec1 = torch.tanh(self.alpha*self.lin1(nodevec1))
        nodevec2 = torch.tanh(self.alpha*self.lin2(nodevec2))

        a = torch.mm(nodevec1, nodevec2.transpose(1,0))-torch.mm(nodevec2, nodevec1.transpose(1,0))
        adj = F.relu(torch.tanh(self.alpha*a))
        mask = torch.zeros(idx.size(0), idx.size(0)).to(self.device)
        mask.fill_(float('0'))
        s1,t1 = (adj + torch.rand_like(adj)*0.01).topk(self.k,1)
        mask.scatter_(1,t1,s1.fill_(1))
        adj = adj*mask
        return adj

    def fullA(self, idx):
        if self.static_feat is None:
            nodevec1 = self.emb1(idx)
            nodevec2 = self.emb2(idx)
        else:
            nodevec1 = self.static_feat[idx,:]
            nodevec2 = nodevec1

        nodevec1 = torch.tanh(self.alpha*self.lin1(nodevec1))
        nodevec2 = torch.tanh(self.alpha*self.lin2(nodevec2))

        a = torch.mm(nodevec1, nodevec2.transpose(1,0))-torch.mm(nodevec2, nodevec1.transpose(1,0))
        adj = F.relu(torch.tanh(self.alpha*a))
        return adj


class LayerNorm(nn.Module):
    __constants__ = ['normalized_shape', 'weight', 'bias', 'eps', 'elementwise_affine']
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True):
        super(LayerNorm, self).__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if self.elementwise_affine:
            self.weight = nn.Parameter(torch.Tensor(*normalized_shape))
            self.bias = nn.Parameter(torch.Tensor(*normalized_shape))
        else:
            self.register_parameter('weight', None)
            self.register_parameter('bias', None)
        self.reset_parameters()


    def reset_parameters(self):
        if self.elementwise_affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def forward(self, input, idx):
        if self.elementwise_affine:
            return F.layer_norm(input, tuple(input.shape[1:]), self.weight[:,idx,:], self.bias[:,idx,:], self.eps)
        else:
            return F.layer_norm(input, tuple(input.shape[1:]), self.weight, self.bias, self.eps)

    def extra_repr(self):
        return '{normalized_shape}, eps={eps}, ' \
            'elementwise_affine={elementwise_affine}'.format(**self.__dict__)



# net.py
class gtnet(nn.Module):
    def __init__(self, gcn_true, buildA_true, gcn_depth, num_nodes, device, predefined_A=None, static_feat=None, dropout=0.3, subgraph_size=20, node_dim=40, dilation_exponential=1, conv_channels=32, residual_channels=32, skip_channels=64, end_channels=128, seq_length=12, in_dim=2, out_dim=12, layers=3, propalpha=0.05, tanhalpha=3, layer_norm_affline=True):
        super(gtnet, self).__init__()
        self.gcn_true = gcn_true
        self.buildA_true = buildA_true
        self.num_nodes = num_nodes
        self.dropout = dropout
        self.predefined_A = predefined_A
        self.filter_convs = nn.ModuleList()
        self.gate_convs = nn.ModuleList()
        self.residual_convs = nn.ModuleList()
        self.skip_convs = nn.ModuleList()
        self.gconv1 = nn.ModuleList()
        self.gconv2 = nn.ModuleList()
        self.norm = nn.ModuleList()
        self.start_conv = nn.Conv2d(in_channels=in_dim,
                                    out_channels=residual_channels,
                                    kernel_size=(1, 1))
        self.gc = graph_constructor(num_nodes, subgraph_size, node_dim, device, alpha=tanhalpha, static_feat=static_feat)

        self.seq_length = seq_length
        kernel_size = 7
        if dilation_exponential>1:
            self.receptive_field = int(1+(kernel_size-1)*(dilation_exponential**layers-1)/(dilation_exponential-1))
        else:
            self.receptive_field = layers*(kernel_size-1) + 1

        for i in range(1):
            if dilation_exponential>1:
                rf_size_i = int(1 + i*(kernel_size-1)*(dilation_exponential**layers-1)/(dilation_exponential-1))
            else:
                rf_size_i = i*layers*(kernel_size-1)+1
            new_dilation = 1
            for j in range(1,layers+1):
                if dilation_exponential > 1:
                    rf_size_j = int(rf_size_i + (kernel_size-1)*(dilation_exponential**j-1)/(dilation_exponential-1))
                else:
                    rf_size_j = rf_size_i+j*(kernel_size-1)

                self.filter_convs.append(dilated_inception(residual_channels, conv_channels, dilation_factor=new_dilation))
                self.gate_convs.append(dilated_inception(residual_channels, conv_channels, dilation_factor=new_dilation))
                self.residual_convs.append(nn.Conv2d(in_channels=conv_channels,
                                                    out_channels=residual_channels,
                                                 kernel_size=(1, 1)))
                if self.seq_length>self.receptive_field:
                    self.skip_convs.append(nn.Conv2d(in_channels=conv_channels,
                                                    out_channels=skip_channels,
                                                    kernel_size=(1, self.seq_length-rf_size_j+1)))
                else:
                    self.skip_convs.append(nn.Conv2d(in_channels=conv_channels,
                                                    out_channels=skip_channels,
                                                    kernel_size=(1, self.receptive_field-rf_size_j+1)))

                if self.gcn_true:
                    self.gconv1.append(mixprop(conv_channels, residual_channels, gcn_depth, dropout, propalpha))
                    self.gconv2.append(mixprop(conv_channels, residual_channels, gcn_depth, dropout, propalpha))

                if self.seq_length>self.receptive_field:
                    self.norm.append(LayerNorm((residual_channels, num_nodes, self.seq_length - rf_size_j + 1),elementwise_affine=layer_norm_affline))
                else:
                    self.norm.append(LayerNorm((residual_channels, num_nodes, self.receptive_field - rf_size_j + 1),elementwise_affine=layer_norm_affline))

                new_dilation *= dilation_exponential

        self.layers = layers
        self.end_conv_1 = nn.Conv2d(in_channels=skip_channels,
                                             out_channels=end_channels,
                                             kernel_size=(1,1),
                                             bias=True)
        self.end_conv_2 = nn.Conv2d(in_channels=end_channels,
                                             out_channels=out_dim,
                                             kernel_size=(1,1),
                                             bias=True)
        if self.seq_length > self.receptive_field:
            self.skip0 = nn.Conv2d(in_channels=in_dim, out_channels=skip_channels, kernel_size=(1, self.seq_length), bias=True)
            self.skipE = nn.Conv2d(in_channels=residual_channels, out_channels=skip_channels, kernel_size=(1, self.seq_length-self.receptive_field+1), bias=True)

        else:
            self.skip0 = nn.Conv2d(in_channels=in_dim, out_channels=skip_channels, kernel_size=(1, self.receptive_field), bias=True)
            self.skipE = nn.Conv2d(in_channels=residual_channels, out_channels=skip_channels, kernel_size=(1, 1), bias=True)


        self.idx = torch.arange(self.num_nodes).to(device)
        self.bug = None  # (port) set by _build for the bug variants


    def forward(self, input, idx=None):
        seq_len = input.size(3)
        assert seq_len==self.seq_length, 'input sequence length not equal to preset sequence length'

        if self.seq_length<self.receptive_field:
            input = nn.functional.pad(input,(self.receptive_field-self.seq_length,0,0,0))



        if self.gcn_true:
            if self.buildA_true:
                if idx is None:
                    adp = self.gc(self.idx)
                else:
                    adp = self.gc(idx)
            else:
                adp = self.predefined_A

        x = self.start_conv(input)
        if self.bug == "dropout_without_training_flag":
            skip = self.skip0(F.dropout(input, self.dropout))
        else:
            skip = self.skip0(F.dropout(input, self.dropout, training=self.training))
        for i in range(self.layers):
            residual = x
            filter = self.filter_convs[i](x)
            filter = torch.tanh(filter)
            gate = self.gate_convs[i](x)
            gate = torch.sigmoid(gate)
            x = filter * gate
            if self.bug == "dropout_without_training_flag":
                x = F.dropout(x, self.dropout)
            else:
                x = F.dropout(x, self.dropout, training=self.training)
            s = x
            s = self.skip_convs[i](s)
            skip = s + skip
            if self.gcn_true:
                x = self.gconv1[i](x, adp)+self.gconv2[i](x, adp.transpose(1,0))
            else:
                x = self.residual_convs[i](x)

            x = x + residual[:, :, :, -x.size(3):]
            if idx is None:
                x = self.norm[i](x,self.idx)
            else:
                x = self.norm[i](x,idx)

        skip = self.skipE(x) + skip
        x = F.relu(skip)
        x = F.relu(self.end_conv_1(x))
        x = self.end_conv_2(x)
        return x



# util.py
def normal_std(x):
    return x.std() * np.sqrt((len(x) - 1.)/(len(x)))

class DataLoaderS(object):
    # train and valid is the ratio of training set and validation set. test = 1 - train - valid
    def __init__(self, file_name, train, valid, device, horizon, window, normalize=2):
        self.P = window
        self.h = horizon
        self.rawdat = file_name  # (port) the synthetic array, not a csv file
        self.dat = np.zeros(self.rawdat.shape)
        self.n, self.m = self.dat.shape
        self.normalize = 2
        self.scale = np.ones(self.m)
        self._normalized(normalize)
        self._split(int(train * self.n), int((train + valid) * self.n), self.n)

        self.scale = torch.from_numpy(self.scale).float()
        tmp = self.test[1] * self.scale.expand(self.test[1].size(0), self.m)

        self.scale = self.scale.to(device)
        self.scale = Variable(self.scale)

        self.rse = normal_std(tmp)
        self.rae = torch.mean(torch.abs(tmp - torch.mean(tmp)))

        self.device = device

    def _normalized(self, normalize):
        # normalized by the maximum value of entire matrix.

        if (normalize == 0):
            self.dat = self.rawdat

        if (normalize == 1):
            self.dat = self.rawdat / np.max(self.rawdat)

        # normlized by the maximum value of each row(sensor).
        if (normalize == 2):
            for i in range(self.m):
                self.scale[i] = np.max(np.abs(self.rawdat[:, i]))
                self.dat[:, i] = self.rawdat[:, i] / np.max(np.abs(self.rawdat[:, i]))

    def _split(self, train, valid, test):

        train_set = range(self.P + self.h - 1, train)
        valid_set = range(train, valid)
        test_set = range(valid, self.n)
        self.train = self._batchify(train_set, self.h)
        self.valid = self._batchify(valid_set, self.h)
        self.test = self._batchify(test_set, self.h)

    def _batchify(self, idx_set, horizon):
        n = len(idx_set)
        X = torch.zeros((n, self.P, self.m))
        Y = torch.zeros((n, self.m))
        for i in range(n):
            end = idx_set[i] - self.h + 1
            start = end - self.P
            X[i, :, :] = torch.from_numpy(self.dat[start:end, :])
            Y[i, :] = torch.from_numpy(self.dat[idx_set[i], :])
        return [X, Y]

    def get_batches(self, inputs, targets, batch_size, shuffle=True):
        length = len(inputs)
        if shuffle:
            index = torch.randperm(length)
        else:
            index = torch.LongTensor(range(length))
        start_idx = 0
        while (start_idx < length):
            end_idx = min(length, start_idx + batch_size)
            excerpt = index[start_idx:end_idx]
            X = inputs[excerpt]
            Y = targets[excerpt]
            X = X.to(self.device)
            Y = Y.to(self.device)
            yield Variable(X), Variable(Y)
            start_idx += batch_size



# trainer.py
class Optim(object):

    def _makeOptimizer(self):
        if self.method == 'sgd':
            self.optimizer = optim.SGD(self.params, lr=self.lr, weight_decay=self.lr_decay)
        elif self.method == 'adagrad':
            self.optimizer = optim.Adagrad(self.params, lr=self.lr, weight_decay=self.lr_decay)
        elif self.method == 'adadelta':
            self.optimizer = optim.Adadelta(self.params, lr=self.lr, weight_decay=self.lr_decay)
        elif self.method == 'adam':
            self.optimizer = optim.Adam(self.params, lr=self.lr, weight_decay=self.lr_decay)
        else:
            raise RuntimeError("Invalid optim method: " + self.method)

    def __init__(self, params, method, lr, clip, lr_decay=1, start_decay_at=None):
        self.params = params  # careful: params may be a generator
        self.last_ppl = None
        self.lr = lr
        self.clip = clip
        self.method = method
        self.lr_decay = lr_decay
        self.start_decay_at = start_decay_at
        self.start_decay = False

        self._makeOptimizer()

    def step(self):
        # Compute gradients norm.
        grad_norm = 0
        if self.clip is not None:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)

        # for param in self.params:
        #     grad_norm += math.pow(param.grad.data.norm(), 2)
        #
        # grad_norm = math.sqrt(grad_norm)
        # if grad_norm > 0:
        #     shrinkage = self.max_grad_norm / grad_norm
        # else:
        #     shrinkage = 1.
        #
        # for param in self.params:
        #     if shrinkage < 1:
        #         param.grad.data.mul_(shrinkage)
        self.optimizer.step()
        return  grad_norm

    # decay learning rate if val perf does not improve or we hit the start_decay_at limit
    def updateLearningRate(self, ppl, epoch):
        if self.start_decay_at is not None and epoch >= self.start_decay_at:
            self.start_decay = True
        if self.last_ppl is not None and ppl > self.last_ppl:
            self.start_decay = True

        if self.start_decay:
            self.lr = self.lr * self.lr_decay
            print("Decaying learning rate to %g" % self.lr)
        #only decay for one epoch
        self.start_decay = False

        self.last_ppl = ppl

        self._makeOptimizer()


# train_single_step.py
def evaluate(data, X, Y, model, evaluateL2, evaluateL1, batch_size):
    model.eval()
    total_loss = 0
    total_loss_l1 = 0
    n_samples = 0
    predict = None
    test = None

    for X, Y in data.get_batches(X, Y, batch_size, False):
        X = torch.unsqueeze(X,dim=1)
        X = X.transpose(2,3)
        with torch.no_grad():
            output = model(X)
        output = torch.squeeze(output)
        if len(output.shape)==1:
            output = output.unsqueeze(dim=0)
        if predict is None:
            predict = output
            test = Y
        else:
            predict = torch.cat((predict, output))
            test = torch.cat((test, Y))

        scale = data.scale.expand(output.size(0), data.m)
        total_loss += evaluateL2(output * scale, Y * scale).item()
        total_loss_l1 += evaluateL1(output * scale, Y * scale).item()
        n_samples += (output.size(0) * data.m)

    rse = math.sqrt(total_loss / n_samples) / data.rse
    rae = (total_loss_l1 / n_samples) / data.rae
    return rse, rae  # (port) the correlation's numpy lines are not ported


def _synthetic(rng, n, m):  # (port) the stand-in for solar_AL.txt
    t = np.arange(n)
    phase = rng.uniform(0, 2 * np.pi, size=m)
    dat = np.zeros((n, m))
    for s in range(1, n):
        cycle = 1.0 + np.sin(2 * np.pi * t[s] / 24 + phase)
        prev = np.roll(dat[s - 1], 1)
        dat[s] = 0.5 * cycle + 0.5 * prev + 0.05 * rng.standard_normal(m)
    return np.abs(dat)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)

    Data = DataLoaderS(_synthetic(rng, 800, args.num_nodes), 0.6, 0.2, device, args.horizon, args.seq_in_len,
                       args.normalize)

    model = gtnet(args.gcn_true, args.buildA_true, args.gcn_depth, args.num_nodes,
                  device, dropout=args.dropout, subgraph_size=args.subgraph_size,
                  node_dim=args.node_dim, dilation_exponential=args.dilation_exponential,
                  conv_channels=args.conv_channels, residual_channels=args.residual_channels,
                  skip_channels=args.skip_channels, end_channels= args.end_channels,
                  seq_length=args.seq_in_len, in_dim=args.in_dim, out_dim=args.seq_out_len,
                  layers=args.layers, propalpha=args.propalpha, tanhalpha=args.tanhalpha, layer_norm_affline=False)
    model = model.to(device)
    model.bug = bug

    if args.L1Loss:
        criterion = nn.L1Loss(reduction='sum').to(device)  # (port) size_average=False, its deprecated spelling
    else:
        criterion = nn.MSELoss(reduction='sum').to(device)
    evaluateL2 = nn.MSELoss(reduction='sum').to(device)
    evaluateL1 = nn.L1Loss(reduction='sum').to(device)

    optim = Optim(
        model.parameters(), args.optim, args.lr, args.clip, lr_decay=args.weight_decay
    )

    st = {"batches": Data.get_batches(Data.train[0], Data.train[1], args.batch_size, True), "iter": 0}

    def train_step():
        model.train()
        try:
            X, Y = next(st["batches"])
        except StopIteration:
            st["batches"] = Data.get_batches(Data.train[0], Data.train[1], args.batch_size, True)
            X, Y = next(st["batches"])
        iter = st["iter"]
        if bug != "zero_grad_dropped":
            model.zero_grad()
        X = torch.unsqueeze(X,dim=1)
        X = X.transpose(2,3)
        if iter % args.step_size == 0:
            st["perm"] = np.random.permutation(range(args.num_nodes))
        perm = st["perm"]
        num_sub = int(args.num_nodes / args.num_split)

        for j in range(args.num_split):
            if j != args.num_split - 1:
                id = perm[j * num_sub:(j + 1) * num_sub]
            else:
                id = perm[j * num_sub:]
            id = torch.tensor(id).to(device)
            tx = X[:, :, id, :]
            ty = Y[:, id]
            output = model(tx,id)
            output = torch.squeeze(output)
            scale = Data.scale.expand(output.size(0), Data.m)
            scale = scale[:,id]
            if bug == "target_not_rescaled":
                loss = criterion(output * scale, ty)
            else:
                loss = criterion(output * scale, ty * scale)
            loss.backward()
            optim.step()
        st["iter"] = iter + 1
        return loss.item()

    def eval_fn(m, _batch=None):
        was = m.training
        rse, _rae = evaluate(Data, Data.valid[0], Data.valid[1], m, evaluateL2, evaluateL1, args.batch_size)
        m.train(was)
        return float(rse)

    X0, Y0 = Data.train[0][:args.batch_size], Data.train[1][:args.batch_size]
    X0 = torch.unsqueeze(X0, dim=1).transpose(2, 3)
    scale0 = Data.scale.expand(args.batch_size, Data.m)

    def loss_fn(output, target):
        if bug == "target_not_rescaled":
            return criterion(torch.squeeze(output) * scale0, target)
        return criterion(torch.squeeze(output) * scale0, target * scale0)

    return Program(name="mtgnn_single_step", model=model, batch=(X0, Y0), loss_fn=loss_fn,
                   optimizer=optim.optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the targets left in normalized units while the outputs are rescaled by each series' maximum, so the
    # loss compares two different scales.
    Bug("target_not_rescaled", functools.partial(_build, bug="target_not_rescaled"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: F.dropout without training=self.training in gtnet.forward: dropout stays on at evaluation.
    Bug("dropout_without_training_flag", functools.partial(_build, bug="dropout_without_training_flag"),
        "six_claims", ("EVALUATION",)),
    # classic: model.zero_grad() left out of the batch loop: gradients pile up across batches.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
