"""Relation Network for few-shot learning (Sung et al., "Learning to Compare"), Flood Sung's LearningToCompare_FSL,
the Omniglot 5-way 5-shot training script: a 4-block CNN encoder embeds the support and query images, the support
embeddings of each class are summed, every (class, query) pair of feature maps is concatenated and scored in
[0, 1] by a convolutional relation network, and both networks are trained on episodes by the MSE to the one-hot
labels, each with its own Adam and StepLR, gradients clipped to norm 0.5.

Source: https://github.com/floodsung/LearningToCompare_FSL
Commit: b74e6366c7e7208a9d0fc82f7bedb9e1000199e4
Files: omniglot/omniglot_train_few_shot.py, omniglot/task_generator.py
License: MIT (Copyright (c) 2018 Flood Sung; full text in LICENSES/floodsung-LearningToCompare_FSL.txt)
Domain: metric / few-shot learning (relation network, episodic training, 5-way 5-shot)

Kept as written: ``CNNEncoder`` and ``RelationNetwork`` (BatchNorm ``momentum=1``, the sigmoid output),
``weights_init``, the defaults (FEATURE_DIM 64, RELATION_DIM 8, CLASS_NUM 5, SAMPLE_NUM_PER_CLASS 5,
LEARNING_RATE 0.001), the two Adam optimizers and StepLR(step_size=100000, gamma=0.5) stepped with the episode,
the episode's body (a random rotation in {0, 90, 180, 270}, an ``OmniglotTask``, the unshuffled sample loader and
the shuffled batch loader, the summed support features, the pair construction by ``unsqueeze/repeat/transpose``
and ``cat`` on the channel axis, ``relations.view(-1, CLASS_NUM)``, ``MSELoss`` to the one-hot labels, both
``zero_grad``s, backward, ``clip_grad_norm`` 0.5 on each network, both steps) and ``task_generator``'s
``OmniglotTask``, ``ClassBalancedSampler`` and ``get_data_loader`` (``Normalize`` with the Omniglot mean/std).

Deviations from the original:
- Omniglot (``../datas/omniglot_resized/``) is not here: each "character folder" is a synthetic character made from
  ``seed`` (three random pen strokes, black on white, 28x28) with 20 drawings (the strokes jittered by up to one
  pixel, a little pixel noise); 60 characters for meta-training and 20 for meta-testing (1200 / 423 in the
  original), split by ``random.seed(1)``-shuffling as ``omniglot_character_folders`` does. The PIL reading,
  ``resize((28, 28))``, ``Rotate`` and ``ToTensor`` are written as tensor operations (``torch.rot90`` for the
  rotation; the images are already 28x28 in [0, 1]); torchvision is not used.
- sizes for 2 CPU cores: BATCH_NUM_PER_CLASS 15 -> 5 query images per class; the test (every 5000 episodes,
  1000 test episodes) is ``eval_fn``: the accuracy over 10 test episodes of the meta-test characters; the
  checkpoint loading and saving, CUDA, ``Variable`` and the prints are dropped (``loss.data[0]`` is ``loss.item()``);
  ``clip_grad_norm`` is ``clip_grad_norm_``; the schedulers are stepped with ``scheduler.step()`` once per episode
  (the original's ``step(episode)`` form is deprecated and gives the same lr at these episode counts).
- seeding: ``random.seed(seed)`` and ``torch.manual_seed(seed)`` (the original seeds only the folder split).
- the Program: the two networks are held by one ``RelationModel`` module (attributes ``feature_encoder`` and
  ``relation_network``; its ``forward`` is the episode's forward lines), its batch one fixed episode
  ``((samples, batches), one_hot_labels)``; the program has two optimizers and the Program names one,
  ``relation_network_optim``. ``train_step`` is one episode of the loop as written, returning the loss.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP004, PLR0402, RUF059, C408

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.sampler import Sampler

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

# Hyper Parameters
FEATURE_DIM = 64
RELATION_DIM = 8
CLASS_NUM = 5
SAMPLE_NUM_PER_CLASS = 5
BATCH_NUM_PER_CLASS = 5  # (port) 15
LEARNING_RATE = 0.001
TEST_EPISODE = 10  # (port) 1000


# ---- omniglot/task_generator.py ---------------------------------------------------------------------------------

_IMAGES = {}  # (port) "path" -> 28x28 image tensor in [0, 1], in place of the files


class Rotate(object):
    def __init__(self, angle):
        self.angle = angle

    def __call__(self, x, mode="reflect"):
        x = torch.rot90(x, self.angle // 90, dims=(-2, -1))  # (port) PIL's x.rotate(self.angle)
        return x


def _to_tensor(x):
    return x.unsqueeze(0).float()  # (port) transforms.ToTensor on the 28x28 "L" image


def _normalize(x, mean=0.92206, std=0.08426):
    return (x - mean) / std  # (port) transforms.Normalize(mean=[0.92206]*3, std=[0.08426]*3)


def omniglot_character_folders(all_folders):
    character_folders = list(all_folders)  # (port) os.listdir over '../datas/omniglot_resized/'
    random.seed(1)
    random.shuffle(character_folders)

    num_train = 60  # (port) 1200
    metatrain_character_folders = character_folders[:num_train]
    metaval_character_folders = character_folders[num_train:]

    return metatrain_character_folders,metaval_character_folders


class OmniglotTask(object):
    # This class is for task generation for both meta training and meta testing.
    def __init__(self, character_folders, num_classes, train_num,test_num):

        self.character_folders = character_folders
        self.num_classes = num_classes
        self.train_num = train_num
        self.test_num = test_num

        class_folders = random.sample(self.character_folders,self.num_classes)
        labels = np.array(range(len(class_folders)))
        labels = dict(zip(class_folders, labels))
        samples = dict()

        self.train_roots = []
        self.test_roots = []
        for c in class_folders:

            temp = [c + '/' + x for x in _IMAGES[c]]  # (port) os.path.join(c, x) for x in os.listdir(c)
            samples[c] = random.sample(temp, len(temp))

            self.train_roots += samples[c][:train_num]
            self.test_roots += samples[c][train_num:train_num+test_num]

        self.train_labels = [labels[self.get_class(x)] for x in self.train_roots]
        self.test_labels = [labels[self.get_class(x)] for x in self.test_roots]

    def get_class(self, sample):
        return '/'.join(sample.split('/')[:-1])


class FewShotDataset(Dataset):

    def __init__(self, task, split='train', transform=None, target_transform=None):
        self.transform = transform # Torch operations on the input image
        self.target_transform = target_transform
        self.task = task
        self.split = split
        self.image_roots = self.task.train_roots if self.split == 'train' else self.task.test_roots
        self.labels = self.task.train_labels if self.split == 'train' else self.task.test_labels

    def __len__(self):
        return len(self.image_roots)

    def __getitem__(self, idx):
        raise NotImplementedError("This is an abstract class. Subclass this class for your particular dataset.")


class Omniglot(FewShotDataset):

    def __init__(self, *args, **kwargs):
        super(Omniglot, self).__init__(*args, **kwargs)

    def __getitem__(self, idx):
        image_root = self.image_roots[idx]
        folder, name = image_root.rsplit('/', 1)
        image = _IMAGES[folder][name]  # (port) Image.open(image_root).convert('L').resize((28, 28))
        if self.transform is not None:
            image = self.transform(image)
        label = self.labels[idx]
        if self.target_transform is not None:
            label = self.target_transform(label)
        return image, label


class ClassBalancedSampler(Sampler):
    ''' Samples 'num_inst' examples each from 'num_cl' pools
        of examples of size 'num_per_class' '''

    def __init__(self, num_per_class, num_cl, num_inst,shuffle=True):
        self.num_per_class = num_per_class
        self.num_cl = num_cl
        self.num_inst = num_inst
        self.shuffle = shuffle

    def __iter__(self):
        # return a single list of indices, assuming that items will be grouped by class
        if self.shuffle:
            batch = [[i+j*self.num_inst for i in torch.randperm(self.num_inst)[:self.num_per_class]] for j in range(self.num_cl)]
        else:
            batch = [[i+j*self.num_inst for i in range(self.num_inst)[:self.num_per_class]] for j in range(self.num_cl)]
        batch = [item for sublist in batch for item in sublist]

        if self.shuffle:
            random.shuffle(batch)
        return iter(batch)

    def __len__(self):
        return 1


def get_data_loader(task, num_per_class=1, split='train',shuffle=True,rotation=0):
    # NOTE: batch size here is # instances PER CLASS
    rotate = Rotate(rotation)
    dataset = Omniglot(task,split=split,transform=lambda im: _normalize(_to_tensor(rotate(im))))

    if split == 'train':
        sampler = ClassBalancedSampler(num_per_class, task.num_classes, task.train_num,shuffle=shuffle)
    else:
        sampler = ClassBalancedSampler(num_per_class, task.num_classes, task.test_num,shuffle=shuffle)
    loader = DataLoader(dataset, batch_size=num_per_class*task.num_classes, sampler=sampler)

    return loader


# ---- (port) synthetic Omniglot-like characters ------------------------------------------------------------------

def _draw(strokes, shift, gen):
    img = torch.ones(28, 28)
    yy, xx = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
    for (y0, x0, y1, x1) in strokes:
        y0, x0, y1, x1 = y0 + shift[0], x0 + shift[1], y1 + shift[0], x1 + shift[1]
        dy, dx = y1 - y0, x1 - x0
        t = (((yy - y0) * dy + (xx - x0) * dx) / (dy * dy + dx * dx + 1e-6)).clamp(0, 1)
        dist = ((yy - (y0 + t * dy)) ** 2 + (xx - (x0 + t * dx)) ** 2).sqrt()
        img = torch.minimum(img, (dist - 0.8).clamp(0, 1))
    img = img + 0.05 * torch.randn(28, 28, generator=gen)
    return img.clamp(0, 1)


def _make_characters(seed, n_chars=80, n_draws=20):
    gen = torch.Generator().manual_seed(seed)
    folders = []
    for c in range(n_chars):
        folder = f"alphabet{c // 20}/character{c % 20:02d}"
        strokes = (torch.rand(3, 4, generator=gen) * 18 + 5).tolist()
        draws = {}
        for k in range(n_draws):
            shift = (torch.randint(-1, 2, (2,), generator=gen)).tolist()
            draws[f"{k:02d}.png"] = _draw(strokes, shift, gen)
        _IMAGES[folder] = draws
        folders.append(folder)
    return folders


# ---- omniglot/omniglot_train_few_shot.py ------------------------------------------------------------------------

class CNNEncoder(nn.Module):
    """docstring for ClassName"""
    def __init__(self):
        super(CNNEncoder, self).__init__()
        self.layer1 = nn.Sequential(
                        nn.Conv2d(1,64,kernel_size=3,padding=0),
                        nn.BatchNorm2d(64, momentum=1, affine=True),
                        nn.ReLU(),
                        nn.MaxPool2d(2))
        self.layer2 = nn.Sequential(
                        nn.Conv2d(64,64,kernel_size=3,padding=0),
                        nn.BatchNorm2d(64, momentum=1, affine=True),
                        nn.ReLU(),
                        nn.MaxPool2d(2))
        self.layer3 = nn.Sequential(
                        nn.Conv2d(64,64,kernel_size=3,padding=1),
                        nn.BatchNorm2d(64, momentum=1, affine=True),
                        nn.ReLU())
        self.layer4 = nn.Sequential(
                        nn.Conv2d(64,64,kernel_size=3,padding=1),
                        nn.BatchNorm2d(64, momentum=1, affine=True),
                        nn.ReLU())

    def forward(self,x):
        out = self.layer1(x)
        out = self.layer2(out)
        out = self.layer3(out)
        out = self.layer4(out)
        #out = out.view(out.size(0),-1)
        return out # 64


class RelationNetwork(nn.Module):
    """docstring for RelationNetwork"""
    def __init__(self,input_size,hidden_size):
        super(RelationNetwork, self).__init__()
        self.layer1 = nn.Sequential(
                        nn.Conv2d(128,64,kernel_size=3,padding=1),
                        nn.BatchNorm2d(64, momentum=1, affine=True),
                        nn.ReLU(),
                        nn.MaxPool2d(2))
        self.layer2 = nn.Sequential(
                        nn.Conv2d(64,64,kernel_size=3,padding=1),
                        nn.BatchNorm2d(64, momentum=1, affine=True),
                        nn.ReLU(),
                        nn.MaxPool2d(2))
        self.fc1 = nn.Linear(input_size,hidden_size)
        self.fc2 = nn.Linear(hidden_size,1)

    def forward(self,x):
        out = self.layer1(x)
        out = self.layer2(out)
        out = out.view(out.size(0),-1)
        out = F.relu(self.fc1(out))
        out = F.sigmoid(self.fc2(out))
        return out


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
        m.weight.data.normal_(0, math.sqrt(2. / n))
        if m.bias is not None:
            m.bias.data.zero_()
    elif classname.find('BatchNorm') != -1:
        m.weight.data.fill_(1)
        m.bias.data.zero_()
    elif classname.find('Linear') != -1:
        n = m.weight.size(1)
        m.weight.data.normal_(0, 0.01)
        m.bias.data = torch.ones(m.bias.data.size())


def relations_of(feature_encoder, relation_network, samples, batches, num_query, bug=None):
    """The episode's forward lines, from the images to the relation scores (shared by the loop and the model)."""
    # calculate features
    sample_features = feature_encoder(samples) # 5x64*5*5
    sample_features = sample_features.view(CLASS_NUM,SAMPLE_NUM_PER_CLASS,FEATURE_DIM,5,5)
    if bug == "support_summed_over_classes":
        sample_features = torch.sum(sample_features,0).squeeze(0)
    else:
        sample_features = torch.sum(sample_features,1).squeeze(1)
    batch_features = feature_encoder(batches) # 20x64*5*5

    # calculate relations
    # each batch sample link to every samples to calculate relations
    # to form a 100x128 matrix for relation network
    sample_features_ext = sample_features.unsqueeze(0).repeat(num_query,1,1,1,1)
    batch_features_ext = batch_features.unsqueeze(0).repeat(CLASS_NUM,1,1,1,1)
    batch_features_ext = torch.transpose(batch_features_ext,0,1)

    relation_pairs = torch.cat((sample_features_ext,batch_features_ext),2).view(-1,FEATURE_DIM*2,5,5)
    relations = relation_network(relation_pairs).view(-1,CLASS_NUM)
    return relations


class RelationModel(nn.Module):
    """(port) The two networks in one module for the Program: ``(samples, batches) -> relations``."""

    def __init__(self, feature_encoder, relation_network, bug=None):
        super().__init__()
        self.feature_encoder = feature_encoder
        self.relation_network = relation_network
        self.bug = bug

    def forward(self, inputs):
        samples, batches = inputs
        return relations_of(self.feature_encoder, self.relation_network, samples, batches,
                            batches.shape[0], bug=self.bug)


def _build(seed, bug=None):
    all_folders = _make_characters(seed)
    # Step 1: init data folders
    # init character folders for dataset construction
    metatrain_character_folders,metatest_character_folders = omniglot_character_folders(all_folders)
    random.seed(seed)
    torch.manual_seed(seed)

    # Step 2: init neural networks
    feature_encoder = CNNEncoder()
    relation_network = RelationNetwork(FEATURE_DIM,RELATION_DIM)

    feature_encoder.apply(weights_init)
    relation_network.apply(weights_init)

    feature_encoder_optim = torch.optim.Adam(feature_encoder.parameters(),lr=LEARNING_RATE)
    feature_encoder_scheduler = StepLR(feature_encoder_optim,step_size=100000,gamma=0.5)
    relation_network_optim = torch.optim.Adam(relation_network.parameters(),lr=LEARNING_RATE)
    relation_network_scheduler = StepLR(relation_network_optim,step_size=100000,gamma=0.5)

    mse = nn.MSELoss()

    def one_hot_of(batch_labels):
        if bug == "labels_assumed_unshuffled":
            batch_labels = torch.arange(CLASS_NUM).repeat_interleave(BATCH_NUM_PER_CLASS)
        return torch.zeros(BATCH_NUM_PER_CLASS*CLASS_NUM, CLASS_NUM).scatter_(1, batch_labels.view(-1,1), 1)

    def train_step():
        # init dataset
        # sample_dataloader is to obtain previous samples for compare
        # batch_dataloader is to batch samples for training
        degrees = random.choice([0,90,180,270])
        task = OmniglotTask(metatrain_character_folders,CLASS_NUM,SAMPLE_NUM_PER_CLASS,BATCH_NUM_PER_CLASS)
        sample_dataloader = get_data_loader(task,num_per_class=SAMPLE_NUM_PER_CLASS,split="train",shuffle=False,rotation=degrees)
        batch_dataloader = get_data_loader(task,num_per_class=BATCH_NUM_PER_CLASS,split="test",shuffle=True,rotation=degrees)

        # sample datas
        samples,sample_labels = next(iter(sample_dataloader))
        batches,batch_labels = next(iter(batch_dataloader))

        relations = relations_of(feature_encoder, relation_network, samples, batches,
                                 BATCH_NUM_PER_CLASS*CLASS_NUM, bug=bug)

        one_hot_labels = one_hot_of(batch_labels)
        loss = mse(relations,one_hot_labels)

        # training

        if bug != "encoder_zero_grad_dropped":
            feature_encoder.zero_grad()
        relation_network.zero_grad()

        loss.backward()

        torch.nn.utils.clip_grad_norm_(feature_encoder.parameters(),0.5)
        torch.nn.utils.clip_grad_norm_(relation_network.parameters(),0.5)

        feature_encoder_optim.step()
        relation_network_optim.step()

        feature_encoder_scheduler.step()  # (port) .step(episode) at the top of the episode
        relation_network_scheduler.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        # test
        total_rewards = 0
        state = random.getstate()
        random.seed(seed + 1000)
        with torch.no_grad():
            for i in range(TEST_EPISODE):
                degrees = random.choice([0,90,180,270])
                task = OmniglotTask(metatest_character_folders,CLASS_NUM,SAMPLE_NUM_PER_CLASS,SAMPLE_NUM_PER_CLASS,)
                sample_dataloader = get_data_loader(task,num_per_class=SAMPLE_NUM_PER_CLASS,split="train",shuffle=False,rotation=degrees)
                test_dataloader = get_data_loader(task,num_per_class=SAMPLE_NUM_PER_CLASS,split="test",shuffle=True,rotation=degrees)

                sample_images,sample_labels = next(iter(sample_dataloader))
                test_images,test_labels = next(iter(test_dataloader))

                relations = relations_of(model.feature_encoder, model.relation_network, sample_images, test_images,
                                         SAMPLE_NUM_PER_CLASS*CLASS_NUM, bug=bug)

                _,predict_labels = torch.max(relations.data,1)

                rewards = [1 if predict_labels[j]==test_labels[j] else 0 for j in range(CLASS_NUM*SAMPLE_NUM_PER_CLASS)]

                total_rewards += np.sum(rewards)
        random.setstate(state)

        test_accuracy = total_rewards/1.0/CLASS_NUM/SAMPLE_NUM_PER_CLASS/TEST_EPISODE
        return float(test_accuracy)

    # the Program's batch: one fixed training episode (no rotation)
    state = random.getstate()
    random.seed(seed + 2000)
    task = OmniglotTask(metatrain_character_folders,CLASS_NUM,SAMPLE_NUM_PER_CLASS,BATCH_NUM_PER_CLASS)
    samples, _ = next(iter(get_data_loader(task,num_per_class=SAMPLE_NUM_PER_CLASS,split="train",shuffle=False)))
    batches, batch_labels = next(iter(get_data_loader(task,num_per_class=BATCH_NUM_PER_CLASS,split="test",shuffle=True)))
    random.setstate(state)
    model = RelationModel(feature_encoder, relation_network, bug=bug)

    return Program(name="relationnet_omniglot", model=model, batch=((samples, batches), one_hot_of(batch_labels)),
                   loss_fn=mse, optimizer=relation_network_optim, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the one-hot targets built as if the query loader were unshuffled (classic: labels assumed in class order while
    # ClassBalancedSampler shuffles the query batch).
    Bug("labels_assumed_unshuffled", functools.partial(_build, bug="labels_assumed_unshuffled"), "learning_ledger",
        ("TASK",)),
    # the support features summed over the class axis instead of the shot axis (classic wrong-axis reduction; both
    # are 5 here, so the shapes agree): every "class" embedding mixes all classes.
    Bug("support_summed_over_classes", functools.partial(_build, bug="support_summed_over_classes"),
        "learning_ledger", ("TASK",)),
    # feature_encoder.zero_grad() dropped (classic, one of the two networks): the encoder's gradients accumulate.
    Bug("encoder_zero_grad_dropped", functools.partial(_build, bug="encoder_zero_grad_dropped"), "step_probe",
        ("feature_encoder",)),
]
