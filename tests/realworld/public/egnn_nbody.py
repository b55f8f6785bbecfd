# ruff: noqa: UP004, UP008, UP031, UP039, RUF059, B006, B008, PIE808, C408, TRY002
"""E(n) Equivariant Graph Neural Network (Satorras, Hoogeboom & Welling, ICML 2021) on the charged N-body system, the
``egnn_vel`` model of ``main_nbody.py``: every particle's speed embeds its node feature, each of the 4 ``E_GCL_vel``
layers runs an edge MLP on (h_i, h_j, |x_i - x_j|^2, charge product, initial squared distance), moves the coordinates
along the relative positions by a learned scalar per edge (mean over neighbours) plus a learned multiple of the
velocity, and updates h residually from the summed messages; the predicted coordinates are regressed on the
particles' positions a fixed time later with MSE, Adam (weight decay 1e-12).

Source: https://github.com/vgsatorras/egnn
Commit: e9ca6c0c3e1d30a7598efbd66034121b4af8dccc
Files: ``main_nbody.py`` (``main``, ``train``), ``n_body_system/model.py`` (``EGNN_vel``), ``models/gcl.py``
(``E_GCL``, ``E_GCL_vel``, ``unsorted_segment_sum``, ``unsorted_segment_mean``), ``n_body_system/dataset_nbody.py``
(``NBodyDataset``), ``n_body_system/dataset/synthetic_sim.py`` (``ChargedParticlesSim``),
``n_body_system/dataset/generate_dataset.py``
License: MIT (Copyright (c) 2021 Victor Garcia Satorras; full text in LICENSES/vgsatorras-egnn.txt)
Domain: GNN in plain torch, node-level regression on fully connected particle graphs (E(n)-equivariant message
passing)

Kept as written: ``E_GCL`` / ``E_GCL_vel`` (edge, node and coordinate models, the coordinate MLP's last layer
xavier-initialized with gain 0.001, the clamp at +-100, ``recurrent=True``, ``norm_diff=False``, ``tanh=False``,
SiLU), ``EGNN_vel`` (in_node_nf 1, in_edge_nf 2, n_layers 4), the segment sum/mean, ``NBodyDataset``'s preprocessing
(coordinates transposed to ``[node, 3]``, fully connected edges without self loops, the charge products as edge
attributes), ``get_edges`` (the graph's edges offset by ``n_nodes * i`` for each graph of the batch), ``train``'s
loop body for ``egnn_vel`` (speeds as node features, squared distances concatenated to the edge attributes and
detached, ``loss_mse(loc_pred, loc_end)``, zero_grad / backward / step), ``ChargedParticlesSim`` (leapfrog with
clipped Coulomb forces, charges +-1, initial speed 0.5).

Deviations from the original:
- the ``.npy`` files of ``generate_dataset.py`` (10000 simulations of 5000 leapfrog steps, sampled every 100) are
  not here: ``ChargedParticlesSim.sample_trajectory`` generates them when the program is built, seeded from
  ``seed`` (``np.random.seed`` as the script does), 64 training and 16 validation simulations of 500 steps sampled
  every 10 (``frame_0``, ``frame_T`` = 30, 40 as for ``nbody_small``: the horizon is 100 leapfrog steps instead of
  1000), so that building takes a few seconds; the simulator's ``print(self.loc_std)`` is dropped;
- sizes for 2 CPU cores: batch_size 100 -> 32, nf 64 -> 32, max_training_samples 3000 -> 64; lr 5e-4 -> 1e-3
  so that the 30 steps of the self-check show learning;
- argparse is replaced by a small ``args`` namespace with the defaults listed above; CUDA, timing, the json log and
  the test split are dropped; the model branch is ``egnn_vel`` (the default) only;
- one ``train_step`` is one iteration of ``train``'s loop over batches (the shuffled loader restarted when it runs
  out); ``eval_fn`` is ``train(..., backprop=False)`` on the validation simulations (mean MSE); the Program's batch
  is ``((nodes, loc, edges, vel, edge_attr), loc_end)`` of the first batch, its ``loss_fn`` ``nn.MSELoss()``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
from torch import nn, optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# (port) argparse defaults of main_nbody.py, sizes as listed in the docstring
args = types.SimpleNamespace(batch_size=32, lr=1e-3, nf=32, model='egnn_vel', n_layers=4,
                             max_training_samples=64, dataset="nbody_small", weight_decay=1e-12,
                             norm_diff=False, tanh=False)
device = torch.device("cpu")
loss_mse = nn.MSELoss()
SIM_LENGTH, SAMPLE_FREQ = 500, 10  # (port) 5000, 100


# models/gcl.py
class E_GCL(nn.Module):
    """Graph Neural Net with global state and fixed number of nodes per graph.
    Args:
          hidden_dim: Number of hidden units.
          num_nodes: Maximum number of nodes (for self-attentive pooling).
          global_agg: Global aggregation function ('attn' or 'sum').
          temp: Softmax temperature.
    """

    def __init__(self, input_nf, output_nf, hidden_nf, edges_in_d=0, nodes_att_dim=0, act_fn=nn.ReLU(), recurrent=True, coords_weight=1.0, attention=False, clamp=False, norm_diff=False, tanh=False):
        super(E_GCL, self).__init__()
        input_edge = input_nf * 2
        self.coords_weight = coords_weight
        self.recurrent = recurrent
        self.attention = attention
        self.norm_diff = norm_diff
        self.tanh = tanh
        edge_coords_nf = 1


        self.edge_mlp = nn.Sequential(
            nn.Linear(input_edge + edge_coords_nf + edges_in_d, hidden_nf),
            act_fn,
            nn.Linear(hidden_nf, hidden_nf),
            act_fn)

        self.node_mlp = nn.Sequential(
            nn.Linear(hidden_nf + input_nf + nodes_att_dim, hidden_nf),
            act_fn,
            nn.Linear(hidden_nf, output_nf))

        layer = nn.Linear(hidden_nf, 1, bias=False)
        torch.nn.init.xavier_uniform_(layer.weight, gain=0.001)

        self.clamp = clamp
        coord_mlp = []
        coord_mlp.append(nn.Linear(hidden_nf, hidden_nf))
        coord_mlp.append(act_fn)
        coord_mlp.append(layer)
        if self.tanh:
            coord_mlp.append(nn.Tanh())
            self.coords_range = nn.Parameter(torch.ones(1))*3
        self.coord_mlp = nn.Sequential(*coord_mlp)


        if self.attention:
            self.att_mlp = nn.Sequential(
                nn.Linear(hidden_nf, 1),
                nn.Sigmoid())

        #if recurrent:
        #    self.gru = nn.GRUCell(hidden_nf, hidden_nf)


    def edge_model(self, source, target, radial, edge_attr):
        if edge_attr is None:  # Unused.
            out = torch.cat([source, target, radial], dim=1)
        else:
            out = torch.cat([source, target, radial, edge_attr], dim=1)
        out = self.edge_mlp(out)
        if self.attention:
            att_val = self.att_mlp(out)
            out = out * att_val
        return out

    def node_model(self, x, edge_index, edge_attr, node_attr):
        row, col = edge_index
        agg = unsorted_segment_sum(edge_attr, row, num_segments=x.size(0))
        if node_attr is not None:
            agg = torch.cat([x, agg, node_attr], dim=1)
        else:
            agg = torch.cat([x, agg], dim=1)
        out = self.node_mlp(agg)
        if self.recurrent:
            out = x + out
        return out, agg

    def coord_model(self, coord, edge_index, coord_diff, edge_feat):
        row, col = edge_index
        trans = coord_diff * self.coord_mlp(edge_feat)
        trans = torch.clamp(trans, min=-100, max=100) #This is never activated but just in case it case it explosed it may save the train
        agg = unsorted_segment_mean(trans, row, num_segments=coord.size(0))
        coord += agg*self.coords_weight
        return coord


    def coord2radial(self, edge_index, coord):
        row, col = edge_index
        coord_diff = coord[row] - coord[col]
        radial = torch.sum((coord_diff)**2, 1).unsqueeze(1)

        if self.norm_diff:
            norm = torch.sqrt(radial) + 1
            coord_diff = coord_diff/(norm)

        return radial, coord_diff

    def forward(self, h, edge_index, coord, edge_attr=None, node_attr=None):
        row, col = edge_index
        radial, coord_diff = self.coord2radial(edge_index, coord)

        edge_feat = self.edge_model(h[row], h[col], radial, edge_attr)
        coord = self.coord_model(coord, edge_index, coord_diff, edge_feat)
        h, agg = self.node_model(h, edge_index, edge_feat, node_attr)
        # coord = self.node_coord_model(h, coord)
        # x = self.node_model(x, edge_index, x[col], u, batch)  # GCN
        return h, coord, edge_attr


class E_GCL_vel(E_GCL):
    """Graph Neural Net with global state and fixed number of nodes per graph.
    Args:
          hidden_dim: Number of hidden units.
          num_nodes: Maximum number of nodes (for self-attentive pooling).
          global_agg: Global aggregation function ('attn' or 'sum').
          temp: Softmax temperature.
    """


    def __init__(self, input_nf, output_nf, hidden_nf, edges_in_d=0, nodes_att_dim=0, act_fn=nn.ReLU(), recurrent=True, coords_weight=1.0, attention=False, norm_diff=False, tanh=False):
        E_GCL.__init__(self, input_nf, output_nf, hidden_nf, edges_in_d=edges_in_d, nodes_att_dim=nodes_att_dim, act_fn=act_fn, recurrent=recurrent, coords_weight=coords_weight, attention=attention, norm_diff=norm_diff, tanh=tanh)
        self.norm_diff = norm_diff
        self.coord_mlp_vel = nn.Sequential(
            nn.Linear(input_nf, hidden_nf),
            act_fn,
            nn.Linear(hidden_nf, 1))

    def forward(self, h, edge_index, coord, vel, edge_attr=None, node_attr=None):
        row, col = edge_index
        radial, coord_diff = self.coord2radial(edge_index, coord)

        edge_feat = self.edge_model(h[row], h[col], radial, edge_attr)
        coord = self.coord_model(coord, edge_index, coord_diff, edge_feat)


        coord += self.coord_mlp_vel(h) * vel
        h, agg = self.node_model(h, edge_index, edge_feat, node_attr)
        # coord = self.node_coord_model(h, coord)
        # x = self.node_model(x, edge_index, x[col], u, batch)  # GCN
        return h, coord, edge_attr


def unsorted_segment_sum(data, segment_ids, num_segments):
    """Custom PyTorch op to replicate TensorFlow's `unsorted_segment_sum`."""
    result_shape = (num_segments, data.size(1))
    result = data.new_full(result_shape, 0)  # Init empty result tensor.
    segment_ids = segment_ids.unsqueeze(-1).expand(-1, data.size(1))
    result.scatter_add_(0, segment_ids, data)
    return result


def unsorted_segment_mean(data, segment_ids, num_segments):
    result_shape = (num_segments, data.size(1))
    segment_ids = segment_ids.unsqueeze(-1).expand(-1, data.size(1))
    result = data.new_full(result_shape, 0)  # Init empty result tensor.
    count = data.new_full(result_shape, 0)
    result.scatter_add_(0, segment_ids, data)
    count.scatter_add_(0, segment_ids, torch.ones_like(data))
    return result / count.clamp(min=1)


# n_body_system/model.py
class EGNN_vel(nn.Module):
    def __init__(self, in_node_nf, in_edge_nf, hidden_nf, device='cpu', act_fn=nn.SiLU(), n_layers=4, coords_weight=1.0, recurrent=False, norm_diff=False, tanh=False):
        super(EGNN_vel, self).__init__()
        self.hidden_nf = hidden_nf
        self.device = device
        self.n_layers = n_layers
        #self.reg = reg
        ### Encoder
        #self.add_module("gcl_0", E_GCL(in_node_nf, self.hidden_nf, self.hidden_nf, edges_in_d=in_edge_nf, act_fn=act_fn, recurrent=False, coords_weight=coords_weight))
        self.embedding = nn.Linear(in_node_nf, self.hidden_nf)
        for i in range(0, n_layers):
            self.add_module("gcl_%d" % i, E_GCL_vel(self.hidden_nf, self.hidden_nf, self.hidden_nf, edges_in_d=in_edge_nf, act_fn=act_fn, coords_weight=coords_weight, recurrent=recurrent, norm_diff=norm_diff, tanh=tanh))
        self.to(self.device)


    def forward(self, h, x, edges, vel, edge_attr):
        h = self.embedding(h)
        for i in range(0, self.n_layers):
            h, x, _ = self._modules["gcl_%d" % i](h, edges, x, vel, edge_attr=edge_attr)
        return x


# n_body_system/dataset/synthetic_sim.py
class ChargedParticlesSim(object):
    def __init__(self, n_balls=5, box_size=5., loc_std=1., vel_norm=0.5,
                 interaction_strength=1., noise_var=0.):
        self.n_balls = n_balls
        self.box_size = box_size
        self.loc_std = loc_std
        self.loc_std = loc_std * (float(n_balls)/5.) ** (1/3)
        self.vel_norm = vel_norm
        self.interaction_strength = interaction_strength
        self.noise_var = noise_var


        self._charge_types = np.array([-1., 0., 1.])
        self._delta_T = 0.001
        self._max_F = 0.1 / self._delta_T
        self.dim = 3

    def _l2(self, A, B):
        """
        Input: A is a Nxd matrix
               B is a Mxd matirx
        Output: dist is a NxM matrix where dist[i,j] is the square norm
            between A[i,:] and B[j,:]
        i.e. dist[i,j] = ||A[i,:]-B[j,:]||^2
        """
        A_norm = (A ** 2).sum(axis=1).reshape(A.shape[0], 1)
        B_norm = (B ** 2).sum(axis=1).reshape(1, B.shape[0])
        dist = A_norm + B_norm - 2 * A.dot(B.transpose())
        return dist

    def _clamp(self, loc, vel):
        '''
        :param loc: 2xN location at one time stamp
        :param vel: 2xN velocity at one time stamp
        :return: location and velocity after hiting walls and returning after
            elastically colliding with walls
        '''
        assert (np.all(loc < self.box_size * 3))
        assert (np.all(loc > -self.box_size * 3))

        over = loc > self.box_size
        loc[over] = 2 * self.box_size - loc[over]
        assert (np.all(loc <= self.box_size))

        # assert(np.all(vel[over]>0))
        vel[over] = -np.abs(vel[over])

        under = loc < -self.box_size
        loc[under] = -2 * self.box_size - loc[under]
        # assert (np.all(vel[under] < 0))
        assert (np.all(loc >= -self.box_size))
        vel[under] = np.abs(vel[under])

        return loc, vel

    def sample_trajectory(self, T=10000, sample_freq=10,
                          charge_prob=[1. / 2, 0, 1. / 2]):
        n = self.n_balls
        assert (T % sample_freq == 0)
        T_save = int(T / sample_freq - 1)
        diag_mask = np.ones((n, n), dtype=bool)
        np.fill_diagonal(diag_mask, 0)
        counter = 0
        # Sample edges
        charges = np.random.choice(self._charge_types, size=(self.n_balls, 1),
                                   p=charge_prob)
        edges = charges.dot(charges.transpose())
        # Initialize location and velocity
        loc = np.zeros((T_save, self.dim, n))
        vel = np.zeros((T_save, self.dim, n))
        loc_next = np.random.randn(self.dim, n) * self.loc_std
        vel_next = np.random.randn(self.dim, n)
        v_norm = np.sqrt((vel_next ** 2).sum(axis=0)).reshape(1, -1)
        vel_next = vel_next * self.vel_norm / v_norm
        loc[0, :, :], vel[0, :, :] = self._clamp(loc_next, vel_next)

        # disables division by zero warning, since I fix it with fill_diagonal
        with np.errstate(divide='ignore'):
            # half step leapfrog
            l2_dist_power3 = np.power(
                self._l2(loc_next.transpose(), loc_next.transpose()), 3. / 2.)

            # size of forces up to a 1/|r| factor
            # since I later multiply by an unnormalized r vector
            forces_size = self.interaction_strength * edges / l2_dist_power3
            np.fill_diagonal(forces_size,
                             0)  # self forces are zero (fixes division by zero)
            assert (np.abs(forces_size[diag_mask]).min() > 1e-10)
            F = (forces_size.reshape(1, n, n) *
                 np.concatenate((
                     np.subtract.outer(loc_next[0, :],
                                       loc_next[0, :]).reshape(1, n, n),
                     np.subtract.outer(loc_next[1, :],
                                       loc_next[1, :]).reshape(1, n, n),
                     np.subtract.outer(loc_next[2, :],
                                       loc_next[2, :]).reshape(1, n, n)))).sum(axis=-1)
            F[F > self._max_F] = self._max_F
            F[F < -self._max_F] = -self._max_F

            vel_next += self._delta_T * F
            # run leapfrog
            for i in range(1, T):
                loc_next += self._delta_T * vel_next
                #loc_next, vel_next = self._clamp(loc_next, vel_next)

                if i % sample_freq == 0:
                    loc[counter, :, :], vel[counter, :, :] = loc_next, vel_next
                    counter += 1

                l2_dist_power3 = np.power(
                    self._l2(loc_next.transpose(), loc_next.transpose()),
                    3. / 2.)
                forces_size = self.interaction_strength * edges / l2_dist_power3
                np.fill_diagonal(forces_size, 0)
                # assert (np.abs(forces_size[diag_mask]).min() > 1e-10)

                F = (forces_size.reshape(1, n, n) *
                     np.concatenate((
                         np.subtract.outer(loc_next[0, :],
                                           loc_next[0, :]).reshape(1, n, n),
                         np.subtract.outer(loc_next[1, :],
                                           loc_next[1, :]).reshape(1, n, n),
                         np.subtract.outer(loc_next[2, :],
                                           loc_next[2, :]).reshape(1, n, n)
                     ))).sum(axis=-1)
                F[F > self._max_F] = self._max_F
                F[F < -self._max_F] = -self._max_F
                vel_next += self._delta_T * F
            # Add noise to observations
            loc += np.random.randn(T_save, self.dim, self.n_balls) * self.noise_var
            vel += np.random.randn(T_save, self.dim, self.n_balls) * self.noise_var
            return loc, vel, edges, charges


# n_body_system/dataset/generate_dataset.py
def generate_dataset(sim, num_sims, length, sample_freq):
    loc_all = list()
    vel_all = list()
    edges_all = list()
    charges_all = list()
    for i in range(num_sims):
        loc, vel, edges, charges = sim.sample_trajectory(T=length,
                                                sample_freq=sample_freq)
        loc_all.append(loc)
        vel_all.append(vel)
        edges_all.append(edges)
        charges_all.append(charges)

    charges_all = np.stack(charges_all)
    loc_all = np.stack(loc_all)
    vel_all = np.stack(vel_all)
    edges_all = np.stack(edges_all)

    return loc_all, vel_all, edges_all, charges_all


# n_body_system/dataset_nbody.py
class NBodyDataset():
    """
    NBodyDataset

    """
    def __init__(self, arrays, partition='train', max_samples=1e8, dataset_name="se3_transformer", bug=None):
        self.partition = partition
        self.dataset_name = dataset_name
        self.bug = bug
        self.max_samples = int(max_samples)
        self.data, self.edges = self.load(arrays)

    def load(self, arrays):
        loc, vel, edges, charges = arrays  # (port) the arrays generate_dataset.py would have saved

        loc, vel, edge_attr, edges, charges = self.preprocess(loc, vel, edges, charges)
        return (loc, vel, edge_attr, charges), edges


    def preprocess(self, loc, vel, edges, charges):
        # cast to torch and swap n_nodes <--> n_features dimensions
        loc, vel = torch.Tensor(loc).transpose(2, 3), torch.Tensor(vel).transpose(2, 3)
        n_nodes = loc.size(2)
        loc = loc[0:self.max_samples, :, :, :]  # limit number of samples
        vel = vel[0:self.max_samples, :, :, :]  # speed when starting the trajectory
        charges = charges[0:self.max_samples]
        edge_attr = []

        #Initialize edges and edge_attributes
        rows, cols = [], []
        for i in range(n_nodes):
            for j in range(n_nodes):
                if i != j:
                    edge_attr.append(edges[:, i, j])
                    rows.append(i)
                    cols.append(j)
        edges = [rows, cols]
        edge_attr = torch.Tensor(np.array(edge_attr)).transpose(0, 1).unsqueeze(2) # swap n_nodes <--> batch_size and add nf dimension

        return torch.Tensor(loc), torch.Tensor(vel), torch.Tensor(edge_attr), edges, torch.Tensor(charges)

    def get_n_nodes(self):
        return self.data[0].size(1)

    def __getitem__(self, i):
        loc, vel, edge_attr, charges = self.data
        loc, vel, edge_attr, charges = loc[i], vel[i], edge_attr[i], charges[i]

        if self.dataset_name == "nbody":
            frame_0, frame_T = 6, 8
        elif self.dataset_name == "nbody_small":
            frame_0, frame_T = 30, 40
        elif self.dataset_name == "nbody_small_out_dist":
            frame_0, frame_T = 20, 30
        else:
            raise Exception("Wrong dataset partition %s" % self.dataset_name)

        if self.bug == "target_is_start_frame":
            return loc[frame_0], vel[frame_0], edge_attr, charges, loc[frame_0]
        return loc[frame_0], vel[frame_0], edge_attr, charges, loc[frame_T]

    def __len__(self):
        return len(self.data[0])

    def get_edges(self, batch_size, n_nodes):
        edges = [torch.LongTensor(self.edges[0]), torch.LongTensor(self.edges[1])]
        if batch_size == 1:
            return edges
        elif batch_size > 1:
            rows, cols = [], []
            for i in range(batch_size):
                if self.bug == "edges_not_offset":
                    rows.append(edges[0])
                    cols.append(edges[1])
                else:
                    rows.append(edges[0] + n_nodes * i)
                    cols.append(edges[1] + n_nodes * i)
            edges = [torch.cat(rows), torch.cat(cols)]
        return edges


_DATA = {}


def _arrays(seed):
    if seed not in _DATA:
        np.random.seed(seed)
        sim = ChargedParticlesSim(noise_var=0.0, n_balls=5, vel_norm=0.5)
        _DATA[seed] = (generate_dataset(sim, args.max_training_samples, SIM_LENGTH, SAMPLE_FREQ),
                       generate_dataset(sim, 16, SIM_LENGTH, SAMPLE_FREQ))
    return _DATA[seed]


def _inputs(loader, data):
    """The lines of ``train`` that turn a loader batch into the model's inputs (egnn_vel branch)."""
    batch_size, n_nodes, _ = data[0].size()
    data = [d.to(device) for d in data]
    data = [d.view(-1, d.size(2)) for d in data]
    loc, vel, edge_attr, charges, loc_end = data

    edges = loader.dataset.get_edges(batch_size, n_nodes)
    edges = [edges[0].to(device), edges[1].to(device)]
    nodes = torch.sqrt(torch.sum(vel ** 2, dim=1)).unsqueeze(1).detach()
    rows, cols = edges
    loc_dist = torch.sum((loc[rows] - loc[cols])**2, 1).unsqueeze(1)  # relative distances among locations
    edge_attr = torch.cat([edge_attr, loc_dist], 1).detach()  # concatenate all edge properties
    return (nodes, loc.detach(), edges, vel, edge_attr), loc_end, batch_size


def _build(seed, bug=None):
    torch.manual_seed(seed)
    train_arrays, val_arrays = _arrays(seed)
    dataset_train = NBodyDataset(train_arrays, partition='train', dataset_name=args.dataset,
                                 max_samples=args.max_training_samples, bug=bug)
    gen = torch.Generator().manual_seed(seed)
    loader_train = torch.utils.data.DataLoader(dataset_train, batch_size=args.batch_size, shuffle=True, drop_last=True,
                                               generator=gen)
    dataset_val = NBodyDataset(val_arrays, partition='val', dataset_name="nbody_small")
    loader_val = torch.utils.data.DataLoader(dataset_val, batch_size=args.batch_size, shuffle=False, drop_last=False)

    model = EGNN_vel(in_node_nf=1, in_edge_nf=2, hidden_nf=args.nf, device=device, n_layers=args.n_layers, recurrent=True, norm_diff=args.norm_diff, tanh=args.tanh)
    optimizer = optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)

    st = {"it": iter(loader_train)}

    def train_step():
        model.train()
        try:
            data = next(st["it"])
        except StopIteration:
            st["it"] = iter(loader_train)
            data = next(st["it"])
        batch_size, n_nodes, _ = data[0].size()
        data = [d.to(device) for d in data]
        data = [d.view(-1, d.size(2)) for d in data]
        loc, vel, edge_attr, charges, loc_end = data

        edges = loader_train.dataset.get_edges(batch_size, n_nodes)
        edges = [edges[0].to(device), edges[1].to(device)]

        if bug != "zero_grad_dropped":
            optimizer.zero_grad()

        nodes = torch.sqrt(torch.sum(vel ** 2, dim=1)).unsqueeze(1).detach()
        rows, cols = edges
        loc_dist = torch.sum((loc[rows] - loc[cols])**2, 1).unsqueeze(1)  # relative distances among locations
        edge_attr = torch.cat([edge_attr, loc_dist], 1).detach()  # concatenate all edge properties
        loc_pred = model(nodes, loc.detach(), edges, vel, edge_attr)

        loss = loss_mse(loc_pred, loc_end)
        loss.backward()
        optimizer.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        was = model.training
        model.eval()
        res = {'loss': 0, 'counter': 0}
        with torch.no_grad():
            for data in loader_val:
                inputs, loc_end, batch_size = _inputs(loader_val, data)
                loc_pred = model(*inputs)
                loss = loss_mse(loc_pred, loc_end)
                res['loss'] += loss.item()*batch_size
                res['counter'] += batch_size
        model.train(was)
        return res['loss'] / res['counter']

    first = next(iter(torch.utils.data.DataLoader(dataset_train, batch_size=args.batch_size, shuffle=False)))
    inputs, loc_end, _ = _inputs(loader_train, first)
    batch = (inputs, loc_end)

    return Program(name="egnn_nbody", model=model, batch=batch, loss_fn=loss_mse, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic graph-batching slip: get_edges stacks the first graph's edges batch_size times without the
    # n_nodes * i offset, so every message of the batch flows among the first graph's particles and the other
    # graphs' particles move by their velocity term alone.
    Bug("edges_not_offset", functools.partial(_build, bug="edges_not_offset"), "learning_ledger", ("DEPENDENCY",)),
    # classic: __getitem__ returns loc[frame_0] as the target, the model learns the identity instead of the dynamics.
    Bug("target_is_start_frame", functools.partial(_build, bug="target_is_start_frame"), "learning_ledger",
        ("TASK",)),
    # classic: optimizer.zero_grad() left out of the loop: gradients pile up across batches.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
