"""``task.target_misaligned``: dense targets that sit at other positions than the input pixels they describe (a label
map transposed, an augmentation applied to the image alone), confirmed on the program's own batch by realigning its
targets; targets in place, or targets the input does not explain locally, give no finding."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv

pytestmark = __import__("pytest").mark.usefixtures("one_thread")


def _scenes(n: int, size: int = 20, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy images with bright rectangles at random places; the label map is 1 inside a rectangle."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, size, size, generator=gen) * 0.3
    y = torch.zeros(n, size, size, dtype=torch.long)
    for k in range(n):
        for _ in range(2):
            h, w = torch.randint(3, 8, (2,), generator=gen).tolist()
            r, c = torch.randint(0, size - 8, (2,), generator=gen).tolist()
            x[k, 0, r:r + h, c:c + w] += 1.0
            y[k, r:r + h, c:c + w] = 1
    return x, y


def _segmenter() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 2, 3, padding=1))


def _task(x: torch.Tensor, y: torch.Tensor) -> firstdiv.Finding:
    model = _segmenter()
    r = firstdiv.learning_ledger(model, (x, y), F.cross_entropy, torch.optim.Adam(model.parameters(), 1e-3),
                                 overfit_steps=0)
    return next(f for f in r.findings if f.where == "TASK")


def test_label_maps_in_place_give_no_finding() -> None:
    task = _task(*_scenes(8))
    assert task.check != "task.target_misaligned", task.message


def test_label_maps_read_transposed_fail_with_the_alignment_that_explains_them() -> None:
    x, y = _scenes(8)
    task = _task(x, y.transpose(1, 2))
    assert (task.status.value, task.check) == ("FAIL", "task.target_misaligned"), task.message
    assert "transposed" in task.message


def test_a_flip_applied_to_half_the_images_alone_fails() -> None:
    x, y = _scenes(8)
    x[::2] = x[::2].flip(-1)  # the augmentation flipped these images and left their masks
    task = _task(x, y)
    assert (task.status.value, task.check) == ("FAIL", "task.target_misaligned"), task.message
    assert "flipped left-right" in task.message


def test_two_of_four_images_flipped_alone_fail_once_the_references_are_realigned() -> None:
    """Half of a small batch misaligned also blurs the references each example is predicted from: a second pass with
    the winners' references realigned finds both (the first pass alone found fewer than two)."""
    x, y = _scenes(4, seed=8)
    x[[0, 2]] = x[[0, 2]].flip(-1)
    task = _task(x, y)
    assert (task.status.value, task.check) == ("FAIL", "task.target_misaligned"), task.message
    assert "flipped left-right" in task.message


def test_small_batches_in_place_give_no_finding() -> None:
    for seed in range(12):
        task = _task(*_scenes(4, seed=seed))
        assert task.check != "task.target_misaligned", (seed, task.message)


def test_targets_the_input_does_not_explain_give_no_finding() -> None:
    x, _ = _scenes(8)
    noise = torch.randint(0, 2, (8, 20, 20), generator=torch.Generator().manual_seed(1))
    assert _task(x, noise).check != "task.target_misaligned"


def _stepping(flip_masks: bool) -> firstdiv.Finding:
    """A loop whose own loader flips half its images; the declared batch is a clean one."""
    x, y = _scenes(8)
    model = _segmenter()
    opt = torch.optim.Adam(model.parameters(), 1e-3)

    def train_step() -> float:
        xs, ys = x.clone(), y.clone()
        xs[::2] = xs[::2].flip(-1)
        if flip_masks:
            ys[::2] = ys[::2].flip(-1)
        opt.zero_grad()
        loss = F.cross_entropy(model(xs), ys)
        loss.backward()
        opt.step()
        return float(loss.detach())

    r = firstdiv.learning_ledger(model, (x, y), F.cross_entropy, opt, train_step=train_step, overfit_steps=0)
    return next(f for f in r.findings if f.where == "TASK")


def test_an_augmentation_inside_train_step_that_skips_the_masks_fails_and_one_that_flips_both_does_not() -> None:
    task = _stepping(flip_masks=False)
    assert (task.status.value, task.check) == ("FAIL", "task.target_misaligned"), task.message
    assert "train_step feeds" in task.message
    assert _stepping(flip_masks=True).check != "task.target_misaligned"
