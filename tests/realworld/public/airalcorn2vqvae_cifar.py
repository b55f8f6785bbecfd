"""VQ-VAE with the EMA codebook on CIFAR-10, from airalcorn2/vqvae-pytorch (a minimal PyTorch port of DeepMind's
Sonnet VQ-VAE example): the strided convolutional encoder with a residual stack, the 1x1 ``pre_vq_conv``, the
``VectorQuantizer`` whose codebook is a buffer moved by Sonnet's bias-corrected exponential moving averages of the
cluster counts and the embedding sums (Laplace-smoothed counts), the straight-through estimator, the
transposed-convolution decoder, and the loop: MSE reconstruction divided by the training data variance plus
``beta`` (0.25) times the commitment loss, Adam lr 3e-4.

Source: https://github.com/airalcorn2/vqvae-pytorch
Commit: 021a7d79cbde845dd322bc0b97f37b08230d3cdc
Files: ``vqvae.py``, ``train_vqvae.py``
License: Apache-2.0 (the repository's ``VQVAE_LICENSE``, the license of the Sonnet example it ports; full text in
LICENSES/airalcorn2-vqvae-pytorch.txt)
Domain: vision, generative / discrete autoencoder (VQ-VAE with EMA codebook updates)

Kept as written: ``ResidualStack``, ``Encoder``, ``Decoder``, ``SonnetExponentialMovingAverage``,
``VectorQuantizer`` (uniform(-sqrt 3, sqrt 3) codebook, distance expansion, ``argmin``, ``F.embedding`` lookup,
the dictionary loss only without EMA, the commitment loss, straight-through, the EMA updates under
``self.use_ema and self.training``), ``VQVAE``; the script's ``use_ema = True``, ``decay`` 0.99, ``epsilon`` 1e-5,
``beta`` 0.25, ``Normalize(mean=0.5, std=1.0)``, ``train_data_variance = np.var(data / 255)``, ``nn.MSELoss``,
``optim.Adam(train_params, lr=3e-4)`` and the loop body (``zero_grad``, forward, ``recon_error``,
``loss = recon_error + beta * commitment_loss`` (+ dictionary loss without EMA), ``backward``, ``step``).

Deviations from the original:
- sizes for 2 CPU cores: ``num_hiddens`` 128 -> 32, ``num_residual_hiddens`` 32 -> 8, ``embedding_dim`` 64 -> 16,
  ``num_embeddings`` 512 -> 64, images 32x32 -> 16x16 (two downsamplings kept, a 4x4 latent grid), batch 32 kept;
- data: CIFAR-10 is not here: 512 synthetic 16x16 RGB uint8 images made from ``seed`` (each a sum of two
  coloured Gaussian blobs at random places on a tinted background; the rule is shared by every image), a
  128-image validation set made the same way; ``ToTensor`` + ``Normalize`` written out on tensors; the loader
  shuffles with a ``torch.Generator(seed)``, no workers; ``torch.manual_seed(seed)`` before the model is built;
- ``device`` is the CPU; the printing every ``eval_every`` batches and the image grids saved at the end are left
  out; ``eval_fn`` is the script's closing ``model.eval()`` pass, reporting the validation reconstruction error;
- ``train_step`` is one iteration of the batch loop and returns ``loss``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn, optim
from torch.nn import functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

# ---------------------------------------------------------------------------------------------------- vqvae.py


class ResidualStack(nn.Module):
    def __init__(self, num_hiddens, num_residual_layers, num_residual_hiddens):
        super().__init__()
        # See Section 4.1 of "Neural Discrete Representation Learning".
        layers = []
        for i in range(num_residual_layers):
            layers.append(
                nn.Sequential(
                    nn.ReLU(),
                    nn.Conv2d(
                        in_channels=num_hiddens,
                        out_channels=num_residual_hiddens,
                        kernel_size=3,
                        padding=1,
                    ),
                    nn.ReLU(),
                    nn.Conv2d(
                        in_channels=num_residual_hiddens,
                        out_channels=num_hiddens,
                        kernel_size=1,
                    ),
                )
            )

        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        h = x
        for layer in self.layers:
            h = h + layer(h)

        # ResNet V1-style.
        return torch.relu(h)


class Encoder(nn.Module):
    def __init__(
        self,
        in_channels,
        num_hiddens,
        num_downsampling_layers,
        num_residual_layers,
        num_residual_hiddens,
    ):
        super().__init__()
        # See Section 4.1 of "Neural Discrete Representation Learning".
        # The last ReLU from the Sonnet example is omitted because ResidualStack starts
        # off with a ReLU.
        conv = nn.Sequential()
        for downsampling_layer in range(num_downsampling_layers):
            if downsampling_layer == 0:
                out_channels = num_hiddens // 2
            elif downsampling_layer == 1:
                (in_channels, out_channels) = (num_hiddens // 2, num_hiddens)

            else:
                (in_channels, out_channels) = (num_hiddens, num_hiddens)

            conv.add_module(
                f"down{downsampling_layer}",
                nn.Conv2d(
                    in_channels=in_channels,
                    out_channels=out_channels,
                    kernel_size=4,
                    stride=2,
                    padding=1,
                ),
            )
            conv.add_module(f"relu{downsampling_layer}", nn.ReLU())

        conv.add_module(
            "final_conv",
            nn.Conv2d(
                in_channels=num_hiddens,
                out_channels=num_hiddens,
                kernel_size=3,
                padding=1,
            ),
        )
        self.conv = conv
        self.residual_stack = ResidualStack(
            num_hiddens, num_residual_layers, num_residual_hiddens
        )

    def forward(self, x):
        h = self.conv(x)
        return self.residual_stack(h)


class Decoder(nn.Module):
    def __init__(
        self,
        embedding_dim,
        num_hiddens,
        num_upsampling_layers,
        num_residual_layers,
        num_residual_hiddens,
    ):
        super().__init__()
        # See Section 4.1 of "Neural Discrete Representation Learning".
        self.conv = nn.Conv2d(
            in_channels=embedding_dim,
            out_channels=num_hiddens,
            kernel_size=3,
            padding=1,
        )
        self.residual_stack = ResidualStack(
            num_hiddens, num_residual_layers, num_residual_hiddens
        )
        upconv = nn.Sequential()
        for upsampling_layer in range(num_upsampling_layers):
            if upsampling_layer < num_upsampling_layers - 2:
                (in_channels, out_channels) = (num_hiddens, num_hiddens)

            elif upsampling_layer == num_upsampling_layers - 2:
                (in_channels, out_channels) = (num_hiddens, num_hiddens // 2)

            else:
                (in_channels, out_channels) = (num_hiddens // 2, 3)

            upconv.add_module(
                f"up{upsampling_layer}",
                nn.ConvTranspose2d(
                    in_channels=in_channels,
                    out_channels=out_channels,
                    kernel_size=4,
                    stride=2,
                    padding=1,
                ),
            )
            if upsampling_layer < num_upsampling_layers - 1:
                upconv.add_module(f"relu{upsampling_layer}", nn.ReLU())

        self.upconv = upconv

    def forward(self, x):
        h = self.conv(x)
        h = self.residual_stack(h)
        x_recon = self.upconv(h)
        return x_recon


class SonnetExponentialMovingAverage(nn.Module):
    # See: https://github.com/deepmind/sonnet/blob/5cbfdc356962d9b6198d5b63f0826a80acfdf35b/sonnet/src/moving_averages.py#L25.
    # They do *not* use the exponential moving average updates described in Appendix A.1
    # of "Neural Discrete Representation Learning".
    def __init__(self, decay, shape):
        super().__init__()
        self.decay = decay
        self.counter = 0
        self.register_buffer("hidden", torch.zeros(*shape))
        self.register_buffer("average", torch.zeros(*shape))

    def update(self, value):
        self.counter += 1
        with torch.no_grad():
            self.hidden -= (self.hidden - value) * (1 - self.decay)
            self.average = self.hidden / (1 - self.decay ** self.counter)

    def __call__(self, value):
        self.update(value)
        return self.average


class VectorQuantizer(nn.Module):
    def __init__(self, embedding_dim, num_embeddings, use_ema, decay, epsilon, bug=None):
        super().__init__()
        self.bug = bug
        # See Section 3 of "Neural Discrete Representation Learning" and:
        # https://github.com/deepmind/sonnet/blob/v2/sonnet/src/nets/vqvae.py#L142.

        self.embedding_dim = embedding_dim
        self.num_embeddings = num_embeddings
        self.use_ema = use_ema
        # Weight for the exponential moving average.
        self.decay = decay
        # Small constant to avoid numerical instability in embedding updates.
        self.epsilon = epsilon

        # Dictionary embeddings.
        limit = 3 ** 0.5
        e_i_ts = torch.FloatTensor(embedding_dim, num_embeddings).uniform_(
            -limit, limit
        )
        if use_ema:
            self.register_buffer("e_i_ts", e_i_ts)
        else:
            self.register_parameter("e_i_ts", nn.Parameter(e_i_ts))

        # Exponential moving average of the cluster counts.
        self.N_i_ts = SonnetExponentialMovingAverage(decay, (num_embeddings,))
        # Exponential moving average of the embeddings.
        self.m_i_ts = SonnetExponentialMovingAverage(decay, e_i_ts.shape)

    def forward(self, x):
        flat_x = x.permute(0, 2, 3, 1).reshape(-1, self.embedding_dim)
        distances = (
            (flat_x ** 2).sum(1, keepdim=True)
            - 2 * flat_x @ self.e_i_ts
            + (self.e_i_ts ** 2).sum(0, keepdim=True)
        )
        encoding_indices = distances.argmin(1)
        quantized_x = F.embedding(
            encoding_indices.view(x.shape[0], *x.shape[2:]), self.e_i_ts.transpose(0, 1)
        ).permute(0, 3, 1, 2)

        # See second term of Equation (3).
        if not self.use_ema:
            dictionary_loss = ((x.detach() - quantized_x) ** 2).mean()
        else:
            dictionary_loss = None

        # See third term of Equation (3).
        commitment_loss = ((x - quantized_x.detach()) ** 2).mean()
        # Straight-through gradient. See Section 3.2.
        if self.bug != "straight_through_dropped":
            quantized_x = x + (quantized_x - x).detach()
        # (bug straight_through_dropped: the codes go to the decoder as looked up, so the reconstruction's gradient
        # stops at the codebook lookup and the encoder learns from the commitment term alone)

        # (bug ema_update_in_eval: ``and self.training`` left out, so the evaluation pass moves the codebook)
        if self.use_ema and (self.training or self.bug == "ema_update_in_eval"):
            with torch.no_grad():
                # See Appendix A.1 of "Neural Discrete Representation Learning".

                # Cluster counts.
                encoding_one_hots = F.one_hot(
                    encoding_indices, self.num_embeddings
                ).type(flat_x.dtype)
                n_i_ts = encoding_one_hots.sum(0)
                # Updated exponential moving average of the cluster counts.
                # See Equation (6).
                self.N_i_ts(n_i_ts)

                # Exponential moving average of the embeddings. See Equation (7).
                embed_sums = flat_x.transpose(0, 1) @ encoding_one_hots
                self.m_i_ts(embed_sums)

                # This is kind of weird.
                # Compare: https://github.com/deepmind/sonnet/blob/v2/sonnet/src/nets/vqvae.py#L270
                # and Equation (8).
                N_i_ts_sum = self.N_i_ts.average.sum()
                N_i_ts_stable = (
                    (self.N_i_ts.average + self.epsilon)
                    / (N_i_ts_sum + self.num_embeddings * self.epsilon)
                    * N_i_ts_sum
                )
                self.e_i_ts = self.m_i_ts.average / N_i_ts_stable.unsqueeze(0)

        return (
            quantized_x,
            dictionary_loss,
            commitment_loss,
            encoding_indices.view(x.shape[0], -1),
        )


class VQVAE(nn.Module):
    def __init__(
        self,
        in_channels,
        num_hiddens,
        num_downsampling_layers,
        num_residual_layers,
        num_residual_hiddens,
        embedding_dim,
        num_embeddings,
        use_ema,
        decay,
        epsilon,
        bug=None,
    ):
        super().__init__()
        self.encoder = Encoder(
            in_channels,
            num_hiddens,
            num_downsampling_layers,
            num_residual_layers,
            num_residual_hiddens,
        )
        self.pre_vq_conv = nn.Conv2d(
            in_channels=num_hiddens, out_channels=embedding_dim, kernel_size=1
        )
        self.vq = VectorQuantizer(
            embedding_dim, num_embeddings, use_ema, decay, epsilon, bug=bug
        )
        self.decoder = Decoder(
            embedding_dim,
            num_hiddens,
            num_downsampling_layers,
            num_residual_layers,
            num_residual_hiddens,
        )

    def quantize(self, x):
        z = self.pre_vq_conv(self.encoder(x))
        (z_quantized, dictionary_loss, commitment_loss, encoding_indices) = self.vq(z)
        return (z_quantized, dictionary_loss, commitment_loss, encoding_indices)

    def forward(self, x):
        (z_quantized, dictionary_loss, commitment_loss, _) = self.quantize(x)
        x_recon = self.decoder(z_quantized)
        return {
            "dictionary_loss": dictionary_loss,
            "commitment_loss": commitment_loss,
            "x_recon": x_recon,
        }


# ------------------------------------------------------------------------------------- data (port: synthetic)

IMG = 16


def _synthetic_images(seed, n):
    """(port) uint8 HxWx3 images: a tinted background plus two coloured Gaussian blobs at random places."""
    g = torch.Generator().manual_seed(seed)
    palette = torch.rand(6, 3, generator=torch.Generator().manual_seed(1234))  # the rule shared by every split
    yy, xx = torch.meshgrid(torch.arange(IMG, dtype=torch.float32), torch.arange(IMG, dtype=torch.float32),
                            indexing="ij")
    imgs = 0.15 + 0.2 * palette[torch.randint(0, 6, (n,), generator=g)][:, :, None, None].expand(n, 3, IMG, IMG)
    for _ in range(2):
        cy, cx = (torch.rand(n, generator=g) * IMG)[:, None, None], (torch.rand(n, generator=g) * IMG)[:, None, None]
        blob = torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * 2.5 ** 2))
        colour = palette[torch.randint(0, 6, (n,), generator=g)]
        imgs = imgs + 0.7 * blob[:, None] * colour[:, :, None, None]
    imgs = imgs.clamp(0, 1)
    return (imgs.permute(0, 2, 3, 1) * 255).round().to(torch.uint8).numpy()


class SyntheticCifar(torch.utils.data.Dataset):
    def __init__(self, seed, n, transform):
        self.data = _synthetic_images(seed, n)
        self.transform = transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.transform(self.data[i]), 0


def transform(img):
    # transforms.ToTensor() then transforms.Normalize(mean=[0.5, 0.5, 0.5], std=[1.0, 1.0, 1.0])
    t = torch.from_numpy(img).permute(2, 0, 1).float() / 255
    return (t - 0.5) / 1.0


# ----------------------------------------------------------------------------------------- train_vqvae.py


def _build(seed, bug=None):
    torch.manual_seed(seed)
    # Initialize model.
    device = torch.device("cpu")  # (port) cuda:0
    use_ema = True
    model_args = {
        "in_channels": 3,
        "num_hiddens": 32,  # (port) 128
        "num_downsampling_layers": 2,
        "num_residual_layers": 2,
        "num_residual_hiddens": 8,  # (port) 32
        "embedding_dim": 16,  # (port) 64
        "num_embeddings": 64,  # (port) 512
        "use_ema": use_ema,
        "decay": 0.99,
        "epsilon": 1e-5,
    }
    model = VQVAE(**model_args, bug=bug).to(device)

    # Initialize dataset.
    batch_size = 32
    workers = 0  # (port) 10
    train_dataset = SyntheticCifar(seed, 512, transform)
    train_data_variance = np.var(train_dataset.data / 255)
    train_loader = torch.utils.data.DataLoader(
        dataset=train_dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        generator=torch.Generator().manual_seed(seed),
    )
    valid_dataset = SyntheticCifar(seed + 1000, 128, transform)
    valid_loader = torch.utils.data.DataLoader(dataset=valid_dataset, batch_size=batch_size, num_workers=workers)

    # Multiplier for commitment loss. See Equation (3) in "Neural Discrete Representation
    # Learning".
    beta = 0.25

    # Initialize optimizer.
    train_params = [params for params in model.parameters()]
    lr = 3e-4
    optimizer = optim.Adam(train_params, lr=lr)
    criterion = nn.MSELoss()

    model.train()
    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        train_tensors = next_batch()
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        imgs = train_tensors[0].to(device)
        out = model(imgs)
        recon_error = criterion(out["x_recon"], imgs) / train_data_variance
        loss = recon_error + beta * out["commitment_loss"]
        if not use_ema:
            loss += out["dictionary_loss"]

        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(m, batch):
        model.eval()
        errs = []
        with torch.no_grad():
            for valid_tensors in valid_loader:
                imgs = valid_tensors[0].to(device)
                errs.append(float(criterion(model(imgs)["x_recon"], imgs) / train_data_variance))
        model.train()
        return sum(errs) / len(errs)

    def loss_fn(out, imgs):
        recon_error = criterion(out["x_recon"], imgs) / train_data_variance
        return recon_error + beta * out["commitment_loss"]

    x0 = next(iter(torch.utils.data.DataLoader(train_dataset, batch_size=batch_size)))[0]
    return Program(name="airalcorn2vqvae_cifar", model=model, batch=(x0, x0), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the ``self.training`` guard of the EMA codebook update left out (the update written as
    # ``if self.use_ema:``): every evaluation pass moves the codebook towards the validation codes.
    Bug("ema_update_in_eval", functools.partial(_build, bug="ema_update_in_eval"), "six_claims", ("EVALUATION",)),
    # classic: the straight-through line ``quantized_x = x + (quantized_x - x).detach()`` left out: the decoder gets the
    # looked-up codes and the reconstruction's gradient never reaches the encoder.
    Bug("straight_through_dropped", functools.partial(_build, bug="straight_through_dropped"), "learning_ledger",
        ("GRADIENT",)),
    # classic: optimizer.zero_grad() left out of the batch loop: gradients pile up over iterations (whole-model slip).
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
