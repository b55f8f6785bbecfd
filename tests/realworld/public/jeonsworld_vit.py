"""Vision Transformer fine-tuning loop of jeonsworld/ViT-pytorch: ``VisionTransformer`` (conv patch embedding, [CLS]
token, learned position embeddings, pre-norm blocks with hand-written multi-head attention, encoder LayerNorm, linear
head on [CLS]) whose forward returns the cross-entropy loss when labels are given; SGD(momentum 0.9, weight_decay 0),
``WarmupCosineSchedule`` stepped before ``optimizer.step()`` (as written), ``clip_grad_norm_(1.0)``, gradient
accumulation with the loss divided by the accumulation steps, and the script's validation (accuracy under ``eval()``
and ``no_grad``).

Source: https://github.com/jeonsworld/ViT-pytorch
Commit: 460a162767de1722a014ed2261463dbbc01196b6
Files: train.py, models/modeling.py, models/configs.py, utils/scheduler.py, utils/data_utils.py
License: MIT (Copyright (c) 2020 jeonsworld)
Domain: vision transformer (image classification)

Deviations from the original:
- sizes: a config like the repository's ``get_testing()`` but wider: hidden 32, mlp_dim 64, 2 heads, 2 layers, patch
  4 on 16x16 images (ViT-B/16 on 224x224), dropout 0.1, attention dropout 0.0 as in the ViT configs; batch 512 -> 32
  with ``--gradient_accumulation_steps 2`` (16 per micro-batch; the script's own option, default 1);
  num_steps 10000 -> 300 and warmup_steps 500 -> 15 (same 1:20 ratio); learning_rate 3e-2 unchanged;
- no pretrained checkpoint can be loaded (``model.load_from(np.load(...))``): the weights keep their initialization,
  except the head, which ``load_from`` zeroes because the script builds the model with ``zero_head=True``
  (``nn.init.zeros_`` on head.weight and head.bias, as ``load_from`` does first);
- ``ml_collections.ConfigDict`` is replaced by ``types.SimpleNamespace``; the hybrid ResNet path (R50-ViT) and the
  weight-loading code are left out; no apex (fp16) and no distributed training;
- data: CIFAR-10 is replaced by synthetic 3x16x16 images made from ``seed`` (each class has its own colour, plus
  smooth noise); torchvision is not available, so the training transform (RandomResizedCrop(scale=(0.05, 1.0)),
  ToTensor, Normalize(0.5, 0.5)) is written out in plain torch (torchvision's sampling of area and aspect ratio,
  10 tries then a centre crop, bilinear resize); RandomSampler and a DataLoader without workers;
- one ``train_step`` is one optimizer update of the training loop (``gradient_accumulation_steps`` micro-batches);
  tensorboard, tqdm, logging and checkpoint saving are left out; the periodic validation runs every 10 updates on a
  held-out batch and the loop's ``model.train()`` follows it, as in the script.
"""
# ruff: noqa: PLR0402, UP008  (the original's code style is kept as written)

from __future__ import annotations

import copy
import functools
import math
import pathlib
import sys
from types import SimpleNamespace

import torch
import torch.nn as nn
from torch.nn import Conv2d, CrossEntropyLoss, Dropout, LayerNorm, Linear, Softmax
from torch.nn.modules.utils import _pair
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, Dataset, RandomSampler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NUM_CLASSES, IMG_SIZE = 10, 16
TRAIN_BATCH_SIZE, GRADIENT_ACCUMULATION_STEPS = 32, 2
LEARNING_RATE, WEIGHT_DECAY, MAX_GRAD_NORM = 3e-2, 0.0, 1.0
NUM_STEPS, WARMUP_STEPS, EVAL_EVERY = 300, 15, 10


def get_config():
    return SimpleNamespace(
        patches={"size": (4, 4)}, hidden_size=32,
        transformer={"mlp_dim": 64, "num_heads": 2, "num_layers": 2, "attention_dropout_rate": 0.0,
                     "dropout_rate": 0.1},
        classifier="token", representation_size=None)


# ---- models/modeling.py --------------------------------------------------------------------------------------

ACT2FN = {"gelu": torch.nn.functional.gelu, "relu": torch.nn.functional.relu}


class Attention(nn.Module):
    def __init__(self, config, vis):
        super(Attention, self).__init__()
        self.vis = vis
        self.num_attention_heads = config.transformer["num_heads"]
        self.attention_head_size = int(config.hidden_size / self.num_attention_heads)
        self.all_head_size = self.num_attention_heads * self.attention_head_size

        self.query = Linear(config.hidden_size, self.all_head_size)
        self.key = Linear(config.hidden_size, self.all_head_size)
        self.value = Linear(config.hidden_size, self.all_head_size)

        self.out = Linear(config.hidden_size, config.hidden_size)
        self.attn_dropout = Dropout(config.transformer["attention_dropout_rate"])
        self.proj_dropout = Dropout(config.transformer["attention_dropout_rate"])

        self.softmax = Softmax(dim=-1)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(*new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states):
        mixed_query_layer = self.query(hidden_states)
        mixed_key_layer = self.key(hidden_states)
        mixed_value_layer = self.value(hidden_states)

        query_layer = self.transpose_for_scores(mixed_query_layer)
        key_layer = self.transpose_for_scores(mixed_key_layer)
        value_layer = self.transpose_for_scores(mixed_value_layer)

        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_probs = self.softmax(attention_scores)
        weights = attention_probs if self.vis else None
        attention_probs = self.attn_dropout(attention_probs)

        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        context_layer = context_layer.view(*new_context_layer_shape)
        attention_output = self.out(context_layer)
        attention_output = self.proj_dropout(attention_output)
        return attention_output, weights


class Mlp(nn.Module):
    def __init__(self, config):
        super(Mlp, self).__init__()
        self.fc1 = Linear(config.hidden_size, config.transformer["mlp_dim"])
        self.fc2 = Linear(config.transformer["mlp_dim"], config.hidden_size)
        self.act_fn = ACT2FN["gelu"]
        self.dropout = Dropout(config.transformer["dropout_rate"])

        self._init_weights()

    def _init_weights(self):
        nn.init.xavier_uniform_(self.fc1.weight)
        nn.init.xavier_uniform_(self.fc2.weight)
        nn.init.normal_(self.fc1.bias, std=1e-6)
        nn.init.normal_(self.fc2.bias, std=1e-6)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act_fn(x)
        x = self.dropout(x)
        x = self.fc2(x)
        x = self.dropout(x)
        return x


class Embeddings(nn.Module):
    """Construct the embeddings from patch, position embeddings.
    """
    def __init__(self, config, img_size, in_channels=3, bug=None):
        super(Embeddings, self).__init__()
        self.bug = bug
        self.hybrid = None
        img_size = _pair(img_size)

        patch_size = _pair(config.patches["size"])
        n_patches = (img_size[0] // patch_size[0]) * (img_size[1] // patch_size[1])
        self.hybrid = False

        self.patch_embeddings = Conv2d(in_channels=in_channels,
                                       out_channels=config.hidden_size,
                                       kernel_size=patch_size,
                                       stride=patch_size)
        self.position_embeddings = nn.Parameter(torch.zeros(1, n_patches+1, config.hidden_size))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))

        self.dropout = Dropout(config.transformer["dropout_rate"])

    def forward(self, x):
        B = x.shape[0]
        cls_tokens = self.cls_token.expand(B, -1, -1)

        x = self.patch_embeddings(x)
        x = x.flatten(2)
        if self.bug == "patches_reshaped_not_transposed":
            x = x.reshape(B, -1, x.shape[1])  # [B, hidden, N] read as [B, N, hidden]: channels and patches mixed
        else:
            x = x.transpose(-1, -2)
        x = torch.cat((cls_tokens, x), dim=1)

        embeddings = x + self.position_embeddings
        embeddings = self.dropout(embeddings)
        return embeddings


class Block(nn.Module):
    def __init__(self, config, vis):
        super(Block, self).__init__()
        self.hidden_size = config.hidden_size
        self.attention_norm = LayerNorm(config.hidden_size, eps=1e-6)
        self.ffn_norm = LayerNorm(config.hidden_size, eps=1e-6)
        self.ffn = Mlp(config)
        self.attn = Attention(config, vis)

    def forward(self, x):
        h = x
        x = self.attention_norm(x)
        x, weights = self.attn(x)
        x = x + h

        h = x
        x = self.ffn_norm(x)
        x = self.ffn(x)
        x = x + h
        return x, weights


class Encoder(nn.Module):
    def __init__(self, config, vis):
        super(Encoder, self).__init__()
        self.vis = vis
        self.layer = nn.ModuleList()
        self.encoder_norm = LayerNorm(config.hidden_size, eps=1e-6)
        for _ in range(config.transformer["num_layers"]):
            layer = Block(config, vis)
            self.layer.append(copy.deepcopy(layer))

    def forward(self, hidden_states):
        attn_weights = []
        for layer_block in self.layer:
            hidden_states, weights = layer_block(hidden_states)
            if self.vis:
                attn_weights.append(weights)
        encoded = self.encoder_norm(hidden_states)
        return encoded, attn_weights


class Transformer(nn.Module):
    def __init__(self, config, img_size, vis, bug=None):
        super(Transformer, self).__init__()
        self.embeddings = Embeddings(config, img_size=img_size, bug=bug)
        self.encoder = Encoder(config, vis)

    def forward(self, input_ids):
        embedding_output = self.embeddings(input_ids)
        encoded, attn_weights = self.encoder(embedding_output)
        return encoded, attn_weights


class VisionTransformer(nn.Module):
    def __init__(self, config, img_size=224, num_classes=21843, zero_head=False, vis=False, bug=None):
        super(VisionTransformer, self).__init__()
        self.num_classes = num_classes
        self.zero_head = zero_head
        self.classifier = config.classifier

        self.transformer = Transformer(config, img_size, vis, bug=bug)
        self.head = Linear(config.hidden_size, num_classes)

    def forward(self, x, labels=None):
        x, attn_weights = self.transformer(x)
        logits = self.head(x[:, 0])

        if labels is not None:
            loss_fct = CrossEntropyLoss()
            loss = loss_fct(logits.view(-1, self.num_classes), labels.view(-1))
            return loss
        else:
            return logits, attn_weights


# ---- utils/scheduler.py --------------------------------------------------------------------------------------

class WarmupCosineSchedule(LambdaLR):
    """ Linear warmup and then cosine decay.
        Linearly increases learning rate from 0 to 1 over `warmup_steps` training steps.
        Decreases learning rate from 1. to 0. over remaining `t_total - warmup_steps` steps following a cosine curve.
        If `cycles` (default=0.5) is different from default, learning rate follows cosine function after warmup.
    """
    def __init__(self, optimizer, warmup_steps, t_total, cycles=.5, last_epoch=-1):
        self.warmup_steps = warmup_steps
        self.t_total = t_total
        self.cycles = cycles
        super(WarmupCosineSchedule, self).__init__(optimizer, self.lr_lambda, last_epoch=last_epoch)

    def lr_lambda(self, step):
        if step < self.warmup_steps:
            return float(step) / float(max(1.0, self.warmup_steps))
        # progress after warmup
        progress = float(step - self.warmup_steps) / float(max(1, self.t_total - self.warmup_steps))
        return max(0.0, 0.5 * (1. + math.cos(math.pi * float(self.cycles) * 2.0 * progress)))


# ---- utils/data_utils.py (torchvision transforms written out) ------------------------------------------------

def random_resized_crop(img, size, scale=(0.05, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)):
    """torchvision's RandomResizedCrop on a [C, H, W] tensor: area and log-uniform aspect ratio sampled with the
    global torch RNG (10 tries, then a centre crop of the clamped ratio), bilinear resize to ``size``."""
    _, height, width = img.shape
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
        aspect_ratio = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])).item()
        w = round(math.sqrt(target_area * aspect_ratio))
        h = round(math.sqrt(target_area / aspect_ratio))
        if 0 < w <= width and 0 < h <= height:
            i = torch.randint(0, height - h + 1, size=(1,)).item()
            j = torch.randint(0, width - w + 1, size=(1,)).item()
            break
    else:
        in_ratio = float(width) / float(height)
        if in_ratio < min(ratio):
            w, h = width, round(width / min(ratio))
        elif in_ratio > max(ratio):
            h, w = height, round(height * max(ratio))
        else:
            w, h = width, height
        i, j = (height - h) // 2, (width - w) // 2
    crop = img[:, i:i + h, j:j + w]
    return torch.nn.functional.interpolate(crop[None], size=size, mode="bilinear", align_corners=False,
                                           antialias=True)[0]


def transform_train(img):
    img = random_resized_crop(img, (IMG_SIZE, IMG_SIZE), scale=(0.05, 1.0))
    return (img - 0.5) / 0.5  # Normalize(mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])


def transform_test(img):
    return (img - 0.5) / 0.5


class ColourImages(Dataset):
    """[0, 1] images (the output of ToTensor): a class colour plus smooth noise (a 4x4 noise field upsampled)."""

    def __init__(self, gen, n, colours, transform):
        self.labels = torch.randint(NUM_CLASSES, (n,), generator=gen)
        noise = torch.randn(n, 3, 4, 4, generator=gen) * 0.12
        noise = torch.nn.functional.interpolate(noise, size=(IMG_SIZE, IMG_SIZE), mode="bilinear",
                                                align_corners=False)
        self.images = (colours[self.labels][:, :, None, None] + noise).clamp(0, 1)
        self.transform = transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return self.transform(self.images[idx]), self.labels[idx]


def make_colours(gen):
    """Ten colours at least 0.25 apart (rejection sampling)."""
    colours = []
    while len(colours) < NUM_CLASSES:
        c = torch.rand(3, generator=gen) * 0.8 + 0.1
        if all(float((c - d).norm()) > 0.25 for d in colours):
            colours.append(c)
    return torch.stack(colours)


# ---- train.py ------------------------------------------------------------------------------------------------

def simple_accuracy(preds, labels):
    return (preds == labels).mean()


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    colours = make_colours(gen)
    trainset = ColourImages(gen, 512, colours, transform_train)
    testset = ColourImages(gen, 64, colours, transform_test)

    config = get_config()
    model = VisionTransformer(config, IMG_SIZE, zero_head=True, num_classes=NUM_CLASSES, bug=bug)
    with torch.no_grad():  # the zero_head part of model.load_from(...)
        nn.init.zeros_(model.head.weight)
        nn.init.zeros_(model.head.bias)

    train_batch_size = TRAIN_BATCH_SIZE // GRADIENT_ACCUMULATION_STEPS
    train_loader = DataLoader(trainset, sampler=RandomSampler(trainset), batch_size=train_batch_size, num_workers=0)
    test_batch = (testset.transform(testset.images), testset.labels)

    # Prepare optimizer and scheduler
    params = model.transformer.parameters() if bug == "head_left_out_of_optimizer" else model.parameters()
    optimizer = torch.optim.SGD(params,
                                lr=LEARNING_RATE,
                                momentum=0.9,
                                weight_decay=WEIGHT_DECAY)
    t_total = NUM_STEPS
    scheduler = WarmupCosineSchedule(optimizer, warmup_steps=WARMUP_STEPS, t_total=t_total)

    def valid(model, batch):
        model.eval()
        x, y = batch
        with torch.no_grad():
            logits = model(x)[0]
            preds = torch.argmax(logits, dim=-1)
        return float(simple_accuracy(preds.numpy(), y.numpy()))

    model.zero_grad()
    state = {"it": None, "step": 0, "global_step": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):  # a new epoch: `while True: model.train(); for step, batch in ...`
            model.train()
            state["it"], state["step"] = iter(train_loader), 0
            return next(state["it"])

    def train_step():
        """One optimizer update: the loop body until `(step + 1) % gradient_accumulation_steps == 0` is taken."""
        total = 0.0
        while True:
            batch = next_batch()
            step = state["step"]
            state["step"] += 1
            x, y = batch
            loss = model(x, y)

            if GRADIENT_ACCUMULATION_STEPS > 1:
                loss = loss / GRADIENT_ACCUMULATION_STEPS
            loss.backward()
            total += loss.item()

            if (step + 1) % GRADIENT_ACCUMULATION_STEPS == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
                scheduler.step()
                optimizer.step()
                optimizer.zero_grad()
                state["global_step"] += 1
                if state["global_step"] % EVAL_EVERY == 0:
                    valid(model, test_batch)
                    model.train()
                return torch.tensor(total)

    return Program(name="jeonsworld_vit", model=model, batch=next(iter(DataLoader(trainset, batch_size=16))),
                   loss_fn=CrossEntropyLoss(), optimizer=optimizer, train_step=train_step, eval_fn=valid,
                   loader=train_loader, task="classification")


build = functools.partial(_build)

BUGS = [
    # the optimizer built over the backbone only: the zero-initialized head never moves, so the logits stay 0.
    Bug("head_left_out_of_optimizer", functools.partial(_build, bug="head_left_out_of_optimizer"), "four_structures",
        ("head",)),
    # the patch tokens taken with a reshape instead of a transpose: [B, hidden, N] read as [B, N, hidden], so every
    # "token" mixes the features of several patches and every "feature" runs across patches.
    Bug("patches_reshaped_not_transposed", functools.partial(_build, bug="patches_reshaped_not_transposed"),
        "tensor_trace", ("transformer.embeddings",)),
]
