# ruff: noqa: UP008, UP034, RUF059, B006, C408, PERF102  (the original's style is kept as written)
"""SubTab (Ucar, Hajiramezanali & Edwards, NeurIPS 2021): self-supervised tabular learning from overlapping feature
subsets. Each batch is cut into ``n_subsets`` column subsets (neighbours share ``overlap`` of their columns, order
permuted in training), 30% of each subset's entries swap-noised (the column's value from a random other row), every
pair of subsets stacked into one batch; a shallow autoencoder (one LeakyReLU layer) with a two-layer projection is
trained on the full row reconstructed from each subset (summed squared error per sample) + NT-Xent between the pair's
projections (dot product, temperature 0.1) + their MSE; AdamW.

Source: https://github.com/AstraZeneca/SubTab
Commit: aa3ab1b97231fc37229ef3e55d98ae13bdbfb4fc
Files: ``src/model.py`` (``SubTab``), ``utils/loss_functions.py`` (``getMSEloss``, ``JointLoss``),
``utils/model_utils.py`` (``AEWrapper``, shallow encoder / decoder, ``HiddenLayers``), ``utils/load_data.py``,
``utils/utils.py`` (``update_config_with_model_dims``, ``set_seed``), ``train.py``, ``config/mnist.yaml``,
``config/runtime.yaml``
License: Apache-2.0 (full text in LICENSES/AstraZeneca-SubTab.txt)
Domain: tabular, self-supervised (feature-subset autoencoder with contrastive and distance losses)

Kept as written: the classes and methods (their lines; the tqdm bar, the loss records and logging, plots, mlflow,
profiling, the weight saving and the comments dropped), ``config/mnist.yaml``'s options (shallow architecture, normalize with p 2,
learning_rate 1e-3, batch_size 32, n_subsets 4, overlap 0.75, swap_noise at masking_ratio 0.3, contrastive and
distance losses on, tau 0.1, dot-product similarity, full-row reconstruction, no BatchNorm / Dropout / scheduler),
the Loader's train loader (shuffled, drop_last) and validation loader.

Deviations from the original:
- MNIST (784 pixels in [0, 1]) is not here: 1024 training and 256 validation rows of 64 features in [0, 1] made
  from ``seed`` (a sigmoid of a random 8-dimensional latent mixed into the columns, plus noise; the labels, unused
  in training as in the original, are two latent coordinates' signs); so ``dims`` [784, 784] -> [64, 64];
- ``options`` is a dict (the two yaml files merged, device cpu); numpy and torch are seeded from ``seed`` (config:
  57); ``th.autograd.set_detect_anomaly(True)`` is left out (global state that only slows the program); the branches
  the config never reaches (deep encoder / decoder, BCE, cosine similarity, gaussian / zero-out noise) not copied;
- one ``train_step`` is one iteration of ``fit``'s batch loop (a new epoch when the loader ends); ``eval_fn`` is
  ``validate``;
- the Program's model is the ``AEWrapper``, its batch the first pair of noisy subsets of the first rows as
  ``update_autoencoder`` sees it, with ``Xorig``; its ``loss_fn`` the joint loss on the wrapper's outputs;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import itertools
import pathlib
import sys

import numpy as np
import torch
import torch as th
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

OPTIONS = dict(  # (port) config/mnist.yaml + config/runtime.yaml, sizes as listed in the docstring
    model_mode="ae", reconstruction=True, shallow_architecture=True, dims=[64, 64], isBatchNorm=False,
    isDropout=False, normalize=True, p_norm=2, dropout_rate=0.2, learning_rate=0.001, epochs=15, batch_size=32,
    nth_epoch=1, validate=False, scheduler=False, n_subsets=4, overlap=0.75, aggregation="mean", add_noise=True,
    noise_type="swap_noise", masking_ratio=0.3, noise_level=0.1, n_classes=4, training_data_ratio=1.0,
    contrastive_loss=True, distance_loss=True, tau=0.1, cosine_similarity=False, reconstruct_subset=False,
    device=torch.device("cpu"))


# utils/loss_functions.py
def getMSEloss(recon, target):
    dims = list(target.size())
    bs = dims[0]
    loss = th.sum(th.square(recon - target)) / bs
    return loss


class JointLoss(th.nn.Module):
    def __init__(self, options):
        super(JointLoss, self).__init__()
        self.options = options
        self.batch_size = options["batch_size"]
        self.temperature = options["tau"]
        self.device = options["device"]
        self.mask_for_neg_samples = self._get_mask_for_neg_samples().type(th.bool)
        self.similarity_fn = self._dot_simililarity  # (port) cosine_similarity is False: the cosine one not copied
        self.criterion = th.nn.CrossEntropyLoss(reduction="sum")

    def _get_mask_for_neg_samples(self):
        diagonal = np.eye(2 * self.batch_size)
        q1 = np.eye((2 * self.batch_size), 2 * self.batch_size, k=self.batch_size)
        q3 = np.eye((2 * self.batch_size), 2 * self.batch_size, k=-self.batch_size)
        if self.options.get("bug") == "positives_left_in_negatives":
            mask = th.from_numpy(diagonal)
        else:
            mask = th.from_numpy((diagonal + q1 + q3))
        mask = (1 - mask).type(th.bool)
        return mask.to(self.device)

    @staticmethod
    def _dot_simililarity(x, y):
        x = x.unsqueeze(1)
        y = y.T.unsqueeze(0)
        similarity = th.tensordot(x, y, dims=2)
        return similarity

    def XNegloss(self, representation):
        similarity = self.similarity_fn(representation, representation)
        l_pos = th.diag(similarity, self.batch_size)
        r_pos = th.diag(similarity, -self.batch_size)
        positives = th.cat([l_pos, r_pos]).view(2 * self.batch_size, 1)
        negatives = similarity[self.mask_for_neg_samples].view(2 * self.batch_size, -1)
        logits = th.cat((positives, negatives), dim=1)
        logits /= self.temperature
        labels = th.zeros(2 * self.batch_size).to(self.device).long()
        loss = self.criterion(logits, labels)
        closs = loss / (2 * self.batch_size)
        return closs

    def forward(self, representation, xrecon, xorig):
        recon_loss = getMSEloss(xrecon, xorig)  # (port) reconstruction is True: getBCELoss is not reached
        closs, zrecon_loss = recon_loss, recon_loss
        loss = recon_loss
        if self.options["contrastive_loss"]:
            closs = self.XNegloss(representation)
            loss = loss + closs
        if self.options["distance_loss"]:
            zi, zj = th.split(representation, self.batch_size)
            zrecon_loss = getMSEloss(zi, zj)
            loss = loss + zrecon_loss
        return loss, closs, recon_loss, zrecon_loss


# utils/model_utils.py
class AEWrapper(nn.Module):
    def __init__(self, options):
        super(AEWrapper, self).__init__()
        self.options = options
        self.encoder = ShallowEncoder(options)  # (port) shallow_architecture is True: Encoder / Decoder not built
        self.decoder = ShallowDecoder(options)
        output_dim = self.options["dims"][-1]
        self.linear_layer1 = nn.Linear(output_dim, output_dim)
        self.linear_layer2 = nn.Linear(output_dim, output_dim)

    def forward(self, x):
        latent = self.encoder(x)
        z = F.leaky_relu(self.linear_layer1(latent))
        z = self.linear_layer2(z)
        z = F.normalize(z, p=self.options["p_norm"], dim=1) if self.options["normalize"] else z
        x_recon = self.decoder(latent)
        return z, latent, x_recon


class ShallowEncoder(nn.Module):
    def __init__(self, options):
        super(ShallowEncoder, self).__init__()
        self.options = copy.deepcopy(options)
        n_column_subset = int(self.options["dims"][0]/self.options["n_subsets"])
        overlap = self.options["overlap"]
        n_overlap = int(overlap*n_column_subset)
        self.options["dims"][0] = n_column_subset + n_overlap
        self.hidden_layers = HiddenLayers(self.options)

    def forward(self, h):
        h = self.hidden_layers(h)
        return h


class ShallowDecoder(nn.Module):
    def __init__(self, options):
        super(ShallowDecoder, self).__init__()
        self.options = copy.deepcopy(options)
        input_dim, output_dim = self.options["dims"][-1],  self.options["dims"][0]
        self.first_layer = nn.Linear(input_dim, output_dim)

    def forward(self, z):
        logits = self.first_layer(z)
        return logits


class HiddenLayers(nn.Module):
    def __init__(self, options):
        super(HiddenLayers, self).__init__()
        self.layers = nn.ModuleList()
        dims = options["dims"]
        for i in range(1, len(dims) - 1):
            self.layers.append(nn.Linear(dims[i - 1], dims[i]))
            if options["isBatchNorm"]:
                self.layers.append(nn.BatchNorm1d(dims[i]))
            self.layers.append(nn.LeakyReLU(inplace=False))
            if options["isDropout"]:
                self.layers.append(nn.Dropout(options["dropout_rate"]))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


# utils/load_data.py
class TabularDataset(Dataset):  # (port) the synthetic rows instead of data/mnist
    def __init__(self, data, labels):
        self.data, self.labels = data, labels

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        sample = self.data[idx]
        cluster = int(self.labels[idx])
        return sample, cluster


def _tabular(seed, split, n, d=64, k=8):
    w = np.random.default_rng(seed).normal(0, 1, (k, d)) / np.sqrt(k)
    rng = np.random.default_rng([seed, split])
    latent = rng.normal(0, 1, (n, k))
    x = 1 / (1 + np.exp(-(2 * latent @ w + 0.1 * rng.normal(0, 1, (n, d)))))
    return x, (latent[:, 0] > 0) * 2 + (latent[:, 1] > 0)


# src/model.py
class SubTab:
    def __init__(self, options):
        self.options, self.device = options, options["device"]
        self.model_dict = {}
        self.is_combination = self.options["contrastive_loss"] or self.options["distance_loss"]
        self.set_autoencoder()

    def set_autoencoder(self):
        self.encoder = AEWrapper(self.options)
        self.model_dict.update({"encoder": self.encoder})
        for _, model in self.model_dict.items(): model.to(self.device)
        parameters = [model.parameters() for _, model in self.model_dict.items()]
        self.joint_loss = JointLoss(self.options)
        self.optimizer_ae = self._adam(parameters, lr=self.options["learning_rate"])

    def fit_step(self, x):
        """(port) the body of fit()'s loop over the train loader's batches"""
        Xorig = self.process_batch(x, x)
        x_tilde_list = self.subset_generator(x, mode="train")
        if self.is_combination:
            x_tilde_list = self.get_combinations_of_subsets(x_tilde_list)
        return self.update_autoencoder(x_tilde_list, Xorig)

    def validate(self, validation_loader):
        with th.no_grad():
            total_batches = len(validation_loader)
            vloss = 0
            self.set_mode(mode="evaluation")
            for i, (x, _) in enumerate(validation_loader):
                x_tilde_list = self.subset_generator(x)
                if self.is_combination:
                    x_tilde_list = self.get_combinations_of_subsets(x_tilde_list)
                Xorig = self.process_batch(x, x)
                val_loss = []
                for xi in x_tilde_list:
                    Xinput = xi if self.is_combination else self.process_batch(xi, xi)
                    z, latent, Xrecon = self.encoder(Xinput)
                    val_loss_s, _, _, _ = self.joint_loss(z, Xrecon, Xorig)
                    val_loss.append(val_loss_s)
                val_loss = sum(val_loss) / len(val_loss)
                vloss = vloss + val_loss.item()
            self.set_mode(mode="training")
            vloss = vloss / total_batches
        return vloss

    def update_autoencoder(self, x_tilde_list, Xorig):
        total_loss = []  # (port) the contrastive / recon / zrecon lists only fed the loss records
        for xi in x_tilde_list:
            Xinput = xi if self.is_combination else self.process_batch(xi, xi)
            z, latent, Xrecon = self.encoder(Xinput)
            Xorig = Xinput if self.options["reconstruction"] and self.options["reconstruct_subset"] else Xorig
            tloss, closs, rloss, zloss = self.joint_loss(z, Xrecon, Xorig)
            total_loss.append(tloss)
        n = len(total_loss)
        total_loss = sum(total_loss) / n
        self._update_model(total_loss, self.optimizer_ae, retain_graph=True)
        return total_loss.item()  # (port) the per-batch loss records of self.loss

    def get_combinations_of_subsets(self, x_tilde_list):
        subset_combinations = list(itertools.combinations(x_tilde_list, 2))
        concatenated_subsets_list = []
        for (xi, xj) in subset_combinations:
            if self.options.get("bug") == "pair_of_one_subset":
                xj = xi
            Xbatch = self.process_batch(xi, xj)
            concatenated_subsets_list.append(Xbatch)
        return concatenated_subsets_list

    def subset_generator(self, x, mode="test", skip=[-1]):
        n_subsets = self.options["n_subsets"]
        n_column = self.options["dims"][0]
        overlap = self.options["overlap"]
        n_column_subset = int(n_column / n_subsets)
        n_overlap = int(overlap * n_column_subset)
        column_idx = list(range(n_column))
        permuted_order = np.random.permutation(n_subsets) if mode == "train" else range(n_subsets)
        subset_column_idx_list = []
        skip = [-1] if mode == "test" else skip
        for i in permuted_order:
            if i not in skip:
                if i == 0:
                    start_idx = 0
                    stop_idx = n_column_subset + n_overlap
                else:
                    start_idx = i * n_column_subset - n_overlap
                    stop_idx = (i + 1) * n_column_subset
                subset_column_idx_list.append(column_idx[start_idx:stop_idx])
        if len(subset_column_idx_list) == 1:
            subset_column_idx_list.append(subset_column_idx_list[0])
        x_tilde_list = []
        for subset_column_idx in subset_column_idx_list:
            x_bar = x[:, subset_column_idx]
            if self.options["add_noise"]:
                x_bar_noisy = self.generate_noisy_xbar(x_bar)
                p_m = self.options["masking_ratio"]
                mask = np.random.binomial(1, p_m, x_bar.shape)
                x_bar = x_bar * (1 - mask) + x_bar_noisy * mask
            x_tilde_list.append(x_bar)
        return x_tilde_list

    def generate_noisy_xbar(self, x):
        no, dim = x.shape
        noise_type = self.options["noise_type"]
        x_bar = np.zeros([no, dim])
        if noise_type == "swap_noise":
            for i in range(dim):
                idx = np.random.permutation(no)
                x_bar[:, i] = x[idx, i]
        return x_bar  # (port) noise_type is swap_noise: the gaussian / zero-out branches not copied

    def process_batch(self, xi, xj):
        Xbatch = np.concatenate((xi, xj), axis=0)
        Xbatch = self._tensor(Xbatch)
        return Xbatch

    def set_mode(self, mode="training"):
        for _, model in self.model_dict.items():
            model.train() if mode == "training" else model.eval()

    def _update_model(self, loss, optimizer, retain_graph=True):
        if self.options.get("bug") != "zero_grad_dropped":
            optimizer.zero_grad()
        loss.backward(retain_graph=retain_graph)
        optimizer.step()

    def _adam(self, params, lr=1e-4):
        return th.optim.AdamW(itertools.chain(*params), lr=lr, betas=(0.9, 0.999), eps=1e-07)

    def _tensor(self, data):
        if type(data).__module__ == np.__name__:
            data = th.from_numpy(data)
        return data.to(self.device).float()


def _build(seed, bug=None):
    np.random.seed(seed)  # (port) set_seed with the seed given here
    torch.manual_seed(seed)
    config = {**copy.deepcopy(OPTIONS), "bug": bug}
    (x_train, y_train), (x_val, y_val) = _tabular(seed, 0, 1024), _tabular(seed, 1, 256)
    batch_size = config["batch_size"]
    train_loader = DataLoader(TabularDataset(x_train, y_train), batch_size=batch_size, shuffle=True, drop_last=True,
                              generator=torch.Generator().manual_seed(seed))
    validation_loader = DataLoader(TabularDataset(x_val, y_val), batch_size=batch_size, shuffle=False, drop_last=True)
    config["dims"].insert(0, next(iter(train_loader))[0].cpu().numpy().shape[-1])  # update_config_with_model_dims
    model = SubTab(config)
    model.set_mode(mode="training")
    state = {"it": iter(train_loader)}

    def train_step():
        try:
            x, _ = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            x, _ = next(state["it"])
        return model.fit_step(x)

    x0 = x_train[:batch_size]
    Xorig = model.process_batch(x0, x0)
    pairs = model.get_combinations_of_subsets(model.subset_generator(x0, mode="test"))

    def loss_fn(outputs, xorig):
        return model.joint_loss(outputs[0], outputs[2], xorig)[0]

    return Program(name="subtab_tabular_ssl", model=model.encoder, batch=(pairs[0], Xorig), loss_fn=loss_fn,
                   optimizer=model.optimizer_ae, train_step=train_step, loader=train_loader,
                   eval_fn=lambda m, _b=None: model.validate(validation_loader))


build = functools.partial(_build, bug=None)

BUGS = [
    # classic InfoNCE mask slip: the mask removes only the main diagonal, so each positive is counted as a negative too.
    Bug("positives_left_in_negatives", functools.partial(_build, bug="positives_left_in_negatives"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic pairing slip: each combination stacks a subset with itself, so the contrastive and distance terms compare
    # a subset with its own copy instead of with another subset of the same rows.
    Bug("pair_of_one_subset", functools.partial(_build, bug="pair_of_one_subset"), "learning_ledger", ("TASK",)),
    # classic: optimizer.zero_grad() left out of _update_model: gradients pile up across batches.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
