"""PixelCL / PixPro (pixel-level contrastive learning, "Propagate Yourself"): two random crops of each image
(cut out and resized back, each maybe flipped, then colour jitter, grayscale, blur, solarize, normalize), an online
encoder (the network's ``layer4`` feature map through a conv projector for pixels, its pooled output through an MLP
projector for the instance) and an EMA target encoder built by deep copy; the pixel propagation module (PPM:
similarity-weighted sum of transformed pixel features) is pulled toward the target's pixels at positions that are
close in the original image (distance below ``distance_thres`` after both crops' coordinates are mapped back), plus
BYOL's instance loss through a predictor; the README loop: Adam lr 1e-4 over ``learner.parameters()``,
``update_moving_average()`` after every step.

Source: https://github.com/lucidrains/pixel-level-contrastive-learning
Commit: 0c60e93df73b0ec351f2104839c4d4748f3d38a2
Files: README.md (the usage loop), pixel_level_contrastive_learning/pixel_level_contrastive_learning.py
       (``PixelCL`` here; the rest in the helper ``_pixelcl_lib.py``)
License: MIT (Copyright (c) 2020 Phil Wang; full text in LICENSES/lucidrains-pixel-level-contrastive-learning.txt)
Domain: self-supervised, pixel-level contrastive with an EMA teacher (PixPro + BYOL instance loss)

Deviations from the original:
- the network: torchvision's ``resnet50(pretrained=True)`` -> the plain-torch ResNet-18 of ``_tv_resnet.py`` at
  width 8, random weights (no torchvision, no downloads); ``hidden_layer_pixel='layer4'`` and
  ``hidden_layer_instance=-2`` as in the README;
- sizes: image_size 256 -> 96 (``layer4`` gives 3x3 pixels instead of 8x8), projection_size 256 -> 32,
  projection_hidden_size 2048 -> 64, batch 10 -> 8; lr 1e-4 -> 1e-3 (30 steps instead of 100000); the other
  README arguments as given (moving_average_decay 0.99, ppm_num_layers 1, ppm_gamma 2, distance_thres 0.7,
  similarity_temperature 0.3, alpha 1, use_pixpro True, cutout_ratio_range (0.6, 0.8));
- data: ``sample_batch_images()`` (``torch.randn`` in the README) draws 8 of 256 synthetic images made from ``seed``
  (smooth random colour fields in [0, 1]: sums of three low-frequency 2-D cosines), so that nearby pixels agree;
- kornia's augmentations and einops' ``rearrange`` are written out (the augmentations in the helper, see its
  docstring; ``rearrange(t, 'b c h w -> (b h w) c')`` and ``'b c h w -> b c (h w)'`` as permute / reshape); no CUDA;
- ``random`` (crops, flips) is seeded from ``seed``; the ``print`` and the final ``torch.save`` are dropped;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C417

from __future__ import annotations

import copy
import functools
import math
import pathlib
import random
import sys

import torch
import torch.nn.functional as F
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
_PUBLIC = str(pathlib.Path(__file__).resolve().parent)
if _PUBLIC not in sys.path:
    sys.path.insert(0, _PUBLIC)
from _api import Bug, Program
from _pixelcl_lib import (
    EMA,
    MLP,
    PPM,
    ColorJitter,
    GaussianBlur2d,
    NetWrapper,
    Normalize,
    RandomApply,
    RandomGrayscale,
    RandomSolarize,
    cutout_and_resize,
    cutout_coordinates,
    default,
    get_module_device,
    identity,
    loss_fn,
    rand_true,
    set_requires_grad,
    singleton,
    update_moving_average,
)
from _tv_resnet import resnet18

IMAGE_SIZE, BATCH, N_IMAGES, LR, WIDTH = 96, 8, 256, 1e-3, 8


def rearrange(t, pattern):
    """einops' ``rearrange`` for the two patterns the module uses."""
    if pattern == 'b c h w -> (b h w) c':
        return t.permute(0, 2, 3, 1).reshape(-1, t.shape[1])
    assert pattern == 'b c h w -> b c (h w)'
    return t.flatten(2)


# ---- pixel_level_contrastive_learning/pixel_level_contrastive_learning.py ----------------------------------------

class PixelCL(nn.Module):
    def __init__(
        self,
        net,
        image_size,
        hidden_layer_pixel = -2,
        hidden_layer_instance = -2,
        projection_size = 256,
        projection_hidden_size = 2048,
        augment_fn = None,
        augment_fn2 = None,
        prob_rand_hflip = 0.25,
        moving_average_decay = 0.99,
        ppm_num_layers = 1,
        ppm_gamma = 2,
        distance_thres = 0.7,
        similarity_temperature = 0.3,
        alpha = 1.,
        use_pixpro = True,
        cutout_ratio_range = (0.6, 0.8),
        cutout_interpolate_mode = 'nearest',
        coord_cutout_interpolate_mode = 'bilinear',
        bug = None
    ):
        super().__init__()
        self.bug = bug

        DEFAULT_AUG = nn.Sequential(
            RandomApply(ColorJitter(0.8, 0.8, 0.8, 0.2), p=0.8),
            RandomGrayscale(p=0.2),
            RandomApply(GaussianBlur2d((3, 3), (1.5, 1.5)), p=0.1),
            RandomSolarize(p=0.5),
            Normalize(mean=torch.tensor([0.485, 0.456, 0.406]), std=torch.tensor([0.229, 0.224, 0.225]))
        )

        self.augment1 = default(augment_fn, DEFAULT_AUG)
        self.augment2 = default(augment_fn2, self.augment1)
        self.prob_rand_hflip = prob_rand_hflip

        self.online_encoder = NetWrapper(
            net = net,
            projection_size = projection_size,
            projection_hidden_size = projection_hidden_size,
            layer_pixel = hidden_layer_pixel,
            layer_instance = hidden_layer_instance
        )

        self.target_encoder = None
        self.target_ema_updater = EMA(moving_average_decay)

        self.distance_thres = distance_thres
        self.similarity_temperature = similarity_temperature
        self.alpha = alpha

        self.use_pixpro = use_pixpro

        if use_pixpro:
            self.propagate_pixels = PPM(
                chan = projection_size,
                num_layers = ppm_num_layers,
                gamma = ppm_gamma
            )

        self.cutout_ratio_range = cutout_ratio_range
        self.cutout_interpolate_mode = cutout_interpolate_mode
        self.coord_cutout_interpolate_mode = coord_cutout_interpolate_mode

        # instance level predictor
        self.online_predictor = MLP(projection_size, projection_size, projection_hidden_size)

        # get device of network and make wrapper same device
        device = get_module_device(net)
        self.to(device)

        # send a mock image tensor to instantiate singleton parameters
        self.forward(torch.randn(2, 3, image_size, image_size, device=device))

    @singleton('target_encoder')
    def _get_target_encoder(self):
        target_encoder = copy.deepcopy(self.online_encoder)
        set_requires_grad(target_encoder, False)
        return target_encoder

    def reset_moving_average(self):
        del self.target_encoder
        self.target_encoder = None

    def update_moving_average(self):
        assert self.target_encoder is not None, 'target encoder has not been created yet'
        update_moving_average(self.target_ema_updater, self.target_encoder, self.online_encoder)

    def forward(self, x, return_positive_pairs = False):
        shape, device, prob_flip = x.shape, x.device, self.prob_rand_hflip

        rand_flip_fn = lambda t: torch.flip(t, dims = (-1,))

        flip_image_one, flip_image_two = rand_true(prob_flip), rand_true(prob_flip)
        flip_image_one_fn = rand_flip_fn if flip_image_one else identity
        flip_image_two_fn = rand_flip_fn if flip_image_two else identity

        cutout_coordinates_one, _ = cutout_coordinates(x, self.cutout_ratio_range)
        cutout_coordinates_two, _ = cutout_coordinates(x, self.cutout_ratio_range)

        image_one_cutout = cutout_and_resize(x, cutout_coordinates_one, mode = self.cutout_interpolate_mode)
        image_two_cutout = cutout_and_resize(x, cutout_coordinates_two, mode = self.cutout_interpolate_mode)

        image_one_cutout = flip_image_one_fn(image_one_cutout)
        image_two_cutout = flip_image_two_fn(image_two_cutout)

        image_one_cutout, image_two_cutout = self.augment1(image_one_cutout), self.augment2(image_two_cutout)

        proj_pixel_one, proj_instance_one = self.online_encoder(image_one_cutout)
        proj_pixel_two, proj_instance_two = self.online_encoder(image_two_cutout)

        image_h, image_w = shape[2:]

        proj_image_shape = proj_pixel_one.shape[2:]
        proj_image_h, proj_image_w = proj_image_shape

        coordinates = torch.meshgrid(
            torch.arange(image_h, device = device),
            torch.arange(image_w, device = device)
        )

        coordinates = torch.stack(coordinates).unsqueeze(0).float()
        coordinates /= math.sqrt(image_h ** 2 + image_w ** 2)
        coordinates[:, 0] *= proj_image_h
        coordinates[:, 1] *= proj_image_w

        proj_coors_one = cutout_and_resize(coordinates, cutout_coordinates_one, output_size = proj_image_shape, mode = self.coord_cutout_interpolate_mode)
        proj_coors_two = cutout_and_resize(coordinates, cutout_coordinates_two, output_size = proj_image_shape, mode = self.coord_cutout_interpolate_mode)

        if self.bug != "coordinates_not_flipped":  # the crops' flips left off their coordinate maps
            proj_coors_one = flip_image_one_fn(proj_coors_one)
            proj_coors_two = flip_image_two_fn(proj_coors_two)

        proj_coors_one, proj_coors_two = map(lambda t: rearrange(t, 'b c h w -> (b h w) c'), (proj_coors_one, proj_coors_two))
        pdist = nn.PairwiseDistance(p = 2)

        num_pixels = proj_coors_one.shape[0]

        proj_coors_one_expanded = proj_coors_one[:, None].expand(num_pixels, num_pixels, -1).reshape(num_pixels * num_pixels, 2)
        proj_coors_two_expanded = proj_coors_two[None, :].expand(num_pixels, num_pixels, -1).reshape(num_pixels * num_pixels, 2)

        distance_matrix = pdist(proj_coors_one_expanded, proj_coors_two_expanded)
        distance_matrix = distance_matrix.reshape(num_pixels, num_pixels)

        positive_mask_one_two = distance_matrix < self.distance_thres
        positive_mask_two_one = positive_mask_one_two.t()

        with torch.no_grad():
            target_encoder = self._get_target_encoder()
            target_proj_pixel_one, target_proj_instance_one = target_encoder(image_one_cutout)
            target_proj_pixel_two, target_proj_instance_two = target_encoder(image_two_cutout)

        # flatten all the pixel projections

        flatten = lambda t: rearrange(t, 'b c h w -> b c (h w)')

        target_proj_pixel_one, target_proj_pixel_two = list(map(flatten, (target_proj_pixel_one, target_proj_pixel_two)))

        # get total number of positive pixel pairs

        positive_pixel_pairs = positive_mask_one_two.sum()

        # get instance level loss

        pred_instance_one = self.online_predictor(proj_instance_one)
        pred_instance_two = self.online_predictor(proj_instance_two)

        loss_instance_one = loss_fn(pred_instance_one, target_proj_instance_two.detach())
        loss_instance_two = loss_fn(pred_instance_two, target_proj_instance_one.detach())

        instance_loss = (loss_instance_one + loss_instance_two).mean()

        if positive_pixel_pairs == 0:
            ret = (instance_loss, 0) if return_positive_pairs else instance_loss
            return ret

        if not self.use_pixpro:
            # calculate pix contrast loss

            proj_pixel_one, proj_pixel_two = list(map(flatten, (proj_pixel_one, proj_pixel_two)))

            similarity_one_two = F.cosine_similarity(proj_pixel_one[..., :, None], target_proj_pixel_two[..., None, :], dim = 1) / self.similarity_temperature
            similarity_two_one = F.cosine_similarity(proj_pixel_two[..., :, None], target_proj_pixel_one[..., None, :], dim = 1) / self.similarity_temperature

            loss_pix_one_two = -torch.log(
                similarity_one_two.masked_select(positive_mask_one_two[None, ...]).exp().sum() / 
                similarity_one_two.exp().sum()
            )

            loss_pix_two_one = -torch.log(
                similarity_two_one.masked_select(positive_mask_two_one[None, ...]).exp().sum() / 
                similarity_two_one.exp().sum()
            )

            pix_loss = (loss_pix_one_two + loss_pix_two_one) / 2
        else:
            # calculate pix pro loss

            propagated_pixels_one = self.propagate_pixels(proj_pixel_one)
            propagated_pixels_two = self.propagate_pixels(proj_pixel_two)

            propagated_pixels_one, propagated_pixels_two = list(map(flatten, (propagated_pixels_one, propagated_pixels_two)))

            propagated_similarity_one_two = F.cosine_similarity(propagated_pixels_one[..., :, None], target_proj_pixel_two[..., None, :], dim = 1)
            propagated_similarity_two_one = F.cosine_similarity(propagated_pixels_two[..., :, None], target_proj_pixel_one[..., None, :], dim = 1)

            loss_pixpro_one_two = - propagated_similarity_one_two.masked_select(positive_mask_one_two[None, ...]).mean()
            loss_pixpro_two_one = - propagated_similarity_two_one.masked_select(positive_mask_two_one[None, ...]).mean()

            pix_loss = (loss_pixpro_one_two + loss_pixpro_two_one) / 2
            if self.bug == "pixpro_sign_flipped":  # the similarity maximized with a loss that has lost its minus
                pix_loss = -pix_loss

        # total loss

        loss = pix_loss * self.alpha + instance_loss

        ret = (loss, positive_pixel_pairs) if return_positive_pairs else loss
        return ret


# ---- the data: smooth random colour fields in [0, 1] ------------------------------------------------------------

def make_images(gen, n):
    coords = torch.linspace(0, 1, IMAGE_SIZE)
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    freq = torch.randint(0, 4, (n, 3, 2), generator=gen).float() * math.pi
    phase = torch.rand(n, 3, 1, 1, generator=gen) * 2 * math.pi
    colour = torch.rand(n, 3, 3, 1, 1, generator=gen) * 2 - 1  # wave, channel
    waves = torch.cos(freq[..., 0, None, None] * yy + freq[..., 1, None, None] * xx + phase)  # [n, 3, H, W]
    return (0.5 + 0.25 * (waves[:, :, None] * colour).sum(1)).clamp(0, 1)


# ---- README.md: the usage loop --------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    gen = torch.Generator().manual_seed(seed)
    images_all = make_images(gen, N_IMAGES)

    resnet = resnet18(pretrained=False, width=WIDTH)  # models.resnet50(pretrained=True)

    learner = PixelCL(
        resnet,
        image_size = IMAGE_SIZE,
        hidden_layer_pixel = 'layer4',  # leads to output of 8x8 feature map for pixel-level learning
        hidden_layer_instance = -2,     # leads to output for instance-level learning
        projection_size = 32,           # size of projection output, 256 was used in the paper
        projection_hidden_size = 64,    # size of projection hidden dimension, paper used 2048
        moving_average_decay = 0.99,    # exponential moving average decay of target encoder
        ppm_num_layers = 1,             # number of layers for transform function in the pixel propagation module, 1 was optimal
        ppm_gamma = 2,                  # sharpness of the similarity in the pixel propagation module, already at optimal value of 2
        distance_thres = 0.7,           # ideal value is 0.7, as indicated in the paper
        similarity_temperature = 0.3,   # temperature for the cosine similarity for the pixel contrastive loss
        alpha = 1.,                      # weight of the pixel propagation loss (pixpro) vs pixel CL loss
        use_pixpro = True,               # do pixel pro instead of pixel contrast loss, defaults to pixpro, since it is the best one
        cutout_ratio_range = (0.6, 0.8),  # a random ratio is selected from this range for the random cutout
        bug = bug
    )

    if bug == "predictor_not_optimized":
        # the optimizer built from the pixel path's modules (encoder and PPM) with the instance predictor forgotten
        opt = torch.optim.Adam(list(learner.online_encoder.parameters()) + list(learner.propagate_pixels.parameters()),
                               lr=LR)
    else:
        opt = torch.optim.Adam(learner.parameters(), lr=LR)

    def sample_batch_images():
        return images_all[torch.randint(0, N_IMAGES, (BATCH,), generator=gen)]

    def train_step():
        images = sample_batch_images()
        loss = learner(images) # if positive pixel pairs is equal to zero, the loss is equal to the instance level loss

        opt.zero_grad()
        loss.backward()
        opt.step()
        learner.update_moving_average() # update moving average of target encoder
        return loss.detach()

    batch = images_all[:BATCH]
    return Program(name="pixelcl_pixpro", model=learner, batch=(batch, batch), loss_fn=lambda loss, _images: loss,
                   optimizer=opt, train_step=train_step, frozen=("target_encoder.*",))


build = functools.partial(_build, bug=None)

BUGS = [
    # the flips applied to the crops but not to their coordinate maps: the "positive" pixel pairs are matched at
    # mirrored positions whenever a crop is flipped.
    Bug("coordinates_not_flipped", functools.partial(_build, bug="coordinates_not_flipped"), "learning_ledger",
        ("TASK",)),
    # the PixPro loss with its minus lost: the propagated pixels are pushed away from the target's nearby pixels.
    Bug("pixpro_sign_flipped", functools.partial(_build, bug="pixpro_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # Adam over the online encoder and the PPM only: the instance-level online_predictor is never updated.
    Bug("predictor_not_optimized", functools.partial(_build, bug="predictor_not_optimized"), "four_structures",
        ("online_predictor",)),
]
