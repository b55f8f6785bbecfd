"""Show, Attend and Tell image captioning from sgrvinod's tutorial: a frozen ResNet encoder (``Encoder``: the
convolutional trunk, adaptive pooling to ``encoded_image_size``, channels last), ``DecoderWithAttention`` (additive
``Attention`` over the encoder's pixels, a sigmoid gate ``f_beta``, an ``LSTMCell`` fed the previous word's embedding
and the gated attention-weighted encoding, dropout, a linear head), trained by ``train.py``'s ``train``: the batch
sorted by decreasing caption length inside the decoder, targets ``caps_sorted[:, 1:]``, scores and targets packed
with ``pack_padded_sequence`` so pads and undecoded steps drop out, ``CrossEntropyLoss`` plus the doubly stochastic
attention regularization ``alpha_c * ((1 - alphas.sum(dim=1)) ** 2).mean()``, Adam (decoder lr 4e-4), gradients
clamped at 5 by ``clip_gradient``; ``fine_tune_encoder = False`` (no encoder optimizer).

Source: https://github.com/sgrvinod/a-PyTorch-Tutorial-to-Image-Captioning
Commit: cc9c7e2f4017938d414178d3781fed8dbe442852
Files: train.py, models.py, utils.py, datasets.py, create_input_files.py
License: MIT (Copyright (c) 2018 Sagar Vinodababu; LICENSES/sgrvinod-a-PyTorch-Tutorial-to-Image-Captioning.txt)
Domain: image captioning (encoder-decoder with attention, packed sequences)

Deviations from the original:
- the encoder is ``torchvision.models.resnet101(pretrained=True)``; torchvision and the ImageNet weights are not
  available, so the encoder trunk is the ResNet-18 of ``_tv_resnet.py`` (torchvision's structure written out, width
  8, random weights); it is frozen as ``encoder.fine_tune(False)`` leaves it (all its parameters) and runs in train
  mode as in ``train``; ``encoded_image_size`` 14 -> 4 (128x128 images give a 4x4 map), so ``encoder_dim`` is 64;
- sizes: emb_dim, attention_dim and decoder_dim 512 -> 32; batch 32 (unchanged); captions of 3-7 words (max_len
  50 -> 7), a vocabulary of 30 words plus ``<unk>``, ``<start>``, ``<end>`` and ``<pad>`` = 0 as
  ``create_input_files`` builds it;
- data: COCO (HDF5 images, JSON captions) is replaced by synthetic data made from ``seed``: 128x128 images of 10
  kinds (each a fixed smooth random pattern, scaled, plus noise) and per kind a fixed caption; the dataset returns
  ``(img, caption, caplen)`` after ``img / 255`` and ``Normalize(mean, std)`` (written out), as ``CaptionDataset``;
- ``pack_padded_sequence`` returns a four-field ``PackedSequence`` since PyTorch 1.1, so ``scores, _ =
  pack_padded_sequence(...)`` no longer unpacks: its ``.data`` is taken, the fix given in
  https://github.com/sgrvinod/a-PyTorch-Tutorial-to-Image-Captioning/issues/106;
- the global ``device`` is the CPU; the ``AverageMeter`` bookkeeping, top-5 accuracy, printing, validation with
  BLEU-4, learning-rate decay on plateau and checkpointing are left out;
- one ``train_step`` is one iteration of ``train``'s batch loop (a new shuffled epoch when the loader runs out);
  ``eval_fn`` is the validation loop's top-5 accuracy on a given batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: RUF059, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn.functional as F
import torch.optim
import torch.utils.data
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
import _tv_resnet
from _api import Bug, Program

device = torch.device("cpu")

# Model parameters
emb_dim = 32  # dimension of word embeddings
attention_dim = 32  # dimension of attention linear layers
decoder_dim = 32  # dimension of decoder RNN
dropout = 0.5

# Training parameters
batch_size = 32
encoder_lr = 1e-4  # learning rate for encoder if fine-tuning
decoder_lr = 4e-4  # learning rate for decoder
grad_clip = 5.  # clip gradients at an absolute value of
alpha_c = 1.  # regularization parameter for 'doubly stochastic attention', as in the paper
fine_tune_encoder = False  # fine-tune encoder?

N_IMAGES, N_WORDS, MAX_LEN, IMAGE_SIZE = 256, 30, 7, 128
SELF_CHECK_STEPS = 60


# ---- models.py -------------------------------------------------------------------------------------------------

class Encoder(nn.Module):
    """
    Encoder.
    """

    def __init__(self, encoded_image_size=4):
        super(Encoder, self).__init__()
        self.enc_image_size = encoded_image_size

        resnet = _tv_resnet.resnet18(width=8)  # torchvision.models.resnet101(pretrained=True)

        # Remove linear and pool layers (since we're not doing classification)
        modules = list(resnet.children())[:-2]
        self.resnet = nn.Sequential(*modules)

        # Resize image to fixed size to allow input images of variable size
        self.adaptive_pool = nn.AdaptiveAvgPool2d((encoded_image_size, encoded_image_size))

        self.fine_tune()

    def forward(self, images):
        out = self.resnet(images)  # (batch_size, 2048, image_size/32, image_size/32)
        out = self.adaptive_pool(out)  # (batch_size, 2048, encoded_image_size, encoded_image_size)
        out = out.permute(0, 2, 3, 1)  # (batch_size, encoded_image_size, encoded_image_size, 2048)
        return out

    def fine_tune(self, fine_tune=True):
        """
        Allow or prevent the computation of gradients for convolutional blocks 2 through 4 of the encoder.
        """
        for p in self.resnet.parameters():
            p.requires_grad = False
        # If fine-tuning, only fine-tune convolutional blocks 2 through 4
        for c in list(self.resnet.children())[5:]:
            for p in c.parameters():
                p.requires_grad = fine_tune


class Attention(nn.Module):
    """
    Attention Network.
    """

    def __init__(self, encoder_dim, decoder_dim, attention_dim):
        super(Attention, self).__init__()
        self.encoder_att = nn.Linear(encoder_dim, attention_dim)  # linear layer to transform encoded image
        self.decoder_att = nn.Linear(decoder_dim, attention_dim)  # linear layer to transform decoder's output
        self.full_att = nn.Linear(attention_dim, 1)  # linear layer to calculate values to be softmax-ed
        self.relu = nn.ReLU()
        self.softmax = nn.Softmax(dim=1)  # softmax layer to calculate weights

    def forward(self, encoder_out, decoder_hidden):
        att1 = self.encoder_att(encoder_out)  # (batch_size, num_pixels, attention_dim)
        att2 = self.decoder_att(decoder_hidden)  # (batch_size, attention_dim)
        att = self.full_att(self.relu(att1 + att2.unsqueeze(1))).squeeze(2)  # (batch_size, num_pixels)
        alpha = self.softmax(att)  # (batch_size, num_pixels)
        attention_weighted_encoding = (encoder_out * alpha.unsqueeze(2)).sum(dim=1)  # (batch_size, encoder_dim)

        return attention_weighted_encoding, alpha


class DecoderWithAttention(nn.Module):
    """
    Decoder.
    """

    def __init__(self, attention_dim, embed_dim, decoder_dim, vocab_size, encoder_dim=2048, dropout=0.5):
        super(DecoderWithAttention, self).__init__()

        self.encoder_dim = encoder_dim
        self.attention_dim = attention_dim
        self.embed_dim = embed_dim
        self.decoder_dim = decoder_dim
        self.vocab_size = vocab_size
        self.dropout = dropout

        self.attention = Attention(encoder_dim, decoder_dim, attention_dim)  # attention network

        self.embedding = nn.Embedding(vocab_size, embed_dim)  # embedding layer
        self.dropout = nn.Dropout(p=self.dropout)
        self.decode_step = nn.LSTMCell(embed_dim + encoder_dim, decoder_dim, bias=True)  # decoding LSTMCell
        self.init_h = nn.Linear(encoder_dim, decoder_dim)  # linear layer to find initial hidden state of LSTMCell
        self.init_c = nn.Linear(encoder_dim, decoder_dim)  # linear layer to find initial cell state of LSTMCell
        self.f_beta = nn.Linear(decoder_dim, encoder_dim)  # linear layer to create a sigmoid-activated gate
        self.sigmoid = nn.Sigmoid()
        self.fc = nn.Linear(decoder_dim, vocab_size)  # linear layer to find scores over vocabulary
        self.init_weights()  # initialize some layers with the uniform distribution

    def init_weights(self):
        """
        Initializes some parameters with values from the uniform distribution, for easier convergence.
        """
        self.embedding.weight.data.uniform_(-0.1, 0.1)
        self.fc.bias.data.fill_(0)
        self.fc.weight.data.uniform_(-0.1, 0.1)

    def init_hidden_state(self, encoder_out):
        mean_encoder_out = encoder_out.mean(dim=1)
        h = self.init_h(mean_encoder_out)  # (batch_size, decoder_dim)
        c = self.init_c(mean_encoder_out)
        return h, c

    def forward(self, encoder_out, encoded_captions, caption_lengths):
        batch_size = encoder_out.size(0)
        encoder_dim = encoder_out.size(-1)
        vocab_size = self.vocab_size

        # Flatten image
        encoder_out = encoder_out.view(batch_size, -1, encoder_dim)  # (batch_size, num_pixels, encoder_dim)
        num_pixels = encoder_out.size(1)

        # Sort input data by decreasing lengths; why? apparent below
        caption_lengths, sort_ind = caption_lengths.squeeze(1).sort(dim=0, descending=True)
        encoder_out = encoder_out[sort_ind]
        encoded_captions = encoded_captions[sort_ind]

        # Embedding
        embeddings = self.embedding(encoded_captions)  # (batch_size, max_caption_length, embed_dim)

        # Initialize LSTM state
        h, c = self.init_hidden_state(encoder_out)  # (batch_size, decoder_dim)

        # We won't decode at the <end> position, since we've finished generating as soon as we generate <end>
        # So, decoding lengths are actual lengths - 1
        decode_lengths = (caption_lengths - 1).tolist()

        # Create tensors to hold word predicion scores and alphas
        predictions = torch.zeros(batch_size, max(decode_lengths), vocab_size).to(device)
        alphas = torch.zeros(batch_size, max(decode_lengths), num_pixels).to(device)

        # At each time-step, decode by
        # attention-weighing the encoder's output based on the decoder's previous hidden state output
        # then generate a new word in the decoder with the previous word and the attention weighted encoding
        for t in range(max(decode_lengths)):
            batch_size_t = sum([l > t for l in decode_lengths])
            attention_weighted_encoding, alpha = self.attention(encoder_out[:batch_size_t],
                                                                h[:batch_size_t])
            gate = self.sigmoid(self.f_beta(h[:batch_size_t]))  # gating scalar, (batch_size_t, encoder_dim)
            attention_weighted_encoding = gate * attention_weighted_encoding
            h, c = self.decode_step(
                torch.cat([embeddings[:batch_size_t, t, :], attention_weighted_encoding], dim=1),
                (h[:batch_size_t], c[:batch_size_t]))  # (batch_size_t, decoder_dim)
            preds = self.fc(self.dropout(h))  # (batch_size_t, vocab_size)
            predictions[:batch_size_t, t, :] = preds
            alphas[:batch_size_t, t, :] = alpha

        return predictions, encoded_captions, decode_lengths, alphas, sort_ind


# ---- utils.py --------------------------------------------------------------------------------------------------

def clip_gradient(optimizer, grad_clip):
    """
    Clips gradients computed during backpropagation to avoid explosion of gradients.
    """
    for group in optimizer.param_groups:
        for param in group['params']:
            if param.grad is not None:
                param.grad.data.clamp_(-grad_clip, grad_clip)


def accuracy(scores, targets, k):
    """
    Computes top-k accuracy, from predicted and true labels.
    """
    batch_size = targets.size(0)
    _, ind = scores.topk(k, 1, True, True)
    correct = ind.eq(targets.view(-1, 1).expand_as(ind))
    correct_total = correct.view(-1).float().sum()  # 0D tensor
    return correct_total.item() * (100.0 / batch_size)


# ---- synthetic data in create_input_files' format; datasets.py's CaptionDataset --------------------------------

def make_data(seed):
    """Images of 10 kinds (a fixed smooth random pattern each, scaled, plus noise) and one fixed caption per kind,
    encoded as create_input_files does: <start> words <end> <pad>...; returns (images uint8-like, enc, lens, map)."""
    g = torch.Generator().manual_seed(seed)
    word_map = {f"w{i}": i + 1 for i in range(N_WORDS)}
    word_map['<unk>'] = len(word_map) + 1
    word_map['<start>'] = len(word_map) + 1
    word_map['<end>'] = len(word_map) + 1
    word_map['<pad>'] = 0
    kind_captions = []
    for _ in range(10):
        n = int(torch.randint(3, MAX_LEN + 1, (1,), generator=g))
        kind_captions.append([f"w{int(w)}" for w in torch.randint(N_WORDS, (n,), generator=g)])
    templates = F.interpolate((torch.rand(10, 3, 4, 4, generator=g) < 0.5).float(), size=IMAGE_SIZE,
                              mode="bilinear", align_corners=False)
    kinds = torch.randint(10, (N_IMAGES,), generator=g)
    scale = 0.6 + 0.4 * torch.rand(N_IMAGES, 1, 1, 1, generator=g)
    images = ((templates[kinds] * scale + 0.1 * torch.rand(N_IMAGES, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g))
              .clamp(0, 1) * 255.)
    enc_captions, caplens = [], []
    for k in kinds.tolist():
        c = kind_captions[k]
        enc_c = [word_map['<start>']] + [word_map.get(word, word_map['<unk>']) for word in c] + [
            word_map['<end>']] + [word_map['<pad>']] * (MAX_LEN - len(c))
        enc_captions.append(enc_c)
        caplens.append(len(c) + 2)
    return images, enc_captions, caplens, word_map


MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class CaptionDataset(torch.utils.data.Dataset):
    def __init__(self, imgs, captions, caplens, cpi=1):
        self.imgs, self.captions, self.caplens, self.cpi = imgs, captions, caplens, cpi
        self.dataset_size = len(self.captions)

    def __getitem__(self, i):
        # Remember, the Nth caption corresponds to the (N // captions_per_image)th image
        img = torch.FloatTensor(self.imgs[i // self.cpi] / 255.)
        img = (img - MEAN) / STD  # transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])

        caption = torch.LongTensor(self.captions[i])

        caplen = torch.LongTensor([self.caplens[i]])

        return img, caption, caplen

    def __len__(self):
        return self.dataset_size


# ---- train.py --------------------------------------------------------------------------------------------------

def caption_loss(criterion, scores, caps_sorted, decode_lengths, alphas, bug=None, caps=None):
    """train()'s lines from the targets to the regularized loss."""
    # Since we decoded starting with <start>, the targets are all words after <start>, up to <end>
    if bug == "targets_from_unsorted_captions":
        targets = caps[:, 1:]  # the loader's captions, not the decoder's re-ordered ones
    else:
        targets = caps_sorted[:, 1:]

    # Remove timesteps that we didn't decode at, or are pads
    # pack_padded_sequence is an easy trick to do this
    if bug == "padding_in_loss":
        # every position of the padded tensors scored, pads and undecoded steps included
        scores = scores.reshape(-1, scores.size(-1))
        targets = targets[:, :max(decode_lengths)].reshape(-1)
    else:
        scores = pack_padded_sequence(scores, decode_lengths, batch_first=True).data
        targets = pack_padded_sequence(targets, decode_lengths, batch_first=True).data

    # Calculate loss
    loss = criterion(scores, targets)

    # Add doubly stochastic attention regularization
    if bug == "alphas_summed_over_pixels":
        loss += alpha_c * ((1. - alphas.sum(dim=2)) ** 2).mean()
    else:
        loss += alpha_c * ((1. - alphas.sum(dim=1)) ** 2).mean()
    return loss, scores, targets


def _build(seed, bug=None):
    torch.manual_seed(seed)
    images, enc_captions, caplens, word_map = make_data(seed)

    decoder = DecoderWithAttention(attention_dim=attention_dim,
                                   embed_dim=emb_dim,
                                   decoder_dim=decoder_dim,
                                   vocab_size=len(word_map),
                                   encoder_dim=64,
                                   dropout=dropout)
    decoder_optimizer = torch.optim.Adam(params=filter(lambda p: p.requires_grad, decoder.parameters()),
                                         lr=decoder_lr)
    encoder = Encoder()
    encoder.fine_tune(fine_tune_encoder)
    encoder_optimizer = torch.optim.Adam(params=filter(lambda p: p.requires_grad, encoder.parameters()),
                                         lr=encoder_lr) if fine_tune_encoder else None

    # Move to GPU, if available
    decoder = decoder.to(device)
    encoder = encoder.to(device)

    # Loss function
    criterion = nn.CrossEntropyLoss().to(device)

    dataset = CaptionDataset(images, enc_captions, caplens)
    train_loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=0,
                                               generator=torch.Generator().manual_seed(seed))

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        decoder.train()  # train mode (dropout and batchnorm is used)
        encoder.train()

        imgs, caps, caplens = next_batch()

        # Move to GPU, if available
        imgs = imgs.to(device)
        caps = caps.to(device)
        caplens = caplens.to(device)

        # Forward prop.
        imgs = encoder(imgs)
        scores, caps_sorted, decode_lengths, alphas, sort_ind = decoder(imgs, caps, caplens)

        loss, scores, targets = caption_loss(criterion, scores, caps_sorted, decode_lengths, alphas, bug, caps)

        # Back prop.
        decoder_optimizer.zero_grad()
        if encoder_optimizer is not None:
            encoder_optimizer.zero_grad()
        loss.backward()

        # Clip gradients
        if grad_clip is not None:
            clip_gradient(decoder_optimizer, grad_clip)
            if encoder_optimizer is not None:
                clip_gradient(encoder_optimizer, grad_clip)

        # Update weights
        decoder_optimizer.step()
        if encoder_optimizer is not None:
            encoder_optimizer.step()
        return loss.detach()

    first_imgs, first_caps, first_caplens = next(iter(torch.utils.data.DataLoader(dataset, batch_size=batch_size)))
    encoder.train()
    with torch.no_grad():
        first_enc = encoder(first_imgs)

    def loss_fn(outputs, caps):
        scores, caps_sorted, decode_lengths, alphas, sort_ind = outputs
        return caption_loss(criterion, scores, caps_sorted, decode_lengths, alphas, bug, caps)[0]

    def eval_fn(model, batch):
        """validate()'s top-5 accuracy on one batch (decoder in eval mode, no_grad)."""
        model.eval()
        inputs, caps = batch
        with torch.no_grad():
            scores, caps_sorted, decode_lengths, alphas, sort_ind = model(**inputs)
            targets = caps_sorted[:, 1:]
            scores = pack_padded_sequence(scores, decode_lengths, batch_first=True).data
            targets = pack_padded_sequence(targets, decode_lengths, batch_first=True).data
            top5 = accuracy(scores, targets, 5)
        model.train()
        return top5

    batch = ({"encoder_out": first_enc, "encoded_captions": first_caps, "caption_lengths": first_caplens}, first_caps)
    return Program(name="showattendtell_caption", model=decoder, batch=batch, loss_fn=loss_fn,
                   optimizer=decoder_optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # targets read from the loader's captions while the decoder returned its scores in length-sorted order
    # (``caps`` for ``caps_sorted``): each caption's scores are trained toward another image's words (classic).
    Bug("targets_from_unsorted_captions", functools.partial(_build, bug="targets_from_unsorted_captions"),
        "learning_ledger", ("TASK",)),
    # the doubly stochastic regularization summed over pixels (dim=2) instead of over time steps (dim=1): each
    # attention map sums to 1 over pixels, so the term is a constant and the regularization is silently gone
    # (classic wrong-axis reduction).
    Bug("alphas_summed_over_pixels", functools.partial(_build, bug="alphas_summed_over_pixels"), "learning_ledger",
        ("OBJECTIVE",)),
    # the scores flattened without pack_padded_sequence: pad targets and undecoded steps (scored 0) enter the
    # cross-entropy (classic: padding not ignored).
    Bug("padding_in_loss", functools.partial(_build, bug="padding_in_loss"), "learning_ledger", ("OBJECTIVE",)),
]
