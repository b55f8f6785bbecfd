"""RawNet2 speaker identification from raw waveforms, trained by the repository's ``train_RawNet2.py``: input
LayerNorm over the samples, a SincNet-style ``SincConv_fast`` front end (learnable band-pass cut-offs, |.|, max
pooling, BatchNorm, LeakyReLU 0.3), six residual blocks each with max pooling and a filter-wise feature map scaling
(``FRM``: sigmoid gates, multiplied and added), BatchNorm, a GRU read at its last step, a speaker-code layer whose
output is rescaled to norm 10, and the speaker classifier; ``nn.CrossEntropyLoss``, Adam with amsgrad (weight decay
1e-4 on every parameter whose name lacks "bn", none on the BatchNorm ones), the Keras-style learning-rate decay
``1 / (1 + 1e-4 * step)`` stepped every batch by ``LambdaLR``; evaluation by the EER of cosine similarities of the
speaker codes over trial pairs, in eval mode.

Source: https://github.com/Jungjee/RawNet
Commit: fd6121db44d994dce476bf7ad4a8ef067f841958
Files: python/RawNet2/model_RawNet2.py, python/RawNet2/trainer.py, python/RawNet2/train_RawNet2.py,
python/RawNet2/dataloader.py, python/RawNet2/parser.py, python/RawNet2/utils.py
License: MIT (Copyright (c) 2021 Jee-weon Jung; full text in LICENSES/Jungjee-RawNet.txt)
Domain: speech, speaker recognition (raw-waveform speaker embedding trained as speaker classification)

Kept as written: ``FRM``, ``Residual_block_wFRM``, ``LayerNorm``, ``SincConv_fast``, ``RawNet2`` (the code is the
repository's; including ``d_args['filts'][2][0] = d_args['filts'][2][1]``), ``init_weights`` applied with
``model.apply``, ``keras_lr_decay``, the two parameter groups (``'bn' in name``), ``torch.optim.Adam(params, lr, weight_decay,
amsgrad)``, the ``LambdaLR`` schedule, ``train_model``'s loop body (``model(m_batch, m_label)``, the cce loss,
zero_grad, backward, step, ``lr_scheduler.step()``), ``Dataset_VoxCeleb2.__getitem__`` (scale normalisation by the
maximum, a random crop of ``nb_samp`` samples or tiling of a short utterance), ``get_label_dic_Voxceleb``,
``cos_sim``, ``time_augmented_evaluate_model``'s embedding extraction and trial scoring; parser.py's defaults (lr
1e-3, wd 1e-4, Adam, amsgrad, lr_decay keras, in_channels 1, nb_gru_layer 1).

Deviations from the original:
- sizes for 2 CPU cores: first_conv (the sinc filters' length) 251 -> 129, nb_samp 59049 (3 ** 10) -> 6561 (3 ** 8, so that the GRU reads 3 frames after the seven
  max-poolings by 3), filts [128, [128, 128], [128, 256], [256, 256]] -> [16, [16, 16], [16, 32], [32, 32]],
  gru_node 1024 -> 64, nb_fc_node 1024 -> 64, bs 100 -> 16; the number of speakers is 8 (VoxCeleb2 has 5994);
- data: VoxCeleb2/VoxCeleb1 wav files (``soundfile``) are replaced by synthetic utterances made from ``seed`` at
  16 kHz: each of 8 "speakers" has a fundamental frequency and a spectral envelope of three formants, each
  utterance is that speaker's harmonics (f0 jittered per utterance, random phases, a slow amplitude envelope) plus
  noise, 0.3-0.6 s long (some shorter than ``nb_samp``, so both the crop and the tiling run); the utterance keys are
  ``<speaker>/<utt>.wav`` as ``get_utt_list`` gives them and the arrays are held in memory instead of read from disk;
  32 utterances per speaker for training, 4 per speaker for the evaluation trials;
- the evaluation trials (``veri_test.txt``) are every pair of the evaluation utterances (1 for the same speaker);
  sklearn's ``roc_curve`` and scipy's ``brentq`` on ``interp1d`` are replaced by the EER read off the written-out
  ROC (the point where the false-acceptance and false-rejection rates cross); the time-augmented evaluation set uses
  one window per utterance (the utterances are no longer than ``nb_samp`` windows allow); ``eval_fn`` scores a
  given batch of waveforms and speaker labels the same way (codes in eval mode, cosine similarity, EER);
- ``nn.DataParallel`` (``mg``), the device (CPU), tqdm, the prints of ``init_weights`` and of the arguments, the
  result files, comet and checkpoint saving are dropped; ``num_workers`` 8 -> 0;
- ``init_weights`` calls ``xavier_uniform_`` for the deprecated ``xavier_uniform`` (the same initialisation);
- one ``train_step`` is one batch of ``train_model``, starting with its ``model.train()`` (the original calls it once
  per epoch, after the previous epoch's evaluation left the model in eval mode);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, C408, UP031, PLR0402, SIM102, UP034, B006
# (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils import data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SAMPLE_RATE = 16000
NB_SPK = 8
NB_UTT_TRAIN = 32
NB_UTT_EVAL = 4

# parser.py's defaults (sizes reduced, see the docstring)
ARGS = dict(bs=16, lr=0.001, nb_samp=6561, wd=0.0001, optimizer='Adam', nb_worker=0, lr_decay='keras',
            amsgrad=True, do_lr_decay=True)
MODEL_ARGS = dict(first_conv=129, in_channels=1, filts=[16, [16, 16], [16, 32], [32, 32]], blocks=[2, 4],
                  nb_fc_att_node=[1], nb_fc_node=64, gru_node=64, nb_gru_layer=1, nb_samp=6561)


# ---- python/RawNet2/model_RawNet2.py ----------------------------------------------------------------------------
class FRM(nn.Module):
    def __init__(self, nb_dim, do_add = True, do_mul = True):
        super(FRM, self).__init__()
        self.fc = nn.Linear(nb_dim, nb_dim)
        self.sig = nn.Sigmoid()
        self.do_add = do_add
        self.do_mul = do_mul
    def forward(self, x):
        y = F.adaptive_avg_pool1d(x, 1).view(x.size(0), -1)
        y = self.sig(self.fc(y)).view(x.size(0), x.size(1), -1)

        if self.do_mul: x = x * y
        if self.do_add: x = x + y
        return x

class Residual_block_wFRM(nn.Module):
    def __init__(self, nb_filts, first = False):
        super(Residual_block_wFRM, self).__init__()
        self.first = first
        if not self.first:
            self.bn1 = nn.BatchNorm1d(num_features = nb_filts[0])
        self.lrelu = nn.LeakyReLU()
        self.lrelu_keras = nn.LeakyReLU(negative_slope=0.3)
        
        self.conv1 = nn.Conv1d(in_channels = nb_filts[0],
            out_channels = nb_filts[1],
            kernel_size = 3,
            padding = 1,
            stride = 1)
        self.bn2 = nn.BatchNorm1d(num_features = nb_filts[1])
        self.conv2 = nn.Conv1d(in_channels = nb_filts[1],
            out_channels = nb_filts[1],
            padding = 1,
            kernel_size = 3,
            stride = 1)
        
        if nb_filts[0] != nb_filts[1]:
            self.downsample = True
            self.conv_downsample = nn.Conv1d(in_channels = nb_filts[0],
                out_channels = nb_filts[1],
                padding = 0,
                kernel_size = 1,
                stride = 1)
            
        else:
            self.downsample = False
        self.mp = nn.MaxPool1d(3)
        self.frm = FRM(
            nb_dim = nb_filts[1],
            do_add = True,
            do_mul = True)
        
    def forward(self, x):
        identity = x
        if not self.first:
            out = self.bn1(x)
            out = self.lrelu_keras(out)
        else:
            out = x
            
        out = self.conv1(out)
        out = self.bn2(out)
        out = self.lrelu_keras(out)
        out = self.conv2(out)
        
        if self.downsample:
            identity = self.conv_downsample(identity)
            
        out += identity
        out = self.mp(out)
        out = self.frm(out)
        return out

class LayerNorm(nn.Module):

    def __init__(self, features, eps=1e-6):
        super(LayerNorm,self).__init__()
        self.gamma = nn.Parameter(torch.ones(features))
        self.beta = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.gamma * (x - mean) / (std + self.eps) + self.beta

class SincConv_fast(nn.Module):
    """Sinc-based convolution
    Parameters
    ----------
    in_channels : `int`
        Number of input channels. Must be 1.
    out_channels : `int`
        Number of filters.
    kernel_size : `int`
        Filter length.
    sample_rate : `int`, optional
        Sample rate. Defaults to 16000.
    Usage
    -----
    See `torch.nn.Conv1d`
    Reference
    ---------
    Mirco Ravanelli, Yoshua Bengio,
    "Speaker Recognition from raw waveform with SincNet".
    https://arxiv.org/abs/1808.00158
    """

    @staticmethod
    def to_mel(hz):
        return 2595 * np.log10(1 + hz / 700)

    @staticmethod
    def to_hz(mel):
        return 700 * (10 ** (mel / 2595) - 1)

    def __init__(self, out_channels, kernel_size, sample_rate=16000, in_channels=1,
                 stride=1, padding=0, dilation=1, bias=False, groups=1, min_low_hz=50, min_band_hz=50):

        super(SincConv_fast,self).__init__()

        if in_channels != 1:
            #msg = (f'SincConv only support one input channel '
            #       f'(here, in_channels = {in_channels:d}).')
            msg = "SincConv only support one input channel (here, in_channels = {%i})" % (in_channels)
            raise ValueError(msg)

        self.out_channels = out_channels
        self.kernel_size = kernel_size
        
        # Forcing the filters to be odd (i.e, perfectly symmetrics)
        if kernel_size%2==0:
            self.kernel_size=self.kernel_size+1
            
        self.stride = stride
        self.padding = padding
        self.dilation = dilation

        if bias:
            raise ValueError('SincConv does not support bias.')
        if groups > 1:
            raise ValueError('SincConv does not support groups.')

        self.sample_rate = sample_rate
        self.min_low_hz = min_low_hz
        self.min_band_hz = min_band_hz

        # initialize filterbanks such that they are equally spaced in Mel scale
        low_hz = 30
        high_hz = self.sample_rate / 2 - (self.min_low_hz + self.min_band_hz)

        mel = np.linspace(self.to_mel(low_hz),
                          self.to_mel(high_hz),
                          self.out_channels + 1)
        hz = self.to_hz(mel)
        

        # filter lower frequency (out_channels, 1)
        self.low_hz_ = nn.Parameter(torch.Tensor(hz[:-1]).view(-1, 1))

        # filter frequency band (out_channels, 1)
        self.band_hz_ = nn.Parameter(torch.Tensor(np.diff(hz)).view(-1, 1))

        # Hamming window
        #self.window_ = torch.hamming_window(self.kernel_size)
        n_lin=torch.linspace(0, (self.kernel_size/2)-1, steps=int((self.kernel_size/2))) # computing only half of the window
        self.window_=0.54-0.46*torch.cos(2*math.pi*n_lin/self.kernel_size);

        # (1, kernel_size/2)
        n = (self.kernel_size - 1) / 2.0
        self.n_ = 2*math.pi*torch.arange(-n, 0).view(1, -1) / self.sample_rate # Due to symmetry, I only need half of the time axes

    def forward(self, waveforms):
        """
        Parameters
        ----------
        waveforms : `torch.Tensor` (batch_size, 1, n_samples)
            Batch of waveforms.
        Returns
        -------
        features : `torch.Tensor` (batch_size, out_channels, n_samples_out)
            Batch of sinc filters activations.
        """

        self.n_ = self.n_.to(waveforms.device)

        self.window_ = self.window_.to(waveforms.device)

        low = self.min_low_hz  + torch.abs(self.low_hz_)
        
        high = torch.clamp(low + self.min_band_hz + torch.abs(self.band_hz_),self.min_low_hz,self.sample_rate/2)
        band=(high-low)[:,0]
        
        f_times_t_low = torch.matmul(low, self.n_)
        f_times_t_high = torch.matmul(high, self.n_)

        band_pass_left=((torch.sin(f_times_t_high)-torch.sin(f_times_t_low))/(self.n_/2))*self.window_ # Equivalent of Eq.4 of the reference paper (SPEAKER RECOGNITION FROM RAW WAVEFORM WITH SINCNET). I just have expanded the sinc and simplified the terms. This way I avoid several useless computations. 
        band_pass_center = 2*band.view(-1,1)
        band_pass_right= torch.flip(band_pass_left,dims=[1])
        
        
        band_pass=torch.cat([band_pass_left,band_pass_center,band_pass_right],dim=1)

        
        band_pass = band_pass / (2*band[:,None])
        

        self.filters = (band_pass).view(
            self.out_channels, 1, self.kernel_size)

        return F.conv1d(waveforms, self.filters, stride=self.stride,
                        padding=self.padding, dilation=self.dilation,
                         bias=None, groups=1) 
    
class RawNet2(nn.Module):
    def __init__(self, d_args, bug = None):
        super(RawNet2, self).__init__()
        self.bug = bug

        self.ln = LayerNorm(d_args['nb_samp'])
        self.first_conv = SincConv_fast(in_channels = d_args['in_channels'],
            out_channels = d_args['filts'][0],
            kernel_size = d_args['first_conv']
            )

        self.first_bn = nn.BatchNorm1d(num_features = d_args['filts'][0])
        self.lrelu = nn.LeakyReLU()
        self.lrelu_keras = nn.LeakyReLU(negative_slope = 0.3)
        
        self.block0 = nn.Sequential(Residual_block_wFRM(nb_filts = d_args['filts'][1], first = True))
        self.block1 = nn.Sequential(Residual_block_wFRM(nb_filts = d_args['filts'][1]))
 
        self.block2 = nn.Sequential(Residual_block_wFRM(nb_filts = d_args['filts'][2]))
        d_args['filts'][2][0] = d_args['filts'][2][1]
        self.block3 = nn.Sequential(Residual_block_wFRM(nb_filts = d_args['filts'][2]))
        self.block4 = nn.Sequential(Residual_block_wFRM(nb_filts = d_args['filts'][2]))
        self.block5 = nn.Sequential(Residual_block_wFRM(nb_filts = d_args['filts'][2]))
        self.avgpool = nn.AdaptiveAvgPool1d(1)

        self.bn_before_gru = nn.BatchNorm1d(num_features = d_args['filts'][2][-1])
        self.gru = nn.GRU(input_size = d_args['filts'][2][-1],
            hidden_size = d_args['gru_node'],
            num_layers = d_args['nb_gru_layer'],
            batch_first = True)

        
        self.fc1_gru = nn.Linear(in_features = d_args['gru_node'],
            out_features = d_args['nb_fc_node'])
        self.fc2_gru = nn.Linear(in_features = d_args['nb_fc_node'],
            out_features = d_args['nb_classes'],
            bias = True)
        
        self.sig = nn.Sigmoid()
        
    def forward(self, x, y = 0, is_test=False):
        #follow sincNet recipe
        nb_samp = x.shape[0]
        len_seq = x.shape[1]
        x = self.ln(x)
        x=x.view(nb_samp,1,len_seq)
        x = F.max_pool1d(torch.abs(self.first_conv(x)), 3)
        x = self.first_bn(x)
        x = self.lrelu_keras(x)
        
        x = self.block0(x)
        x = self.block1(x)

        x = self.block2(x)
        x = self.block3(x)
        x = self.block4(x)
        x = self.block5(x)

        x = self.bn_before_gru(x)
        x = self.lrelu_keras(x)
        x = x.permute(0, 2, 1)  #(batch, filt, time) >> (batch, time, filt)
        self.gru.flatten_parameters()
        x, _ = self.gru(x)
        if self.bug == "gru_read_at_first_step":
            x = x[:,0,:]
        else:
            x = x[:,-1,:]
        code = self.fc1_gru(x)
        if is_test: return code
        
        code_norm = code.norm(p=2,dim=1, keepdim=True) / 10.
        code = torch.div(code, code_norm)
        out = self.fc2_gru(code)
        return out

# ---- python/RawNet2/utils.py ------------------------------------------------------------------------------------

def keras_lr_decay(step, decay = 0.0001):
    return 1./(1. + decay * step)

def init_weights(m):
    # print(m)  (port) the prints are dropped
    if isinstance(m, nn.Linear):
        torch.nn.init.xavier_uniform_(m.weight)
        m.bias.data.fill_(0.0001)
    elif isinstance(m, nn.BatchNorm1d):
        pass
    else:
        if hasattr(m, 'weight'):
            torch.nn.init.kaiming_normal_(m.weight, a=0.01)

def cos_sim(a,b):
    return np.dot(a,b) / (np.linalg.norm(a) * np.linalg.norm(b))

def get_label_dic_Voxceleb(l_utt):
    d_label = {}
    idx_counter = 0
    for utt in l_utt:
        spk = utt.split('/')[0]
        if spk not in d_label:
            d_label[spk] = idx_counter
            idx_counter += 1
    return d_label


# ---- python/RawNet2/dataloader.py -------------------------------------------------------------------------------

class Dataset_VoxCeleb2(data.Dataset):
	def __init__(self, list_IDs, base_dir, nb_samp = 0, labels = {}, cut = True, return_label = True, norm_scale = True):
		'''
		self.list_IDs	: list of strings (each string: utt key)
		self.labels		: dictionary (key: utt key, value: label integer)
		self.nb_samp	: integer, the number of timesteps for each mini-batch
		cut				: (boolean) adjust utterance duration for mini-batch construction
		return_label	: (boolean)
		norm_scale		: (boolean) normalize scale alike SincNet github repo
		'''
		self.list_IDs = list_IDs
		self.nb_samp = nb_samp
		self.base_dir = base_dir
		self.labels = labels
		self.cut = cut
		self.return_label = return_label
		self.norm_scale = norm_scale
		if self.cut and self.nb_samp == 0: raise ValueError('when adjusting utterance length, "nb_samp" should be input')

	def __len__(self):
		return len(self.list_IDs)

	def __getitem__(self, index):
		ID = self.list_IDs[index]
		X = self.base_dir[ID]  # (port) sf.read(self.base_dir+ID): the synthetic waveform held in memory
		X = X.astype(np.float64)

		if self.norm_scale:
			X = self._normalize_scale(X).astype(np.float32)
		X = X.reshape(1,-1) #because of LayerNorm for the input

		if self.cut:
			nb_time = X.shape[1]
			if nb_time > self.nb_samp:
				start_idx = np.random.randint(low = 0, high = nb_time - self.nb_samp)
				X = X[:, start_idx : start_idx + self.nb_samp][0]
			elif nb_time < self.nb_samp:
				nb_dup = int(self.nb_samp / nb_time) + 1
				X = np.tile(X, (1, nb_dup))[:, :self.nb_samp][0]
			else:
				X = X[0]
		if not self.return_label:
			return X
		y = self.labels[ID.split('/')[0]]
		return X, y

	def _normalize_scale(self, x):
		'''
		Normalize sample scale alike SincNet.
		'''
		return x/np.max(np.abs(x))


# ---- (port) synthetic speakers --------------------------------------------------------------------------------

def make_corpus(rng, nb_spk, nb_utt, speakers=None):
    """{'<spk>/<utt>.wav': waveform}: each speaker's harmonics under its three-formant envelope, plus noise."""
    if speakers is None:
        speakers = [(rng.uniform(90, 260), rng.uniform(300, 3500, size=3)) for _ in range(nb_spk)]
    wavs = {}
    for s, (f0, formants) in enumerate(speakers):
        for u in range(nb_utt):
            n = int(rng.uniform(0.3, 0.6) * SAMPLE_RATE)
            t = np.arange(n) / SAMPLE_RATE
            f = f0 * rng.uniform(0.95, 1.05)
            h = np.arange(1, int(4000 / f))[:, None]
            amp = np.exp(-((h * f - formants[None, :]) / 250.0) ** 2).sum(1, keepdims=True) + 0.05
            x = (amp * np.sin(2 * np.pi * h * f * t[None, :] + rng.uniform(0, 2 * np.pi, size=(len(h), 1)))).sum(0)
            x *= 0.6 + 0.4 * np.sin(2 * np.pi * rng.uniform(2, 5) * t + rng.uniform(0, 2 * np.pi))
            x += 0.3 * rng.standard_normal(n)
            wavs['id%05d/%05d.wav' % (s, u)] = x
    return wavs, speakers


def eer_from_scores(y, y_score):
    """(port) sklearn's roc_curve + brentq(interp1d): where the false-acceptance and false-rejection rates cross."""
    y, y_score = np.asarray(y), np.asarray(y_score)
    thresholds = np.sort(np.unique(y_score))
    far = np.array([np.mean(y_score[y == 0] >= th) for th in thresholds])
    frr = np.array([np.mean(y_score[y == 1] < th) for th in thresholds])
    i = int(np.argmin(np.abs(far - frr)))
    return float((far[i] + frr[i]) / 2)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)
    args = type('Args', (), dict(ARGS))()
    args.model = {k: (v if not isinstance(v, list) else [list(x) if isinstance(x, list) else x for x in v])
                  for k, v in MODEL_ARGS.items()}
    device = torch.device('cpu')

    #get utt_lists & define labels
    dev_wavs, speakers = make_corpus(rng, NB_SPK, NB_UTT_TRAIN)
    eval_wavs, _ = make_corpus(rng, NB_SPK, NB_UTT_EVAL, speakers)
    l_dev = sorted(dev_wavs)
    l_eval = sorted(eval_wavs)
    d_label_vox2 = get_label_dic_Voxceleb(l_dev)
    args.model['nb_classes'] = len(list(d_label_vox2.keys()))
    l_eval_trial = ['%d %s %s\n' % (int(a.split('/')[0] == b.split('/')[0]), a, b)
                    for i, a in enumerate(l_eval) for b in l_eval[i + 1:]]

    #define dataset generators
    devset = Dataset_VoxCeleb2(list_IDs = l_dev,
        labels = d_label_vox2,
        nb_samp = args.nb_samp,
        base_dir = dev_wavs)
    devset_gen = data.DataLoader(devset,
        batch_size = args.bs,
        shuffle = True,
        drop_last = True,
        num_workers = args.nb_worker)
    TA_evalset = Dataset_VoxCeleb2(list_IDs = l_eval,
        return_label = False,
        nb_samp = args.nb_samp,
        base_dir = eval_wavs)

    #define model
    model = RawNet2(args.model, bug = bug).to(device)
    model.apply(init_weights)

    #set ojbective funtions
    criterion = {}
    criterion['cce'] = nn.CrossEntropyLoss()

    #set optimizer
    params = [
        {
            'params': [
                param for name, param in model.named_parameters()
                if 'bn' not in name
            ]
        },
        {
            'params': [
                param for name, param in model.named_parameters()
                if 'bn' in name
            ],
            'weight_decay':
            0
        },
    ]
    optimizer = torch.optim.Adam(params,
        lr = args.lr,
        weight_decay = args.wd,
        amsgrad = args.amsgrad)

    #set learning rate decay
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda = lambda step: keras_lr_decay(step))

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            state["it"] = iter(devset_gen)
            return next(state["it"])

    def train_step():
        # one batch of train_model(model, db_gen, optimizer, epoch, args, device, lr_scheduler, criterion)
        model.train()
        m_batch, m_label = next_batch()

        m_batch, m_label = m_batch.to(device), m_label.to(device)

        output = model(m_batch, m_label)
        cce_loss = criterion['cce'](output, m_label)
        loss = cce_loss

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.do_lr_decay:
            if args.lr_decay == 'keras': lr_scheduler.step()
        return loss.detach()

    def score_trials(model, l_embeddings, l_utt, l_trial):
        # time_augmented_evaluate_model's scoring (sklearn/scipy written out, see the docstring)
        d_embeddings = {}
        for k, v in zip(l_utt, l_embeddings):
            d_embeddings[k] = v
        y_score = [] # score for each sample
        y = [] # label for each sample
        for line in l_trial:
            trg, utt_a, utt_b = line.strip().split(' ')
            y.append(int(trg))
            y_score.append(cos_sim(d_embeddings[utt_a], d_embeddings[utt_b]))
        return eer_from_scores(y, y_score)

    def embed(model, batches):
        if bug != "eval_without_model_eval":
            model.eval()
        with torch.set_grad_enabled(False):
            l_embeddings = []
            for m_batch in batches:
                code = model(x = m_batch.to(device), is_test=True)
                l_embeddings.extend(code.cpu().numpy())
        return l_embeddings

    def time_augmented_evaluate_model(model):  # (port) the epoch-end evaluation, not run by train_step
        batches = [torch.stack([torch.as_tensor(TA_evalset[i]) for i in range(j, min(j + args.bs, len(l_eval)))])
                   for j in range(0, len(l_eval), args.bs)]
        return score_trials(model, embed(model, batches), l_eval, l_eval_trial)

    def eval_fn(model, batch):
        x, labels = batch
        keys = ['id%05d/%05d.wav' % (int(s), i) for i, s in enumerate(labels)]
        trials = ['%d %s %s\n' % (int(labels[i] == labels[j]), keys[i], keys[j])
                  for i in range(len(keys)) for j in range(i + 1, len(keys))]
        return score_trials(model, embed(model, [x]), keys, trials)

    # the Program's batch: bs training utterances spread over the speakers (the first of each equal share)
    first = next(iter(data.DataLoader(data.Subset(devset, range(0, len(devset), len(devset) // args.bs)),
                                      batch_size = args.bs, shuffle = False)))
    batch = (first[0], first[1])

    return Program(name="rawnet_rawnet2", model=model, batch=batch, loss_fn=criterion['cce'], optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=devset_gen)


build = functools.partial(_build, bug=None)

BUGS = [
    # the GRU read at its first step, x[:, 0, :], instead of its last (classic): the speaker code is computed from the
    # first frame of the waveform alone.
    Bug("gru_read_at_first_step", functools.partial(_build, bug="gru_read_at_first_step"), "learning_ledger",
        ("DEPENDENCY",)),
    # the evaluation without model.eval() (classic): the BatchNorm layers normalise the evaluation batch by its own
    # statistics and update their running statistics while the EER is computed.
    Bug("eval_without_model_eval", functools.partial(_build, bug="eval_without_model_eval"), "six_claims",
        ("EVALUATION",)),
]
