"""MNIST DDPM trained by the repository's train_mnist.py with its defaults: a ShuffleNet-v2-style U-Net (grouped
depthwise residual bottlenecks, channel shuffle, BatchNorm, a learned timestep embedding added through TimeMLPs),
cosine variance schedule over 1000 steps, timestep drawn inside ``forward``, epsilon-prediction MSE, AdamW lr 1e-3
with OneCycleLR (25% cosine warmup) stepped per batch, ``loss.backward(); optimizer.step();
optimizer.zero_grad()``, and a torchvision-style EMA model (``AveragedModel`` with ``use_buffers=True``) updated
every 10 steps with the batch-size/epochs-adjusted decay.

Source: https://github.com/bot66/MNISTDiffusion
Commit: c7ba8e09174cbb88b9cc314db3bf2e514668681c
Files: train_mnist.py, model.py, unet.py, utils.py
License: MIT (Copyright (c) 2022 Guocheng Tan)
Domain: generative, diffusion (DDPM, epsilon objective, EMA)

Deviations from the original:
- sizes: model_base_dim 64 -> 16, time_embedding_dim 256 -> 32, batch_size 128 -> 16, epochs 100 -> 10 (both
  enter OneCycleLR's total_steps and the EMA ``adjust`` as written), image_size 28 -> 12; timesteps 1000,
  dim_mults [2, 4], lr and the EMA settings unchanged;
- data: MNIST (a torchvision download) is replaced by 256 synthetic 12x12 one-channel "digits" made from
  ``seed`` (one to three bright strokes, lines or rings, on black), with Resize(image_size) the identity and
  ToTensor + Normalize([0.5], [0.5]) written out ([0, 1] -> [-1, 1]); the labels are unused, as in the original;
- ``device`` is "cpu"; tqdm is dropped from ``sampling``; checkpointing, per-epoch sampling and ``save_image``
  are left out, and the printing is dropped;
- one ``train_step`` is one iteration of the inner loop (``model.train()`` at each epoch start, as written);
  ``eval_fn`` is the epsilon MSE of the EMA model (``model_ema.module``, eval mode) on a given batch, standing
  in for the per-epoch EMA sampling.
"""
# ruff: noqa: B006, PLR0402, RUF059  (the original code is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.optim import AdamW
from torch.optim.lr_scheduler import OneCycleLR
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMAGE_SIZE = 12


# ---- unet.py ----------------------------------------------------------------------------------------------------


class ChannelShuffle(nn.Module):
    def __init__(self,groups):
        super().__init__()
        self.groups=groups
    def forward(self,x):
        n,c,h,w=x.shape
        x=x.view(n,self.groups,c//self.groups,h,w) # group
        x=x.transpose(1,2).contiguous().view(n,-1,h,w) #shuffle
        
        return x

class ConvBnSiLu(nn.Module):
    def __init__(self,in_channels,out_channels,kernel_size,stride=1,padding=0):
        super().__init__()
        self.module=nn.Sequential(nn.Conv2d(in_channels,out_channels,kernel_size,stride=stride,padding=padding),
                                  nn.BatchNorm2d(out_channels),
                                  nn.SiLU(inplace=True))
    def forward(self,x):
        return self.module(x)

class ResidualBottleneck(nn.Module):
    '''
    shufflenet_v2 basic unit(https://arxiv.org/pdf/1807.11164.pdf)
    '''
    def __init__(self,in_channels,out_channels):
        super().__init__()

        self.branch1=nn.Sequential(nn.Conv2d(in_channels//2,in_channels//2,3,1,1,groups=in_channels//2),
                                    nn.BatchNorm2d(in_channels//2),
                                    ConvBnSiLu(in_channels//2,out_channels//2,1,1,0))
        self.branch2=nn.Sequential(ConvBnSiLu(in_channels//2,in_channels//2,1,1,0),
                                    nn.Conv2d(in_channels//2,in_channels//2,3,1,1,groups=in_channels//2),
                                    nn.BatchNorm2d(in_channels//2),
                                    ConvBnSiLu(in_channels//2,out_channels//2,1,1,0))
        self.channel_shuffle=ChannelShuffle(2)

    def forward(self,x):
        x1,x2=x.chunk(2,dim=1)
        x=torch.cat([self.branch1(x1),self.branch2(x2)],dim=1)
        x=self.channel_shuffle(x) #shuffle two branches

        return x

class ResidualDownsample(nn.Module):
    '''
    shufflenet_v2 unit for spatial down sampling(https://arxiv.org/pdf/1807.11164.pdf)
    '''
    def __init__(self,in_channels,out_channels):
        super().__init__()
        self.branch1=nn.Sequential(nn.Conv2d(in_channels,in_channels,3,2,1,groups=in_channels),
                                    nn.BatchNorm2d(in_channels),
                                    ConvBnSiLu(in_channels,out_channels//2,1,1,0))
        self.branch2=nn.Sequential(ConvBnSiLu(in_channels,out_channels//2,1,1,0),
                                    nn.Conv2d(out_channels//2,out_channels//2,3,2,1,groups=out_channels//2),
                                    nn.BatchNorm2d(out_channels//2),
                                    ConvBnSiLu(out_channels//2,out_channels//2,1,1,0))
        self.channel_shuffle=ChannelShuffle(2)

    def forward(self,x):
        x=torch.cat([self.branch1(x),self.branch2(x)],dim=1)
        x=self.channel_shuffle(x) #shuffle two branches

        return x

class TimeMLP(nn.Module):
    '''
    naive introduce timestep information to feature maps with mlp and add shortcut
    '''
    def __init__(self,embedding_dim,hidden_dim,out_dim):
        super().__init__()
        self.mlp=nn.Sequential(nn.Linear(embedding_dim,hidden_dim),
                                nn.SiLU(),
                               nn.Linear(hidden_dim,out_dim))
        self.act=nn.SiLU()
    def forward(self,x,t):
        t_emb=self.mlp(t).unsqueeze(-1).unsqueeze(-1)
        x=x+t_emb
  
        return self.act(x)
    
class EncoderBlock(nn.Module):
    def __init__(self,in_channels,out_channels,time_embedding_dim):
        super().__init__()
        self.conv0=nn.Sequential(*[ResidualBottleneck(in_channels,in_channels) for i in range(3)],
                                    ResidualBottleneck(in_channels,out_channels//2))

        self.time_mlp=TimeMLP(embedding_dim=time_embedding_dim,hidden_dim=out_channels,out_dim=out_channels//2)
        self.conv1=ResidualDownsample(out_channels//2,out_channels)
    
    def forward(self,x,t=None):
        x_shortcut=self.conv0(x)
        if t is not None:
            x=self.time_mlp(x_shortcut,t)
        x=self.conv1(x)

        return [x,x_shortcut]
        
class DecoderBlock(nn.Module):
    def __init__(self,in_channels,out_channels,time_embedding_dim):
        super().__init__()
        self.upsample=nn.Upsample(scale_factor=2,mode='bilinear',align_corners=False)
        self.conv0=nn.Sequential(*[ResidualBottleneck(in_channels,in_channels) for i in range(3)],
                                    ResidualBottleneck(in_channels,in_channels//2))

        self.time_mlp=TimeMLP(embedding_dim=time_embedding_dim,hidden_dim=in_channels,out_dim=in_channels//2)
        self.conv1=ResidualBottleneck(in_channels//2,out_channels//2)

    def forward(self,x,x_shortcut,t=None):
        x=self.upsample(x)
        x=torch.cat([x,x_shortcut],dim=1)
        x=self.conv0(x)
        if t is not None:
            x=self.time_mlp(x,t)
        x=self.conv1(x)

        return x        

class Unet(nn.Module):
    '''
    simple unet design without attention
    '''
    def __init__(self,timesteps,time_embedding_dim,in_channels=3,out_channels=2,base_dim=32,dim_mults=[2,4,8,16]):
        super().__init__()
        assert isinstance(dim_mults,(list,tuple))
        assert base_dim%2==0 

        channels=self._cal_channels(base_dim,dim_mults)

        self.init_conv=ConvBnSiLu(in_channels,base_dim,3,1,1)
        self.time_embedding=nn.Embedding(timesteps,time_embedding_dim)

        self.encoder_blocks=nn.ModuleList([EncoderBlock(c[0],c[1],time_embedding_dim) for c in channels])
        self.decoder_blocks=nn.ModuleList([DecoderBlock(c[1],c[0],time_embedding_dim) for c in channels[::-1]])
    
        self.mid_block=nn.Sequential(*[ResidualBottleneck(channels[-1][1],channels[-1][1]) for i in range(2)],
                                        ResidualBottleneck(channels[-1][1],channels[-1][1]//2))

        self.final_conv=nn.Conv2d(in_channels=channels[0][0]//2,out_channels=out_channels,kernel_size=1)

    def forward(self,x,t=None):
        x=self.init_conv(x)
        if t is not None:
            t=self.time_embedding(t)
        encoder_shortcuts=[]
        for encoder_block in self.encoder_blocks:
            x,x_shortcut=encoder_block(x,t)
            encoder_shortcuts.append(x_shortcut)
        x=self.mid_block(x)
        encoder_shortcuts.reverse()
        for decoder_block,shortcut in zip(self.decoder_blocks,encoder_shortcuts):
            x=decoder_block(x,shortcut,t)
        x=self.final_conv(x)

        return x

    def _cal_channels(self,base_dim,dim_mults):
        dims=[base_dim*x for x in dim_mults]
        dims.insert(0,base_dim)
        channels=[]
        for i in range(len(dims)-1):
            channels.append((dims[i],dims[i+1])) # in_channel, out_channel

        return channels


# ---- model.py ---------------------------------------------------------------------------------------------------

class MNISTDiffusion(nn.Module):
    def __init__(self,image_size,in_channels,time_embedding_dim=256,timesteps=1000,base_dim=32,dim_mults= [1, 2, 4, 8],bug=None):
        super().__init__()
        self.bug=bug
        self.timesteps=timesteps
        self.in_channels=in_channels
        self.image_size=image_size

        betas=self._cosine_variance_schedule(timesteps)

        alphas=1.-betas
        alphas_cumprod=torch.cumprod(alphas,dim=-1)

        self.register_buffer("betas",betas)
        self.register_buffer("alphas",alphas)
        self.register_buffer("alphas_cumprod",alphas_cumprod)
        self.register_buffer("sqrt_alphas_cumprod",torch.sqrt(alphas_cumprod))
        self.register_buffer("sqrt_one_minus_alphas_cumprod",torch.sqrt(1.-alphas_cumprod))

        self.model=Unet(timesteps,time_embedding_dim,in_channels,in_channels,base_dim,dim_mults)

    def forward(self,x,noise):
        # x:NCHW
        t=torch.randint(0,self.timesteps,(x.shape[0],)).to(x.device)
        x_t=self._forward_diffusion(x,t,noise)
        if self.bug=="timestep_not_passed":
            # the Unet accepts t=None (its TimeMLPs are skipped): the noise level never reaches the network
            pred_noise=self.model(x_t)
        else:
            pred_noise=self.model(x_t,t)

        return pred_noise

    @torch.no_grad()
    def sampling(self,n_samples,clipped_reverse_diffusion=True,device="cuda"):
        x_t=torch.randn((n_samples,self.in_channels,self.image_size,self.image_size)).to(device)
        for i in range(self.timesteps-1,-1,-1):
            noise=torch.randn_like(x_t).to(device)
            t=torch.tensor([i for _ in range(n_samples)]).to(device)

            if clipped_reverse_diffusion:
                x_t=self._reverse_diffusion_with_clip(x_t,t,noise)
            else:
                x_t=self._reverse_diffusion(x_t,t,noise)

        x_t=(x_t+1.)/2. #[-1,1] to [0,1]

        return x_t
    
    def _cosine_variance_schedule(self,timesteps,epsilon= 0.008):
        steps=torch.linspace(0,timesteps,steps=timesteps+1,dtype=torch.float32)
        f_t=torch.cos(((steps/timesteps+epsilon)/(1.0+epsilon))*math.pi*0.5)**2
        betas=torch.clip(1.0-f_t[1:]/f_t[:timesteps],0.0,0.999)

        return betas

    def _forward_diffusion(self,x_0,t,noise):
        assert x_0.shape==noise.shape
        #q(x_{t}|x_{t-1})
        if self.bug=="schedule_coefficients_swapped":
            # sqrt(alpha_bar) and sqrt(1 - alpha_bar) exchanged: x_t is mostly noise at t=0 and mostly image at t=T
            return self.sqrt_one_minus_alphas_cumprod.gather(-1,t).reshape(x_0.shape[0],1,1,1)*x_0+ \
                    self.sqrt_alphas_cumprod.gather(-1,t).reshape(x_0.shape[0],1,1,1)*noise
        return self.sqrt_alphas_cumprod.gather(-1,t).reshape(x_0.shape[0],1,1,1)*x_0+ \
                self.sqrt_one_minus_alphas_cumprod.gather(-1,t).reshape(x_0.shape[0],1,1,1)*noise


    @torch.no_grad()
    def _reverse_diffusion(self,x_t,t,noise):
        '''
        p(x_{t-1}|x_{t})-> mean,std

        pred_noise-> pred_mean and pred_std
        '''
        pred=self.model(x_t,t)

        alpha_t=self.alphas.gather(-1,t).reshape(x_t.shape[0],1,1,1)
        alpha_t_cumprod=self.alphas_cumprod.gather(-1,t).reshape(x_t.shape[0],1,1,1)
        beta_t=self.betas.gather(-1,t).reshape(x_t.shape[0],1,1,1)
        sqrt_one_minus_alpha_cumprod_t=self.sqrt_one_minus_alphas_cumprod.gather(-1,t).reshape(x_t.shape[0],1,1,1)
        mean=(1./torch.sqrt(alpha_t))*(x_t-((1.0-alpha_t)/sqrt_one_minus_alpha_cumprod_t)*pred)

        if t.min()>0:
            alpha_t_cumprod_prev=self.alphas_cumprod.gather(-1,t-1).reshape(x_t.shape[0],1,1,1)
            std=torch.sqrt(beta_t*(1.-alpha_t_cumprod_prev)/(1.-alpha_t_cumprod))
        else:
            std=0.0

        return mean+std*noise 


    @torch.no_grad()
    def _reverse_diffusion_with_clip(self,x_t,t,noise): 
        '''
        p(x_{0}|x_{t}),q(x_{t-1}|x_{0},x_{t})->mean,std

        pred_noise -> pred_x_0 (clip to [-1.0,1.0]) -> pred_mean and pred_std
        '''
        pred=self.model(x_t,t)
        alpha_t=self.alphas.gather(-1,t).reshape(x_t.shape[0],1,1,1)
        alpha_t_cumprod=self.alphas_cumprod.gather(-1,t).reshape(x_t.shape[0],1,1,1)
        beta_t=self.betas.gather(-1,t).reshape(x_t.shape[0],1,1,1)
        
        x_0_pred=torch.sqrt(1. / alpha_t_cumprod)*x_t-torch.sqrt(1. / alpha_t_cumprod - 1.)*pred
        x_0_pred.clamp_(-1., 1.)

        if t.min()>0:
            alpha_t_cumprod_prev=self.alphas_cumprod.gather(-1,t-1).reshape(x_t.shape[0],1,1,1)
            mean= (beta_t * torch.sqrt(alpha_t_cumprod_prev) / (1. - alpha_t_cumprod))*x_0_pred +\
                 ((1. - alpha_t_cumprod_prev) * torch.sqrt(alpha_t) / (1. - alpha_t_cumprod))*x_t

            std=torch.sqrt(beta_t*(1.-alpha_t_cumprod_prev)/(1.-alpha_t_cumprod))
        else:
            mean=(beta_t / (1. - alpha_t_cumprod))*x_0_pred #alpha_t_cumprod_prev=1 since 0!=1
            std=0.0

        return mean+std*noise 
    

# ---- utils.py ---------------------------------------------------------------------------------------------------

#torchvision ema implementation
#https://github.com/pytorch/vision/blob/main/references/classification/utils.py#L159
class ExponentialMovingAverage(torch.optim.swa_utils.AveragedModel):
    """Maintains moving averages of model parameters using an exponential decay.
    ``ema_avg = decay * avg_model_param + (1 - decay) * model_param``
    `torch.optim.swa_utils.AveragedModel <https://pytorch.org/docs/stable/optim.html#custom-averaging-strategies>`_
    is used to compute the EMA.
    """

    def __init__(self, model, decay, device="cpu"):
        def ema_avg(avg_model_param, model_param, num_averaged):
            return decay * avg_model_param + (1 - decay) * model_param

        super().__init__(model, device, ema_avg, use_buffers=True)


# ---- synthetic stand-in for torchvision.datasets.MNIST ------------------------------------------------------------

class SyntheticDigits(torch.utils.data.Dataset):
    def __init__(self, rng, n, image_size=IMAGE_SIZE):
        yy, xx = np.mgrid[0:image_size, 0:image_size].astype(np.float64)
        imgs = []
        for _ in range(n):
            img = np.zeros((image_size, image_size))
            for _ in range(rng.integers(1, 4)):
                if rng.random() < 0.5:  # a stroke from (y0, x0) to (y1, x1)
                    (y0, x0), (y1, x1) = rng.uniform(2, image_size - 3, size=(2, 2))
                    d = np.hypot(y1 - y0, x1 - x0) + 1e-6
                    s = np.clip(((yy - y0) * (y1 - y0) + (xx - x0) * (x1 - x0)) / d ** 2, 0, 1)
                    dist = np.hypot(yy - (y0 + s * (y1 - y0)), xx - (x0 + s * (x1 - x0)))
                else:  # a ring
                    cy, cx, r = rng.uniform(5, image_size - 5, size=2).tolist() + [rng.uniform(2, 4)]
                    dist = np.abs(np.hypot(yy - cy, xx - cx) - r)
                img = np.maximum(img, np.clip(1.5 - dist, 0, 1))
            imgs.append(img)
        self.data = np.stack(imgs).astype(np.float32)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        x = torch.from_numpy(self.data[i])[None]  # ToTensor: [1, H, W] in [0, 1]
        return (x - 0.5) / 0.5, 0  # Normalize([0.5], [0.5])


# ---- train_mnist.py -----------------------------------------------------------------------------------------------

class Args:
    lr = 0.001
    batch_size = 16
    epochs = 10
    n_samples = 36
    model_base_dim = 16
    timesteps = 1000
    model_ema_steps = 10
    model_ema_decay = 0.995
    log_freq = 10
    no_clip = False
    cpu = True


def create_mnist_dataloaders(batch_size, rng, generator, image_size=IMAGE_SIZE, num_workers=0):
    train_dataset = SyntheticDigits(rng, 256, image_size)
    test_dataset = SyntheticDigits(rng, 32, image_size)
    return DataLoader(train_dataset,batch_size=batch_size,shuffle=True,num_workers=num_workers,generator=generator),\
            DataLoader(test_dataset,batch_size=batch_size,shuffle=True,num_workers=num_workers,generator=generator)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    args = Args()
    device="cpu" if args.cpu else "cuda"
    gen = torch.Generator().manual_seed(seed)
    train_dataloader,test_dataloader=create_mnist_dataloaders(args.batch_size,rng,gen,image_size=IMAGE_SIZE)
    model=MNISTDiffusion(timesteps=args.timesteps,
                image_size=IMAGE_SIZE,
                in_channels=1,
                time_embedding_dim=32,
                base_dim=args.model_base_dim,
                dim_mults=[2,4],
                bug=bug).to(device)

    #torchvision ema setting
    #https://github.com/pytorch/vision/blob/main/references/classification/train.py#L317
    adjust = 1* args.batch_size * args.model_ema_steps / args.epochs
    alpha = 1.0 - args.model_ema_decay
    alpha = min(1.0, alpha * adjust)
    model_ema = ExponentialMovingAverage(model, device=device, decay=1.0 - alpha)

    if bug == "optimizer_over_ema_model":
        # the optimizer built over the EMA copy: the trained model never moves, the EMA copy is pulled back to it
        optimizer=AdamW(model_ema.parameters(),lr=args.lr)
    else:
        optimizer=AdamW(model.parameters(),lr=args.lr)
    scheduler=OneCycleLR(optimizer,args.lr,total_steps=args.epochs*len(train_dataloader),pct_start=0.25,anneal_strategy='cos')
    loss_fn=nn.MSELoss(reduction='mean')

    state = {"global_steps": 0}

    def batches():
        for i in range(args.epochs):
            model.train()
            yield from enumerate(train_dataloader)

    it = batches()

    def train_step():
        j,(image,target)=next(it)
        noise=torch.randn_like(image).to(device)
        image=image.to(device)
        pred=model(image,noise)
        loss=loss_fn(pred,noise)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        if state["global_steps"]%args.model_ema_steps==0:
            model_ema.update_parameters(model)
        state["global_steps"]+=1
        return loss.detach()

    def eval_fn(model, batch):
        inputs, _noise = batch
        model_ema.eval()
        with torch.no_grad():
            pred = model_ema.module(inputs["x"], inputs["noise"])
        return {"ema_eps_mse": float(loss_fn(pred, inputs["noise"]))}

    first, _ = next(iter(test_dataloader))
    first_noise = torch.randn(first.shape, generator=torch.Generator().manual_seed(seed + 1))
    return Program(name="mnistdiffusion_ddpm", model=model, batch=({"x": first, "noise": first_noise}, first_noise),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                   loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # classic: the timestep left out of the network call (the Unet's t=None path skips every TimeMLP), so the
    # noise prediction cannot depend on the noise level
    Bug("timestep_not_passed", functools.partial(_build, bug="timestep_not_passed"), "learning_ledger",
        ("DEPENDENCY",)),
    # classic schedule slip: the two forward-diffusion coefficients exchanged in _forward_diffusion
    Bug("schedule_coefficients_swapped", functools.partial(_build, bug="schedule_coefficients_swapped"),
        "learning_ledger", ("TASK",)),
    # classic: AdamW over the EMA copy's parameters instead of the model's
    Bug("optimizer_over_ema_model", functools.partial(_build, bug="optimizer_over_ema_model"), "four_structures",
        ("model.init_conv",)),
]
