"""NeRF from yenchenlin/nerf-pytorch, trained as ``run_nerf.py``'s ``train`` runs the Blender configuration
(``configs/lego.txt``: ``no_batching`` (random rays from one training image per step), ``use_viewdirs``,
``white_bkgd``, ``lrate_decay`` 500, ``precrop_iters`` / ``precrop_frac`` 0.5): positional encoding (``Embedder``,
``multires`` 10 for points and 4 for view directions), the ``NeRF`` MLP (8 layers, a skip at layer 4, density and a
view-dependent colour branch), rays from ``get_rays``, stratified samples between near 2 and far 6 (``perturb`` 1),
volume rendering by ``raw2outputs`` (``alpha = 1 - exp(-relu(sigma) * dist)``, weights from the exclusive cumulative
transmittance, white background), ``img2mse`` against the pixels' colours, Adam (lr 5e-4) and the exponential
learning-rate decay written into the loop.

Source: https://github.com/yenchenlin/nerf-pytorch
Commit: 63a5a630c9abd62b0f21c08703d0ac2ea7d4b9dd
Files: run_nerf.py, run_nerf_helpers.py, load_blender.py, configs/lego.txt
License: MIT (Copyright (c) 2020 bmild; LICENSES/yenchenlin-nerf-pytorch.txt)
Domain: neural rendering (NeRF: positional encoding, MLP, volume rendering, MSE on rays)

Deviations from the original:
- data: the lego scene (``load_blender_data``) is replaced by a synthetic Blender-like scene made from ``seed``: a
  sphere of radius 0.8 at a seeded point near the origin whose colour is a fixed random affine function of the
  surface point, rendered
  analytically (ray-sphere intersection on the rays of ``get_rays_np``) as RGBA into 8 training views of 32x32
  pixels from ``load_blender.py``'s ``pose_spherical`` (radius 4, elevation -30 degrees, azimuths spread from a
  seeded start), ``camera_angle_x`` 0.69; the RGBA images are composited on white as ``train`` does for
  ``white_bkgd``;
- sizes: ``netwidth`` 256 -> 64 (``netdepth`` 8 and the skip unchanged), ``N_rand`` 1024 -> 256, ``N_samples`` 64
  -> 32, ``precrop_iters`` 500 -> 10; ``N_importance`` 128 -> 0: the fine network of the hierarchical sampling is
  left out (the script's default, ``N_importance`` 0), so ``grad_vars`` are the coarse network's parameters;
- ``raw_noise_std`` 0 -> 1e0 (the value of the repository's LLFF configs): at width 64 the initial densities are
  nearly constant and, for some seeds, all negative, so ``relu`` leaves the network dead from the first step; the
  noise on the density keeps it trainable;
- the loop's ``np.random.choice`` draws come from a ``np.random.RandomState(seed)`` instead of the global numpy
  state (the script seeds it with 0 at import); no CUDA default tensor type; checkpoints, logging, video and
  test-set rendering are left out;
- ``torch.meshgrid`` is called with ``indexing='ij'``, its default in the original, to silence its warning;
- one ``train_step`` is one iteration of ``train``'s loop; the declared ``model`` is the coarse ``NeRF`` MLP, its
  ``batch`` the embedded sample points of one ray batch (as ``run_network`` feeds it) with the samples' depths, the
  rays' directions and the target colours, and ``loss_fn`` renders its raw output with ``raw2outputs`` and applies
  ``img2mse``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: B006, D419, PLC0206, PLR0402, RUF059, UP008  (the original's code style is kept as written)

from __future__ import annotations

import argparse
import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

device = torch.device("cpu")
DEBUG = False
SELF_CHECK_STEPS = 60


# ---- run_nerf_helpers.py ---------------------------------------------------------------------------------------

# Misc
img2mse = lambda x, y : torch.mean((x - y) ** 2)
mse2psnr = lambda x : -10. * torch.log(x) / torch.log(torch.Tensor([10.]))


# Positional encoding (section 5.1)
class Embedder:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.create_embedding_fn()

    def create_embedding_fn(self):
        embed_fns = []
        d = self.kwargs['input_dims']
        out_dim = 0
        if self.kwargs['include_input']:
            embed_fns.append(lambda x : x)
            out_dim += d

        max_freq = self.kwargs['max_freq_log2']
        N_freqs = self.kwargs['num_freqs']

        if self.kwargs['log_sampling']:
            freq_bands = 2.**torch.linspace(0., max_freq, steps=N_freqs)
        else:
            freq_bands = torch.linspace(2.**0., 2.**max_freq, steps=N_freqs)

        for freq in freq_bands:
            for p_fn in self.kwargs['periodic_fns']:
                embed_fns.append(lambda x, p_fn=p_fn, freq=freq : p_fn(x * freq))
                out_dim += d

        self.embed_fns = embed_fns
        self.out_dim = out_dim

    def embed(self, inputs):
        return torch.cat([fn(inputs) for fn in self.embed_fns], -1)


def get_embedder(multires, i=0):
    if i == -1:
        return nn.Identity(), 3

    embed_kwargs = {
                'include_input' : True,
                'input_dims' : 3,
                'max_freq_log2' : multires-1,
                'num_freqs' : multires,
                'log_sampling' : True,
                'periodic_fns' : [torch.sin, torch.cos],
    }

    embedder_obj = Embedder(**embed_kwargs)
    embed = lambda x, eo=embedder_obj : eo.embed(x)
    return embed, embedder_obj.out_dim


# Model
class NeRF(nn.Module):
    def __init__(self, D=8, W=256, input_ch=3, input_ch_views=3, output_ch=4, skips=[4], use_viewdirs=False):
        """
        """
        super(NeRF, self).__init__()
        self.D = D
        self.W = W
        self.input_ch = input_ch
        self.input_ch_views = input_ch_views
        self.skips = skips
        self.use_viewdirs = use_viewdirs

        self.pts_linears = nn.ModuleList(
            [nn.Linear(input_ch, W)] + [nn.Linear(W, W) if i not in self.skips else nn.Linear(W + input_ch, W) for i in range(D-1)])

        ### Implementation according to the official code release (https://github.com/bmild/nerf/blob/master/run_nerf_helpers.py#L104-L105)
        self.views_linears = nn.ModuleList([nn.Linear(input_ch_views + W, W//2)])

        if use_viewdirs:
            self.feature_linear = nn.Linear(W, W)
            self.alpha_linear = nn.Linear(W, 1)
            self.rgb_linear = nn.Linear(W//2, 3)
        else:
            self.output_linear = nn.Linear(W, output_ch)

    def forward(self, x):
        input_pts, input_views = torch.split(x, [self.input_ch, self.input_ch_views], dim=-1)
        h = input_pts
        for i, l in enumerate(self.pts_linears):
            h = self.pts_linears[i](h)
            h = F.relu(h)
            if i in self.skips:
                h = torch.cat([input_pts, h], -1)

        if self.use_viewdirs:
            alpha = self.alpha_linear(h)
            feature = self.feature_linear(h)
            h = torch.cat([feature, input_views], -1)

            for i, l in enumerate(self.views_linears):
                h = self.views_linears[i](h)
                h = F.relu(h)

            rgb = self.rgb_linear(h)
            outputs = torch.cat([rgb, alpha], -1)
        else:
            outputs = self.output_linear(h)

        return outputs


# Ray helpers
def get_rays(H, W, K, c2w, bug=None):
    i, j = torch.meshgrid(torch.linspace(0, W-1, W), torch.linspace(0, H-1, H), indexing='ij')  # pytorch's meshgrid has indexing='ij'
    if bug != "meshgrid_not_transposed":
        i = i.t()
        j = j.t()
    dirs = torch.stack([(i-K[0][2])/K[0][0], -(j-K[1][2])/K[1][1], -torch.ones_like(i)], -1)
    # Rotate ray directions from camera frame to the world frame
    rays_d = torch.sum(dirs[..., np.newaxis, :] * c2w[:3,:3], -1)  # dot product, equals to: [c2w.dot(dir) for dir in dirs]
    # Translate camera frame's origin to the world frame. It is the origin of all rays.
    rays_o = c2w[:3,-1].expand(rays_d.shape)
    return rays_o, rays_d


def get_rays_np(H, W, K, c2w):
    i, j = np.meshgrid(np.arange(W, dtype=np.float32), np.arange(H, dtype=np.float32), indexing='xy')
    dirs = np.stack([(i-K[0][2])/K[0][0], -(j-K[1][2])/K[1][1], -np.ones_like(i)], -1)
    # Rotate ray directions from camera frame to the world frame
    rays_d = np.sum(dirs[..., np.newaxis, :] * c2w[:3,:3], -1)  # dot product, equals to: [c2w.dot(dir) for dir in dirs]
    # Translate camera frame's origin to the world frame. It is the origin of all rays.
    rays_o = np.broadcast_to(c2w[:3,-1], np.shape(rays_d))
    return rays_o, rays_d


# Hierarchical sampling (section 5.2)
def sample_pdf(bins, weights, N_samples, det=False, pytest=False):
    # Get pdf
    weights = weights + 1e-5 # prevent nans
    pdf = weights / torch.sum(weights, -1, keepdim=True)
    cdf = torch.cumsum(pdf, -1)
    cdf = torch.cat([torch.zeros_like(cdf[...,:1]), cdf], -1)  # (batch, len(bins))

    # Take uniform samples
    if det:
        u = torch.linspace(0., 1., steps=N_samples)
        u = u.expand(list(cdf.shape[:-1]) + [N_samples])
    else:
        u = torch.rand(list(cdf.shape[:-1]) + [N_samples])

    # Invert CDF
    u = u.contiguous()
    inds = torch.searchsorted(cdf, u, right=True)
    below = torch.max(torch.zeros_like(inds-1), inds-1)
    above = torch.min((cdf.shape[-1]-1) * torch.ones_like(inds), inds)
    inds_g = torch.stack([below, above], -1)  # (batch, N_samples, 2)

    matched_shape = [inds_g.shape[0], inds_g.shape[1], cdf.shape[-1]]
    cdf_g = torch.gather(cdf.unsqueeze(1).expand(matched_shape), 2, inds_g)
    bins_g = torch.gather(bins.unsqueeze(1).expand(matched_shape), 2, inds_g)

    denom = (cdf_g[...,1]-cdf_g[...,0])
    denom = torch.where(denom<1e-5, torch.ones_like(denom), denom)
    t = (u-cdf_g[...,0])/denom
    samples = bins_g[...,0] + t * (bins_g[...,1]-bins_g[...,0])

    return samples


# ---- load_blender.py -------------------------------------------------------------------------------------------

trans_t = lambda t : torch.Tensor([
    [1,0,0,0],
    [0,1,0,0],
    [0,0,1,t],
    [0,0,0,1]]).float()

rot_phi = lambda phi : torch.Tensor([
    [1,0,0,0],
    [0,np.cos(phi),-np.sin(phi),0],
    [0,np.sin(phi), np.cos(phi),0],
    [0,0,0,1]]).float()

rot_theta = lambda th : torch.Tensor([
    [np.cos(th),0,-np.sin(th),0],
    [0,1,0,0],
    [np.sin(th),0, np.cos(th),0],
    [0,0,0,1]]).float()


def pose_spherical(theta, phi, radius):
    c2w = trans_t(radius)
    c2w = rot_phi(phi/180.*np.pi) @ c2w
    c2w = rot_theta(theta/180.*np.pi) @ c2w
    c2w = torch.Tensor(np.array([[-1,0,0,0],[0,0,1,0],[0,1,0,0],[0,0,0,1]])) @ c2w
    return c2w


def load_synthetic_blender(seed, H=32, W=32, n_views=8):
    """The synthetic scene in load_blender_data's output format: RGBA images, poses, [H, W, focal]."""
    rng = np.random.RandomState(seed)
    colour_map = rng.uniform(-0.5, 0.5, size=(3, 3)).astype(np.float32)
    colour_bias = rng.uniform(0.3, 0.7, size=3).astype(np.float32)
    centre = rng.uniform(-0.4, 0.4, size=3).astype(np.float32)
    radius = 0.8
    camera_angle_x = 0.69
    focal = .5 * W / np.tan(.5 * camera_angle_x)
    K = np.array([[focal, 0, 0.5*W], [0, focal, 0.5*H], [0, 0, 1]])
    start = rng.uniform(-180., 180.)
    poses = np.stack([pose_spherical(start + k * 360. / n_views, -30., 4.0).numpy() for k in range(n_views)], 0)
    imgs = []
    for p in poses:
        rays_o, rays_d = get_rays_np(H, W, K, p)
        d = rays_d / np.linalg.norm(rays_d, axis=-1, keepdims=True)
        o = rays_o - centre
        b = np.sum(o * d, -1)
        c = np.sum(o * o, -1) - radius ** 2
        disc = b * b - c
        hit = disc > 0
        t = -b - np.sqrt(np.maximum(disc, 0.))
        pts = rays_o + t[..., None] * d
        rgb = np.clip(pts @ colour_map.T + colour_bias, 0., 1.)
        a = hit.astype(np.float32)[..., None]
        imgs.append(np.concatenate([rgb * a, a], -1))
    return np.stack(imgs, 0).astype(np.float32), poses.astype(np.float32), [H, W, focal]


# ---- run_nerf.py -----------------------------------------------------------------------------------------------

def batchify(fn, chunk):
    """Constructs a version of 'fn' that applies to smaller batches.
    """
    if chunk is None:
        return fn
    def ret(inputs):
        return torch.cat([fn(inputs[i:i+chunk]) for i in range(0, inputs.shape[0], chunk)], 0)
    return ret


def embed_inputs(inputs, viewdirs, embed_fn, embeddirs_fn):
    """run_network's lines before the network: the flattened, embedded points and view directions."""
    inputs_flat = torch.reshape(inputs, [-1, inputs.shape[-1]])
    embedded = embed_fn(inputs_flat)

    if viewdirs is not None:
        input_dirs = viewdirs[:,None].expand(inputs.shape)
        input_dirs_flat = torch.reshape(input_dirs, [-1, input_dirs.shape[-1]])
        embedded_dirs = embeddirs_fn(input_dirs_flat)
        embedded = torch.cat([embedded, embedded_dirs], -1)
    return embedded


def run_network(inputs, viewdirs, fn, embed_fn, embeddirs_fn, netchunk=1024*64):
    """Prepares inputs and applies network 'fn'.
    """
    embedded = embed_inputs(inputs, viewdirs, embed_fn, embeddirs_fn)

    outputs_flat = batchify(fn, netchunk)(embedded)
    outputs = torch.reshape(outputs_flat, list(inputs.shape[:-1]) + [outputs_flat.shape[-1]])
    return outputs


def batchify_rays(rays_flat, chunk=1024*32, **kwargs):
    """Render rays in smaller minibatches to avoid OOM.
    """
    all_ret = {}
    for i in range(0, rays_flat.shape[0], chunk):
        ret = render_rays(rays_flat[i:i+chunk], **kwargs)
        for k in ret:
            if k not in all_ret:
                all_ret[k] = []
            all_ret[k].append(ret[k])

    all_ret = {k : torch.cat(all_ret[k], 0) for k in all_ret}
    return all_ret


def make_ray_batch(H, W, K, rays, near=0., far=1., use_viewdirs=False):
    """render()'s lines that build the ray batch from (rays_o, rays_d) (ndc False, no c2w)."""
    rays_o, rays_d = rays

    if use_viewdirs:
        # provide ray directions as input
        viewdirs = rays_d
        viewdirs = viewdirs / torch.norm(viewdirs, dim=-1, keepdim=True)
        viewdirs = torch.reshape(viewdirs, [-1,3]).float()

    # Create ray batch
    rays_o = torch.reshape(rays_o, [-1,3]).float()
    rays_d = torch.reshape(rays_d, [-1,3]).float()

    near, far = near * torch.ones_like(rays_d[...,:1]), far * torch.ones_like(rays_d[...,:1])
    rays = torch.cat([rays_o, rays_d, near, far], -1)
    if use_viewdirs:
        rays = torch.cat([rays, viewdirs], -1)
    return rays


def render(H, W, K, chunk=1024*32, rays=None, c2w=None, ndc=True,
                  near=0., far=1.,
                  use_viewdirs=False, c2w_staticcam=None,
                  **kwargs):
    """Render rays (the ray-batch path: ``rays`` given, ``ndc`` False for Blender data)."""
    rays_o, rays_d = rays
    sh = rays_d.shape # [..., 3]

    rays = make_ray_batch(H, W, K, (rays_o, rays_d), near, far, use_viewdirs)

    # Render and reshape
    all_ret = batchify_rays(rays, chunk, **kwargs)
    for k in all_ret:
        k_sh = list(sh[:-1]) + list(all_ret[k].shape[1:])
        all_ret[k] = torch.reshape(all_ret[k], k_sh)

    k_extract = ['rgb_map', 'disp_map', 'acc_map']
    ret_list = [all_ret[k] for k in k_extract]
    ret_dict = {k : all_ret[k] for k in all_ret if k not in k_extract}
    return ret_list + [ret_dict]


def create_nerf(args):
    """Instantiate NeRF's MLP model.
    """
    embed_fn, input_ch = get_embedder(args.multires, args.i_embed)

    input_ch_views = 0
    embeddirs_fn = None
    if args.use_viewdirs:
        embeddirs_fn, input_ch_views = get_embedder(args.multires_views, args.i_embed)
    output_ch = 5 if args.N_importance > 0 else 4
    skips = [4]
    model = NeRF(D=args.netdepth, W=args.netwidth,
                 input_ch=input_ch, output_ch=output_ch, skips=skips,
                 input_ch_views=input_ch_views, use_viewdirs=args.use_viewdirs).to(device)
    grad_vars = list(model.parameters())

    model_fine = None
    if args.N_importance > 0:
        model_fine = NeRF(D=args.netdepth_fine, W=args.netwidth_fine,
                          input_ch=input_ch, output_ch=output_ch, skips=skips,
                          input_ch_views=input_ch_views, use_viewdirs=args.use_viewdirs).to(device)
        grad_vars += list(model_fine.parameters())

    network_query_fn = lambda inputs, viewdirs, network_fn : run_network(inputs, viewdirs, network_fn,
                                                                embed_fn=embed_fn,
                                                                embeddirs_fn=embeddirs_fn,
                                                                netchunk=args.netchunk)

    # Create optimizer
    optimizer = torch.optim.Adam(params=grad_vars, lr=args.lrate, betas=(0.9, 0.999))

    start = 0

    render_kwargs_train = {
        'network_query_fn' : network_query_fn,
        'perturb' : args.perturb,
        'N_importance' : args.N_importance,
        'network_fine' : model_fine,
        'N_samples' : args.N_samples,
        'network_fn' : model,
        'use_viewdirs' : args.use_viewdirs,
        'white_bkgd' : args.white_bkgd,
        'raw_noise_std' : args.raw_noise_std,
    }

    # NDC only good for LLFF-style forward facing data
    if args.dataset_type != 'llff' or args.no_ndc:
        render_kwargs_train['ndc'] = False
        render_kwargs_train['lindisp'] = args.lindisp

    render_kwargs_test = {k : render_kwargs_train[k] for k in render_kwargs_train}
    render_kwargs_test['perturb'] = False
    render_kwargs_test['raw_noise_std'] = 0.

    return render_kwargs_train, render_kwargs_test, start, grad_vars, optimizer, (embed_fn, embeddirs_fn)


def raw2outputs(raw, z_vals, rays_d, raw_noise_std=0, white_bkgd=False, pytest=False, bug=None):
    """Transforms model's predictions to semantically meaningful values.
    """
    raw2alpha = lambda raw, dists, act_fn=F.relu: 1.-torch.exp(-act_fn(raw)*dists)

    dists = z_vals[...,1:] - z_vals[...,:-1]
    dists = torch.cat([dists, torch.Tensor([1e10]).expand(dists[...,:1].shape)], -1)  # [N_rays, N_samples]

    dists = dists * torch.norm(rays_d[...,None,:], dim=-1)

    rgb = torch.sigmoid(raw[...,:3])  # [N_rays, N_samples, 3]
    noise = 0.
    if raw_noise_std > 0.:
        noise = torch.randn(raw[...,3].shape) * raw_noise_std

    alpha = raw2alpha(raw[...,3] + noise, dists)  # [N_rays, N_samples]
    if bug == "transmittance_not_exclusive":
        # the cumulative product taken inclusive: each sample is dimmed by its own opacity too
        weights = alpha * torch.cumprod(1.-alpha + 1e-10, -1)
    else:
        # weights = alpha * tf.math.cumprod(1.-alpha + 1e-10, -1, exclusive=True)
        weights = alpha * torch.cumprod(torch.cat([torch.ones((alpha.shape[0], 1)), 1.-alpha + 1e-10], -1), -1)[:, :-1]
    rgb_map = torch.sum(weights[...,None] * rgb, -2)  # [N_rays, 3]

    depth_map = torch.sum(weights * z_vals, -1)
    disp_map = 1./torch.max(1e-10 * torch.ones_like(depth_map), depth_map / torch.sum(weights, -1))
    acc_map = torch.sum(weights, -1)

    if white_bkgd:
        rgb_map = rgb_map + (1.-acc_map[...,None])

    return rgb_map, disp_map, acc_map, weights, depth_map


def sample_z_vals(ray_batch, N_samples, lindisp=False, perturb=0.):
    """render_rays' lines that place the samples along the rays."""
    N_rays = ray_batch.shape[0]
    bounds = torch.reshape(ray_batch[...,6:8], [-1,1,2])
    near, far = bounds[...,0], bounds[...,1] # [-1,1]

    t_vals = torch.linspace(0., 1., steps=N_samples)
    if not lindisp:
        z_vals = near * (1.-t_vals) + far * (t_vals)
    else:
        z_vals = 1./(1./near * (1.-t_vals) + 1./far * (t_vals))

    z_vals = z_vals.expand([N_rays, N_samples])

    if perturb > 0.:
        # get intervals between samples
        mids = .5 * (z_vals[...,1:] + z_vals[...,:-1])
        upper = torch.cat([mids, z_vals[...,-1:]], -1)
        lower = torch.cat([z_vals[...,:1], mids], -1)
        # stratified samples in those intervals
        t_rand = torch.rand(z_vals.shape)

        z_vals = lower + (upper - lower) * t_rand
    return z_vals


def render_rays(ray_batch,
                network_fn,
                network_query_fn,
                N_samples,
                retraw=False,
                lindisp=False,
                perturb=0.,
                N_importance=0,
                network_fine=None,
                white_bkgd=False,
                raw_noise_std=0.,
                verbose=False,
                pytest=False,
                bug=None):
    """Volumetric rendering.
    """
    rays_o, rays_d = ray_batch[:,0:3], ray_batch[:,3:6] # [N_rays, 3] each
    viewdirs = ray_batch[:,-3:] if ray_batch.shape[-1] > 8 else None

    z_vals = sample_z_vals(ray_batch, N_samples, lindisp, perturb)

    pts = rays_o[...,None,:] + rays_d[...,None,:] * z_vals[...,:,None] # [N_rays, N_samples, 3]


#     raw = run_network(pts)
    raw = network_query_fn(pts, viewdirs, network_fn)
    rgb_map, disp_map, acc_map, weights, depth_map = raw2outputs(raw, z_vals, rays_d, raw_noise_std, white_bkgd, pytest=pytest, bug=bug)

    if N_importance > 0:

        rgb_map_0, disp_map_0, acc_map_0 = rgb_map, disp_map, acc_map

        z_vals_mid = .5 * (z_vals[...,1:] + z_vals[...,:-1])
        z_samples = sample_pdf(z_vals_mid, weights[...,1:-1], N_importance, det=(perturb==0.), pytest=pytest)
        z_samples = z_samples.detach()

        z_vals, _ = torch.sort(torch.cat([z_vals, z_samples], -1), -1)
        pts = rays_o[...,None,:] + rays_d[...,None,:] * z_vals[...,:,None] # [N_rays, N_samples + N_importance, 3]

        run_fn = network_fn if network_fine is None else network_fine
#         raw = run_network(pts, fn=run_fn)
        raw = network_query_fn(pts, viewdirs, run_fn)

        rgb_map, disp_map, acc_map, weights, depth_map = raw2outputs(raw, z_vals, rays_d, raw_noise_std, white_bkgd, pytest=pytest, bug=bug)

    ret = {'rgb_map' : rgb_map, 'disp_map' : disp_map, 'acc_map' : acc_map}
    if retraw:
        ret['raw'] = raw
    if N_importance > 0:
        ret['rgb0'] = rgb_map_0
        ret['disp0'] = disp_map_0
        ret['acc0'] = acc_map_0
        ret['z_std'] = torch.std(z_samples, dim=-1, unbiased=False)  # [N_rays]

    for k in ret:
        if (torch.isnan(ret[k]).any() or torch.isinf(ret[k]).any()) and DEBUG:
            print(f"! [Numerical Error] {k} contains nan or inf.")

    return ret


def _build(seed, bug=None):
    torch.manual_seed(seed)
    nprand = np.random.RandomState(seed)
    # configs/lego.txt over config_parser's defaults (sizes shrunk, see the docstring)
    args = argparse.Namespace(dataset_type='blender', no_batching=True, use_viewdirs=True, white_bkgd=True,
                              lrate_decay=500, N_samples=32, N_importance=0, N_rand=256, precrop_iters=10,
                              precrop_frac=0.5, half_res=True, netdepth=8, netwidth=64, netdepth_fine=8,
                              netwidth_fine=64, lrate=5e-4, chunk=1024*32, netchunk=1024*64, perturb=1.,
                              i_embed=0, multires=10, multires_views=4, raw_noise_std=1e0, no_ndc=False,
                              lindisp=False)

    images, poses, hwf = load_synthetic_blender(seed)
    i_train = np.arange(images.shape[0])
    near = 2.
    far = 6.

    if args.white_bkgd:
        images = images[...,:3]*images[...,-1:] + (1.-images[...,-1:])
    else:
        images = images[...,:3]

    # Cast intrinsics to right types
    H, W, focal = hwf
    H, W = int(H), int(W)
    hwf = [H, W, focal]
    K = np.array([
        [focal, 0, 0.5*W],
        [0, focal, 0.5*H],
        [0, 0, 1]
    ])

    # Create nerf model
    render_kwargs_train, render_kwargs_test, start, grad_vars, optimizer, (embed_fn, embeddirs_fn) = create_nerf(args)
    global_step = start
    render_kwargs_train['bug'] = bug
    render_kwargs_test['bug'] = bug

    bds_dict = {
        'near' : near,
        'far' : far,
    }
    render_kwargs_train.update(bds_dict)
    render_kwargs_test.update(bds_dict)

    N_rand = args.N_rand
    poses = torch.Tensor(poses).to(device)

    state = {"i": start + 1, "global_step": global_step}

    def sample_ray_batch(i):
        # Random from one image
        img_i = nprand.choice(i_train)
        target = images[img_i]
        target = torch.Tensor(target).to(device)
        pose = poses[img_i, :3,:4]

        rays_o, rays_d = get_rays(H, W, K, torch.Tensor(pose), bug)  # (H, W, 3), (H, W, 3)

        if i < args.precrop_iters:
            dH = int(H//2 * args.precrop_frac)
            dW = int(W//2 * args.precrop_frac)
            coords = torch.stack(
                torch.meshgrid(
                    torch.linspace(H//2 - dH, H//2 + dH - 1, 2*dH),
                    torch.linspace(W//2 - dW, W//2 + dW - 1, 2*dW),
                    indexing='ij',
                ), -1)
        else:
            coords = torch.stack(torch.meshgrid(torch.linspace(0, H-1, H), torch.linspace(0, W-1, W), indexing='ij'), -1)  # (H, W, 2)

        coords = torch.reshape(coords, [-1,2])  # (H * W, 2)
        select_inds = nprand.choice(coords.shape[0], size=[N_rand], replace=False)  # (N_rand,)
        select_coords = coords[select_inds].long()  # (N_rand, 2)
        rays_o = rays_o[select_coords[:, 0], select_coords[:, 1]]  # (N_rand, 3)
        rays_d = rays_d[select_coords[:, 0], select_coords[:, 1]]  # (N_rand, 3)
        batch_rays = torch.stack([rays_o, rays_d], 0)
        target_s = target[select_coords[:, 0], select_coords[:, 1]]  # (N_rand, 3)
        return batch_rays, target_s

    def train_step():
        i = state["i"]
        batch_rays, target_s = sample_ray_batch(i)

        #####  Core optimization loop  #####
        rgb, disp, acc, extras = render(H, W, K, chunk=args.chunk, rays=batch_rays,
                                                verbose=i < 10, retraw=True,
                                                **render_kwargs_train)

        optimizer.zero_grad()
        img_loss = img2mse(rgb, target_s)
        loss = img_loss

        if 'rgb0' in extras:
            img_loss0 = img2mse(extras['rgb0'], target_s)
            loss = loss + img_loss0

        loss.backward()
        optimizer.step()

        # NOTE: IMPORTANT!
        ###   update learning rate   ###
        decay_rate = 0.1
        decay_steps = args.lrate_decay * 1000
        new_lrate = args.lrate * (decay_rate ** (state["global_step"] / decay_steps))
        for param_group in optimizer.param_groups:
            param_group['lr'] = new_lrate
        ################################

        state["global_step"] += 1
        state["i"] += 1
        return loss.detach()

    # the declared batch: one ray batch of the first step, as run_network feeds the coarse network
    model = render_kwargs_train['network_fn']
    batch_rays, target_s = sample_ray_batch(args.precrop_iters)
    ray_batch = make_ray_batch(H, W, K, (batch_rays[0], batch_rays[1]), near, far, args.use_viewdirs)
    z_vals = sample_z_vals(ray_batch, args.N_samples, args.lindisp, args.perturb)
    rays_o, rays_d, viewdirs = ray_batch[:, 0:3], ray_batch[:, 3:6], ray_batch[:, -3:]
    pts = rays_o[...,None,:] + rays_d[...,None,:] * z_vals[...,:,None]
    embedded = embed_inputs(pts, viewdirs, embed_fn, embeddirs_fn)

    def loss_fn(outputs_flat, targets):
        z_vals, rays_d, target_s = targets
        raw = torch.reshape(outputs_flat, list(z_vals.shape) + [outputs_flat.shape[-1]])
        rgb_map = raw2outputs(raw, z_vals, rays_d, args.raw_noise_std, args.white_bkgd, bug=bug)[0]
        return img2mse(rgb_map, target_s)

    return Program(name="nerfpytorch_blender", model=model, batch=(embedded, (z_vals, rays_d, target_s)),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step)


build = functools.partial(_build)

BUGS = [
    # get_rays without the transposes after torch.meshgrid (the 'ij'/'xy' question of
    # https://github.com/yenchenlin/nerf-pytorch/issues/105): on square images nothing breaks, but the ray at
    # (row, col) is the pixel (col, row)'s ray while the target colour is read at (row, col).
    Bug("meshgrid_not_transposed", functools.partial(_build, bug="meshgrid_not_transposed"), "learning_ledger",
        ("TASK",)),
    # the transmittance's cumulative product taken inclusive instead of exclusive (the TF original's
    # ``exclusive=True`` lost in the port: classic): every sample's colour is also dimmed by its own opacity.
    Bug("transmittance_not_exclusive", functools.partial(_build, bug="transmittance_not_exclusive"),
        "learning_ledger", ("OBJECTIVE",)),
]
