"""loader_timing on the input pipelines people write: an image Dataset of ``(image, label)`` with per-item
transforms, a text Dataset of dicts padded by a collate_fn, a GAN's loader of images and class labels timed with
its own train_step, workers (num_workers=2, persistent), a tabular loader. Bugs: a __getitem__ that decodes slowly,
a collate_fn that tokenizes slowly, with a fast consumer."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from _cases import Case
from torch import nn
from torch.utils.data import DataLoader, Dataset

import firstdiv

# --- an image Dataset with per-item transforms -----------------------------------------------------------------


class RandomFlip:
    def __init__(self, generator: torch.Generator) -> None:
        self.g = generator

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        return img.flip(-1) if torch.rand((), generator=self.g) < 0.5 else img


class Normalize:
    def __init__(self, mean: float, std: float) -> None:
        self.mean, self.std = mean, std

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        return (img - self.mean) / self.std


class Compose:
    def __init__(self, *steps) -> None:
        self.steps = steps

    def __call__(self, x):
        for s in self.steps:
            x = s(x)
        return x


class ShapesImages(Dataset):
    """Stored uint8 images decoded to float and transformed per item."""

    def __init__(self, seed: int, n: int = 64, transform=None) -> None:
        g = torch.Generator().manual_seed(seed)
        self.raw = torch.randint(0, 256, (n, 3, 16, 16), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, i):
        img = self.raw[i].float() / 255.0
        if self.transform is not None:
            img = self.transform(img)
        return img, int(self.labels[i])


class SlowDecode(ShapesImages):
    """The bug: every item is decoded the slow way (a 25 ms blocking read per image)."""

    def __getitem__(self, i):
        time.sleep(0.025)
        return super().__getitem__(i)


def small_cnn(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(512, 10))


def classifier_program(seed: int, dataset: Dataset, batch_size: int, **loader_kw) -> SimpleNamespace:
    model = small_cnn(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(seed), **loader_kw)

    def train_step(batch):
        images, labels = batch
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss.item()

    return SimpleNamespace(model=model, optimizer=optimizer, loader=loader, train_step=train_step)


def images(seed: int) -> SimpleNamespace:
    g = torch.Generator().manual_seed(seed + 100)
    ds = ShapesImages(seed, transform=Compose(RandomFlip(g), Normalize(0.5, 0.25)))
    return classifier_program(seed, ds, batch_size=16)


def slow_images(seed: int) -> SimpleNamespace:
    p = classifier_program(seed, SlowDecode(seed, n=32), batch_size=2)
    model, optimizer = p.model, p.optimizer

    def fast_step(batch):  # a consumer far faster than 2 x 25 ms: the CNN on a 4 x 4 thumbnail
        images, labels = batch
        optimizer.zero_grad()
        F.cross_entropy(model(images[:, :, ::4, ::4]), labels).backward()
        optimizer.step()

    p.train_step = fast_step
    return p


def workers_images(seed: int) -> SimpleNamespace:
    return classifier_program(seed, ShapesImages(seed, n=96, transform=Normalize(0.5, 0.25)), batch_size=16,
                              num_workers=2, persistent_workers=True)


# --- a text Dataset of dicts, padded by the collate_fn ---------------------------------------------------------


class Reviews(Dataset):
    def __init__(self, seed: int, n: int = 64, vocab: int = 500) -> None:
        rng = np.random.default_rng(seed)
        self.texts = [rng.integers(1, vocab, size=int(rng.integers(5, 40))) for _ in range(n)]
        self.labels = rng.integers(0, 2, size=n)

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i):
        ids = torch.as_tensor(self.texts[i], dtype=torch.long)
        return {"input_ids": ids, "length": len(ids), "label": int(self.labels[i])}


def pad_collate(items):
    longest = max(it["length"] for it in items)
    ids = torch.zeros(len(items), longest, dtype=torch.long)
    for row, it in enumerate(items):
        ids[row, :it["length"]] = it["input_ids"]
    return {"input_ids": ids, "mask": ids != 0, "labels": torch.tensor([it["label"] for it in items])}


def pad_and_tokenize(items):
    """The bug: tokenizing in the collate_fn, character by character in Python, 30 ms a batch."""
    time.sleep(0.03)
    return pad_collate(items)


class BagClassifier(nn.Module):
    def __init__(self, vocab: int = 500, dim: int = 64) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.body = nn.Sequential(nn.Linear(dim, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2))

    def forward(self, ids, mask):
        h = (self.emb(ids) * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        return self.body(h)


def text_program(seed: int, collate) -> SimpleNamespace:
    torch.manual_seed(seed)
    model = BagClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(Reviews(seed), batch_size=16, shuffle=True, collate_fn=collate,
                        generator=torch.Generator().manual_seed(seed))

    def train_step(batch):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(batch["input_ids"], batch["mask"]), batch["labels"])
        loss.backward()
        optimizer.step()

    return SimpleNamespace(model=model, optimizer=optimizer, loader=loader, train_step=train_step)


# --- a GAN's loader: images and class labels, the user's own train_step ----------------------------------------


def gan(seed: int) -> SimpleNamespace:
    torch.manual_seed(seed)
    z_dim = 16
    gen = nn.Sequential(nn.Linear(z_dim, 128), nn.ReLU(), nn.Linear(128, 3 * 16 * 16), nn.Tanh())
    disc = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1), nn.Sigmoid())
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    bce = nn.BCELoss()
    loader = DataLoader(ShapesImages(seed, transform=Normalize(0.5, 0.5)), batch_size=16, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))

    def train_step(batch):
        real, _class_labels = batch  # the class labels are not the discriminator's targets
        n = real.shape[0]
        fake = gen(torch.randn(n, z_dim)).view(n, 3, 16, 16)
        opt_d.zero_grad()
        d_loss = bce(disc(real), torch.ones(n, 1)) + bce(disc(fake.detach()), torch.zeros(n, 1))
        d_loss.backward()
        opt_d.step()
        opt_g.zero_grad()
        g_loss = bce(disc(fake), torch.ones(n, 1))
        g_loss.backward()
        opt_g.step()

    return SimpleNamespace(model=nn.ModuleDict({"gen": gen, "disc": disc}), optimizer=opt_d, loader=loader,
                           train_step=train_step)


# --- a tabular loader ------------------------------------------------------------------------------------------


class CreditRows(Dataset):
    def __init__(self, seed: int, n: int = 256) -> None:
        rng = np.random.default_rng(seed)
        self.x = rng.normal(size=(n, 24)).astype(np.float32)
        self.y = (self.x[:, :3].sum(1) > 0).astype(np.int64)
        self.mean, self.std = self.x.mean(0), self.x.std(0) + 1e-6

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return torch.from_numpy((self.x[i] - self.mean) / self.std), int(self.y[i])


def tabular(seed: int) -> SimpleNamespace:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(24, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(CreditRows(seed), batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(seed))

    def train_step(batch):
        x, y = batch
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    return SimpleNamespace(model=model, optimizer=optimizer, loader=loader, train_step=train_step)


def timed(batches: int = 6):
    return lambda p: firstdiv.loader_timing(p.loader, train_step=p.train_step, batches=batches)


CASES = [
    Case("timing_images_transforms", "loader_timing", images, timed(), timing=True),
    Case("timing_text_dicts_pad_collate", "loader_timing", lambda s: text_program(s, pad_collate), timed(),
         timing=True),
    Case("timing_gan_images_and_class_labels", "loader_timing", gan, timed(), timing=True),
    Case("timing_workers_persistent", "loader_timing", workers_images, timed(), timing=True),
    Case("timing_tabular", "loader_timing", tabular, timed(), timing=True),
    Case("timing_slow_getitem", "loader_timing", slow_images, timed(3), bug=True, timing=True,
         where=("read_decode_transform",), kind="loader.starved"),
    Case("timing_slow_collate", "loader_timing", lambda s: text_program(s, pad_and_tokenize), timed(3), bug=True,
         timing=True, where=("collate",), kind="loader.starved"),
]
