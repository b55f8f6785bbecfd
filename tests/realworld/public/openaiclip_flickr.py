"""A simple CLIP (image-text contrastive) trained by the repository's main.py with its config.py: an image encoder
(timm ResNet-50, global average pool) and a DistilBERT text encoder (CLS token), both from config and frozen
(``pretrained = False``, ``trainable = False``), two ``ProjectionHead``s (linear, GELU, linear, dropout, residual,
LayerNorm), logits ``text @ image.T / temperature`` against soft targets ``softmax((image_sim + text_sim) / 2 *
temperature)``, symmetric soft cross-entropy, AdamW lr 1e-3 weight decay 1e-3, ReduceLROnPlateau built with
``step = "epoch"`` (so never stepped by ``train_epoch``), Flickr-8k style ``captions.csv`` with a train/valid
split by image id.

Source: https://github.com/moein-shariatnia/OpenAI-CLIP
Commit: 73fea1f9b71a4982997ea4c75070a845b547abef
Files: main.py, CLIP.py, modules.py, config.py, dataset.py, utils.py
License: MIT (Copyright (c) 2021 Moein Shariatnia)
Domain: image-text contrastive learning (CLIP-like)

Deviations from the original:
- sizes: image size 224 -> 32; ``debug`` image count 100 -> 40 (two captions per image instead of five);
  DistilBERT from ``DistilBertConfig()`` -> the same class with dim 32, 2 layers, 2 heads, hidden 64, a 64-token
  vocabulary, max_position_embeddings 32; projection_dim 256 -> 32;
- timm is not available: the image encoder ``timm.create_model('resnet50', pretrained=False, num_classes=0,
  global_pool='avg')`` is replaced by the torchvision-style ResNet-18 of ``_tv_resnet.py`` at width 8 with its
  ``fc`` replaced by ``nn.Identity()`` (pooled 64-d features; ``image_embedding`` 2048 -> 64,
  ``text_embedding`` 768 -> 32); it stays frozen as written (``trainable = False``);
- the DistilBERT tokenizer cannot be downloaded: a word-level tokenizer over the synthetic caption vocabulary
  returns the same ``input_ids`` / ``attention_mask`` (``[CLS]`` first, ``[SEP]`` last, padded to the longest);
- data: Flickr-8k images and ``captions.csv`` are replaced by synthetic 32x32 images made from ``seed`` (a coloured
  square, disc or bar at a position on a noisy background) and captions naming the colour, shape and position
  ("a red disc on the left"), kept in memory instead of read by cv2; albumentations' Resize is the identity and
  Normalize is written out with its defaults;
- ``.to(CFG.device)``, tqdm, checkpointing and the epoch loop's printing are dropped; one ``train_step`` is one
  iteration of ``train_epoch``'s loop (the model in train mode as ``main()`` sets it); ``eval_fn`` is
  ``valid_epoch``'s body on a given batch.
"""
# ruff: noqa: SIM210  (the original code is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from transformers import DistilBertConfig, DistilBertModel

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
_PUBLIC = str(pathlib.Path(__file__).resolve().parent)
if _PUBLIC not in sys.path:
    sys.path.insert(0, _PUBLIC)
from _api import Bug, Program
from _tv_resnet import resnet18

# ---- config.py (sizes changed as listed above) ------------------------------------------------------------------

class CFG:
    debug = True
    batch_size = 8
    num_workers = 0
    lr = 1e-3
    weight_decay = 1e-3
    patience = 2
    factor = 0.5
    epochs = 5

    model_name = 'resnet50'
    image_embedding = 64
    text_embedding = 32
    max_length = 200

    pretrained = False  # for both image encoder and text encoder
    trainable = False  # for both image encoder and text encoder
    temperature = 1.0

    # image size
    size = 32

    # for projection head; used for both image and text encoders
    num_projection_layers = 1
    projection_dim = 32
    dropout = 0.1


# ---- modules.py -------------------------------------------------------------------------------------------------

class ImageEncoder(nn.Module):
    """
    Encode images to a fixed size vector
    """

    def __init__(
        self, model_name=CFG.model_name, pretrained=CFG.pretrained, trainable=CFG.trainable
    ):
        super().__init__()
        self.model = resnet18(pretrained, width=8)  # timm.create_model(model_name, pretrained, num_classes=0, ...)
        self.model.fc = nn.Identity()
        for p in self.model.parameters():
            p.requires_grad = trainable

    def forward(self, x):
        return self.model(x)


class TextEncoder(nn.Module):
    def __init__(self, pretrained=CFG.pretrained, trainable=CFG.trainable, bug=None):
        super().__init__()
        self.model = DistilBertModel(config=DistilBertConfig(
            vocab_size=64, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=32))

        for p in self.model.parameters():
            p.requires_grad = trainable

        # we are using the CLS token hidden representation as the sentence's embedding
        self.target_token_idx = 0
        self.bug = bug

    def forward(self, input_ids, attention_mask):
        if self.bug == "attention_mask_dropped":
            # the padding positions attended to: the CLS state depends on how far the caption was padded
            output = self.model(input_ids=input_ids)
        else:
            output = self.model(input_ids=input_ids, attention_mask=attention_mask)
        last_hidden_state = output.last_hidden_state
        return last_hidden_state[:, self.target_token_idx, :]


class ProjectionHead(nn.Module):
    def __init__(
        self,
        embedding_dim,
        projection_dim=CFG.projection_dim,
        dropout=CFG.dropout
    ):
        super().__init__()
        self.projection = nn.Linear(embedding_dim, projection_dim)
        self.gelu = nn.GELU()
        self.fc = nn.Linear(projection_dim, projection_dim)
        self.dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(projection_dim)

    def forward(self, x):
        projected = self.projection(x)
        x = self.gelu(projected)
        x = self.fc(x)
        x = self.dropout(x)
        x = x + projected
        x = self.layer_norm(x)
        return x


# ---- CLIP.py ----------------------------------------------------------------------------------------------------

class CLIPModel(nn.Module):
    def __init__(
        self,
        temperature=CFG.temperature,
        image_embedding=CFG.image_embedding,
        text_embedding=CFG.text_embedding,
        bug=None,
    ):
        super().__init__()
        self.image_encoder = ImageEncoder()
        self.text_encoder = TextEncoder(bug=bug)
        self.image_projection = ProjectionHead(embedding_dim=image_embedding)
        self.text_projection = ProjectionHead(embedding_dim=text_embedding)
        self.temperature = temperature
        self.bug = bug

    def forward(self, batch):
        # Getting Image and Text Features
        image_features = self.image_encoder(batch["image"])
        text_features = self.text_encoder(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
        )
        # Getting Image and Text Embeddings (with same dimension)
        image_embeddings = self.image_projection(image_features)
        text_embeddings = self.text_projection(text_features)

        # Calculating the Loss
        logits = (text_embeddings @ image_embeddings.T) / self.temperature
        images_similarity = image_embeddings @ image_embeddings.T
        texts_similarity = text_embeddings @ text_embeddings.T
        targets = F.softmax(
            (images_similarity + texts_similarity) / 2 * self.temperature, dim=-1
        )
        texts_loss = cross_entropy(logits, targets, reduction='none', bug=self.bug)
        images_loss = cross_entropy(logits.T, targets.T, reduction='none', bug=self.bug)
        loss = (images_loss + texts_loss) / 2.0  # shape: (batch_size)
        return loss.mean()


def cross_entropy(preds, targets, reduction='none', bug=None):
    if bug == "log_softmax_over_batch":
        # the log-softmax taken down the columns (over the other rows), not over each row's candidates
        log_softmax = nn.LogSoftmax(dim=0)
    else:
        log_softmax = nn.LogSoftmax(dim=-1)
    loss = (-targets * log_softmax(preds)).sum(1)
    if reduction == "none":
        return loss
    elif reduction == "mean":
        return loss.mean()


# ---- synthetic stand-in for Flickr-8k (captions.csv: image, caption, id; Images/*.jpg) ----------------------------

COLOURS = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (40, 70, 220), "yellow": (230, 220, 40)}
SHAPES = ["square", "disc", "bar"]
PLACES = ["left", "right"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "an", "on", "the", "at", "object", "coloured", "shape", "side",
         "of", "picture", "image"] + list(COLOURS) + SHAPES + PLACES


def make_image(rng, colour, shape, place):
    size = CFG.size
    img = rng.integers(0, 50, size=(size, size, 3)).astype(np.float64)
    yy, xx = np.mgrid[0:size, 0:size]
    cx = rng.uniform(6, 12) if place == "left" else rng.uniform(20, 26)
    cy = rng.uniform(8, 24)
    if shape == "square":
        m = (np.abs(xx - cx) <= 5) & (np.abs(yy - cy) <= 5)
    elif shape == "disc":
        m = (xx - cx) ** 2 + (yy - cy) ** 2 <= 30
    else:
        m = (np.abs(xx - cx) <= 2) & (np.abs(yy - cy) <= 8)
    img[m] = np.array(COLOURS[colour]) + rng.normal(0, 10, size=(int(m.sum()), 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def make_dataset(rng, n_images):
    images, rows = {}, []
    for i in range(n_images):
        colour, shape, place = rng.choice(list(COLOURS)), rng.choice(SHAPES), rng.choice(PLACES)
        name = f"{i:04d}.jpg"
        images[name] = make_image(rng, colour, shape, place)
        rows.append({"image": name, "caption": f"a {colour} {shape} on the {place}", "id": i})
        rows.append({"image": name, "caption": f"picture of a {colour} {shape} at the {place} side", "id": i})
    return images, pd.DataFrame(rows)


class WordTokenizer:
    """Stands in for DistilBertTokenizer.from_pretrained(...): the same keys, [CLS] ... [SEP], padded."""

    def __call__(self, texts, padding=True, truncation=True, max_length=None):
        ids = [[2] + [VOCAB.index(w) if w in VOCAB else 1 for w in t.split()] + [3] for t in texts]
        if truncation and max_length:
            ids = [x[:max_length] for x in ids]
        longest = max(len(x) for x in ids)
        return {"input_ids": [x + [0] * (longest - len(x)) for x in ids],
                "attention_mask": [[1] * len(x) + [0] * (longest - len(x)) for x in ids]}


# ---- dataset.py -------------------------------------------------------------------------------------------------

class CLIPDataset(torch.utils.data.Dataset):
    def __init__(self, image_filenames, captions, tokenizer, transforms, images):
        """
        image_filenames and cpations must have the same length; so, if there are
        multiple captions for each image, the image_filenames must have repetitive
        file names
        """

        self.image_filenames = image_filenames
        self.captions = list(captions)
        self.encoded_captions = tokenizer(
            list(captions), padding=True, truncation=True, max_length=CFG.max_length
        )
        self.transforms = transforms
        self.images = images

    def __getitem__(self, idx):
        item = {
            key: torch.tensor(values[idx])
            for key, values in self.encoded_captions.items()
        }

        image = self.images[self.image_filenames[idx]]  # cv2.imread + cv2.cvtColor(BGR2RGB)
        image = self.transforms(image=image)['image']
        item['image'] = torch.tensor(image).permute(2, 0, 1).float()
        item['caption'] = self.captions[idx]

        return item

    def __len__(self):
        return len(self.captions)


def get_transforms(mode="train"):
    # A.Compose([A.Resize(CFG.size, CFG.size), A.Normalize(max_pixel_value=255.0)]) for both modes
    mean = np.array([0.485, 0.456, 0.406]) * 255.0
    std = np.array([0.229, 0.224, 0.225]) * 255.0

    def transform(image):
        return {'image': ((image.astype(np.float32) - mean) / std).astype(np.float32)}
    return transform


# ---- main.py ----------------------------------------------------------------------------------------------------

def make_train_valid_dfs(dataframe):
    max_id = dataframe["id"].max() + 1 if not CFG.debug else 40
    image_ids = np.arange(0, max_id)
    np.random.seed(42)
    valid_ids = np.random.choice(
        image_ids, size=int(0.2 * len(image_ids)), replace=False
    )
    train_ids = [id_ for id_ in image_ids if id_ not in valid_ids]
    train_dataframe = dataframe[dataframe["id"].isin(train_ids)].reset_index(drop=True)
    valid_dataframe = dataframe[dataframe["id"].isin(valid_ids)].reset_index(drop=True)
    return train_dataframe, valid_dataframe


def build_loaders(dataframe, tokenizer, mode, images, generator=None, bug=None, full_dataframe=None):
    transforms = get_transforms(mode=mode)
    if bug == "image_names_from_unsplit_dataframe":
        # the file names taken from the dataframe before the split: row i's image is no longer row i's caption's
        image_filenames = full_dataframe["image"].values[:len(dataframe)]
    else:
        image_filenames = dataframe["image"].values
    dataset = CLIPDataset(
        image_filenames,
        dataframe["caption"].values,
        tokenizer=tokenizer,
        transforms=transforms,
        images=images,
    )
    dataloader = torch.utils.data.DataLoader(
        dataset,
        batch_size=CFG.batch_size,
        num_workers=CFG.num_workers,
        shuffle=True if mode == "train" else False,
        generator=generator,
    )
    return dataloader


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    images, dataframe = make_dataset(rng, 40)
    train_df, valid_df = make_train_valid_dfs(dataframe)
    tokenizer = WordTokenizer()
    gen = torch.Generator().manual_seed(seed)
    train_loader = build_loaders(train_df, tokenizer, mode="train", images=images, generator=gen, bug=bug,
                                 full_dataframe=dataframe)
    valid_loader = build_loaders(valid_df, tokenizer, mode="valid", images=images, bug=bug,
                                 full_dataframe=dataframe)

    model = CLIPModel(bug=bug)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=CFG.lr, weight_decay=CFG.weight_decay
    )
    lr_scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="min", patience=CFG.patience, factor=CFG.factor
    )
    step = "epoch"

    def batches():
        while True:
            model.train()
            yield from train_loader

    it = batches()

    def train_step():
        batch = next(it)
        batch = {k: v for k, v in batch.items() if k != "caption"}
        loss = model(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == "batch":
            lr_scheduler.step()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            loss = model(batch[0])
        model.train()
        return {'valid_loss': float(loss)}

    first = next(iter(valid_loader))
    first = {k: v for k, v in first.items() if k != "caption"}
    return Program(name="openaiclip_flickr", model=model, batch=(first,), loss_fn=lambda loss, _targets: loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader,
                   frozen=("image_encoder.*", "text_encoder.*"))


build = functools.partial(_build)

BUGS = [
    # classic data-pipeline slip: the image file names read from the dataframe before the train/valid split while
    # the captions come from the split one, so images and captions are paired by row position, not by id.
    Bug("image_names_from_unsplit_dataframe", functools.partial(_build, bug="image_names_from_unsplit_dataframe"),
        "learning_ledger", ("TASK",)),
    # classic: the tokenizer's attention_mask not passed to DistilBERT; the padded positions reach the CLS state.
    Bug("attention_mask_dropped", functools.partial(_build, bug="attention_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
    # the axis question of https://github.com/moein-shariatnia/OpenAI-CLIP/issues/24 (which softmax axis each
    # direction's cross-entropy normalizes over), taken the wrong way: LogSoftmax(dim=0) inside cross_entropy.
    Bug("log_softmax_over_batch", functools.partial(_build, bug="log_softmax_over_batch"), "learning_ledger",
        ("OBJECTIVE",)),
]
