"""Restoring without trace: the user's ``.grad`` objects, version counters (a pending ``backward()``), LR
schedulers and GradScalers their ``train_step`` steps, and Python's global RNG on every public call."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import pytest
import torch
from harness import CALLS, assert_no_trace, watched
from torch import nn

import firstdiv
from firstdiv import zoo
from firstdiv.instruments._core.batch import compute_loss
from firstdiv.instruments._core.state import guarded


def _program_for(instrument: str):
    """The first clean reference program carrying the instrument's evidence."""
    for ref in zoo.REFERENCES:
        program = zoo.build(ref, seed=0)
        if CALLS[instrument].applies(program):
            return program
    raise AssertionError(f"no reference program for {instrument}")


#: instruments whose program has a model with parameters (a data-pipeline program has none)
ON_MODELS = [name for name in sorted(CALLS) if getattr(_program_for(name), "model", None) is not None]


# ---- .grad objects stay the user's objects; unchanged tensors are not written (version counters) -------------


@pytest.mark.parametrize("instrument", ON_MODELS)
def test_grad_tensors_stay_the_same_objects(instrument):
    program = _program_for(instrument)
    gen = torch.Generator().manual_seed(0)
    for p in program.model.parameters():  # gradients a user's accumulation buffer or DDP bucket view also holds
        p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype)
    held = {name: p.grad for name, p in program.model.named_parameters()}
    assert_no_trace(lambda: CALLS[instrument](program), watched(program))
    assert all(p.grad is held[name] for name, p in program.model.named_parameters())


@pytest.mark.parametrize("instrument", ON_MODELS)
def test_pending_backward_runs_after_an_instrument(instrument):
    program = _program_for(instrument)
    twin = copy.deepcopy(program.model)
    torch.manual_seed(0)  # the same dropout masks in both forwards
    _, pending = compute_loss(program.model, program.batch, program.loss_fn)
    CALLS[instrument](program)
    pending.backward()  # raised "modified by an inplace operation" when restoring wrote unchanged tensors
    torch.manual_seed(0)
    compute_loss(twin, program.batch, program.loss_fn)[1].backward()
    for (name, p), q in zip(program.model.named_parameters(), twin.parameters()):
        assert (p.grad is None) == (q.grad is None) and (p.grad is None or torch.equal(p.grad, q.grad)), name


def test_restore_writes_only_what_changed():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    model(torch.randn(5, 3)).sum().backward()
    first, frozen = model[0].weight, model[2].weight
    grad, versions = first.grad, (first._version, frozen._version, model[1].num_batches_tracked._version)
    with guarded(model):
        with torch.no_grad():
            first.add_(1.0)
        first.grad = torch.zeros_like(first)
        model(torch.randn(5, 3))  # batch norm updates its running statistics in place
    assert first.grad is grad and torch.equal(first.grad, grad)
    assert (first._version, frozen._version, model[1].num_batches_tracked._version) == versions

# ---- no public call moves Python's global RNG (each in a fresh interpreter: rich draws at first import) ----

_TRAIN = """
import firstdiv
@firstdiv.workload(defaults={"shift": 0.0, "other": 0.0, "epochs": 3})
def train(seed, config, rec):
    for epoch in range(config["epochs"]):
        rec.log(val_loss=1.0 / (epoch + 1) + 0.01 * ((seed * 7919) % 13) + config["shift"] + config["other"])
"""
_WORKLOAD = """
base = firstdiv.sweep("wl.py:train", "0-5", store=store, name="base")
cand = firstdiv.sweep("wl.py:train", "0-5", config={"shift": 0.5}, store=store, name="cand")
"""
_DATASET = """
import torch
class Data(torch.utils.data.Dataset):
    def __len__(self): return 8
    def __getitem__(self, i): return torch.tensor([float(i)])
"""
PUBLIC_CALLS = {
    "route": "str(firstdiv.route('loss becomes nan after a few steps'))",
    "diagnose": "import torch\nstr(firstdiv.diagnose(symptom='loss is flat', model=torch.nn.Linear(3, 1),"
                " batch=(torch.ones(4, 3), torch.ones(4, 1)), loss_fn=torch.nn.functional.mse_loss))",
    "Worksheet": "import torch\nw = firstdiv.diagnose(model=torch.nn.Linear(3, 1))\n"
                 "assert isinstance(w, firstdiv.Worksheet)\nstr(w); w._repr_html_()",
    "Gate": _WORKLOAD + "gate = firstdiv.Gate.calibrate(base, alpha=0.2)\nstr(gate.check(cand))",
    "curves": _WORKLOAD + "str(firstdiv.curves(base, cand))",
    "factorial": _WORKLOAD + "str(firstdiv.factorial('wl.py:train', 'shift=0.5', 'other=0.5', '0-2', store=store))",
    "rng_audit": _DATASET + "str(firstdiv.rng_audit(Data(), num_workers=(0,), items=4))",
    "incident_*": "import torch\nw = firstdiv.diagnose(model=torch.nn.Linear(3, 1))\n"
                  "i = firstdiv.incident_new(store, worksheet=w, symptom='val loss jumped')\n"
                  "str(i); firstdiv.incident_list(store); str(firstdiv.incident_show(i.id, store))\n"
                  "str(firstdiv.incident_close(i.id, cause='c', repair='r', verification='v',"
                  " regression_test='tests/test_x.py', store=store))",
}


@pytest.mark.parametrize("name", sorted(PUBLIC_CALLS))
def test_public_call_leaves_python_random_state(name, tmp_path):
    (tmp_path / "wl.py").write_text(_TRAIN)
    script = "\n".join([
        "import random",
        "random.seed(1234)",
        "before = random.getstate()",
        "import firstdiv",
        f"store = {str(tmp_path / 'runs.db')!r}",
        textwrap.dedent(PUBLIC_CALLS[name]),
        "assert random.getstate() == before, 'Python random state moved'",
        "print('same')",
    ])
    out = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == 0 and "same" in out.stdout, out.stderr[-2000:]


def test_rich_is_imported_only_through_the_module_that_keeps_the_random_state():
    import re
    from pathlib import Path

    root = Path(firstdiv.__file__).parent
    direct = [f"{path.relative_to(root)}:{n}" for path in sorted(root.rglob("*.py")) if path.name != "_rich.py"
              for n, line in enumerate(path.read_text().splitlines(), 1)
              if re.match(r"\s*(from rich[. ]|import rich\b)", line)]
    assert direct == [], f"import rich names from firstdiv._rich instead: {direct}"


# ---- LR schedulers and GradScalers the user's train_step steps are given back -----------------------------------


class _Trainer:
    """A user's trainer: the step is a bound method; scaler and scheduler are its attributes."""

    def __init__(self, model, opt, sched, scaler, batch):
        self.model, self.opt, self.sched, self.scaler, self.batch = model, opt, sched, scaler, batch

    def step(self):
        self.opt.zero_grad()
        loss = nn.functional.cross_entropy(self.model(self.batch[0]), self.batch[1])
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        self.sched.step()
        return loss.detach()


_GLOBAL_STEP = """
def train_step():
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()
    return loss.detach()
"""


def _amp_program(where: str):
    """Model, optimizer, StepLR, a CPU GradScaler that doubles its scale every step, and a train_step holding
    them in its closure, in the globals it names, or as attributes of the object whose method it is."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    trainer = _Trainer(model, opt, sched, scaler, (x, y))
    if where == "method":
        step = trainer.step
    elif where == "globals":
        space = {"F": nn.functional, "model": model, "opt": opt, "sched": sched, "scaler": scaler, "x": x, "y": y}
        exec(_GLOBAL_STEP, space)  # noqa: S102 - a train_step defined at module level of the user's script
        step = space["train_step"]
    else:
        def inner():
            return trainer.step()

        def step():  # the objects sit two closures deep
            return inner()
    return model, opt, sched, scaler, (x, y), step


_RUNNERS = {
    "step_probe": lambda m, o, b, s: firstdiv.step_probe(m, b, nn.functional.cross_entropy, o, train_step=s),
    "performance_ledger": lambda m, o, b, s: firstdiv.performance_ledger(s, None, model=m, optimizer=o, repeats=3),
    "loader_timing": lambda m, o, b, s: firstdiv.loader_timing(
        torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*b), batch_size=4), step=lambda _batch: s(),
        batches=2, warmup=1),
    "diagnose": lambda m, o, b, s: firstdiv.diagnose(model=m, optimizer=o, batch=b, loss_fn=nn.functional.cross_entropy,
                                                     train_step=s, stop_at_first=False),
}


@pytest.mark.parametrize("where", ["closure", "globals", "method"])
@pytest.mark.parametrize("runner", sorted(_RUNNERS))
def test_train_step_scheduler_and_scaler_are_given_back(runner, where):
    model, opt, sched, scaler, batch, step = _amp_program(where)
    report = assert_no_trace(lambda: _RUNNERS[runner](model, opt, batch, step), [model, opt, sched, scaler])
    assert isinstance(report, firstdiv.Report), report
    assert "GradScalers" in report.side_effects  # says what it restored beyond the model and optimizer
    assert (scaler.get_scale(), scaler._scale, sched.last_epoch, sched.get_last_lr(), opt.param_groups[0]["lr"]) == (
        1024.0, None, 0, [0.1], 0.1)
    step()  # the user's next step starts from their own state: the scale doubles from 1024 once
    assert (scaler.get_scale(), sched.last_epoch, opt.param_groups[0]["lr"]) == (2048.0, 1, 0.05)


def test_scheduler_and_scaler_passed_directly_are_guarded():
    _, opt, sched, scaler, _, step = _amp_program("closure")
    step()
    before = (scaler.get_scale(), scaler._scale, sched.state_dict(), opt.param_groups[0]["lr"])
    with guarded(sched, scaler):
        step(), step()
    assert (scaler.get_scale(), scaler._scale, sched.state_dict(), opt.param_groups[0]["lr"]) == before
    assert before[1] is not None  # the same scale tensor object, its value copied back


def test_a_scheduler_whose_state_cannot_be_saved_does_not_stop_the_guard():
    class Unsaveable(torch.optim.lr_scheduler.StepLR):
        def state_dict(self):
            raise RuntimeError("custom scheduler without a state_dict")

    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = Unsaveable(opt, step_size=1)
    with guarded(model, opt, sched):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == 0.1  # the optimizer's own snapshot still gives its lr back
