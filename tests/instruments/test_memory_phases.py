"""memory_phases: the phase in which memory runs out, on CPU through the injected allocation failure (cap_bytes),
and on CUDA through the real allocator (skipped without a GPU)."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import InvalidArgument, Report, Status
from firstdiv.instruments._core.state import Snapshot
from firstdiv.instruments.memory_phases import ADVICE, memory_phases
from firstdiv.render import to_text

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread, no spin-waiting

KiB = 1024




def program(opt="adam", width=256, device="cpu"):
    """fc1 (width x width, 256 KiB at 256) -> ReLU -> fc2 (width -> 4); weights made outside the measured block."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 4)).to(device)
    optimizer = (torch.optim.Adam(model.parameters(), lr=1e-3) if opt == "adam"
                 else torch.optim.SGD(model.parameters(), lr=0.1))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, width, generator=g).to(device), torch.randint(0, 4, (4,), generator=g).to(device)
    return model, optimizer, x, y


def train(model, optimizer, x, y, steps=1, keep=None):
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if keep is not None:
            keep.append(loss)  # the retained-graph bug: the tensor, not loss.item()


def hooks(model, optimizer):
    from torch.nn.modules import module as m
    from torch.optim import optimizer as o

    return (len(model._forward_pre_hooks), len(model._forward_hooks), len(optimizer._optimizer_step_pre_hooks),
            len(optimizer._optimizer_step_post_hooks), len(m._global_forward_hooks), len(o._global_optimizer_pre_hooks),
            len(o._global_optimizer_post_hooks), torch._C._len_torch_dispatch_stack(), torch._C._len_torch_function_stack())


def assert_oom(mp, phase):
    r = mp.report
    assert r.status is Status.FAIL and not r.ok
    assert (r.first_divergence.where, r.first_divergence.kind) == (phase, "memory.oom")
    assert r.details["oom"]["phase"] == phase
    assert r.details["advice"]["cause"] == ADVICE[phase][0]
    assert ADVICE[phase][1] in r.first_divergence.hint and "retained" in r.first_divergence.hint
    assert r.details["advice"]["measure_first"] == ADVICE[phase][2]
    assert "cap_bytes" in r.first_divergence.observed
    assert r.details["oom"]["live_bytes"] > r.details["cap_bytes"] >= r.details["oom"]["live_bytes"] - r.details["oom"]["requested_bytes"]
    assert str(r) and Report.from_dict(json.loads(r.to_json())).first_divergence == r.first_divergence
    return r


# --- phases and the table ---------------------------------------------------------------------------------------


def test_healthy_loop_passes_with_a_table_of_every_phase():
    model, opt, x, y = program()
    empty = hooks(model, opt)
    with memory_phases(model, opt) as mp:
        with mp.phase("loading"):
            extra = torch.zeros(64, 64)
        train(model, opt, x, y, steps=5)
        model.eval()
        with torch.no_grad():
            model(x)
        model.train()
        with mp.phase("export"):
            copies = {k: v.clone() for k, v in model.state_dict().items()}
    assert hooks(model, opt) == empty
    r = mp.report
    assert r.status is Status.PASS and r.ok, str(r)
    table = r.details["phases"]
    assert list(table) == ["loading", "forward", "backward", "first_optimizer_step", "optimizer_step", "evaluation",
                           "export"]
    assert table["loading"]["max_rise"] == extra.numel() * 4
    assert table["forward"]["starts"] == 5 and table["backward"]["starts"] == 5
    assert table["first_optimizer_step"]["starts"] == 1 and table["optimizer_step"]["starts"] == 4
    # Adam's first step allocates exp_avg + exp_avg_sq for every parameter: at least 2x the parameter bytes
    params = sum(p.numel() * 4 for p in model.parameters())
    assert table["first_optimizer_step"]["max_rise"] >= 2 * params
    assert table["export"]["max_rise"] >= sum(v.numel() * 4 for v in copies.values())
    growth = next(f for f in r.findings if f.check == "memory.growth")
    assert growth.status is Status.PASS and set(growth.evidence["increments"]) == {0}
    assert [b["event"] for b in r.details["boundaries"][:3]] == ["enter", "loading start", "loading end"]
    assert all(isinstance(b["rss"], int) and b["rss"] > 0 for b in r.details["boundaries"])
    assert "forward" in to_text(r) and "first_optimizer_step" in to_text(r)


def test_retained_losses_warn_of_growth_across_steps():
    model, opt, x, y = program("sgd")
    kept = []
    with memory_phases(model, opt) as mp:
        train(model, opt, x, y, steps=6, keep=kept)
    r = mp.report
    assert r.status is Status.WARN and r.ok
    growth = next(f for f in r.findings if f.check == "memory.growth")
    assert growth.where == "step" and growth.status is Status.WARN
    assert all(d > 0 for d in growth.evidence["increments"]) and len(growth.evidence["increments"]) == 4
    assert "loss.item()" in growth.message


def test_evaluation_is_a_forward_pass_in_eval_mode_or_without_grad():
    model, opt, x, _ = program()
    with memory_phases(model, opt) as mp:
        with torch.no_grad():
            model(x)  # training flag on, grad off
        model.eval()
        model(x)  # grad on, eval mode
        model.train()
    assert list(mp.report.details["phases"]) == ["evaluation"]
    assert mp.report.details["phases"]["evaluation"]["starts"] == 2


# --- OOM by phase (injected allocation failure) -------------------------------------------------------------------


def test_forward_oom_names_forward_and_reraises():
    model, opt, _, _ = program()
    big = torch.randn(1024, 256)  # the fc1 output alone is 1 MiB
    before = Snapshot.take(model, opt)
    with pytest.raises(torch.OutOfMemoryError, match="cap_bytes=524288"), memory_phases(model, opt, cap_bytes=512 * KiB) as mp:
        model(big)
    r = assert_oom(mp, "forward")
    assert r.details["oom"]["op"].startswith("aten.addmm")
    assert before.diff(Snapshot.take(model, opt)) == []
    assert torch._C._len_torch_dispatch_stack() == 0 and torch._C._len_torch_function_stack() == 0


def test_backward_oom_names_backward():
    model, opt, x, y = program()
    with memory_phases(model, opt, cap_bytes=64 * KiB, suppress=True) as mp:  # forward ~10 KiB, fc1 grad 256 KiB
        train(model, opt, x, y)
    r = assert_oom(mp, "backward")
    assert r.details["phases"]["forward"]["max_rise"] < 64 * KiB


def test_first_optimizer_step_oom_names_the_state_allocation():
    model, opt, x, y = program("adam")
    assert not opt.state
    with memory_phases(model, opt, cap_bytes=400 * KiB, suppress=True) as mp:  # grads ~260 KiB, Adam state 2x that
        train(model, opt, x, y)
    r = assert_oom(mp, "first_optimizer_step")
    assert "optimizer state" in r.details["advice"]["cause"]
    assert "lighter optimizer" in r.first_divergence.hint


def test_later_step_is_not_called_first():
    model, opt, x, y = program("adam")
    train(model, opt, x, y)  # state exists before the block
    with memory_phases(model, opt) as mp:
        train(model, opt, x, y)
    assert "first_optimizer_step" not in mp.report.details["phases"]
    assert mp.report.details["phases"]["optimizer_step"]["starts"] == 1


def test_evaluation_oom_names_evaluation():
    model, opt, _, _ = program()
    big = torch.randn(1024, 256)
    model.eval()
    with memory_phases(model, opt, cap_bytes=512 * KiB, suppress=True) as mp, torch.no_grad():
        model(big)
    assert_oom(mp, "evaluation")
    assert model.training is False


def test_loading_and_export_ooms_name_the_explicit_phase():
    model, opt, _, _ = program()
    with memory_phases(model, opt, cap_bytes=512 * KiB, suppress=True) as mp, mp.phase("loading"):
        nn.Linear(1024, 1024)  # initialization allocates 4 MiB of weights
    assert_oom(mp, "loading")
    with memory_phases(model, opt, cap_bytes=128 * KiB, suppress=True) as mp, mp.phase("export"):
        model(torch.randn(2, 256))  # a forward pass inside export is export
        {k: v.clone() for k, v in model.state_dict().items()}
    r = assert_oom(mp, "export")
    assert "forward" not in r.details["phases"]


def test_oom_caught_by_the_user_is_still_reported():
    model, opt, _, _ = program()
    big, small = torch.randn(1024, 256), torch.randn(2, 256)
    with memory_phases(model, opt, cap_bytes=512 * KiB) as mp:
        try:
            model(big)
        except torch.OutOfMemoryError:
            pass
        model(small)  # retry with a smaller batch
    assert_oom(mp, "forward")


def test_other_exceptions_propagate_and_leave_no_hooks():
    model, opt, x, _ = program()
    empty = hooks(model, opt)
    with pytest.raises(KeyError), memory_phases(model, opt, cap_bytes=10 * 2**20, suppress=True):
        model(x)
        raise KeyError("user bug")
    assert hooks(model, opt) == empty


def test_no_trace_on_the_users_objects():
    model, opt, x, _ = program()
    before = Snapshot.take(model, opt)
    with memory_phases(model, opt) as mp:
        with torch.no_grad():
            model(x)
        with mp.phase("export"):
            model.state_dict()
    assert before.diff(Snapshot.take(model, opt)) == []
    assert mp.report.side_effects.startswith("forward hooks")


def test_without_model_or_optimizer_global_optimizer_hooks_see_the_step():
    model, opt, x, y = program("sgd")
    empty = hooks(model, opt)
    with memory_phases() as mp:
        train(model, opt, x, y, steps=2)
    assert hooks(model, opt) == empty
    assert {"backward", "first_optimizer_step", "optimizer_step"} <= set(mp.report.details["phases"])


def test_decorator_form_and_reentry():
    model, opt, x, y = program("sgd")
    mp = memory_phases(model, opt)

    @mp
    def one_step():
        train(model, opt, x, y)

    one_step()
    first = mp.report
    one_step()
    assert first.details["phases"]["first_optimizer_step"]["starts"] == 1
    assert mp.report.details["phases"]["optimizer_step"]["starts"] == 1
    with mp:
        with pytest.raises(InvalidArgument, match="already active"):
            mp.__enter__()
        with pytest.raises(InvalidArgument, match="has not finished"):
            mp.report  # noqa: B018 - the property raises


@pytest.mark.parametrize("kwargs, message", [
    ({"model": 3}, "Expected `model` to be a torch.nn.Module but got int"),
    ({"optimizer": "adam"}, "Expected `optimizer` to be a torch.optim.Optimizer but got str"),
    ({"cap_bytes": 0}, "Expected `cap_bytes` to be a positive integer number of bytes but got 0"),
    ({"cap_bytes": True}, "positive integer"),
    ({"cap_bytes": 1.5e6}, "positive integer"),
    ({"suppress": "yes"}, "Expected `suppress` to be True or False but got 'yes'"),
])
def test_bad_input_is_a_one_line_error(kwargs, message):
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        memory_phases(**kwargs)
    assert "\n" not in str(info.value)


def test_phase_outside_the_block_is_an_error():
    mp = memory_phases()
    with pytest.raises(InvalidArgument, match="inside the `with memory_phases"), mp.phase("loading"):
        pass


def test_bad_phase_name():
    with memory_phases() as mp, pytest.raises(InvalidArgument, match="non-empty phase name"), mp.phase(""):
        pass


# --- CUDA: the real allocator ----------------------------------------------------------------------------------


class Hungry(nn.Module):
    """A forward pass that asks the CUDA allocator for far more than any device has (2**50 bytes)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        return h + torch.empty(2**48, device=x.device).sum()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: the real allocator's OOM and counters")
def test_cuda_oom_in_forward_names_forward():
    model = Hungry().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(torch.cuda.OutOfMemoryError), memory_phases(model, opt) as mp:
        model(torch.randn(4, 8, device="cuda"))
    r = mp.report
    assert (r.first_divergence.where, r.first_divergence.kind) == ("forward", "memory.oom")
    assert "cuda_allocated" in r.details["oom"] and "cuda_reserved" in r.details["oom"]
    assert "CUDA allocated" in r.details["measure"]
    torch.cuda.empty_cache()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: allocated/reserved/peak per phase")
def test_cuda_boundaries_record_allocator_counters():
    model, opt, x, y = program("adam", device="cuda")
    with memory_phases(model, opt) as mp:
        train(model, opt, x, y, steps=4)
    r = mp.report
    assert r.status is Status.PASS, str(r)
    rows = r.details["boundaries"]
    assert all({"allocated", "reserved", "peak_allocated", "peak_reserved"} <= set(b) for b in rows)
    assert all(b["reserved"] >= b["allocated"] for b in rows)
    params = sum(p.numel() * 4 for p in model.parameters())
    assert r.details["phases"]["first_optimizer_step"]["max_rise"] >= 2 * params
    assert "reset_peak_memory_stats" in r.side_effects


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: the cap counts CUDA storages too")
def test_cuda_cap_names_backward():
    model, opt, x, y = program("adam", device="cuda")
    with memory_phases(model, opt, cap_bytes=64 * KiB, suppress=True) as mp:
        train(model, opt, x, y)
    assert mp.report.first_divergence.where == "backward"
