# ruff: noqa: C408
"""ICLRec (Chen et al., WWW 2022) trained with its ``--contrast_type InstanceCL`` option: a SASRec transformer over
each user's item sequence (causal self-attention, learned positions, TF-style LayerNorm) trained on the next item at
every position with a sampled negative (binary cross-entropy on dot-product scores, padding masked out), plus
``cf_weight`` x an instance contrastive loss (``NCELoss``) between two random augmentations (crop / mask / reorder)
of the same sequence, Adam.

Source: https://github.com/salesforce/ICLRec
Commit: 2890e6c3ff6a22c6699fc19cb863b66786c1cde4
Files: ``src/main.py`` (arguments, datasets, loaders), ``src/trainers.py`` (``Trainer.__init__``'s optimizer and
criterion, ``cross_entropy``, ``predict_full``, ``_instance_cl_one_pair_contrastive_learning``, the training branch of
``ICLRecTrainer.iteration``), ``src/datasets.py`` (``RecWithContrastiveLearningDataset``), ``src/utils.py``
(``neg_sample``, ``nCr``, ``get_user_seqs``' item numbering); model code in the helper ``_iclrec.py``
(``src/models.py``, ``src/modules.py``, ``src/data_augmentation.py``)
License: BSD-3-Clause (Copyright (c) 2021, Salesforce.com, Inc.; full text in LICENSES/salesforce-ICLRec.txt)
Domain: recommendation, sequential (SASRec next-item prediction with contrastive sequence augmentation)

Kept as written: ``SASRecModel`` and its blocks, ``NCELoss`` (temperature 1.0, self-similarities masked),
``RecWithContrastiveLearningDataset`` (train split ``items[:-3]`` -> ``items[1:-2]``, left padding to
``max_seq_length``, one sampled negative per position, ``nCr(n_views, 2)`` pairs of ``Random`` augmentations),
the loop body (model on ``input_ids``, ``cross_entropy``, the InstanceCL loss on the concatenated views flattened
over positions, ``joint_loss = rec_weight * rec_loss + cf_weight * cl_loss``, zero_grad, backward, step), the
defaults of ``main.py`` (hidden 64, 2 layers, 2 heads, gelu, dropouts 0.5, lr 0.001, Adam betas (0.9, 0.999),
weight decay 0, tao 0.2, gamma 0.7, beta 0.2, augment_type random, n_views 2, cf_weight 0.1, rec_weight 1.0,
``seq_representation_instancecl_type`` concatenate).

Deviations from the original:
- the Amazon / Yelp / ml-1m files are not here: synthetic sequences made from ``seed``: 128 users over 96 items
  in 8 groups; each user walks one group's items in a fixed cyclic order (drawn from the seed) from a random start,
  with 10% random items, 12 to 23 interactions; items are numbered from 1 and ``item_size = max_item + 2``;
- sizes for 2 CPU cores: ``max_seq_length`` 50 -> 20, ``batch_size`` 256 -> 32;
- ``--contrast_type`` Hybrid (the default) -> InstanceCL (an option of the same script): the intent clustering of
  IntentCL / Hybrid needs faiss (not installed); the ``KMeans`` objects and ``PCLoss`` the Trainer builds are never
  used under InstanceCL and are left out, so is the unused projection head;
- ``iteration``'s epoch loop is unrolled: one ``train_step`` is one batch; the progress bars, logs, checkpoint and
  early stopping are dropped; ``eval_fn`` is the full-sort HR@10 of the validation split (``items[:-2]`` ->
  ``items[-2]``) with the training items masked out, as ``predict_full`` and ``get_full_sort_score`` compute it;
- the ``.cuda()`` calls and prints are dropped; the test split's ``_add_noise_interactions`` (noise_ratio 0) and the
  ``test_neg_items`` branch are left out;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import math
import pathlib
import random
import sys
import types

import numpy as np
import torch
from torch.optim import Adam
from torch.utils.data import DataLoader, Dataset, RandomSampler, SequentialSampler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _iclrec import Crop, Mask, NCELoss, Random, Reorder, SASRecModel

N_USERS, N_ITEMS, N_GROUPS = 128, 96, 8


# ---------------------------------------------------------------- utils.py
def nCr(n, r):
    f = math.factorial
    return f(n) // f(r) // f(n - r)


def neg_sample(item_set, item_size):  # 前闭后闭
    item = random.randint(1, item_size - 1)
    while item in item_set:
        item = random.randint(1, item_size - 1)
    return item


def _synthetic_user_seq(seed):
    """(port) each user walks one group's items in a cyclic order from a random start, 10% random items."""
    rng = np.random.RandomState(seed)
    order = rng.permutation(N_ITEMS) + 1
    groups = np.array_split(order, N_GROUPS)
    user_seq = []
    for _ in range(N_USERS):
        g = groups[rng.randint(N_GROUPS)]
        pos, seq = rng.randint(len(g)), []
        for _ in range(rng.randint(12, 24)):
            seq.append(int(g[pos % len(g)]) if rng.rand() > 0.1 else int(rng.randint(1, N_ITEMS + 1)))
            pos += 1
        user_seq.append(seq)
    return user_seq


# ---------------------------------------------------------------- datasets.py
class RecWithContrastiveLearningDataset(Dataset):
    def __init__(self, args, user_seq, test_neg_items=None, data_type="train", similarity_model_type="offline"):
        self.args = args
        self.user_seq = user_seq
        self.test_neg_items = test_neg_items
        self.data_type = data_type
        self.max_len = args.max_seq_length
        # currently apply one transform, will extend to multiples
        self.augmentations = {
            "crop": Crop(tao=args.tao),
            "mask": Mask(gamma=args.gamma),
            "reorder": Reorder(beta=args.beta),
            "random": Random(tao=args.tao, gamma=args.gamma, beta=args.beta),
        }
        if self.args.augment_type not in self.augmentations:
            raise ValueError(f"augmentation type: '{self.args.augment_type}' is invalided")
        self.base_transform = self.augmentations[self.args.augment_type]
        # number of augmentations for each sequences, current support two
        self.n_views = self.args.n_views

    def _one_pair_data_augmentation(self, input_ids):
        """
        provides two positive samples given one sequence
        """
        augmented_seqs = []
        for i in range(2):
            augmented_input_ids = self.base_transform(input_ids)
            pad_len = self.max_len - len(augmented_input_ids)
            augmented_input_ids = [0] * pad_len + augmented_input_ids

            augmented_input_ids = augmented_input_ids[-self.max_len :]

            assert len(augmented_input_ids) == self.max_len

            cur_tensors = torch.tensor(augmented_input_ids, dtype=torch.long)
            augmented_seqs.append(cur_tensors)
        return augmented_seqs

    def _process_sequence_label_signal(self, seq_label_signal):
        seq_class_label = torch.tensor(seq_label_signal, dtype=torch.long)
        return seq_class_label

    def _data_sample_rec_task(self, user_id, items, input_ids, target_pos, answer):
        # make a deep copy to avoid original sequence be modified
        copied_input_ids = copy.deepcopy(input_ids)
        target_neg = []
        seq_set = set(items)
        for _ in copied_input_ids:
            target_neg.append(neg_sample(seq_set, self.args.item_size))

        pad_len = self.max_len - len(copied_input_ids)
        copied_input_ids = [0] * pad_len + copied_input_ids
        target_pos = [0] * pad_len + target_pos
        target_neg = [0] * pad_len + target_neg

        copied_input_ids = copied_input_ids[-self.max_len :]
        target_pos = target_pos[-self.max_len :]
        target_neg = target_neg[-self.max_len :]

        assert len(copied_input_ids) == self.max_len
        assert len(target_pos) == self.max_len
        assert len(target_neg) == self.max_len

        # (port) the test_neg_items branch (sampled-negative evaluation, unused by main.py) left out
        cur_rec_tensors = (
            torch.tensor(user_id, dtype=torch.long),  # user_id for testing
            torch.tensor(copied_input_ids, dtype=torch.long),
            torch.tensor(target_pos, dtype=torch.long),
            torch.tensor(target_neg, dtype=torch.long),
            torch.tensor(answer, dtype=torch.long),
        )

        return cur_rec_tensors

    def __getitem__(self, index):
        user_id = index
        items = self.user_seq[index]

        assert self.data_type in {"train", "valid", "test"}

        # [0, 1, 2, 3, 4, 5, 6]
        # train [0, 1, 2, 3]
        # target [1, 2, 3, 4]
        if self.data_type == "train":
            input_ids = items[:-3]
            target_pos = items[1:-2]
            if self.args.bug == "targets_not_shifted":
                target_pos = items[:-3]
            seq_label_signal = items[-2]
            answer = [0]  # no use
        elif self.data_type == "valid":
            input_ids = items[:-2]
            target_pos = items[1:-1]
            answer = [items[-2]]

        else:  # (port) _add_noise_interactions (noise_ratio 0 by default) left out
            items_with_noise = items
            input_ids = items_with_noise[:-1]
            target_pos = items_with_noise[1:]
            answer = [items_with_noise[-1]]
        if self.data_type == "train":
            cur_rec_tensors = self._data_sample_rec_task(user_id, items, input_ids, target_pos, answer)
            cf_tensors_list = []
            # if n_views == 2, then it's downgraded to pair-wise contrastive learning
            total_augmentaion_pairs = nCr(self.n_views, 2)
            for i in range(total_augmentaion_pairs):
                cf_tensors_list.append(self._one_pair_data_augmentation(input_ids))

            # add supervision of sequences
            seq_class_label = self._process_sequence_label_signal(seq_label_signal)
            return (cur_rec_tensors, cf_tensors_list, seq_class_label)
        elif self.data_type == "valid":
            cur_rec_tensors = self._data_sample_rec_task(user_id, items, input_ids, target_pos, answer)
            return cur_rec_tensors
        else:
            cur_rec_tensors = self._data_sample_rec_task(user_id, items_with_noise, input_ids, target_pos, answer)
            return cur_rec_tensors

    def __len__(self):
        """
        consider n_view of a single sequence as one sample
        """
        return len(self.user_seq)


# ---------------------------------------------------------------- trainers.py
class ICLRecTrainer:
    def __init__(self, model, train_dataloader, eval_dataloader, args):
        self.args = args
        self.device = torch.device("cpu")
        self.model = model
        self.train_dataloader = train_dataloader
        self.eval_dataloader = eval_dataloader
        betas = (self.args.adam_beta1, self.args.adam_beta2)
        self.optim = Adam(self.model.parameters(), lr=self.args.lr, betas=betas, weight_decay=self.args.weight_decay)
        self.cf_criterion = NCELoss(self.args.temperature, self.device)

    def cross_entropy(self, seq_out, pos_ids, neg_ids):
        # [batch seq_len hidden_size]
        pos_emb = self.model.item_embeddings(pos_ids)
        neg_emb = self.model.item_embeddings(neg_ids)
        # [batch*seq_len hidden_size]
        pos = pos_emb.view(-1, pos_emb.size(2))
        neg = neg_emb.view(-1, neg_emb.size(2))
        seq_emb = seq_out.view(-1, self.args.hidden_size)  # [batch*seq_len hidden_size]
        pos_logits = torch.sum(pos * seq_emb, -1)  # [batch*seq_len]
        neg_logits = torch.sum(neg * seq_emb, -1)
        istarget = (pos_ids > 0).view(pos_ids.size(0) * self.model.args.max_seq_length).float()  # [batch*seq_len]
        loss = torch.sum(
            -torch.log(torch.sigmoid(pos_logits) + 1e-24) * istarget
            - torch.log(1 - torch.sigmoid(neg_logits) + 1e-24) * istarget
        ) / torch.sum(istarget)

        return loss

    def predict_full(self, seq_out):
        # [item_num hidden_size]
        test_item_emb = self.model.item_embeddings.weight
        # [batch hidden_size ]
        rating_pred = torch.matmul(seq_out, test_item_emb.transpose(0, 1))
        return rating_pred

    def _instance_cl_one_pair_contrastive_learning(self, inputs, intent_ids=None):
        cl_batch = torch.cat(inputs, dim=0)
        cl_batch = cl_batch.to(self.device)
        cl_sequence_output = self.model(cl_batch)
        if self.args.seq_representation_instancecl_type == "mean":
            cl_sequence_output = torch.mean(cl_sequence_output, dim=1, keepdim=False)
        cl_sequence_flatten = cl_sequence_output.view(cl_batch.shape[0], -1)
        batch_size = cl_batch.shape[0] // 2
        cl_output_slice = torch.split(cl_sequence_flatten, batch_size)
        if self.args.de_noise:
            cl_loss = self.cf_criterion(cl_output_slice[0], cl_output_slice[1], intent_ids=intent_ids)
        else:
            cl_loss = self.cf_criterion(cl_output_slice[0], cl_output_slice[1], intent_ids=None)
        return cl_loss

    def joint_loss(self, rec_batch, cl_batches, seq_class_label_batches):
        """The loss of one batch, as ``iteration``'s training branch computes it under InstanceCL."""
        rec_batch = tuple(t.to(self.device) for t in rec_batch)
        _, input_ids, target_pos, target_neg, _ = rec_batch

        # ---------- recommendation task ---------------#
        sequence_output = self.model(input_ids)
        rec_loss = self.cross_entropy(sequence_output, target_pos, target_neg)

        # ---------- contrastive learning task -------------#
        cl_losses = []
        for cl_batch in cl_batches:
            if self.args.contrast_type == "InstanceCL":
                cl_loss = self._instance_cl_one_pair_contrastive_learning(
                    cl_batch, intent_ids=seq_class_label_batches
                )
                cl_losses.append(self.args.cf_weight * cl_loss)

        joint_loss = self.args.rec_weight * rec_loss
        for cl_loss in cl_losses:
            joint_loss += cl_loss
        return joint_loss

    def train_batch(self, rec_batch, cl_batches, seq_class_label_batches):
        self.model.train()
        joint_loss = self.joint_loss(rec_batch, cl_batches, seq_class_label_batches)
        self.optim.zero_grad()
        joint_loss.backward()
        self.optim.step()
        return joint_loss.item()

    def valid_hr10(self):
        """(port) the full-sort validation: training items masked out, the share of answers in the top 10."""
        self.model.eval()
        hits = []
        with torch.no_grad():
            for batch in self.eval_dataloader:
                user_ids, input_ids, _target_pos, _target_neg, answers = batch
                recommend_output = self.model(input_ids)[:, -1, :]
                rating_pred = self.predict_full(recommend_output).cpu().numpy().copy()
                for row, u in enumerate(user_ids.numpy()):
                    rating_pred[row, self.args.train_matrix[u]] = 0
                top = np.argpartition(rating_pred, -10)[:, -10:]
                hits += [int(a in t) for a, t in zip(answers[:, 0].numpy(), top)]
        self.model.train()
        return float(np.mean(hits))


# ---------------------------------------------------------------- main.py
ARGS = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, hidden_act="gelu",
            attention_probs_dropout_prob=0.5, hidden_dropout_prob=0.5, initializer_range=0.02,
            max_seq_length=20, lr=0.001, batch_size=32, tao=0.2, gamma=0.7, beta=0.2, augment_type="random",
            temperature=1.0, n_views=2, contrast_type="InstanceCL", seq_representation_instancecl_type="concatenate",
            de_noise=False, cf_weight=0.1, rec_weight=1.0, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999,
            cuda_condition=False)


def _build(seed, bug=None):
    random.seed(seed)  # (port) set_seed(args.seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    args = types.SimpleNamespace(**ARGS, bug=bug)
    user_seq = _synthetic_user_seq(seed)
    max_item = max(max(s) for s in user_seq)
    args.item_size = max_item + 2
    args.mask_id = max_item + 1
    args.train_matrix = [s[:-2] for s in user_seq]  # (port) valid_rating_matrix as index lists

    train_dataset = RecWithContrastiveLearningDataset(args, user_seq, data_type="train")
    train_dataloader = DataLoader(train_dataset, sampler=RandomSampler(train_dataset), batch_size=args.batch_size)
    eval_dataset = RecWithContrastiveLearningDataset(args, user_seq, data_type="valid")
    eval_dataloader = DataLoader(eval_dataset, sampler=SequentialSampler(eval_dataset), batch_size=args.batch_size)

    model = SASRecModel(args=args)
    trainer = ICLRecTrainer(model, train_dataloader, eval_dataloader, args)
    st = {"it": iter(train_dataloader)}

    def train_step():
        try:
            batch = next(st["it"])
        except StopIteration:
            st["it"] = iter(train_dataloader)
            batch = next(st["it"])
        return trainer.train_batch(*batch)

    rec_batch, _cl_batches, _seq_labels = next(iter(DataLoader(train_dataset, batch_size=args.batch_size)))

    def loss_fn(sequence_output, targets):
        _, _input_ids, target_pos, target_neg, _ = rec_batch
        return trainer.cross_entropy(sequence_output, target_pos, target_neg)

    return Program(name="iclrec_instancecl", model=model, batch=(rec_batch[1], rec_batch[2]), loss_fn=loss_fn,
                   optimizer=trainer.optim, train_step=train_step, eval_fn=lambda m, b=None: trainer.valid_hr10(),
                   loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: SASRecModel.forward leaves the subsequent (causal) mask out of the attention mask, so every
    # position attends to the items after it, the next item (its target) included.
    Bug("causal_mask_dropped", functools.partial(_build, bug="causal_mask_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic targets not shifted: the training targets are the input items themselves (items[:-3]) instead of the
    # next items (items[1:-2]), so the model learns to score the item it has just seen.
    Bug("targets_not_shifted", functools.partial(_build, bug="targets_not_shifted"), "learning_ledger", ("TASK",)),
]
