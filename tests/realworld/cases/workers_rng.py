"""rng_audit on augmentation pipelines with DataLoader workers, as users write them: random crops with torch,
numpy augmentations with and without a worker_init_fn, a generator made lazily per worker, masked text returned
as dicts, sparse bag-of-words items, an explicit loader generator with batches larger than the audit's item count.

On this PyTorch (>= 1.9) each worker seeds torch, ``random`` and numpy's legacy global RNG from the loader's
base seed, so numpy without a worker_init_fn is correct here; what still duplicates a stream across workers is
a generator created in ``__init__`` (copied into every worker) and a worker_init_fn seeding one constant.
Each case audits the loader at the ``num_workers`` its user runs it with.
"""

from __future__ import annotations

import random
import types

import numpy as np
import torch
from _cases import Case
from torch.utils.data import DataLoader, Dataset, get_worker_info

import firstdiv

SEED = 1234  # a config file's seed, reused by the buggy worker_init_fns below


def _images(seed: int, n: int, size: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, size, size, generator=g), torch.randint(0, 10, (n,), generator=g)


class TorchCrops(Dataset):
    """(image, label) with a random 8x8 crop and horizontal flip drawn from torch's global RNG."""

    def __init__(self, seed: int, n: int = 48) -> None:
        self.images, self.labels = _images(seed, n)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        top, left = torch.randint(0, 5, (2,)).tolist()
        crop = self.images[i, :, top:top + 8, left:left + 8]
        if torch.rand(()) < 0.5:
            crop = crop.flip(-1)
        return crop, int(self.labels[i])


class NumpyJitter(TorchCrops):
    """Brightness jitter and crop offsets from numpy's legacy global RNG (np.random.*)."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        top, left = np.random.randint(0, 5, size=2)
        crop = self.images[i, :, top:top + 8, left:left + 8] * float(np.random.uniform(0.8, 1.2))
        return crop, int(self.labels[i])


class LazyRng(TorchCrops):
    """A numpy Generator made on first use inside each worker, from the seed PyTorch gave that worker."""

    def __init__(self, seed: int, n: int = 48) -> None:
        super().__init__(seed, n)
        self.rng = None

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.rng is None:
            info = get_worker_info()
            self.rng = np.random.default_rng((info.seed if info is not None else torch.initial_seed()) % 2**32)
        noise = torch.from_numpy(self.rng.normal(0.0, 0.05, size=(3, 12, 12))).float()
        return self.images[i] + noise, int(self.labels[i])


class HeldRng(TorchCrops):
    """Bug: ``default_rng(0)`` made once in __init__; every worker process gets an identical copy."""

    def __init__(self, seed: int, n: int = 48) -> None:
        super().__init__(seed, n)
        self.rng = np.random.default_rng(0)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        top, left = self.rng.integers(0, 5, size=2)
        return self.images[i, :, top:top + 8, left:left + 8], int(self.labels[i])


class HeldRandomState(TorchCrops):
    """Bug: numpy's legacy API through a RandomState made in __init__ (copied into every worker)."""

    def __init__(self, seed: int, n: int = 48) -> None:
        super().__init__(seed, n)
        self.rs = np.random.RandomState(seed)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        scale = float(self.rs.uniform(0.8, 1.2))
        return self.images[i] * scale, int(self.labels[i])


class MaskedText(Dataset):
    """Token ids with 15% of positions masked using the ``random`` module; items are dicts with the text."""

    def __init__(self, seed: int, n: int = 40, length: int = 10) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(5, 100, (n, length), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        ids = self.ids[i].clone()
        labels = torch.full_like(ids, -100)
        for pos in range(len(ids)):
            if random.random() < 0.15:
                labels[pos], ids[pos] = ids[pos], 4  # 4: [MASK]
        return {"input_ids": ids, "labels": labels, "text": " ".join(map(str, self.ids[i].tolist()))}


class SparseBags(Dataset):
    """Bag-of-words counts as sparse COO tensors, words dropped at random (torch)."""

    def __init__(self, seed: int, n: int = 32, vocab: int = 50) -> None:
        g = torch.Generator().manual_seed(seed)
        self.words = torch.randint(0, vocab, (n, 6), generator=g)
        self.vocab = vocab

    def __len__(self) -> int:
        return len(self.words)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        kept = self.words[i][torch.rand(6) > 0.2]
        counts = torch.zeros(self.vocab).index_add_(0, kept, torch.ones(len(kept)))
        return counts.to_sparse(), i % 2


def sparse_collate(batch: list) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.stack([x.to_dense() for x, _ in batch]).to_sparse(), torch.tensor([y for _, y in batch])


def seed_numpy_per_worker(worker_id: int) -> None:
    np.random.seed(torch.initial_seed() % 2**32)


def seed_numpy_with_config_seed(worker_id: int) -> None:
    np.random.seed(SEED)  # bug: the same seed in every worker


def seed_everything(worker_id: int) -> None:
    random.seed(SEED)  # bug: a global "seed everything" helper reused as worker_init_fn
    np.random.seed(SEED)
    torch.manual_seed(SEED)


def _program(loader: DataLoader) -> types.SimpleNamespace:
    ds = getattr(loader.dataset, "dataset", loader.dataset)  # a random_split's Subset: the full dataset
    return types.SimpleNamespace(loader=loader, sample=getattr(ds, "images", getattr(ds, "ids", None)))


def _audit(program: types.SimpleNamespace) -> firstdiv.Report:
    return firstdiv.rng_audit(program.loader, (program.loader.num_workers,), seed=0)


def _loader(dataset_cls: type, **kw) -> callable:
    def build(seed: int) -> types.SimpleNamespace:
        return _program(DataLoader(dataset_cls(seed), **{"batch_size": 4, "shuffle": True, "num_workers": 2, **kw}))
    return build


def _big_batches(seed: int) -> types.SimpleNamespace:
    gen = torch.Generator().manual_seed(seed)
    return _program(DataLoader(TorchCrops(seed, n=160), batch_size=32, shuffle=True, num_workers=2, generator=gen))


def _split_loader(seed: int) -> types.SimpleNamespace:
    train, _ = torch.utils.data.random_split(HeldRng(seed), [40, 8], generator=torch.Generator().manual_seed(seed))
    return _program(DataLoader(train, batch_size=4, shuffle=True, num_workers=2))


def _bug(name: str, build: callable, where: str) -> Case:
    return Case(name, "rng_audit", build, _audit, bug=True, where=(where,), kind="duplicated_across_workers")


CASES = [
    Case("torch_random_crops", "rng_audit", _loader(TorchCrops), _audit),
    Case("numpy_jitter_no_init_fn", "rng_audit", _loader(NumpyJitter), _audit),
    Case("numpy_jitter_worker_init_fn", "rng_audit", _loader(NumpyJitter, worker_init_fn=seed_numpy_per_worker),
         _audit),
    Case("lazy_default_rng_per_worker", "rng_audit", _loader(LazyRng), _audit),
    Case("masked_text_dicts", "rng_audit", _loader(MaskedText), _audit),
    Case("sparse_bags_custom_collate", "rng_audit", _loader(SparseBags, collate_fn=sparse_collate), _audit),
    Case("generator_batch_32", "rng_audit", _big_batches, _audit),
    _bug("default_rng_in_init", _loader(HeldRng), "dataset.rng"),
    _bug("randomstate_in_init", _loader(HeldRandomState), "dataset.rs"),
    _bug("worker_init_constant_numpy_seed", _loader(NumpyJitter, worker_init_fn=seed_numpy_with_config_seed),
         "numpy legacy global"),
    _bug("worker_init_seed_everything_text", _loader(MaskedText, worker_init_fn=seed_everything), "random"),
    _bug("worker_init_seed_everything_crops", _loader(TorchCrops, worker_init_fn=seed_everything), "torch global"),
    _bug("default_rng_in_init_random_split", _split_loader, "dataset.dataset.rng"),
    _bug("default_rng_in_init_batch_32", lambda seed: _program(DataLoader(HeldRng(seed, n=160), batch_size=32,
                                                                          shuffle=True, num_workers=2)), "dataset.rng"),
]
