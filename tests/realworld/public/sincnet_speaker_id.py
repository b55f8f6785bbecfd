"""SincNet speaker identification from raw waveforms as trained by ``speaker_id.py`` with ``cfg/SincNet_TIMIT.cfg``:
``SincNet`` (input layer norm, ``SincConv_fast`` band-pass filters parametrized by their low cut-off and band in
Hz, |.|, max-pooling, the repository's ``LayerNorm``, leaky ReLU, then two ``Conv1d`` layers), ``MLP`` ``DNN1``
(input layer norm, batch-normalized linear layers with the repository's uniform init, leaky ReLU) and ``MLP``
``DNN2`` (linear + ``LogSoftmax``, the cfg's ``class_act=softmax``), ``nn.NLLLoss``, one RMSprop (lr 0.001,
alpha 0.95, eps 1e-8) per network, and the loop body: ``create_batches_rnd`` (random 200 ms chunks of random
sentences, random amplitude 1 +- 0.2), forward, NLL, the three zero_grads, backward, the three steps.

Source: https://github.com/mravanelli/SincNet
Commit: d74164861d8bd8ab9cb02f102d677f5605edfbf4
Files: speaker_id.py, dnn_models.py (SincConv_fast, act_fun, LayerNorm, MLP, SincNet), cfg/SincNet_TIMIT.cfg
License: MIT (LICENSES/mravanelli-SincNet.txt)
Domain: audio, speaker identification (learnable sinc filters on raw waveforms)

Deviations from the original:
- sizes: chunks of 25 ms at 16 kHz (400 samples, cfg 200 ms), filters 16,16,16 (80,60,60) of lengths 251,5,5
  (kept), pooling 3,3,3 (kept), fc layers 64,64,64 (2048 each), 8 speakers (462), batch size 32 (128); lr, RMSprop
  settings, normalizations and activations are the cfg's;
- data: TIMIT (wav files read with soundfile) is replaced by 8 synthetic "speakers" made from ``seed``, 6 one-second
  "sentences" each: a few harmonics of the speaker's own fundamental frequency with random phases and amplitudes,
  plus noise; ``create_batches_rnd`` is as written but takes the signal from an in-memory dict instead of
  ``sf.read`` and returns CPU tensors (no ``.cuda()``, no ``Variable``); the label dictionary is a dict instead of
  ``TIMIT_labels.npy``; ``np.random`` is seeded with ``seed`` as the script does with the cfg's seed;
- the cfg file is replaced by the same values written out in Python; no checkpoint loading or saving, no result
  file; the per-epoch full validation is left out (``eval_fn`` gives the chunk accuracy of one batch instead);
- the three networks are held in one ``nn.Sequential`` (named ``CNN_net``, ``DNN1_net``, ``DNN2_net``: the
  script's ``DNN2_net(DNN1_net(CNN_net(inp)))``) so the Program has one model; the program has three optimizers,
  so the Program declares none (``optimizer=None``: its step updates through all three);
- one ``train_step`` is one iteration of the ``N_batches`` loop;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: F841, PLR0402, UP008, UP031, UP034  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- dnn_models.py -----------------------------------------------------------------------------------------------

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


# ---- speaker_id.py -----------------------------------------------------------------------------------------------

def create_batches_rnd(batch_size,data_folder,wav_lst,N_snt,wlen,lab_dict,fact_amp):

 # Initialization of the minibatch (batch_size,[0=>x_t,1=>x_t+N,1=>random_samp])
 sig_batch=np.zeros([batch_size,wlen])
 lab_batch=np.zeros(batch_size)

 snt_id_arr=np.random.randint(N_snt, size=batch_size)

 rand_amp_arr = np.random.uniform(1.0-fact_amp,1+fact_amp,batch_size)

 for i in range(batch_size):

  # select a random sentence from the list
  signal = data_folder[wav_lst[snt_id_arr[i]]]  # in place of [signal, fs] = sf.read(data_folder+wav_lst[...])

  # accesing to a random chunk
  snt_len=signal.shape[0]
  snt_beg=np.random.randint(snt_len-wlen-1) #randint(0, snt_len-2*wlen-1)
  snt_end=snt_beg+wlen

  channels = len(signal.shape)
  if channels == 2:
    print('WARNING: stereo to mono: '+wav_lst[snt_id_arr[i]])
    signal = signal[:,0]

  sig_batch[i,:]=signal[snt_beg:snt_end]*rand_amp_arr[i]
  lab_batch[i]=lab_dict[wav_lst[snt_id_arr[i]]]

 inp=torch.from_numpy(sig_batch).float().contiguous()
 lab=torch.from_numpy(lab_batch).float().contiguous()

 return inp,lab


N_SPEAKERS = 8


def make_sentences(rng, fs):
    """8 synthetic speakers, 6 one-second sentences each: harmonics of the speaker's own pitch plus noise."""
    signals, lab_dict, wav_lst = {}, {}, []
    t = np.arange(fs) / fs
    for spk in range(N_SPEAKERS):
        f0 = 110.0 * 2 ** (spk / 4)
        for snt in range(6):
            sig = np.zeros(fs)
            for h in range(1, 5):
                sig += rng.uniform(0.3, 1.0) / h * np.sin(2 * np.pi * h * f0 * t + rng.uniform(0, 2 * np.pi))
            sig += 0.1 * rng.standard_normal(fs)
            name = f"train/spk{spk}/snt{snt}.wav"
            signals[name] = sig / np.abs(sig).max()
            lab_dict[name] = spk
            wav_lst.append(name)
    return signals, lab_dict, wav_lst


def _build(seed, bug=None):
    #[windowing]
    fs=16000
    cw_len=25
    cw_shift=10

    #[cnn]
    cnn_N_filt=[16,16,16]
    cnn_len_filt=[251,5,5]
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
    class_lay=[N_SPEAKERS]
    class_drop=[0.0]
    class_use_laynorm_inp=False
    class_use_batchnorm_inp=False
    class_use_batchnorm=[False]
    class_use_laynorm=[False]
    # a config written with class_act=linear (the bug): DNN2 returns raw scores to the NLLLoss
    class_act=['linear' if bug == "class_act_linear" else 'softmax']

    #[optimization]
    lr=0.001
    batch_size=32

    # setting seed
    torch.manual_seed(seed)
    np.random.seed(seed)
    data_folder, lab_dict, wav_lst_tr = make_sentences(np.random.default_rng(seed), fs)
    snt_tr=len(wav_lst_tr)

    # loss function
    cost = nn.NLLLoss()

    # Converting context and shift in samples
    wlen=int(fs*cw_len/1000.00)
    wshift=int(fs*cw_shift/1000.00)

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

    CNN_net=SincNet(CNN_arch)

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

    optimizer_CNN = optim.RMSprop(CNN_net.parameters(), lr=lr,alpha=0.95, eps=1e-8)
    if bug == "dnn1_optimizer_over_dnn2":
        # copy-paste slip: DNN1's optimizer built over DNN2's parameters (DNN1 never moves, DNN2 steps twice)
        optimizer_DNN1 = optim.RMSprop(DNN2_net.parameters(), lr=lr,alpha=0.95, eps=1e-8)
    else:
        optimizer_DNN1 = optim.RMSprop(DNN1_net.parameters(), lr=lr,alpha=0.95, eps=1e-8)
    optimizer_DNN2 = optim.RMSprop(DNN2_net.parameters(), lr=lr,alpha=0.95, eps=1e-8)

    model = nn.Sequential(OrderedDict(CNN_net=CNN_net, DNN1_net=DNN1_net, DNN2_net=DNN2_net))

    CNN_net.train()
    DNN1_net.train()
    DNN2_net.train()

    def train_step():
        [inp,lab]=create_batches_rnd(batch_size,data_folder,wav_lst_tr,snt_tr,wlen,lab_dict,0.2)
        pout=DNN2_net(DNN1_net(CNN_net(inp)))

        pred=torch.max(pout,dim=1)[1]
        loss = cost(pout, lab.long())
        err = torch.mean((pred!=lab.long()).float())

        optimizer_CNN.zero_grad()
        optimizer_DNN1.zero_grad()
        if bug == "dnn2_zero_grad_dropped":
            optimizer_DNN1.zero_grad()  # copy-paste slip: DNN1 cleared twice, DNN2's gradients add up
        else:
            optimizer_DNN2.zero_grad()

        loss.backward()
        optimizer_CNN.step()
        optimizer_DNN1.step()
        optimizer_DNN2.step()
        return loss.detach()

    def eval_fn(model, batch):
        inp, lab = batch
        model.eval()
        with torch.no_grad():
            pout = model(inp)
        model.train()
        return float(torch.mean((torch.max(pout,dim=1)[1]==lab.long()).float()))

    np_state = np.random.get_state()
    first = create_batches_rnd(batch_size,data_folder,wav_lst_tr,snt_tr,wlen,lab_dict,0.2)
    np.random.set_state(np_state)
    return Program(name="sincnet_speaker_id", model=model, batch=first,
                   loss_fn=lambda pout, lab: cost(pout, lab.long()), optimizer=None,
                   train_step=train_step, eval_fn=eval_fn, task="classification")


build = functools.partial(_build, bug=None)

BUGS = [
    # class_act=linear in the [class] section (classic): act_fun's "linear" is never applied, the NLLLoss reads raw
    # scores instead of log-probabilities and the loss falls without bound.
    Bug("class_act_linear", functools.partial(_build, bug="class_act_linear"), "learning_ledger", ("OBJECTIVE",)),
    # optimizer_DNN1 built over DNN2_net.parameters() (classic copy-paste slip): DNN1's layers get gradients and
    # never move.
    Bug("dnn1_optimizer_over_dnn2", functools.partial(_build, bug="dnn1_optimizer_over_dnn2"), "step_probe",
        ("DNN1_net",)),
    # optimizer_DNN1.zero_grad() written twice, optimizer_DNN2.zero_grad() missing (classic copy-paste slip): the
    # classifier's gradients add up over the steps.
    Bug("dnn2_zero_grad_dropped", functools.partial(_build, bug="dnn2_zero_grad_dropped"), "step_probe",
        ("DNN2_net",)),
]
