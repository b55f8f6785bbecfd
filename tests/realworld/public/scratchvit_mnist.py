"""A Vision Transformer written from scratch (s-chh's PyTorch-Scratch-Vision-Transformer-ViT), MNIST configuration:
a convolutional patch embedding with a learnable positional embedding and a prepended class token, pre-norm encoder
blocks with hand-written multi-head self-attention, a final LayerNorm and a tanh MLP head on the class token;
cross-entropy, AdamW (weight decay 1e-3), a linear warm-up then cosine decay stepped once per epoch.

Source: https://github.com/s-chh/PyTorch-Scratch-Vision-Transformer-ViT
Commit: 5d66670b8ac7d70f89bce7823c332958edd6de57
Files: model.py, solver.py, main.py, data_loader.py
License: MIT (Copyright (c) 2024 s-chh; full text in LICENSES/s-chh-PyTorch-Scratch-Vision-Transformer-ViT.txt)
Domain: image classification (vision transformer)

Deviations from the original:
- sizes: images 28x28 -> 12x12 (patch 4 kept: 9 patches), ``embed_dim`` 64 -> 32, ``n_layers`` 6 -> 2 (4 heads,
  ``forward_mul`` 2 and dropout 0.1 kept), batch_size 128 -> 16, epochs 200 -> 20 and warmup_epochs 10 -> 2 (an epoch
  is 4 batches here), peak lr 5e-4 -> 3e-3 so that the 30 steps of the self-check show the loss falling;
- data: torchvision's MNIST download is replaced by synthetic 12x12 "digits" made from ``seed`` (4 classes of
  bar patterns with pixel noise); the transforms are written out in plain torch: ``RandomCrop(12, padding=2)``
  (zero padding, a random crop per image) and ``Normalize([0.5], [0.5])``; the loader shuffles with a
  ``torch.Generator(seed)``, no workers;
- CUDA, printing, plotting, checkpoints and sklearn's confusion matrix are dropped; ``verbose=True`` of the
  schedulers is dropped (deprecated in this torch); the use_torch_transformer_layers variant is not copied;
- one ``train_step`` is one iteration of the inner loop of ``Solver.train`` (forward, loss, zero_grad, backward,
  step); at an epoch's end the scheduler is stepped as the epoch loop does (the per-epoch test is ``eval_fn``:
  ``test_dataset``'s accuracy on the test loader);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: SIM101

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import nn, optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 12
N_CLASSES = 4
BATCH = 16
N_TRAIN = 64


# model.py
class EmbedLayer(nn.Module):
    def __init__(self, n_channels, embed_dim, image_size, patch_size, dropout=0.0):
        super().__init__()
        self.conv1         = nn.Conv2d(n_channels, embed_dim, kernel_size=patch_size, stride=patch_size)                       # Patch Encoding
        self.pos_embedding = nn.Parameter(torch.zeros(1, (image_size // patch_size) ** 2, embed_dim), requires_grad=True)      # Learnable Positional Embedding
        self.cls_token     = nn.Parameter(torch.zeros(1, 1, embed_dim), requires_grad=True)                                    # Classification Token
        self.dropout       = nn.Dropout(dropout)

    def forward(self, x):
        B = x.shape[0]
        x = self.conv1(x)                                                         # B, C, IH, IW     --> B, E, IH/P, IW/P                Split image into the patches and embed patches
        x = x.reshape([B, x.shape[1], -1])                                        # B, E, IH/P, IW/P --> B, E, (IH/P*IW/P) --> B, E, N    Flattening the patches
        x = x.permute(0, 2, 1)                                                    # B, E, N          --> B, N, E                         Rearrange to put sequence dimension in the middle
        x = x + self.pos_embedding                                                # B, N, E          --> B, N, E                         Add positional embedding
        x = torch.cat((torch.repeat_interleave(self.cls_token, B, 0), x), dim=1)  # B, N, E          --> B, (N+1), E       --> B, S, E    Add classification token at the start of every sequence
        x = self.dropout(x)
        return x


class SelfAttention(nn.Module):
    def __init__(self, embed_dim, n_attention_heads, bug=None):
        super().__init__()
        self.embed_dim          = embed_dim
        self.n_attention_heads  = n_attention_heads
        self.head_embed_dim     = embed_dim // n_attention_heads
        self.bug = bug

        self.queries            = nn.Linear(self.embed_dim, self.head_embed_dim * self.n_attention_heads)   # Queries projection
        self.keys               = nn.Linear(self.embed_dim, self.head_embed_dim * self.n_attention_heads)   # Keys projection
        self.values             = nn.Linear(self.embed_dim, self.head_embed_dim * self.n_attention_heads)   # Values projection
        self.out_projection     = nn.Linear(self.head_embed_dim * self.n_attention_heads, self.embed_dim)   # Out projection

    def forward(self, x):
        b, s, e = x.shape  # Note: In case of self-attention Q, K and V are all equal to S

        xq = self.queries(x).reshape(b, s, self.n_attention_heads, self.head_embed_dim)     # B, Q, E      -->  B, Q, (H*HE)  -->  B, Q, H, HE
        xq = xq.permute(0, 2, 1, 3)                                                         # B, Q, H, HE  -->  B, H, Q, HE
        xk = self.keys(x).reshape(b, s, self.n_attention_heads, self.head_embed_dim)        # B, K, E      -->  B, K, (H*HE)  -->  B, K, H, HE
        xk = xk.permute(0, 2, 1, 3)                                                         # B, K, H, HE  -->  B, H, K, HE
        xv = self.values(x).reshape(b, s, self.n_attention_heads, self.head_embed_dim)      # B, V, E      -->  B, V, (H*HE)  -->  B, V, H, HE
        xv = xv.permute(0, 2, 1, 3)                                                         # B, V, H, HE  -->  B, H, V, HE

        # Compute Attention presoftmax values
        xk = xk.permute(0, 1, 3, 2)                                                         # B, H, K, HE  -->  B, H, HE, K
        x_attention = torch.matmul(xq, xk)                                                  # B, H, Q, HE  *   B, H, HE, K   -->  B, H, Q, K    (Matmul tutorial eg: A, B, C, D  *  A, B, E, F  -->  A, B, C, F   if D==E)

        x_attention /= float(self.head_embed_dim) ** 0.5                                    # Scale presoftmax values for stability

        if self.bug == "softmax_over_queries":
            x_attention = torch.softmax(x_attention, dim=-2)
        else:
            x_attention = torch.softmax(x_attention, dim=-1)                                # Compute Attention Matrix

        x = torch.matmul(x_attention, xv)                                                   # B, H, Q, K  *  B, H, V, HE  -->  B, H, Q, HE     Compute Attention product with Values

        # Format the output
        if self.bug != "heads_reshaped_not_permuted":
            x = x.permute(0, 2, 1, 3)                                                       # B, H, Q, HE --> B, Q, H, HE
        x = x.reshape(b, s, e)                                                              # B, Q, H, HE --> B, Q, (H*HE)

        x = self.out_projection(x)                                                          # B, Q,(H*HE) --> B, Q, E
        return x


class Encoder(nn.Module):
    def __init__(self, embed_dim, n_attention_heads, forward_mul, dropout=0.0, bug=None):
        super().__init__()
        self.norm1      = nn.LayerNorm(embed_dim)
        self.attention  = SelfAttention(embed_dim, n_attention_heads, bug=bug)
        self.dropout1   = nn.Dropout(dropout)

        self.norm2      = nn.LayerNorm(embed_dim)
        self.fc1        = nn.Linear(embed_dim, embed_dim * forward_mul)
        self.activation = nn.GELU()
        self.fc2        = nn.Linear(embed_dim * forward_mul, embed_dim)
        self.dropout2   = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.dropout1(self.attention(self.norm1(x)))                                # Skip connections
        x = x + self.dropout2(self.fc2(self.activation(self.fc1(self.norm2(x)))))           # Skip connections
        return x


class Classifier(nn.Module):
    def __init__(self, embed_dim, n_classes):
        super().__init__()
        # New architectures skip fc1 and activations and directly apply fc2.
        self.fc1        = nn.Linear(embed_dim, embed_dim)
        self.activation = nn.Tanh()
        self.fc2        = nn.Linear(embed_dim, n_classes)

    def forward(self, x):
        x = x[:, 0, :]              # B, S, E --> B, E          Get CLS token
        x = self.fc1(x)             # B, E    --> B, E
        x = self.activation(x)      # B, E    --> B, E
        x = self.fc2(x)             # B, E    --> B, CL
        return x


class VisionTransformer(nn.Module):
    def __init__(self, n_channels, embed_dim, n_layers, n_attention_heads, forward_mul, image_size, patch_size, n_classes, dropout=0.1, bug=None):
        super().__init__()
        self.embedding  = EmbedLayer(n_channels, embed_dim, image_size, patch_size, dropout=dropout)
        self.encoder    = nn.ModuleList([Encoder(embed_dim, n_attention_heads, forward_mul, dropout=dropout, bug=bug) for _ in range(n_layers)])
        self.norm       = nn.LayerNorm(embed_dim)                                       # Final normalization layer after the last block
        self.classifier = Classifier(embed_dim, n_classes)

        self.apply(vit_init_weights)                                                    # Weight initalization

    def forward(self, x):
        x = self.embedding(x)
        for block in self.encoder:
            x = block(x)
        x = self.norm(x)
        x = self.classifier(x)
        return x


def vit_init_weights(m):
    """
    function for initializing the weights of the Vision Transformer.
    """

    if isinstance(m, nn.Conv2d) or isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, mean=0.0, std=0.02)
        if m.bias is not None:
            nn.init.constant_(m.bias, 0)

    elif isinstance(m, nn.LayerNorm):
        nn.init.constant_(m.weight, 1)
        nn.init.constant_(m.bias, 0)

    elif isinstance(m, EmbedLayer):
        nn.init.trunc_normal_(m.cls_token, mean=0.0, std=0.02)
        nn.init.trunc_normal_(m.pos_embedding, mean=0.0, std=0.02)


# data_loader.py, with the MNIST download replaced by synthetic bar "digits"
def make_digits(seed, n):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, N_CLASSES, (n,), generator=g)
    images = torch.rand(n, 1, IMG, IMG, generator=g) * 0.2
    for i, c in enumerate(labels.tolist()):
        if c == 0:
            images[i, 0, 2:4, 2:10] = 1.0      # a top bar
        elif c == 1:
            images[i, 0, 8:10, 2:10] = 1.0     # a bottom bar
        elif c == 2:
            images[i, 0, 2:10, 2:4] = 1.0      # a left bar
        else:
            images[i, 0, 2:10, 8:10] = 1.0     # a right bar
    return images, labels


class Digits(torch.utils.data.Dataset):
    def __init__(self, seed, n, train):
        self.images, self.labels = make_digits(seed, n)
        self.train = train
        self.g = torch.Generator().manual_seed(seed + 7)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = self.images[i]
        if self.train:  # transforms.RandomCrop(args.image_size, padding=2)
            x = F.pad(x, (2, 2, 2, 2))
            dy, dx = torch.randint(0, 5, (2,), generator=self.g).tolist()
            x = x[:, dy:dy + IMG, dx:dx + IMG]
        x = (x - 0.5) / 0.5  # transforms.Normalize([0.5], [0.5])
        return x, self.labels[i]


def _build(seed, bug=None):
    torch.manual_seed(seed)

    class Args:
        epochs = 20
        warmup_epochs = 2
        lr = 3e-3  # 5e-4 in main.py
        n_classes = N_CLASSES
        image_size = IMG
        patch_size = 4
        n_channels = 1
        embed_dim = 32
        n_attention_heads = 4
        forward_mul = 2
        n_layers = 2
        dropout = 0.1

    args = Args()
    train = Digits(seed, N_TRAIN, train=True)
    test = Digits(seed + 1000, 32, train=False)
    train_loader = torch.utils.data.DataLoader(train, batch_size=BATCH, shuffle=True, drop_last=True,
                                               generator=torch.Generator().manual_seed(seed))
    test_loader = torch.utils.data.DataLoader(test, batch_size=BATCH, shuffle=False)

    model = VisionTransformer(n_channels=args.n_channels,   embed_dim=args.embed_dim,
                              n_layers=args.n_layers,       n_attention_heads=args.n_attention_heads,
                              forward_mul=args.forward_mul, image_size=args.image_size,
                              patch_size=args.patch_size,   n_classes=args.n_classes,
                              dropout=args.dropout, bug=bug)

    # Training loss function
    loss_fn = nn.CrossEntropyLoss()

    # Define optimizer for training the model
    optimizer = optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-3)

    # scheduler for linear warmup of lr and then cosine decay to 1e-5
    linear_warmup = optim.lr_scheduler.LinearLR(optimizer, start_factor=1/args.warmup_epochs, end_factor=1.0, total_iters=args.warmup_epochs-1, last_epoch=-1)
    cos_decay     = optim.lr_scheduler.CosineAnnealingLR(optimizer=optimizer, T_max=args.epochs-args.warmup_epochs, eta_min=1e-5)

    state = {"epoch": 0, "it": iter(train_loader)}

    def train_step():
        try:
            x, y = next(state["it"])
        except StopIteration:
            # Update learning rate using schedulers (the end of the epoch loop)
            if state["epoch"] < args.warmup_epochs:
                linear_warmup.step()
            else:
                cos_decay.step()
            state["epoch"] += 1
            state["it"] = iter(train_loader)
            x, y = next(state["it"])

        # Set model to training mode
        model.train()

        # Get output logits from the model
        logits = model(x)

        # Compute training loss
        loss = loss_fn(logits, y)

        # Updating the model
        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        optimizer.step()
        return loss.detach()

    def eval_fn(m, batch):
        # test_dataset: accuracy on the test loader
        m.eval()
        all_labels, all_logits = [], []
        for (x, y) in test_loader:
            with torch.no_grad():
                logits = m(x)
            all_labels.append(y)
            all_logits.append(logits.cpu())
        all_labels = torch.cat(all_labels)
        all_logits = torch.cat(all_logits)
        all_pred = all_logits.max(1)[1]
        m.train()
        return float((all_pred == all_labels).float().mean())

    xb = torch.stack([train[i][0] for i in range(BATCH)])
    yb = torch.stack([train[i][1] for i in range(BATCH)])

    return Program(name="scratchvit_mnist", model=model, batch=(xb, yb), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the head axis is folded back into the embedding without moving it next to it (classic: ``permute(0, 2, 1, 3)``
    # dropped before ``reshape(b, s, e)``): every output token mixes the rows of other tokens.
    Bug("heads_reshaped_not_permuted", functools.partial(_build, bug="heads_reshaped_not_permuted"), "tensor_trace",
        ("encoder.0.attention",)),
    # the attention softmax taken over the queries (``dim=-2``) instead of the keys (classic axis slip).
    Bug("softmax_over_queries", functools.partial(_build, bug="softmax_over_queries"), "learning_ledger",
        ("DEPENDENCY",)),
    # ``optimizer.zero_grad()`` moved after ``loss.backward()`` (classic): every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]
