"""The LightningModule of ashleve/lightning-hydra-template: ``MNISTLitModule`` wrapping ``SimpleDenseNet`` (three
Linear + BatchNorm1d + ReLU blocks and a Linear head on flattened 28x28 images), ``CrossEntropyLoss``, torchmetrics
``Accuracy``/``MeanMetric``/``MaxMetric`` objects updated in ``training_step``/``validation_step``, and
``configure_optimizers`` building the configured Adam(lr 1e-3, weight_decay 0) over ``self.trainer.model.parameters()``
with a ReduceLROnPlateau(mode min, factor 0.1, patience 10) monitored on ``val/loss`` every epoch (configs/model/
mnist.yaml, batch 128 from configs/data/mnist.yaml).

Source: https://github.com/ashleve/lightning-hydra-template
Commit: bddbc24b82ab6ccfa6243e815a49dc5bfe8d4144
Files: src/models/mnist_module.py, src/models/components/simple_dense_net.py, src/data/mnist_datamodule.py,
       configs/model/mnist.yaml, configs/data/mnist.yaml, configs/trainer/default.yaml
License: MIT (the README's License section; no LICENSE file in the stored snapshot)
Domain: Lightning module (image classification)

Deviations from the original:
- the module imports ``LightningModule`` from ``lightning``; only the ``pytorch_lightning`` distribution is installed
  here, which provides the same class; Hydra is not used: the optimizer and scheduler are the ``functools.partial``s
  the config's ``_partial_: true`` entries instantiate;
- the Trainer's fit loop is driven one batch at a time as Lightning's automatic optimization runs it: ``training_step``
  inside the optimizer closure, then the ``optimizer_zero_grad`` hook, then the module's ``backward``, all called by
  the ``optimizer_step`` hook (``optimizer.step(closure=...)``); with ``automatic_optimization`` off only
  ``training_step`` runs, as in Lightning. At the end of an epoch the validation loop runs (``eval()``,
  ``no_grad``, ``validation_step``, ``on_validation_epoch_end``, back to ``train()``), the scheduler steps on the
  validation loss and the epoch's metric objects are reset. A ``Trainer(barebones=True)`` is attached so that
  ``self.trainer.model`` and ``self.log`` work (barebones makes ``self.log`` a no-op); the sanity-check validation,
  callbacks, checkpointing and loggers are left out;
- sizes: SimpleDenseNet sizes as in configs/model/mnist.yaml (64/128/64); 1024 training and 128 validation images;
- data: MNIST is replaced by synthetic 28x28 one-channel "digits" made from ``seed`` (each class a fixed random
  stroke pattern, plus noise and a random intensity), already split; torchvision is not available, so the
  datamodule's ToTensor + Normalize((0.1307,), (0.3081,)) is written out; shuffled training DataLoader, no workers.
"""
# ruff: noqa: PIE790, RUF059, UP006, UP035  (the original's code style is kept as written)

from __future__ import annotations

import functools
import logging
import pathlib
import sys
import warnings
from typing import Any, Dict, Tuple

import torch
from pytorch_lightning import LightningModule, Trainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import MaxMetric, MeanMetric
from torchmetrics.classification.accuracy import Accuracy

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
BATCH_SIZE, N_TRAIN, N_VAL = 128, 1024, 128


# ---- src/models/components/simple_dense_net.py ---------------------------------------------------------------

class SimpleDenseNet(nn.Module):
    """A simple fully-connected neural net for computing predictions."""

    def __init__(
        self,
        input_size: int = 784,
        lin1_size: int = 256,
        lin2_size: int = 256,
        lin3_size: int = 256,
        output_size: int = 10,
        bug: str | None = None,
    ) -> None:
        super().__init__()

        layers = [
            nn.Linear(input_size, lin1_size),
            nn.BatchNorm1d(lin1_size),
            nn.ReLU(),
            nn.Linear(lin1_size, lin2_size),
            nn.BatchNorm1d(lin2_size),
            nn.ReLU(),
            nn.Linear(lin2_size, lin3_size),
            nn.BatchNorm1d(lin3_size),
            nn.ReLU(),
            nn.Linear(lin3_size, output_size),
        ]
        if bug == "softmax_in_net":
            layers.append(nn.Softmax(dim=1))  # "the network outputs probabilities", then CrossEntropyLoss on them
        self.model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch_size, channels, width, height = x.size()

        # (batch, 1, width, height) -> (batch, 1*width*height)
        x = x.view(batch_size, -1)

        return self.model(x)


# ---- src/models/mnist_module.py ------------------------------------------------------------------------------

class MNISTLitModule(LightningModule):
    """Example of a `LightningModule` for MNIST classification."""

    def __init__(
        self,
        net: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler,
        compile: bool,
        bug: str | None = None,
    ) -> None:
        super().__init__()

        # this line allows to access init params with 'self.hparams' attribute
        # also ensures init params will be stored in ckpt
        self.save_hyperparameters(logger=False, ignore=["bug"])
        if bug == "automatic_optimization_off":
            self.automatic_optimization = False  # left in from a GAN module that steps its optimizers by hand

        self.net = net

        # loss function
        self.criterion = torch.nn.CrossEntropyLoss()

        # metric objects for calculating and averaging accuracy across batches
        self.train_acc = Accuracy(task="multiclass", num_classes=10)
        self.val_acc = Accuracy(task="multiclass", num_classes=10)
        self.test_acc = Accuracy(task="multiclass", num_classes=10)

        # for averaging loss across batches
        self.train_loss = MeanMetric()
        self.val_loss = MeanMetric()
        self.test_loss = MeanMetric()

        # for tracking best so far validation accuracy
        self.val_acc_best = MaxMetric()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def on_train_start(self) -> None:
        """Lightning hook that is called when training begins."""
        # by default lightning executes validation step sanity checks before training starts,
        # so it's worth to make sure validation metrics don't store results from these checks
        self.val_loss.reset()
        self.val_acc.reset()
        self.val_acc_best.reset()

    def model_step(
        self, batch: Tuple[torch.Tensor, torch.Tensor]
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, y = batch
        logits = self.forward(x)
        loss = self.criterion(logits, y)
        preds = torch.argmax(logits, dim=1)
        return loss, preds, y

    def training_step(
        self, batch: Tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        loss, preds, targets = self.model_step(batch)

        # update and log metrics
        self.train_loss(loss)
        self.train_acc(preds, targets)
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True, prog_bar=True)

        # return loss or backpropagation will fail
        return loss

    def on_train_epoch_end(self) -> None:
        "Lightning hook that is called when a training epoch ends."
        pass

    def validation_step(self, batch: Tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        loss, preds, targets = self.model_step(batch)

        # update and log metrics
        self.val_loss(loss)
        self.val_acc(preds, targets)
        self.log("val/loss", self.val_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("val/acc", self.val_acc, on_step=False, on_epoch=True, prog_bar=True)

    def on_validation_epoch_end(self) -> None:
        "Lightning hook that is called when a validation epoch ends."
        acc = self.val_acc.compute()  # get current val acc
        self.val_acc_best(acc)  # update best so far val acc
        # log `val_acc_best` as a value through `.compute()` method, instead of as a metric object
        # otherwise metric would be reset by lightning after each epoch
        self.log("val/acc_best", self.val_acc_best.compute(), sync_dist=True, prog_bar=True)

    def setup(self, stage: str) -> None:
        if self.hparams.compile and stage == "fit":
            self.net = torch.compile(self.net)

    def configure_optimizers(self) -> Dict[str, Any]:
        optimizer = self.hparams.optimizer(params=self.trainer.model.parameters())
        if self.hparams.scheduler is not None:
            scheduler = self.hparams.scheduler(optimizer=optimizer)
            return {
                "optimizer": optimizer,
                "lr_scheduler": {
                    "scheduler": scheduler,
                    "monitor": "val/loss",
                    "interval": "epoch",
                    "frequency": 1,
                },
            }
        return {"optimizer": optimizer}


# ---- data: the datamodule's splits and transforms on synthetic digits ----------------------------------------

def make_digits(seed: int):
    g = torch.Generator().manual_seed(seed)
    templates = (torch.rand(10, 1, 28, 28, generator=g) < 0.2).float()
    templates = torch.nn.functional.avg_pool2d(templates, 3, stride=1, padding=1).clamp(0, 1)

    def sample(n):
        labels = torch.randint(10, (n,), generator=g)
        scale = 0.6 + 0.4 * torch.rand(n, 1, 1, 1, generator=g)
        images = (templates[labels] * scale + 0.15 * torch.rand(n, 1, 28, 28, generator=g)).clamp(0, 1)
        return images, labels

    def nearest_template(x):
        raw = x * 0.3081 + 0.1307  # undo Normalize
        flat, t = raw.flatten(1), templates.flatten(1)
        cos = (flat @ t.T) / (flat.norm(dim=1, keepdim=True) * t.norm(dim=1) + 1e-8)
        return cos.argmax(dim=1)

    return sample(N_TRAIN), sample(N_VAL), nearest_template


def transforms(images):
    """transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))]) on [0, 1] images."""
    return (images - 0.1307) / 0.3081


def _build(seed, bug=None):
    torch.manual_seed(seed)
    (train_x, train_y), (val_x, val_y), nearest_template = make_digits(seed)
    data_train = TensorDataset(transforms(train_x), train_y)
    data_val = TensorDataset(transforms(val_x), val_y)
    train_dataloader = DataLoader(dataset=data_train, batch_size=BATCH_SIZE, num_workers=0, pin_memory=False,
                                  shuffle=True, generator=torch.Generator().manual_seed(seed))
    val_dataloader = DataLoader(dataset=data_val, batch_size=BATCH_SIZE, num_workers=0, pin_memory=False,
                                shuffle=False)

    # hydra.utils.instantiate(cfg.model) with configs/model/mnist.yaml
    net = SimpleDenseNet(input_size=784, lin1_size=64, lin2_size=128, lin3_size=64, output_size=10, bug=bug)
    module = MNISTLitModule(
        net=net,
        optimizer=functools.partial(torch.optim.Adam, lr=0.001, weight_decay=0.0),
        scheduler=functools.partial(torch.optim.lr_scheduler.ReduceLROnPlateau, mode="min", factor=0.1, patience=10),
        compile=False,
        bug=bug,
    )

    # the pieces of Trainer.fit that the step-by-step loop below needs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(barebones=True, accelerator="cpu", devices=1, max_epochs=10, min_epochs=1,
                          check_val_every_n_epoch=1, deterministic=False)
    trainer.strategy.connect(module)
    module.trainer = trainer
    module.setup("fit")
    config = module.configure_optimizers()
    optimizer = config["optimizer"]
    scheduler = config["lr_scheduler"]["scheduler"]

    state = {"it": None, "epoch": 0, "batch_idx": 0, "started": False}

    def validation_epoch():
        module.eval()
        with torch.no_grad():
            for batch_idx, batch in enumerate(val_dataloader):
                module.validation_step(batch, batch_idx)
            module.on_validation_epoch_end()
        module.train()

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of a training epoch
                module.on_train_epoch_end()
                validation_epoch()
                scheduler.step(module.val_loss.compute())  # interval "epoch", monitor "val/loss"
                for metric in (module.train_loss, module.train_acc, module.val_loss, module.val_acc):
                    metric.reset()
                state["epoch"] += 1
            module.train()
            state["it"], state["batch_idx"] = iter(train_dataloader), 0
            return next(state["it"])

    def train_step():
        if not state["started"]:
            module.on_train_start()
            state["started"] = True
        batch = next_batch()
        batch_idx = state["batch_idx"]
        state["batch_idx"] += 1
        if not module.automatic_optimization:
            return module.training_step(batch, batch_idx).detach()

        result = {}

        def closure():
            loss = module.training_step(batch, batch_idx)
            module.optimizer_zero_grad(state["epoch"], batch_idx, optimizer)
            module.backward(loss)
            result["loss"] = loss.detach().clone()
            return result["loss"]

        module.optimizer_step(state["epoch"], batch_idx, optimizer, optimizer_closure=closure)
        return result["loss"]

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            _loss, preds, targets = model.model_step(batch)
        model.train()
        return float((preds == targets).float().mean())

    first = next(iter(DataLoader(data_train, batch_size=BATCH_SIZE)))
    return Program(name="lightninghydra_mnist", model=module, batch=(first[0], first[1]), loss_fn=module.criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=nearest_template,
                   task="classification", loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # a Softmax appended to the network's head: CrossEntropyLoss receives probabilities as logits.
    Bug("softmax_in_net", functools.partial(_build, bug="softmax_in_net"), "learning_ledger", ("OBJECTIVE",)),
    # `self.automatic_optimization = False` left in the module: Lightning then runs training_step only, and nothing
    # calls backward or step, so no parameter ever changes while the loss is logged as usual.
    Bug("automatic_optimization_off", functools.partial(_build, bug="automatic_optimization_off"), "step_probe",
        (), kind="step.no_optimizer_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
