"""The ports of public training programs (``public/``): each is checked as a program, never through firstdiv.

- every module builds at seed 0 and its own loop lowers its loss (``self_check``), with a finite last loss;
- every module's docstring names its source repository, the commit it was ported from and the license, and the
  repository is not one of the independent-check repositories that must never be ported from;
- every module has at least one bug variant, each naming an instrument and a place, and each variant builds and
  runs one step of its own loop.

The checks that run a port's loop cover the ports ``_scope.py`` selects (a fixed sample under ``make test``, every
port under ``make test-corpus``); the static ones cover every port.
"""

from __future__ import annotations

import math
import pathlib
import re

import _gate_pool
import _scope
import pytest
from _api import load_dir

PUBLIC_DIR = pathlib.Path(__file__).resolve().parent / "public"
PUBLIC = load_dir(PUBLIC_DIR, "realworld_public")
BUGS = [(name, i, bug) for name, module in PUBLIC.items() for i, bug in enumerate(module.BUGS)]
#: the ports whose loops run here (``_scope.py``: a fixed sample under ``make test``, all under ``make test-corpus``)
RUN = sorted(name for name in PUBLIC if _scope.selected(name))

#: The project's independent checks: nothing in public/ may come from them.
NEVER_PORTED = (
    "pytorch/examples", "pytorch/tutorials", "OrderLab/TrainCheck-Evaluation-Workloads", "karpathy/nanoGPT",
    "karpathy/makemore", "karpathy/minGPT", "lucidrains/vit-pytorch", "lucidrains/tab-transformer-pytorch",
    "lucidrains/denoising-diffusion-pytorch", "vwxyzjn/cleanrl", "tkipf/pygcn", "facebookresearch/moco",
    "facebookresearch/dino", "labmlai/annotated_deep_learning_paper_implementations", "d2l-ai/d2l-en",
    "kuangliu/pytorch-cifar", "eriklindernoren/PyTorch-GAN", "bentrevett/pytorch-seq2seq",
    "yunjey/pytorch-tutorial", "DLR-RM/stable-baselines3", "mlfoundations/open_clip",
    "jadore801120/attention-is-all-you-need-pytorch",
)
INSTRUMENTS = ("step_probe", "learning_ledger", "six_claims", "four_structures", "tensor_trace", "reachability",
               "shape_ledger", "attention_check", "first_nonfinite", "diagnose")

pytestmark = pytest.mark.usefixtures("one_thread")  # the corpus's own modules imported here run on one thread too


def test_there_are_public_ports():
    assert PUBLIC, f"no modules in {PUBLIC_DIR}"


@pytest.fixture(scope="module")
def pool():
    """The jobs' futures (``_public_jobs.learns`` and ``steps``): ``conftest.py`` submitted the selected ones to the
    public gate's two workers when collection ended, so these per-port runs share the machine with the serial tests
    instead of queueing behind them; each test waits for its own result."""
    return _gate_pool.start([("learns", n) for n in RUN] + [("steps", n, i) for n, i, _ in BUGS if n in RUN])


@pytest.mark.parametrize("name", RUN)
def test_port_learns_under_its_own_loop(name, pool):
    out = pool[("learns", name)].result()
    assert "error" not in out, out.get("error")
    first, last = out["first"], out["last"]
    assert math.isfinite(last) and last < first, (first, last)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_port_header_names_its_source(name):
    doc = PUBLIC[name].__doc__ or ""
    repos = re.findall(r"https://github\.com/([\w.-]+/[\w.-]+)", doc)
    assert repos, "the docstring names no GitHub repository"
    assert not set(repos) & set(NEVER_PORTED), f"ported from an independent-check repository: {repos}"
    assert re.search(r"\b[0-9a-f]{40}\b", doc), "the docstring names no 40-hex commit"
    assert re.search(r"License: \S", doc), "the docstring names no license"
    assert "Deviations" in doc, "the docstring lists no deviations"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_port_has_bug_variants(name):
    bugs = PUBLIC[name].BUGS
    assert bugs, "no bug variant"
    assert len({b.name for b in bugs}) == len(bugs), "two bugs share a name"
    for bug in bugs:
        assert bug.instrument in INSTRUMENTS, bug
        assert all(isinstance(w, str) and w for w in bug.where), bug
        # a whole-model step slip is declared by its mechanism (README rule 6): no place, a step kind
        assert bug.where or (bug.instrument == "step_probe" and bug.kind.startswith("step.")), bug


@pytest.mark.parametrize(("name", "index"), [(n, i) for n, i, _ in BUGS if n in RUN],
                         ids=[f"{n}-{b.name}" for n, _, b in BUGS if n in RUN])
def test_bug_variant_builds_and_steps(name, index, pool):
    out = pool[("steps", name, index)].result()
    assert "error" not in out, out.get("error")
    assert out["numel"] == 1


def test_every_port_was_measured_once_at_first_contact_and_the_rates_add_up():
    """A port enters the corpus with its first-contact result in the ledger (first_contact.py, run before any change
    for it), in exactly one batch; the rates a batch states are the ones its entries give (nothing edited by hand)."""
    import json

    from first_contact import LEDGER, _rates

    batches = json.loads(LEDGER.read_text())["batches"]
    measured = [name for b in batches for name in b["programs"]]
    assert len(measured) == len(set(measured)), "a port measured twice"
    withdrawn = [name for b in batches for name in b.get("withdrawn", [])]
    assert set(withdrawn) <= set(measured) - set(PUBLIC), f"withdrawn but still in the corpus: {withdrawn}"
    readme = (pathlib.Path(__file__).parent / "public" / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in withdrawn), "a withdrawal the public README does not explain"
    kept = sorted(set(measured) - set(withdrawn))
    assert sorted(PUBLIC) == kept, f"ports without a first-contact result: {sorted(set(PUBLIC) - set(measured))}"
    for b in batches:
        assert b["rates"] == _rates(b["programs"]), b["batch"]
        assert re.fullmatch(r"[0-9a-f]{40}( \(with uncommitted changes\))?", b["firstdiv_commit"]), b["batch"]
