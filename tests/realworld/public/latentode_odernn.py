# ruff: noqa: PLR0402, UP008, PIE808, RUF007, B008, RUF059, TRY002
"""ODE-RNN on the toy periodic time series of YuliaRubanova/latent_ode (``run_models.py --dataset periodic --ode-rnn
-l 10``, the README's ODE-RNN command): a hidden state evolved between observation times by a neural ODE (an MLP
``ODEFunc`` solved with the Euler method, or one Euler increment when the gap is shorter than the minimum step) and
updated at each observation by the repository's ``GRU_unit`` (gates and a mean/std new state from MLPs, masked
update); a linear-tanh-linear decoder reads every hidden state, the outputs are shifted one step so that each
prediction is made before its point is seen, and the loss is the negative masked Gaussian log-likelihood (obsrv_std
0.01); Adamax lr 1e-2 with the script's per-iteration decay (0.999, floored at lr / 10).

Source: https://github.com/YuliaRubanova/latent_ode
Commit: c0682d4f52b806fb88d965755892eadd9783f936
Files: run_models.py, lib/ode_rnn.py, lib/base_models.py (``Baseline``), lib/encoder_decoder.py (``GRU_unit``,
``Encoder_z0_ODE_RNN.run_odernn``), lib/diffeq_solver.py, lib/ode_func.py, lib/likelihood_eval.py, lib/utils.py,
lib/parse_datasets.py (the periodic branch), generate_timeseries.py (``Periodic_1d``), README.md
License: MIT (Copyright (c) 2019 Yulia Rubanova; full text in LICENSES/YuliaRubanova-latent_ode.txt)
Domain: time series, irregularly sampled (ODE-RNN: neural ODE between observations, GRU updates at them)

Kept as written: ``ODE_RNN`` (its ``get_reconstruction``: data and mask concatenated, ``run_odernn`` with
``run_backwards = False``, the decoder, ``shift_outputs``), ``Baseline.compute_all_losses`` and
``get_gaussian_likelihood``/``get_mse``, ``GRU_unit``, ``run_odernn`` (including its bookkeeping of ``prev_t, t_i =
time_steps[i], time_steps[i-1]``, which in the forward direction this model uses integrates each gap from the later
to the earlier time, as written), ``DiffeqSolver``, ``ODEFunc``, ``create_net``, ``init_network_weights`` (std 0.1),
``masked_gaussian_log_density``/``compute_masked_likelihood``/``gaussian_log_likelihood``, ``compute_mse``,
``split_data_interp``/``add_mask``/``get_next_batch``, ``update_learning_rate``, ``Periodic_1d`` with the periodic
branch's settings (random frequency in [0.4, 0.8], amplitude 1, z0 1 + N(0, 0.1), sorted uniform time points with 0
first, noise weight 0.01), the run's settings (latents 10, units 100, GRU units 100, rec layers 1, Euler with rtol
1e-3 / atol 1e-4, Adamax lr 1e-2, ``n_traj_samples = 3`` passed as written) and the loop body
(``zero_grad``, ``update_learning_rate``, the KL-coefficient schedule (unused by this model), ``get_next_batch``,
``compute_all_losses``, backward, step).

Deviations from the original:
- sizes: 1000 series of 100 time points -> 100 series of 20 time points, batch 50 -> 20 (the 80/20 split kept: 80
  training series, 4 batches of 20);
- torchdiffeq's ``odeint`` is written out for the one method this model uses, fixed-grid Euler on the given time
  points (its result at each grid point, which is what torchdiffeq's Euler returns there); rtol/atol are ignored by
  that method in torchdiffeq too;
- the dataset's numpy and torch draws come from a ``numpy.random.RandomState(seed)`` and a seeded
  ``torch.Generator`` instead of the global generators (``run_models.py`` seeds those globally);
- ``ODE_RNN`` has no ``forward`` in the repository (``compute_all_losses`` calls ``get_reconstruction``); the port
  adds one that returns that reconstruction for a batch dict, so the Program's ``(batch_dict, batch_dict)`` batch and
  ``loss_fn(pred_x, batch_dict)`` (the loss ``compute_all_losses`` computes) can be run; the loop does not use it;
- logging, the test-set evaluation every epoch, checkpoints and plotting are left out; one ``train_step`` is one
  iteration of the loop and returns ``train_res["loss"]``; ``eval_fn`` is ``compute_all_losses`` on a given batch
  (its ``mse``) on a given batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Independent, uniform
from torch.distributions.normal import Normal
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

ARGS = types.SimpleNamespace(n=100, niters=500, lr=1e-2, batch_size=20, dataset="periodic", sample_tp=None,
                             cut_tp=None, latents=10, rec_layers=1, units=100, gru_units=100, extrap=False,
                             timepoints=20, max_t=5., noise_weight=0.01)

# ---- lib/utils.py -------------------------------------------------------------------------------------------------


def inf_generator(iterable):
    iterator = iterable.__iter__()
    while True:
        try:
            yield iterator.__next__()
        except StopIteration:
            iterator = iterable.__iter__()


def split_last_dim(data):
    last_dim = data.size()[-1]
    last_dim = last_dim//2

    if len(data.size()) == 3:
        res = data[:,:,:last_dim], data[:,:,last_dim:]

    if len(data.size()) == 2:
        res = data[:,:last_dim], data[:,last_dim:]
    return res


def init_network_weights(net, std = 0.1):
    for m in net.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0, std=std)
            nn.init.constant_(m.bias, val=0)


def get_device(tensor):
    device = torch.device("cpu")
    return device


def split_train_test(data, train_fraq = 0.8):
    n_samples = data.size(0)
    data_train = data[:int(n_samples * train_fraq)]
    data_test = data[int(n_samples * train_fraq):]
    return data_train, data_test


def get_dict_template():
    return {"observed_data": None,
            "observed_tp": None,
            "data_to_predict": None,
            "tp_to_predict": None,
            "observed_mask": None,
            "mask_predicted_data": None,
            "labels": None
            }


def get_next_batch(dataloader):
    # Make the union of all time points and perform normalization across the whole dataset
    data_dict = dataloader.__next__()

    batch_dict = get_dict_template()

    # remove the time points where there are no observations in this batch
    non_missing_tp = torch.sum(data_dict["observed_data"],(0,2)) != 0.
    batch_dict["observed_data"] = data_dict["observed_data"][:, non_missing_tp]
    batch_dict["observed_tp"] = data_dict["observed_tp"][non_missing_tp]

    if ("observed_mask" in data_dict) and (data_dict["observed_mask"] is not None):
        batch_dict["observed_mask"] = data_dict["observed_mask"][:, non_missing_tp]

    batch_dict[ "data_to_predict"] = data_dict["data_to_predict"]
    batch_dict["tp_to_predict"] = data_dict["tp_to_predict"]

    non_missing_tp = torch.sum(data_dict["data_to_predict"],(0,2)) != 0.
    batch_dict["data_to_predict"] = data_dict["data_to_predict"][:, non_missing_tp]
    batch_dict["tp_to_predict"] = data_dict["tp_to_predict"][non_missing_tp]

    if ("mask_predicted_data" in data_dict) and (data_dict["mask_predicted_data"] is not None):
        batch_dict["mask_predicted_data"] = data_dict["mask_predicted_data"][:, non_missing_tp]

    if ("labels" in data_dict) and (data_dict["labels"] is not None):
        batch_dict["labels"] = data_dict["labels"]

    batch_dict["mode"] = data_dict["mode"]
    return batch_dict


def update_learning_rate(optimizer, decay_rate = 0.999, lowest = 1e-3):
    for param_group in optimizer.param_groups:
        lr = param_group['lr']
        lr = max(lr * decay_rate, lowest)
        param_group['lr'] = lr


def linspace_vector(start, end, n_points):
    # start is either one value or a vector
    size = np.prod(start.size())

    assert(start.size() == end.size())
    if size == 1:
        # start and end are 1d-tensors
        res = torch.linspace(start, end, n_points)
    else:
        # start and end are vectors
        res = torch.Tensor()
        for i in range(0, start.size(0)):
            res = torch.cat((res,
                torch.linspace(start[i], end[i], n_points)),0)
        res = torch.t(res.reshape(start.size(0), n_points))
    return res


def create_net(n_inputs, n_outputs, n_layers = 1,
    n_units = 100, nonlinear = nn.Tanh):
    layers = [nn.Linear(n_inputs, n_units)]
    for i in range(n_layers):
        layers.append(nonlinear())
        layers.append(nn.Linear(n_units, n_units))

    layers.append(nonlinear())
    layers.append(nn.Linear(n_units, n_outputs))
    return nn.Sequential(*layers)


def shift_outputs(outputs, first_datapoint = None):
    outputs = outputs[:,:,:-1,:]

    if first_datapoint is not None:
        n_traj, n_dims = first_datapoint.size()
        first_datapoint = first_datapoint.reshape(1, n_traj, 1, n_dims)
        outputs = torch.cat((first_datapoint, outputs), 2)
    return outputs


def split_data_interp(data_dict):
    split_dict = {"observed_data": data_dict["data"].clone(),
                "observed_tp": data_dict["time_steps"].clone(),
                "data_to_predict": data_dict["data"].clone(),
                "tp_to_predict": data_dict["time_steps"].clone()}

    split_dict["observed_mask"] = None
    split_dict["mask_predicted_data"] = None
    split_dict["labels"] = None

    if "mask" in data_dict and data_dict["mask"] is not None:
        split_dict["observed_mask"] = data_dict["mask"].clone()
        split_dict["mask_predicted_data"] = data_dict["mask"].clone()

    if ("labels" in data_dict) and (data_dict["labels"] is not None):
        split_dict["labels"] = data_dict["labels"].clone()

    split_dict["mode"] = "interp"
    return split_dict


def add_mask(data_dict):
    data = data_dict["observed_data"]
    mask = data_dict["observed_mask"]

    if mask is None:
        mask = torch.ones_like(data).to(get_device(data))

    data_dict["observed_mask"] = mask
    return data_dict


def split_and_subsample_batch(data_dict, args, data_type = "train"):
    # interpolation mode (args.extrap is False) for both sets; no subsampling (sample_tp and cut_tp are None)
    processed_dict = split_data_interp(data_dict)

    # add mask
    processed_dict = add_mask(processed_dict)
    return processed_dict


def check_mask(data, mask):
    #check that "mask" argument indeed contains a mask for data
    n_zeros = torch.sum(mask == 0.).cpu().numpy()
    n_ones = torch.sum(mask == 1.).cpu().numpy()

    # mask should contain only zeros and ones
    assert((n_zeros + n_ones) == np.prod(list(mask.size())))

    # all masked out elements should be zeros
    assert(torch.sum(data[mask == 0.] != 0.) == 0)


# ---- torchdiffeq's odeint, method="euler" on the given grid (written out) -----------------------------------------


def odeint(func, y0, t, rtol=None, atol=None, method="euler"):
    assert method == "euler"
    solution = [y0]
    y = y0
    for t0, t1 in zip(t[:-1], t[1:]):
        y = y + func(t0, y) * (t1 - t0)
        solution.append(y)
    return torch.stack(solution, 0)


# ---- lib/ode_func.py, lib/diffeq_solver.py ------------------------------------------------------------------------


class ODEFunc(nn.Module):
    def __init__(self, input_dim, latent_dim, ode_func_net, device = torch.device("cpu")):
        super(ODEFunc, self).__init__()

        self.input_dim = input_dim
        self.device = device

        init_network_weights(ode_func_net)
        self.gradient_net = ode_func_net

    def forward(self, t_local, y, backwards = False):
        grad = self.get_ode_gradient_nn(t_local, y)
        if backwards:
            grad = -grad
        return grad

    def get_ode_gradient_nn(self, t_local, y):
        return self.gradient_net(y)


class DiffeqSolver(nn.Module):
    def __init__(self, input_dim, ode_func, method, latents,
            odeint_rtol = 1e-4, odeint_atol = 1e-5, device = torch.device("cpu")):
        super(DiffeqSolver, self).__init__()

        self.ode_method = method
        self.latents = latents
        self.device = device
        self.ode_func = ode_func

        self.odeint_rtol = odeint_rtol
        self.odeint_atol = odeint_atol

    def forward(self, first_point, time_steps_to_predict, backwards = False):
        n_traj_samples, n_traj = first_point.size()[0], first_point.size()[1]

        pred_y = odeint(self.ode_func, first_point, time_steps_to_predict,
            rtol=self.odeint_rtol, atol=self.odeint_atol, method = self.ode_method)
        pred_y = pred_y.permute(1,2,0,3)

        assert(torch.mean(pred_y[:, :, 0, :]  - first_point) < 0.001)
        assert(pred_y.size()[0] == n_traj_samples)
        assert(pred_y.size()[1] == n_traj)

        return pred_y


# ---- lib/encoder_decoder.py ---------------------------------------------------------------------------------------


class GRU_unit(nn.Module):
    def __init__(self, latent_dim, input_dim,
        update_gate = None,
        reset_gate = None,
        new_state_net = None,
        n_units = 100,
        device = torch.device("cpu")):
        super(GRU_unit, self).__init__()

        if update_gate is None:
            self.update_gate = nn.Sequential(
               nn.Linear(latent_dim * 2 + input_dim, n_units),
               nn.Tanh(),
               nn.Linear(n_units, latent_dim),
               nn.Sigmoid())
            init_network_weights(self.update_gate)
        else:
            self.update_gate  = update_gate

        if reset_gate is None:
            self.reset_gate = nn.Sequential(
               nn.Linear(latent_dim * 2 + input_dim, n_units),
               nn.Tanh(),
               nn.Linear(n_units, latent_dim),
               nn.Sigmoid())
            init_network_weights(self.reset_gate)
        else:
            self.reset_gate  = reset_gate

        if new_state_net is None:
            self.new_state_net = nn.Sequential(
               nn.Linear(latent_dim * 2 + input_dim, n_units),
               nn.Tanh(),
               nn.Linear(n_units, latent_dim * 2))
            init_network_weights(self.new_state_net)
        else:
            self.new_state_net  = new_state_net

    def forward(self, y_mean, y_std, x, masked_update = True):
        y_concat = torch.cat([y_mean, y_std, x], -1)

        update_gate = self.update_gate(y_concat)
        reset_gate = self.reset_gate(y_concat)
        concat = torch.cat([y_mean * reset_gate, y_std * reset_gate, x], -1)

        new_state, new_state_std = split_last_dim(self.new_state_net(concat))
        new_state_std = new_state_std.abs()

        new_y = (1-update_gate) * new_state + update_gate * y_mean
        new_y_std = (1-update_gate) * new_state_std + update_gate * y_std

        assert(not torch.isnan(new_y).any())

        if masked_update:
            # IMPORTANT: assumes that x contains both data and mask
            # update only the hidden states for hidden state only if at least one feature is present for the current time point
            n_data_dims = x.size(-1)//2
            mask = x[:, :, n_data_dims:]
            check_mask(x[:, :, :n_data_dims], mask)

            mask = (torch.sum(mask, -1, keepdim = True) > 0).float()

            assert(not torch.isnan(mask).any())

            new_y = mask * new_y + (1-mask) * y_mean
            new_y_std = mask * new_y_std + (1-mask) * y_std

        new_y_std = new_y_std.abs()
        return new_y, new_y_std


class Encoder_z0_ODE_RNN(nn.Module):
    def __init__(self, latent_dim, input_dim, z0_diffeq_solver = None,
        z0_dim = None, GRU_update = None,
        n_gru_units = 100,
        device = torch.device("cpu")):

        super(Encoder_z0_ODE_RNN, self).__init__()

        if z0_dim is None:
            self.z0_dim = latent_dim
        else:
            self.z0_dim = z0_dim

        if GRU_update is None:
            self.GRU_update = GRU_unit(latent_dim, input_dim,
                n_units = n_gru_units,
                device=device).to(device)
        else:
            self.GRU_update = GRU_update

        self.z0_diffeq_solver = z0_diffeq_solver
        self.latent_dim = latent_dim
        self.input_dim = input_dim
        self.device = device
        self.extra_info = None

        self.transform_z0 = nn.Sequential(
           nn.Linear(latent_dim * 2, 100),
           nn.Tanh(),
           nn.Linear(100, self.z0_dim * 2),)
        init_network_weights(self.transform_z0)

    def run_odernn(self, data, time_steps,
        run_backwards = True, save_info = False):
        # IMPORTANT: assumes that 'data' already has mask concatenated to it

        n_traj, n_tp, n_dims = data.size()
        extra_info = []

        device = get_device(data)

        prev_y = torch.zeros((1, n_traj, self.latent_dim)).to(device)
        prev_std = torch.zeros((1, n_traj, self.latent_dim)).to(device)

        prev_t, t_i = time_steps[-1] + 0.01,  time_steps[-1]

        interval_length = time_steps[-1] - time_steps[0]
        minimum_step = interval_length / 50

        assert(not torch.isnan(data).any())
        assert(not torch.isnan(time_steps).any())

        latent_ys = []
        # Run ODE backwards and combine the y(t) estimates using gating
        time_points_iter = range(0, len(time_steps))
        if run_backwards:
            time_points_iter = reversed(time_points_iter)

        for i in time_points_iter:
            if (prev_t - t_i) < minimum_step:
                inc = self.z0_diffeq_solver.ode_func(prev_t, prev_y) * (t_i - prev_t)

                assert(not torch.isnan(inc).any())

                ode_sol = prev_y + inc
                ode_sol = torch.stack((prev_y, ode_sol), 2).to(device)

                assert(not torch.isnan(ode_sol).any())
            else:
                n_intermediate_tp = max(2, ((prev_t - t_i) / minimum_step).int())

                time_points = linspace_vector(prev_t, t_i, n_intermediate_tp)
                ode_sol = self.z0_diffeq_solver(prev_y, time_points)

                assert(not torch.isnan(ode_sol).any())

            if torch.mean(ode_sol[:, :, 0, :]  - prev_y) >= 0.001:
                raise RuntimeError("Error: first point of the ODE is not equal to initial value")

            yi_ode = ode_sol[:, :, -1, :]
            xi = data[:,i,:].unsqueeze(0)

            yi, yi_std = self.GRU_update(yi_ode, prev_std, xi)

            prev_y, prev_std = yi, yi_std
            prev_t, t_i = time_steps[i],  time_steps[i-1]

            latent_ys.append(yi)

        latent_ys = torch.stack(latent_ys, 1)

        assert(not torch.isnan(yi).any())
        assert(not torch.isnan(yi_std).any())

        return yi, yi_std, latent_ys, extra_info


# ---- lib/likelihood_eval.py ---------------------------------------------------------------------------------------


def gaussian_log_likelihood(mu_2d, data_2d, obsrv_std, indices = None):
    n_data_points = mu_2d.size()[-1]

    if n_data_points > 0:
        gaussian = Independent(Normal(loc = mu_2d, scale = obsrv_std.repeat(n_data_points)), 1)
        log_prob = gaussian.log_prob(data_2d)
        log_prob = log_prob / n_data_points
    else:
        log_prob = torch.zeros([1]).to(get_device(data_2d)).squeeze()
    return log_prob


def compute_masked_likelihood(mu, data, mask, likelihood_func):
    # Compute the likelihood per patient and per attribute so that we don't priorize patients with more measurements
    n_traj_samples, n_traj, n_timepoints, n_dims = data.size()

    res = []
    for i in range(n_traj_samples):
        for k in range(n_traj):
            for j in range(n_dims):
                data_masked = torch.masked_select(data[i,k,:,j], mask[i,k,:,j].bool())

                mu_masked = torch.masked_select(mu[i,k,:,j], mask[i,k,:,j].bool())
                log_prob = likelihood_func(mu_masked, data_masked, indices = (i,k,j))
                res.append(log_prob)
    # shape: [n_traj*n_traj_samples, 1]

    res = torch.stack(res, 0).to(get_device(data))
    res = res.reshape((n_traj_samples, n_traj, n_dims))
    # Take mean over the number of dimensions
    res = torch.mean(res, -1) # !!!!!!!!!!! changed from sum to mean
    res = res.transpose(0,1)
    return res


def masked_gaussian_log_density(mu, data, obsrv_std, mask = None):
    # these cases are for plotting through plot_estim_density
    if (len(mu.size()) == 3):
        # add additional dimension for gp samples
        mu = mu.unsqueeze(0)

    if (len(data.size()) == 2):
        # add additional dimension for gp samples and time step
        data = data.unsqueeze(0).unsqueeze(2)
    elif (len(data.size()) == 3):
        # add additional dimension for gp samples
        data = data.unsqueeze(0)

    n_traj_samples, n_traj, n_timepoints, n_dims = mu.size()

    assert(data.size()[-1] == n_dims)

    # Shape after permutation: [n_traj, n_traj_samples, n_timepoints, n_dims]
    if mask is None:
        mu_flat = mu.reshape(n_traj_samples*n_traj, n_timepoints * n_dims)
        n_traj_samples, n_traj, n_timepoints, n_dims = data.size()
        data_flat = data.reshape(n_traj_samples*n_traj, n_timepoints * n_dims)

        res = gaussian_log_likelihood(mu_flat, data_flat, obsrv_std)
        res = res.reshape(n_traj_samples, n_traj).transpose(0,1)
    else:
        # Compute the likelihood per patient so that we don't priorize patients with more measurements
        func = lambda mu, data, indices: gaussian_log_likelihood(mu, data, obsrv_std = obsrv_std, indices = indices)
        res = compute_masked_likelihood(mu, data, mask, func)
    return res


def mse(mu, data, indices = None):
    n_data_points = mu.size()[-1]

    if n_data_points > 0:
        mse = nn.MSELoss()(mu, data)
    else:
        mse = torch.zeros([1]).to(get_device(data)).squeeze()
    return mse


def compute_mse(mu, data, mask = None):
    # these cases are for plotting through plot_estim_density
    if (len(mu.size()) == 3):
        # add additional dimension for gp samples
        mu = mu.unsqueeze(0)

    if (len(data.size()) == 2):
        # add additional dimension for gp samples and time step
        data = data.unsqueeze(0).unsqueeze(2)
    elif (len(data.size()) == 3):
        # add additional dimension for gp samples
        data = data.unsqueeze(0)

    n_traj_samples, n_traj, n_timepoints, n_dims = mu.size()
    assert(data.size()[-1] == n_dims)

    # Shape after permutation: [n_traj, n_traj_samples, n_timepoints, n_dims]
    if mask is None:
        mu_flat = mu.reshape(n_traj_samples*n_traj, n_timepoints * n_dims)
        n_traj_samples, n_traj, n_timepoints, n_dims = data.size()
        data_flat = data.reshape(n_traj_samples*n_traj, n_timepoints * n_dims)
        res = mse(mu_flat, data_flat)
    else:
        # Compute the likelihood per patient so that we don't priorize patients with more measurements
        res = compute_masked_likelihood(mu, data, mask, mse)
    return res


# ---- lib/base_models.py (Baseline), lib/ode_rnn.py ----------------------------------------------------------------


class Baseline(nn.Module):
    def __init__(self, input_dim, latent_dim, device,
        obsrv_std = 0.01, use_binary_classif = False,
        classif_per_tp = False,
        use_poisson_proc = False,
        linear_classifier = False,
        n_labels = 1,
        train_classif_w_reconstr = False):
        super(Baseline, self).__init__()

        self.input_dim = input_dim
        self.latent_dim = latent_dim
        self.n_labels = n_labels

        self.obsrv_std = torch.Tensor([obsrv_std]).to(device)
        self.device = device

        self.use_binary_classif = use_binary_classif
        self.classif_per_tp = classif_per_tp
        self.use_poisson_proc = use_poisson_proc
        self.linear_classifier = linear_classifier
        self.train_classif_w_reconstr = train_classif_w_reconstr

    def get_gaussian_likelihood(self, truth, pred_y, mask = None):
        # pred_y shape [n_traj_samples, n_traj, n_tp, n_dim]
        # truth shape  [n_traj, n_tp, n_dim]
        if mask is not None:
            mask = mask.repeat(pred_y.size(0), 1, 1, 1)

        # Compute likelihood of the data under the predictions
        log_density_data = masked_gaussian_log_density(pred_y, truth,
            obsrv_std = self.obsrv_std, mask = mask)
        log_density_data = log_density_data.permute(1,0)

        # Compute the total density
        # Take mean over n_traj_samples
        log_density = torch.mean(log_density_data, 0)

        # shape: [n_traj]
        return log_density

    def get_mse(self, truth, pred_y, mask = None):
        # pred_y shape [n_traj_samples, n_traj, n_tp, n_dim]
        # truth shape  [n_traj, n_tp, n_dim]
        if mask is not None:
            mask = mask.repeat(pred_y.size(0), 1, 1, 1)

        # Compute likelihood of the data under the predictions
        log_density_data = compute_mse(pred_y, truth, mask = mask)
        # shape: [1]
        return torch.mean(log_density_data)

    def compute_all_losses(self, batch_dict,
        n_tp_to_sample = None, n_traj_samples = 1, kl_coef = 1.):

        # Condition on subsampled points
        # Make predictions for all the points
        pred_x, info = self.get_reconstruction(batch_dict["tp_to_predict"],
            batch_dict["observed_data"], batch_dict["observed_tp"],
            mask = batch_dict["observed_mask"], n_traj_samples = n_traj_samples,
            mode = batch_dict["mode"])

        # Compute likelihood of all the points
        likelihood = self.get_gaussian_likelihood(batch_dict["data_to_predict"], pred_x,
            mask = batch_dict["mask_predicted_data"])

        mse = self.get_mse(batch_dict["data_to_predict"], pred_x,
            mask = batch_dict["mask_predicted_data"])

        device = get_device(batch_dict["data_to_predict"])
        ce_loss = torch.Tensor([0.]).to(device)
        pois_log_likelihood = torch.Tensor([0.]).to(get_device(batch_dict["data_to_predict"]))

        loss = - torch.mean(likelihood)

        # Take mean over the number of samples in a batch
        results = {}
        results["loss"] = torch.mean(loss)
        results["likelihood"] = torch.mean(likelihood).detach()
        results["mse"] = torch.mean(mse).detach()
        results["pois_likelihood"] = torch.mean(pois_log_likelihood).detach()
        results["ce_loss"] = torch.mean(ce_loss).detach()
        results["kl"] = 0.
        results["kl_first_p"] =  0.
        results["std_first_p"] = 0.
        return results


class ODE_RNN(Baseline):
    def __init__(self, input_dim, latent_dim, device = torch.device("cpu"),
        z0_diffeq_solver = None, n_gru_units = 100,  n_units = 100,
        concat_mask = False, obsrv_std = 0.1, use_binary_classif = False,
        classif_per_tp = False, n_labels = 1, train_classif_w_reconstr = False, bug = None):

        Baseline.__init__(self, input_dim, latent_dim, device = device,
            obsrv_std = obsrv_std, use_binary_classif = use_binary_classif,
            classif_per_tp = classif_per_tp,
            n_labels = n_labels,
            train_classif_w_reconstr = train_classif_w_reconstr)

        ode_rnn_encoder_dim = latent_dim
        self.bug = bug

        self.ode_gru = Encoder_z0_ODE_RNN(
            latent_dim = ode_rnn_encoder_dim,
            input_dim = (input_dim) * 2, # input and the mask
            z0_diffeq_solver = z0_diffeq_solver,
            n_gru_units = n_gru_units,
            device = device).to(device)

        self.z0_diffeq_solver = z0_diffeq_solver

        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, n_units),
            nn.Tanh(),
            nn.Linear(n_units, input_dim),)

        init_network_weights(self.decoder)

    def get_reconstruction(self, time_steps_to_predict, data, truth_time_steps,
        mask = None, n_traj_samples = None, mode = None):

        if (len(truth_time_steps) != len(time_steps_to_predict)) or (torch.sum(time_steps_to_predict - truth_time_steps) != 0):
            raise Exception("Extrapolation mode not implemented for ODE-RNN")

        # time_steps_to_predict and truth_time_steps should be the same
        assert(len(truth_time_steps) == len(time_steps_to_predict))
        assert(mask is not None)

        data_and_mask = data
        if mask is not None:
            data_and_mask = torch.cat([data, mask],-1)

        _, _, latent_ys, _ = self.ode_gru.run_odernn(
            data_and_mask, truth_time_steps, run_backwards = False)

        latent_ys = latent_ys.permute(0,2,1,3)

        outputs = self.decoder(latent_ys)
        if self.bug == "outputs_not_shifted":
            # each output read from the state that has already seen its own data point
            return outputs, {"first_point": (latent_ys[:,:,-1,:], 0.0, latent_ys[:,:,-1,:])}
        # Shift outputs for computing the loss -- we should compare the first output to the second data point, etc.
        first_point = data[:,0,:]
        outputs = shift_outputs(outputs, first_point)

        extra_info = {"first_point": (latent_ys[:,:,-1,:], 0.0, latent_ys[:,:,-1,:])}

        # outputs shape: [n_traj_samples, n_traj, n_tp, n_dims]
        return outputs, extra_info

    def forward(self, batch_dict):
        # added by the port (see the docstring): the reconstruction compute_all_losses makes, as a forward
        pred_x, _ = self.get_reconstruction(batch_dict["tp_to_predict"],
            batch_dict["observed_data"], batch_dict["observed_tp"],
            mask = batch_dict["observed_mask"], n_traj_samples = 3,
            mode = batch_dict["mode"])
        return pred_x


# ---- generate_timeseries.py ---------------------------------------------------------------------------------------


def get_next_val(init, t, tmin, tmax, final = None):
    if final is None:
        return init
    val = init + (final - init) / (tmax - tmin) * t
    return val


def generate_periodic(time_steps, init_freq, init_amplitude, starting_point,
    final_freq = None, final_amplitude = None, phi_offset = 0.):

    tmin = time_steps.min()
    tmax = time_steps.max()

    data = []
    t_prev = time_steps[0]
    phi = phi_offset
    for t in time_steps:
        dt = t - t_prev
        amp = get_next_val(init_amplitude, t, tmin, tmax, final_amplitude)
        freq = get_next_val(init_freq, t, tmin, tmax, final_freq)
        phi = phi + 2 * np.pi * freq * dt # integrate to get phase

        y = amp * np.sin(phi) + starting_point
        t_prev = t
        data.append([t,y])
    return np.array(data)


def assign_value_or_sample(value, rng, sampling_interval = [0.,1.]):  # noqa: B006
    if value is None:
        int_length = sampling_interval[1] - sampling_interval[0]
        return rng.random() * int_length + sampling_interval[0]
    else:
        return value


class Periodic_1d:
    def __init__(self, device = torch.device("cpu"),
        init_freq = 0.3, init_amplitude = 1.,
        final_amplitude = 10., final_freq = 1.,
        z0 = 0., rng = None):
        self.device = device
        self.init_freq = init_freq
        self.init_amplitude = init_amplitude
        self.final_amplitude = final_amplitude
        self.final_freq = final_freq
        self.z0 = z0
        self.rng = rng

    def add_noise(self, traj_list, time_steps, noise_weight):
        n_samples = traj_list.size(0)

        # Add noise to all the points except the first point
        n_tp = len(time_steps) - 1
        noise = self.rng.random_sample((n_samples, n_tp))
        noise = torch.Tensor(noise).to(self.device)

        traj_list_w_noise = traj_list.clone()
        # Dimension [:,:,0] is a time dimension -- do not add noise to that
        traj_list_w_noise[:,1:,0] += noise_weight * noise
        return traj_list_w_noise

    def sample_traj(self, time_steps, n_samples = 1, noise_weight = 1.,
        cut_out_section = None):
        traj_list = []
        for i in range(n_samples):
            init_freq = assign_value_or_sample(self.init_freq, self.rng, [0.4,0.8])
            if self.final_freq is None:
                final_freq = init_freq
            else:
                final_freq = assign_value_or_sample(self.final_freq, self.rng, [0.4,0.8])
            init_amplitude = assign_value_or_sample(self.init_amplitude, self.rng, [0.,1.])
            final_amplitude = assign_value_or_sample(self.final_amplitude, self.rng, [0.,1.])

            noisy_z0 = self.z0 + self.rng.normal(loc=0., scale=0.1)

            traj = generate_periodic(time_steps, init_freq = init_freq,
                init_amplitude = init_amplitude, starting_point = noisy_z0,
                final_amplitude = final_amplitude, final_freq = final_freq)

            # Cut the time dimension
            traj = np.expand_dims(traj[:,1:], 0)
            traj_list.append(traj)

        # shape: [n_samples, n_timesteps, 2]
        # traj_list[:,:,0] -- time stamps
        # traj_list[:,:,1] -- values at the time stamps
        traj_list = np.array(traj_list)
        traj_list = torch.Tensor().new_tensor(traj_list, device = self.device)
        traj_list = traj_list.squeeze(1)

        traj_list = self.add_noise(traj_list, time_steps, noise_weight)
        return traj_list


# ---- lib/parse_datasets.py (periodic branch) ----------------------------------------------------------------------


def parse_datasets(args, device, seed):
    rng = np.random.RandomState(seed)
    gen = torch.Generator().manual_seed(seed)

    def basic_collate_fn(batch, time_steps, args = args, device = device, data_type = "train"):
        batch = torch.stack(batch)
        data_dict = {
            "data": batch,
            "time_steps": time_steps}

        data_dict = split_and_subsample_batch(data_dict, args, data_type = data_type)
        return data_dict

    n_total_tp = args.timepoints + args.extrap
    max_t_extrap = args.max_t / args.timepoints * n_total_tp

    distribution = uniform.Uniform(torch.Tensor([0.0]),torch.Tensor([max_t_extrap]))
    time_steps_extrap = distribution.low + torch.rand(torch.Size([n_total_tp-1, 1]), generator=gen) * (
        distribution.high - distribution.low)  # distribution.sample(...) from the seeded generator
    time_steps_extrap = time_steps_extrap[:,0]
    time_steps_extrap = torch.cat((torch.Tensor([0.0]), time_steps_extrap))
    time_steps_extrap = torch.sort(time_steps_extrap)[0]

    dataset_obj = Periodic_1d(
        init_freq = None, init_amplitude = 1.,
        final_amplitude = 1., final_freq = None,
        z0 = 1., rng = rng)

    dataset = dataset_obj.sample_traj(time_steps_extrap, n_samples = args.n,
        noise_weight = args.noise_weight)

    train_y, test_y = split_train_test(dataset, train_fraq = 0.8)

    input_dim = dataset.size(-1)

    batch_size = min(args.batch_size, args.n)
    train_dataloader = DataLoader(train_y, batch_size = batch_size, shuffle=False,
        collate_fn= lambda batch: basic_collate_fn(batch, time_steps_extrap, data_type = "train"))
    test_dataloader = DataLoader(test_y, batch_size = args.n, shuffle=False,
        collate_fn= lambda batch: basic_collate_fn(batch, time_steps_extrap, data_type = "test"))

    data_objects = {"train_dataloader": inf_generator(train_dataloader),
                "test_dataloader": inf_generator(test_dataloader),
                "input_dim": input_dim,
                "n_train_batches": len(train_dataloader),
                "n_test_batches": len(test_dataloader),
                "train_loader": train_dataloader}

    return data_objects


# ---- run_models.py (--dataset periodic --ode-rnn -l 10) -----------------------------------------------------------


def _build(seed, bug=None):
    args = ARGS
    device = torch.device("cpu")
    torch.manual_seed(seed)

    data_obj = parse_datasets(args, device, seed)
    input_dim = data_obj["input_dim"]
    classif_per_tp = False
    n_labels = 1

    obsrv_std = 0.01
    obsrv_std = torch.Tensor([obsrv_std]).to(device)

    n_ode_gru_dims = args.latents

    ode_func_net = create_net(n_ode_gru_dims, n_ode_gru_dims,
        n_layers = args.rec_layers, n_units = args.units, nonlinear = nn.Tanh)

    rec_ode_func = ODEFunc(
        input_dim = input_dim,
        latent_dim = n_ode_gru_dims,
        ode_func_net = ode_func_net,
        device = device).to(device)

    z0_diffeq_solver = DiffeqSolver(input_dim, rec_ode_func, "euler", args.latents,
        odeint_rtol = 1e-3, odeint_atol = 1e-4, device = device)

    model = ODE_RNN(input_dim, n_ode_gru_dims, device = device,
        z0_diffeq_solver = z0_diffeq_solver, n_gru_units = args.gru_units,
        concat_mask = True, obsrv_std = obsrv_std,
        use_binary_classif = False,
        classif_per_tp = classif_per_tp,
        n_labels = n_labels,
        train_classif_w_reconstr = (args.dataset == "physionet"),
        bug = bug,
        ).to(device)

    optimizer = torch.optim.Adamax(model.parameters(), lr=args.lr)

    num_batches = data_obj["n_train_batches"]
    state = {"itr": 0}

    def train_step():
        state["itr"] += 1
        itr = state["itr"]
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        update_learning_rate(optimizer, decay_rate = 0.999, lowest = args.lr / 10)

        wait_until_kl_inc = 10
        if itr // num_batches < wait_until_kl_inc:
            kl_coef = 0.
        else:
            kl_coef = (1-0.99** (itr // num_batches - wait_until_kl_inc))

        batch_dict = get_next_batch(data_obj["train_dataloader"])
        train_res = model.compute_all_losses(batch_dict, n_traj_samples = 3, kl_coef = kl_coef)
        train_res["loss"].backward()
        optimizer.step()
        return train_res["loss"].detach()

    def loss_fn(pred_x, batch_dict):
        # compute_all_losses' loss on the reconstruction: the negative mean masked Gaussian log-likelihood
        likelihood = model.get_gaussian_likelihood(batch_dict["data_to_predict"], pred_x,
            mask = batch_dict["mask_predicted_data"])
        return - torch.mean(likelihood)

    def eval_fn(model_, batch):
        with torch.no_grad():
            return float(model_.compute_all_losses(batch[0], n_traj_samples = 3, kl_coef = 0.)["mse"])

    batch_dict = get_next_batch(inf_generator(data_obj["train_loader"]))
    return Program(name="latentode_odernn", model=model, batch=(batch_dict, batch_dict), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=data_obj["train_loader"])


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: ``shift_outputs`` left out: the output at each time point is decoded from the state that the GRU
    # update has already fed that very point, so the model is scored on echoing its input (a target leak).
    Bug("outputs_not_shifted", functools.partial(_build, bug="outputs_not_shifted"), "learning_ledger", ("TASK",)),
    # classic: ``optimizer.zero_grad()`` dropped from the loop: gradients accumulate across iterations.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
