"""The five clean reference programs: synthetic data with a known labelling rule, a loss, an
optimizer, the user's one-step training closure and evaluation function.

Each ``*_recipe()`` returns the program as parts (:class:`~firstdiv.zoo._program.Recipe`); faults in
:mod:`firstdiv.zoo.faults` replace a part. Data comes only from the generator passed in.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from . import models
from ._program import AttentionCase, Batch, CompileCase, Data, LossFn, Recipe, VariantsCase, seeded

CLASSES = 4
IGNORE_INDEX = -100
PAD = 0  # the language model's padding id; the synthetic corpus never emits it
VOCAB, CONTEXT, LM_BATCH = 16, 12, 16
MLP_LR, REGRESSION_LR = 0.5, 0.05
CNN_BATCH = 4  # the cnn loader's batch size: small, so a slow Dataset shows within a few batches
#: the transformer's deployed input sequence: COMPILE_BATCHES batches of COMPILE_ROWS sequences
COMPILE_BATCHES, COMPILE_ROWS = 3, 5


# ---- the user's training step and evaluation --------------------------------------------------

def standard_step(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn,
                  next_batch: Callable[[], Batch]) -> Callable[[], float]:
    """The training step as users write it: zero_grad, forward, loss, backward, step."""
    def train_step() -> float:
        inputs, targets = next_batch()
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss.item()
    return train_step


def evaluate_accuracy(model: nn.Module, batch: Batch) -> float:
    """Fraction of supervised positions whose argmax logit is the target; eval mode, mode restored."""
    inputs, targets = batch
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            predictions = model(inputs).argmax(dim=-1)
    finally:
        model.train(was_training)
    supervised = targets != IGNORE_INDEX
    return (predictions == targets)[supervised].float().mean().item()


def evaluate_mse(model: nn.Module, batch: Batch) -> float:
    """Mean squared error of the predictions; eval mode, mode restored."""
    inputs, targets = batch
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return F.mse_loss(model(inputs), targets).item()
    finally:
        model.train(was_training)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy: logits ``(B, T, V)``, targets ``(B, T)``; IGNORE_INDEX is not supervised."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX)


# ---- synthetic tasks with known rules ----------------------------------------------------------

def mlp_data(gen: torch.Generator, n: int = 64, features: int = 16) -> Data:
    """Gaussian inputs labelled by a fixed random two-layer teacher (argmax over CLASSES scores)."""
    mixing = torch.randn(features, 16, generator=gen) / features ** 0.5
    readout = torch.randn(16, CLASSES, generator=gen)

    def rule(inputs: torch.Tensor) -> torch.Tensor:
        return (torch.tanh(inputs @ mixing) @ readout).argmax(dim=1)

    inputs = torch.randn(n, features, generator=gen)
    return Data(inputs, rule(inputs), rule)


def brightest_quadrant(images: torch.Tensor) -> torch.Tensor:
    """The cnn's labelling rule: which 6x6 quadrant of a ``(N, 1, 12, 12)`` image is brightest (0..3)."""
    quadrants = images.unfold(2, 6, 6).unfold(3, 6, 6).mean(dim=(-1, -2))  # (N, 1, 2, 2)
    return quadrants.flatten(1).argmax(dim=1)


def cnn_data(gen: torch.Generator, n: int = 256) -> Data:
    """Noisy 12x12 images with one brightened quadrant, labelled by :func:`brightest_quadrant`."""
    images = 0.5 * torch.randn(n, 1, 12, 12, generator=gen)
    chosen = torch.randint(0, CLASSES, (n,), generator=gen)
    for quadrant in range(CLASSES):
        row, col = divmod(quadrant, 2)
        images[chosen == quadrant, :, 6 * row:6 * row + 6, 6 * col:6 * col + 6] += 1.0
    return Data(images, brightest_quadrant(images), brightest_quadrant)


def cnn_loader(data: Data, gen: torch.Generator, dataset: type[TensorDataset] = TensorDataset) -> tuple[DataLoader, Batch]:
    """Shuffled batches of CNN_BATCH from a ``dataset`` over the data (shuffling from ``gen``, no worker
    processes); the fixed batch is the first 32 examples."""
    loader = DataLoader(dataset(data.inputs, data.targets), batch_size=CNN_BATCH, shuffle=True, generator=gen)
    return loader, (data.inputs[:32], data.targets[:32])


def finetune_data(gen: torch.Generator, n: int = 64, features: int = 16) -> Data:
    """The new task: Gaussian inputs labelled by a fixed random linear rule over CLASSES."""
    weights = torch.randn(features, CLASSES, generator=gen)

    def rule(inputs: torch.Tensor) -> torch.Tensor:
        return (inputs @ weights).argmax(dim=1)

    inputs = torch.randn(n, features, generator=gen)
    return Data(inputs, rule(inputs), rule)


def lm_tokens(gen: torch.Generator) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """Sequences ``(LM_BATCH, CONTEXT + 1)`` following a fixed successor map over ids 1..VOCAB-1, and
    the rule ``tokens -> next tokens``. PAD (0) never occurs."""
    successor = torch.zeros(VOCAB, dtype=torch.long)
    successor[1:] = torch.randperm(VOCAB - 1, generator=gen) + 1
    tokens = torch.empty(LM_BATCH, CONTEXT + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(1, VOCAB, (LM_BATCH,), generator=gen)
    for t in range(CONTEXT):
        tokens[:, t + 1] = successor[tokens[:, t]]
    return tokens, lambda inputs: successor[inputs]


def lm_data(gen: torch.Generator) -> Data:
    """Inputs are tokens[:, :-1], targets the next token tokens[:, 1:]; padding is not supervised."""
    tokens, rule = lm_tokens(gen)
    inputs, targets = tokens[:, :-1].clone(), tokens[:, 1:].clone()
    targets = targets.masked_fill(targets == PAD, IGNORE_INDEX)
    return Data(inputs, targets, rule)


def regression_rule(inputs: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
    """Target ``(N, 1)``: sin of one projection plus half of another (``direction`` is ``(features, 2)``)."""
    projected = inputs @ direction
    return (torch.sin(projected[:, :1]) + 0.5 * projected[:, 1:]).contiguous()


def regression_data(gen: torch.Generator, n: int = 64, features: int = 2, offset: float = 0.0) -> Data:
    """Gaussian inputs and :func:`regression_rule` targets (plus ``offset``)."""
    direction = torch.randn(features, 2, generator=gen) / features ** 0.5

    def rule(inputs: torch.Tensor) -> torch.Tensor:
        return regression_rule(inputs, direction) + offset

    inputs = torch.randn(n, features, generator=gen)
    return Data(inputs, rule(inputs), rule)


# ---- what the shape and meaning instruments get ------------------------------------------------

#: named-axis contracts (module path, "" = model output) that hold on every clean reference
MLP_CONTRACTS = {"fc1": "B H", "fc2": "B H", "": "B K"}
CNN_CONTRACTS = {"conv1": "B C H W", "": "B K"}
FINETUNE_CONTRACTS = {"backbone": "B D", "": "B K"}
LM_CONTRACTS = {"embed": "B T D", "blocks.0": "B T D", "lm_head": "B T V"}
REGRESSION_CONTRACTS = {"fc1": "B H", "fc2": "B H", "": "B 1"}


def first_attention(model: models.TinyCausalLM, tokens: torch.Tensor) -> AttentionCase:
    """The first block's attention and the hidden state ``(B, T, E)`` it sees for ``tokens``:
    ln1(token embedding + position embedding), computed under no_grad (no randomness involved)."""
    block = model.blocks[0]
    with torch.no_grad():
        hidden = block.ln1(model.embed(tokens) + model.pos(torch.arange(tokens.shape[1])))
    return block.attn, (hidden,), {"num_heads": block.attn.heads, "causal": True}


# ---- what the speed, memory, compilation and deployment instruments get ---------------------------

def lm_compile_case(model: nn.Module, data: Data, lengths: tuple[int, ...] = (CONTEXT,) * COMPILE_BATCHES,
                    dynamic: bool | None = None) -> CompileCase:
    """The language model as the user compiles it and the batches it then serves: batch i holds
    sequences ``[COMPILE_ROWS * i, COMPILE_ROWS * (i + 1))`` cut to ``lengths[i]`` tokens; the eager
    backend (guards and recompilations do not depend on the backend) and ``dynamic``."""
    rows = COMPILE_ROWS
    inputs_seq = [data.inputs[rows * i:rows * (i + 1), :length].clone() for i, length in enumerate(lengths)]
    return model, inputs_seq, {"backend": "eager", "dynamic": dynamic}


def int8_variants(model: nn.Module, inputs: torch.Tensor) -> VariantsCase:
    """The model as trained (eager) and its dynamic int8 copy, with the per-variant tolerances
    :func:`firstdiv.instruments.compare_outputs.variants.variants` gives them."""
    from ..instruments.compare_outputs.variants import variants  # on first use only: building a program needs no instrument

    built, tolerances = variants(model, kinds=("eager", "int8"))
    return built, inputs, {"tolerances": tolerances}


# ---- the five programs -------------------------------------------------------------------------

def replace_head(model: models.FineTuneClassifier, gen: torch.Generator) -> None:
    """Fine-tuning: swap the pretrained head for a freshly initialized one of the same shape."""
    model.head = seeded(nn.Linear(model.head.in_features, CLASSES), gen)


def mlp_recipe() -> Recipe:
    return Recipe(data=mlp_data, model=models.MLPClassifier, loss_fn=F.cross_entropy,
                  optimizer=lambda model: torch.optim.SGD(model.parameters(), lr=MLP_LR),
                  train_step=standard_step, eval_fn=evaluate_accuracy, contracts=MLP_CONTRACTS, features_at="fc3")


def cnn_recipe() -> Recipe:
    return Recipe(data=cnn_data, model=models.SmallCNN, loss_fn=F.cross_entropy,
                  optimizer=lambda model: torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                  train_step=standard_step, eval_fn=evaluate_accuracy, loader=cnn_loader,
                  contracts=CNN_CONTRACTS, features_at="head")


def finetune_recipe() -> Recipe:
    return Recipe(data=finetune_data, model=lambda: models.FineTuneClassifier(models.pretrained_backbone(), nn.Linear(32, CLASSES)),
                  loss_fn=F.cross_entropy, optimizer=lambda model: torch.optim.Adam(model.parameters(), lr=1e-2),
                  train_step=standard_step, eval_fn=evaluate_accuracy, prepare=replace_head,
                  contracts=FINETUNE_CONTRACTS, features_at="head")


def transformer_recipe() -> Recipe:
    return Recipe(data=lm_data, model=lambda: models.TinyCausalLM(VOCAB, context=CONTEXT), loss_fn=lm_loss,
                  optimizer=lambda model: torch.optim.AdamW(model.parameters(), lr=1e-2),
                  train_step=standard_step, eval_fn=evaluate_accuracy,
                  contracts=LM_CONTRACTS, features_at="lm_head", attention=first_attention, compile_case=lm_compile_case)


def regression_recipe() -> Recipe:
    return Recipe(data=regression_data, model=models.MLPRegressor, loss_fn=F.mse_loss,
                  optimizer=lambda model: torch.optim.SGD(model.parameters(), lr=REGRESSION_LR),
                  train_step=standard_step, eval_fn=evaluate_mse, contracts=REGRESSION_CONTRACTS, features_at="fc3",
                  variants_case=int8_variants)


RECIPES: dict[str, Callable[[], Recipe]] = {
    "mlp": mlp_recipe, "cnn": cnn_recipe, "finetune": finetune_recipe,
    "transformer": transformer_recipe, "regression": regression_recipe,
}
