"""What public-27's first contact showed, each fixed in general (tests/realworld/README.md):

- a VQ-VAE at one seed: its decoder's reconstruction was one constant across the examples at initialization, so
  ``log N(z)`` of it was one number, and its MSE barely varied across the examples either. The flow reading matched
  the change-of-variables identity "loss + log N(z) is one constant" within its tolerance (set by the size of
  ``log N(z)``, which the constant ``D/2 log 2 pi`` dominates), found the model's transform had a determinant, and
  FAILed ``objective.log_det_mismatch``. The identity must now explain how the examples differ: the model's side of
  it has to vary across them far more than the identity's residual;
- a BERT tagger with a CRF on top: BERT applies the attention mask, but the CRF's forward algorithm and its Viterbi
  decoding run over the padded length (as the repository wrote them), so the decoded score moves with what the padding
  holds. ``dependency.padding_read`` claims the mask does not keep the padding out of the model's attention; it now
  confirms that claim on the attention modules themselves: where no attention module's output at a real position
  moves when only the padding's embeddings change, the padding is read after attention (a CRF, a pooling over the
  padded length), noted and not judged;
- nGPT computes its loss inside ``forward(ids, return_loss=True)``: logits from a matmul against the tied embedding,
  scaled, handed straight to ``F.cross_entropy``. No module outputs them, so the ledger found no site aligned with the
  token sequence and read nothing about what each position is asked for: the labels left unshifted and the causal
  mask dropped both PASSed. The scores a ``cross_entropy`` or ``nll_loss`` reads inside the forward are now a site
  too (laid out ``[B, C, T']`` against ``[B, T']`` targets, or flattened);
- SN-GAN with its discriminator's hinge arguments swapped WARNed. An adversarial step's two players must pull the
  discriminator's score apart: its own loss pushes real and generated inputs opposite ways, the generator's loss
  pushes its samples' score the way the discriminator's pushes the real one. ``objective.adversarial_direction`` reads
  those pushes from one call of the user's step (the gradient each loss sends into the discriminator's scores).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.report import Status

pytestmark = pytest.mark.usefixtures("one_thread")


class _FlatDecoder(nn.Module):
    """An autoencoder whose reconstruction is nearly one constant at these weights (tiny weights, no bias), returned
    beside its code, as a VQ-VAE returns its reconstruction beside the encoder's output."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.enc, self.dec = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        with torch.no_grad():
            self.dec.weight.mul_(1e-3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        code = self.enc(x)
        return self.dec(code), code


def test_a_reconstruction_constant_across_examples_is_no_flow_identity():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 2, (32, 16), generator=g).float() * 2 - 1  # every example's squared norm is 16
    torch.manual_seed(0)
    model = _FlatDecoder()
    loss_fn = lambda out, t: F.mse_loss(out[0], t)
    report = firstdiv.learning_ledger(model, (x, x), loss_fn, torch.optim.Adam(model.parameters(), 1e-3),
                                      overfit_steps=0)
    objective = next(f for f in report.findings if f.where == "OBJECTIVE")
    assert objective.check != "objective.log_det_mismatch" and objective.status is not Status.FAIL, str(report)


V, T, B, E = 20, 10, 16, 32


class _MaskedSelfAttention(nn.Module):
    def __init__(self, applies_mask: bool) -> None:
        super().__init__()
        self.qkv, self.applies_mask = nn.Linear(E, 3 * E), applies_mask

    def forward(self, h: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(h).chunk(3, -1)
        scores = q @ k.transpose(1, 2) / E ** 0.5
        if self.applies_mask:
            scores = scores.masked_fill(pad[:, None, :], float("-inf"))
        return scores.softmax(-1) @ v


class _Tagger(nn.Module):
    """Token embeddings, one self-attention block over the mask, then a reader that sums each position with every later
    one (as a CRF's backward pass does), over the padded length; a tag score per position."""

    def __init__(self, applies_mask: bool) -> None:
        super().__init__()
        self.emb, self.attn, self.out = nn.Embedding(V, E), _MaskedSelfAttention(applies_mask), nn.Linear(E, 3)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.attn(self.emb(input_ids), attention_mask == 0)
        return self.out(h.flip(1).cumsum(1).flip(1) / T)


def _tagging_batch() -> tuple[dict, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, V, (B, T), generator=g)
    lengths = torch.randint(4, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    tags = torch.where(mask.bool(), ids % 3, torch.full_like(ids, -100))
    return {"input_ids": ids * mask, "attention_mask": mask}, tags


@pytest.mark.parametrize("applies_mask", [True, False], ids=["mask_applied", "mask_not_applied"])
def test_padding_read_after_a_masked_attention_is_not_failed(applies_mask):
    torch.manual_seed(0)
    model = _Tagger(applies_mask)
    loss_fn = lambda out, t: F.cross_entropy(out.transpose(1, 2), t)
    report = firstdiv.learning_ledger(model, _tagging_batch(), loss_fn, torch.optim.Adam(model.parameters(), 1e-3),
                                      overfit_steps=0)
    read = [f for f in report.findings if f.check == "dependency.padding_read" and f.status is Status.FAIL]
    if applies_mask:
        assert not read, str(report)
        assert any("the mask keeps the padding out of attention" in n for n in report.details.get("notes", [])), \
            report.details.get("notes")
    else:
        assert read, str(report)


class _InnerLossLM(nn.Module):
    """A causal LM returning its own loss: tied-embedding logits by matmul, no module outputs them."""

    def __init__(self, shifted: bool, flattened: bool) -> None:
        super().__init__()
        self.emb, self.mix = nn.Embedding(V, E), nn.Linear(E, E)
        self.shifted, self.flattened = shifted, flattened

    def forward(self, ids: torch.Tensor, return_loss: bool = False) -> torch.Tensor:
        x, labels = (ids[:, :-1], ids[:, 1:]) if self.shifted else (ids[:, :-1], ids[:, :-1])
        h = self.emb(x)
        h = h + self.mix(h.cumsum(1) / torch.arange(1, h.shape[1] + 1).view(1, -1, 1))  # causal: a running mean
        logits = h @ self.emb.weight.t()
        if not return_loss:
            return logits
        if self.flattened:
            return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
        return F.cross_entropy(logits.transpose(1, 2), labels)


@pytest.mark.parametrize("flattened", [False, True], ids=["scores_b_c_t", "scores_flattened"])
@pytest.mark.parametrize("shifted", [True, False], ids=["shifted", "not_shifted"])
def test_labels_not_shifted_inside_a_model_that_returns_its_loss(shifted, flattened):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, (B, T), generator=g)
    torch.manual_seed(0)
    model = _InnerLossLM(shifted, flattened)
    report = firstdiv.learning_ledger(model, {"ids": ids, "return_loss": True}, lambda loss, _t: loss,
                                      torch.optim.Adam(model.parameters(), 1e-3), overfit_steps=0)
    fails = [f.check for f in report.findings if f.status is Status.FAIL]
    assert fails == ([] if shifted else ["task.target_not_shifted"]), str(report)


class _Player(nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, 16), nn.LeakyReLU(0.2), nn.Linear(16, n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _gan(slip: str | None, wgan_gp: bool = False):
    """A GAN on 2-d points: D's loss on real and detached fakes, then G's loss on attached fakes; ``slip`` swaps a
    target (``g_target_fake``: G trained toward the fake label; ``d_fake_target_real``: D told fakes are real)."""
    torch.manual_seed(0)
    g_net, d_net = _Player(4, 2), _Player(2, 1)
    opt_g, opt_d = torch.optim.Adam(g_net.parameters(), 1e-3), torch.optim.Adam(d_net.parameters(), 1e-3)
    gen = torch.Generator().manual_seed(0)
    real = torch.randn(64, 2, generator=gen) * 0.3 + 1.0
    bce = nn.BCEWithLogitsLoss()
    ones, zeros = torch.ones(32, 1), torch.zeros(32, 1)

    def train_step() -> float:
        x = real[torch.randperm(64, generator=gen)[:32]]
        fake = g_net(torch.randn(32, 4, generator=gen))
        opt_d.zero_grad()
        if wgan_gp:
            a = torch.rand(32, 1, generator=gen)
            mix = (a * x + (1 - a) * fake.detach()).requires_grad_(True)
            (grad,) = torch.autograd.grad(d_net(mix).sum(), mix, create_graph=True)
            d_loss = d_net(fake.detach()).mean() - d_net(x).mean() + 10 * ((grad.norm(dim=1) - 1) ** 2).mean()
        else:
            d_loss = bce(d_net(x), ones) + bce(d_net(fake.detach()), ones if slip == "d_fake_target_real" else zeros)
        d_loss.backward()
        opt_d.step()
        opt_g.zero_grad()
        g_loss = -d_net(fake).mean() if wgan_gp else bce(d_net(fake), zeros if slip == "g_target_fake" else ones)
        g_loss.backward()
        opt_g.step()
        return float(d_loss)

    batch = (torch.cat([real[:16], g_net(torch.randn(16, 4, generator=gen)).detach()]), torch.cat([ones[:16], zeros[:16]]))
    return d_net, batch, bce, opt_d, train_step


@pytest.mark.parametrize(("slip", "wgan_gp", "expected"), [
    (None, False, None), (None, True, None), ("g_target_fake", False, "generator"),
    ("d_fake_target_real", False, "discriminator")], ids=["sound", "sound_wgan_gp", "g_toward_fake", "d_fakes_real"])
def test_adversarial_players_that_cooperate_are_failed(slip, wgan_gp, expected):
    model, batch, loss_fn, opt, step = _gan(slip, wgan_gp)
    report = firstdiv.learning_ledger(model, batch, loss_fn, opt, train_step=step, overfit_steps=0)
    found = [f for f in report.findings if f.check == "objective.adversarial_direction"]
    if expected is None:
        assert not found, str(report)
    else:
        assert found and found[0].status is Status.FAIL and found[0].evidence["which"] == expected, str(report)
