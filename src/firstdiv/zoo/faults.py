"""The faults: each re-creates one bug the way it appears in user code, by replacing one or two
parts of a reference :class:`~firstdiv.zoo._program.Recipe`.

"deepcrime" faults re-implement DeepCrime's mutation operators (Humbatova et al., ISSTA 2021:
remove activation, change learning rate, change loss, change weight initialisation, remove bias,
change labels); "book" faults are the failures the book's appendix and chapter 31 describe.
The catalog itself (what each fault is and where the instruments must localize it) is
:data:`firstdiv.zoo.catalog.FAULTS`; this module holds the code of the bugs, the faults of shape and
meaning live in :mod:`firstdiv.zoo.shape_faults`, those of speed, memory, compilation and deployment in
:mod:`firstdiv.zoo.speed_faults`, and the data-pipeline faults in :mod:`firstdiv.zoo.pipeline`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from . import _program, models, references, shape_faults, speed_faults
from ._program import Batch, Data, LossFn, Recipe

Injection = Callable[[Recipe], Recipe]

# ---- models with the bug in forward or __init__ ------------------------------------------------


class DetachedMLP(models.MLPClassifier):
    """fault ``detach``: fc1's activation is detached before fc2."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc2(self.act(self.fc1(x)).detach())  # bug: .detach() cuts fc1 off the graph
        return self.fc3(self.act(h))


class AuxHeadMLP(models.MLPClassifier):
    """fault ``unused_branch``: an ``aux`` head whose branch runs only when ``use_aux`` is set."""

    def __init__(self, use_aux: bool = False) -> None:
        super().__init__()
        self.aux = nn.Linear(self.fc1.out_features, references.CLASSES)  # an auxiliary head from hidden layer 1
        self.use_aux = use_aux  # bug: never switched on, so aux never runs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h1 = self.act(self.fc1(x))
        logits = self.fc3(self.act(self.fc2(h1)))
        if self.use_aux:
            logits = logits + self.aux(h1)
        return logits


class LinearMLP(models.MLPClassifier):
    """fault ``remove_activation``: the ReLUs are identities, so the model is affine."""

    def __init__(self) -> None:
        super().__init__()
        self.act = nn.Identity()  # bug: the activation was removed (DeepCrime "remove activation")


class SoftmaxMLP(models.MLPClassifier):
    """fault ``softmax_before_ce``: forward returns probabilities."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(super().forward(x), dim=1)  # bug: probabilities, then cross_entropy again


class NoGradStemCNN(models.SmallCNN):
    """fault ``no_grad_region``: the first conv block runs under ``torch.no_grad()``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # bug: "saves memory" in the stem, but conv1 and bn1 now get no gradient
            x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = self.pool(torch.relu(self.bn2(self.conv2(x))))
        return self.head(x.flatten(1))


class ListBlocksLM(models.TinyCausalLM):
    """fault ``modules_in_list``: ``blocks`` is a Python list of Blocks."""

    def make_blocks(self, dim: int, heads: int, layers: int,  # type: ignore[override]
                    attention: type[models.CausalSelfAttention]) -> list[models.Block]:
        return [models.Block(dim, heads, attention) for _ in range(layers)]  # bug: a plain list registers nothing


class BucketedRegressor(models.MLPRegressor):
    """fault ``integer_cast``: fc1's activation goes through ``.long()``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(x))
        h = (h * 8).round().long().float() / 8  # bug: integer "levels" carry no gradient back to fc1
        return self.fc3(self.act(self.fc2(h)))


class ScaledRegressor(models.MLPRegressor):
    """fault ``plain_attribute_tensor``: an output ``scale`` kept as a plain tensor attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.ones(1, requires_grad=True)  # bug: a plain tensor, not nn.Parameter: never registered

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.scale


class LinearRegressor(nn.Module):
    """fault ``remove_bias``: one bias-free linear layer ``fc1``."""

    def __init__(self, in_features: int = 2) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, 1, bias=False)  # bug: no bias (DeepCrime "remove bias")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc1(x)


# ---- training steps, losses, data and init code with the bug ----------------------------------

def step_without_zero_grad(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn,
                           next_batch: Callable[[], Batch]) -> Callable[[], float]:
    """fault ``missing_zero_grad``: the standard step without ``optimizer.zero_grad()``."""
    def train_step() -> float:
        inputs, targets = next_batch()
        loss = loss_fn(model(inputs), targets)
        loss.backward()  # bug: no optimizer.zero_grad(), gradients pile up across steps
        optimizer.step()
        return loss.item()
    return train_step


def step_zero_grad_before_step(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn,
                               next_batch: Callable[[], Batch]) -> Callable[[], float]:
    """fault ``zero_grad_before_step``: ``optimizer.zero_grad()`` between backward and step."""
    def train_step() -> float:
        inputs, targets = next_batch()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.zero_grad()  # bug: clears the gradients backward just produced
        optimizer.step()
        return loss.item()
    return train_step


def negated_cross_entropy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """fault ``flipped_loss_sign``."""
    return -F.cross_entropy(outputs, targets)  # bug: maximizes the loss


def mse_on_first_output(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """fault ``change_loss``: outputs ``(N, K)`` logits, targets ``(N,)`` class ids."""
    return F.mse_loss(outputs[:, 0], targets.float())  # bug: DeepCrime "change loss" on a classifier


def summed_mse(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """fault ``sum_reduction``."""
    return F.mse_loss(outputs, targets, reduction="sum")  # bug: sum over the batch, lr tuned for the mean


#: the dataset's class ids as the (buggy) label file maps them: true class c is stored as LABEL_MAP[c]
LABEL_MAP = torch.tensor([1, 2, 3, 0])


def relabelled_mlp_data(gen: torch.Generator) -> Data:
    """fault ``change_labels``: mlp data whose labels went through LABEL_MAP; the probe keeps the true rule."""
    data = references.mlp_data(gen)
    return Data(data.inputs, LABEL_MAP[data.targets], data.task_probe)  # bug: shifted class mapping


def unmasked_lm_data(gen: torch.Generator) -> Data:
    """fault ``empty_mask``: the padding test is inverted, so every target is IGNORE_INDEX."""
    tokens, rule = references.lm_tokens(gen)
    inputs, targets = tokens[:, :-1].clone(), tokens[:, 1:].clone()
    targets = targets.masked_fill(targets != references.PAD, references.IGNORE_INDEX)  # bug: != where == was meant
    return Data(inputs, targets, rule)


def unshifted_lm_data(gen: torch.Generator) -> Data:
    """fault ``target_not_shifted``."""
    tokens, rule = references.lm_tokens(gen)
    inputs, targets = tokens[:, :-1].clone(), tokens[:, :-1].clone()  # bug: targets are the inputs, not the next tokens
    return Data(inputs, targets, rule)


def offset_regression_data(gen: torch.Generator) -> Data:
    """fault ``remove_bias``: regression data (and rule) shifted by +20."""
    return references.regression_data(gen, offset=20.0)  # targets centred on 20: only a bias can reach them


def zero_init(model: nn.Module, gen: torch.Generator) -> None:
    """fault ``zero_init``: the user's init code zeroes fc1 and fc2."""
    for layer in (model.fc1, model.fc2):
        nn.init.zeros_(layer.weight)  # bug: every hidden unit starts (and stays) at zero
        nn.init.zeros_(layer.bias)


def constant_init(model: nn.Module, gen: torch.Generator) -> None:
    """fault ``symmetric_init``: the user's init code sets fc1 and fc2 weights to one constant."""
    for layer in (model.fc1, model.fc2):
        nn.init.constant_(layer.weight, 0.1)  # bug: identical units receive identical gradients
        nn.init.zeros_(layer.bias)


def evaluate_without_eval_mode(model: nn.Module, batch: Batch) -> float:
    """fault ``eval_in_train_mode``: accuracy computed without ``model.eval()``."""
    inputs, targets = batch
    with torch.no_grad():  # bug: no model.eval(): BatchNorm uses (and updates) batch statistics
        predictions = model(inputs).argmax(dim=-1)
    return (predictions == targets).float().mean().item()


def _sgd(lr: float, params: Callable[[nn.Module], list[nn.Parameter]] = lambda m: list(m.parameters()),
         ) -> Callable[[nn.Module], torch.optim.Optimizer]:
    return lambda model: torch.optim.SGD(params(model), lr=lr)


def _fc2_fc3_only(model: nn.Module) -> list[nn.Parameter]:
    return [*model.fc2.parameters(), *model.fc3.parameters()]  # bug: fc1 left out of the optimizer


def _stale_optimizer(recipe: Recipe) -> Recipe:
    # bug: the optimizer is built from the pretrained model, and only then is the head replaced
    return recipe.replace(prepare=_program.no_user_code, after_optimizer=references.replace_head)


INJECTIONS: dict[str, Injection] = {
    "missing_zero_grad": lambda r: r.replace(train_step=step_without_zero_grad),
    "zero_grad_before_step": lambda r: r.replace(train_step=step_zero_grad_before_step),
    "detach": lambda r: r.replace(model=DetachedMLP),
    "no_grad_region": lambda r: r.replace(model=NoGradStemCNN),
    "integer_cast": lambda r: r.replace(model=BucketedRegressor),
    "unused_branch": lambda r: r.replace(model=AuxHeadMLP),
    "stale_optimizer": _stale_optimizer,
    "optimizer_subset": lambda r: r.replace(optimizer=_sgd(references.MLP_LR, _fc2_fc3_only)),
    "plain_attribute_tensor": lambda r: r.replace(model=ScaledRegressor),
    "modules_in_list": lambda r: r.replace(model=lambda: ListBlocksLM(references.VOCAB, context=references.CONTEXT)),
    "remove_activation": lambda r: r.replace(model=LinearMLP),
    "zero_init": lambda r: r.replace(prepare=zero_init),
    "symmetric_init": lambda r: r.replace(prepare=constant_init),
    "eval_in_train_mode": lambda r: r.replace(eval_fn=evaluate_without_eval_mode),
    "softmax_before_ce": lambda r: r.replace(model=SoftmaxMLP),
    "sum_reduction": lambda r: r.replace(loss_fn=summed_mse),
    "flipped_loss_sign": lambda r: r.replace(loss_fn=negated_cross_entropy),
    "empty_mask": lambda r: r.replace(data=unmasked_lm_data),
    "change_labels": lambda r: r.replace(data=relabelled_mlp_data),
    "target_not_shifted": lambda r: r.replace(data=unshifted_lm_data),
    "change_learning_rate": lambda r: r.replace(optimizer=_sgd(1e-7)),
    "remove_bias": lambda r: r.replace(model=LinearRegressor, data=offset_regression_data),
    "change_loss": lambda r: r.replace(loss_fn=mse_on_first_output),
    **shape_faults.INJECTIONS,
    **speed_faults.INJECTIONS,
}
