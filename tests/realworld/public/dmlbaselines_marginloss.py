# ruff: noqa: UP008, SIM118, PLR0402, RUF012, TRY002, UP032, UP039, F841, C414, PLR1704
"""Margin loss with distance-weighted sampling from Confusezius/Deep-Metric-Learning-Baselines: a ResNet backbone
(BatchNorm frozen in eval mode) whose ``last_linear`` embeds into an L2-normalized space, batches filled
``samples_per_class`` at a time from one class, ``TupleSampler.distanceweightedsampling`` (positives at random,
negatives drawn by the inverse of the unit-sphere distance density), ``MarginLoss`` with one trainable margin beta
per class (its own parameter group at ``beta_lr``), Adam with weight decay, MultiStepLR stepped per epoch.

Source: https://github.com/Confusezius/Deep-Metric-Learning-Baselines
Commit: 60772745e28bc90077831bb4c9f07a233e602797
Files: ``Standard_Training.py`` (arguments, optimizer groups, scheduler, ``train_one_epoch``), ``losses.py``
(``loss_select``, ``TupleSampler``, ``MarginLoss``), ``netlib.py`` (``rename_attr``, ``ResNet50``), ``datasets.py``
(``give_dataloaders``, ``give_CUB200_datasets``'s class split, ``BaseTripletDataset``), ``auxiliaries_nofaiss.py``
(``eval_metrics_one_dataset``'s Recall@k)
License: Apache-2.0 (Copyright 2019 Karsten Roth and Biagio Brattoli; full text in
LICENSES/Confusezius-Deep-Metric-Learning-Baselines.txt)
Domain: metric learning (margin loss, distance-weighted triplet sampling, class-wise trainable margins)

Kept as written: ``TupleSampler.distanceweightedsampling`` / ``pdist`` / ``inverse_sphere_distances`` (clamp at
0.5, numpy sampling), ``MarginLoss.forward`` (per-triplet distances with 1e-8, per-anchor-class beta, hinge on both
sides at ``margin`` 0.2, normalized by the count of active pairs), ``loss_select``'s beta group (``beta_lr`` 5e-4,
no weight decay), ``ResNet50``'s wrapper (every BatchNorm2d put in eval mode with ``train`` replaced by a no-op,
``last_linear`` to ``embed_dim``, normalized output), ``BaseTripletDataset.__getitem__`` (the class-cycling fill of
``samples_per_class`` images, avoiding the two last classes), ``give_dataloaders`` (``shuffle``, ``drop_last``),
the first half of classes for training and the second half for testing, ``train_one_epoch``'s loop body
(model, criterion, ``zero_grad``, ``backward``, ``step``), Adam on ``[{'params': model.parameters(), 'lr', 'weight_decay'}]
+ the beta group, ``MultiStepLR(milestones=tau, gamma=0.3)`` stepped after each epoch, ``model.train()`` at each
epoch's start.

Deviations from the original:
- CUB-200 is not here: images are synthetic, made from ``seed`` (32 classes of 20 images, 3 x 32 x 32; each class
  a smooth random colour pattern, each image a crop of it shifted by up to 8 pixels, scaled by 0.8-1.2, plus
  Gaussian noise of std 0.15). The
  ``image_dict`` maps a class to its image tensors instead of file paths; ``Image.open`` becomes a lookup.
- torchvision's transforms are written out in plain torch: ``RandomResizedCrop`` (scale 0.35-1, ratio 3/4-4/3,
  bilinear back to 32) and ``RandomHorizontalFlip(0.5)`` for training, ``Resize(36)`` + ``CenterCrop(32)`` for
  evaluation (for 256 / 224), then the ImageNet ``Normalize``.
- pretrainedmodels' ResNet-50 is not installed: the backbone is ``_tv_resnet.resnet18`` (torchvision's module
  names, width 16, no pretrained weights, as ``--not_pretrained``), its ``fc`` renamed ``last_linear`` with
  ``rename_attr`` as pretrainedmodels names it.
- sizes for 2 CPU cores: ``bs`` 112 -> 32, ``samples_per_class`` 4 (kept), ``embed_dim`` 128 -> 32, ``lr`` 1e-5 ->
  1e-3 (no pretrained weights and 30 steps), ``kernels`` 8 -> 0 workers, no ``pin_memory``.
- CPU: ``.type(torch.cuda.FloatTensor)`` -> ``.type(torch.FloatTensor)``; no ``.to(opt.device)``.
- the epoch loop is not run as a whole: ``train_step`` is one iteration of ``train_one_epoch`` (a fresh epoch, with
  ``scheduler.step()`` and ``model.train()``, when the loader runs out); tqdm, LOGGER, plots and the gradient /
  distance measures are dropped. ``eval_fn`` is Recall@1 on the test classes (``eval_metrics_one_dataset``'s
  nearest-neighbour recall with ``torch.cdist``; NMI and F1 need k-means and are not ported).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import itertools as it
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
import _tv_resnet as ptm_resnet
from _api import Bug, Program

N_CLASSES, PER_CLASS, SIZE = 32, 20, 32


class opt:  # (port) Standard_Training.py's argparse defaults, sizes as listed in the docstring
    dataset = 'cub200'
    lr = 0.001  # (port) 0.00001
    fc_lr_mul = 0
    n_epochs = 70
    kernels = 0  # (port) 8
    bs = 32  # (port) 112
    samples_per_class = 4
    seed = 1
    scheduler = 'step'
    gamma = 0.3
    decay = 0.0004
    tau = [30, 55]
    loss = 'marginloss'
    sampling = 'distance'
    margin = 0.2
    beta_lr = 0.0005
    beta = 1.2
    nu = 0
    beta_constant = False
    k_vals = [1, 2, 4, 8]
    embed_dim = 32  # (port) 128
    arch = 'resnet50'
    not_pretrained = True  # (port) no pretrained weights here
    bug = None


# ------------------------------------------------------------------------------------------------- losses.py
def loss_select(loss, opt, to_optim):
    if loss=='marginloss':
        loss_params  = {'margin':opt.margin, 'nu': opt.nu, 'beta':opt.beta, 'n_classes':opt.num_classes, 'sampling_method':opt.sampling}
        criterion    = MarginLoss(**loss_params)
        to_optim    += [{'params':criterion.parameters(), 'lr':opt.beta_lr, 'weight_decay':0}]
    else:
        raise Exception('Loss {} not available!'.format(loss))  # (port) only the margin loss is ported

    return criterion, to_optim


class TupleSampler():
    def __init__(self, method='random'):
        self.method = method
        if method=='distance':
            self.give = self.distanceweightedsampling
        elif method=='random':
            self.give = self.randomsampling

    def randomsampling(self, batch, labels):
        if isinstance(labels, torch.Tensor): labels = labels.detach().numpy()
        unique_classes = np.unique(labels)
        indices        = np.arange(len(batch))
        class_dict     = {i:indices[labels==i] for i in unique_classes}

        sampled_triplets = [list(it.product([x],[x],[y for y in unique_classes if x!=y])) for x in unique_classes]
        sampled_triplets = [x for y in sampled_triplets for x in y]

        sampled_triplets = [[x for x in list(it.product(*[class_dict[j] for j in i])) if x[0]!=x[1]] for i in sampled_triplets]
        sampled_triplets = [x for y in sampled_triplets for x in y]

        sampled_triplets = random.sample(sampled_triplets, batch.shape[0])
        return sampled_triplets

    def distanceweightedsampling(self, batch, labels, lower_cutoff=0.5, upper_cutoff=1.4):
        if isinstance(labels, torch.Tensor): labels = labels.detach().cpu().numpy()
        bs = batch.shape[0]

        distances    = self.pdist(batch.detach()).clamp(min=lower_cutoff)

        positives, negatives = [],[]
        labels_visited = []
        anchors = []

        for i in range(bs):
            neg = labels!=labels[i]; pos = labels==labels[i]
            q_d_inv = self.inverse_sphere_distances(batch, distances[i], labels, labels[i])
            #Sample positives randomly
            pos[i] = 0
            positives.append(np.random.choice(np.where(pos)[0]))
            #Sample negatives by distance
            negatives.append(np.random.choice(bs,p=q_d_inv))

        sampled_triplets = [[a,p,n] for a,p,n in zip(list(range(bs)), positives, negatives)]
        return sampled_triplets

    def pdist(self, A):
        prod = torch.mm(A, A.t())
        norm = prod.diag().unsqueeze(1).expand_as(prod)
        res = (norm + norm.t() - 2 * prod).clamp(min = 0)
        return res.clamp(min = 0).sqrt()

    def inverse_sphere_distances(self, batch, dist, labels, anchor_label):
        bs,dim       = len(dist),batch.shape[-1]

        #negated log-distribution of distances of unit sphere in dimension <dim>
        log_q_d_inv = ((2.0 - float(dim)) * torch.log(dist) - (float(dim-3) / 2) * torch.log(1.0 - 0.25 * (dist.pow(2))))
        #Set sampling probabilities of positives to zero
        log_q_d_inv[np.where(labels==anchor_label)[0]] = 0

        q_d_inv     = torch.exp(log_q_d_inv - torch.max(log_q_d_inv)) # - max(log) for stability
        #Set sampling probabilities of positives to zero
        q_d_inv[np.where(labels==anchor_label)[0]] = 0

        ### NOTE: Cutting of values with high distances made the results slightly worse.
        # q_d_inv[np.where(dist>upper_cutoff)[0]]    = 0

        #Normalize inverted distance for probability distr.
        q_d_inv = q_d_inv/q_d_inv.sum()
        return q_d_inv.detach().cpu().numpy()


class MarginLoss(torch.nn.Module):
    def __init__(self, margin=0.2, nu=0, beta=1.2, n_classes=100, beta_constant=False, sampling_method='distance', bug=None):
        super(MarginLoss, self).__init__()
        self.margin             = margin
        self.n_classes          = n_classes
        self.beta_constant     = beta_constant

        self.beta_val = beta
        self.beta     = beta if beta_constant else torch.nn.Parameter(torch.ones(n_classes)*beta)

        self.nu                 = nu

        self.sampling_method    = sampling_method
        self.sampler            = TupleSampler(method=sampling_method)
        self.bug                = bug

    def forward(self, batch, labels):
        if isinstance(labels, torch.Tensor): labels = labels.detach().cpu().numpy()

        sampled_triplets = self.sampler.give(batch, labels)

        #Compute distances between anchor-positive and anchor-negative.
        d_ap, d_an = [],[]
        for triplet in sampled_triplets:
            train_triplet = {'Anchor': batch[triplet[0],:], 'Positive':batch[triplet[1],:], 'Negative':batch[triplet[2]]}

            pos_dist = ((train_triplet['Anchor']-train_triplet['Positive']).pow(2).sum()+1e-8).pow(1/2)
            neg_dist = ((train_triplet['Anchor']-train_triplet['Negative']).pow(2).sum()+1e-8).pow(1/2)

            d_ap.append(pos_dist)
            d_an.append(neg_dist)
        d_ap, d_an = torch.stack(d_ap), torch.stack(d_an)

        #Group betas together by anchor class in sampled triplets (as each beta belongs to one class).
        if self.beta_constant:
            beta = self.beta
        else:
            beta = torch.stack([self.beta[labels[triplet[0]]] for triplet in sampled_triplets]).type(torch.FloatTensor)  # (port) cuda

        #Compute actual margin postive and margin negative loss
        if self.bug == "margin_terms_swapped":
            pos_loss = torch.nn.functional.relu(beta-d_ap+self.margin)
            neg_loss = torch.nn.functional.relu(d_an-beta+self.margin)
        else:
            pos_loss = torch.nn.functional.relu(d_ap-beta+self.margin)
            neg_loss = torch.nn.functional.relu(beta-d_an+self.margin)

        #Compute normalization constant
        pair_count = torch.sum((pos_loss>0.)+(neg_loss>0.)).type(torch.FloatTensor)  # (port) cuda

        #Actual Margin Loss
        loss = torch.sum(pos_loss+neg_loss) if pair_count==0. else torch.sum(pos_loss+neg_loss)/pair_count

        #(Optional) Add regularization penalty on betas.
        if self.nu: loss = loss + beta_regularisation_loss.type(torch.FloatTensor)  # noqa: F821  (as written)

        return loss


# ------------------------------------------------------------------------------------------------- netlib.py
def rename_attr(model, attr, name):
    setattr(model, name, getattr(model, attr))
    delattr(model, attr)


class ResNet50(nn.Module):
    def __init__(self, opt, list_style=False, no_norm=False):
        super(ResNet50, self).__init__()

        self.pars = opt

        # (port) pretrainedmodels' resnet50(pretrained=None) -> torchvision-named ResNet-18 at width 16, whose fc is
        # renamed last_linear as pretrainedmodels names it
        self.model = ptm_resnet.resnet18(num_classes=1000, width=16)
        rename_attr(self.model, 'fc', 'last_linear')

        for module in filter(lambda m: type(m) == nn.BatchNorm2d, self.model.modules()):
            module.eval()
            module.train = lambda _: None

        self.model.last_linear = torch.nn.Linear(self.model.last_linear.in_features, opt.embed_dim)

        self.layer_blocks = nn.ModuleList([self.model.layer1, self.model.layer2, self.model.layer3, self.model.layer4])

    def forward(self, x, is_init_cluster_generation=False):
        x = self.model.maxpool(self.model.relu(self.model.bn1(self.model.conv1(x))))

        for layerblock in self.layer_blocks:
            x = layerblock(x)

        x = self.model.avgpool(x)
        x = x.view(x.size(0),-1)

        mod_x = self.model.last_linear(x)
        #No Normalization is used if N-Pair Loss is the target criterion.
        return mod_x if self.pars.loss=='npair' else torch.nn.functional.normalize(mod_x, dim=-1)


# ------------------------------------------------------------------------------------------------- datasets.py
_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
_STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


def _train_transform(img):  # (port) RandomResizedCrop + RandomHorizontalFlip(0.5) + ToTensor + Normalize
    _, h, w = img.shape
    area = h * w
    for _ in range(10):
        target_area = area * random.uniform(0.35, 1.0)
        ratio = np.exp(random.uniform(np.log(3 / 4), np.log(4 / 3)))
        cw, ch = round((target_area * ratio) ** 0.5), round((target_area / ratio) ** 0.5)
        if 0 < cw <= w and 0 < ch <= h:
            top, left = random.randint(0, h - ch), random.randint(0, w - cw)
            break
    else:
        ch, cw, top, left = h, w, 0, 0
    crop = img[:, top:top + ch, left:left + cw]
    crop = F.interpolate(crop[None], size=(SIZE, SIZE), mode='bilinear', align_corners=False)[0]
    if random.random() < 0.5:
        crop = crop.flip(-1)
    return (crop - _MEAN) / _STD


def _val_transform(img):  # (port) Resize(36) + CenterCrop(32) + ToTensor + Normalize (for 256 / 224)
    big = F.interpolate(img[None], size=(36, 36), mode='bilinear', align_corners=False)[0]
    return (big[:, 2:2 + SIZE, 2:2 + SIZE] - _MEAN) / _STD


class BaseTripletDataset(Dataset):
    def __init__(self, image_dict, opt, samples_per_class=8, is_validation=False):
        #Define length of dataset
        self.n_files     = np.sum([len(image_dict[key]) for key in image_dict.keys()])

        self.is_validation = is_validation

        self.pars        = opt
        self.image_dict  = image_dict

        self.avail_classes    = sorted(list(self.image_dict.keys()))

        #Convert image dictionary from classname:content to class_idx:content, because the initial indices are not necessarily from 0 - <n_classes>.
        self.image_dict    = {i:self.image_dict[key] for i,key in enumerate(self.avail_classes)}
        self.avail_classes = sorted(list(self.image_dict.keys()))

        #Init. properties that are used when filling up batches.
        if not self.is_validation:
            self.samples_per_class = samples_per_class
            #Select current class to sample images from up to <samples_per_class>
            self.current_class   = np.random.randint(len(self.avail_classes))
            self.classes_visited = [self.current_class, self.current_class]
            self.n_samples_drawn = 0

        self.transform = _val_transform if self.is_validation else _train_transform  # (port) torchvision

        #Convert Image-Dict to list of (image_path, image_class). Allows for easier direct sampling.
        self.image_list = [[(x,key) for x in self.image_dict[key]] for key in self.image_dict.keys()]
        self.image_list = [x for y in self.image_list for x in y]

        #Flag that denotes if dataset is called for the first time.
        self.is_init = True

    def __getitem__(self, idx):
        if self.is_init:
            self.current_class = self.avail_classes[idx%len(self.avail_classes)]
            self.is_init = False

        if not self.is_validation:
            if self.samples_per_class==1:
                return self.image_list[idx][-1], self.transform(self.image_list[idx][0])

            if self.n_samples_drawn==self.samples_per_class:
                #Once enough samples per class have been drawn, we choose another class to draw samples from.
                #Note that we ensure with self.classes_visited that no class is chosen if it had been chosen
                #previously or one before that.
                counter = copy.deepcopy(self.avail_classes)
                for prev_class in self.classes_visited:
                    if prev_class in counter: counter.remove(prev_class)

                self.current_class   = counter[idx%len(counter)]
                self.classes_visited = self.classes_visited[1:]+[self.current_class]
                self.n_samples_drawn = 0

            class_sample_idx = idx%len(self.image_dict[self.current_class])
            self.n_samples_drawn += 1

            if self.pars.bug == "image_from_flat_list":
                out_img = self.transform(self.image_list[idx][0])
            else:
                out_img = self.transform(self.image_dict[self.current_class][class_sample_idx])
            return self.current_class,out_img
        else:
            return self.image_list[idx][-1], self.transform(self.image_list[idx][0])

    def __len__(self):
        return self.n_files


def _synthetic_image_dict(gen):  # (port) the CUB-200 folders: class -> list of image tensors
    image_dict = {}
    for c in range(N_CLASSES):
        pattern = F.interpolate(0.2 + 0.6 * torch.rand(1, 3, 4, 4, generator=gen), size=(SIZE + 8, SIZE + 8),
                                mode='bilinear', align_corners=False)[0]
        images = []
        for _ in range(PER_CLASS):
            dy, dx = torch.randint(0, 9, (2,), generator=gen).tolist()
            img = pattern[:, dy:dy + SIZE, dx:dx + SIZE] * (0.8 + 0.4 * torch.rand(1, generator=gen))
            img = (img + 0.15 * torch.randn(3, SIZE, SIZE, generator=gen)).clamp(0, 1)
            images.append(img)
        image_dict[c] = images
    return image_dict


def give_CUB200_datasets(opt, image_dict):
    keys = sorted(list(image_dict.keys()))

    #Following "Deep Metric Learning via Lifted Structured Feature Embedding", we use the first half of classes for training.
    train,test = keys[:len(keys)//2], keys[len(keys)//2:]
    train_image_dict, val_image_dict = {key:image_dict[key] for key in train},{key:image_dict[key] for key in test}

    train_dataset = BaseTripletDataset(train_image_dict, opt, samples_per_class=opt.samples_per_class)
    val_dataset   = BaseTripletDataset(val_image_dict,   opt, is_validation=True)
    eval_dataset  = BaseTripletDataset(train_image_dict, opt, is_validation=True)

    return {'training':train_dataset, 'testing':val_dataset, 'evaluation':eval_dataset}


def give_dataloaders(dataset, opt, image_dict, gen):
    datasets = give_CUB200_datasets(opt, image_dict)

    #Move datasets to dataloaders.
    dataloaders = {}
    for key,dataset in datasets.items():
        is_val = dataset.is_validation
        dataloaders[key] = torch.utils.data.DataLoader(dataset, batch_size=opt.bs, num_workers=opt.kernels, shuffle=not is_val, drop_last=not is_val, generator=gen)  # (port) no pin_memory; seeded

    return dataloaders


# ------------------------------------------------------------------------------------------------- (port) build
def _build(seed, bug=None):
    np.random.seed(seed); random.seed(seed)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    o = type('opt', (opt,), {'bug': bug, 'seed': seed})

    model      = ResNet50(o)

    if 'fc_lr_mul' in vars(opt).keys() and o.fc_lr_mul!=0:
        all_but_fc_params = list(filter(lambda x: 'last_linear' not in x[0],model.named_parameters()))
        fc_params         = model.model.last_linear.parameters()
        to_optim          = [{'params':all_but_fc_params,'lr':o.lr,'weight_decay':o.decay},
                             {'params':fc_params,'lr':o.lr*o.fc_lr_mul,'weight_decay':o.decay}]
    else:
        to_optim   = [{'params':model.parameters(),'lr':o.lr,'weight_decay':o.decay}]

    dataloaders      = give_dataloaders(o.dataset, o, _synthetic_image_dict(gen), gen)
    o.num_classes  = len(dataloaders['training'].dataset.avail_classes)

    criterion, to_optim = loss_select(o.loss, o, to_optim)

    optimizer    = torch.optim.Adam(to_optim)
    scheduler    = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=o.tau, gamma=o.gamma)

    st = {"epoch": 0, "it": None}

    def train_step():
        if st["it"] is None:
            _ = model.train()
            st["it"] = iter(dataloaders['training'])
        try:
            class_labels, input = next(st["it"])
        except StopIteration:
            # end of train_one_epoch: (evaluation dropped) the scheduler steps, the next epoch starts in train mode
            scheduler.step()
            st["epoch"] += 1
            _ = model.train()
            st["it"] = iter(dataloaders['training'])
            class_labels, input = next(st["it"])

        features  = model(input)
        loss      = criterion(features, class_labels)
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        # eval_metrics_one_dataset's Recall@1 on the test classes (nearest neighbour other than itself)
        was = model.training
        _ = model.eval()
        target_labels, feature_coll = [], []
        with torch.no_grad():
            for inp in dataloaders['testing']:
                input_img,target = inp[-1], inp[0]
                target_labels.append(target)
                feature_coll.append(model(input_img))
        model.train(was)
        target_labels, feature_coll = torch.cat(target_labels), torch.cat(feature_coll)
        dist = torch.cdist(feature_coll, feature_coll)
        dist.fill_diagonal_(float('inf'))
        return float((target_labels[dist.argmin(1)] == target_labels).float().mean())

    # the Program's batch: one training batch drawn apart from the loop's stream (the sampler's state restored)
    ds = dataloaders['training'].dataset
    state = random.getstate(), np.random.get_state(), (ds.current_class, list(ds.classes_visited), ds.n_samples_drawn, ds.is_init)
    xb = torch.utils.data.DataLoader(ds, batch_size=o.bs, shuffle=False)
    yb, xb = next(iter(xb))
    random.setstate(state[0]); np.random.set_state(state[1])
    ds.current_class, ds.classes_visited, ds.n_samples_drawn, ds.is_init = state[2]

    return Program(name="dmlbaselines_marginloss", model=model, batch=(xb, yb), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the two hinges of the margin loss written with their signs swapped, so positives are pushed beyond
    # the class margin beta and negatives pulled inside it.
    Bug("margin_terms_swapped", functools.partial(_build, bug="margin_terms_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic copy-paste slip: the class-cycling branch of __getitem__ loads the idx-th image of the flat list (the
    # samples_per_class == 1 branch's lookup) instead of an image of the class it labels the sample with.
    Bug("image_from_flat_list", functools.partial(_build, bug="image_from_flat_list"), "learning_ledger",
        ("TASK",)),
    # optimizer.zero_grad() left out of the loop: gradients pile up across batches (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
