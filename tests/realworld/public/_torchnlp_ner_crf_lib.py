"""torchnlp's output layers (``torchnlp/modules/crf.py``: the linear-chain ``CRF``; ``torchnlp/modules/outputs.py``:
``OutputLayer``, ``CRFOutputLayer``) and ``HParams`` (``torchnlp/common/hparams.py``), for ``torchnlp_ner_crf.py``; the
deviations are listed there (docstrings shortened; ``SoftmaxOutputLayer``, unused with ``use_crf``, left out;
``HParams``' save/load left out).

Source: https://github.com/kolloldas/torchnlp
Commit: d3dad29cf776f6a3b022acd6003f8680b983069c
Files: torchnlp/modules/crf.py, torchnlp/modules/outputs.py, torchnlp/common/hparams.py
License: Apache-2.0 (full text in LICENSES/kolloldas-torchnlp.txt)
"""
# ruff: noqa: UP008

from __future__ import annotations

import torch
from torch import nn

# ---- torchnlp/common/hparams.py -----------------------------------------------------------------------------------

class HParams:
    """
    Holds arbitrary hyperparameters. Converts dict key-values to objects
    """
    def __init__(self, **kwargs):
        self.__dict__ = kwargs

    def update(self, **kwargs):
        self.__dict__.update(kwargs)
        return self


# ---- torchnlp/modules/crf.py --------------------------------------------------------------------------------------

class CRF(nn.Module):
    """
    Implements Conditional Random Fields that can be trained via
    backpropagation.
    """
    def __init__(self, num_tags, bug=None):
        super(CRF, self).__init__()

        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.Tensor(num_tags, num_tags))
        self.start_transitions = nn.Parameter(torch.randn(num_tags))
        self.stop_transitions = nn.Parameter(torch.randn(num_tags))
        self.bug = bug

        nn.init.xavier_normal_(self.transitions)

    def forward(self, feats):
        # Shape checks
        if len(feats.shape) != 3:
            raise ValueError(f"feats must be 3-d got {feats.shape}-d")

        return self._viterbi(feats)

    def loss(self, feats, tags):
        # Shape checks
        if len(feats.shape) != 3:
            raise ValueError(f"feats must be 3-d got {feats.shape}-d")

        if len(tags.shape) != 2:
            raise ValueError(f'tags must be 2-d but got {tags.shape}-d')

        if feats.shape[:2] != tags.shape:
            raise ValueError('First two dimensions of feats and tags must match')

        sequence_score = self._sequence_score(feats, tags)
        partition_function = self._partition_function(feats)
        log_probability = sequence_score - partition_function

        # -ve of l()
        # Average across batch
        return -log_probability.mean()

    def _sequence_score(self, feats, tags):
        # Compute feature scores
        feat_score = feats.gather(2, tags.unsqueeze(-1)).squeeze(-1).sum(dim=-1)

        # Compute transition scores
        # Unfold to get [from, to] tag index pairs
        tags_pairs = tags.unfold(1, 2, 1)

        # Use advanced indexing to pull out required transition scores
        indices = tags_pairs.permute(2, 0, 1).chunk(2)
        if self.bug == "transitions_transposed_in_score":
            # the pairs read [to, from]: the gold path is scored with the transposed matrix
            indices = indices[::-1]
        trans_score = self.transitions[indices].squeeze(0).sum(dim=-1)

        # Compute start and stop scores
        start_score = self.start_transitions[tags[:, 0]]
        stop_score = self.stop_transitions[tags[:, -1]]

        return feat_score + start_score + trans_score + stop_score

    def _partition_function(self, feats):
        _, seq_size, num_tags = feats.shape

        if self.num_tags != num_tags:
            raise ValueError(f'num_tags should be {self.num_tags} but got {num_tags}')

        a = feats[:, 0] + self.start_transitions.unsqueeze(0) # [batch_size, num_tags]
        transitions = self.transitions.unsqueeze(0) # [1, num_tags, num_tags] from -> to

        for i in range(1, seq_size):
            feat = feats[:, i].unsqueeze(1) # [batch_size, 1, num_tags]
            a = self._log_sum_exp(a.unsqueeze(-1) + transitions + feat, 1) # [batch_size, num_tags]

        return self._log_sum_exp(a + self.stop_transitions.unsqueeze(0), 1) # [batch_size]

    def _viterbi(self, feats):
        _, seq_size, num_tags = feats.shape

        if self.num_tags != num_tags:
            raise ValueError(f'num_tags should be {self.num_tags} but got {num_tags}')

        v = feats[:, 0] + self.start_transitions.unsqueeze(0) # [batch_size, num_tags]
        transitions = self.transitions.unsqueeze(0) # [1, num_tags, num_tags] from -> to
        paths = []

        for i in range(1, seq_size):
            feat = feats[:, i] # [batch_size, num_tags]
            v, idx = (v.unsqueeze(-1) + transitions).max(1) # [batch_size, num_tags], [batch_size, num_tags]

            paths.append(idx)
            v = (v + feat) # [batch_size, num_tags]

        v, tag = (v + self.stop_transitions.unsqueeze(0)).max(1, True)

        # Backtrack
        tags = [tag]
        for idx in reversed(paths):
            tag = idx.gather(1, tag)
            tags.append(tag)

        tags.reverse()
        return torch.cat(tags, 1)

    def _log_sum_exp(self, logits, dim):
        """
        Computes log-sum-exp in a stable way
        """
        max_val, _ = logits.max(dim)
        return max_val + (logits - max_val.unsqueeze(dim)).exp().sum(dim).log()


# ---- torchnlp/modules/outputs.py ----------------------------------------------------------------------------------

class OutputLayer(nn.Module):
    """
    Abstract base class for output layer.
    Handles projection to output labels
    """
    def __init__(self, hidden_size, output_size):
        super(OutputLayer, self).__init__()
        self.output_size = output_size
        self.output_projection = nn.Linear(hidden_size, output_size)


class CRFOutputLayer(OutputLayer):
    """
    Implements a CRF based output layer
    """
    def __init__(self, hidden_size, output_size, bug=None):
        super(CRFOutputLayer, self).__init__(hidden_size, output_size)
        self.crf = CRF(output_size, bug=bug)

    def forward(self, hidden):
        feats = self.output_projection(hidden)
        return self.crf(feats)

    def loss(self, hidden, labels):
        feats = self.output_projection(hidden)
        return self.crf.loss(feats, labels)
