# ruff: noqa: F821, C408, PLR0402, RUF059
"""pytorch_GAN_zoo's DCGAN (Facebook Research) on the zoo's ``BaseGAN`` framework: transposed-conv generator with
BatchNorm and tanh, strided-conv discriminator with BatchNorm and LeakyReLU (N(0, 0.02) conv weights), the ``DCGAN``
loss wrapper (sigmoid + BCE against the real/fake status), ``optimizeParameters`` (D on a real and a detached fake
batch, ``finiteCheck``, D's step; G through D with ``retain_graph``, G's step; a 0.999 moving average of G in
``avgG``), Adam (lr 2e-4, betas (0.5, 0.999)) for each network, the ``dcgan_config`` defaults.

Source: https://github.com/facebookresearch/pytorch_GAN_zoo
Commit: b75dee40918caabb4fe7ec561522717bf096a8cb
Files: ``models/DCGAN.py``, ``models/base_GAN.py`` (the methods the run calls), ``models/trainer/DCGAN_trainer.py``,
``models/trainer/gan_trainer.py`` (``trainOnEpoch``, the loader's transform), ``models/trainer/
standard_configurations/dcgan_config.py``; in ``_pytorchganzoo_lib.py``: ``models/networks/DCGAN_nets.py``,
``models/utils/utils.py`` (``finiteCheck``), ``models/utils/config.py``, ``models/loss_criterions/
base_loss_criterions.py`` (``DCGAN``)
License: BSD-3-Clause (Copyright 2019, Facebook; full text in LICENSES/facebookresearch-pytorch_GAN_zoo.txt)
Domain: generative adversarial network (DCGAN, BCE on the discriminator's logit, EMA generator)

Kept as written: the copied methods (the AC-GAN, WGAN-GP, epsilon, logistic-penalty and GDPP branches are copied
but not taken by the DCGAN config; their helpers are not copied), ``DCGAN`` with its Adam optimizers,
``trainOnEpoch``'s loop body (a short batch skipped, ``optimizeParameters(inputs_real, inputLabels=labels)``), the
config's lossMode 'DCGAN', lambdaGP 0, epsilonD 0, baseLearningRate 2e-4, miniBatchSize 16.

Deviations from the original:
- the dataset folder is replaced by 256 synthetic 16x16 RGB images made from ``seed`` (a coloured disk or square on
  a two-colour vertical gradient), normalized to [-1, 1] as the trainer's transform does; a seeded shuffle;
- sizes for 2 CPU cores: depth 3 -> 1 (16x16 images, not 64x64), dimG = dimD 64 -> 32, dimLatentVector 100 -> 32;
  cpu (useGPU False: no DataParallel); the loader's labels are None (no attributes);
- ``F.binary_cross_entropy`` now rejects ``DCGAN.getCriterion``'s ``[N]`` reference for the ``[N, 1]`` decision (a
  ValueError): it is expanded to ``(size, 1)`` (see ``_pytorchganzoo_lib.py``); the EMA's ``add_(0.001, p.data)``
  (a removed signature) is ``add_(p.data, alpha=0.001)``;
- docstrings and blank lines inside methods dropped; ``BaseGAN``'s methods without a bug switch (``buildAvG``,
  ``initializeClassificationCriterion``, ``updateSolversDevice``, ``buildNoiseData``, ``getOriginal*``,
  ``classificationPenalty``) are in ``_pytorchganzoo_lib.py`` as ``BaseGANMethods``, its base class here; ``base_loss_criterions`` is a namespace with the copied
  wrapper; the trainer's visualisation, loss profile, prints and checkpoints are left out;
- one ``train_step`` is one iteration of ``trainOnEpoch`` returning ``allLosses["lossD"]``; the Program's model is
  D, its batch ``(cat([real, fake]), (real, fake))``, ``loss_fn`` D's ``lossD_real + lossD_fake`` on D's outputs;
- the ``bug`` switches (a ``bug`` keyword of ``DCGAN``, kept as ``self.bug``) select the variants in ``BUGS``;
  with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types
from copy import deepcopy

import torch
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _pytorchganzoo_lib import DCGAN as _DCGANLoss
from _pytorchganzoo_lib import BaseConfig, BaseGANMethods, DNet, GNet, finiteCheck

base_loss_criterions = types.SimpleNamespace(DCGAN=_DCGANLoss)
N_IMAGES, SIZE = 256, 16  # (port) synthetic data


# ---- models/base_GAN.py (BaseGAN: the methods the DCGAN run calls) ---------------------------------------------

class BaseGAN(BaseGANMethods):  # (port) the methods without a bug switch are in _pytorchganzoo_lib.py
    def __init__(self,
                 dimLatentVector,
                 dimOutput=3,
                 useGPU=True,
                 baseLearningRate=0.001,
                 lossMode='WGANGP',
                 attribKeysOrder=None,
                 weightConditionD=0.0,
                 weightConditionG=0.0,
                 logisticGradReal=0.0,
                 lambdaGP=0.,
                 epsilonD=0.,
                 GDPP=False,
                 **kwargs):
        if lossMode not in ['MSE', 'WGANGP', 'DCGAN', 'Logistic']:
            raise ValueError(
                "lossMode should be one of the following : ['MSE', 'WGANGP', \
                'DCGAN', 'Logistic']")
        if 'config' not in vars(self):
            self.config = BaseConfig()
        if 'trainTmp' not in vars(self):
            self.trainTmp = BaseConfig()
        self.useGPU = useGPU and torch.cuda.is_available()
        if self.useGPU:
            self.device = torch.device("cuda:0")
            self.n_devices = torch.cuda.device_count()
        else:
            self.device = torch.device("cpu")
            self.n_devices = 1
        # Latent vector dimension
        self.config.noiseVectorDim = dimLatentVector
        # Output image dimension
        self.config.dimOutput = dimOutput
        # Actual learning rate
        self.config.learningRate = baseLearningRate
        # AC-GAN ?
        self.config.attribKeysOrder = deepcopy(attribKeysOrder)
        self.config.categoryVectorDim = 0
        self.config.weightConditionG = weightConditionG
        self.config.weightConditionD = weightConditionD
        self.ClassificationCriterion = None
        self.initializeClassificationCriterion()
        # GDPP
        self.config.GDPP = GDPP
        self.config.latentVectorDim = self.config.noiseVectorDim \
            + self.config.categoryVectorDim
        # Loss criterion
        self.config.lossCriterion = lossMode
        self.lossCriterion = getattr(
            base_loss_criterions, lossMode)(self.device)
        # WGAN-GP
        self.config.lambdaGP = lambdaGP
        # Weight on D's output
        self.config.epsilonD = epsilonD
        # Initialize the generator and the discriminator
        self.netD = self.getNetD()
        self.netG = self.getNetG()
        # Move the networks to the gpu
        self.updateSolversDevice()
        # Logistic loss
        self.config.logisticGradReal = logisticGradReal

    def optimizeParameters(self, input_batch, inputLabels=None):
        allLosses = {}
        # Retrieve the input data
        self.real_input, self.realLabels = input_batch.to(self.device), None
        if self.config.attribKeysOrder is not None:
            self.realLabels = inputLabels.to(self.device)
        n_samples = self.real_input.size()[0]
        # Update the discriminator
        if self.bug != "d_zero_grad_dropped":
            self.optimizerD.zero_grad()
        # #1 Real data
        predRealD = self.netD(self.real_input, False)
        # Classification criterion
        allLosses["lossD_classif"] = \
            self.classificationPenalty(predRealD,
                                       self.realLabels,
                                       self.config.weightConditionD,
                                       backward=True)
        lossD = self.lossCriterion.getCriterion(predRealD, True)
        allLosses["lossD_real"] = lossD.item()
        # #2 Fake data
        inputLatent, targetRandCat = self.buildNoiseData(n_samples)
        predFakeG = self.netG(inputLatent).detach()
        predFakeD = self.netD(predFakeG, False)
        lossDFake = self.lossCriterion.getCriterion(predFakeD, False)
        if self.bug == "fake_scored_as_real":
            lossDFake = self.lossCriterion.getCriterion(predFakeD, True)
        allLosses["lossD_fake"] = lossDFake.item()
        lossD += lossDFake
        # #3 WGANGP gradient loss
        if self.config.lambdaGP > 0:
            allLosses["lossD_Grad"] = WGANGPGradientPenalty(self.real_input,
                                                            predFakeG,
                                                            self.netD,
                                                            self.config.lambdaGP,
                                                            backward=True)
        # #4 Epsilon loss
        if self.config.epsilonD > 0:
            lossEpsilon = (predRealD[:, 0] ** 2).sum() * self.config.epsilonD
            lossD += lossEpsilon
            allLosses["lossD_Epsilon"] = lossEpsilon.item()
        # # 5 Logistic gradient loss
        if self.config.logisticGradReal > 0:
            allLosses["lossD_logistic"] = \
                logisticGradientPenalty(self.real_input, self.netD,
                                        self.config.logisticGradReal,
                                        backward=True)
        lossD.backward(retain_graph=True)
        finiteCheck(self.getOriginalD().parameters())
        self.optimizerD.step()
        # Logs
        lossD = 0
        for key, val in allLosses.items():
            if key.find("lossD") == 0:
                lossD += val
        allLosses["lossD"] = lossD
        # Update the generator
        self.optimizerG.zero_grad()
        self.optimizerD.zero_grad()
        # #1 Image generation
        inputNoise, targetCatNoise = self.buildNoiseData(n_samples)
        predFakeG = self.netG(inputNoise)
        # #2 Status evaluation
        predFakeD, phiGFake = self.netD(predFakeG, True)
        # #2 Classification criterion
        allLosses["lossG_classif"] = \
            self.classificationPenalty(predFakeD,
                                       targetCatNoise,
                                       self.config.weightConditionG,
                                       backward=True)
        # #3 GAN criterion
        lossGFake = self.lossCriterion.getCriterion(predFakeD, True)
        allLosses["lossG_fake"] = lossGFake.item()
        lossGFake.backward(retain_graph=True)
        if self.config.GDPP:
            _, phiDReal = self.netD.forward(self.real_input, True)
            allLosses["lossG_GDPP"] = GDPPLoss(phiDReal, phiGFake,
                                               backward=True)
        finiteCheck(self.getOriginalG().parameters())
        self.optimizerG.step()
        lossG = 0
        for key, val in allLosses.items():
            if key.find("lossG") == 0:
                lossG += val
        allLosses["lossG"] = lossG
        # Update the moving average if relevant
        for p, avg_p in zip(self.getOriginalG().parameters(),
                            self.getOriginalAvgG().parameters()):
            avg_p.mul_(0.999).add_(p.data, alpha=0.001)  # (port) add_(0.001, p.data): the removed signature
        return allLosses

# ---- models/DCGAN.py -------------------------------------------------------------------------------------------

class DCGAN(BaseGAN):

    def __init__(self,
                 dimLatentVector=64,
                 dimG=64,
                 dimD=64,
                 depth=3,
                 bug=None,  # (port) the variant
                 **kwargs):
        self.bug = bug  # (port)
        if 'config' not in vars(self):
            self.config = BaseConfig()
        self.config.dimG = dimG
        self.config.dimD = dimD
        self.config.depth = depth
        BaseGAN.__init__(self, dimLatentVector, **kwargs)

    def getNetG(self):
        gnet = GNet(self.config.latentVectorDim,
                    self.config.dimOutput,
                    self.config.dimG,
                    depthModel=self.config.depth,
                    generationActivation=self.lossCriterion.generationActivation)
        return gnet

    def getNetD(self):
        dnet = DNet(self.config.dimOutput,
                    self.config.dimD,
                    self.lossCriterion.sizeDecisionLayer
                    + self.config.categoryVectorDim,
                    depthModel=self.config.depth)
        return dnet

    def getOptimizerD(self):
        if self.bug == "optimizer_d_over_g":
            return optim.Adam(filter(lambda p: p.requires_grad, self.netG.parameters()),
                              betas=[0.5, 0.999], lr=self.config.learningRate)
        return optim.Adam(filter(lambda p: p.requires_grad, self.netD.parameters()),
                          betas=[0.5, 0.999], lr=self.config.learningRate)

    def getOptimizerG(self):
        return optim.Adam(filter(lambda p: p.requires_grad, self.netG.parameters()),
                          betas=[0.5, 0.999], lr=self.config.learningRate)

    def getSize(self):
        size = 2**(self.config.depth + 3)
        return (size, size)


# ---- (port) the data: synthetic images in place of the dataset folder ---------------------------------------------

def make_images(n, seed):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="ij")
    top, bottom = torch.rand(n, 3, 1, 1, generator=g) * 0.5, torch.rand(n, 3, 1, 1, generator=g) * 0.5
    x = top + (bottom - top) * (yy.float() / (SIZE - 1))
    colour = torch.rand(n, 3, generator=g) * 0.5 + 0.5
    centre = torch.randint(4, SIZE - 4, (n, 2), generator=g)
    for i in range(n):
        dy, dx = (yy - centre[i, 0]).abs(), (xx - centre[i, 1]).abs()
        mask = dy ** 2 + dx ** 2 < 10 if i % 2 == 0 else (dy < 3) & (dx < 3)
        x[i][:, mask] = colour[i].view(3, 1)
    return (x - 0.5) / 0.5  # Transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


def _build(seed, bug=None):
    torch.manual_seed(seed)
    config = dict(depth=1, miniBatchSize=16, dimLatentVector=32, dimOutput=3, dimG=32, dimD=32, lossMode='DCGAN',
                  lambdaGP=0., epsilonD=0., baseLearningRate=0.0002, weightConditionG=0.0, weightConditionD=0.0,
                  GDPP=False, attribKeysOrder=None)  # (port) dcgan_config with the sizes of the header
    model = DCGAN(useGPU=False, bug=bug, **{k: v for k, v in config.items() if k not in ('miniBatchSize', 'sigmaNoise')})
    images = make_images(N_IMAGES, seed)
    dbLoader = DataLoader(TensorDataset(images, torch.zeros(N_IMAGES, dtype=torch.long)),
                          batch_size=config['miniBatchSize'], shuffle=True,
                          generator=torch.Generator().manual_seed(seed))
    state = {"it": iter(dbLoader)}

    def train_step():  # one iteration of GANTrainer.trainOnEpoch
        while True:
            try:
                data = next(state["it"])
            except StopIteration:
                state["it"] = iter(dbLoader)
                continue
            inputs_real = data[0]
            labels = None  # (port) data[1]: the unlabelled dataset's loader gives no attributes
            if inputs_real.size()[0] < config['miniBatchSize']:
                continue
            allLosses = model.optimizeParameters(inputs_real, inputLabels=labels)
            return allLosses["lossD"]

    real = images[:config['miniBatchSize']]
    with torch.no_grad():
        fake = model.netG(torch.randn(config['miniBatchSize'], 32, generator=torch.Generator().manual_seed(seed)))

    def loss_fn(predD, targets):  # optimizeParameters' lossD_real + lossD_fake on D's outputs
        n = len(targets[0])
        return (model.lossCriterion.getCriterion(predD[:n], True)
                + model.lossCriterion.getCriterion(predD[n:], bug == "fake_scored_as_real"))

    return Program(name="pytorchganzoo_dcgan", model=model.netD, batch=(torch.cat([real, fake]), (real, fake)),
                   loss_fn=loss_fn, optimizer=model.optimizerD, train_step=train_step, loader=dbLoader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic label slip: the detached fakes scored with status True in D's update, so D learns to call fakes real.
    Bug("fake_scored_as_real", functools.partial(_build, bug="fake_scored_as_real"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: optimizerD.zero_grad() dropped from the top of optimizeParameters; D's step also applies the gradient
    # G's backward left in D at the previous iteration (lossG flows through D), added to its own.
    Bug("d_zero_grad_dropped", functools.partial(_build, bug="d_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # every D parameter alike: declared by its mechanism (README rule 6)
    # classic copy-paste slip: getOptimizerD built over netG's parameters; D never moves and G takes D's steps too.
    Bug("optimizer_d_over_g", functools.partial(_build, bug="optimizer_d_over_g"), "four_structures",
        ("main.convTranspose1.weight",)),
]
