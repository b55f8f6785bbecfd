"""The data side of eric-mitchell/direct-preference-optimization (``preference_datasets.py``: ``tokenize_batch_element``,
``get_collate_fn``, the DPO branch of ``get_batch_iterator``) with the synthetic preference pairs and character
tokenizer that stand in for Anthropic HH and the HF tokenizer, and transformers' ``GPT2LMHeadModel`` written out in
plain torch, for ``dpo_preference.py``; the deviations are listed there.

Source: https://github.com/eric-mitchell/direct-preference-optimization
Commit: f8b8c0f49dc92a430bae41585f9d467d3618fe2f
Files: preference_datasets.py
License: Apache-2.0 (full text in LICENSES/eric-mitchell-direct-preference-optimization.txt)
"""
# ruff: noqa: SIM118, PIE810

from __future__ import annotations

import random
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence

# ---- transformers' GPT2LMHeadModel, written out (not part of the repository) ------------------------------------

class GPT2Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.attn_c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(0.1)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * n_embd, n_embd), nn.Dropout(0.1))

    def forward(self, x, attn_mask):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x = x + self.attn_dropout(self.attn_c_proj(y.transpose(1, 2).reshape(b, t, c)))
        return x + self.mlp(self.ln_2(x))


class GPT2LMHeadModel(nn.Module):
    def __init__(self, vocab_size, n_positions=32, n_embd=32, n_layer=2, n_head=2):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(n_positions, n_embd)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([GPT2Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, input_ids, attention_mask=None):
        t = input_ids.shape[1]
        x = self.drop(self.wte(input_ids) + self.wpe(torch.arange(t, device=input_ids.device)))
        mask = torch.ones(t, t, dtype=torch.bool, device=input_ids.device).tril()[None, None]
        if attention_mask is not None:
            mask = mask & attention_mask.bool()[:, None, None, :]
        for block in self.h:
            x = block(x, mask)
        return SimpleNamespace(logits=self.lm_head(self.ln_f(x)))



# ---- preference_datasets.py ---------------------------------------------------------------------------------------

class CharTokenizer:
    """A character-level stand-in for the HF tokenizer: 'a'..'z' -> 1..26, ':' -> 28, eos 27 (pad set to eos)."""
    eos_token_id = 27
    pad_token_id = None

    def __call__(self, text, add_special_tokens=False):
        ids = [28 if ch == ':' else ord(ch) - 96 for ch in text]
        return {'input_ids': ids, 'attention_mask': [1] * len(ids)}


def tokenize_batch_element(prompt, chosen, rejected, truncation_mode, tokenizer, max_length, max_prompt_length):
    chosen_tokens = tokenizer(chosen, add_special_tokens=False)
    rejected_tokens = tokenizer(rejected, add_special_tokens=False)
    prompt_tokens = tokenizer(prompt, add_special_tokens=False)

    assert tokenizer.eos_token_id not in prompt_tokens['input_ids'], f"Prompt contains EOS token: {prompt}"
    assert tokenizer.eos_token_id not in chosen_tokens['input_ids'], f"Chosen response contains EOS token: {chosen}"
    assert tokenizer.eos_token_id not in rejected_tokens['input_ids'], f"Rejected response contains EOS token: {rejected}"

    chosen_tokens['input_ids'].append(tokenizer.eos_token_id)
    chosen_tokens['attention_mask'].append(1)

    rejected_tokens['input_ids'].append(tokenizer.eos_token_id)
    rejected_tokens['attention_mask'].append(1)

    longer_response_length = max(len(chosen_tokens['input_ids']), len(rejected_tokens['input_ids']))

    # if combined sequence is too long, truncate the prompt
    if len(prompt_tokens['input_ids']) + longer_response_length > max_length:
        if truncation_mode == 'keep_start':
            prompt_tokens = {k: v[:max_prompt_length] for k, v in prompt_tokens.items()}
        elif truncation_mode == 'keep_end':
            prompt_tokens = {k: v[-max_prompt_length:] for k, v in prompt_tokens.items()}
        else:
            raise ValueError(f'Unknown truncation mode: {truncation_mode}')

    # if that's still too long, truncate the response
    if len(prompt_tokens['input_ids']) + longer_response_length > max_length:
        chosen_tokens = {k: v[:max_length - max_prompt_length] for k, v in chosen_tokens.items()}
        rejected_tokens = {k: v[:max_length - max_prompt_length] for k, v in rejected_tokens.items()}

    # Create labels
    chosen_sequence_tokens = {k: prompt_tokens[k] + chosen_tokens[k] for k in chosen_tokens}
    rejected_sequence_tokens = {k: prompt_tokens[k] + rejected_tokens[k] for k in rejected_tokens}
    chosen_sequence_tokens['labels'] = chosen_sequence_tokens['input_ids'][:]
    chosen_sequence_tokens['labels'][:len(prompt_tokens['input_ids'])] = [-100] * len(prompt_tokens['input_ids'])
    rejected_sequence_tokens['labels'] = rejected_sequence_tokens['input_ids'][:]
    rejected_sequence_tokens['labels'][:len(prompt_tokens['input_ids'])] = [-100] * len(prompt_tokens['input_ids'])

    batch = {}

    batch['prompt'] = prompt
    batch['chosen'] = prompt + chosen
    batch['rejected'] = prompt + rejected
    batch['chosen_response_only'] = chosen
    batch['rejected_response_only'] = rejected

    for k, toks in {'chosen': chosen_sequence_tokens, 'rejected': rejected_sequence_tokens, 'prompt': prompt_tokens}.items():
        for type_key, tokens in toks.items():
            if type_key == 'token_type_ids':
                continue
            batch[f'{k}_{type_key}'] = tokens

    return batch


def get_collate_fn(tokenizer):
    def collate_fn(batch):
        # first, pad everything to the same length
        padded_batch = {}
        for k in batch[0].keys():
            if k.endswith('_input_ids') or k.endswith('_attention_mask') or k.endswith('_labels'):
                if 'prompt' in k:  # adapted from https://stackoverflow.com/questions/73256206
                    to_pad = [torch.LongTensor(ex[k][::-1]) for ex in batch]
                else:
                    to_pad = [torch.LongTensor(ex[k]) for ex in batch]
                if k.endswith('_input_ids'):
                    padding_value = tokenizer.pad_token_id
                elif k.endswith('_labels'):
                    padding_value = -100
                elif k.endswith('_attention_mask'):
                    padding_value = 0
                else:
                    raise ValueError(f"Unexpected key in batch '{k}'")

                padded_batch[k] = pad_sequence(to_pad, batch_first=True, padding_value=padding_value)
                if 'prompt' in k:  # for the prompt, flip back so padding is on left side
                    padded_batch[k] = padded_batch[k].flip(dims=[1])
            else:
                padded_batch[k] = [ex[k] for ex in batch]

        return padded_batch
    return collate_fn


def get_batch_iterator(flat_data, tokenizer, batch_size, max_length, max_prompt_length, seed):
    """The DPO branch of ``get_batch_iterator``: a seeded shuffle per epoch, pairs tokenized and collated."""
    collate_fn = get_collate_fn(tokenizer)
    rng = random.Random(seed)
    while True:
        rng.shuffle(flat_data)
        batch = []
        for prompt, responses, pairs, sft_target, truncation_mode in flat_data:
            for p in pairs:
                batch_element = tokenize_batch_element(prompt, responses[p[0]], responses[p[1]], truncation_mode, tokenizer, max_length, max_prompt_length)
                batch.append(batch_element)
                if len(batch) == batch_size:
                    yield collate_fn(batch)
                    batch = []


def make_pairs(seed, n=400):
    """Prompts of 3-6 letters and a colon; the chosen response reverses the letters, the rejected one is random."""
    g = random.Random(seed)
    letters = 'abcdefghijklmnopqrstuvwxyz'
    data = []
    for _ in range(n):
        word = ''.join(g.choice(letters) for _ in range(g.randint(3, 6)))
        chosen = word[::-1]
        rejected = ''.join(g.choice(letters) for _ in range(g.randint(2, 7)))
        data.append((word + ':', [chosen, rejected], [(0, 1)], chosen, 'keep_end'))
    return data
