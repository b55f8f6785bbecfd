"""SincNet speaker identification from raw waveforms: a ``SincConv_fast`` layer (learnable band-pass sinc filters with
mel-spaced initial cut-offs and a Hamming window) on |conv| + max-pooling + layer norm, two standard convolutions,
an MLP of batch-normalized leaky-ReLU layers and a ``LogSoftmax`` classifier, trained by ``speaker_id.py``: random
200 ms chunks of random sentences with a random amplitude factor, ``NLLLoss``, one RMSprop (lr 1e-3, alpha 0.95,
eps 1e-8) per network, each zeroed and stepped in turn.

Source: https://github.com/mravanelli/SincNet
Commit: d74164861d8bd8ab9cb02f102d677f5605edfbf4
Files: speaker_id.py, dnn_models.py, cfg/SincNet_TIMIT.cfg
License: MIT (Copyright (c) 2019 Mirco Ravanelli)
Domain: speech / audio (speaker identification on raw waveforms)

Deviations from the original:
- sizes (cfg/SincNet_TIMIT.cfg): fs 16000 -> 8000, cw_len 200 ms -> 50 ms (wlen 400 samples), cnn_N_filt
  80,60,60 -> 16,16,16, cnn_len_filt 251,5,5 -> 51,5,5, fc_lay 2048 x3 -> 64 x3, class_lay 462 -> 8 speakers,
  batch_size 128 -> 16; every other [cnn]/[dnn]/[class]/[optimization] option (norms, activations, dropout 0,
  lr, RMSprop settings) as in the config;
- data: TIMIT is replaced by synthetic "sentences" made from ``seed``: each of the 8 speakers has its own pitch (log-spaced
  100-1200 Hz, jittered) and harmonic weights, every sentence is that voice with random phases, an amplitude
  envelope at an eighth of the pitch and noise (one sentence per speaker held out for validation); ``sf.read`` is replaced by a lookup in that in-memory set, and the label dictionary maps each sentence
  to its speaker as ``TIMIT_labels.npy`` does; ``read_conf`` is replaced by the config values written out;
- ``.cuda()`` calls and ``Variable`` wrappers are dropped (CPU); ``np.load(...).item()`` is not needed;
- the three networks, called as ``DNN2_net(DNN1_net(CNN_net(inp)))`` in the loop, are held by one ``SpeakerID``
  module (attributes ``CNN_net``, ``DNN1_net``, ``DNN2_net``) so that a single model can be declared; its
  ``forward`` is that call;
- one ``train_step`` is one iteration of the inner batch loop; the declared ``optimizer`` is ``optimizer_DNN1`` (the
  program has three: ``optimizer_CNN``, ``optimizer_DNN1``, ``optimizer_DNN2``, all stepped by ``train_step``);
  ``eval_fn`` is the script's full validation on a few held-out sentences (chunked with ``cw_shift``, sentence
  decision by summed posteriors), returning the frame error; the unused legacy ``sinc_conv``/``sinc``/``flip``
  and checkpoint saving are left out; ``SELF_CHECK_STEPS`` is 80 (the loop's RMSprop at lr 1e-3 from the
  original's small MLP initialization needs more than 30 steps to move the loss on this data).
"""
# ruff: noqa: PLR0402, UP008, UP031, UP034, F841, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- dnn_models.py ------------------------------------------------------------------------------------------------

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


def act_fun(act_type):

 if act_type=="relu":
    return nn.ReLU()

 if act_type=="tanh":
    return nn.Tanh()

 if act_type=="sigmoid":
    return nn.Sigmoid()

 if act_type=="leaky_relu":
    return nn.LeakyReLU(0.2)

 if act_type=="elu":
    return nn.ELU()

 if act_type=="softmax":
    return nn.LogSoftmax(dim=1)

 if act_type=="linear":
    return nn.LeakyReLU(1) # initializzed like this, but not used in forward!


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


class MLP(nn.Module):
    def __init__(self, options):
        super(MLP, self).__init__()

        self.input_dim=int(options['input_dim'])
        self.fc_lay=options['fc_lay']
        self.fc_drop=options['fc_drop']
        self.fc_use_batchnorm=options['fc_use_batchnorm']
        self.fc_use_laynorm=options['fc_use_laynorm']
        self.fc_use_laynorm_inp=options['fc_use_laynorm_inp']
        self.fc_use_batchnorm_inp=options['fc_use_batchnorm_inp']
        self.fc_act=options['fc_act']

        self.wx  = nn.ModuleList([])
        self.bn  = nn.ModuleList([])
        self.ln  = nn.ModuleList([])
        self.act = nn.ModuleList([])
        self.drop = nn.ModuleList([])

        # input layer normalization
        if self.fc_use_laynorm_inp:
           self.ln0=LayerNorm(self.input_dim)

        # input batch normalization
        if self.fc_use_batchnorm_inp:
           self.bn0=nn.BatchNorm1d([self.input_dim],momentum=0.05)

        self.N_fc_lay=len(self.fc_lay)

        current_input=self.input_dim

        # Initialization of hidden layers

        for i in range(self.N_fc_lay):

         # dropout
         self.drop.append(nn.Dropout(p=self.fc_drop[i]))

         # activation
         self.act.append(act_fun(self.fc_act[i]))

         add_bias=True

         # layer norm initialization
         self.ln.append(LayerNorm(self.fc_lay[i]))
         self.bn.append(nn.BatchNorm1d(self.fc_lay[i],momentum=0.05))

         if self.fc_use_laynorm[i] or self.fc_use_batchnorm[i]:
             add_bias=False

         # Linear operations
         self.wx.append(nn.Linear(current_input, self.fc_lay[i],bias=add_bias))

         # weight initialization
         self.wx[i].weight = torch.nn.Parameter(torch.Tensor(self.fc_lay[i],current_input).uniform_(-np.sqrt(0.01/(current_input+self.fc_lay[i])),np.sqrt(0.01/(current_input+self.fc_lay[i]))))
         self.wx[i].bias = torch.nn.Parameter(torch.zeros(self.fc_lay[i]))

         current_input=self.fc_lay[i]

    def forward(self, x):

      # Applying Layer/Batch Norm
      if bool(self.fc_use_laynorm_inp):
        x=self.ln0((x))

      if bool(self.fc_use_batchnorm_inp):
        x=self.bn0((x))

      for i in range(self.N_fc_lay):

        if self.fc_act[i]!='linear':

          if self.fc_use_laynorm[i]:
           x = self.drop[i](self.act[i](self.ln[i](self.wx[i](x))))

          if self.fc_use_batchnorm[i]:
           x = self.drop[i](self.act[i](self.bn[i](self.wx[i](x))))

          if self.fc_use_batchnorm[i]==False and self.fc_use_laynorm[i]==False:
           x = self.drop[i](self.act[i](self.wx[i](x)))

        else:
          if self.fc_use_laynorm[i]:
           x = self.drop[i](self.ln[i](self.wx[i](x)))

          if self.fc_use_batchnorm[i]:
           x = self.drop[i](self.bn[i](self.wx[i](x)))

          if self.fc_use_batchnorm[i]==False and self.fc_use_laynorm[i]==False:
           x = self.drop[i](self.wx[i](x))

      return x


class SincNet(nn.Module):

    def __init__(self,options):
       super(SincNet,self).__init__()

       self.cnn_N_filt=options['cnn_N_filt']
       self.cnn_len_filt=options['cnn_len_filt']
       self.cnn_max_pool_len=options['cnn_max_pool_len']

       self.cnn_act=options['cnn_act']
       self.cnn_drop=options['cnn_drop']

       self.cnn_use_laynorm=options['cnn_use_laynorm']
       self.cnn_use_batchnorm=options['cnn_use_batchnorm']
       self.cnn_use_laynorm_inp=options['cnn_use_laynorm_inp']
       self.cnn_use_batchnorm_inp=options['cnn_use_batchnorm_inp']

       self.input_dim=int(options['input_dim'])

       self.fs=options['fs']

       self.N_cnn_lay=len(options['cnn_N_filt'])
       self.conv  = nn.ModuleList([])
       self.bn  = nn.ModuleList([])
       self.ln  = nn.ModuleList([])
       self.act = nn.ModuleList([])
       self.drop = nn.ModuleList([])

       if self.cnn_use_laynorm_inp:
           self.ln0=LayerNorm(self.input_dim)

       if self.cnn_use_batchnorm_inp:
           self.bn0=nn.BatchNorm1d([self.input_dim],momentum=0.05)

       current_input=self.input_dim

       for i in range(self.N_cnn_lay):

         N_filt=int(self.cnn_N_filt[i])
         len_filt=int(self.cnn_len_filt[i])

         # dropout
         self.drop.append(nn.Dropout(p=self.cnn_drop[i]))

         # activation
         self.act.append(act_fun(self.cnn_act[i]))

         # layer norm initialization
         self.ln.append(LayerNorm([N_filt,int((current_input-self.cnn_len_filt[i]+1)/self.cnn_max_pool_len[i])]))

         self.bn.append(nn.BatchNorm1d(N_filt,int((current_input-self.cnn_len_filt[i]+1)/self.cnn_max_pool_len[i]),momentum=0.05))

         if i==0:
          self.conv.append(SincConv_fast(self.cnn_N_filt[0],self.cnn_len_filt[0],self.fs))

         else:
          self.conv.append(nn.Conv1d(self.cnn_N_filt[i-1], self.cnn_N_filt[i], self.cnn_len_filt[i]))

         current_input=int((current_input-self.cnn_len_filt[i]+1)/self.cnn_max_pool_len[i])

       self.out_dim=current_input*N_filt

    def forward(self, x):
       batch=x.shape[0]
       seq_len=x.shape[1]

       if bool(self.cnn_use_laynorm_inp):
        x=self.ln0((x))

       if bool(self.cnn_use_batchnorm_inp):
        x=self.bn0((x))

       x=x.view(batch,1,seq_len)

       for i in range(self.N_cnn_lay):

         if self.cnn_use_laynorm[i]:
          if i==0:
           x = self.drop[i](self.act[i](self.ln[i](F.max_pool1d(torch.abs(self.conv[i](x)), self.cnn_max_pool_len[i]))))
          else:
           x = self.drop[i](self.act[i](self.ln[i](F.max_pool1d(self.conv[i](x), self.cnn_max_pool_len[i]))))

         if self.cnn_use_batchnorm[i]:
          x = self.drop[i](self.act[i](self.bn[i](F.max_pool1d(self.conv[i](x), self.cnn_max_pool_len[i]))))

         if self.cnn_use_batchnorm[i]==False and self.cnn_use_laynorm[i]==False:
          x = self.drop[i](self.act[i](F.max_pool1d(self.conv[i](x), self.cnn_max_pool_len[i])))

       x = x.view(batch,-1)

       return x


class SpeakerID(nn.Module):
    """The loop's ``DNN2_net(DNN1_net(CNN_net(inp)))`` held by one module (deviation, see the docstring)."""

    def __init__(self, CNN_net, DNN1_net, DNN2_net):
        super().__init__()
        self.CNN_net = CNN_net
        self.DNN1_net = DNN1_net
        self.DNN2_net = DNN2_net

    def forward(self, inp):
        return self.DNN2_net(self.DNN1_net(self.CNN_net(inp)))


# ---- speaker_id.py ------------------------------------------------------------------------------------------------

SELF_CHECK_STEPS = 80
N_SPK = 8
SNT_PER_SPK = 6
SNT_LEN = 4000


def make_corpus(seed):
    """Synthetic sentences: each speaker a pitch and harmonic weights; a sentence is that voice with random phases,
    a slow amplitude envelope and noise (replaces TIMIT)."""
    rng = np.random.RandomState(seed)
    fs = 8000
    t = np.arange(SNT_LEN) / fs
    voices = [(f0, rng.dirichlet(np.ones(6))) for f0 in np.geomspace(100, 1200, N_SPK) * rng.uniform(0.95, 1.05, N_SPK)]
    signals, lab_dict, wav_lst_tr, wav_lst_te = {}, {}, [], []
    for spk, (f0, w) in enumerate(voices):
        for s in range(SNT_PER_SPK):
            f = f0 * rng.uniform(0.97, 1.03)
            sig = sum(w[h] * np.sin(2 * np.pi * f * (h + 1) * t + rng.uniform(0, 2 * np.pi)) for h in range(6))
            env = 0.6 + 0.4 * np.sin(2 * np.pi * f0 / 8 * t + rng.uniform(0, 2 * np.pi))
            sig = sig * env + 0.05 * rng.randn(SNT_LEN)
            name = 'train/spk%d/snt%d.wav' % (spk, s) if s < SNT_PER_SPK - 1 else 'test/spk%d/snt%d.wav' % (spk, s)
            signals[name] = (sig / np.abs(sig).max()).astype(np.float64)
            lab_dict[name] = spk
            (wav_lst_tr if s < SNT_PER_SPK - 1 else wav_lst_te).append(name)
    return signals, lab_dict, wav_lst_tr, wav_lst_te


def create_batches_rnd(batch_size,data_folder,wav_lst,N_snt,wlen,lab_dict,fact_amp,sf,bug=None):

 # Initialization of the minibatch (batch_size,[0=>x_t,1=>x_t+N,1=>random_samp])
 sig_batch=np.zeros([batch_size,wlen])
 lab_batch=np.zeros(batch_size)

 snt_id_arr=np.random.randint(N_snt, size=batch_size)

 rand_amp_arr = np.random.uniform(1.0-fact_amp,1+fact_amp,batch_size)

 for i in range(batch_size):

  # select a random sentence from the list
  [signal, fs] = sf.read(data_folder+wav_lst[snt_id_arr[i]])

  # accesing to a random chunk
  snt_len=signal.shape[0]
  snt_beg=np.random.randint(snt_len-wlen-1) #randint(0, snt_len-2*wlen-1)
  snt_end=snt_beg+wlen

  channels = len(signal.shape)
  if channels == 2:
    print('WARNING: stereo to mono: '+data_folder+wav_lst[snt_id_arr[i]])
    signal = signal[:,0]

  sig_batch[i,:]=signal[snt_beg:snt_end]*rand_amp_arr[i]
  if bug == "labels_from_previous_draw":
   lab_batch[i]=lab_dict[wav_lst[snt_id_arr[i-1]]]
  else:
   lab_batch[i]=lab_dict[wav_lst[snt_id_arr[i]]]

 inp=torch.from_numpy(sig_batch).float().contiguous()
 lab=torch.from_numpy(lab_batch).float().contiguous()

 return inp,lab


class _InMemorySoundfile:
    """``sf.read`` over the synthetic corpus (deviation: no audio files here)."""

    def __init__(self, signals, fs):
        self.signals, self.fs = signals, fs

    def read(self, path):
        return [self.signals[path], self.fs]


def _build(seed, bug=None):
    signals, lab_dict, wav_lst_tr, wav_lst_te = make_corpus(seed)

    #[data]
    data_folder=''
    #[windowing]
    fs=8000
    cw_len=50
    cw_shift=10
    #[cnn]
    cnn_N_filt=[16,16,16]
    cnn_len_filt=[51,5,5]
    cnn_max_pool_len=[3,3,3]
    cnn_use_laynorm_inp=True
    cnn_use_batchnorm_inp=False
    cnn_use_laynorm=[True,True,True]
    cnn_use_batchnorm=[False,False,False]
    cnn_act=['leaky_relu','leaky_relu','leaky_relu']
    cnn_drop=[0.0,0.0,0.0]
    #[dnn]
    fc_lay=[64,64,64]
    fc_drop=[0.0,0.0,0.0]
    fc_use_laynorm_inp=True
    fc_use_batchnorm_inp=False
    fc_use_batchnorm=[True,True,True]
    fc_use_laynorm=[False,False,False]
    fc_act=['leaky_relu','leaky_relu','leaky_relu']
    #[class]
    class_lay=[N_SPK]
    class_drop=[0.0]
    class_use_laynorm_inp=False
    class_use_batchnorm_inp=False
    class_use_batchnorm=[False]
    class_use_laynorm=[False]
    # the classifier's activation written as the hidden layers' "linear" (classic config slip): NLLLoss on raw scores
    class_act=['linear'] if bug == "class_act_linear" else ['softmax']
    #[optimization]
    lr=0.001
    batch_size=16

    sf = _InMemorySoundfile(signals, fs)
    wav_lst_tr = list(wav_lst_tr)
    snt_tr=len(wav_lst_tr)
    wav_lst_te = list(wav_lst_te)
    snt_te=len(wav_lst_te)

    # setting seed
    torch.manual_seed(seed)
    np.random.seed(seed)

    # loss function
    cost = nn.NLLLoss()

    # Converting context and shift in samples
    wlen=int(fs*cw_len/1000.00)
    wshift=int(fs*cw_shift/1000.00)

    # Batch_dev
    Batch_dev=128

    # Feature extractor CNN
    CNN_arch = {'input_dim': wlen,
              'fs': fs,
              'cnn_N_filt': cnn_N_filt,
              'cnn_len_filt': cnn_len_filt,
              'cnn_max_pool_len':cnn_max_pool_len,
              'cnn_use_laynorm_inp': cnn_use_laynorm_inp,
              'cnn_use_batchnorm_inp': cnn_use_batchnorm_inp,
              'cnn_use_laynorm':cnn_use_laynorm,
              'cnn_use_batchnorm':cnn_use_batchnorm,
              'cnn_act': cnn_act,
              'cnn_drop':cnn_drop,
              }

    CNN_net=CNN(CNN_arch)

    DNN1_arch = {'input_dim': CNN_net.out_dim,
              'fc_lay': fc_lay,
              'fc_drop': fc_drop,
              'fc_use_batchnorm': fc_use_batchnorm,
              'fc_use_laynorm': fc_use_laynorm,
              'fc_use_laynorm_inp': fc_use_laynorm_inp,
              'fc_use_batchnorm_inp':fc_use_batchnorm_inp,
              'fc_act': fc_act,
              }

    DNN1_net=MLP(DNN1_arch)

    DNN2_arch = {'input_dim':fc_lay[-1] ,
              'fc_lay': class_lay,
              'fc_drop': class_drop,
              'fc_use_batchnorm': class_use_batchnorm,
              'fc_use_laynorm': class_use_laynorm,
              'fc_use_laynorm_inp': class_use_laynorm_inp,
              'fc_use_batchnorm_inp':class_use_batchnorm_inp,
              'fc_act': class_act,
              }

    DNN2_net=MLP(DNN2_arch)

    model = SpeakerID(CNN_net, DNN1_net, DNN2_net)

    optimizer_CNN = optim.RMSprop(CNN_net.parameters(), lr=lr,alpha=0.95, eps=1e-8)
    if bug == "optimizer_dnn1_over_dnn2":
        # copy-paste slip (classic): the second optimizer built over DNN2_net, DNN1_net never updated
        optimizer_DNN1 = optim.RMSprop(DNN2_net.parameters(), lr=lr,alpha=0.95, eps=1e-8)
    else:
        optimizer_DNN1 = optim.RMSprop(DNN1_net.parameters(), lr=lr,alpha=0.95, eps=1e-8)
    optimizer_DNN2 = optim.RMSprop(DNN2_net.parameters(), lr=lr,alpha=0.95, eps=1e-8)

    def train_step():
        CNN_net.train()
        DNN1_net.train()
        DNN2_net.train()

        [inp,lab]=create_batches_rnd(batch_size,data_folder,wav_lst_tr,snt_tr,wlen,lab_dict,0.2,sf,bug)
        pout=DNN2_net(DNN1_net(CNN_net(inp)))

        pred=torch.max(pout,dim=1)[1]
        loss = cost(pout, lab.long())
        err = torch.mean((pred!=lab.long()).float())

        optimizer_CNN.zero_grad()
        optimizer_DNN1.zero_grad()
        optimizer_DNN2.zero_grad()

        loss.backward()
        optimizer_CNN.step()
        optimizer_DNN1.step()
        optimizer_DNN2.step()
        return loss.detach()

    def eval_fn(model, batch):
        # Full Validation  new
        CNN_net.eval()
        DNN1_net.eval()
        DNN2_net.eval()
        loss_sum=0
        err_sum=0
        err_sum_snt=0

        with torch.no_grad():
         for i in range(snt_te):

          [signal, fs_] = sf.read(data_folder+wav_lst_te[i])

          signal=torch.from_numpy(signal).float().contiguous()
          lab_batch=lab_dict[wav_lst_te[i]]

          # split signals into chunks
          beg_samp=0
          end_samp=wlen

          N_fr=int((signal.shape[0]-wlen)/(wshift))

          sig_arr=torch.zeros([Batch_dev,wlen]).float().contiguous()
          lab= (torch.zeros(N_fr+1)+lab_batch).contiguous().long()
          pout=torch.zeros(N_fr+1,class_lay[-1]).float().contiguous()
          count_fr=0
          count_fr_tot=0
          while end_samp<signal.shape[0]:
              sig_arr[count_fr,:]=signal[beg_samp:end_samp]
              beg_samp=beg_samp+wshift
              end_samp=beg_samp+wlen
              count_fr=count_fr+1
              count_fr_tot=count_fr_tot+1
              if count_fr==Batch_dev:
                  inp=sig_arr
                  pout[count_fr_tot-Batch_dev:count_fr_tot,:]=DNN2_net(DNN1_net(CNN_net(inp)))
                  count_fr=0
                  sig_arr=torch.zeros([Batch_dev,wlen]).float().contiguous()

          if count_fr>0:
           inp=sig_arr[0:count_fr]
           pout[count_fr_tot-count_fr:count_fr_tot,:]=DNN2_net(DNN1_net(CNN_net(inp)))

          pred=torch.max(pout,dim=1)[1]
          loss = cost(pout, lab.long())
          err = torch.mean((pred!=lab.long()).float())

          [val,best_class]=torch.max(torch.sum(pout,dim=0),0)
          err_sum_snt=err_sum_snt+(best_class!=lab[0]).float()

          loss_sum=loss_sum+loss.detach()
          err_sum=err_sum+err.detach()

        err_tot_dev_snt=err_sum_snt/snt_te
        loss_tot_dev=loss_sum/snt_te
        err_tot_dev=err_sum/snt_te
        return float(err_tot_dev)

    np_state = np.random.get_state()
    first_inp, first_lab = create_batches_rnd(batch_size,data_folder,wav_lst_tr,snt_tr,wlen,lab_dict,0.2,sf)
    np.random.set_state(np_state)

    return Program(name="sincnet_speaker_id", model=model, batch=(first_inp, first_lab.long()),
                   loss_fn=lambda pout, lab: cost(pout, lab.long()), optimizer=optimizer_DNN1,
                   train_step=train_step, eval_fn=eval_fn)


CNN = SincNet

build = functools.partial(_build)

BUGS = [
    # the classifier's activation set to "linear" like the hidden layers (classic config slip): NLLLoss applied to
    # raw scores instead of the log-softmax output.
    Bug("class_act_linear", functools.partial(_build, bug="class_act_linear"), "learning_ledger", ("OBJECTIVE",)),
    # optimizer_DNN1 built over DNN2_net.parameters() (classic copy-paste slip): DNN1_net never updated, DNN2_net
    # stepped twice.
    Bug("optimizer_dnn1_over_dnn2", functools.partial(_build, bug="optimizer_dnn1_over_dnn2"), "four_structures",
        ("DNN1_net",)),
    # each chunk labelled with the speaker of the previous draw (classic indexing slip, snt_id_arr[i-1]).
    Bug("labels_from_previous_draw", functools.partial(_build, bug="labels_from_previous_draw"), "learning_ledger",
        ("TASK",)),
]
