"""Crystal Graph Convolutional Neural Networks trained by txie-93/cgcnn's ``main.py`` (regression task): each atom
starts from its element's feature vector, each of its ``max_num_nbr`` nearest neighbours within ``radius`` gives a
bond feature (the distance expanded in Gaussians, ``GaussianDistance``), gated graph convolutions
(``ConvLayer``: ``fc_full`` on [self, neighbour, bond], batch norm, sigmoid filter x softplus core summed over
neighbours, batch norm, residual softplus), mean pooling per crystal, softplus MLP to one output; the target
normalized by ``Normalizer`` (mean/std of a sample), ``MSELoss``, SGD with momentum, ``MultiStepLR`` per epoch,
validation MAE under ``eval()`` with the best model kept.

Source: https://github.com/txie-93/cgcnn
Commit: f42ab233c4ee0c416879d6bc2d22a264418413ad
Files: main.py, cgcnn/model.py, cgcnn/data.py
License: MIT (Copyright (c) 2018 Tian Xie)
Domain: scientific ML, materials property prediction (graph networks on periodic crystals)

Deviations from the original:
- sizes: atom_fea_len 64 -> 32, h_fea_len 128 -> 64, n_conv 3 and n_h 1 kept, batch size 256 -> 16,
  max_num_nbr 12 -> 8, radius 8 -> 5 (step 0.2 and dmin 0 kept, so 26 Gaussians); SGD lr 0.01, momentum 0.9,
  weight decay 0, lr milestones [100], val/test ratios 0.1 (train ratio 1 - 0.2) kept;
- data: the CIF files, ``id_prop.csv`` and ``atom_init.json`` are replaced by 160 synthetic cubic crystals made from
  ``seed`` (4-8 atoms of 5 elements at random positions, cell side 3.5-5 Angstrom), element vectors of 16 random
  binary features, and a synthetic per-atom energy (an element term plus pair terms decaying with the distance to
  each neighbour); pymatgen is not here: ``Structure.get_all_neighbors`` is a search over the 27 nearest periodic
  images; ``CIFData.__getitem__`` (sorting, padding with index 0 and ``radius + 1``, the Gaussian expansion) and
  ``collate_pool``, ``get_train_val_test_loader`` and ``Normalizer`` are copied; docstrings are shortened; the
  classification branches (2-way head, dropout, log-softmax, ``NLLLoss``, ``class_eval``) are left out;
- no CUDA, ``Variable`` wrappers dropped (no-ops), no AverageMeter printing, checkpoint files or test-set CSV; the
  best state dict is kept in memory; one ``train_step`` is one batch of ``train()``, an epoch's end runs
  ``validate`` and the scheduler; ``eval_fn`` is the MAE of a given batch under ``eval()`` and ``no_grad``.
"""
# ruff: noqa: UP008, UP004, PLR0402

from __future__ import annotations

import copy
import functools
import itertools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.optim.lr_scheduler import MultiStepLR
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.sampler import SubsetRandomSampler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

ARGS = {"batch_size": 16, "lr": 0.01, "lr_milestones": [100], "momentum": 0.9, "weight_decay": 0.,
        "val_ratio": 0.1, "test_ratio": 0.1, "atom_fea_len": 32, "h_fea_len": 64, "n_conv": 3, "n_h": 1}
N_CRYSTALS, N_ELEMENTS, ELEM_FEA = 160, 5, 16
MAX_NUM_NBR, RADIUS = 8, 5.0


# ---- cgcnn/model.py -----------------------------------------------------------------------------------------------

class ConvLayer(nn.Module):
    """Convolutional operation on graphs"""
    def __init__(self, atom_fea_len, nbr_fea_len):
        super(ConvLayer, self).__init__()
        self.atom_fea_len = atom_fea_len
        self.nbr_fea_len = nbr_fea_len
        self.fc_full = nn.Linear(2*self.atom_fea_len+self.nbr_fea_len, 2*self.atom_fea_len)
        self.sigmoid = nn.Sigmoid()
        self.softplus1 = nn.Softplus()
        self.bn1 = nn.BatchNorm1d(2*self.atom_fea_len)
        self.bn2 = nn.BatchNorm1d(self.atom_fea_len)
        self.softplus2 = nn.Softplus()

    def forward(self, atom_in_fea, nbr_fea, nbr_fea_idx):
        # TODO will there be problems with the index zero padding?
        N, M = nbr_fea_idx.shape
        # convolution
        atom_nbr_fea = atom_in_fea[nbr_fea_idx, :]
        total_nbr_fea = torch.cat(
            [atom_in_fea.unsqueeze(1).expand(N, M, self.atom_fea_len),
             atom_nbr_fea, nbr_fea], dim=2)
        total_gated_fea = self.fc_full(total_nbr_fea)
        total_gated_fea = self.bn1(total_gated_fea.view(
            -1, self.atom_fea_len*2)).view(N, M, self.atom_fea_len*2)
        nbr_filter, nbr_core = total_gated_fea.chunk(2, dim=2)
        nbr_filter = self.sigmoid(nbr_filter)
        nbr_core = self.softplus1(nbr_core)
        nbr_sumed = torch.sum(nbr_filter * nbr_core, dim=1)
        nbr_sumed = self.bn2(nbr_sumed)
        out = self.softplus2(atom_in_fea + nbr_sumed)
        return out


class CrystalGraphConvNet(nn.Module):
    """Create a crystal graph convolutional neural network for predicting total material properties."""
    def __init__(self, orig_atom_fea_len, nbr_fea_len,
                 atom_fea_len=64, n_conv=3, h_fea_len=128, n_h=1,
                 classification=False):
        super(CrystalGraphConvNet, self).__init__()
        self.classification = classification
        self.embedding = nn.Linear(orig_atom_fea_len, atom_fea_len)
        self.convs = nn.ModuleList([ConvLayer(atom_fea_len=atom_fea_len, nbr_fea_len=nbr_fea_len)
                                    for _ in range(n_conv)])
        self.conv_to_fc = nn.Linear(atom_fea_len, h_fea_len)
        self.conv_to_fc_softplus = nn.Softplus()
        if n_h > 1:
            self.fcs = nn.ModuleList([nn.Linear(h_fea_len, h_fea_len)
                                      for _ in range(n_h-1)])
            self.softpluses = nn.ModuleList([nn.Softplus()
                                             for _ in range(n_h-1)])
        self.fc_out = nn.Linear(h_fea_len, 1)  # the regression task's head

    def forward(self, atom_fea, nbr_fea, nbr_fea_idx, crystal_atom_idx):
        atom_fea = self.embedding(atom_fea)
        for conv_func in self.convs:
            atom_fea = conv_func(atom_fea, nbr_fea, nbr_fea_idx)
        crys_fea = self.pooling(atom_fea, crystal_atom_idx)
        crys_fea = self.conv_to_fc(self.conv_to_fc_softplus(crys_fea))
        crys_fea = self.conv_to_fc_softplus(crys_fea)
        if hasattr(self, 'fcs') and hasattr(self, 'softpluses'):
            for fc, softplus in zip(self.fcs, self.softpluses):
                crys_fea = softplus(fc(crys_fea))
        out = self.fc_out(crys_fea)
        return out

    def pooling(self, atom_fea, crystal_atom_idx):
        assert sum([len(idx_map) for idx_map in crystal_atom_idx]) ==\
            atom_fea.data.shape[0]
        summed_fea = [torch.mean(atom_fea[idx_map], dim=0, keepdim=True)
                      for idx_map in crystal_atom_idx]
        return torch.cat(summed_fea, dim=0)


# ---- cgcnn/data.py on synthetic crystals --------------------------------------------------------------------------

def get_train_val_test_loader(dataset, collate_fn, batch_size=64, train_ratio=None, val_ratio=0.1, test_ratio=0.1,
                              generator=None):
    total_size = len(dataset)
    if train_ratio is None:
        assert val_ratio + test_ratio < 1
        train_ratio = 1 - val_ratio - test_ratio
    indices = list(range(total_size))
    train_size = int(train_ratio * total_size)
    test_size = int(test_ratio * total_size)
    valid_size = int(val_ratio * total_size)
    train_sampler = SubsetRandomSampler(indices[:train_size], generator=generator)
    val_sampler = SubsetRandomSampler(indices[-(valid_size + test_size):-test_size], generator=generator)
    test_sampler = SubsetRandomSampler(indices[-test_size:], generator=generator)
    return [DataLoader(dataset, batch_size=batch_size, sampler=s, num_workers=0, collate_fn=collate_fn)
            for s in (train_sampler, val_sampler, test_sampler)]


def make_collate_pool(bug=None):
    def collate_pool(dataset_list):
        batch_atom_fea, batch_nbr_fea, batch_nbr_fea_idx = [], [], []
        crystal_atom_idx, batch_target = [], []
        batch_cif_ids = []
        base_idx = 0
        for _i, ((atom_fea, nbr_fea, nbr_fea_idx), target, cif_id)\
                in enumerate(dataset_list):
            n_i = atom_fea.shape[0]  # number of atoms for this crystal
            batch_atom_fea.append(atom_fea)
            batch_nbr_fea.append(nbr_fea)
            batch_nbr_fea_idx.append(nbr_fea_idx+base_idx)
            if bug == "crystal_index_not_offset":
                new_idx = torch.LongTensor(np.arange(n_i))  # every crystal pooled from the batch's first atoms
            else:
                new_idx = torch.LongTensor(np.arange(n_i)+base_idx)
            crystal_atom_idx.append(new_idx)
            batch_target.append(target)
            batch_cif_ids.append(cif_id)
            base_idx += n_i
        return (torch.cat(batch_atom_fea, dim=0),
                torch.cat(batch_nbr_fea, dim=0),
                torch.cat(batch_nbr_fea_idx, dim=0),
                crystal_atom_idx),\
            torch.stack(batch_target, dim=0),\
            batch_cif_ids
    return collate_pool


class GaussianDistance(object):
    """Expands the distance by Gaussian basis. Unit: angstrom"""
    def __init__(self, dmin, dmax, step, var=None):
        assert dmin < dmax
        assert dmax - dmin > step
        self.filter = np.arange(dmin, dmax+step, step)
        if var is None:
            var = step
        self.var = var

    def expand(self, distances):
        return np.exp(-(distances[..., np.newaxis] - self.filter)**2 /
                      self.var**2)


def make_crystals(seed):
    """(id, elements, fractional positions, cell side, target) rows; the target is a per-atom energy."""
    g = np.random.RandomState(seed)
    e_elem, pair = g.uniform(-1, 1, N_ELEMENTS), g.uniform(-1, 1, (N_ELEMENTS, N_ELEMENTS))
    pair = (pair + pair.T) / 2
    rows = []
    for k in range(N_CRYSTALS):
        n = g.randint(4, 9)
        elems, frac, side = g.randint(0, N_ELEMENTS, n), g.rand(n, 3), g.uniform(3.5, 5.0)
        nbrs = get_all_neighbors(frac, side, RADIUS)
        energy = np.mean([e_elem[elems[i]] + sum(pair[elems[i], elems[j]] * np.exp(-d) for j, d in sorted(nbrs[i], key=lambda x: x[1])[:4])
                          for i in range(n)])
        rows.append((f"synthetic-{k}", elems, frac, side, float(energy)))
    return rows


def get_all_neighbors(frac, side, radius):
    """pymatgen's Structure.get_all_neighbors(radius, include_index=True) for a cubic cell: (index, distance)."""
    shifts = np.array(list(itertools.product((-1, 0, 1), repeat=3)))
    out = []
    for i in range(len(frac)):
        found = []
        for j in range(len(frac)):
            d = np.linalg.norm((frac[j] + shifts - frac[i]) * side, axis=1)
            found += [(j, float(x)) for x in d if 1e-8 < x <= radius]
        out.append(found)
    return out


class CIFData(Dataset):
    def __init__(self, rows, elem_embedding, max_num_nbr=12, radius=8, dmin=0, step=0.2, random_seed=123,
                 bug=None):
        self.max_num_nbr, self.radius = max_num_nbr, radius
        self.id_prop_data = [(r[0], r[4]) for r in rows]
        self.structures = {r[0]: r[1:4] for r in rows}
        random.Random(random_seed).shuffle(self.id_prop_data)
        if bug == "targets_misaligned":  # ids and targets shuffled as two separate lists
            ids, props = zip(*self.id_prop_data)
            props = list(props)
            random.Random(random_seed + 1).shuffle(props)
            self.id_prop_data = list(zip(ids, props))
        self.elem_embedding = elem_embedding  # AtomCustomJSONInitializer
        self.gdf = GaussianDistance(dmin=dmin, dmax=self.radius, step=step)
        self._cache = {}

    def __len__(self):
        return len(self.id_prop_data)

    def __getitem__(self, idx):
        if idx not in self._cache:  # @functools.lru_cache(maxsize=None)
            self._cache[idx] = self._getitem(idx)
        return self._cache[idx]

    def _getitem(self, idx):
        cif_id, target = self.id_prop_data[idx]
        elems, frac, side = self.structures[cif_id]
        atom_fea = torch.Tensor(np.vstack([self.elem_embedding[e] for e in elems]))
        all_nbrs = get_all_neighbors(frac, side, self.radius)
        all_nbrs = [sorted(nbrs, key=lambda x: x[1]) for nbrs in all_nbrs]
        nbr_fea_idx, nbr_fea = [], []
        for nbr in all_nbrs:
            if len(nbr) < self.max_num_nbr:
                nbr_fea_idx.append([x[0] for x in nbr] + [0] * (self.max_num_nbr - len(nbr)))
                nbr_fea.append([x[1] for x in nbr] + [self.radius + 1.] * (self.max_num_nbr - len(nbr)))
            else:
                nbr_fea_idx.append([x[0] for x in nbr[:self.max_num_nbr]])
                nbr_fea.append([x[1] for x in nbr[:self.max_num_nbr]])
        nbr_fea_idx, nbr_fea = np.array(nbr_fea_idx), np.array(nbr_fea)
        nbr_fea = torch.Tensor(self.gdf.expand(nbr_fea))
        nbr_fea_idx, target = torch.LongTensor(nbr_fea_idx), torch.Tensor([float(target)])
        return (atom_fea, nbr_fea, nbr_fea_idx), target, cif_id


# ---- main.py ------------------------------------------------------------------------------------------------------

class Normalizer(object):
    """Normalize a Tensor and restore it later. """
    def __init__(self, tensor):
        self.mean = torch.mean(tensor)
        self.std = torch.std(tensor)

    def norm(self, tensor):
        return (tensor - self.mean) / self.std

    def denorm(self, normed_tensor):
        return normed_tensor * self.std + self.mean


def mae(prediction, target):
    return torch.mean(torch.abs(target - prediction))


def validate(val_loader, model, criterion, normalizer):
    model.eval()
    errors, counts = [], []
    for _i, (input, target, _batch_cif_ids) in enumerate(val_loader):
        with torch.no_grad():
            input_var = (input[0], input[1], input[2], input[3])
            target_var = normalizer.norm(target)
            output = model(*input_var)
            criterion(output, target_var)
        errors.append(float(mae(normalizer.denorm(output.data.cpu()), target)) * target.size(0))
        counts.append(target.size(0))
    return sum(errors) / sum(counts)


def _make_train_step(model, loaders, criterion, optimizer, scheduler, normalizer, bug):
    train_loader, val_loader = loaders
    state = {"it": None, "best_mae_error": 1e10, "best": None}

    def train_step():
        """One batch of `train()`; an epoch's end runs `validate`, the scheduler and the best-model bookkeeping."""
        if state["it"] is None:
            model.train()
            state["it"] = iter(train_loader)
        batch = next(state["it"], None)
        if batch is None:
            mae_error = validate(val_loader, model, criterion, normalizer)
            scheduler.step()
            if mae_error < state["best_mae_error"]:
                state["best_mae_error"], state["best"] = mae_error, copy.deepcopy(model.state_dict())
            state["it"] = None
            return train_step()
        input, target, _ = batch
        input_var = (input[0], input[1], input[2], input[3])
        # normalize target
        target_normed = normalizer.norm(target)
        target_var = target_normed

        # compute output
        output = model(*input_var)
        loss = criterion(output, target_var)

        # compute gradient and do SGD step
        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        optimizer.step()
        return loss.detach()

    return train_step


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = ARGS
    g = np.random.RandomState(seed + 1000)
    elem_embedding = {e: g.randint(0, 2, ELEM_FEA).astype(float) for e in range(N_ELEMENTS)}  # atom_init.json
    dataset = CIFData(make_crystals(seed), elem_embedding, max_num_nbr=MAX_NUM_NBR, radius=RADIUS, bug=bug)
    collate_fn = make_collate_pool(bug)
    train_loader, val_loader, _test_loader = get_train_val_test_loader(
        dataset=dataset, collate_fn=collate_fn, batch_size=args["batch_size"], val_ratio=args["val_ratio"],
        test_ratio=args["test_ratio"], generator=torch.Generator().manual_seed(seed))

    sample_data_list = [dataset[i] for i in range(len(dataset))]  # len(dataset) < 500
    _, sample_target, _ = collate_fn(sample_data_list)
    normalizer = Normalizer(sample_target)

    structures, _, _ = dataset[0]
    orig_atom_fea_len = structures[0].shape[-1]
    nbr_fea_len = structures[1].shape[-1]
    model = CrystalGraphConvNet(orig_atom_fea_len, nbr_fea_len, atom_fea_len=args["atom_fea_len"],
                                n_conv=args["n_conv"], h_fea_len=args["h_fea_len"], n_h=args["n_h"],
                                classification=False)
    criterion = nn.MSELoss()
    optimizer = optim.SGD(model.parameters(), args["lr"], momentum=args["momentum"],
                          weight_decay=args["weight_decay"])
    scheduler = MultiStepLR(optimizer, milestones=args["lr_milestones"], gamma=0.1)
    train_step = _make_train_step(model, (train_loader, val_loader), criterion, optimizer, scheduler, normalizer,
                                  bug)

    input, target, _ = next(iter(train_loader))
    batch = ((input[0], input[1], input[2], input[3]), normalizer.norm(target))

    def eval_fn(model, batch):
        was = model.training
        model.eval()
        with torch.no_grad():
            value = float(mae(normalizer.denorm(model(*batch[0])), normalizer.denorm(batch[1])))
        model.train(was)
        return value

    return Program(name="cgcnn_crystal", model=model, batch=batch, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # collate_pool's crystal index left without the running `base_idx`: every crystal of a batch is mean-pooled from
    # the batch's first atoms, so a crystal's prediction does not depend on its own atoms.
    Bug("crystal_index_not_offset", functools.partial(_build, bug="crystal_index_not_offset"), "learning_ledger",
        ("DEPENDENCY",)),
    # the ids and the property values shuffled as two separate lists: each structure carries another crystal's
    # energy.
    Bug("targets_misaligned", functools.partial(_build, bug="targets_misaligned"), "learning_ledger", ("TASK",)),
    # optimizer.zero_grad() moved between backward() and step(): every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
