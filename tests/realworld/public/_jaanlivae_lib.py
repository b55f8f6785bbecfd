"""``masks.py`` and ``flow.py`` of jaanli/variational-autoencoder, for the port ``jaanlivae_flow.py``: MADE's degree
and mask construction and the inverse autoregressive flow blocks, as written (``masks.create_degrees`` called
without the module prefix). Two bug switches of the port live here: ``BUG["which"]`` read by ``create_masks`` while
a variant's networks are built, and a ``bug`` attribute the port sets on each ``InverseAutoregressiveFlow`` block.

Source: https://github.com/jaanli/variational-autoencoder
Commit: 7e8c661d1d91d415c0222a96f791ee64b7ce7a23
Files: masks.py (``create_input_order``, ``create_degrees``, ``create_masks``), flow.py
License: MIT (Copyright (c) 2016 Jaan Altosaar; full text in LICENSES/jaanli-variational-autoencoder.txt)
"""
# ruff: noqa: UP008, RUF007

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

BUG = {"which": None}  # the variant under construction (read by create_masks while the networks are built)


# ---- masks.py -----------------------------------------------------------------------------------------------------

def create_input_order(input_size, input_order="left-to-right"):
    """Returns a degree vectors for the input."""
    if input_order == "left-to-right":
        return np.arange(start=1, stop=input_size + 1)
    elif input_order == "right-to-left":
        return np.arange(start=input_size, stop=0, step=-1)
    elif input_order == "random":
        ret = np.arange(start=1, stop=input_size + 1)
        np.random.shuffle(ret)
        return ret


def create_degrees(
    input_size, hidden_units, input_order="left-to-right", hidden_degrees="equal"
):
    input_order = create_input_order(input_size, input_order)
    degrees = [input_order]
    for units in hidden_units:
        if hidden_degrees == "random":
            # samples from: [low, high)
            degrees.append(
                np.random.randint(
                    low=min(np.min(degrees[-1]), input_size - 1),
                    high=input_size,
                    size=units,
                )
            )
        elif hidden_degrees == "equal":
            min_degree = min(np.min(degrees[-1]), input_size - 1)
            degrees.append(
                np.maximum(
                    min_degree,
                    # Evenly divide the range `[1, input_size - 1]` in to `units + 1`
                    # segments, and pick the boundaries between the segments as degrees.
                    np.ceil(
                        np.arange(1, units + 1) * (input_size - 1) / float(units + 1)
                    ).astype(np.int32),
                )
            )
    return degrees


def create_masks(degrees):
    """Returns a list of binary mask matrices enforcing autoregressivity."""
    if BUG["which"] == "made_output_mask_includes_diagonal":
        return [inp[:, np.newaxis] <= out for inp, out in zip(degrees[:-1], degrees[1:])] + [
            degrees[-1][:, np.newaxis] <= degrees[0]]
    return [
        # Create input->hidden and hidden->hidden masks.
        inp[:, np.newaxis] <= out
        for inp, out in zip(degrees[:-1], degrees[1:])
    ] + [
        # Create hidden->output mask.
        degrees[-1][:, np.newaxis]
        < degrees[0]
    ]


# ---- flow.py ------------------------------------------------------------------------------------------------------

class InverseAutoregressiveFlow(nn.Module):
    """Inverse Autoregressive Flows with LSTM-type update. One block.

    Eq 11-14 of https://arxiv.org/abs/1606.04934
    """

    def __init__(self, num_input, num_hidden, num_context):
        super().__init__()
        self.made = MADE(
            num_input=num_input,
            num_outputs_per_input=2,
            num_hidden=num_hidden,
            num_context=num_context,
        )
        # init such that sigmoid(s) is close to 1 for stability
        self.sigmoid_arg_bias = nn.Parameter(torch.ones(num_input) * 2)
        self.sigmoid = nn.Sigmoid()
        self.log_sigmoid = nn.LogSigmoid()

    def forward(self, input, context=None):
        m, s = torch.chunk(self.made(input, context), chunks=2, dim=-1)
        s = s + self.sigmoid_arg_bias
        sigmoid = self.sigmoid(s)
        z = sigmoid * input + (1 - sigmoid) * m
        if getattr(self, "bug", None) == "iaf_log_det_sign_flipped":  # (port) set on the block by _build
            return z, self.log_sigmoid(s)
        return z, -self.log_sigmoid(s)


class FlowSequential(nn.Sequential):
    """Forward pass."""

    def forward(self, input, context=None):
        total_log_prob = torch.zeros_like(input, device=input.device)
        for block in self._modules.values():
            input, log_prob = block(input, context)
            total_log_prob += log_prob
        return input, total_log_prob


class MaskedLinear(nn.Module):
    """Linear layer with some input-output connections masked."""

    def __init__(
        self, in_features, out_features, mask, context_features=None, bias=True
    ):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias)
        self.register_buffer("mask", mask)
        if context_features is not None:
            self.cond_linear = nn.Linear(context_features, out_features, bias=False)

    def forward(self, input, context=None):
        output = F.linear(input, self.mask * self.linear.weight, self.linear.bias)
        if context is None:
            return output
        else:
            return output + self.cond_linear(context)


class MADE(nn.Module):
    """Implements MADE: Masked Autoencoder for Distribution Estimation.

    Follows https://arxiv.org/abs/1502.03509

    This is used to build MAF: Masked Autoregressive Flow (https://arxiv.org/abs/1705.07057).
    """

    def __init__(self, num_input, num_outputs_per_input, num_hidden, num_context):
        super().__init__()
        # m corresponds to m(k), the maximum degree of a node in the MADE paper
        self._m = []
        degrees = create_degrees(
            input_size=num_input,
            hidden_units=[num_hidden] * 2,
            input_order="left-to-right",
            hidden_degrees="equal",
        )
        self._masks = create_masks(degrees)
        self._masks[-1] = np.hstack(
            [self._masks[-1] for _ in range(num_outputs_per_input)]
        )
        self._masks = [torch.from_numpy(m.T) for m in self._masks]
        self.input_context_net = MaskedLinear(
            num_input, num_hidden, self._masks[0], num_context
        )
        self.net = nn.Sequential(
            nn.ReLU(),
            MaskedLinear(num_hidden, num_hidden, self._masks[1], context_features=None),
            nn.ReLU(),
            MaskedLinear(
                num_hidden,
                num_outputs_per_input * num_input,
                self._masks[2],
                context_features=None,
            ),
        )

    def forward(self, input, context=None):
        # first hidden layer receives input and context
        hidden = self.input_context_net(input, context)
        # rest of the network is conditioned on both input and context
        return self.net(hidden)


class Reverse(nn.Module):
    """An implementation of a reversing layer from
    Density estimation using Real NVP
    (https://arxiv.org/abs/1605.08803).

    From https://github.com/ikostrikov/pytorch-flows/blob/master/main.py
    """

    def __init__(self, num_input):
        super(Reverse, self).__init__()
        self.perm = np.array(np.arange(0, num_input)[::-1])
        self.inv_perm = np.argsort(self.perm)

    def forward(self, inputs, context=None, mode="forward"):
        if mode == "forward":
            return inputs[:, :, self.perm], torch.zeros_like(
                inputs, device=inputs.device
            )
        elif mode == "inverse":
            return inputs[:, :, self.inv_perm], torch.zeros_like(
                inputs, device=inputs.device
            )
        else:
            raise ValueError("Mode must be one of {forward, inverse}.")
