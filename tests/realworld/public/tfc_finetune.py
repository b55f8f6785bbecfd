# ruff: noqa: UP008, PLR0402, UP004, UP034
"""TF-C (time-frequency consistency, Zhang et al., NeurIPS 2022), the fine-tuning stage of ``main.py``'s default
``--training_mode fine_tune_test``: two transformer encoders, one on the raw series and one on its FFT magnitude,
each with a projector into a shared space; a classifier on the concatenated projections; the loss is the
classifier's cross-entropy plus the time-frequency NT-Xent (``NTXentLoss_poly``) between the two projections plus
0.1 x the within-domain NT-Xent terms, with two Adam optimizers (encoders, classifier) and ``ReduceLROnPlateau`` on
the epoch's fine-tuning loss.

Source: https://github.com/mims-harvard/TFC-pretraining
Commit: 96675826e9ef234a9b01cc63d484c66cb0441bc0
Files: ``code/TFC/model.py`` (``TFC``, ``target_classifier``), ``code/TFC/loss.py`` (``NTXentLoss_poly``),
``code/TFC/trainer.py`` (``Trainer``, ``model_finetune``, ``model_test``, ``model_pretrain``), ``code/TFC/dataloader.py``
(``Load_Dataset``, ``data_generator``), ``code/TFC/main.py``, ``code/config_files/SleepEEG_Configs.py``
License: MIT (Copyright (c) 2022 Machine Learning for Medicine and Science @ Harvard; full text in
LICENSES/mims-harvard-TFC-pretraining.txt)
Domain: time series classification (transformer encoders in time and frequency, contrastive consistency loss)

Kept as written: ``TFC`` (``TransformerEncoderLayer(TSlength_aligned, dim_feedforward=2 * TSlength_aligned,
nhead=2)`` on ``[B, 1, T]`` inputs, sequence-first as the default ``batch_first=False`` reads them, two layers per
domain, the Linear / BatchNorm / ReLU / Linear projectors to 128), ``target_classifier`` (sigmoid hidden layer),
``NTXentLoss_poly`` (cosine similarity, temperature 0.2, the poly term with ``epsilon = batch_size``),
``model_finetune``'s loop body (both ``zero_grad``, the two forwards, ``loss_t``, ``loss_f``, ``l_TF``, the unused
``loss_c``, ``loss = loss_p + l_TF + lam * (loss_t + loss_f)`` with ``lam = 0.1``, backward, both steps),
``Trainer``'s ``scheduler.step(valid_loss)`` per epoch, ``Load_Dataset`` (shuffle of the zipped samples and labels,
first channel and first ``TSlength_aligned`` steps, ``fft.fft(x).abs()``, the unaugmented copies returned as
``aug1`` / ``aug1_f`` outside pre-training), Adam with betas (0.9, 0.99), weight decay 3e-4, ``drop_last``.

Deviations from the original:
- the Epilepsy target set (``datasets/Epilepsy/train.pt``) is not here: a synthetic two-class set made from
  ``seed``: 160 fine-tuning and 96 test series; class 1 carries a fast oscillation burst at a random position, class 0
  a slow wave of random phase, both with Gaussian noise; the rule is visible in both domains;
- sizes for 2 CPU cores: ``TSlength_aligned`` 178 -> 64 (so d_model 64, feed-forward 128), ``target_batch_size``
  60 -> 32; ``num_classes_target`` 2 as for Epilepsy;
- no pre-trained checkpoint is loaded (``fine_tune_test`` reads ``ckp_last.pt`` of a pre-training run): the encoders
  start from their initialization, the case the loop's own comment ("if random initialization") names;
- ``Trainer``'s epoch loop is unrolled: one ``train_step`` is one fine-tuning batch; at the end of an epoch the
  scheduler steps on the epoch's mean loss; the checkpoint files, reload of the best model, KNN classifier and the
  scikit-learn metrics (not installed) are dropped; ``eval_fn`` is ``model_test``'s accuracy on the test set;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.fft as fft
import torch.nn as nn
from torch.nn import TransformerEncoder, TransformerEncoderLayer
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_FINETUNE, N_TEST = 160, 96


# ---------------------------------------------------------------- config_files/SleepEEG_Configs.py
class Context_Cont_configs(object):
    def __init__(self):
        self.temperature = 0.2
        self.use_cosine_similarity = True


class Config(object):
    def __init__(self):
        self.num_classes_target = 2
        self.TSlength_aligned = 64  # (port) 178
        self.num_epoch = 40
        self.beta1 = 0.9
        self.beta2 = 0.99
        self.lr = 3e-4
        self.drop_last = True
        self.batch_size = 128
        self.target_batch_size = 32  # (port) 60
        self.Context_Cont = Context_Cont_configs()


# ---------------------------------------------------------------- model.py
class TFC(nn.Module):
    def __init__(self, configs):
        super(TFC, self).__init__()

        encoder_layers_t = TransformerEncoderLayer(configs.TSlength_aligned, dim_feedforward=2*configs.TSlength_aligned, nhead=2, )
        self.transformer_encoder_t = TransformerEncoder(encoder_layers_t, 2)

        self.projector_t = nn.Sequential(
            nn.Linear(configs.TSlength_aligned, 256),
            nn.BatchNorm1d(256),
            nn.ReLU(),
            nn.Linear(256, 128)
        )

        encoder_layers_f = TransformerEncoderLayer(configs.TSlength_aligned, dim_feedforward=2*configs.TSlength_aligned,nhead=2,)
        self.transformer_encoder_f = TransformerEncoder(encoder_layers_f, 2)

        self.projector_f = nn.Sequential(
            nn.Linear(configs.TSlength_aligned, 256),
            nn.BatchNorm1d(256),
            nn.ReLU(),
            nn.Linear(256, 128)
        )

    def forward(self, x_in_t, x_in_f):
        """Use Transformer"""
        x = self.transformer_encoder_t(x_in_t)
        h_time = x.reshape(x.shape[0], -1)

        """Cross-space projector"""
        z_time = self.projector_t(h_time)

        """Frequency-based contrastive encoder"""
        f = self.transformer_encoder_f(x_in_f)
        h_freq = f.reshape(f.shape[0], -1)

        """Cross-space projector"""
        z_freq = self.projector_f(h_freq)

        return h_time, z_time, h_freq, z_freq


class target_classifier(nn.Module):
    def __init__(self, configs):
        super(target_classifier, self).__init__()
        self.logits = nn.Linear(2*128, 64)
        self.logits_simple = nn.Linear(64, configs.num_classes_target)

    def forward(self, emb):
        emb_flat = emb.reshape(emb.shape[0], -1)
        emb = torch.sigmoid(self.logits(emb_flat))
        pred = self.logits_simple(emb)
        return pred


# ---------------------------------------------------------------- loss.py
class NTXentLoss_poly(torch.nn.Module):

    def __init__(self, device, batch_size, temperature, use_cosine_similarity):
        super(NTXentLoss_poly, self).__init__()
        self.batch_size = batch_size
        self.temperature = temperature
        self.device = device
        self.softmax = torch.nn.Softmax(dim=-1)
        self.mask_samples_from_same_repr = self._get_correlated_mask().type(torch.bool)
        self.similarity_function = self._get_similarity_function(use_cosine_similarity)
        self.criterion = torch.nn.CrossEntropyLoss(reduction="sum")

    def _get_similarity_function(self, use_cosine_similarity):
        if use_cosine_similarity:
            self._cosine_similarity = torch.nn.CosineSimilarity(dim=-1)
            return self._cosine_simililarity
        else:
            return self._dot_simililarity

    def _get_correlated_mask(self):
        diag = np.eye(2 * self.batch_size)
        l1 = np.eye((2 * self.batch_size), 2 * self.batch_size, k=-self.batch_size)
        l2 = np.eye((2 * self.batch_size), 2 * self.batch_size, k=self.batch_size)
        mask = torch.from_numpy((diag + l1 + l2))
        mask = (1 - mask).type(torch.bool)
        return mask.to(self.device)

    @staticmethod
    def _dot_simililarity(x, y):
        v = torch.tensordot(x.unsqueeze(1), y.T.unsqueeze(0), dims=2)
        return v

    def _cosine_simililarity(self, x, y):
        v = self._cosine_similarity(x.unsqueeze(1), y.unsqueeze(0))
        return v

    def forward(self, zis, zjs):
        representations = torch.cat([zjs, zis], dim=0)

        similarity_matrix = self.similarity_function(representations, representations)

        # filter out the scores from the positive samples
        l_pos = torch.diag(similarity_matrix, self.batch_size)
        r_pos = torch.diag(similarity_matrix, -self.batch_size)
        positives = torch.cat([l_pos, r_pos]).view(2 * self.batch_size, 1)

        negatives = similarity_matrix[self.mask_samples_from_same_repr].view(2 * self.batch_size, -1)

        logits = torch.cat((positives, negatives), dim=1)
        logits /= self.temperature

        """Criterion has an internal one-hot function. Here, make all positives as 1 while all negatives as 0. """
        labels = torch.zeros(2 * self.batch_size).to(self.device).long()
        CE = self.criterion(logits, labels)

        onehot_label = torch.cat((torch.ones(2 * self.batch_size, 1),torch.zeros(2 * self.batch_size, negatives.shape[-1])),dim=-1).to(self.device).long()
        # Add poly loss
        pt = torch.mean(onehot_label* torch.nn.functional.softmax(logits,dim=-1))

        epsilon = self.batch_size
        loss = CE / (2 * self.batch_size) + epsilon * (1/self.batch_size - pt)

        return loss


# ---------------------------------------------------------------- dataloader.py
class Load_Dataset(Dataset):
    def __init__(self, dataset, config, training_mode, bug=None):
        super(Load_Dataset, self).__init__()
        self.training_mode = training_mode
        X_train = dataset["samples"]
        y_train = dataset["labels"]
        # shuffle
        if bug == "samples_shuffled_apart_from_labels":
            X_train = list(X_train)
            np.random.shuffle(X_train)
            data = list(zip(X_train, y_train))
        else:
            data = list(zip(X_train, y_train))
            np.random.shuffle(data)
        X_train, y_train = zip(*data)
        X_train, y_train = torch.stack(list(X_train), dim=0), torch.stack(list(y_train), dim=0)

        if len(X_train.shape) < 3:
            X_train = X_train.unsqueeze(2)

        if X_train.shape.index(min(X_train.shape)) != 1:  # make sure the Channels in second dim
            X_train = X_train.permute(0, 2, 1)

        """Align the TS length between source and target datasets"""
        X_train = X_train[:, :1, :int(config.TSlength_aligned)]

        self.x_data = X_train
        self.y_data = y_train

        self.x_data_f = fft.fft(self.x_data).abs()
        self.len = X_train.shape[0]

    def __getitem__(self, index):
        return self.x_data[index], self.y_data[index], self.x_data[index], \
               self.x_data_f[index], self.x_data_f[index]

    def __len__(self):
        return self.len


def _synthetic_epilepsy(n, rng, length):
    """(port) two classes: a fast oscillation burst (1) or a slow wave (0), with noise; [n, length], labels [n]."""
    labels = rng.randint(0, 2, n)
    t = np.arange(length)
    x = 0.3 * rng.randn(n, length)
    for i in range(n):
        if labels[i]:
            start = rng.randint(0, length - 24)
            x[i, start:start + 24] += 2.0 * np.sin(2 * np.pi * 0.3 * np.arange(24))
        else:
            x[i] += np.sin(2 * np.pi * t / length * 2 + rng.rand() * 2 * np.pi)
    return {"samples": torch.from_numpy(x).float(), "labels": torch.from_numpy(labels).long()}


# ---------------------------------------------------------------- trainer.py (model_finetune's loop body)
def finetune_loss(model, classifier, data, labels, aug1, data_f, aug1_f, config, device):
    criterion = nn.CrossEntropyLoss()
    """Produce embeddings"""
    h_t, z_t, h_f, z_f = model(data, data_f)
    h_t_aug, z_t_aug, h_f_aug, z_f_aug = model(aug1, aug1_f)
    nt_xent_criterion = NTXentLoss_poly(device, config.target_batch_size, config.Context_Cont.temperature,
                                        config.Context_Cont.use_cosine_similarity)
    loss_t = nt_xent_criterion(h_t, h_t_aug)
    loss_f = nt_xent_criterion(h_f, h_f_aug)
    l_TF = nt_xent_criterion(z_t, z_f)

    l_1, l_2, l_3 = nt_xent_criterion(z_t, z_f_aug), nt_xent_criterion(z_t_aug, z_f), \
                    nt_xent_criterion(z_t_aug, z_f_aug)
    loss_c = (1 + l_TF - l_1) + (1 + l_TF - l_2) + (1 + l_TF - l_3) #  # noqa: F841 (unused upstream too)

    """Add supervised classifier: 1) it's unique to finetuning. 2) this classifier will also be used in test."""
    fea_concat = torch.cat((z_t, z_f), dim=1)
    predictions = classifier(fea_concat)
    loss_p = criterion(predictions, labels)

    lam = 0.1
    loss = loss_p + l_TF + lam*(loss_t + loss_f)
    return loss


def _make_train_step(model, model_optimizer, classifier, classifier_optimizer, scheduler, loader, config, bug):
    device = "cpu"
    st = {"it": None, "losses": []}

    def train_step():
        try:
            data, labels, aug1, data_f, aug1_f = next(st["it"])
        except (StopIteration, TypeError):
            if st["it"] is not None:  # Trainer: scheduler.step(valid_loss) after each epoch
                scheduler.step(torch.tensor(st["losses"]).mean())
            st["it"], st["losses"] = iter(loader), []
            if bug == "zero_grad_once_per_epoch":
                model_optimizer.zero_grad()
                classifier_optimizer.zero_grad()
            data, labels, aug1, data_f, aug1_f = next(st["it"])
        model.train()
        classifier.train()
        data, labels = data.float().to(device), labels.long().to(device)
        data_f = data_f.float().to(device)
        aug1 = aug1.float().to(device)
        aug1_f = aug1_f.float().to(device)

        """if random initialization:"""
        if bug != "zero_grad_once_per_epoch":
            model_optimizer.zero_grad()
            classifier_optimizer.zero_grad()

        loss = finetune_loss(model, classifier, data, labels, aug1, data_f, aug1_f, config, device)
        st["losses"].append(loss.item())
        loss.backward()
        model_optimizer.step()
        classifier_optimizer.step()
        return loss.item()

    return train_step


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    configs = Config()
    rng = np.random.RandomState(seed)
    finetune_dataset = Load_Dataset(_synthetic_epilepsy(N_FINETUNE, rng, configs.TSlength_aligned), configs,
                                    "fine_tune_test", bug=bug)
    test_dataset = Load_Dataset(_synthetic_epilepsy(N_TEST, rng, configs.TSlength_aligned), configs,
                                "fine_tune_test")
    finetune_loader = DataLoader(dataset=finetune_dataset, batch_size=configs.target_batch_size,
                                 shuffle=True, drop_last=configs.drop_last, num_workers=0)
    test_loader = DataLoader(dataset=test_dataset, batch_size=configs.target_batch_size,
                             shuffle=True, drop_last=False, num_workers=0)

    TFC_model = TFC(configs)
    classifier = target_classifier(configs)
    model_optimizer = torch.optim.Adam(TFC_model.parameters(), lr=configs.lr, betas=(configs.beta1, configs.beta2), weight_decay=3e-4)
    classifier_optimizer = torch.optim.Adam(classifier.parameters(), lr=configs.lr, betas=(configs.beta1, configs.beta2), weight_decay=3e-4)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(model_optimizer, 'min')
    train_step = _make_train_step(TFC_model, model_optimizer, classifier, classifier_optimizer, scheduler,
                                  finetune_loader, configs, bug)

    def eval_fn(model, _batch=None):  # model_test's accuracy over the test loader
        was = model.training
        model.eval()
        classifier.eval()
        correct = total = 0
        with torch.no_grad():
            for data, labels, _, data_f, _ in test_loader:
                _h_t, z_t, _h_f, z_f = model(data.float(), data_f.float())
                predictions = classifier(torch.cat((z_t, z_f), dim=1))
                correct += int((predictions.argmax(dim=1) == labels).sum())
                total += len(labels)
        model.train(was)
        classifier.train(was)
        return correct / total

    data, labels, aug1, data_f, aug1_f = next(iter(finetune_loader))

    def loss_fn(_outputs, targets):
        labels_, aug1_, aug1_f_ = targets
        return finetune_loss(TFC_model, classifier, data, labels_, aug1_, data_f, aug1_f_, configs, "cpu")

    return Program(name="tfc_finetune", model=TFC_model, batch=({"x_in_t": data, "x_in_f": data_f},
                                                                 (labels, aug1, aug1_f)),
                   loss_fn=loss_fn, optimizer=model_optimizer, train_step=train_step, eval_fn=eval_fn,
                   loader=finetune_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the upstream's own pre-training loop (trainer.py, model_pretrain) calls model_optimizer.zero_grad() once,
    # before its batch loop: the gradients of every batch of the epoch pile up. The same placement here.
    Bug("zero_grad_once_per_epoch", functools.partial(_build, bug="zero_grad_once_per_epoch"), "step_probe", (),
        kind="step.grad_accumulation"),  # every parameter alike: declared by its mechanism (README rule 6)
    # classic labels misaligned with inputs: Load_Dataset shuffles the samples on their own instead of the zipped
    # (sample, label) pairs, so every series keeps a random label.
    Bug("samples_shuffled_apart_from_labels", functools.partial(_build, bug="samples_shuffled_apart_from_labels"),
        "learning_ledger", ("TASK",)),
]
