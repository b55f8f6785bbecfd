# ruff: noqa: UP008, UP039, TRY004, PLR0124, B008, F821
"""``models/networks/DCGAN_nets.py`` (``weights_init``, ``GNet``, ``DNet``), ``models/utils/config.py``
(``BaseConfig``), ``models/base_GAN.py`` (``BaseGAN``'s methods but ``__init__`` and ``optimizeParameters``, as
``BaseGANMethods``; the AC-GAN helper they name is not copied: its branch is not taken), ``models/utils/utils.py``
(``isinf``, ``isnan``, ``finiteCheck``) and the ``DCGAN`` wrapper of
``models/loss_criterions/base_loss_criterions.py`` of facebookresearch/pytorch_GAN_zoo, for the
``pytorchganzoo_dcgan`` port (its header gives the source, commit, license and deviations). Copied as written but
for the docstrings, cut for length, ``BaseConfig``'s unused ``orig`` print, and one line of ``DCGAN.getCriterion``:
the reference is expanded to ``(size, 1)`` (as the ``MSE`` wrapper beside it does) where it was ``(size)``, since
``F.binary_cross_entropy`` rejects a ``[N]`` target for the ``[N, 1]`` decision (a ValueError in current PyTorch).

Source: https://github.com/facebookresearch/pytorch_GAN_zoo (commit b75dee40918caabb4fe7ec561522717bf096a8cb,
BSD-3-Clause; full text in LICENSES/facebookresearch-pytorch_GAN_zoo.txt)
"""

from __future__ import annotations

import math
from collections import OrderedDict
from copy import deepcopy

import torch
import torch.nn.functional as F
from torch import nn

# ---- models/utils/config.py ----------------------------------------------------------------------------------------

class BaseConfig():
    pass


# ---- models/utils/utils.py -----------------------------------------------------------------------------------------

def isinf(tensor):
    if not isinstance(tensor, torch.Tensor):
        raise ValueError("The argument is not a tensor", str(tensor))
    return tensor.abs() == math.inf


def isnan(tensor):
    if not isinstance(tensor, torch.Tensor):
        raise ValueError("The argument is not a tensor", str(tensor))
    return tensor != tensor


def finiteCheck(parameters):
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    parameters = list(filter(lambda p: p.grad is not None, parameters))

    for p in parameters:
        infGrads = isinf(p.grad.data)
        p.grad.data[infGrads] = 0

        nanGrads = isnan(p.grad.data)
        p.grad.data[nanGrads] = 0


# ---- models/loss_criterions/base_loss_criterions.py (BaseLossWrapper, DCGAN) ---------------------------------------

class BaseLossWrapper:

    def __init__(self, device):
        self.device = device

    def getCriterion(self, input, status):
        pass


class DCGAN(BaseLossWrapper):

    def __init__(self, device):
        self.generationActivation = F.tanh
        self.sizeDecisionLayer = 1
        BaseLossWrapper.__init__(self, device)

    def getCriterion(self, input, status):
        size = input.size()[0]
        value = int(status)
        reference = torch.tensor(
            [value], dtype=torch.float).expand(size, 1).to(self.device)  # (port) expand(size): see the header
        return F.binary_cross_entropy(torch.sigmoid(input[:, :self.sizeDecisionLayer]), reference)


# ---- models/networks/DCGAN_nets.py ---------------------------------------------------------------------------------


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        m.weight.data.normal_(0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        m.weight.data.normal_(1.0, 0.02)
        m.bias.data.fill_(0)


class GNet(nn.Module):
    def __init__(self,
                 dimLatentVector,
                 dimOutput,
                 dimModelG,
                 depthModel=3,
                 generationActivation=nn.Tanh()):
        super(GNet, self).__init__()

        self.depthModel = depthModel
        self.refDim = dimModelG

        self.initFormatLayer(dimLatentVector)

        currDepth = int(dimModelG * (2**depthModel))

        sequence = OrderedDict([])
        # input is Z, going into a convolution
        sequence["batchNorm0"] = nn.BatchNorm2d(currDepth)
        sequence["relu0"] = nn.ReLU(True)

        for i in range(depthModel):

            nextDepth = int(currDepth / 2)

            # state size. (currDepth) x 2**(i+1) x 2**(i+1)
            sequence["convTranspose" + str(i+1)] = nn.ConvTranspose2d(
                currDepth, nextDepth, 4, 2, 1, bias=False)
            sequence["batchNorm" + str(i+1)] = nn.BatchNorm2d(nextDepth)
            sequence["relu" + str(i+1)] = nn.ReLU(True)

            currDepth = nextDepth

        sequence["outlayer"] = nn.ConvTranspose2d(
            dimModelG, dimOutput, 4, 2, 1, bias=False)

        self.outputAcctivation = generationActivation

        self.main = nn.Sequential(sequence)
        self.main.apply(weights_init)

    def initFormatLayer(self, dimLatentVector):

        currDepth = int(self.refDim * (2**self.depthModel))
        self.formatLayer = nn.ConvTranspose2d(
            dimLatentVector, currDepth, 4, 1, 0, bias=False)

    def forward(self, input):

        x = input.view(-1, input.size(1), 1, 1)
        x = self.formatLayer(x)
        x = self.main(x)

        if self.outputAcctivation is None:
            return x

        return self.outputAcctivation(x)


class DNet(nn.Module):
    def __init__(self,
                 dimInput,
                 dimModelD,
                 sizeDecisionLayer,
                 depthModel=3):
        super(DNet, self).__init__()

        currDepth = dimModelD
        sequence = OrderedDict([])

        # input is (nc) x 2**(depthModel + 3) x 2**(depthModel + 3)
        sequence["convTranspose" +
                 str(depthModel)] = nn.Conv2d(dimInput, currDepth,
                                              4, 2, 1, bias=False)
        sequence["relu" + str(depthModel)] = nn.LeakyReLU(0.2, inplace=True)

        for i in range(depthModel):

            index = depthModel - i - 1
            nextDepth = currDepth * 2

            # state size.
            # (currDepth) x 2**(depthModel + 2 -i) x 2**(depthModel + 2 -i)
            sequence["convTranspose" +
                     str(index)] = nn.Conv2d(currDepth, nextDepth,
                                             4, 2, 1, bias=False)
            sequence["batchNorm" + str(index)] = nn.BatchNorm2d(nextDepth)
            sequence["relu" + str(index)] = nn.LeakyReLU(0.2, inplace=True)

            currDepth = nextDepth

        self.dimFeatureMap = currDepth

        self.main = nn.Sequential(sequence)
        self.main.apply(weights_init)

        self.initDecisionLayer(sizeDecisionLayer)

    def initDecisionLayer(self, sizeDecisionLayer):
        self.decisionLayer = nn.Conv2d(
            self.dimFeatureMap, sizeDecisionLayer, 4, 1, 0, bias=False)
        self.decisionLayer.apply(weights_init)
        self.sizeDecisionLayer = sizeDecisionLayer

    def forward(self, input, getFeature = False):
        x = self.main(input)

        if getFeature:

            return self.decisionLayer(x).view(-1, self.sizeDecisionLayer), \
                   x.view(-1, self.dimFeatureMap * 16)

        x = self.decisionLayer(x)
        return x.view(-1, self.sizeDecisionLayer)


# ---- models/base_GAN.py (the BaseGAN methods without a bug switch; BaseGAN in the port derives from this) ------

class BaseGANMethods():
    def buildAvG(self):
        self.avgG = deepcopy(self.getOriginalG())
        for param in self.avgG.parameters():
            param.requires_grad = False
        if self.useGPU:
            self.avgG = nn.DataParallel(self.avgG)
            self.avgG.to(self.device)

    def initializeClassificationCriterion(self):
        if self.config.weightConditionD != 0 and \
                not self.config.attribKeysOrder:
            raise AttributeError("If the weight on the conditional term isn't "
                                 "null, then a attribute dictionnery should be"
                                 " defined")
        if self.config.weightConditionG != 0 and \
                not self.config.attribKeysOrder:
            raise AttributeError("If the weight on the conditional term isn't \
                                 null, then a attribute dictionnary should be \
                                 defined")
        if self.config.attribKeysOrder is not None:
            self.ClassificationCriterion = \
                    ACGANCriterion(self.config.attribKeysOrder)
            self.config.categoryVectorDim = \
                self.ClassificationCriterion.getInputDim()

    def updateSolversDevice(self, buildAvG=True):
        if buildAvG:
            self.buildAvG()
        if not isinstance(self.netD, nn.DataParallel) and self.useGPU:
            self.netD = nn.DataParallel(self.netD)
        if not isinstance(self.netG, nn.DataParallel) and self.useGPU:
            self.netG = nn.DataParallel(self.netG)
        self.netD.to(self.device)
        self.netG.to(self.device)
        self.optimizerD = self.getOptimizerD()
        self.optimizerG = self.getOptimizerG()
        self.optimizerD.zero_grad()
        self.optimizerG.zero_grad()

    def buildNoiseData(self, n_samples, inputLabels=None):
        inputLatent = torch.randn(
            n_samples, self.config.noiseVectorDim).to(self.device)
        if self.config.attribKeysOrder:
            if inputLabels is not None:
                latentRandCat = self.ClassificationCriterion.buildLatentCriterion(inputLabels)
                targetRandCat = inputLabels
            else:
                targetRandCat, latentRandCat = \
                    self.ClassificationCriterion.buildRandomCriterionTensor(n_samples)
            targetRandCat = targetRandCat.to(self.device)
            latentRandCat = latentRandCat.to(self.device)
            inputLatent = torch.cat((inputLatent, latentRandCat), dim=1)
            return inputLatent, targetRandCat
        return inputLatent, None

    def getOriginalG(self):
        if isinstance(self.netG, nn.DataParallel):
            return self.netG.module
        return self.netG

    def getOriginalAvgG(self):
        if isinstance(self.avgG, nn.DataParallel):
            return self.avgG.module
        return self.avgG

    def getOriginalD(self):
        if isinstance(self.netD, nn.DataParallel):
            return self.netD.module
        return self.netD

    def classificationPenalty(self, outputD, target, weight, backward=True):
        if self.ClassificationCriterion is not None:
            loss = weight * \
                self.ClassificationCriterion.getCriterion(outputD, target)
            if backward:
                loss.backward(retain_graph=True)
            return loss.item()
        return 0
