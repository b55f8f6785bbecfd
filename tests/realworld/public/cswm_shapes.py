"""Contrastively-trained Structured World Models (C-SWM, Kipf, van der Pol & Welling, ICLR 2020) from
tkipf/c-swm, on 2D Shapes: a CNN object extractor gives one feature map per object slot, an MLP encodes each slot
into a 2-d abstract state, a graph neural network over the fully connected object graph (edge MLP, summed messages,
node MLP with the one-hot action attached to the acted-on object) predicts each object's state change, trained with
the energy-based hinge loss (the transition energy of the observed next state plus a hinge on the energy of a state
from another sample of the batch); Adam.

Source: https://github.com/tkipf/c-swm
Commit: e944b24bcaa42d9ee847f30163437a50f0237aa0
Files: ``train.py``, ``modules.py``, ``utils.py``, ``envs/block_pushing.py``, ``envs/__init__.py``,
``data_gen/env.py``, README (the 2D Shapes commands)
License: MIT (Copyright (c) 2019 Thomas Kipf; full text in LICENSES/tkipf-c-swm.txt)
Domain: GNN in plain torch / model-based RL (object-factored latent transition model, message passing over a fully
connected object graph, contrastive hinge loss on random-agent transitions)

Kept as written: ``ContrastiveSWM`` (``energy``, ``transition_loss``, ``contrastive_loss`` with the negatives drawn by
``np.random.permutation``), ``TransitionGNN`` (edge and node MLPs, the fully connected edge list built once per batch
size, ``unsorted_segment_sum``, ``to_one_hot(action, action_dim * num_nodes)``), ``EncoderCNNSmall``,
``EncoderMLP``, ``utils.weights_init``, ``get_act_fn``, ``to_one_hot``, ``unsorted_segment_sum``,
``StateTransitionsDataset`` (``__getitem__`` over ``idx2episode``), ``BlockPushing``'s game logic (random
non-overlapping placement, ``valid_pos`` with collisions, ``translate``, ``step``: ``action % 4`` a direction,
``action // 4`` the object) and its ``shapes`` rendering (circle, triangle, square by object index, Set1 colours),
``data_gen/env.py``'s random-agent loop (obs, action, next_obs per step), ``train.py``'s defaults for 2D Shapes
(``--encoder small``, sigma 0.5, hinge 1, embedding 2, action_dim 4, 5 objects, lr 5e-4) and its loop body
(zero_grad, ``model.contrastive_loss(*data_batch)``, backward, step).

Deviations from the original:
- gym, skimage, h5py and the ``data/shapes_train.h5`` file are not here: ``BlockPushing`` is written out without
  gym (``seeding.np_random`` -> ``np.random.default_rng(seed)``; the placement draws from the seeded ``np.random``
  as written), the shapes are rasterized in numpy (the circle as ``skimage.draw.circle``'s disk, the triangle and
  the square filled over their polygons' pixel rows), the Set1 colours written out; the replay buffer is kept in
  memory instead of an h5 file.
- sizes for 2 CPU cores: 1000 episodes of 100 steps -> 20 episodes of 100 steps (2000 transitions), ``batch_size``
  1024 -> 128, ``hidden_dim`` 512 -> 128 (so the CNN has 8 channels); the DataLoader has no workers and shuffles
  with a ``torch.Generator(seed)``; the seed is ``seed`` (42 in ``train.py``).
- the logging, the metadata pickle and the checkpoint are dropped; ``train_step`` is one batch of the epoch loop
  (the next epoch starts when the loader runs out) and returns the batch's loss; ``eval_fn`` is the contrastive loss
  over 5 held-out episodes (the ``ShapesEval-v0`` buffer's role, without ``eval.py``'s ranking metrics).
- the Program's ``batch`` is one training batch as ``(obs, (action, next_obs))``, its ``loss_fn``
  ``contrastive_loss``'s lines given the states ``model(obs)``; ``model`` is the ``ContrastiveSWM``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, C408, RUF059

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn
from torch.utils import data

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

_SET1 = [(0.8941, 0.102, 0.1098), (0.2157, 0.4941, 0.7216), (0.302, 0.6863, 0.2902), (0.5961, 0.3059, 0.6392),
         (1.0, 0.498, 0.0), (1.0, 1.0, 0.2), (0.651, 0.3373, 0.1569), (0.9686, 0.5059, 0.749), (0.6, 0.6, 0.6)]


# ---------------------------------------------------------------------------------------------------- utils.py
def weights_init(m):
    if isinstance(m, nn.Conv2d):
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)


def get_act_fn(act_fn):
    if act_fn == 'relu':
        return nn.ReLU()
    elif act_fn == 'leaky_relu':
        return nn.LeakyReLU()
    elif act_fn == 'elu':
        return nn.ELU()
    elif act_fn == 'sigmoid':
        return nn.Sigmoid()
    elif act_fn == 'softplus':
        return nn.Softplus()
    else:
        raise ValueError('Invalid argument for `act_fn`.')


def to_one_hot(indices, max_index):
    """Get one-hot encoding of index tensors."""
    zeros = torch.zeros(
        indices.size()[0], max_index, dtype=torch.float32,
        device=indices.device)
    return zeros.scatter_(1, indices.unsqueeze(1), 1)


def to_float(np_array):
    """Convert numpy array to float32."""
    return np.array(np_array, dtype=np.float32)


def unsorted_segment_sum(tensor, segment_ids, num_segments):
    """Custom PyTorch op to replicate TensorFlow's `unsorted_segment_sum`."""
    result_shape = (num_segments, tensor.size(1))
    result = tensor.new_full(result_shape, 0)  # Init empty result tensor.
    segment_ids = segment_ids.unsqueeze(-1).expand(-1, tensor.size(1))
    result.scatter_add_(0, segment_ids, tensor)
    return result


class StateTransitionsDataset(data.Dataset):
    """Create dataset of (o_t, a_t, o_{t+1}) transitions from replay buffer."""

    def __init__(self, experience_buffer, bug=None):
        self.experience_buffer = experience_buffer  # (port) load_list_dict_h5py(hdf5_file)
        self.bug = bug

        # Build table for conversion between linear idx -> episode/step idx
        self.idx2episode = list()
        step = 0
        for ep in range(len(self.experience_buffer)):
            num_steps = len(self.experience_buffer[ep]['action'])
            idx_tuple = [(ep, idx) for idx in range(num_steps)]
            self.idx2episode.extend(idx_tuple)
            step += num_steps

        self.num_steps = step

    def __len__(self):
        return self.num_steps

    def __getitem__(self, idx):
        ep, step = self.idx2episode[idx]

        obs = to_float(self.experience_buffer[ep]['obs'][step])
        if self.bug == "action_of_next_step":
            action = self.experience_buffer[ep]['action'][min(step + 1, len(self.experience_buffer[ep]['action']) - 1)]
        else:
            action = self.experience_buffer[ep]['action'][step]
        next_obs = to_float(self.experience_buffer[ep]['next_obs'][step])

        return obs, action, next_obs


# -------------------------------------------------------------------------------------------------- modules.py
class ContrastiveSWM(nn.Module):
    """Main module for a Contrastively-trained Structured World Model (C-SWM).

    Args:
        embedding_dim: Dimensionality of abstract state space.
        input_dims: Shape of input observation.
        hidden_dim: Number of hidden units in encoder and transition model.
        action_dim: Dimensionality of action space.
        num_objects: Number of object slots.
    """
    def __init__(self, embedding_dim, input_dims, hidden_dim, action_dim,
                 num_objects, hinge=1., sigma=0.5, encoder='large',
                 ignore_action=False, copy_action=False, bug=None):
        super(ContrastiveSWM, self).__init__()

        self.hidden_dim = hidden_dim
        self.embedding_dim = embedding_dim
        self.action_dim = action_dim
        self.num_objects = num_objects
        self.hinge = hinge
        self.sigma = sigma
        self.ignore_action = ignore_action
        self.copy_action = copy_action
        self.bug = bug

        self.pos_loss = 0
        self.neg_loss = 0

        num_channels = input_dims[0]
        width_height = input_dims[1:]

        if encoder == 'small':
            self.obj_extractor = EncoderCNNSmall(
                input_dim=num_channels,
                hidden_dim=hidden_dim // 16,
                num_objects=num_objects)
            # CNN image size changes
            width_height = np.array(width_height)
            width_height = width_height // 10
        else:
            raise ValueError(encoder)  # (port) only the small encoder of 2D Shapes

        self.obj_encoder = EncoderMLP(
            input_dim=np.prod(width_height),
            hidden_dim=hidden_dim,
            output_dim=embedding_dim,
            num_objects=num_objects)

        self.transition_model = TransitionGNN(
            input_dim=embedding_dim,
            hidden_dim=hidden_dim,
            action_dim=action_dim,
            num_objects=num_objects,
            ignore_action=ignore_action,
            copy_action=copy_action)

        self.width = width_height[0]
        self.height = width_height[1]

    def energy(self, state, action, next_state, no_trans=False):
        """Energy function based on normalized squared L2 norm."""

        norm = 0.5 / (self.sigma**2)

        if no_trans:
            diff = state - next_state
        else:
            pred_trans = self.transition_model(state, action)
            diff = state + pred_trans - next_state

        return norm * diff.pow(2).sum(2).mean(1)

    def transition_loss(self, state, action, next_state):
        return self.energy(state, action, next_state).mean()

    def contrastive_loss(self, obs, action, next_obs):

        objs = self.obj_extractor(obs)
        next_objs = self.obj_extractor(next_obs)

        state = self.obj_encoder(objs)
        next_state = self.obj_encoder(next_objs)

        # Sample negative state across episodes at random
        batch_size = state.size(0)
        perm = np.random.permutation(batch_size)
        if self.bug == "negatives_not_permuted":
            neg_state = state
        else:
            neg_state = state[perm]

        self.pos_loss = self.energy(state, action, next_state)
        zeros = torch.zeros_like(self.pos_loss)

        self.pos_loss = self.pos_loss.mean()
        self.neg_loss = torch.max(
            zeros, self.hinge - self.energy(
                state, action, neg_state, no_trans=True)).mean()

        loss = self.pos_loss + self.neg_loss

        return loss

    def forward(self, obs):
        return self.obj_encoder(self.obj_extractor(obs))


class TransitionGNN(torch.nn.Module):
    """GNN-based transition function."""
    def __init__(self, input_dim, hidden_dim, action_dim, num_objects,
                 ignore_action=False, copy_action=False, act_fn='relu'):
        super(TransitionGNN, self).__init__()

        self.input_dim = input_dim
        self.hidden_dim = hidden_dim
        self.num_objects = num_objects
        self.ignore_action = ignore_action
        self.copy_action = copy_action

        if self.ignore_action:
            self.action_dim = 0
        else:
            self.action_dim = action_dim

        self.edge_mlp = nn.Sequential(
            nn.Linear(input_dim*2, hidden_dim),
            get_act_fn(act_fn),
            nn.Linear(hidden_dim, hidden_dim),
            nn.LayerNorm(hidden_dim),
            get_act_fn(act_fn),
            nn.Linear(hidden_dim, hidden_dim))

        node_input_dim = hidden_dim + input_dim + self.action_dim

        self.node_mlp = nn.Sequential(
            nn.Linear(node_input_dim, hidden_dim),
            get_act_fn(act_fn),
            nn.Linear(hidden_dim, hidden_dim),
            nn.LayerNorm(hidden_dim),
            get_act_fn(act_fn),
            nn.Linear(hidden_dim, input_dim))

        self.edge_list = None
        self.batch_size = 0

    def _edge_model(self, source, target, edge_attr):
        del edge_attr  # Unused.
        out = torch.cat([source, target], dim=1)
        return self.edge_mlp(out)

    def _node_model(self, node_attr, edge_index, edge_attr):
        if edge_attr is not None:
            row, col = edge_index
            agg = unsorted_segment_sum(
                edge_attr, row, num_segments=node_attr.size(0))
            out = torch.cat([node_attr, agg], dim=1)
        else:
            out = node_attr
        return self.node_mlp(out)

    def _get_edge_list_fully_connected(self, batch_size, num_objects, cuda):
        # Only re-evaluate if necessary (e.g. if batch size changed).
        if self.edge_list is None or self.batch_size != batch_size:
            self.batch_size = batch_size

            # Create fully-connected adjacency matrix for single sample.
            adj_full = torch.ones(num_objects, num_objects)

            # Remove diagonal.
            adj_full -= torch.eye(num_objects)
            self.edge_list = adj_full.nonzero()

            # Copy `batch_size` times and add offset.
            self.edge_list = self.edge_list.repeat(batch_size, 1)
            offset = torch.arange(
                0, batch_size * num_objects, num_objects).unsqueeze(-1)
            offset = offset.expand(batch_size, num_objects * (num_objects - 1))
            offset = offset.contiguous().view(-1)
            self.edge_list += offset.unsqueeze(-1)

            # Transpose to COO format -> Shape: [2, num_edges].
            self.edge_list = self.edge_list.transpose(0, 1)

            if cuda:
                self.edge_list = self.edge_list.cuda()

        return self.edge_list

    def forward(self, states, action):

        cuda = states.is_cuda
        batch_size = states.size(0)
        num_nodes = states.size(1)

        # states: [batch_size (B), num_objects, embedding_dim]
        # node_attr: Flatten states tensor to [B * num_objects, embedding_dim]
        node_attr = states.view(-1, self.input_dim)

        edge_attr = None
        edge_index = None

        if num_nodes > 1:
            # edge_index: [B * (num_objects*[num_objects-1]), 2] edge list
            edge_index = self._get_edge_list_fully_connected(
                batch_size, num_nodes, cuda)

            row, col = edge_index
            edge_attr = self._edge_model(
                node_attr[row], node_attr[col], edge_attr)

        if not self.ignore_action:

            if self.copy_action:
                action_vec = to_one_hot(
                    action, self.action_dim).repeat(1, self.num_objects)
                action_vec = action_vec.view(-1, self.action_dim)
            else:
                action_vec = to_one_hot(
                    action, self.action_dim * num_nodes)
                action_vec = action_vec.view(-1, self.action_dim)

            # Attach action to each state
            node_attr = torch.cat([node_attr, action_vec], dim=-1)

        node_attr = self._node_model(
            node_attr, edge_index, edge_attr)

        # [batch_size, num_nodes, hidden_dim]
        return node_attr.view(batch_size, num_nodes, -1)


class EncoderCNNSmall(nn.Module):
    """CNN encoder, maps observation to obj-specific feature maps."""

    def __init__(self, input_dim, hidden_dim, num_objects, act_fn='sigmoid',
                 act_fn_hid='relu'):
        super(EncoderCNNSmall, self).__init__()
        self.cnn1 = nn.Conv2d(
            input_dim, hidden_dim, (10, 10), stride=10)
        self.cnn2 = nn.Conv2d(hidden_dim, num_objects, (1, 1), stride=1)
        self.ln1 = nn.BatchNorm2d(hidden_dim)
        self.act1 = get_act_fn(act_fn_hid)
        self.act2 = get_act_fn(act_fn)

    def forward(self, obs):
        h = self.act1(self.ln1(self.cnn1(obs)))
        return self.act2(self.cnn2(h))


class EncoderMLP(nn.Module):
    """MLP encoder, maps observation to latent state."""

    def __init__(self, input_dim, output_dim, hidden_dim, num_objects,
                 act_fn='relu'):
        super(EncoderMLP, self).__init__()

        self.num_objects = num_objects
        self.input_dim = input_dim

        self.fc1 = nn.Linear(self.input_dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, hidden_dim)
        self.fc3 = nn.Linear(hidden_dim, output_dim)

        self.ln = nn.LayerNorm(hidden_dim)

        self.act1 = get_act_fn(act_fn)
        self.act2 = get_act_fn(act_fn)

    def forward(self, ins):
        h_flat = ins.view(-1, self.num_objects, self.input_dim)
        h = self.act1(self.fc1(h_flat))
        h = self.act2(self.ln(self.fc2(h)))
        return self.fc3(h)


# ------------------------------------------------------------------------------------ envs/block_pushing.py
def _disk(r, c, radius, shape):
    """skimage.draw.circle(r, c, radius, shape): the pixels strictly inside the circle (port)."""
    rr, cc = np.mgrid[0:shape[0], 0:shape[1]]
    inside = (rr - r) ** 2 + (cc - c) ** 2 < radius ** 2
    return np.nonzero(inside)


def square(r0, c0, width, im_size):
    rr, cc = np.mgrid[r0:min(r0 + width, im_size[0]), c0:min(c0 + width, im_size[1])]  # (port) the polygon's fill
    return rr.ravel(), cc.ravel()


def triangle(r0, c0, width, im_size):
    rows, cols = [], []  # (port) the polygon [r0, r0+w, r0+w] x [c0+w//2, c0, c0+w] filled row by row
    for i in range(width):
        half = (i * (width // 2)) // width
        lo, hi = c0 + width // 2 - half, c0 + width // 2 + half + 1
        for c in range(max(lo, 0), min(hi, im_size[1])):
            if r0 + i < im_size[0]:
                rows.append(r0 + i)
                cols.append(c)
    return np.array(rows, dtype=int), np.array(cols, dtype=int)


class BlockPushing:
    """Gym environment for block pushing task."""

    def __init__(self, width=5, height=5, render_type='shapes', num_objects=5,
                 seed=None):
        self.width = width
        self.height = height
        self.render_type = render_type

        self.num_objects = num_objects
        self.num_actions = 4 * self.num_objects  # Move NESW

        self.colors = [c + (1.0,) for c in _SET1][:max(9, self.num_objects)]  # (port) utils.get_colors

        self.np_random = None
        self.game = None
        self.target = None

        # Initialize to pos outside of env for easier collision resolution.
        self.objects = [[-1, -1] for _ in range(self.num_objects)]

        # If True, then check for collisions and don't allow two
        #   objects to occupy the same position.
        self.collisions = True

        self.seed(seed)
        self.reset()

    def seed(self, seed=None):
        self.np_random = np.random.default_rng(seed)  # (port) gym's seeding.np_random
        return [seed]

    def render(self):
        if self.render_type == 'shapes':
            im = np.zeros((self.width*10, self.height*10, 3), dtype=np.float32)
            for idx, pos in enumerate(self.objects):
                if idx % 3 == 0:
                    rr, cc = _disk(
                        pos[0]*10 + 5, pos[1]*10 + 5, 5, im.shape)
                    im[rr, cc, :] = self.colors[idx][:3]
                elif idx % 3 == 1:
                    rr, cc = triangle(
                        pos[0]*10, pos[1]*10, 10, im.shape)
                    im[rr, cc, :] = self.colors[idx][:3]
                else:
                    rr, cc = square(
                        pos[0]*10, pos[1]*10, 10, im.shape)
                    im[rr, cc, :] = self.colors[idx][:3]
            return im.transpose([2, 0, 1])
        raise ValueError(self.render_type)

    def get_state(self):
        im = np.zeros(
            (self.num_objects, self.width, self.height), dtype=np.int32)
        for idx, pos in enumerate(self.objects):
            im[idx, pos[0], pos[1]] = 1
        return im

    def reset(self):

        self.objects = [[-1, -1] for _ in range(self.num_objects)]

        # Randomize object position.
        for i in range(len(self.objects)):

            # Resample to ensure objects don't fall on same spot.
            while not self.valid_pos(self.objects[i], i):
                self.objects[i] = [
                    np.random.choice(np.arange(self.width)),
                    np.random.choice(np.arange(self.height))
                ]

        state_obs = (self.get_state(), self.render())
        return state_obs

    def valid_pos(self, pos, obj_id):
        """Check if position is valid."""
        if pos[0] < 0 or pos[0] >= self.width:
            return False
        if pos[1] < 0 or pos[1] >= self.height:
            return False

        if self.collisions:
            for idx, obj_pos in enumerate(self.objects):
                if idx == obj_id:
                    continue

                if pos[0] == obj_pos[0] and pos[1] == obj_pos[1]:
                    return False

        return True

    def valid_move(self, obj_id, offset):
        """Check if move is valid."""
        old_pos = self.objects[obj_id]
        new_pos = [p + o for p, o in zip(old_pos, offset)]
        return self.valid_pos(new_pos, obj_id)

    def translate(self, obj_id, offset):
        """"Translate object pixel.

        Args:
            obj_id: ID of object.
            offset: (x, y) tuple of offsets.
        """

        if self.valid_move(obj_id, offset):
            self.objects[obj_id][0] += offset[0]
            self.objects[obj_id][1] += offset[1]

    def step(self, action):

        done = False
        reward = 0

        directions = [(-1, 0), (0, 1), (1, 0), (0, -1)]

        direction = action % 4
        obj = action // 4
        self.translate(obj, directions[direction])

        state_obs = (self.get_state(), self.render())

        return state_obs, reward, done, None


# ------------------------------------------------------------------------------------------- data_gen/env.py
def random_agent_buffer(env, rng, episode_count, max_episode_steps):
    """The random agent's loop (``TimeLimit`` ends each episode after ``max_episode_steps``)."""
    replay_buffer = []
    for i in range(episode_count):

        replay_buffer.append({
            'obs': [],
            'action': [],
            'next_obs': [],
        })

        ob = env.reset()
        for _t in range(max_episode_steps):
            replay_buffer[i]['obs'].append(ob[1])

            action = int(rng.integers(env.num_actions))  # agent.act: action_space.sample()
            ob, reward, done, _ = env.step(action)

            replay_buffer[i]['action'].append(action)
            replay_buffer[i]['next_obs'].append(ob[1])
    return replay_buffer


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    env = BlockPushing(render_type='shapes', seed=seed)
    train_buffer = random_agent_buffer(env, rng, 20, 100)  # (port) 1000 episodes
    eval_buffer = random_agent_buffer(env, rng, 5, 10)

    batch_size, learning_rate = 128, 5e-4  # (port) 1024
    dataset = StateTransitionsDataset(train_buffer, bug=bug)
    train_loader = data.DataLoader(
        dataset, batch_size=batch_size, shuffle=True, num_workers=0,
        generator=torch.Generator().manual_seed(seed))

    # Get data sample
    obs = next(iter(data.DataLoader(dataset, batch_size=batch_size, shuffle=False)))[0]
    input_shape = obs[0].size()

    model = ContrastiveSWM(
        embedding_dim=2,
        hidden_dim=128,  # (port) 512
        action_dim=4,
        input_dims=input_shape,
        num_objects=5,
        sigma=0.5,
        hinge=1.,
        ignore_action=False,
        copy_action=False,
        encoder='small', bug=bug)

    model.apply(weights_init)

    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=learning_rate)

    st = {"it": None}

    def train_step():
        if st["it"] is None:
            model.train()
            st["it"] = iter(train_loader)
        try:
            data_batch = next(st["it"])
        except StopIteration:
            st["it"] = iter(train_loader)
            data_batch = next(st["it"])
        if bug != "no_zero_grad":
            optimizer.zero_grad()

        loss = model.contrastive_loss(*data_batch)

        loss.backward()
        optimizer.step()
        return loss.item()

    eval_loader = data.DataLoader(StateTransitionsDataset(eval_buffer), batch_size=50, shuffle=False)

    def eval_fn(model, _batch=None):
        was = model.training
        model.eval()
        total, n = 0.0, 0
        with torch.no_grad():
            for data_batch in eval_loader:
                total += float(model.contrastive_loss(*data_batch)) * len(data_batch[0])
                n += len(data_batch[0])
        model.train(was)
        return total / n

    def loss_fn(state, target):
        # contrastive_loss from the states model(obs) gives, the target being (action, next_obs)
        action, next_obs = target
        next_state = model(next_obs)
        perm = np.random.permutation(state.size(0))
        neg_state = state if bug == "negatives_not_permuted" else state[perm]
        pos_loss = model.energy(state, action, next_state)
        zeros = torch.zeros_like(pos_loss)
        return pos_loss.mean() + torch.max(
            zeros, model.hinge - model.energy(state, action, neg_state, no_trans=True)).mean()

    first_obs, first_action, first_next = next(iter(data.DataLoader(dataset, batch_size=batch_size, shuffle=False)))
    return Program(name="cswm_shapes", model=model, batch=(first_obs, (first_action, first_next)), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the sampled permutation never applied to the negatives (classic): each "negative" is the sample's own state,
    # its energy is 0, the hinge term a constant with no gradient, and nothing keeps the encoder from collapsing
    # every observation onto one point.
    Bug("negatives_not_permuted", functools.partial(_build, bug="negatives_not_permuted"), "learning_ledger",
        ("OBJECTIVE",)),
    # the dataset pairs each transition with the following step's action (classic off-by-one in the replay
    # buffer's indexing): the action no longer explains the change between obs and next_obs.
    Bug("action_of_next_step", functools.partial(_build, bug="action_of_next_step"), "learning_ledger", ("TASK",)),
    # the optimizer's zero_grad left out of the loop (classic): every batch's gradient adds to the earlier ones.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]
