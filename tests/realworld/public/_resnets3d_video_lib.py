"""kenshohara/3D-ResNets-PyTorch's clip transforms and video dataset, for ``resnets3d_video`` (moved out of the port
to keep it readable): ``spatial_transforms.py``'s ``RandomResizedCrop``, ``RandomHorizontalFlip``, ``Normalize`` and
``Compose`` with their once-per-clip ``randomize_parameters`` (torchvision written out on tensors),
``temporal_transforms.py``'s ``LoopPadding`` and ``TemporalRandomCrop``, ``datasets/videodataset.py``'s loading
(frames transformed one by one, stacked and permuted to [C, T, H, W]), and the synthetic clips that replace Kinetics.

Source: https://github.com/kenshohara/3D-ResNets-PyTorch
Commit: 540a0ea1abaee379fa3651d4d5afbd2d667a1f49
Files: spatial_transforms.py, temporal_transforms.py, datasets/videodataset.py
License: MIT (Copyright (c) 2017 Kensho Hara)
Domain: video classification (3D CNN)

Deviations from the original: see ``resnets3d_video.py`` (torchvision's crop sampling and flip on tensors; frames
are [0, 1] tensors, so the PIL loader and ``ToTensor`` are left out; the dataset indexes in-memory clips).
"""

from __future__ import annotations

import math
import random

import torch
import torch.nn.functional as F

N_CLASSES, SAMPLE_SIZE, SAMPLE_DURATION = 4, 32, 8
KINETICS_MEAN, KINETICS_STD = [0.4345, 0.4051, 0.3775], [0.2768, 0.2713, 0.2737]
N_FRAMES, FRAME_SIZE = 12, 40


# ---- spatial_transforms.py / temporal_transforms.py (torchvision written out on tensors) -----------------------

class RandomResizedCrop:
    def __init__(self, size, scale=(0.08, 1.0), ratio=(3. / 4., 4. / 3.)):
        self.size, self.scale, self.ratio = size, scale, ratio
        self.randomize_parameters()

    def get_params(self, img):
        _, height, width = img.shape
        area = height * width
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target_area = area * random.uniform(self.scale[0], self.scale[1])
            aspect_ratio = math.exp(random.uniform(*log_ratio))
            w = round(math.sqrt(target_area * aspect_ratio))
            h = round(math.sqrt(target_area / aspect_ratio))
            if 0 < w <= width and 0 < h <= height:
                return random.randint(0, height - h), random.randint(0, width - w), h, w
        return 0, 0, height, width

    def __call__(self, img):
        if self.randomize:
            self.random_crop = self.get_params(img)
            self.randomize = False

        i, j, h, w = self.random_crop
        crop = img[None, :, i:i + h, j:j + w]
        return F.interpolate(crop, size=(self.size, self.size), mode='bilinear', align_corners=False)[0]

    def randomize_parameters(self):
        self.randomize = True


class RandomHorizontalFlip:
    def __init__(self, p=0.5):
        self.p = p
        self.randomize_parameters()

    def __call__(self, img):
        if self.random_p < self.p:
            return img.flip(-1)
        return img

    def randomize_parameters(self):
        self.random_p = random.random()


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = torch.tensor(mean)[:, None, None], torch.tensor(std)[:, None, None]

    def __call__(self, tensor):
        return (tensor - self.mean) / self.std

    def randomize_parameters(self):
        pass


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img

    def randomize_parameters(self):
        for t in self.transforms:
            t.randomize_parameters()


class LoopPadding:
    def __init__(self, size):
        self.size = size

    def __call__(self, frame_indices):
        out = frame_indices
        for index in out:
            if len(out) >= self.size:
                break
            out.append(index)
        return out


class TemporalRandomCrop:
    def __init__(self, size):
        self.size = size
        self.loop = LoopPadding(size)

    def __call__(self, frame_indices):
        rand_end = max(0, len(frame_indices) - self.size - 1)
        begin_index = random.randint(0, rand_end)
        end_index = min(begin_index + self.size, len(frame_indices))
        out = frame_indices[begin_index:end_index]
        if len(out) < self.size:
            out = self.loop(out)
        return out


# ---- synthetic clips (Kinetics replaced) and datasets/videodataset.py's loading ------------------------------

def make_clips(gen, n):
    """[n, T, 3, H, W] clips in [0, 1]: horizontal stripes that move up (0), move down (1), stand still (2) or
    flicker (3)."""
    labels = torch.randint(N_CLASSES, (n,), generator=gen)
    period = 6.0 + 6.0 * torch.rand(n, generator=gen)
    phase = 2 * math.pi * torch.rand(n, generator=gen)
    colour = 0.2 + 0.6 * torch.rand(n, 3, generator=gen)
    t = torch.arange(N_FRAMES, dtype=torch.float32)[None, :]
    speed = torch.tensor([1.5, -1.5, 0.0, 0.0])[labels][:, None]
    shift = speed * t  # rows moved per frame
    y = torch.arange(FRAME_SIZE, dtype=torch.float32)
    wave = torch.sin(2 * math.pi * (y[None, None, :] + shift[:, :, None]) / period[:, None, None]
                     + phase[:, None, None])  # [n, T, H]
    flick = torch.where(labels[:, None] == 3, (-1.0) ** t, torch.ones_like(t))  # [n, T]
    wave = wave * flick[:, :, None]
    clips = 0.5 + 0.35 * wave[:, :, None, :, None] * colour[:, None, :, None, None] / colour.max()
    clips = clips.expand(n, N_FRAMES, 3, FRAME_SIZE, FRAME_SIZE)
    clips = clips + 0.05 * torch.randn(n, N_FRAMES, 3, FRAME_SIZE, FRAME_SIZE, generator=gen)
    return clips.clamp(0, 1), labels


class VideoDataset(torch.utils.data.Dataset):
    def __init__(self, clips, labels, spatial_transform=None, temporal_transform=None, bug=None):
        self.clips, self.labels, self.bug = clips, labels, bug
        self.spatial_transform = spatial_transform
        self.temporal_transform = temporal_transform

    def __loading(self, video, frame_indices):
        clip = [video[i] for i in frame_indices]
        if self.spatial_transform is not None:
            self.spatial_transform.randomize_parameters()
            clip = [self.spatial_transform(img) for img in clip]
        clip = torch.stack(clip, 0).permute(1, 0, 2, 3)

        return clip

    def __getitem__(self, index):
        target = int(self.labels[index])
        frame_indices = list(range(N_FRAMES))
        if self.temporal_transform is not None:
            frame_indices = self.temporal_transform(frame_indices)

        clip = self.__loading(self.clips[index], frame_indices)
        return clip, target

    def __len__(self):
        return len(self.labels)


def val_clips(clips):
    """Resize + CenterCrop to sample_size and the centre sample_duration frames, normalized."""
    begin = (N_FRAMES - SAMPLE_DURATION) // 2
    x = clips[:, begin:begin + SAMPLE_DURATION]
    n, t = x.shape[:2]
    x = F.interpolate(x.reshape(n * t, 3, FRAME_SIZE, FRAME_SIZE), size=(SAMPLE_SIZE, SAMPLE_SIZE),
                      mode='bilinear', align_corners=False)
    x = Normalize(KINETICS_MEAN, KINETICS_STD)(x.reshape(n, t, 3, SAMPLE_SIZE, SAMPLE_SIZE))
    return x.permute(0, 2, 1, 3, 4).contiguous()
