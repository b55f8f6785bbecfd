# ruff: noqa: UP008, C417, RUF007, C410, RUF059, TRY002
"""SAINT (row + column attention over embedded categorical and continuous features, CLS token head) for binary
classification of tabular data, from the authors' code.

Source: https://github.com/somepago/saint, commit e288e84c77a54cfd2ffb55a53678fb7cbbb16630,
files ``train.py``, ``models/pretrainmodel.py`` (``SAINT``, ``sep_MLP``), ``models/model.py`` (``Attention``,
``RowColTransformer``, ``Transformer``, ``FeedForward``/``GEGLU``, ``PreNorm``, ``Residual``, ``MLP``,
``simple_MLP``), ``augmentations.py`` (``embed_data_mask``), ``data_openml.py`` (``DataSetCatCon``),
``utils.py`` (``classification_scores``).
License: Apache-2.0 (full text in LICENSES/somepago-saint.txt).
Domain: tabular deep learning.

Kept as written: the ``SAINT`` module (category offsets, per-feature ``simple_MLP`` continuous embeddings,
mask embeddings, the pretraining heads it builds and the supervised loop never calls, ``mlpfory`` on the CLS
token), ``RowColTransformer`` in the default ``colrow`` style, ``embed_data_mask``, ``DataSetCatCon`` (CLS column of
zeros prepended, masks, continuous columns standardized by the train mean/std), the defaults with ``train.py``'s
overrides for ``attentiontype != 'col'`` (depth 1, heads min(4, 8), attention and ff dropout 0.8, embedding size
min(32, .)), ``final_mlp_style='sep'``, ``CrossEntropyLoss`` for ``binary`` with 2 classes, AdamW lr 1e-4, and the
loop body (``optimizer.zero_grad()``, ``embed_data_mask``, ``model.transformer``, ``reps[:,0,:]``,
``model.mlpfory``, ``criterion(y_outs, y_gts.squeeze())``, backward, step); the every-5-epochs
``classification_scores`` evaluation under ``model.eval()`` followed by ``model.train()``.

Deviations from the original:
- data: a synthetic table made from ``seed`` instead of an OpenML download (``data_prep_openml``): 3 categorical
  columns (cardinalities 3, 4, 5) and 4 continuous ones, no missing values (masks all ones), a binary label from a
  rule over both kinds of columns; 512 train rows and 128 validation rows, batches of 64 (256).
- sizes: embedding_size 8 (32), lr 1e-3 (1e-4: 30 steps); the other settings are the script's.
- ``einops.rearrange`` is written out with ``view``/``permute``/``reshape`` (``'b n (h d) -> b h n d'`` etc.) and
  ``einsum`` kept as ``torch.einsum``; no CUDA, no wandb, no checkpoint saving, no AUROC (no sklearn):
  ``classification_scores`` returns the accuracy.
- ``SAINT`` (from ``pretrainmodel.py``) has no ``forward``: one is added that runs the loop body's forward lines
  (``embed_data_mask`` -> ``transformer`` -> ``mlpfory`` on the CLS token) so the Program's model can be called;
  ``train_step`` itself runs the copied lines. ``TabAttention``, the ``col``/``justmlp``/``Noemb`` paths and the
  pretraining (``--pretrain`` off by default) are left out.
- ``train_step`` is one batch of the epoch loop (a new shuffled epoch when the loader is exhausted; the
  every-5-epochs evaluation runs at each epoch end whose index is a multiple of 5); ``eval_fn`` is
  ``classification_scores`` on the validation loader.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import einsum, nn, optim
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

# ---- models/model.py ----

class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(x, **kwargs) + x

class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(self.norm(x), **kwargs)

# attention

class GEGLU(nn.Module):
    def forward(self, x):
        x, gates = x.chunk(2, dim = -1)
        return x * F.gelu(gates)

class FeedForward(nn.Module):
    def __init__(self, dim, mult = 4, dropout = 0.):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, dim * mult * 2),
            GEGLU(),
            nn.Dropout(dropout),
            nn.Linear(dim * mult, dim)
        )

    def forward(self, x, **kwargs):
        return self.net(x)

class Attention(nn.Module):
    def __init__(
        self,
        dim,
        heads = 8,
        dim_head = 16,
        dropout = 0.
    ):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.scale = dim_head ** -0.5

        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias = False)
        self.to_out = nn.Linear(inner_dim, dim)

        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        h = self.heads
        q, k, v = self.to_qkv(x).chunk(3, dim = -1)
        # rearrange(t, 'b n (h d) -> b h n d', h = h)
        q, k, v = map(lambda t: t.view(t.shape[0], t.shape[1], h, -1).permute(0, 2, 1, 3), (q, k, v))
        sim = einsum('b h i d, b h j d -> b h i j', q, k) * self.scale
        attn = sim.softmax(dim = -1)
        out = einsum('b h i j, b h j d -> b h i d', attn, v)
        # rearrange(out, 'b h n d -> b n (h d)', h = h)
        out = out.permute(0, 2, 1, 3).reshape(out.shape[0], out.shape[2], -1)
        return self.to_out(out)


class RowColTransformer(nn.Module):
    def __init__(self, num_tokens, dim, nfeats, depth, heads, dim_head, attn_dropout, ff_dropout,style='col'):
        super().__init__()
        self.embeds = nn.Embedding(num_tokens, dim)
        self.layers = nn.ModuleList([])
        self.mask_embed =  nn.Embedding(nfeats, dim)
        self.style = style
        for _ in range(depth):
            if self.style == 'colrow':
                self.layers.append(nn.ModuleList([
                    PreNorm(dim, Residual(Attention(dim, heads = heads, dim_head = dim_head, dropout = attn_dropout))),
                    PreNorm(dim, Residual(FeedForward(dim, dropout = ff_dropout))),
                    PreNorm(dim*nfeats, Residual(Attention(dim*nfeats, heads = heads, dim_head = 64, dropout = attn_dropout))),
                    PreNorm(dim*nfeats, Residual(FeedForward(dim*nfeats, dropout = ff_dropout))),
                ]))
            else:
                self.layers.append(nn.ModuleList([
                    PreNorm(dim*nfeats, Residual(Attention(dim*nfeats, heads = heads, dim_head = 64, dropout = attn_dropout))),
                    PreNorm(dim*nfeats, Residual(FeedForward(dim*nfeats, dropout = ff_dropout))),
                ]))

    def forward(self, x, x_cont=None, mask = None):
        if x_cont is not None:
            x = torch.cat((x,x_cont),dim=1)
        _, n, _ = x.shape
        if self.style == 'colrow':
            for attn1, ff1, attn2, ff2 in self.layers:
                x = attn1(x)
                x = ff1(x)
                x = x.reshape(1, x.shape[0], -1)  # rearrange(x, 'b n d -> 1 b (n d)')
                x = attn2(x)
                x = ff2(x)
                x = x.reshape(x.shape[1], n, -1)  # rearrange(x, '1 b (n d) -> b n d', n = n)
        else:
             for attn1, ff1 in self.layers:
                x = x.reshape(1, x.shape[0], -1)
                x = attn1(x)
                x = ff1(x)
                x = x.reshape(x.shape[1], n, -1)
        return x


#mlp
class MLP(nn.Module):
    def __init__(self, dims, act = None):
        super().__init__()
        dims_pairs = list(zip(dims[:-1], dims[1:]))
        layers = []
        for ind, (dim_in, dim_out) in enumerate(dims_pairs):
            is_last = ind >= (len(dims) - 1)
            linear = nn.Linear(dim_in, dim_out)
            layers.append(linear)

            if is_last:
                continue
            if act is not None:
                layers.append(act)

        self.mlp = nn.Sequential(*layers)

    def forward(self, x):
        return self.mlp(x)

class simple_MLP(nn.Module):
    def __init__(self,dims):
        super(simple_MLP, self).__init__()
        self.layers = nn.Sequential(
            nn.Linear(dims[0], dims[1]),
            nn.ReLU(),
            nn.Linear(dims[1], dims[2])
        )

    def forward(self, x):
        if len(x.shape)==1:
            x = x.view(x.size(0), -1)
        x = self.layers(x)
        return x


# ---- models/pretrainmodel.py ----

class sep_MLP(nn.Module):
    def __init__(self,dim,len_feats,categories):
        super(sep_MLP, self).__init__()
        self.len_feats = len_feats
        self.layers = nn.ModuleList([])
        for i in range(len_feats):
            self.layers.append(simple_MLP([dim,5*dim, categories[i]]))


    def forward(self, x):
        y_pred = list([])
        for i in range(self.len_feats):
            x_i = x[:,i,:]
            pred = self.layers[i](x_i)
            y_pred.append(pred)
        return y_pred

class SAINT(nn.Module):
    def __init__(
        self,
        *,
        categories,
        num_continuous,
        dim,
        depth,
        heads,
        dim_head = 16,
        dim_out = 1,
        mlp_hidden_mults = (4, 2),
        mlp_act = None,
        num_special_tokens = 0,
        attn_dropout = 0.,
        ff_dropout = 0.,
        cont_embeddings = 'MLP',
        scalingfactor = 10,
        attentiontype = 'col',
        final_mlp_style = 'common',
        y_dim = 2
        ):
        super().__init__()
        assert all(map(lambda n: n > 0, categories)), 'number of each category must be positive'

        # categories related calculations

        self.num_categories = len(categories)
        self.num_unique_categories = sum(categories)

        # create category embeddings table

        self.num_special_tokens = num_special_tokens
        self.total_tokens = self.num_unique_categories + num_special_tokens

        # for automatically offsetting unique category ids to the correct position in the categories embedding table

        categories_offset = F.pad(torch.tensor(list(categories)), (1, 0), value = num_special_tokens)
        categories_offset = categories_offset.cumsum(dim = -1)[:-1]

        self.register_buffer('categories_offset', categories_offset)


        self.norm = nn.LayerNorm(num_continuous)
        self.num_continuous = num_continuous
        self.dim = dim
        self.cont_embeddings = cont_embeddings
        self.attentiontype = attentiontype
        self.final_mlp_style = final_mlp_style

        if self.cont_embeddings == 'MLP':
            self.simple_MLP = nn.ModuleList([simple_MLP([1,100,self.dim]) for _ in range(self.num_continuous)])
            input_size = (dim * self.num_categories)  + (dim * num_continuous)
            nfeats = self.num_categories + num_continuous
        elif self.cont_embeddings == 'pos_singleMLP':
            self.simple_MLP = nn.ModuleList([simple_MLP([1,100,self.dim]) for _ in range(1)])
            input_size = (dim * self.num_categories)  + (dim * num_continuous)
            nfeats = self.num_categories + num_continuous
        else:
            print('Continous features are not passed through attention')
            input_size = (dim * self.num_categories) + num_continuous
            nfeats = self.num_categories

        # transformer
        if attentiontype in ['row','colrow'] :
            self.transformer = RowColTransformer(
                num_tokens = self.total_tokens,
                dim = dim,
                nfeats= nfeats,
                depth = depth,
                heads = heads,
                dim_head = dim_head,
                attn_dropout = attn_dropout,
                ff_dropout = ff_dropout,
                style = attentiontype
            )

        l = input_size // 8
        hidden_dimensions = list(map(lambda t: l * t, mlp_hidden_mults))
        all_dimensions = [input_size, *hidden_dimensions, dim_out]

        self.mlp = MLP(all_dimensions, act = mlp_act)
        self.embeds = nn.Embedding(self.total_tokens, self.dim) #.to(device)

        cat_mask_offset = F.pad(torch.Tensor(self.num_categories).fill_(2).type(torch.int8), (1, 0), value = 0)
        cat_mask_offset = cat_mask_offset.cumsum(dim = -1)[:-1]

        con_mask_offset = F.pad(torch.Tensor(self.num_continuous).fill_(2).type(torch.int8), (1, 0), value = 0)
        con_mask_offset = con_mask_offset.cumsum(dim = -1)[:-1]

        self.register_buffer('cat_mask_offset', cat_mask_offset)
        self.register_buffer('con_mask_offset', con_mask_offset)

        self.mask_embeds_cat = nn.Embedding(self.num_categories*2, self.dim)
        self.mask_embeds_cont = nn.Embedding(self.num_continuous*2, self.dim)
        self.single_mask = nn.Embedding(2, self.dim)
        self.pos_encodings = nn.Embedding(self.num_categories+ self.num_continuous, self.dim)

        if self.final_mlp_style == 'common':
            self.mlp1 = simple_MLP([dim,(self.total_tokens)*2, self.total_tokens])
            self.mlp2 = simple_MLP([dim ,(self.num_continuous), 1])

        else:
            self.mlp1 = sep_MLP(dim,self.num_categories,categories)
            self.mlp2 = sep_MLP(dim,self.num_continuous,np.ones(self.num_continuous).astype(int))


        self.mlpfory = simple_MLP([dim ,1000, y_dim])
        self.pt_mlp = simple_MLP([dim*(self.num_continuous+self.num_categories) ,6*dim*(self.num_continuous+self.num_categories)//5, dim*(self.num_continuous+self.num_categories)//2])
        self.pt_mlp2 = simple_MLP([dim*(self.num_continuous+self.num_categories) ,6*dim*(self.num_continuous+self.num_categories)//5, dim*(self.num_continuous+self.num_categories)//2])

    def forward(self, x_categ, x_cont, cat_mask, con_mask):
        """Not in the original (SAINT has no forward): train.py's forward lines, so the model can be called."""
        _ , x_categ_enc, x_cont_enc = embed_data_mask(x_categ, x_cont, cat_mask, con_mask,self,False)
        reps = self.transformer(x_categ_enc, x_cont_enc)
        y_reps = reps[:,0,:]
        return self.mlpfory(y_reps)


# ---- augmentations.py ----

def embed_data_mask(x_categ, x_cont, cat_mask, con_mask,model,vision_dset=False):
    device = x_cont.device
    x_categ = x_categ + model.categories_offset.type_as(x_categ)
    x_categ_enc = model.embeds(x_categ)
    n1,n2 = x_cont.shape
    _, n3 = x_categ.shape
    if model.cont_embeddings == 'MLP':
        x_cont_enc = torch.empty(n1,n2, model.dim)
        for i in range(model.num_continuous):
            x_cont_enc[:,i,:] = model.simple_MLP[i](x_cont[:,i])
    else:
        raise Exception('This case should not work!')


    x_cont_enc = x_cont_enc.to(device)
    cat_mask_temp = cat_mask + model.cat_mask_offset.type_as(cat_mask)
    con_mask_temp = con_mask + model.con_mask_offset.type_as(con_mask)


    cat_mask_temp = model.mask_embeds_cat(cat_mask_temp)
    con_mask_temp = model.mask_embeds_cont(con_mask_temp)
    if getattr(model, "bug", None) == "cat_mask_inverted":  # classic: the 1 = observed mask convention read backwards
        x_categ_enc[cat_mask == 1] = cat_mask_temp[cat_mask == 1]
    else:
        x_categ_enc[cat_mask == 0] = cat_mask_temp[cat_mask == 0]
    x_cont_enc[con_mask == 0] = con_mask_temp[con_mask == 0]

    return x_categ, x_categ_enc, x_cont_enc


# ---- data_openml.py ----

class DataSetCatCon(Dataset):
    def __init__(self, X, Y, cat_cols,task='clf',continuous_mean_std=None):

        cat_cols = list(cat_cols)
        X_mask =  X['mask'].copy()
        X = X['data'].copy()
        con_cols = list(set(np.arange(X.shape[1])) - set(cat_cols))
        self.X1 = X[:,cat_cols].copy().astype(np.int64) #categorical columns
        self.X2 = X[:,con_cols].copy().astype(np.float32) #numerical columns
        self.X1_mask = X_mask[:,cat_cols].copy().astype(np.int64) #categorical columns
        self.X2_mask = X_mask[:,con_cols].copy().astype(np.int64) #numerical columns
        if task == 'clf':
            self.y = Y['data']#.astype(np.float32)
        else:
            self.y = Y['data'].astype(np.float32)
        self.cls = np.zeros_like(self.y,dtype=int)
        self.cls_mask = np.ones_like(self.y,dtype=int)
        if continuous_mean_std is not None:
            mean, std = continuous_mean_std
            self.X2 = (self.X2 - mean) / std

    def __len__(self):
        return len(self.y)

    def __getitem__(self, idx):
        # X1 has categorical data, X2 has continuous
        return np.concatenate((self.cls[idx], self.X1[idx])), self.X2[idx],self.y[idx], np.concatenate((self.cls_mask[idx], self.X1_mask[idx])), self.X2_mask[idx]


# ---- utils.py ----

def classification_scores(model, dloader, device, task,vision_dset):
    model.eval()
    m = nn.Softmax(dim=1)
    y_test = torch.empty(0).to(device)
    y_pred = torch.empty(0).to(device)
    prob = torch.empty(0).to(device)
    with torch.no_grad():
        for i, data in enumerate(dloader, 0):
            x_categ, x_cont, y_gts, cat_mask, con_mask = data[0].to(device), data[1].to(device),data[2].to(device),data[3].to(device),data[4].to(device)
            _ , x_categ_enc, x_cont_enc = embed_data_mask(x_categ, x_cont, cat_mask, con_mask,model,vision_dset)
            reps = model.transformer(x_categ_enc, x_cont_enc)
            y_reps = reps[:,0,:]
            y_outs = model.mlpfory(y_reps)
            y_test = torch.cat([y_test,y_gts.squeeze().float()],dim=0)
            y_pred = torch.cat([y_pred,torch.argmax(y_outs, dim=1).float()],dim=0)
            if task == 'binary':
                prob = torch.cat([prob,m(y_outs)[:,-1].float()],dim=0)

    correct_results_sum = (y_pred == y_test).sum().float()
    acc = correct_results_sum/y_test.shape[0]*100
    return float(acc)


# ---- synthetic stand-in for data_prep_openml ----

CAT_DIMS, N_CONT, N_TRAIN, N_VALID = [3, 4, 5], 4, 512, 128


def make_table(seed):
    rng = np.random.default_rng(seed)
    n = N_TRAIN + N_VALID
    cats = np.stack([rng.integers(0, d, size=n) for d in CAT_DIMS], axis=1)
    cont = rng.normal(0, 1, size=(n, N_CONT)) * np.array([1.0, 2.0, 0.5, 1.0]) + np.array([0.0, 3.0, -1.0, 0.0])
    cat_score = rng.normal(0, 1.5, size=CAT_DIMS[0])[cats[:, 0]] + rng.normal(0, 1.5, size=CAT_DIMS[1])[cats[:, 1]]
    y = ((cont[:, 0] + 0.5 * (cont[:, 1] - 3.0) + cat_score) > 0).astype(np.int64)[:, None]
    data = np.concatenate([cats, cont], axis=1)
    cat_idxs = list(range(len(CAT_DIMS)))
    con_idxs = list(range(len(CAT_DIMS), len(CAT_DIMS) + N_CONT))
    X_train = {'data': data[:N_TRAIN], 'mask': np.ones_like(data[:N_TRAIN])}
    X_valid = {'data': data[N_TRAIN:], 'mask': np.ones_like(data[N_TRAIN:])}
    y_train, y_valid = {'data': y[:N_TRAIN]}, {'data': y[N_TRAIN:]}
    train_mean = np.array(cont[:N_TRAIN].mean(0), dtype=np.float32)
    train_std = np.array(cont[:N_TRAIN].std(0), dtype=np.float32)
    return list(CAT_DIMS), cat_idxs, con_idxs, X_train, y_train, X_valid, y_valid, train_mean, train_std


class Opt:
    task = 'binary'
    cont_embeddings = 'MLP'
    embedding_size = 8
    transformer_depth = 6
    attention_heads = 8
    attention_dropout = 0.1
    ff_dropout = 0.1
    attentiontype = 'colrow'
    optimizer = 'AdamW'
    lr = 0.001
    batchsize = 64
    final_mlp_style = 'sep'
    dtask = 'clf'


def _build(seed, bug=None):
    opt = Opt()
    device = torch.device("cpu")
    torch.manual_seed(seed)
    cat_dims, cat_idxs, con_idxs, X_train, y_train, X_valid, y_valid, train_mean, train_std = make_table(seed)
    continuous_mean_std = np.array([train_mean,train_std]).astype(np.float32)

    _,nfeat = X_train['data'].shape
    if nfeat > 100:
        opt.embedding_size = min(8,opt.embedding_size)
        opt.batchsize = min(64, opt.batchsize)
    if opt.attentiontype != 'col':
        opt.transformer_depth = 1
        opt.attention_heads = min(4,opt.attention_heads)
        opt.attention_dropout = 0.8
        opt.embedding_size = min(32,opt.embedding_size)
        opt.ff_dropout = 0.8

    train_ds = DataSetCatCon(X_train, y_train, cat_idxs,opt.dtask,continuous_mean_std)
    trainloader = DataLoader(train_ds, batch_size=opt.batchsize, shuffle=True,num_workers=0)

    valid_ds = DataSetCatCon(X_valid, y_valid, cat_idxs,opt.dtask, continuous_mean_std)
    validloader = DataLoader(valid_ds, batch_size=opt.batchsize, shuffle=False,num_workers=0)
    if opt.task == 'regression':
        y_dim = 1
    else:
        y_dim = len(np.unique(y_train['data'][:,0]))

    cat_dims = np.append(np.array([1]),np.array(cat_dims)).astype(int) #Appending 1 for CLS token, this is later used to generate embeddings.

    model = SAINT(
    categories = tuple(cat_dims),
    num_continuous = len(con_idxs),
    dim = opt.embedding_size,
    dim_out = 1,
    depth = opt.transformer_depth,
    heads = opt.attention_heads,
    attn_dropout = opt.attention_dropout,
    ff_dropout = opt.ff_dropout,
    mlp_hidden_mults = (4, 2),
    cont_embeddings = opt.cont_embeddings,
    attentiontype = opt.attentiontype,
    final_mlp_style = opt.final_mlp_style,
    y_dim = y_dim
    )
    vision_dset = False
    model.bug = bug  # the bug switch read by embed_data_mask (None: the copied line runs)

    if y_dim == 2 and opt.task == 'binary':
        criterion = nn.CrossEntropyLoss().to(device)
    elif opt.task == 'regression':
        criterion = nn.MSELoss().to(device)

    model.to(device)
    optimizer = optim.AdamW(model.parameters(),lr=opt.lr)

    state = {"epoch": 0, "it": None}

    def next_data():
        while True:
            if state["it"] is None:
                model.train()  # the epoch loop's first line
                state["it"] = iter(trainloader)
            try:
                return next(state["it"])
            except StopIteration:
                state["it"] = None
                if state["epoch"]%5==0:
                    model.eval()
                    with torch.no_grad():
                        classification_scores(model, validloader, device, opt.task,vision_dset)
                    if bug != "train_mode_not_restored":  # bug: the `model.train()` after the evaluation dropped
                        model.train()
                state["epoch"] += 1
                if bug == "train_mode_not_restored":
                    state["it"] = iter(trainloader)  # (and no model.train() at the next epoch's start either)

    def train_step():
        data = next_data()
        optimizer.zero_grad()
        x_categ, x_cont, y_gts, cat_mask, con_mask = data[0].to(device), data[1].to(device),data[2].to(device),data[3].to(device),data[4].to(device)

        _ , x_categ_enc, x_cont_enc = embed_data_mask(x_categ, x_cont, cat_mask, con_mask,model,vision_dset)
        reps = model.transformer(x_categ_enc, x_cont_enc)
        y_reps = reps[:,0,:]

        y_outs = model.mlpfory(y_reps)
        if opt.task == 'regression':
            loss = criterion(y_outs,y_gts)
        else:
            loss = criterion(y_outs,y_gts.squeeze())
        loss.backward()
        optimizer.step()
        return loss.detach()

    def loss_fn(y_outs, y_gts):
        return criterion(y_outs,y_gts.squeeze())

    def eval_fn(model, batch):
        out = classification_scores(model, validloader, device, opt.task,vision_dset)
        model.train()
        return out

    first = next(iter(DataLoader(train_ds, batch_size=opt.batchsize, shuffle=False)))
    batch = ((first[0], first[1], first[3], first[4]), first[2])
    return Program(name="saint_binary", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the mask convention (1 = observed) read backwards in embed_data_mask, so every observed categorical
    # embedding is replaced by the "missing" mask embedding and the label cannot depend on the categorical columns.
    Bug("cat_mask_inverted", functools.partial(_build, bug="cat_mask_inverted"), "learning_ledger", ("DEPENDENCY",)),
    # classic: `model.train()` called once before the loop (not at each epoch start) and the one after the periodic
    # evaluation dropped, so training goes on in eval mode, the transformer's 0.8 dropout off, after the first
    # evaluation.
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe",
        ("transformer",)),
]
