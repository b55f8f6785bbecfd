"""Tiny models for the deployment corpus (``deploy_*.py``): Hugging Face models from small configs (random
weights) and plain torch models, each built from a seed the way user code builds them. ``make_cnn`` is also the
factory a fresh-process reload imports (``_deploy_common:make_cnn``): this folder is on ``sys.path`` in the test
process, and the fresh process inherits it through ``PYTHONPATH``."""

from __future__ import annotations

import types
import warnings
from typing import Any

import torch
from torch import nn

VOCAB = 64


def program(model: nn.Module, inputs: Any, **extra: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(model=model, inputs=inputs, **extra)


def _quiet() -> None:
    import transformers

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", message=".*deprecated.*")


def gpt2(seed: int) -> nn.Module:
    import transformers as tf

    _quiet()
    torch.manual_seed(seed)
    cfg = tf.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=32, bos_token_id=0, eos_token_id=0)
    return tf.GPT2LMHeadModel(cfg).eval()


def bert(seed: int) -> nn.Module:
    import transformers as tf

    _quiet()
    torch.manual_seed(seed)
    cfg = tf.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=32, num_labels=3)
    return tf.BertForSequenceClassification(cfg).eval()


def t5(seed: int, layers: int = 2) -> nn.Module:
    import transformers as tf

    _quiet()
    torch.manual_seed(seed)
    cfg = tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=layers, num_heads=4,
                      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return tf.T5ForConditionalGeneration(cfg).eval()


def llama(seed: int) -> nn.Module:
    import transformers as tf

    _quiet()
    torch.manual_seed(seed)
    cfg = tf.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                         bos_token_id=0, eos_token_id=1, pad_token_id=0)
    return tf.LlamaForCausalLM(cfg).eval()


def vit(seed: int) -> nn.Module:
    import transformers as tf

    _quiet()
    torch.manual_seed(seed)
    cfg = tf.ViTConfig(image_size=8, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=64, num_labels=3)
    return tf.ViTForImageClassification(cfg).eval()


def tokens(seed: int, batch: int = 2, length: int = 7) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.randint(2, VOCAB, (batch, length), generator=g)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.features(x)).flatten(1))


def make_cnn() -> nn.Module:
    """The factory a deployment script imports to rebuild the network before loading its weights."""
    return SmallCNN()


def trained_cnn(seed: int) -> nn.Module:
    """A CNN whose BatchNorm layers hold running statistics from a few training batches."""
    torch.manual_seed(seed)
    model = make_cnn()
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(8, 3, 8, 8) * 2 + 0.5)
    return model.eval()


def fold_conv_bn(conv: nn.Conv2d, bn: nn.BatchNorm2d, use_mean: bool = True) -> nn.Conv2d:
    """conv followed by an eval-mode BatchNorm as one conv: w' = w * g / sqrt(var + eps),
    b' = (b - mean) * g / sqrt(var + eps) + beta."""
    fused = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, bias=True)
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    bias = conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)
    mean = bn.running_mean if use_mean else torch.zeros_like(bn.running_mean)
    with torch.no_grad():
        fused.weight.copy_(conv.weight * scale.reshape(-1, 1, 1, 1))
        fused.bias.copy_((bias - mean) * scale + bn.bias)
    return fused


def folded_cnn(model: SmallCNN, use_mean: bool = True) -> nn.Module:
    """A deployment copy of the CNN with each conv+bn pair folded (the BatchNorm replaced by Identity)."""
    import copy

    out = copy.deepcopy(model)
    for i in (0, 3):
        out.features[i] = fold_conv_bn(model.features[i], model.features[i + 1], use_mean)
        out.features[i + 1] = nn.Identity()
    return out.eval()


class MLP(nn.Module):
    def __init__(self, d_in: int = 16, hidden: int = 32, d_out: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.fc2(self.act(self.fc1(x)))))


def mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return MLP().eval()
