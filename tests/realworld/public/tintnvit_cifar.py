"""A Vision Transformer from scratch on CIFAR-10, from tintn/vision-transformer-from-scratch: conv patch embedding
(4x4 patches), a learnable [CLS] token and position embeddings (truncated-normal init), pre-norm blocks with the
merged-QKV ``FasterMultiHeadAttention`` and a GELU MLP, classification from the [CLS] output; ``train.py``'s
``Trainer`` (cross-entropy, AdamW lr 1e-2 with weight decay 1e-2), flip + RandomResizedCrop augmentation,
normalization to [-1, 1].

Source: https://github.com/tintn/vision-transformer-from-scratch
Commit: 52c59c6e52f66f9265e799457c9dcedc020fd483
Files: vit.py, train.py, data.py
License: MIT (Copyright (c) 2023 Tin Nguyen; full text in LICENSES/tintn-vision-transformer-from-scratch.txt)
Domain: vision, image classification (ViT from scratch)

Kept as written: ``vit.py`` whole (``NewGELUActivation``, ``PatchEmbeddings``, ``Embeddings``, ``AttentionHead``,
``MultiHeadAttention``, ``FasterMultiHeadAttention``, ``MLP``, ``Block``, ``Encoder``, ``ViTForClassfication``
with ``_init_weights``), ``train.py``'s ``config`` (patch 4, hidden 48, 4 layers, 4 heads, intermediate 192, no
dropout, ``use_faster_attention`` True), its optimizer and loss, ``Trainer.train_epoch``'s loop body and
``Trainer.evaluate`` (accuracy and loss on the test loader).

Deviations from the original:
- sizes for 2 CPU cores: batch_size 256 -> 32;
- data: torchvision's CIFAR-10 download is replaced by synthetic 3x32x32 images made from ``seed`` (10 classes,
  each a colour pair and a stripe orientation/frequency, with noise): 640 training and 64 test images; the
  ``transforms`` pipeline (``ToTensor``, ``Resize((32, 32))`` a no-op at 32x32, ``RandomHorizontalFlip(0.5)``,
  ``RandomResizedCrop((32, 32), scale=(0.8, 1.0), ratio=(3/4, 4/3))`` with bilinear interpolation,
  ``Normalize((0.5,) * 3, (0.5,) * 3)``) is written out in plain torch, drawing from a ``torch.Generator(seed)``;
  the loaders run without workers, the training one shuffled by a ``torch.Generator(seed)``;
- the device moves, argparse, the prints and ``save_experiment``/``save_checkpoint`` are dropped;
- one ``train_step`` is one iteration of ``train_epoch``'s loop (``model.train()`` set as ``train_epoch`` does at
  its start; the next epoch starts when the loader runs out), returning the loss; ``eval_fn`` is ``evaluate`` on
  the test loader (accuracy); the Program's loss takes the logits (``self.model(images)[0]``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import nn, optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# vit.py


class NewGELUActivation(nn.Module):
    """
    Implementation of the GELU activation function currently in Google BERT repo (identical to OpenAI GPT). Also see
    the Gaussian Error Linear Units paper: https://arxiv.org/abs/1606.08415

    Taken from https://github.com/huggingface/transformers/blob/main/src/transformers/activations.py
    """

    def forward(self, input):
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class PatchEmbeddings(nn.Module):
    """
    Convert the image into patches and then project them into a vector space.
    """

    def __init__(self, config):
        super().__init__()
        self.image_size = config["image_size"]
        self.patch_size = config["patch_size"]
        self.num_channels = config["num_channels"]
        self.hidden_size = config["hidden_size"]
        # Calculate the number of patches from the image size and patch size
        self.num_patches = (self.image_size // self.patch_size) ** 2
        # Create a projection layer to convert the image into patches
        # The layer projects each patch into a vector of size hidden_size
        self.projection = nn.Conv2d(self.num_channels, self.hidden_size, kernel_size=self.patch_size, stride=self.patch_size)

    def forward(self, x):
        # (batch_size, num_channels, image_size, image_size) -> (batch_size, num_patches, hidden_size)
        x = self.projection(x)
        if getattr(self, "bug", None) == "patches_viewed_not_transposed":  # (port) bug switch
            return x.flatten(2).reshape(x.size(0), -1, self.hidden_size)
        x = x.flatten(2).transpose(1, 2)
        return x


class Embeddings(nn.Module):
    """
    Combine the patch embeddings with the class token and position embeddings.
    """
        
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.patch_embeddings = PatchEmbeddings(config)
        # Create a learnable [CLS] token
        # Similar to BERT, the [CLS] token is added to the beginning of the input sequence
        # and is used to classify the entire sequence
        self.cls_token = nn.Parameter(torch.randn(1, 1, config["hidden_size"]))
        # Create position embeddings for the [CLS] token and the patch embeddings
        # Add 1 to the sequence length for the [CLS] token
        self.position_embeddings = \
            nn.Parameter(torch.randn(1, self.patch_embeddings.num_patches + 1, config["hidden_size"]))
        self.dropout = nn.Dropout(config["hidden_dropout_prob"])

    def forward(self, x):
        x = self.patch_embeddings(x)
        batch_size, _, _ = x.size()
        # Expand the [CLS] token to the batch size
        # (1, 1, hidden_size) -> (batch_size, 1, hidden_size)
        cls_tokens = self.cls_token.expand(batch_size, -1, -1)
        # Concatenate the [CLS] token to the beginning of the input sequence
        # This results in a sequence length of (num_patches + 1)
        x = torch.cat((cls_tokens, x), dim=1)
        x = x + self.position_embeddings
        x = self.dropout(x)
        return x


class AttentionHead(nn.Module):
    """
    A single attention head.
    This module is used in the MultiHeadAttention module.

    """
    def __init__(self, hidden_size, attention_head_size, dropout, bias=True):
        super().__init__()
        self.hidden_size = hidden_size
        self.attention_head_size = attention_head_size
        # Create the query, key, and value projection layers
        self.query = nn.Linear(hidden_size, attention_head_size, bias=bias)
        self.key = nn.Linear(hidden_size, attention_head_size, bias=bias)
        self.value = nn.Linear(hidden_size, attention_head_size, bias=bias)

        self.dropout = nn.Dropout(dropout)
    
    def forward(self, x):
        # Project the input into query, key, and value
        # The same input is used to generate the query, key, and value,
        # so it's usually called self-attention.
        # (batch_size, sequence_length, hidden_size) -> (batch_size, sequence_length, attention_head_size)
        query = self.query(x)
        key = self.key(x)
        value = self.value(x)
        # Calculate the attention scores
        # softmax(Q*K.T/sqrt(head_size))*V
        attention_scores = torch.matmul(query, key.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)
        # Calculate the attention output
        attention_output = torch.matmul(attention_probs, value)
        return (attention_output, attention_probs)


class MultiHeadAttention(nn.Module):
    """
    Multi-head attention module.
    This module is used in the TransformerEncoder module.
    """

    def __init__(self, config):
        super().__init__()
        self.hidden_size = config["hidden_size"]
        self.num_attention_heads = config["num_attention_heads"]
        # The attention head size is the hidden size divided by the number of attention heads
        self.attention_head_size = self.hidden_size // self.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        # Whether or not to use bias in the query, key, and value projection layers
        self.qkv_bias = config["qkv_bias"]
        # Create a list of attention heads
        self.heads = nn.ModuleList([])
        for _ in range(self.num_attention_heads):
            head = AttentionHead(
                self.hidden_size,
                self.attention_head_size,
                config["attention_probs_dropout_prob"],
                self.qkv_bias
            )
            self.heads.append(head)
        # Create a linear layer to project the attention output back to the hidden size
        # In most cases, all_head_size and hidden_size are the same
        self.output_projection = nn.Linear(self.all_head_size, self.hidden_size)
        self.output_dropout = nn.Dropout(config["hidden_dropout_prob"])

    def forward(self, x, output_attentions=False):
        # Calculate the attention output for each attention head
        attention_outputs = [head(x) for head in self.heads]
        # Concatenate the attention outputs from each attention head
        attention_output = torch.cat([attention_output for attention_output, _ in attention_outputs], dim=-1)
        # Project the concatenated attention output back to the hidden size
        attention_output = self.output_projection(attention_output)
        attention_output = self.output_dropout(attention_output)
        # Return the attention output and the attention probabilities (optional)
        if not output_attentions:
            return (attention_output, None)
        else:
            attention_probs = torch.stack([attention_probs for _, attention_probs in attention_outputs], dim=1)
            return (attention_output, attention_probs)


class FasterMultiHeadAttention(nn.Module):
    """
    Multi-head attention module with some optimizations.
    All the heads are processed simultaneously with merged query, key, and value projections.
    """

    def __init__(self, config):
        super().__init__()
        self.hidden_size = config["hidden_size"]
        self.num_attention_heads = config["num_attention_heads"]
        # The attention head size is the hidden size divided by the number of attention heads
        self.attention_head_size = self.hidden_size // self.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        # Whether or not to use bias in the query, key, and value projection layers
        self.qkv_bias = config["qkv_bias"]
        # Create a linear layer to project the query, key, and value
        self.qkv_projection = nn.Linear(self.hidden_size, self.all_head_size * 3, bias=self.qkv_bias)
        self.attn_dropout = nn.Dropout(config["attention_probs_dropout_prob"])
        # Create a linear layer to project the attention output back to the hidden size
        # In most cases, all_head_size and hidden_size are the same
        self.output_projection = nn.Linear(self.all_head_size, self.hidden_size)
        self.output_dropout = nn.Dropout(config["hidden_dropout_prob"])

    def forward(self, x, output_attentions=False):
        # Project the query, key, and value
        # (batch_size, sequence_length, hidden_size) -> (batch_size, sequence_length, all_head_size * 3)
        qkv = self.qkv_projection(x)
        # Split the projected query, key, and value into query, key, and value
        # (batch_size, sequence_length, all_head_size * 3) -> (batch_size, sequence_length, all_head_size)
        query, key, value = torch.chunk(qkv, 3, dim=-1)
        # Resize the query, key, and value to (batch_size, num_attention_heads, sequence_length, attention_head_size)
        batch_size, sequence_length, _ = query.size()
        query = query.view(batch_size, sequence_length, self.num_attention_heads, self.attention_head_size).transpose(1, 2)
        key = key.view(batch_size, sequence_length, self.num_attention_heads, self.attention_head_size).transpose(1, 2)
        value = value.view(batch_size, sequence_length, self.num_attention_heads, self.attention_head_size).transpose(1, 2)
        # Calculate the attention scores
        # softmax(Q*K.T/sqrt(head_size))*V
        attention_scores = torch.matmul(query, key.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_probs = nn.functional.softmax(attention_scores, dim=-2 if getattr(self, "bug", None) == "softmax_over_queries" else -1)
        attention_probs = self.attn_dropout(attention_probs)
        # Calculate the attention output
        attention_output = torch.matmul(attention_probs, value)
        # Resize the attention output
        # from (batch_size, num_attention_heads, sequence_length, attention_head_size)
        # To (batch_size, sequence_length, all_head_size)
        attention_output = attention_output.transpose(1, 2) \
                                           .contiguous() \
                                           .view(batch_size, sequence_length, self.all_head_size)
        # Project the attention output back to the hidden size
        attention_output = self.output_projection(attention_output)
        attention_output = self.output_dropout(attention_output)
        # Return the attention output and the attention probabilities (optional)
        if not output_attentions:
            return (attention_output, None)
        else:
            return (attention_output, attention_probs)


class MLP(nn.Module):
    """
    A multi-layer perceptron module.
    """

    def __init__(self, config):
        super().__init__()
        self.dense_1 = nn.Linear(config["hidden_size"], config["intermediate_size"])
        self.activation = NewGELUActivation()
        self.dense_2 = nn.Linear(config["intermediate_size"], config["hidden_size"])
        self.dropout = nn.Dropout(config["hidden_dropout_prob"])

    def forward(self, x):
        x = self.dense_1(x)
        x = self.activation(x)
        x = self.dense_2(x)
        x = self.dropout(x)
        return x


class Block(nn.Module):
    """
    A single transformer block.
    """

    def __init__(self, config):
        super().__init__()
        self.use_faster_attention = config.get("use_faster_attention", False)
        if self.use_faster_attention:
            self.attention = FasterMultiHeadAttention(config)
        else:
            self.attention = MultiHeadAttention(config)
        self.layernorm_1 = nn.LayerNorm(config["hidden_size"])
        self.mlp = MLP(config)
        self.layernorm_2 = nn.LayerNorm(config["hidden_size"])

    def forward(self, x, output_attentions=False):
        # Self-attention
        attention_output, attention_probs = \
            self.attention(self.layernorm_1(x), output_attentions=output_attentions)
        # Skip connection
        x = x + attention_output
        # Feed-forward network
        mlp_output = self.mlp(self.layernorm_2(x))
        # Skip connection
        x = x + mlp_output
        # Return the transformer block's output and the attention probabilities (optional)
        if not output_attentions:
            return (x, None)
        else:
            return (x, attention_probs)


class Encoder(nn.Module):
    """
    The transformer encoder module.
    """

    def __init__(self, config):
        super().__init__()
        # Create a list of transformer blocks
        self.blocks = nn.ModuleList([])
        for _ in range(config["num_hidden_layers"]):
            block = Block(config)
            self.blocks.append(block)

    def forward(self, x, output_attentions=False):
        # Calculate the transformer block's output for each block
        all_attentions = []
        for block in self.blocks:
            x, attention_probs = block(x, output_attentions=output_attentions)
            if output_attentions:
                all_attentions.append(attention_probs)
        # Return the encoder's output and the attention probabilities (optional)
        if not output_attentions:
            return (x, None)
        else:
            return (x, all_attentions)


class ViTForClassfication(nn.Module):
    """
    The ViT model for classification.
    """

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.image_size = config["image_size"]
        self.hidden_size = config["hidden_size"]
        self.num_classes = config["num_classes"]
        # Create the embedding module
        self.embedding = Embeddings(config)
        # Create the transformer encoder module
        self.encoder = Encoder(config)
        # Create a linear layer to project the encoder's output to the number of classes
        self.classifier = nn.Linear(self.hidden_size, self.num_classes)
        # Initialize the weights
        self.apply(self._init_weights)

    def forward(self, x, output_attentions=False):
        # Calculate the embedding output
        embedding_output = self.embedding(x)
        # Calculate the encoder's output
        encoder_output, all_attentions = self.encoder(embedding_output, output_attentions=output_attentions)
        # Calculate the logits, take the [CLS] token's output as features for classification
        logits = self.classifier(encoder_output[:, 0, :])
        # Return the logits and the attention probabilities (optional)
        if not output_attentions:
            return (logits, None)
        else:
            return (logits, all_attentions)
    
    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=self.config["initializer_range"])
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)
        elif isinstance(module, Embeddings):
            module.position_embeddings.data = nn.init.trunc_normal_(
                module.position_embeddings.data.to(torch.float32),
                mean=0.0,
                std=self.config["initializer_range"],
            ).to(module.position_embeddings.dtype)

            module.cls_token.data = nn.init.trunc_normal_(
                module.cls_token.data.to(torch.float32),
                mean=0.0,
                std=self.config["initializer_range"],
            ).to(module.cls_token.dtype)

# train.py
config = {
    "patch_size": 4,  # Input image size: 32x32 -> 8x8 patches
    "hidden_size": 48,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 4 * 48, # 4 * hidden_size
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "initializer_range": 0.02,
    "image_size": 32,
    "num_classes": 10, # num_classes of CIFAR10
    "num_channels": 3,
    "qkv_bias": True,
    "use_faster_attention": True,
}


# data.py's transforms, written out
def _random_resized_crop_flip(img, gen, size=32, scale=(0.8, 1.0), ratio=(3 / 4, 4 / 3)):
    if float(torch.rand((), generator=gen)) < 0.5:  # RandomHorizontalFlip(p=0.5)
        img = img.flip(-1)
    _, h, w = img.shape
    area = h * w
    for _ in range(10):  # RandomResizedCrop.get_params
        target_area = area * float(torch.empty(()).uniform_(scale[0], scale[1], generator=gen))
        log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
        aspect = math.exp(float(torch.empty(()).uniform_(log_ratio[0], log_ratio[1], generator=gen)))
        cw = round(math.sqrt(target_area * aspect))
        ch = round(math.sqrt(target_area / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            i = int(torch.randint(0, h - ch + 1, (), generator=gen))
            j = int(torch.randint(0, w - cw + 1, (), generator=gen))
            break
    else:
        i, j, ch, cw = 0, 0, h, w
    crop = img[:, i:i + ch, j:j + cw].unsqueeze(0)
    return F.interpolate(crop, size=(size, size), mode="bilinear", align_corners=False).squeeze(0)


def _normalize(img):
    return (img - 0.5) / 0.5


class StripeImages(torch.utils.data.Dataset):
    """10 classes: a colour pair and a stripe orientation/frequency per class, random phase, pixel noise; in [0, 1]
    (what ToTensor gives)."""

    def __init__(self, seed, n, train, bug=None):
        gen = torch.Generator().manual_seed(seed)
        self.train = train
        self.bug = bug
        self.gen = torch.Generator().manual_seed(seed + 11)
        fg = torch.rand(10, 3, generator=torch.Generator().manual_seed(123)) * 0.7 + 0.3
        bg = torch.rand(10, 3, generator=torch.Generator().manual_seed(321)) * 0.3
        self.targets = torch.randint(0, 10, (n,), generator=gen)
        grid = torch.arange(32).float()
        imgs = []
        for c in self.targets.tolist():
            period = 4 + 2 * (c % 3)
            phase = float(torch.rand((), generator=gen)) * period
            wave = (((grid + phase) % period) < period / 2).float()
            pattern = wave.view(1, 32).expand(32, 32) if c % 2 == 0 else wave.view(32, 1).expand(32, 32)
            imgs.append(bg[c].view(3, 1, 1) + (fg[c] - bg[c]).view(3, 1, 1) * pattern)
        self.data = (torch.stack(imgs) + 0.05 * torch.randn(n, 3, 32, 32, generator=gen)).clamp(0, 1)

    def __getitem__(self, i):
        img = self.data[i]
        if self.train:
            img = _random_resized_crop_flip(img, self.gen)
        if not (not self.train and self.bug == "test_not_normalized"):
            img = _normalize(img)
        return img, self.targets[i]

    def __len__(self):
        return len(self.targets)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    batch_size, lr = 32, 1e-2  # (port) batch_size 256
    trainset = StripeImages(seed, 640, train=True)
    testset = StripeImages(seed + 1000, 64, train=False, bug=bug)
    trainloader = torch.utils.data.DataLoader(trainset, batch_size=batch_size, shuffle=True, num_workers=0,
                                              generator=torch.Generator().manual_seed(seed))
    testloader = torch.utils.data.DataLoader(testset, batch_size=batch_size, shuffle=False, num_workers=0)

    # Create the model, optimizer, loss function and trainer
    model = ViTForClassfication(config)
    for module in model.modules():  # (port) the bug switch, per instance
        module.bug = bug
    optimizer = optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-2)
    loss_fn = nn.CrossEntropyLoss()

    state = {"it": iter(trainloader)}

    def train_step():
        # one iteration of Trainer.train_epoch's loop
        try:
            batch = next(state["it"])
        except StopIteration:
            state["it"] = iter(trainloader)
            batch = next(state["it"])
        model.train()
        images, labels = batch
        # Zero the gradients
        optimizer.zero_grad()
        # Calculate the loss
        loss = loss_fn(model(images)[0], labels)
        # Backpropagate the loss
        loss.backward()
        # Update the model's parameters
        optimizer.step()
        return loss.detach()

    @torch.no_grad()
    def evaluate(testloader):
        model.eval()
        total_loss = 0
        correct = 0
        with torch.no_grad():
            for batch in testloader:
                images, labels = batch

                # Get predictions
                logits, _ = model(images)

                # Calculate the loss
                loss = loss_fn(logits, labels)
                total_loss += loss.item() * len(images)

                # Calculate the accuracy
                predictions = torch.argmax(logits, dim=1)
                correct += torch.sum(predictions == labels).item()
        accuracy = correct / len(testloader.dataset)
        avg_loss = total_loss / len(testloader.dataset)
        model.train()
        return accuracy, avg_loss

    gen = torch.Generator().manual_seed(seed + 2)
    idx = torch.randperm(len(trainset), generator=gen)[:batch_size]
    xb = torch.stack([trainset[int(i)][0] for i in idx])
    yb = trainset.targets[idx]

    return Program(name="tintnvit_cifar", model=model, batch=(xb, yb),
                   loss_fn=lambda out, y: loss_fn(out[0], y), optimizer=optimizer, train_step=train_step,
                   eval_fn=lambda m, b: evaluate(testloader)[0], loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic layout slip: the (B, C, H', W') patch projection flattened and reshaped to (B, patches, hidden)
    # instead of transposed: every "patch token" mixes channels of several patches.
    Bug("patches_viewed_not_transposed", functools.partial(_build, bug="patches_viewed_not_transposed"),
        "tensor_trace", ("embedding.patch_embeddings",)),
    # classic: the attention softmax taken over the queries (dim=-2) instead of the keys: the rows of the
    # attention matrix no longer sum to one.
    Bug("softmax_over_queries", functools.partial(_build, bug="softmax_over_queries"), "attention_check",
        ("encoder.blocks.0.attention",)),
    # classic: the test transform without Normalize: the model is evaluated on [0, 1] inputs it was never trained
    # on ([-1, 1] in training).
    Bug("test_not_normalized", functools.partial(_build, bug="test_not_normalized"), "six_claims", ("EVALUATION",)),
]
