"""Direct Preference Optimization as the paper's reference implementation trains it (``train.py loss=dpo``):
``BasicTrainer`` runs the policy on the chosen and rejected responses concatenated into one batch
(``concatenated_forward``), sums the per-token log-probabilities of the response tokens (``_get_batch_logps``:
labels shifted by one, prompt and padding labelled -100 and masked), takes the frozen reference model's
log-probabilities under ``no_grad``, and minimizes ``-logsigmoid(beta * (pi_logratios - ref_logratios))``
(``preference_loss``, beta 0.1 as in the README); RMSprop with a linear warmup (``LambdaLR``), gradient clipping at
``max_grad_norm`` 10, dropout disabled in both models (``disable_dropout``).

Source: https://github.com/eric-mitchell/direct-preference-optimization
Commit: f8b8c0f49dc92a430bae41585f9d467d3618fe2f
Files: train.py, trainers.py (preference_loss, _get_batch_logps, concatenated_inputs, BasicTrainer), utils.py
(pad_to_length, disable_dropout), preference_datasets.py (tokenize_batch_element, get_collate_fn,
get_batch_iterator), config/config.yaml, config/loss/dpo.yaml
License: Apache-2.0 (the repository's LICENSE carries no copyright line; the project is Eric Mitchell's;
full text in LICENSES/eric-mitchell-direct-preference-optimization.txt)
Domain: language-model preference optimization (DPO on a causal LM against a frozen reference model)

Deviations from the original:
- transformers is not installed and nothing is downloaded: the policy and reference are a small GPT-2
  (``GPT2LMHeadModel``'s structure written out in plain torch: wte/wpe, pre-norm blocks with fused ``c_attn``, GELU
  MLP, ``ln_f``, tied LM head, key-padding ``attention_mask``; the forward returns an object with ``.logits``),
  random weights from config: n_embd 32, n_layer 2, n_head 2; the reference is a copy of the policy's initial
  weights (what loading one ``model.archive`` into both gives; there is no SFT archive here) and is kept in float32
  (``reference_dtype`` float16 is a GPU setting);
- data: Anthropic HH is replaced by synthetic preference pairs made from ``seed``: the prompt is 3-6 lower-case
  letters and a colon, the chosen response the prompt's letters in reverse, the rejected response 2-7 random
  letters; the tokenizer is character level (``eos_token_id`` 27, ``pad_token_id`` set to it as the trainer does);
  ``tokenize_batch_element``, the collate function and the batching of ``get_batch_iterator`` are copied (the
  dataset loading, ``TemporarilySeededRandom`` and ``n_epochs``/``n_examples`` stopping are replaced by a seeded
  shuffle per epoch, without end);
- sizes and schedule for 30 CPU steps: batch_size 64 -> 16, max_length 512 -> 24, max_prompt_length 256 -> 12,
  lr 5e-7 -> 1e-3, warmup_steps 150 -> 5 (gradient_accumulation_steps 1, max_grad_norm 10, RMSprop unchanged);
- one ``train_step`` is one iteration of ``BasicTrainer.train``'s training block (micro-batches, clip, step,
  scheduler, zero_grad); evaluation, sampling, wandb, metrics gathering and checkpointing are left out (the metrics
  dict keeps the reward accuracies only), as are the IPO/SFT branches and the per-rank slice of a micro-batch (one
  process); ``eval_fn`` is ``get_batch_metrics(..., train=False)``'s mean loss under ``no_grad``;
- the Program's batch is ``(concatenated_input_ids, (concatenated_labels, reference_chosen_logps,
  reference_rejected_logps))`` of the first batch, the reference log-probabilities computed once (the reference is
  frozen), and ``loss_fn`` the trainer's DPO loss on the policy's output.
"""
# ruff: noqa: RUF015, RUF059

from __future__ import annotations

import copy
import functools
import pathlib
import sys
from types import SimpleNamespace

import torch
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _dpo_preference_lib import CharTokenizer, GPT2LMHeadModel, get_batch_iterator, make_pairs

CONFIG = SimpleNamespace(batch_size=16, max_length=24, max_prompt_length=12, lr=1e-3, warmup_steps=5,
                         gradient_accumulation_steps=1, max_grad_norm=10.0, optimizer="RMSprop",
                         loss=SimpleNamespace(name="dpo", beta=0.1, label_smoothing=0, reference_free=False))


# ---- utils.py -----------------------------------------------------------------------------------------------------

def pad_to_length(tensor, length, pad_value, dim=-1):
    if tensor.size(dim) >= length:
        return tensor
    else:
        pad_size = list(tensor.shape)
        pad_size[dim] = length - tensor.size(dim)
        return torch.cat([tensor, pad_value * torch.ones(*pad_size, dtype=tensor.dtype, device=tensor.device)], dim=dim)


def disable_dropout(model):
    """Disable dropout in a model."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0


# ---- trainers.py --------------------------------------------------------------------------------------------------

def preference_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
                    beta, label_smoothing=0.0, ipo=False, reference_free=False):
    pi_logratios = policy_chosen_logps - policy_rejected_logps
    ref_logratios = reference_chosen_logps - reference_rejected_logps

    if reference_free:
        ref_logratios = 0

    logits = pi_logratios - ref_logratios  # also known as h_{\pi_\theta}^{y_w,y_l}

    if ipo:
        losses = (logits - 1/(2 * beta)) ** 2  # Eq. 17 of https://arxiv.org/pdf/2310.12036v2.pdf
    else:
        # Eq. 3 https://ericmitchell.ai/cdpo.pdf; label_smoothing=0 gives original DPO (Eq. 7 of https://arxiv.org/pdf/2305.18290.pdf)
        losses = -F.logsigmoid(beta * logits) * (1 - label_smoothing) - F.logsigmoid(-beta * logits) * label_smoothing

    chosen_rewards = beta * (policy_chosen_logps - reference_chosen_logps).detach()
    rejected_rewards = beta * (policy_rejected_logps - reference_rejected_logps).detach()

    return losses, chosen_rewards, rejected_rewards


def _get_batch_logps(logits, labels, average_log_prob=False, bug=None):
    assert logits.shape[:-1] == labels.shape

    if bug == "logps_not_shifted":
        # the one-position shift dropped: each position is scored on the token it reads
        labels = labels.clone()
    else:
        labels = labels[:, 1:].clone()
        logits = logits[:, :-1, :]
    loss_mask = (labels != -100)

    # dummy token; we'll ignore the losses on these tokens later
    labels[labels == -100] = 0

    per_token_logps = torch.gather(logits.log_softmax(-1), dim=2, index=labels.unsqueeze(2)).squeeze(2)

    if average_log_prob:
        return (per_token_logps * loss_mask).sum(-1) / loss_mask.sum(-1)
    else:
        return (per_token_logps * loss_mask).sum(-1)


def concatenated_inputs(batch):
    max_length = max(batch['chosen_input_ids'].shape[1], batch['rejected_input_ids'].shape[1])
    concatenated_batch = {}
    for k in batch:
        if k.startswith('chosen') and isinstance(batch[k], torch.Tensor):
            pad_value = -100 if 'labels' in k else 0
            concatenated_key = k.replace('chosen', 'concatenated')
            concatenated_batch[concatenated_key] = pad_to_length(batch[k], max_length, pad_value=pad_value)
    for k in batch:
        if k.startswith('rejected') and isinstance(batch[k], torch.Tensor):
            pad_value = -100 if 'labels' in k else 0
            concatenated_key = k.replace('rejected', 'concatenated')
            concatenated_batch[concatenated_key] = torch.cat((
                concatenated_batch[concatenated_key],
                pad_to_length(batch[k], max_length, pad_value=pad_value),
            ), dim=0)
    return concatenated_batch


class BasicTrainer:
    """``BasicTrainer``'s DPO path (``concatenated_forward``, ``get_batch_metrics``, the training block of ``train``)."""

    def __init__(self, policy, config, reference_model, train_iterator, bug=None):
        self.policy, self.config, self.reference_model = policy, config, reference_model
        self.train_iterator = train_iterator
        self.bug = bug

    def concatenated_forward(self, model, batch):
        concatenated_batch = concatenated_inputs(batch)
        all_logits = model(concatenated_batch['concatenated_input_ids'], attention_mask=concatenated_batch['concatenated_attention_mask']).logits.to(torch.float32)
        all_logps = _get_batch_logps(all_logits, concatenated_batch['concatenated_labels'], average_log_prob=False, bug=self.bug)
        if self.bug == "chosen_rejected_swapped":
            # the halves read in the wrong order: the rejected responses are treated as the preferred ones
            return all_logps[batch['chosen_input_ids'].shape[0]:], all_logps[:batch['chosen_input_ids'].shape[0]]
        chosen_logps = all_logps[:batch['chosen_input_ids'].shape[0]]
        rejected_logps = all_logps[batch['chosen_input_ids'].shape[0]:]
        return chosen_logps, rejected_logps

    def get_batch_metrics(self, batch, loss_config, train=True):
        policy_chosen_logps, policy_rejected_logps = self.concatenated_forward(self.policy, batch)
        with torch.no_grad():
            reference_chosen_logps, reference_rejected_logps = self.concatenated_forward(self.reference_model, batch)

        loss_kwargs = {'beta': loss_config.beta, 'reference_free': loss_config.reference_free, 'label_smoothing': loss_config.label_smoothing, 'ipo': False}

        losses, chosen_rewards, rejected_rewards = preference_loss(
            policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps, **loss_kwargs)

        return losses.mean(), {'rewards/accuracies': (chosen_rewards > rejected_rewards).float().tolist()}

    def setup(self):
        self.optimizer = getattr(torch.optim, self.config.optimizer)(self.policy.parameters(), lr=self.config.lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda=lambda step: min(1.0, (step + 1) / (self.config.warmup_steps + 1)))
        self.reference_model.eval()

    def train_step(self):
        batch = next(self.train_iterator)
        self.policy.train()

        for microbatch_idx in range(self.config.gradient_accumulation_steps):
            global_microbatch = slice_and_move_batch_for_device(batch, microbatch_idx, self.config.gradient_accumulation_steps, 'cpu')
            loss, metrics = self.get_batch_metrics(global_microbatch, self.config.loss, train=True)
            (loss / self.config.gradient_accumulation_steps).backward()

        self.clip_gradient()
        self.optimizer.step()
        self.scheduler.step()
        if self.bug != "zero_grad_dropped":
            self.optimizer.zero_grad()
        return loss.detach()

    def clip_gradient(self):
        """Clip the gradient norm of the parameters of a non-FSDP policy."""
        return torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.config.max_grad_norm).item()


def slice_and_move_batch_for_device(batch, rank, world_size, device):
    """Slice a batch into chunks, and move each chunk to the specified device."""
    chunk_size = len(list(batch.values())[0]) // world_size
    start = chunk_size * rank
    end = chunk_size * (rank + 1)
    sliced = {k: v[start:end] for k, v in batch.items()}
    on_device = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in sliced.items()}
    return on_device


def _build(seed, bug=None):
    torch.manual_seed(seed)
    config = CONFIG
    tokenizer = CharTokenizer()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token_id = tokenizer.eos_token_id

    policy = GPT2LMHeadModel(vocab_size=29)
    disable_dropout(policy)
    reference_model = copy.deepcopy(policy)
    disable_dropout(reference_model)

    iterator_kwargs = {'tokenizer': tokenizer, 'batch_size': config.batch_size, 'max_length': config.max_length,
                       'max_prompt_length': config.max_prompt_length}
    train_iterator = get_batch_iterator(make_pairs(seed), seed=seed, **iterator_kwargs)
    eval_batch = next(get_batch_iterator(make_pairs(seed + 1000, n=config.batch_size), seed=seed, **iterator_kwargs))
    first = next(get_batch_iterator(make_pairs(seed), seed=seed, **iterator_kwargs))

    trainer = BasicTrainer(policy, config, reference_model, train_iterator, bug=bug)
    trainer.setup()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            loss, _ = trainer.get_batch_metrics(eval_batch, config.loss, train=False)
        model.train()
        return float(loss)

    concatenated = concatenated_inputs(first)
    with torch.no_grad():
        ref_chosen, ref_rejected = trainer.concatenated_forward(reference_model, first)

    def loss_fn(outputs, target):
        labels, reference_chosen_logps, reference_rejected_logps = target
        all_logps = _get_batch_logps(outputs.logits.to(torch.float32), labels, average_log_prob=False, bug=bug)
        n = reference_chosen_logps.shape[0]
        chosen, rejected = all_logps[:n], all_logps[n:]
        if bug == "chosen_rejected_swapped":
            chosen, rejected = rejected, chosen
        losses, _, _ = preference_loss(chosen, rejected, reference_chosen_logps, reference_rejected_logps,
                                       beta=config.loss.beta)
        return losses.mean()

    batch = (concatenated['concatenated_input_ids'], (concatenated['concatenated_labels'], ref_chosen, ref_rejected))
    return Program(name="dpo_preference", model=policy, batch=batch, loss_fn=loss_fn, optimizer=trainer.optimizer,
                   train_step=trainer.train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: ``_get_batch_logps`` without its one-position shift (labels[:, 1:], logits[:, :-1] dropped): each
    # response token is scored by the logits at its own position, which have read it.
    Bug("logps_not_shifted", functools.partial(_build, bug="logps_not_shifted"), "learning_ledger", ("TASK",)),
    # classic: the concatenated batch's halves read in the wrong order, so the rejected responses are the preferred
    # ones: the loss drives the policy away from the chosen responses.
    Bug("chosen_rejected_swapped", functools.partial(_build, bug="chosen_rejected_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: optimizer.zero_grad() left out of the training block: gradients pile up across steps.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]
