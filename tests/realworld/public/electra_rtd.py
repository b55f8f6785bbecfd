# ruff: noqa: B006, RUF059, C405, F841, UP028
"""ELECTRA pretraining (replaced token detection): the repository's ``Electra`` wrapper (MLM generator + discriminator,
gumbel-sampled replacements, loss ``gen_weight * mlm_loss + disc_weight * disc_loss``) driven by its OpenWebText
script ``pretraining/openwebtext/pretrain.py`` (Hugging Face ``ElectraForMaskedLM`` / ``ElectraForPreTraining`` from
config with tied embeddings, AdamW with a no-decay group, linear warm-up/decay, clipping).

Source: https://github.com/lucidrains/electra-pytorch
Commit: 5b8bae5c3575b7529891c1b878c24688f57d7ca1
Files: electra_pytorch/electra_pytorch.py, pretraining/openwebtext/pretrain.py,
pretraining/openwebtext/small_generator.json, pretraining/openwebtext/small_discriminator.json,
tests/test_electra_pytorch.py (for one bug)
License: MIT (Copyright (c) 2020 Phil Wang; full text in LICENSES/lucidrains-electra-pytorch.txt)
Domain: language-model pretraining (replaced token detection, generator + discriminator)

Kept as written: ``electra_pytorch.py`` whole (helpers, ``HiddenLayerExtractor``, ``Electra``: mask selection with
``get_mask_subset_with_prob``, [MASK] replacement, MLM cross-entropy with ``ignore_index=pad``, gumbel sampling,
discriminator labels, BCE-with-logits over non-pad tokens, metrics, ``Results``); from pretrain.py: ``collate_batch``,
``cycle``, ``tie_weights``, ``LogitsAdapter``, the ``Electra(...)`` arguments (mask_prob 0.15, ignore [CLS]/[SEP],
random_token_prob 0), ``get_linear_schedule_with_warmup``, AdamW (lr 5e-4, betas (0.9, 0.999), eps 1e-8, weight
decay 0.1 off for bias/LayerNorm), the disabled GradScaler and the loop body (zero_grad, forward with
attention_mask/token_type_ids, scaled backward, unscale, ``clip_grad_norm_(1.0)``, step, update, scheduler step).

Deviations from the original:
- ``get_params_without_weight_decay_ln(model.named_parameters(), ...)`` receives a generator that its first list
  comprehension exhausts, so the no-decay group is empty and every bias and LayerNorm weight is left out of the
  optimizer (a bug of the script as written, the same one fixed in namisan/mt-dnn PR #37); the port passes
  ``list(model.named_parameters())`` so both groups are filled, and the script's line is the bug
  ``named_params_generator`` below;
- sizes: the two configs (small_generator.json / small_discriminator.json) are scaled down: vocab_size 30522 ->
  256, embedding_size 128 -> 16, hidden_size 64 / 256 -> 16 / 32, intermediate_size 256 / 1024 -> 64 / 128,
  num_attention_heads 1 / 4 -> 1 / 2, num_hidden_layers 12 -> 2, max_position_embeddings 512 -> 64 (the other
  fields kept); they are built with ``ElectraConfig(**dict)`` instead of ``AutoConfig.from_pretrained(json)``;
  data_max_seq_length 128 -> 32, opt_batch_size 128 // 4 -> 8, opt_warmup_steps 10000 -> 10,
  opt_num_training_steps 200000 -> 200;
- data: OpenWebText with the BERT vocabulary is replaced by synthetic examples made from ``seed`` with the same
  layout and special ids (pad 0, [CLS] 101, [SEP] 102, [MASK] 103): [CLS], a 4-word "phrase" of ids 110-255
  repeated to fill 14-30 positions, [SEP], padded to the batch's longest with input_mask 0 and segment_ids 0
  (a masked or replaced token is predictable from the phrase's other copies); ``load_owt`` / ``new_tokenizer`` /
  ``wrap_example_builder`` are not ported;
- single process on the CPU: no ``torch.distributed`` / ``DistributedDataParallel`` / ``torch.multiprocessing``,
  no ``.to(device)`` of CUDA, ``set_gpus``/``set_cuda`` dropped; ``torch.cuda.amp.GradScaler/autocast`` (both
  disabled, ``gpu_mixed_precision`` False) are written ``torch.amp.GradScaler("cuda", enabled=False)`` and
  ``torch.amp.autocast("cuda", enabled=False)``; logging, timing and checkpointing are left out;
- ``train_step`` is one iteration of the ``for step`` loop;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the ported lines run.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from collections import namedtuple
from functools import reduce

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program

# ---- electra_pytorch/electra_pytorch.py -------------------------------------------------------------------------

# constants

Results = namedtuple('Results', [
    'loss',
    'mlm_loss',
    'disc_loss',
    'gen_acc',
    'disc_acc',
    'disc_labels',
    'disc_predictions'
])

# helpers

def log(t, eps=1e-9):
    return torch.log(t + eps)

def gumbel_noise(t):
    noise = torch.zeros_like(t).uniform_(0, 1)
    return -log(-log(noise))

def gumbel_sample(t, temperature = 1.):
    return ((t / temperature) + gumbel_noise(t)).argmax(dim=-1)

def prob_mask_like(t, prob):
    return torch.zeros_like(t).float().uniform_(0, 1) < prob

def mask_with_tokens(t, token_ids):
    init_no_mask = torch.full_like(t, False, dtype=torch.bool)
    mask = reduce(lambda acc, el: acc | (t == el), token_ids, init_no_mask)
    return mask

def get_mask_subset_with_prob(mask, prob):
    batch, seq_len, device = *mask.shape, mask.device
    max_masked = math.ceil(prob * seq_len)

    num_tokens = mask.sum(dim=-1, keepdim=True)
    mask_excess = (mask.cumsum(dim=-1) > (num_tokens * prob).ceil())
    mask_excess = mask_excess[:, :max_masked]

    rand = torch.rand((batch, seq_len), device=device).masked_fill(~mask, -1e9)
    _, sampled_indices = rand.topk(max_masked, dim=-1)
    sampled_indices = (sampled_indices + 1).masked_fill_(mask_excess, 0)

    new_mask = torch.zeros((batch, seq_len + 1), device=device)
    new_mask.scatter_(-1, sampled_indices, 1)
    return new_mask[:, 1:].bool()

# hidden layer extractor class, for magically adding adapter to language model to be pretrained

class HiddenLayerExtractor(nn.Module):
    def __init__(self, net, layer = -2):
        super().__init__()
        self.net = net
        self.layer = layer

        self.hidden = None
        self.hook_registered = False

    def _find_layer(self):
        if type(self.layer) == str:
            modules = dict([*self.net.named_modules()])
            return modules.get(self.layer, None)
        elif type(self.layer) == int:
            children = [*self.net.children()]
            return children[self.layer]
        return None

    def _hook(self, _, __, output):
        self.hidden = output

    def _register_hook(self):
        layer = self._find_layer()
        assert layer is not None, f'hidden layer ({self.layer}) not found'
        handle = layer.register_forward_hook(self._hook)
        self.hook_registered = True

    def forward(self, x):
        if self.layer == -1:
            return self.net(x)

        if not self.hook_registered:
            self._register_hook()

        _ = self.net(x)
        hidden = self.hidden
        self.hidden = None
        assert hidden is not None, f'hidden layer {self.layer} never emitted an output'
        return hidden

# main electra class

class Electra(nn.Module):
    def __init__(
        self,
        generator,
        discriminator,
        *,
        num_tokens = None,
        discr_dim = -1,
        discr_layer = -1,
        mask_prob = 0.15,
        replace_prob = 0.85,
        random_token_prob = 0.,
        mask_token_id = 2,
        pad_token_id = 0,
        mask_ignore_token_ids = [],
        disc_weight = 50.,
        gen_weight = 1.,
        temperature = 1.,
        bug = None):
        super().__init__()
        self.bug = bug

        self.generator = generator
        self.discriminator = discriminator

        if discr_dim > 0:
            self.discriminator = nn.Sequential(
                HiddenLayerExtractor(discriminator, layer = discr_layer),
                nn.Linear(discr_dim, 1)
            )

        # mlm related probabilities
        self.mask_prob = mask_prob
        self.replace_prob = replace_prob

        self.num_tokens = num_tokens
        self.random_token_prob = random_token_prob

        # token ids
        self.pad_token_id = pad_token_id
        self.mask_token_id = mask_token_id
        self.mask_ignore_token_ids = set([*mask_ignore_token_ids, pad_token_id])

        # sampling temperature
        self.temperature = temperature

        # loss weights
        self.disc_weight = disc_weight
        self.gen_weight = gen_weight


    def forward(self, input, **kwargs):
        b, t = input.shape

        replace_prob = prob_mask_like(input, self.replace_prob)

        # do not mask [pad] tokens, or any other tokens in the tokens designated to be excluded ([cls], [sep])
        # also do not include these special tokens in the tokens chosen at random
        no_mask = mask_with_tokens(input, self.mask_ignore_token_ids)
        mask = get_mask_subset_with_prob(~no_mask, self.mask_prob)

        # get mask indices
        mask_indices = torch.nonzero(mask, as_tuple=True)

        # mask input with mask tokens with probability of `replace_prob` (keep tokens the same with probability 1 - replace_prob)
        masked_input = input.clone().detach()

        # set inverse of mask to padding tokens for labels
        if self.bug == "gen_labels_not_masked":
            gen_labels = input.clone()
        else:
            gen_labels = input.masked_fill(~mask, self.pad_token_id)

        # clone the mask, for potential modification if random tokens are involved
        # not to be mistakened for the mask above, which is for all tokens, whether not replaced nor replaced with random tokens
        masking_mask = mask.clone()

        # if random token probability > 0 for mlm
        if self.random_token_prob > 0:
            assert self.num_tokens is not None, 'Number of tokens (num_tokens) must be passed to Electra for randomizing tokens during masked language modeling'

            random_token_prob = prob_mask_like(input, self.random_token_prob)
            random_tokens = torch.randint(0, self.num_tokens, input.shape, device=input.device)
            random_no_mask = mask_with_tokens(random_tokens, self.mask_ignore_token_ids)
            random_token_prob &= ~random_no_mask
            masked_input = torch.where(random_token_prob, random_tokens, masked_input)

            # remove random token prob mask from masking mask
            masking_mask = masking_mask & ~random_token_prob

        # [mask] input
        masked_input = masked_input.masked_fill(masking_mask * replace_prob, self.mask_token_id)

        # get generator output and get mlm loss
        logits = self.generator(masked_input, **kwargs)

        mlm_loss = F.cross_entropy(
            logits.transpose(1, 2),
            gen_labels,
            ignore_index = self.pad_token_id
        )

        # use mask from before to select logits that need sampling
        sample_logits = logits[mask_indices]

        # sample
        sampled = gumbel_sample(sample_logits, temperature = self.temperature)

        # scatter the sampled values back to the input
        disc_input = input.clone()
        disc_input[mask_indices] = sampled.detach()

        # generate discriminator labels, with replaced as True and original as False
        disc_labels = (input != disc_input).float().detach()

        # get discriminator predictions of replaced / original
        non_padded_indices = torch.nonzero(input != self.pad_token_id, as_tuple=True)

        # get discriminator output and binary cross entropy loss
        disc_logits = self.discriminator(disc_input, **kwargs)
        disc_logits = disc_logits.reshape_as(disc_labels)

        disc_loss = F.binary_cross_entropy_with_logits(
            disc_logits[non_padded_indices],
            disc_labels[non_padded_indices]
        )

        # gather metrics
        with torch.no_grad():
            gen_predictions = torch.argmax(logits, dim=-1)
            disc_predictions = torch.round((torch.sign(disc_logits) + 1.0) * 0.5)
            gen_acc = (gen_labels[mask] == gen_predictions[mask]).float().mean()
            disc_acc = 0.5 * (disc_labels[mask] == disc_predictions[mask]).float().mean() + 0.5 * (disc_labels[~mask] == disc_predictions[~mask]).float().mean()

        # return weighted sum of losses
        return Results(self.gen_weight * mlm_loss + self.disc_weight * disc_loss, mlm_loss, disc_loss, gen_acc, disc_acc, disc_labels, disc_predictions)


# ---- pretraining/openwebtext/pretrain.py ------------------------------------------------------------------------

class Args:
    data_max_seq_length = 32
    gpu_mixed_precision = False
    model_mask_prob = 0.15
    opt_lr = 5e-4
    opt_batch_size = 8
    opt_warmup_steps = 10
    opt_num_training_steps = 200


SMALL_GENERATOR = {
    "attention_probs_dropout_prob": 0.1, "embedding_size": 16, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
    "hidden_size": 16, "initializer_range": 0.02, "intermediate_size": 64, "layer_norm_eps": 1e-12,
    "max_position_embeddings": 64, "num_attention_heads": 1, "num_hidden_layers": 2, "type_vocab_size": 2,
    "vocab_size": 256,
}
SMALL_DISCRIMINATOR = {
    "attention_probs_dropout_prob": 0.1, "embedding_size": 16, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
    "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 128, "layer_norm_eps": 1e-12,
    "max_position_embeddings": 64, "num_attention_heads": 2, "num_hidden_layers": 2, "type_vocab_size": 2,
    "vocab_size": 256,
}
PAD, CLS, SEP, MASK = 0, 101, 102, 103


def make_examples(seed, n=256):
    """Synthetic stand-in for the OpenWebText feature files: dicts of input_ids / input_mask / segment_ids."""
    gen = torch.Generator().manual_seed(seed)
    examples = []
    for _ in range(n):
        phrase = torch.randint(110, 256, (4,), generator=gen)
        length = int(torch.randint(14, 31, (1,), generator=gen))
        body = phrase.repeat(8)[:length]
        input_ids = torch.cat([torch.tensor([CLS]), body, torch.tensor([SEP])])
        examples.append({'input_ids': input_ids, 'input_mask': torch.ones_like(input_ids),
                         'segment_ids': torch.zeros_like(input_ids)})
    return examples


def _build(seed, bug=None):
    args = Args()
    torch.manual_seed(seed)
    device = torch.device('cpu')

    #######################
    ## dataset

    ds_train = make_examples(seed)
    vocab_size = SMALL_DISCRIMINATOR["vocab_size"]

    pad_token_id = PAD
    mask_token_id = MASK

    def collate_batch(examples):
        input_ids = torch.nn.utils.rnn.pad_sequence([example['input_ids'] for example in examples], batch_first=True, padding_value=pad_token_id)
        input_mask = torch.nn.utils.rnn.pad_sequence([example['input_mask'] for example in examples], batch_first=True, padding_value=pad_token_id)
        segment_ids = torch.nn.utils.rnn.pad_sequence([example['segment_ids'] for example in examples], batch_first=True, padding_value=pad_token_id)
        return input_ids, input_mask, segment_ids

    def cycle(iterable):
        while True:
            for x in iterable:
                yield x

    loader = torch.utils.data.DataLoader(ds_train, batch_size=args.opt_batch_size, collate_fn=collate_batch)
    ds_train_loader = iter(cycle(loader))

    #######################
    ## model

    def tie_weights(generator, discriminator):
        generator.electra.embeddings.word_embeddings = discriminator.electra.embeddings.word_embeddings
        generator.electra.embeddings.position_embeddings = discriminator.electra.embeddings.position_embeddings
        generator.electra.embeddings.token_type_embeddings = discriminator.electra.embeddings.token_type_embeddings

    class LogitsAdapter(torch.nn.Module):
        def __init__(self, adaptee, sigmoid=False):
            super().__init__()
            self.adaptee = adaptee
            self.sigmoid = sigmoid

        def forward(self, *args, **kwargs):
            if self.sigmoid:
                # the discriminator adapter ending in a sigmoid (tests/test_electra_pytorch.py,
                # test_electra_without_magic: nn.Sequential(discriminator, nn.Linear(512, 1), nn.Sigmoid()))
                return torch.sigmoid(self.adaptee(*args, **kwargs)[0])
            return self.adaptee(*args, **kwargs)[0]

    generator = ElectraForMaskedLM(ElectraConfig(**SMALL_GENERATOR))
    discriminator = ElectraForPreTraining(ElectraConfig(**SMALL_DISCRIMINATOR))

    tie_weights(generator, discriminator)

    model = Electra(
        LogitsAdapter(generator),
        LogitsAdapter(discriminator, sigmoid=bug == "sigmoid_in_discriminator_adapter"),
        num_tokens = vocab_size,
        mask_token_id = mask_token_id,
        pad_token_id = pad_token_id,
        mask_prob = args.model_mask_prob,
        mask_ignore_token_ids = [CLS, SEP],
        random_token_prob = 0.0,
        bug = bug).to(device)

    #######################
    ## optimizer

    def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps, last_epoch=-1):
        def lr_lambda(current_step):
            learning_rate = max(0.0, 1. - (float(current_step) / float(num_training_steps)))
            learning_rate *= min(1.0, float(current_step) / float(num_warmup_steps))
            return learning_rate
        return LambdaLR(optimizer, lr_lambda, last_epoch)

    def get_params_without_weight_decay_ln(named_params, weight_decay):
        no_decay = ['bias', 'LayerNorm.weight']
        optimizer_grouped_parameters = [
            {
                'params': [p for n, p in named_params if not any(nd in n for nd in no_decay)],
                'weight_decay': weight_decay,
            },
            {
                'params': [p for n, p in named_params if any(nd in n for nd in no_decay)],
                'weight_decay': 0.0,
            },
        ]
        return optimizer_grouped_parameters

    if bug == "named_params_generator":
        # the script as written: the generator is exhausted by the first group, the no-decay group is empty
        named = model.named_parameters()
    else:
        named = list(model.named_parameters())
    optimizer = torch.optim.AdamW(get_params_without_weight_decay_ln(named, weight_decay=0.1), lr=args.opt_lr, betas=(0.9, 0.999), eps=1e-08)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=args.opt_warmup_steps, num_training_steps=args.opt_num_training_steps)
    scaler = torch.amp.GradScaler("cuda", enabled=args.gpu_mixed_precision)

    #######################
    ## train

    def train_step():
        input_ids, input_mask, segment_ids = next(ds_train_loader)

        input_ids = input_ids.to(device)
        input_mask = input_mask.to(device)
        segment_ids = segment_ids.to(device)

        assert input_ids.shape[1] <= args.data_max_seq_length

        optimizer.zero_grad()

        with torch.amp.autocast("cuda", enabled=args.gpu_mixed_precision):
            loss, loss_mlm, loss_disc, acc_gen, acc_disc, disc_labels, disc_pred = model(input_ids, attention_mask=input_mask, token_type_ids=segment_ids)

        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        return loss.detach()

    input_ids, input_mask, segment_ids = collate_batch(ds_train[:args.opt_batch_size])
    batch = ({"input": input_ids, "attention_mask": input_mask, "token_type_ids": segment_ids},)
    loss_fn = lambda results, _targets: results.loss
    return Program(name="electra_rtd", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, loader=loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # pretrain.py as written: ``model.named_parameters()`` (a generator) is consumed by the first list comprehension,
    # so the no-decay group is empty and no bias or LayerNorm weight is optimized (the same slip as
    # https://github.com/namisan/mt-dnn/pull/37).
    Bug("named_params_generator", functools.partial(_build, bug="named_params_generator"), "four_structures",
        ("electra.embeddings.LayerNorm",)),
    # the discriminator adapter ends in a sigmoid, as the repository's own tests/test_electra_pytorch.py builds it
    # (test_electra_without_magic), while Electra applies binary_cross_entropy_with_logits to its output.
    Bug("sigmoid_in_discriminator_adapter", functools.partial(_build, bug="sigmoid_in_discriminator_adapter"),
        "learning_ledger", ("OBJECTIVE",)),
    # the generator's labels keep every non-pad token (``~mask`` not set to pad; classic: the mask not reaching the
    # loss): the MLM loss mostly rewards copying the visible input tokens.
    Bug("gen_labels_not_masked", functools.partial(_build, bug="gen_labels_not_masked"), "learning_ledger",
        ("OBJECTIVE",)),
]
