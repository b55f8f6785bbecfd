"""Neural Collaborative Filtering (NeuMF, He et al. 2017) on MovieLens-1M-style implicit feedback, from
pyy0715/Neural-Collaborative-Filtering: pandas re-indexing of users and items, every rating read as a positive,
leave-one-out split by timestamp, 4 sampled negatives per training interaction (drawn once, when the training loader
is built) and 100 per test user; NeuMF concatenates an MLP tower (64-32-16-8 with ReLU) and a GMF product into a
sigmoid output; ``BCELoss``, Adam 1e-3; HR@10 / NDCG@10 on the held-out interaction among 100 negatives.

Source: https://github.com/pyy0715/Neural-Collaborative-Filtering
Commit: 8b9b2ca56151c9eb10fa9269b1e8849a3ffbf624
Files: ``src/main.py``, ``src/model.py`` (``NeuMF``), ``src/data_utils.py`` (``NCF_Data``, ``Rating_Datset``),
``src/evaluate.py``, ``src/util.py``, ``src/config.py``
License: MIT (Copyright (c) 2020 pyy0715; full text in LICENSES/pyy0715-Neural-Collaborative-Filtering.txt)
Domain: recommendation, collaborative filtering (implicit feedback, pointwise BCE with sampled negatives,
leave-one-out HR@10)

Kept as written: ``NeuMF`` (normal(0, 0.01) embeddings, xavier-uniform Linear weights, zero biases, ``fc_layers``
alternating Linear and ReLU, ``affine_output`` over the MLP and GMF vectors, sigmoid, ``squeeze``), ``NCF_Data``
(``_reindex`` with ``float(x > 0)`` ratings, ``_leave_one_out`` by ``rank(method='first', ascending=False)`` of the
timestamps, ``_negative_sampling``, ``get_train_instance`` and ``get_test_instance``), ``Rating_Datset``,
``evaluate.metrics`` (``hit``, ``ndcg``), ``seed_everything``, ``main.py``'s defaults (lr 0.001, batch_size 256,
top_k 10, factor_num 32, layers [64, 32, 16, 8], num_ng 4, num_ng_test 100; dropout 0.2 is stored but unused, as
in the model) and the loop body (``model.train()`` at the start of an epoch, zero_grad, ``model(user, item)``,
``BCELoss``, backward, step).

Deviations from the original:
- MovieLens-1M (``ratings.dat`` read with ``pd.read_csv(sep='::')``) is not here: the DataFrame has the same columns
  (``user_id``, ``item_id``, ``rating``, ``timestamp``), made from ``seed``: 200 users and 300 items with hidden 8-d
  tastes, each user rating 20 to 40 items drawn with probability rising with the taste match, ratings 1-5 and
  random timestamps; ``num_users`` / ``num_items`` are ``nunique() + 1`` as written.
- Python 3.11's ``random.sample`` no longer takes a set: the two ``random.sample(x, k)`` calls on item sets take
  ``sorted(x)`` (the same population in a fixed order).
- the loaders: ``num_workers=4`` -> 0 (``shuffle=True`` draws from the seeded torch generator, as before).
- ``train_step`` is one step of the epoch loop (the next epoch starts when the loader runs out) and returns
  ``loss.item()``; tensorboardX's ``SummaryWriter``, the prints and ``torch.save`` of the best model are dropped.
  ``eval_fn`` is the loop's evaluation, ``evaluate.metrics`` after ``model.eval()``, returning HR@10 (the training
  mode is restored after it).
- the Program's batch is the first 256 training instances in loader order (unshuffled), as ``((user, item),
  label)``; its ``loss_fn`` the ``BCELoss``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP004, PLR0402, B009, RUF012, RUF059

from __future__ import annotations

import functools
import os
import pathlib
import random
import sys

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program


# ---------------------------------------------------------------------------------------------------- src/util.py
def seed_everything(seed):
    random.seed(seed)
    os.environ['PYTHONHASHSEED'] = str(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = True


# ---------------------------------------------------------------------------------------------- src/data_utils.py
class NCF_Data(object):
	"""
	Construct Dataset for NCF
	"""
	def __init__(self, args, ratings, bug=None):
		self.ratings = ratings
		self.num_ng = args.num_ng
		self.num_ng_test = args.num_ng_test
		self.batch_size = args.batch_size
		self.bug = bug

		self.preprocess_ratings = self._reindex(self.ratings)

		self.user_pool = set(self.ratings['user_id'].unique())
		self.item_pool = set(self.ratings['item_id'].unique())

		self.train_ratings, self.test_ratings = self._leave_one_out(self.preprocess_ratings)
		self.negatives = self._negative_sampling(self.preprocess_ratings)
		random.seed(args.seed)

	def _reindex(self, ratings):
		"""
		Process dataset to reindex userID and itemID, also set rating as binary feedback
		"""
		user_list = list(ratings['user_id'].drop_duplicates())
		user2id = {w: i for i, w in enumerate(user_list)}

		item_list = list(ratings['item_id'].drop_duplicates())
		item2id = {w: i for i, w in enumerate(item_list)}

		ratings['user_id'] = ratings['user_id'].apply(lambda x: user2id[x])
		ratings['item_id'] = ratings['item_id'].apply(lambda x: item2id[x])
		ratings['rating'] = ratings['rating'].apply(lambda x: float(x > 0))
		return ratings

	def _leave_one_out(self, ratings):
		"""
		leave-one-out evaluation protocol in paper https://www.comp.nus.edu.sg/~xiangnan/papers/ncf.pdf
		"""
		ratings['rank_latest'] = ratings.groupby(['user_id'])['timestamp'].rank(method='first', ascending=False)
		test = ratings.loc[ratings['rank_latest'] == 1]
		train = ratings.loc[ratings['rank_latest'] > 1]
		assert train['user_id'].nunique()==test['user_id'].nunique(), 'Not Match Train User with Test User'
		return train[['user_id', 'item_id', 'rating']], test[['user_id', 'item_id', 'rating']]


	def _negative_sampling(self, ratings):
		interact_status = (
			ratings.groupby('user_id')['item_id']
			.apply(set)
			.reset_index()
			.rename(columns={'item_id': 'interacted_items'}))
		interact_status['negative_items'] = interact_status['interacted_items'].apply(lambda x: self.item_pool - x)
		interact_status['negative_samples'] = interact_status['negative_items'].apply(lambda x: random.sample(sorted(x), self.num_ng_test))  # (port) sorted: 3.11
		return interact_status[['user_id', 'negative_items', 'negative_samples']]

	def get_train_instance(self):
		users, items, ratings = [], [], []
		train_ratings = pd.merge(self.train_ratings, self.negatives[['user_id', 'negative_items']], on='user_id')
		train_ratings['negatives'] = train_ratings['negative_items'].apply(lambda x: random.sample(sorted(x), self.num_ng))  # (port) sorted: 3.11
		for row in train_ratings.itertuples():
			users.append(int(row.user_id))
			items.append(int(row.item_id))
			ratings.append(float(row.rating))
			for i in range(self.num_ng):
				users.append(int(row.user_id))
				items.append(int(row.negatives[i]))
				if self.bug == "negatives_labelled_positive":
					ratings.append(float(row.rating))
				else:
					ratings.append(float(0))  # negative samples get 0 rating
		dataset = Rating_Datset(
			user_list=users,
			item_list=items,
			rating_list=ratings)
		return torch.utils.data.DataLoader(dataset, batch_size=self.batch_size, shuffle=True, num_workers=0)  # (port) 4

	def get_test_instance(self):
		users, items, ratings = [], [], []
		test_ratings = pd.merge(self.test_ratings, self.negatives[['user_id', 'negative_samples']], on='user_id')
		for row in test_ratings.itertuples():
			users.append(int(row.user_id))
			items.append(int(row.item_id))
			ratings.append(float(row.rating))
			for i in getattr(row, 'negative_samples'):
				users.append(int(row.user_id))
				items.append(int(i))
				ratings.append(float(0))
		dataset = Rating_Datset(
			user_list=users,
			item_list=items,
			rating_list=ratings)
		return torch.utils.data.DataLoader(dataset, batch_size=self.num_ng_test+1, shuffle=False, num_workers=0)  # (port) 4


class Rating_Datset(torch.utils.data.Dataset):
	def __init__(self, user_list, item_list, rating_list):
		super(Rating_Datset, self).__init__()
		self.user_list = user_list
		self.item_list = item_list
		self.rating_list = rating_list

	def __len__(self):
		return len(self.user_list)

	def __getitem__(self, idx):
		user = self.user_list[idx]
		item = self.item_list[idx]
		rating = self.rating_list[idx]

		return (
			torch.tensor(user, dtype=torch.long),
			torch.tensor(item, dtype=torch.long),
			torch.tensor(rating, dtype=torch.float)
			)


# ------------------------------------------------------------------------------------------------ src/evaluate.py
def hit(ng_item, pred_items):
	if ng_item in pred_items:
		return 1
	return 0


def ndcg(ng_item, pred_items):
	if ng_item in pred_items:
		index = pred_items.index(ng_item)
		return np.reciprocal(np.log2(index+2))
	return 0


def metrics(model, test_loader, top_k, device):
	HR, NDCG = [], []

	for user, item, label in test_loader:
		user = user.to(device)
		item = item.to(device)

		predictions = model(user, item)
		_, indices = torch.topk(predictions, top_k)
		recommends = torch.take(
				item, indices).cpu().numpy().tolist()

		ng_item = item[0].item() # leave one-out evaluation has only one item per user
		HR.append(hit(ng_item, recommends))
		NDCG.append(ndcg(ng_item, recommends))

	return np.mean(HR), np.mean(NDCG)


# --------------------------------------------------------------------------------------------------- src/model.py
class NeuMF(nn.Module):
    def __init__(self, args, num_users, num_items):
        super(NeuMF, self).__init__()
        self.num_users = num_users
        self.num_items = num_items
        self.factor_num_mf = args.factor_num
        self.factor_num_mlp =  int(args.layers[0]/2)
        self.layers = args.layers
        self.dropout = args.dropout

        self.embedding_user_mlp = nn.Embedding(num_embeddings=self.num_users, embedding_dim=self.factor_num_mlp)
        self.embedding_item_mlp = nn.Embedding(num_embeddings=self.num_items, embedding_dim=self.factor_num_mlp)

        self.embedding_user_mf = nn.Embedding(num_embeddings=self.num_users, embedding_dim=self.factor_num_mf)
        self.embedding_item_mf = nn.Embedding(num_embeddings=self.num_items, embedding_dim=self.factor_num_mf)

        self.fc_layers = nn.ModuleList()
        for idx, (in_size, out_size) in enumerate(zip(args.layers[:-1], args.layers[1:])):
            self.fc_layers.append(torch.nn.Linear(in_size, out_size))
            self.fc_layers.append(nn.ReLU())

        self.affine_output = nn.Linear(in_features=args.layers[-1] + self.factor_num_mf, out_features=1)
        self.logistic = nn.Sigmoid()
        self.init_weight()

    def init_weight(self):
        nn.init.normal_(self.embedding_user_mlp.weight, std=0.01)
        nn.init.normal_(self.embedding_item_mlp.weight, std=0.01)
        nn.init.normal_(self.embedding_user_mf.weight, std=0.01)
        nn.init.normal_(self.embedding_item_mf.weight, std=0.01)

        for m in self.fc_layers:
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)

        nn.init.xavier_uniform_(self.affine_output.weight)

        for m in self.modules():
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.data.zero_()

    def forward(self, user_indices, item_indices):
        user_embedding_mlp = self.embedding_user_mlp(user_indices)
        item_embedding_mlp = self.embedding_item_mlp(item_indices)

        user_embedding_mf = self.embedding_user_mf(user_indices)
        item_embedding_mf = self.embedding_item_mf(item_indices)

        mlp_vector = torch.cat([user_embedding_mlp, item_embedding_mlp], dim=-1)  # the concat latent vector
        mf_vector =torch.mul(user_embedding_mf, item_embedding_mf)

        for idx, _ in enumerate(range(len(self.fc_layers))):
            mlp_vector = self.fc_layers[idx](mlp_vector)

        vector = torch.cat([mlp_vector, mf_vector], dim=-1)
        logits = self.affine_output(vector)
        rating = self.logistic(logits)
        return rating.squeeze()


# ------------------------------------------------------------------------------------------------ (port) the data
def synthetic_ratings(seed, n_users=200, n_items=300, dim=8):
    """MovieLens-1M-style rows: each user rates 20-40 items, more likely those matching a hidden taste."""
    rng = np.random.default_rng(seed)
    user_taste = rng.normal(size=(n_users, dim))
    item_taste = rng.normal(size=(n_items, dim))
    user_ids = rng.permutation(np.arange(1, 3 * n_users))[:n_users]  # ml-1m ids are not contiguous
    item_ids = rng.permutation(np.arange(1, 4 * n_items))[:n_items]
    rows = []
    for u in range(n_users):
        score = item_taste @ user_taste[u]
        p = np.exp(1.5 * (score - score.max()))
        p = p / p.sum()
        for i in rng.choice(n_items, size=int(rng.integers(20, 41)), replace=False, p=p):
            rows.append((int(user_ids[u]), int(item_ids[i]), int(rng.integers(1, 6)),
                         int(rng.integers(956703932, 1046454590))))
    rows = [rows[k] for k in rng.permutation(len(rows))]
    return pd.DataFrame(rows, columns=['user_id', 'item_id', 'rating', 'timestamp'])


# ---------------------------------------------------------------------------------------------------- src/main.py
class _Args:
    seed = 42
    lr = 0.001
    dropout = 0.2
    batch_size = 256
    epochs = 30
    top_k = 10
    factor_num = 32
    layers = [64,32,16,8]
    num_ng = 4
    num_ng_test = 100
    out = False  # (port) True: torch.save of the best model, dropped


def _build(seed, bug=None):
    args = _Args()
    args.seed = seed
    device = torch.device("cpu")  # (port) cuda:0 if available

    # seed for Reproducibility
    seed_everything(args.seed)

    # load data
    ml_1m = synthetic_ratings(args.seed)  # (port) pd.read_csv(config.DATA_PATH, sep="::", ...)

    # set the num_users, items
    num_users = ml_1m['user_id'].nunique()+1
    num_items = ml_1m['item_id'].nunique()+1

    # construct the train and test datasets
    data = NCF_Data(args, ml_1m, bug=bug)
    train_loader =data.get_train_instance()
    test_loader =data.get_test_instance()

    # set model and loss, optimizer
    model = NeuMF(args, num_users, num_items)
    model = model.to(device)
    if bug == "bce_with_logits_on_sigmoid":
        loss_function = nn.BCEWithLogitsLoss()
    else:
        loss_function = nn.BCELoss()
    optimizer = optim.Adam(model.parameters(), lr=args.lr)

    st = {"it": None}

    def train_step():
        # one step of: for epoch ...: model.train(); for user, item, label in train_loader
        if st["it"] is None:
            model.train() # Enable dropout (if have).
            st["it"] = iter(train_loader)
        try:
            user, item, label = next(st["it"])
        except StopIteration:
            st["it"] = None
            return train_step()
        user = user.to(device)
        item = item.to(device)
        label = label.to(device)

        if bug != "no_zero_grad":
            optimizer.zero_grad()
        prediction = model(user, item)
        loss = loss_function(prediction, label)
        loss.backward()
        optimizer.step()
        return loss.item()

    def eval_fn(net, _batch=None):
        was_training = net.training
        net.eval()
        with torch.no_grad():
            HR, NDCG = metrics(net, test_loader, args.top_k, device)
        net.train(was_training)
        return float(HR)

    ds = train_loader.dataset
    first = [ds[i] for i in range(args.batch_size)]
    batch = ((torch.stack([f[0] for f in first]), torch.stack([f[1] for f in first])),
             torch.stack([f[2] for f in first]))
    return Program(name="pyy0715ncf_neumf", model=model, batch=batch, loss_fn=loss_function, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the sampled negatives appended with the positive row's rating (classic copy-paste slip in
    # get_train_instance): every training label is 1, so nothing separates interacted from sampled items.
    Bug("negatives_labelled_positive", functools.partial(_build, bug="negatives_labelled_positive"),
        "learning_ledger", ("TASK",)),
    # BCEWithLogitsLoss on NeuMF's sigmoid output (classic): the loss squashes probabilities a second time and its
    # gradient vanishes toward the labels.
    Bug("bce_with_logits_on_sigmoid", functools.partial(_build, bug="bce_with_logits_on_sigmoid"),
        "learning_ledger", ("OBJECTIVE",)),
    # optimizer.zero_grad() dropped from the loop (classic). A whole-model step slip: declared by its mechanism
    # (README rule 6).
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]
