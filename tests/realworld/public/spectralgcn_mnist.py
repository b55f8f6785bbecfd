# ruff: noqa: PLR0402, UP008, F841, PLR0133, PLR1704, PLW0128, RUF059, SIM201
"""Spectral graph ConvNet (ChebNet, Defferrard et al.) on MNIST's pixel grid from xbresson/spectral_graph_convnets:
an 8-NN Gaussian-weighted grid graph, four levels of Heavy Edge Matching coarsening with fake nodes so that graph
max-pooling is a 1-d pool over a binary tree, Chebyshev graph convolutions of order 25 on the rescaled normalized
Laplacians (LeNet-5 layout: CL32 - pool 4 - CL64 - pool 4 - FC512 - FC10), cross-entropy + 0.5 * 5e-4 * L2, SGD
momentum 0.9 at lr 0.05 with exponential decay by epoch.

Source: https://github.com/xbresson/spectral_graph_convnets
Commit: 1919c6f5be4b75c6657ec6c3708a7349810b5f3f
Files: ``02_graph_convnet_lenet5_mnist_pytorch.ipynb`` (``my_sparse_mm``, ``Graph_ConvNet_LeNet5``, the training
cell), ``lib/coarsening.py``, ``lib/grid_graph.py``
License: MIT (Copyright (c) 2017 Xavier Bresson; full text in LICENSES/xbresson-spectral_graph_convnets.txt)
Domain: GNN in plain torch, graph-level classification (spectral Chebyshev graph convolutions with graph coarsening
and pooling, images as signals on a grid graph)

Kept as written: ``Graph_ConvNet_LeNet5`` (its uniform init, ``graph_conv_cheby`` with ``lmax_L`` / ``rescale_L``
applied to the scipy Laplacian at every call and the Chebyshev recursion, ``graph_max_pool``, the always-built
``nn.Dropout(d)``, ``loss`` with the L2 term, ``update`` building SGD momentum 0.9, ``update_learning_rate``,
``evaluation``), ``lib/coarsening.py`` (``laplacian``, ``rescale_L``, ``lmax_L``, ``coarsen``, ``HEM``,
``HEM_one_level``, ``compute_perm``, ``perm_adjacency``, ``perm_data``), ``lib/grid_graph.py`` (``grid``, the k-NN
distances, ``adjacency``), the notebook's hyperparameters (CL1_F 32, CL1_K 25, CL2_F 64, CL2_K 25, FC2_F 10,
learning_rate 0.05, dropout 0.5, l2 5e-4, decay 0.95 per ``train_size`` examples) and the loop body (a deque of
permuted indices, forward, loss, backward, step, zero_grad, the lr update at the end of an epoch).

Deviations from the original:
- MNIST (read through TensorFlow's tutorial reader) is not here: the images are synthetic 16x16 "digits" in [0, 1]
  made from ``seed`` (10 classes of stroke templates, shifted by up to a pixel, with noise), 2000 for training and
  500 for testing; ``grid_side`` 28 -> 16, so the coarsened graphs have 288, 144, 72, 36 and 18 nodes.
- sizes for 2 CPU cores: FC1_F 512 -> 128, batch_size 100 -> 64.
- ``my_sparse_mm`` subclasses ``torch.autograd.Function`` in the legacy style (instance ``forward`` / ``backward``,
  called as ``my_sparse_mm()(L, x)``), which torch no longer runs: it is written with static methods and ``ctx``
  (``my_sparse_mm.apply(L, x)``), the same products; its backward returns no gradient for the constant sparse
  Laplacian (the original's dense ``dL/dW`` for it was discarded). ``torch.sparse.FloatTensor(...)`` is
  ``torch.sparse_coo_tensor(...)``; ``loss.data[0]`` is ``loss.item()``; ``Variable`` and the CUDA types are
  dropped (CPU).
- ``lib/grid_graph.py``'s ``sklearn.metrics.pairwise.pairwise_distances`` is ``scipy.spatial.distance.cdist`` (the
  same Euclidean distances; scikit-learn is not installed). ``lib/coarsening.py`` is patched only for current
  numpy / scipy: ``np.bool`` -> ``bool``, ``scipy.sparse.csr.csr_matrix`` / ``scipy.sparse.coo.coo_matrix`` ->
  ``scipy.sparse.csr_matrix`` / ``coo_matrix`` in the type asserts, ``is 1`` / ``is 0`` -> ``== 1`` / ``== 0``; its
  prints (and the constructor's) are dropped.
- the loop over epochs is not run as a whole: ``train_step`` is one batch of it (a new epoch refills the deque and
  the lr update runs when an epoch's batches are used up), returning the batch's loss; ``eval_fn`` is the test
  accuracy cell's forward with dropout 0.0, returning the cross-entropy on the test set.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import collections
import functools
import pathlib
import sys

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
import scipy.spatial.distance
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

GRID_SIDE = 16  # (port) 28


# lib/coarsening.py
def laplacian(W, normalized=True):
    """Return graph Laplacian"""

    # Degree matrix.
    d = W.sum(axis=0)

    # Laplacian matrix.
    if not normalized:
        D = scipy.sparse.diags(d.A.squeeze(), 0)
        L = D - W
    else:
        d += np.spacing(np.array(0, W.dtype))
        d = 1 / np.sqrt(d)
        D = scipy.sparse.diags(d.A.squeeze(), 0)
        I = scipy.sparse.identity(d.size, dtype=W.dtype)
        L = I - D * W * D

    assert np.abs(L - L.T).mean() < 1e-9
    assert type(L) is scipy.sparse.csr_matrix
    return L

    
    
def rescale_L(L, lmax=2):
    """Rescale Laplacian eigenvalues to [-1,1]"""
    M, M = L.shape
    I = scipy.sparse.identity(M, format='csr', dtype=L.dtype)
    L /= lmax * 2
    L -= I
    return L 


def lmax_L(L):
    """Compute largest Laplacian eigenvalue"""
    return scipy.sparse.linalg.eigsh(L, k=1, which='LM', return_eigenvectors=False)[0]


# graph coarsening with Heavy Edge Matching
def coarsen(A, levels):
    
    graphs, parents = HEM(A, levels)
    perms = compute_perm(parents)

    laplacians = []
    for i,A in enumerate(graphs):
        M, M = A.shape
            
        if i < levels:
            A = perm_adjacency(A, perms[i])

        A = A.tocsr()
        A.eliminate_zeros()
        Mnew, Mnew = A.shape

        L = laplacian(A, normalized=True)
        laplacians.append(L)
        
    return laplacians, perms[0] if len(perms) > 0 else None


def HEM(W, levels, rid=None):
    """
    Coarsen a graph multiple times using the Heavy Edge Matching (HEM).

    Input
    W: symmetric sparse weight (adjacency) matrix
    levels: the number of coarsened graphs

    Output
    graph[0]: original graph of size N_1
    graph[2]: coarser graph of size N_2 < N_1
    graph[levels]: coarsest graph of Size N_levels < ... < N_2 < N_1
    parents[i] is a vector of size N_i with entries ranging from 1 to N_{i+1}
        which indicate the parents in the coarser graph[i+1]
    nd_sz{i} is a vector of size N_i that contains the size of the supernode in the graph{i}

    Note
    if "graph" is a list of length k, then "parents" will be a list of length k-1
    """

    N, N = W.shape
    
    if rid is None:
        rid = np.random.permutation(range(N))
        
    ss = np.array(W.sum(axis=0)).squeeze()
    rid = np.argsort(ss)
        
        
    parents = []
    degree = W.sum(axis=0) - W.diagonal()
    graphs = []
    graphs.append(W)


    for _ in range(levels):

        # CHOOSE THE WEIGHTS FOR THE PAIRING
        # weights = ones(N,1)       # metis weights
        weights = degree            # graclus weights
        # weights = supernode_size  # other possibility
        weights = np.array(weights).squeeze()

        # PAIR THE VERTICES AND CONSTRUCT THE ROOT VECTOR
        idx_row, idx_col, val = scipy.sparse.find(W)
        cc = idx_row
        rr = idx_col
        vv = val
        
        # TO BE SPEEDUP
        if not (list(cc)==list(np.sort(cc))):
            tmp=cc
            cc=rr
            rr=tmp

        cluster_id = HEM_one_level(cc,rr,vv,rid,weights) # cc is ordered
        parents.append(cluster_id)

        # COMPUTE THE EDGES WEIGHTS FOR THE NEW GRAPH
        nrr = cluster_id[rr]
        ncc = cluster_id[cc]
        nvv = vv
        Nnew = cluster_id.max() + 1
        # CSR is more appropriate: row,val pairs appear multiple times
        W = scipy.sparse.csr_matrix((nvv,(nrr,ncc)), shape=(Nnew,Nnew))
        W.eliminate_zeros()
        
        # Add new graph to the list of all coarsened graphs
        graphs.append(W)
        N, N = W.shape

        # COMPUTE THE DEGREE (OMIT OR NOT SELF LOOPS)
        degree = W.sum(axis=0)
        #degree = W.sum(axis=0) - W.diagonal()

        # CHOOSE THE ORDER IN WHICH VERTICES WILL BE VISTED AT THE NEXT PASS
        #[~, rid]=sort(ss);     # arthur strategy
        #[~, rid]=sort(supernode_size);    #  thomas strategy
        #rid=randperm(N);                  #  metis/graclus strategy
        ss = np.array(W.sum(axis=0)).squeeze()
        rid = np.argsort(ss)

    return graphs, parents


# Coarsen a graph given by rr,cc,vv.  rr is assumed to be ordered
def HEM_one_level(rr,cc,vv,rid,weights):

    nnz = rr.shape[0]
    N = rr[nnz-1] + 1

    marked = np.zeros(N, bool)
    rowstart = np.zeros(N, np.int32)
    rowlength = np.zeros(N, np.int32)
    cluster_id = np.zeros(N, np.int32)

    oldval = rr[0]
    count = 0
    clustercount = 0

    for ii in range(nnz):
        rowlength[count] = rowlength[count] + 1
        if rr[ii] > oldval:
            oldval = rr[ii]
            rowstart[count+1] = ii
            count = count + 1

    for ii in range(N):
        tid = rid[ii]
        if not marked[tid]:
            wmax = 0.0
            rs = rowstart[tid]
            marked[tid] = True
            bestneighbor = -1
            for jj in range(rowlength[tid]):
                nid = cc[rs+jj]
                if marked[nid]:
                    tval = 0.0
                else:
                    
                    # First approach
                    if 2==1:
                        tval = vv[rs+jj] * (1.0/weights[tid] + 1.0/weights[nid])
                    
                    # Second approach
                    if 1==1:
                        Wij = vv[rs+jj]
                        Wii = vv[rowstart[tid]]
                        Wjj = vv[rowstart[nid]]
                        di = weights[tid]
                        dj = weights[nid]
                        tval = (2.*Wij + Wii + Wjj) * 1./(di+dj+1e-9)
                    
                if tval > wmax:
                    wmax = tval
                    bestneighbor = nid

            cluster_id[tid] = clustercount

            if bestneighbor > -1:
                cluster_id[bestneighbor] = clustercount
                marked[bestneighbor] = True

            clustercount += 1

    return cluster_id


def compute_perm(parents):
    """
    Return a list of indices to reorder the adjacency and data matrices so
    that the union of two neighbors from layer to layer forms a binary tree.
    """

    # Order of last layer is random (chosen by the clustering algorithm).
    indices = []
    if len(parents) > 0:
        M_last = max(parents[-1]) + 1
        indices.append(list(range(M_last)))

    for parent in parents[::-1]:

        # Fake nodes go after real ones.
        pool_singeltons = len(parent)

        indices_layer = []
        for i in indices[-1]:
            indices_node = list(np.where(parent == i)[0])
            assert 0 <= len(indices_node) <= 2

            # Add a node to go with a singelton.
            if len(indices_node) == 1:
                indices_node.append(pool_singeltons)
                pool_singeltons += 1

            # Add two nodes as children of a singelton in the parent.
            elif len(indices_node) == 0:
                indices_node.append(pool_singeltons+0)
                indices_node.append(pool_singeltons+1)
                pool_singeltons += 2

            indices_layer.extend(indices_node)
        indices.append(indices_layer)

    # Sanity checks.
    for i,indices_layer in enumerate(indices):
        M = M_last*2**i
        # Reduction by 2 at each layer (binary tree).
        assert len(indices[0] == M)
        # The new ordering does not omit an indice.
        assert sorted(indices_layer) == list(range(M))

    return indices[::-1]




def perm_adjacency(A, indices):
    """
    Permute adjacency matrix, i.e. exchange node ids,
    so that binary unions form the clustering tree.
    """
    if indices is None:
        return A

    M, M = A.shape
    Mnew = len(indices)
    A = A.tocoo()

    # Add Mnew - M isolated vertices.
    rows = scipy.sparse.coo_matrix((Mnew-M,    M), dtype=np.float32)
    cols = scipy.sparse.coo_matrix((Mnew, Mnew-M), dtype=np.float32)
    A = scipy.sparse.vstack([A, rows])
    A = scipy.sparse.hstack([A, cols])

    # Permute the rows and the columns.
    perm = np.argsort(indices)
    A.row = np.array(perm)[A.row]
    A.col = np.array(perm)[A.col]

    assert np.abs(A - A.T).mean() < 1e-8 # 1e-9
    assert type(A) is scipy.sparse.coo_matrix
    return A



def perm_data(x, indices):
    """
    Permute data matrix, i.e. exchange node ids,
    so that binary unions form the clustering tree.
    """
    if indices is None:
        return x

    N, M = x.shape
    Mnew = len(indices)
    assert Mnew >= M
    xnew = np.empty((N, Mnew))
    for i,j in enumerate(indices):
        # Existing vertex, i.e. real data.
        if j < M:
            xnew[:,i] = x[:,j]
        # Fake vertex because of singeltons.
        # They will stay 0 so that max pooling chooses the singelton.
        # Or -infty ?
        else:
            xnew[:,i] = np.zeros(N)
    return xnew



# lib/grid_graph.py
def grid_graph(grid_side,number_edges,metric):
    """Generate graph of a grid"""
    z = grid(grid_side)
    dist, idx = distance_sklearn_metrics(z, k=number_edges, metric=metric)
    A = adjacency(dist, idx)
    return A


def grid(m, dtype=np.float32):
    """Return coordinates of grid points"""
    M = m**2
    x = np.linspace(0,1,m, dtype=dtype)
    y = np.linspace(0,1,m, dtype=dtype)
    xx, yy = np.meshgrid(x, y)
    z = np.empty((M,2), dtype)
    z[:,0] = xx.reshape(M)
    z[:,1] = yy.reshape(M)
    return z


def distance_sklearn_metrics(z, k=4, metric='euclidean'):
    """Compute pairwise distances"""
    d = scipy.spatial.distance.cdist(z, z, metric=metric)  # (port) sklearn's pairwise_distances
    # k-NN
    idx = np.argsort(d)[:,1:k+1]
    d.sort()
    d = d[:,1:k+1]
    return d, idx


def adjacency(dist, idx):
    """Return adjacency matrix of a kNN graph"""
    M, k = dist.shape
    assert M, k == idx.shape
    assert dist.min() >= 0
    assert dist.max() <= 1

    # Pairwise distances
    sigma2 = np.mean(dist[:,-1])**2
    dist = np.exp(- dist**2 / sigma2)

    # Weight matrix
    I = np.arange(0, M).repeat(k)
    J = idx.reshape(M*k)
    V = dist.reshape(M*k)
    W = scipy.sparse.coo_matrix((V, (I, J)), shape=(M, M))

    # No self-connections
    W.setdiag(0)

    # Undirected graph
    bigger = W.T > W
    W = W - W.multiply(bigger) + W.T.multiply(bigger)

    assert W.nnz % 2 == 0
    assert np.abs(W - W.T).mean() < 1e-10
    assert type(W) is scipy.sparse.csr_matrix
    return W


# 02_graph_convnet_lenet5_mnist_pytorch.ipynb
class my_sparse_mm(torch.autograd.Function):
    """
    Implementation of a new autograd function for sparse variables,
    called "my_sparse_mm", by subclassing torch.autograd.Function
    and implementing the forward and backward passes.
    """

    @staticmethod
    def forward(ctx, W, x):  # W is SPARSE
        ctx.save_for_backward(W, x)
        y = torch.mm(W, x)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        W, x = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input_dL_dx = torch.mm(W.t(), grad_input )
        return None, grad_input_dL_dx


class Graph_ConvNet_LeNet5(nn.Module):

    def __init__(self, net_parameters, bug=None):

        super(Graph_ConvNet_LeNet5, self).__init__()
        self.bug = bug

        # parameters
        D, CL1_F, CL1_K, CL2_F, CL2_K, FC1_F, FC2_F = net_parameters
        FC1Fin = CL2_F*(D//16)

        # graph CL1
        self.cl1 = nn.Linear(CL1_K, CL1_F)
        Fin = CL1_K; Fout = CL1_F;
        scale = np.sqrt( 2.0/ (Fin+Fout) )
        self.cl1.weight.data.uniform_(-scale, scale)
        self.cl1.bias.data.fill_(0.0)
        self.CL1_K = CL1_K; self.CL1_F = CL1_F;

        # graph CL2
        self.cl2 = nn.Linear(CL2_K*CL1_F, CL2_F)
        Fin = CL2_K*CL1_F; Fout = CL2_F;
        scale = np.sqrt( 2.0/ (Fin+Fout) )
        self.cl2.weight.data.uniform_(-scale, scale)
        self.cl2.bias.data.fill_(0.0)
        self.CL2_K = CL2_K; self.CL2_F = CL2_F;

        # FC1
        self.fc1 = nn.Linear(FC1Fin, FC1_F)
        Fin = FC1Fin; Fout = FC1_F;
        scale = np.sqrt( 2.0/ (Fin+Fout) )
        self.fc1.weight.data.uniform_(-scale, scale)
        self.fc1.bias.data.fill_(0.0)
        self.FC1Fin = FC1Fin

        # FC2
        self.fc2 = nn.Linear(FC1_F, FC2_F)
        Fin = FC1_F; Fout = FC2_F;
        scale = np.sqrt( 2.0/ (Fin+Fout) )
        self.fc2.weight.data.uniform_(-scale, scale)
        self.fc2.bias.data.fill_(0.0)

    def graph_conv_cheby(self, x, cl, L, lmax, Fout, K):

        # parameters
        # B = batch size
        # V = nb vertices
        # Fin = nb input features
        # Fout = nb output features
        # K = Chebyshev order & support size
        B, V, Fin = x.size(); B, V, Fin = int(B), int(V), int(Fin)

        # rescale Laplacian
        lmax = lmax_L(L)
        L = rescale_L(L, lmax)

        # convert scipy sparse matric L to pytorch
        L = L.tocoo()
        indices = np.column_stack((L.row, L.col)).T
        indices = indices.astype(np.int64)
        indices = torch.from_numpy(indices)
        indices = indices.type(torch.LongTensor)
        L_data = L.data.astype(np.float32)
        L_data = torch.from_numpy(L_data)
        L_data = L_data.type(torch.FloatTensor)
        L = torch.sparse_coo_tensor(indices, L_data, torch.Size(L.shape))

        # transform to Chebyshev basis
        x0 = x.permute(1,2,0).contiguous()  # V x Fin x B
        x0 = x0.view([V, Fin*B])            # V x Fin*B
        x = x0.unsqueeze(0)                 # 1 x V x Fin*B

        if K > 1:
            x1 = my_sparse_mm.apply(L,x0)              # V x Fin*B
            x = torch.cat((x, x1.unsqueeze(0)),0)  # 2 x V x Fin*B
        for k in range(2, K):
            x2 = 2 * my_sparse_mm.apply(L,x1) - x0
            x = torch.cat((x, x2.unsqueeze(0)),0)  # M x Fin*B
            x0, x1 = x1, x2

        if self.bug == "cheby_basis_viewed_not_permuted":
            x = x.view([B*V, Fin*K])
        else:
            x = x.view([K, V, Fin, B])           # K x V x Fin x B
            x = x.permute(3,1,2,0).contiguous()  # B x V x Fin x K
            x = x.view([B*V, Fin*K])             # B*V x Fin*K

        # Compose linearly Fin features to get Fout features
        x = cl(x)                            # B*V x Fout
        x = x.view([B, V, Fout])             # B x V x Fout

        return x

    # Max pooling of size p. Must be a power of 2.
    def graph_max_pool(self, x, p):
        if p > 1:
            x = x.permute(0,2,1).contiguous()  # x = B x F x V
            x = nn.MaxPool1d(p)(x)             # B x F x V/p
            x = x.permute(0,2,1).contiguous()  # x = B x V/p x F
            return x
        else:
            return x

    def forward(self, x, d, L, lmax):

        # graph CL1
        x = x.unsqueeze(2) # B x V x Fin=1
        x = self.graph_conv_cheby(x, self.cl1, L[0], lmax[0], self.CL1_F, self.CL1_K)
        x = F.relu(x)
        x = self.graph_max_pool(x, 4)

        # graph CL2
        x = self.graph_conv_cheby(x, self.cl2, L[2], lmax[2], self.CL2_F, self.CL2_K)
        x = F.relu(x)
        x = self.graph_max_pool(x, 4)

        # FC1
        x = x.view(-1, self.FC1Fin)
        x = self.fc1(x)
        x = F.relu(x)
        x  = nn.Dropout(d)(x)

        # FC2
        x = self.fc2(x)

        return x

    def loss(self, y, y_target, l2_regularization):

        loss = nn.CrossEntropyLoss()(y,y_target)

        l2_loss = 0.0
        for param in self.parameters():
            data = param* param
            l2_loss += data.sum()

        if self.bug == "l2_sign_flipped":
            loss -= 0.5* l2_regularization* l2_loss
        else:
            loss += 0.5* l2_regularization* l2_loss

        return loss

    def update(self, lr):

        update = torch.optim.SGD( self.parameters(), lr=lr, momentum=0.9 )

        return update

    def update_learning_rate(self, optimizer, lr):

        for param_group in optimizer.param_groups:
            param_group['lr'] = lr

        return optimizer

    def evaluation(self, y_predicted, test_l):

        _, class_predicted = torch.max(y_predicted.data, 1)
        return 100.0* (class_predicted == test_l).sum()/ y_predicted.size(0)


class _Net(nn.Module):
    """(port) ``net.forward(x, dropout_value, L, lmax)`` with the graph held fixed, for the Program's model."""

    def __init__(self, net, dropout_value, L, lmax):
        super().__init__()
        self.net = net
        self.dropout_value, self.L, self.lmax = dropout_value, L, lmax

    def forward(self, x):
        return self.net.forward(x, self.dropout_value, self.L, self.lmax)


# ----------------------------------------------------------------------------------------------- (port) data
def _digits(n, gen, templates):
    labels = torch.randint(0, 10, (n,), generator=gen)
    imgs = templates[labels]
    shifts = torch.randint(-1, 2, (n, 2), generator=gen)
    out = torch.stack([torch.roll(im, shifts=(int(s[0]), int(s[1])), dims=(0, 1)) for im, s in zip(imgs, shifts)])
    out = (out + 0.2 * torch.randn(out.shape, generator=gen)).clamp(0, 1)
    return out.reshape(n, -1).numpy().astype(np.float32), labels.numpy()


def _templates(gen):
    t = torch.zeros(10, GRID_SIDE, GRID_SIDE)
    for c in range(10):
        for _ in range(3):  # three random strokes a class
            r0, c0 = (int(v) for v in torch.randint(2, GRID_SIDE - 2, (2,), generator=gen))
            dr, dc = (int(v) for v in torch.randint(-1, 2, (2,), generator=gen))
            for s in range(8):
                r, cc = r0 + dr * s, c0 + dc * s
                if 0 <= r < GRID_SIDE and 0 <= cc < GRID_SIDE:
                    t[c, r, cc] = 1.0
    return t


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    gen = torch.Generator().manual_seed(seed)
    templates = _templates(gen)
    train_data, train_labels = _digits(2000, gen, templates)
    test_data, test_labels = _digits(500, gen, templates)

    # Construct graph
    grid_side = GRID_SIDE
    number_edges = 8
    metric = 'euclidean'
    A = grid_graph(grid_side,number_edges,metric) # create graph of Euclidean grid

    # Compute coarsened graphs
    coarsening_levels = 4
    L, perm = coarsen(A, coarsening_levels)

    # Compute max eigenvalue of graph Laplacians
    lmax = []
    for i in range(coarsening_levels):
        lmax.append(lmax_L(L[i]))

    # Reindex nodes to satisfy a binary tree structure
    train_data = perm_data(train_data, perm)
    test_data = perm_data(test_data, perm)
    del perm

    # network parameters
    D = train_data.shape[1]
    CL1_F = 32
    CL1_K = 25
    CL2_F = 64
    CL2_K = 25
    FC1_F = 128  # (port) 512
    FC2_F = 10
    net_parameters = [D, CL1_F, CL1_K, CL2_F, CL2_K, FC1_F, FC2_F]

    # instantiate the object net of the class
    net = Graph_ConvNet_LeNet5(net_parameters, bug=bug)

    # learning parameters
    learning_rate = 0.05
    dropout_value = 0.5
    l2_regularization = 5e-4
    batch_size = 64  # (port) 100
    train_size = train_data.shape[0]

    # Optimizer
    st = {"global_lr": learning_rate, "global_step": 0, "lr": learning_rate, "epoch_done": True}
    decay = 0.95
    decay_steps = train_size
    optimizer = net.update(st["lr"])

    # loop over epochs
    indices = collections.deque()

    def train_step():
        if st["epoch_done"]:
            # reshuffle
            indices.extend(np.random.permutation(train_size)) # rand permutation
            st["epoch_done"] = False

        # extract batches
        batch_idx = [indices.popleft() for i in range(batch_size)]
        train_x, train_y = train_data[batch_idx,:], train_labels[batch_idx]
        train_x = torch.FloatTensor(train_x)
        train_y = train_y.astype(np.int64)
        train_y = torch.LongTensor(train_y)

        # Forward
        y = net.forward(train_x, dropout_value, L, lmax)
        loss = net.loss(y,train_y,l2_regularization)
        loss_train = loss.item()

        # Accuracy
        acc_train = net.evaluation(y,train_y.data)

        # backward
        loss.backward()

        # Update
        st["global_step"] += batch_size # to update learning rate
        optimizer.step()
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()

        if len(indices) < batch_size:
            st["epoch_done"] = True
            # update learning rate
            st["lr"] = st["global_lr"] * pow( decay , float(st["global_step"]// decay_steps) )
            net.update_learning_rate(optimizer, st["lr"])
        return loss_train

    def eval_fn(model, _batch=None):
        with torch.no_grad():
            y = net.forward(torch.FloatTensor(test_data), 0.0, L, lmax)
            return float(F.cross_entropy(y, torch.LongTensor(test_labels.astype(np.int64))))

    model = _Net(net, dropout_value, L, lmax)

    def loss_fn(y, y_target):
        return net.loss(y, y_target, l2_regularization)

    batch = (torch.FloatTensor(train_data[:batch_size]), torch.LongTensor(train_labels[:batch_size].astype(np.int64)))
    return Program(name="spectralgcn_mnist", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the Chebyshev basis [K, V, Fin*B] viewed straight to [B*V, Fin*K] without the permute: every row the linear
    # layer reads mixes vertices, examples and orders (classic view-for-permute slip).
    Bug("cheby_basis_viewed_not_permuted", functools.partial(_build, bug="cheby_basis_viewed_not_permuted"),
        "tensor_trace", ("cl1",)),
    # the L2 term subtracted: the objective rewards growing weights (classic sign slip).
    Bug("l2_sign_flipped", functools.partial(_build, bug="l2_sign_flipped"), "learning_ledger", ("OBJECTIVE",)),
    # optimizer.zero_grad() left out of the loop: gradients pile up across batches (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
