# ruff: noqa: PLR0402, F841
"""A physics-informed neural network for the viscous Burgers equation ``u_t + u u_x - (0.01/pi) u_xx = 0`` on
``x in [-1, 1], t in [0, 1]`` (initial condition ``-sin(pi x)``, zero boundaries), from omniscientoctopus'
Physics-Informed-Neural-Networks: a tanh MLP with 8 hidden layers of 20 on min-max-scaled ``(x, t)``, the MSE on 100
initial/boundary points plus the MSE of the PDE residual (derivatives by ``autograd.grad(create_graph=True)``) at
Latin-hypercube collocation points, trained by L-BFGS with a strong-Wolfe line search through a closure.

Source: https://github.com/omniscientoctopus/Physics-Informed-Neural-Networks
Commit: 7d26e55cc665b79b652b226860177fa4defe9190
Files: ``PyTorch/Burgers' Equation/Burgers.ipynb`` (the data cells, ``trainingdata``, ``Sequentialmodel``, the main
cell)
License: MIT (Copyright (c) 2020 omniscientoctopus; full text in
LICENSES/omniscientoctopus-Physics-Informed-Neural-Networks.txt)
Domain: physics-informed neural network (PDE residual loss through first and second autograd derivatives, L-BFGS)

Kept as written: ``trainingdata`` (the initial edge and the two boundary edges stacked, ``N_u`` of them drawn by
``np.random.choice`` without replacement, collocation points ``lb + (ub - lb) * lhs(2, N_f)`` with the training
points appended), ``Sequentialmodel`` (``nn.ModuleList`` of Linear layers ``[2, 20 x 8, 1]``, Xavier-normal weights
with gain 1 and zero biases, feature scaling by ``lb``/``ub``, tanh; ``loss_BC`` the MSE on the edge points;
``loss_PDE`` with ``nu = 0.01/np.pi``, ``u_x_t`` by ``autograd.grad`` against ones, ``u_xx_tt`` by ``autograd.grad``
of ``u_x_t`` against ones of the input's shape (so its first column is the x-derivative of ``u_x + u_t``, as
written), the residual ``u_t + u * u_x - nu * u_xx`` regressed on ``f_hat`` zeros; ``loss`` the sum; ``closure``
zero_grad / loss / backward; ``test`` the relative L2 error on the whole grid), the main cell (``N_u = 100``,
``layers``, ``torch.optim.LBFGS(lr=0.1, max_eval=None, tolerance_grad=1e-05, tolerance_change=1e-09,
history_size=100, line_search_fn='strong_wolfe')``, ``optimizer.step(PINN.closure)``), float32 defaults.

Deviations from the original:
- data: ``Data/burgers_shock_mu_01_pi.mat`` (the reference solution on a 256 x 100 grid) is replaced by the same
  grid computed here: ``x`` 256 points in [-1, 1], ``t`` 100 points in [0, 0.99], ``usol`` from the Cole-Hopf
  solution of this Burgers problem by Gauss-Hermite quadrature (the way such reference files are made); the edges
  the training data takes from it are the exact initial and boundary values.
- ``pyDOE.lhs`` is not installed: ``lhs`` (pyDOE's classic Latin hypercube: one uniform draw per stratum, strata
  permuted per column with ``np.random``) is written out.
- the seeds: the notebook's ``torch.manual_seed(1234)`` / ``np.random.seed(1234)`` take ``seed``.
- sizes for 2 CPU cores: ``N_f`` 10_000 -> 1000 collocation points; L-BFGS ``max_iter`` 250 -> 5 per
  ``optimizer.step`` call: ``train_step`` is one ``optimizer.step(PINN.closure)`` (the optimizer's history carries
  over from call to call) and returns the loss it starts from. The closure's every-100-iterations ``PINN.test()``
  print, the timing, the summary print and the plots are dropped; ``eval_fn`` is ``test``'s relative L2 error.
- the notebook's globals (``lb``, ``ub``, ``layers``, ``device``, ``f_hat``, ``optimizer``, the training tensors)
  are the build's locals, closed over by the class, which is defined inside the build; the device is the CPU.
- the Program's batch is ``(X_u_train, u_train)``; ``loss_fn`` adds ``loss_PDE`` on ``X_f_train`` to the MSE of the
  model's outputs (``PINN.loss`` split at its model call).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.autograd as autograd  # computation graph
import torch.nn as nn  # neural networks

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

N_F = 1000  # (port) 10_000
MAX_ITER = 5  # (port) 250, per optimizer.step call


def lhs(n, samples):
    """(port) pyDOE's ``lhs(n, samples)`` with no criterion (``_lhsclassic``), written out."""
    cut = np.linspace(0, 1, samples + 1)
    u = np.random.rand(samples, n)
    a = cut[:samples]
    b = cut[1:samples + 1]
    rdpoints = np.zeros_like(u)
    for j in range(n):
        rdpoints[:, j] = u[:, j] * (b - a) + a
    H = np.zeros_like(rdpoints)
    for j in range(n):
        order = np.random.permutation(range(samples))
        H[:, j] = rdpoints[order, j]
    return H


def burgers_reference(x, t, nu, n_quad=200):
    """(port) stands in for ``burgers_shock_mu_01_pi.mat``: the Cole-Hopf solution of ``u_t + u u_x = nu u_xx``,
    ``u(x, 0) = -sin(pi x)``, by Gauss-Hermite quadrature, as a ``[len(x), len(t)]`` array (usol[i, j] = u(x_i, t_j))."""
    z, w = np.polynomial.hermite.hermgauss(n_quad)
    usol = np.zeros((len(x), len(t)))
    usol[:, 0] = -np.sin(np.pi * x)
    for j in range(1, len(t)):
        s = np.sqrt(4 * nu * t[j])
        y = x[:, None] - s * z[None, :]                      # x - eta
        logf = -np.cos(np.pi * y) / (2 * np.pi * nu)
        logf -= logf.max(axis=1, keepdims=True)
        f = w[None, :] * np.exp(logf)
        usol[:, j] = -(np.sin(np.pi * y) * f).sum(1) / f.sum(1)
    usol[0, :] = 0.0
    usol[-1, :] = 0.0
    return usol


def _build(seed, bug=None):
    #Set default dtype to float32
    torch.set_default_dtype(torch.float)

    #PyTorch random number generator
    torch.manual_seed(seed)  # (port) 1234

    # Random number generators in other libraries
    np.random.seed(seed)  # (port) 1234

    # Device configuration
    device = torch.device('cpu')  # (port) 'cuda' if torch.cuda.is_available() else 'cpu'

    # *Data Prep*
    x = np.linspace(-1, 1, 256)[:, None]            # (port) data['x']: 256 points between -1 and 1 [256x1]
    t = np.linspace(0, 0.99, 100)[:, None]          # (port) data['t']: 100 time points between 0 and 1 [100x1]
    usol = burgers_reference(x[:, 0], t[:, 0], 0.01 / np.pi)  # (port) data['usol']: 256x100 grid points

    X, T = np.meshgrid(x,t)                         # makes 2 arrays X and T such that u(X[i],T[j])=usol[i][j] are a tuple

    # Test Data
    ''' X_u_test = [X[i],T[i]] [25600,2] for interpolation'''
    X_u_test = np.hstack((X.flatten()[:,None], T.flatten()[:,None]))

    # Domain bounds
    lb = X_u_test[0]  # [-1. 0.]
    ub = X_u_test[-1] # [1.  0.99]

    u_true = usol.flatten('F')[:,None]

    # Training Data
    def trainingdata(N_u,N_f):

        '''Boundary Conditions'''

        #Initial Condition -1 =< x =<1 and t = 0
        leftedge_x = np.hstack((X[0,:][:,None], T[0,:][:,None])) #L1
        leftedge_u = usol[:,0][:,None]

        #Boundary Condition x = -1 and 0 =< t =<1
        bottomedge_x = np.hstack((X[:,0][:,None], T[:,0][:,None])) #L2
        bottomedge_u = usol[-1,:][:,None]

        #Boundary Condition x = 1 and 0 =< t =<1
        topedge_x = np.hstack((X[:,-1][:,None], T[:,0][:,None])) #L3
        topedge_u = usol[0,:][:,None]

        all_X_u_train = np.vstack([leftedge_x, bottomedge_x, topedge_x]) # X_u_train [456,2] (456 = 256(L1)+100(L2)+100(L3))
        all_u_train = np.vstack([leftedge_u, bottomedge_u, topedge_u])   #corresponding u [456x1]

        #choose random N_u points for training
        idx = np.random.choice(all_X_u_train.shape[0], N_u, replace=False)

        X_u_train = all_X_u_train[idx, :] #choose indices from  set 'idx' (x,t)
        if bug == "targets_drawn_apart":
            idx = np.random.choice(all_X_u_train.shape[0], N_u, replace=False)
        u_train = all_u_train[idx,:]      #choose corresponding u

        '''Collocation Points'''

        # Latin Hypercube sampling for collocation points
        # N_f sets of tuples(x,t)
        X_f_train = lb + (ub-lb)*lhs(2,N_f)
        X_f_train = np.vstack((X_f_train, X_u_train)) # append training points to collocation points

        return X_f_train, X_u_train, u_train

    # Physics Informed Neural Network
    class Sequentialmodel(nn.Module):

        def __init__(self,layers):
            super().__init__() #call __init__ from parent class

            'activation function'
            self.activation = nn.Tanh()

            'loss function'
            self.loss_function = nn.MSELoss(reduction ='mean')

            'Initialise neural network as a list using nn.Modulelist'
            self.linears = nn.ModuleList([nn.Linear(layers[i], layers[i+1]) for i in range(len(layers)-1)])

            self.iter = 0

            'Xavier Normal Initialization'
            # std = gain * sqrt(2/(input_dim+output_dim))
            for i in range(len(layers)-1):

                # weights from a normal distribution with
                # Recommended gain value for tanh = 5/3?
                nn.init.xavier_normal_(self.linears[i].weight.data, gain=1.0)

                # set biases to zero
                nn.init.zeros_(self.linears[i].bias.data)

        'foward pass'
        def forward(self,x):

            if torch.is_tensor(x) != True:
                x = torch.from_numpy(x)

            u_b = torch.from_numpy(ub).float().to(device)
            l_b = torch.from_numpy(lb).float().to(device)

            #preprocessing input
            x = (x - l_b)/(u_b - l_b) #feature scaling

            #convert to float
            a = x.float()

            for i in range(len(layers)-2):

                z = self.linears[i](a)

                a = self.activation(z)

            a = self.linears[-1](a)

            return a

        def loss_BC(self,x,y):

            loss_u = self.loss_function(self.forward(x), y)

            return loss_u

        def loss_PDE(self, x_to_train_f):

            nu = 0.01/np.pi

            x_1_f = x_to_train_f[:,[0]]
            x_2_f = x_to_train_f[:,[1]]

            g = x_to_train_f.clone()

            g.requires_grad = True

            u = self.forward(g)

            u_x_t = autograd.grad(u,g,torch.ones([x_to_train_f.shape[0], 1]).to(device), retain_graph=True, create_graph=True)[0]

            u_xx_tt = autograd.grad(u_x_t,g,torch.ones(x_to_train_f.shape).to(device), create_graph=True)[0]

            if bug == "derivative_columns_swapped":
                u_x = u_x_t[:,[1]]

                u_t = u_x_t[:,[0]]
            else:
                u_x = u_x_t[:,[0]]

                u_t = u_x_t[:,[1]]

            u_xx = u_xx_tt[:,[0]]

            f = u_t + (self.forward(g))*(u_x) - (nu)*u_xx

            loss_f = self.loss_function(f,f_hat)

            return loss_f

        def loss(self,x,y,x_to_train_f):

            loss_u = self.loss_BC(x,y)
            loss_f = self.loss_PDE(x_to_train_f)

            loss_val = loss_u + loss_f

            return loss_val

        'callable for optimizer'
        def closure(self):

            if bug != "closure_zero_grad_dropped":
                optimizer.zero_grad()

            loss = self.loss(X_u_train, u_train, X_f_train)

            loss.backward()

            self.iter += 1

            return loss

        'test neural network'
        def test(self):

            u_pred = self.forward(X_u_test_tensor)

            error_vec = torch.linalg.norm((u-u_pred),2)/torch.linalg.norm(u,2)        # Relative L2 Norm of the error (Vector)

            u_pred = u_pred.cpu().detach().numpy()

            u_pred = np.reshape(u_pred,(256,100),order='F')

            return error_vec, u_pred

    # Main
    'Generate Training data'
    N_u = 100 #Total number of data points for 'u'
    N_f = N_F #Total number of collocation points  (port) 10_000
    X_f_train_np_array, X_u_train_np_array, u_train_np_array = trainingdata(N_u,N_f)

    'Convert to tensor and send to GPU'
    X_f_train = torch.from_numpy(X_f_train_np_array).float().to(device)
    X_u_train = torch.from_numpy(X_u_train_np_array).float().to(device)
    u_train = torch.from_numpy(u_train_np_array).float().to(device)
    X_u_test_tensor = torch.from_numpy(X_u_test).float().to(device)
    u = torch.from_numpy(u_true).float().to(device)
    f_hat = torch.zeros(X_f_train.shape[0],1).to(device)

    layers = np.array([2,20,20,20,20,20,20,20,20,1]) #8 hidden layers

    PINN = Sequentialmodel(layers)

    PINN.to(device)

    '''Optimization'''

    'L-BFGS Optimizer'
    optimizer = torch.optim.LBFGS(PINN.parameters(), lr=0.1,
                                  max_iter = MAX_ITER,  # (port) 250
                                  max_eval = None,
                                  tolerance_grad = 1e-05,
                                  tolerance_change = 1e-09,
                                  history_size = 100,
                                  line_search_fn = 'strong_wolfe')

    def train_step():
        return optimizer.step(PINN.closure).item()

    def loss_fn(u_pred, y):
        """``PINN.loss`` on the model's outputs for ``X_u_train``: ``loss_BC``'s MSE plus ``loss_PDE``."""
        return PINN.loss_function(u_pred, y) + PINN.loss_PDE(X_f_train)

    def eval_fn(model, _batch=None):
        with torch.no_grad():
            error_vec, _ = model.test()
        return float(error_vec)

    return Program(name="pinnsoctopus_burgers", model=PINN, batch=(X_u_train, u_train), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``u_x`` and ``u_t`` read from the wrong columns of ``u_x_t`` (classic index slip): the residual is that of
    # another equation, which the edge data cannot satisfy.
    Bug("derivative_columns_swapped", functools.partial(_build, bug="derivative_columns_swapped"),
        "learning_ledger", ("OBJECTIVE",)),
    # the training targets picked by a second ``np.random.choice`` draw, apart from their points (classic): the
    # edge values no longer belong to the points they are fitted at.
    Bug("targets_drawn_apart", functools.partial(_build, bug="targets_drawn_apart"), "learning_ledger", ("TASK",)),
    # ``optimizer.zero_grad()`` left out of the closure (classic): every evaluation of the L-BFGS closure adds to
    # the gradients of all earlier ones. Every parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("closure_zero_grad_dropped", functools.partial(_build, bug="closure_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]
