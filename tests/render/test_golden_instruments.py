"""Golden files for what the instruments print: each instrument's FAIL report on the zoo fault the catalog says
it must localize (memory_phases and DiagnosticSet, which no zoo fault targets, on a small fault made here; the
evidence_packet, which records and never fails, on the stale optimizer), and the incident worksheet diagnose
pre-fills, as text and as Markdown.

Reports are rendered by ``str(report)`` (plain text, 100 columns) and ``Worksheet.to_markdown()``, through
public names only. ``pytest --update-golden`` rewrites tests/golden/ instead of comparing.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import Report, Status, zoo

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread, no spin-waiting


def _attention(p):
    module, inputs, options = p.attention
    return firstdiv.attention_check(module, inputs, **options)


def _performance(p):
    step, batch, options = p.perf_case
    return firstdiv.performance_ledger(step, batch, **options, phases=False)  # which phase dominates is a measurement


#: instrument -> (zoo fault it must localize, how a user calls it on the program)
ZOO = {
    "step_probe": ("missing_zero_grad", lambda p: firstdiv.step_probe(p.model, p.batch, p.loss_fn, p.optimizer,
                                                                        train_step=p.train_step)),
    "reachability": ("detach", lambda p: firstdiv.reachability(p.model, p.batch, p.loss_fn)),
    "four_structures": ("stale_optimizer", lambda p: firstdiv.four_structures(p.model, p.optimizer, p.batch, p.loss_fn)),
    # zero_init, not remove_activation: the zoo's mlp labels are linearly separable, so an affine model is a WARN
    "six_claims": ("zero_init", lambda p: firstdiv.six_claims(p.model, p.batch, p.loss_fn, p.optimizer,
                                                                eval_fn=p.eval_fn)),
    "learning_ledger": ("softmax_before_ce", lambda p: firstdiv.learning_ledger(p.model, p.batch, p.loss_fn, p.optimizer,
                                                                                  task_probe=p.task_probe, overfit_steps=60)),
    "tensor_trace": ("batch_time_swap", lambda p: firstdiv.tensor_trace(p.model, p.inputs, contracts=p.contracts)),
    "shape_ledger": ("wrong_flatten", lambda p: firstdiv.shape_ledger(p.model, p.inputs)),
    "feature_space": ("dead_features", lambda p: firstdiv.feature_space(p.features, axis=-1)),
    "attention_check": ("leaky_causal_mask", _attention),
    "stage_trace": ("chw_view", lambda p: firstdiv.stage_trace(p.sample, p.stages, probes=p.stage_probes,
                                                                contracts=p.stage_contracts)),
    "loader_timing": ("sleeping_getitem", lambda p: firstdiv.loader_timing(p.loader_case[0], step=p.loader_case[1],
                                                                            **p.loader_case[2])),
    "performance_ledger": ("appended_loss", _performance),
    "compile_ledger": ("recompiling_shapes", lambda p: firstdiv.compile_ledger(*p.compile_case[:2], **p.compile_case[2])),
    "compare_outputs": ("int8_divergence", lambda p: firstdiv.compare_outputs(*p.variants_case[:2], **p.variants_case[2])),
}
#: the instruments whose reports carry measured times, rates or process memory
TIMED = {"loader_timing", "performance_ledger", "compile_ledger", "memory_phases"}

_NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"
_RESIDUAL = re.compile(r"(?:(?<=error )|(?<=deviation ))\d(?:\.\d+)?e-(?:0[5-9]|[1-9]\d)\b")
_MEASURED = re.compile(rf"{_NUMBER}(?= ?(?:ns|us|ms|s|examples/s|MiB|GiB)\b)|{_NUMBER}(?=%)")
_NOISE_NOTE = re.compile(r"; spread \(IQR\) is \d+% of the median: rerun with more repeats \(repeats=\d+\) or on a quieter "
                         r"machine before comparing")
_FRAME_LINE = re.compile(r"(?<=test_golden_instruments\.py:)\d+")
_RSS_SOURCE = re.compile(r"\((?:psutil|/proc/self/statm)\)")
_RSS_UNIT = re.compile(r"<n> [MG]iB\b")  # a process that grew past 1 GiB in a long suite prints GiB


def scrub(text: str, timed: bool = False) -> str:
    """What moves between runs or machines, and nothing else. It is applied to every string of a report before
    the report is rendered, so the table wraps the same placeholder text everywhere.

    Every report: a floating-point round-off residual, a number in e-notation below 1e-4 right after "error" or
    "deviation" (``max relative error 9.58e-07``, ``max deviation 1.53e-07``), becomes ``<eps>``: its last digits
    follow the kernels' summation order (MKL and ATen builds for AVX2, AVX-512 or SSE, thread count). The
    tolerance it is compared with, and every other number, is kept.

    A timed instrument's report (``timed``) also loses what it measures:

    - every number followed by a time unit (ns, us, ms, s), a rate (examples/s), a process memory size (MiB,
      GiB) or ``%`` becomes ``<n>`` (the fixed thresholds written that way too, e.g. ``max(0.5 ms, ...)``);
    - performance_ledger's note that a timing was noisy ("; spread (IQR) is N% of the median: rerun ...") is
      dropped: whether it appears is itself a measurement;
    - the line number of this file in the user frame memory_phases names (``at test_golden_instruments.py:NN``)
      becomes ``<line>``, so editing this file does not change the golden file;
    - where the process RSS was read, ``(psutil)`` or ``(/proc/self/statm)``, becomes ``(<rss source>)``: psutil
      is importable once a test has imported ray (ray puts its bundled psutil on sys.path); its unit (MiB or GiB,
      as the process grew in a long suite) becomes ``<size>``.

    Tensor byte counts (B, KiB), counts of steps, batches, ops, graphs and recompilations are kept: they are exact.
    """
    text = _RESIDUAL.sub("<eps>", text)
    if timed:
        text = _MEASURED.sub("<n>", _FRAME_LINE.sub("<line>", _NOISE_NOTE.sub("", text)))
        text = _RSS_UNIT.sub("<n> <size>", _RSS_SOURCE.sub("(<rss source>)", text))
    return text


def _scrubbed(value, timed: bool):
    if isinstance(value, str):
        return scrub(value, timed)
    if isinstance(value, dict):
        return {k: _scrubbed(v, timed) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrubbed(v, timed) for v in value]
    return value


def rendered(report: Report, timed: bool = False) -> str:
    """What ``print(report)`` shows, of the report with :func:`scrub` applied to its text."""
    return str(Report.from_dict(_scrubbed(report.to_dict(), timed))) + "\n"


@pytest.mark.parametrize("instrument", list(ZOO))
def test_fail_report_on_its_zoo_fault(golden, instrument):
    fault, call = ZOO[instrument]
    assert any(e.instrument == instrument for e in zoo.FAULTS[fault].expected)
    report = call(zoo.build(zoo.FAULTS[fault].reference, fault=fault, seed=0))
    assert report.status is Status.FAIL, str(report)
    golden(f"fail_{instrument}.txt", rendered(report, timed=instrument in TIMED))


def test_evidence_packet_of_a_stale_optimizer(golden):
    """evidence_packet records, it never fails: the packet of the stale_optimizer program names the 2 stale tensors."""
    program = zoo.build("finetune", fault="stale_optimizer", seed=0)
    report = firstdiv.evidence_packet(**program.evidence())
    assert report.status is Status.PASS
    golden("evidence_packet_stale_optimizer.txt", rendered(report))


def test_memory_phases_fail_on_adam_state_over_a_cap(golden):
    """A memory cap the first Adam step cannot fit under: its two state tensors per parameter."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 256, generator=gen), torch.randint(0, 4, (4,), generator=gen)
    with firstdiv.memory_phases(model, optimizer, cap_bytes=400 * 1024, suppress=True) as mp:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    assert mp.report.status is Status.FAIL
    golden("fail_memory_phases.txt", rendered(mp.report, timed=True))


class _Classifier(nn.Module):
    """Three classes; class 2 means "I don't know"."""

    def __init__(self, bias=(0.0, 0.0, 0.0)):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        with torch.no_grad():
            self.fc.weight.copy_(torch.eye(3) * 4)
            self.fc.bias.copy_(torch.tensor(bias))

    def forward(self, x):
        return self.fc(x)


def test_diagnostic_set_fail_on_a_changed_bias(golden, tmp_path):
    examples = [
        {"name": "cat", "category": "ordinary", "inputs": torch.tensor([[1.0, 0.0, 0.0]]), "note": "clearly class 0"},
        {"name": "tie", "category": "boundary", "inputs": torch.tensor([[0.5, 0.45, 0.0]]), "note": "close to the 0/1 edge"},
        {"name": "unsure", "category": "abstention", "inputs": torch.tensor([[0.0, 0.0, 1.0]]), "abstain_class": 2,
         "note": "must answer 'don't know'"},
    ]
    stored = firstdiv.DiagnosticSet.create(tmp_path / "diag", examples, _Classifier().eval())
    report = stored.check(_Classifier(bias=(0.0, 0.3, -4.5)).eval())  # tips the boundary case; ruins abstention
    assert report.status is Status.FAIL
    golden("fail_diagnostic_set.txt", rendered(report))


@pytest.fixture(scope="module")
def worksheet():
    program = zoo.build("finetune", fault="stale_optimizer", seed=0)
    return firstdiv.diagnose(symptom="the new head never moves", expected="head.weight changes every step",
                             **program.evidence())


def _seconds_masked(text: str) -> str:
    """diagnose's OBSERVATIONS table: the seconds each instrument took (``0.01s``) become ``#.##s``."""
    return re.sub(r"(?<=\s|\|)\d\.\d\ds(?=\s)", "#.##s", text)


def test_worksheet_text(golden, worksheet):
    assert worksheet.status is Status.FAIL
    golden("worksheet.txt", _seconds_masked(str(worksheet)) + "\n")


def test_worksheet_markdown(golden, worksheet):
    golden("worksheet.md", _seconds_masked(worksheet.to_markdown()))


def test_scrub_masks_only_measurements():
    assert scrub("max relative error 9.58e-07 (rtol 0.0001); max deviation 1.5e-07, tolerance 1e-05; max abs error 0.328") == (
        "max relative error <eps> (rtol 0.0001); max deviation <eps>, tolerance 1e-05; max abs error 0.328")
    assert scrub("median 81.8832 ms per batch (20.395 ms per example) over 3 batches; 95% waiting, 8 steady batches",
                 timed=True) == (
        "median <n> ms per batch (<n> ms per example) over 3 batches; <n>% waiting, 8 steady batches")
    assert scrub("producer 48.889 examples/s; first compiled call 1.18 s; RSS 321.65 MiB; +4 B/iteration, 517.02 KiB",
                 timed=True) == (
        "producer <n> examples/s; first compiled call <n> s; RSS <n> <size>; +4 B/iteration, 517.02 KiB")
    assert scrub("median 0.274 ms (IQR 0.010 ms); spread (IQR) is 56% of the median: rerun with more repeats (repeats=20) "
                 "or on a quieter machine before comparing", timed=True) == "median <n> ms (IQR <n> ms)"
    assert scrub("(at test_golden_instruments.py:118 in test_x)", timed=True) == "(at test_golden_instruments.py:<line> in test_x)"
    assert _seconds_masked("| 3 | four_structures | ownership | FAIL | 0.01s | x |") == (
        "| 3 | four_structures | ownership | FAIL | #.##s | x |")
