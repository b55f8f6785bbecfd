"""diagnose: the escalation ladder over the zoo, the one-bug rule, the pre-filled incident worksheet, leaving no
trace, and the `firstdiv diagnose` command."""

from __future__ import annotations

import json
import textwrap

import pytest
from click.testing import CliRunner
from harness import failing, watched

from firstdiv import zoo
from firstdiv.cli.diagnose import diagnose_command
from firstdiv.diagnosis import ORDER, Worksheet, diagnose
from firstdiv.diagnosis._playbook import play_for
from firstdiv.diagnosis.worksheet import CONTRACTS, FIELDS, contract_of
from firstdiv.errors import InvalidArgument
from firstdiv.instruments._core.state import Snapshot
from firstdiv.render import to_text
from firstdiv.report import Report, Status

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread, no spin-waiting




def _evidence(program, *extra):
    """The program's DESIGN evidence plus the extra keys named (zoo field -> diagnose key)."""
    ev = program.evidence() if program.model is not None else {}
    for key in extra:
        if key == "attention":
            ev["attention"] = program.attention
        elif key == "stages":
            ev.update(sample=program.sample, stages=program.stages, stage_probes=program.stage_probes,
                      stage_contracts=program.stage_contracts)
        elif key == "step":
            ev["step"] = program.loader_case[1]
        elif key == "compile":
            ev.update(compile_inputs=program.compile_case[1], compile_options=program.compile_case[2])
        elif key == "variants":
            variants, inputs, options = program.variants_case
            ev.update(variants=variants, variant_inputs=inputs, variant_options=options)
    return ev


def _diagnosed(program, *extra, **options):
    """diagnose on the program, asserting it left the user's objects (and the global state) as they were."""
    before = Snapshot.take(*watched(program))
    ws = diagnose(symptom="loss does not fall", expected="loss falls below 0.1 in 50 steps", **_evidence(program, *extra),
                  **options)
    assert before.diff(Snapshot.take(*watched(program))) == []
    return ws


def _instruments(ws):
    return [o["instrument"] for o in ws.details["observations"]]


# ---- healthy evidence ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("reference", "extra", "expected"), [
    ("mlp", (), {"four_structures", "reachability", "step_probe", "learning_ledger", "six_claims", "shape_ledger",
                 "tensor_trace", "performance_ledger"}),
    ("cnn", (), {"loader_timing", "shape_ledger", "step_probe"}),
    ("transformer", ("attention",), {"attention_check", "learning_ledger", "tensor_trace"}),
])
def test_clean_reference_gets_a_clean_bill(reference, extra, expected):
    ws = _diagnosed(zoo.build(reference, seed=0), *extra)
    assert isinstance(ws, Worksheet) and ws.instrument == "diagnose"
    assert ws.status is Status.PASS and ws.ok and ws.first_divergence is None, str(ws)
    d = ws.details
    assert set(d["checked"]) >= expected | {"evidence_packet", "tensor_facts"}
    assert [o["status"] for o in d["observations"]] == ["PASS"] * len(d["observations"])
    assert _instruments(ws) == [name for name in ORDER if name in _instruments(ws)]  # the ladder's order
    not_checked = {n["instrument"]: n["needs"] for n in d["not_checked"]}
    assert not_checked["stage_trace"] == "sample, stages" and not_checked["compile_ledger"] == "compile_inputs"
    assert "multi-seed comparison" in not_checked and not d["not_reached"]
    assert [f.where for f in ws.findings] == _instruments(ws)  # one finding per instrument run, in order
    text = str(ws)
    assert "CLEAN BILL" in text and "NOT checked: stage_trace (needs sample, stages)" in text
    assert "not a clean bill of health for what was not probed" in text


def test_the_package_name_calls_diagnose_even_after_the_module_was_imported():
    import firstdiv

    ws = firstdiv.diagnose(model=zoo.build("mlp", seed=0).model)  # this file imported firstdiv.diagnosis first
    assert isinstance(ws, Worksheet) and firstdiv.Worksheet is Worksheet


def test_no_evidence_is_skipped_with_what_to_pass():
    ws = diagnose()
    assert ws.status is Status.SKIPPED and "no instrument had its evidence" in ws.reason
    assert ws.details["observations"] == [] and "PYTORCH INCIDENT" in ws.to_markdown()


def test_missing_evidence_is_listed_not_guessed():
    program = zoo.build("mlp", seed=0)
    ws = diagnose(model=program.model)
    assert _instruments(ws) == ["evidence_packet", "four_structures"]
    needs = {n["instrument"]: n["needs"] for n in ws.details["not_checked"]}
    assert needs["step_probe"] == "batch, loss_fn, optimizer or train_step" and needs["shape_ledger"] == "inputs or batch"
    assert needs["evidence_packet"].startswith("evidence it could use")  # it ran and said what was missing
    assert ws.status is Status.WARN  # a clean bill needs the instruments that ran to have checked something


# ---- faults: the first divergence, and nothing after it -------------------------------------------------------------------


FAULTS = [
    # reference, fault, extra evidence, instrument, where (the instrument's own), kind
    ("finetune", "stale_optimizer", (), "four_structures", "head.weight", "optimizer.stale_parameter"),
    ("mlp", "detach", (), "reachability", "fc1.weight", "reachability.detached"),
    ("mlp", "missing_zero_grad", (), "step_probe", "fc1.weight", "step.grad_accumulation"),
    ("mlp", "softmax_before_ce", (), "learning_ledger", "OBJECTIVE", "objective.probabilities_as_logits"),
    # the scrambled merge moves later positions' values into earlier ones: the learning chain sees the future leak
    ("transformer", "merge_heads_view", ("attention",), "learning_ledger", "DEPENDENCY", "dependency.future_visible"),
    ("pipeline", "chw_view", ("stages",), "stage_trace", "to_chw", "stage.structure"),
    ("cnn", "sleeping_getitem", ("step",), "loader_timing", "read_decode_transform", "loader.starved"),
    ("transformer", "empty_mask", (), "tensor_facts", "loss", "facts.nonfinite_loss"),
    ("cnn", "wrong_flatten", (), "shape_ledger", "head", "shape.flatten_mismatch"),
    ("mlp", "appended_loss", (), "performance_ledger", "step", "memory.growth"),
    ("transformer", "recompiling_shapes", ("compile",), "compile_ledger", "STABLE", "compile.recompiles"),
    ("regression", "int8_divergence", ("variants",), "compare_outputs", "int8:fc1", "outputs.diverged"),
]


@pytest.mark.parametrize(("reference", "fault", "extra", "instrument", "where", "kind"), FAULTS, ids=[f[1] for f in FAULTS])
def test_fault_stops_at_its_first_divergence(reference, fault, extra, instrument, where, kind):
    ws = _diagnosed(zoo.build(reference, fault=fault, seed=0), *extra)
    assert ws.status is Status.FAIL and not ws.ok
    assert (ws.first_divergence.where, ws.first_divergence.kind) == (f"{instrument}:{where}", kind), str(ws)
    d = ws.details
    assert _instruments(ws)[-1] == instrument  # the one-bug rule: nothing after the first FAIL ran
    assert [o["status"] for o in d["observations"][:-1]].count("FAIL") == 0
    later = [name for name in ORDER[ORDER.index(instrument) + 1:] if name not in {n["instrument"] for n in d["not_checked"]}]
    assert d["not_reached"] == later and set(d["reports"]) == set(_instruments(ws))
    div = d["first_divergence"]
    assert (div["instrument"], div["instrument_where"], div["where"]) == (instrument, where, ws.first_divergence.where)
    assert d["first_contract"] == contract_of(instrument, kind) in CONTRACTS
    assert 2 <= len(d["hypotheses"]) <= 3 and d["playbook_key"] is not None and kind.startswith(d["playbook_key"])
    assert d["distinguishing_experiment"] and d["must_change"] and d["must_not_change"]
    for name in ("intervention", "verification", "regression_test"):
        assert d[name].startswith("[fill in"), name
    assert d["symptom"] == "loss does not fall" and d["reproduction"]["given"]
    if reference != "pipeline":
        assert {"model", "optimizer", "batch"} <= set(d["reproduction"])


def test_stale_optimizer_worksheet_reads_like_the_book():
    ws = _diagnosed(zoo.build("finetune", fault="stale_optimizer", seed=0))
    d = ws.details
    assert _instruments(ws) == ["evidence_packet", "tensor_facts", "four_structures"]
    assert d["first_contract"] == "ownership"
    assert d["reproduction"]["model"].startswith("FineTuneClassifier") and d["reproduction"]["optimizer"].startswith("Adam")
    assert d["reproduction"]["batch"] == "inputs [64, 16] float32 on cpu; targets [64] int64 on cpu"
    assert any("replaced after the optimizer was built" in h for h in d["hypotheses"])
    assert any(".to()" in h for h in d["hypotheses"]) and any("different model instance" in h for h in d["hypotheses"])
    assert d["must_change"] == ["head.weight moves after one optimizer step",
                                "the optimizer owns head.weight (its id is in a param group)"]
    assert any("backbone" in m for m in d["must_not_change"]) and any("loss value" in m for m in d["must_not_change"])
    assert "firstdiv.four_structures(model, optimizer, batch, loss_fn).ok" in d["regression_test"]
    text = to_text(ws, width=120)
    text = text[text.index("PYTORCH INCIDENT"):]  # the header above it summarizes the divergence
    positions = [text.index(name) for name, _ in FIELDS]
    assert positions == sorted(positions)  # every field, in the book's order


def test_missing_gradient_experiment_is_none_versus_zero():
    ws = _diagnosed(zoo.build("mlp", fault="detach", seed=0))
    assert "None" in ws.details["distinguishing_experiment"] and "zero tensor" in ws.details["distinguishing_experiment"]
    assert ws.details["first_contract"] == "graph" and _instruments(ws)[-2:] == ["four_structures", "reachability"]


def test_all_runs_everything_and_still_reports_the_first():
    program = zoo.build("mlp", fault="symmetric_init", seed=0)
    first = _diagnosed(program)
    every = _diagnosed(program, stop_at_first=False)
    assert first.first_divergence == every.first_divergence
    # the capability plateau of identical hidden units is no FAIL of its own (a learnable output offset and scale do
    # not lift it: nothing the model lacks at its output), so the ladder reaches the claim that names the cause
    assert first.first_divergence.where == "six_claims:COMPUTATION"
    assert "performance_ledger" not in _instruments(first) and "performance_ledger" in first.details["not_reached"]
    statuses = {o["instrument"]: o["status"] for o in every.details["observations"]}
    assert statuses["learning_ledger"] == "WARN" and statuses["six_claims"] == "FAIL"
    assert statuses["performance_ledger"] == "PASS"
    assert every.details["not_reached"] == [] and len(every.findings) > len(first.findings)


def test_user_code_raising_half_way_leaves_no_trace():
    program = zoo.build("mlp", seed=0)
    with failing(program, calls=6) as broken:
        before = Snapshot.take(*watched(broken))
        ws = diagnose(**broken.evidence())
        assert before.diff(Snapshot.take(*watched(broken))) == []
    skipped = [o for o in ws.details["observations"] if o["status"] == "SKIPPED"]
    assert skipped and any("injected failure" in o["summary"] for o in skipped)
    assert ws.status in (Status.WARN, Status.FAIL)  # never a clean bill when instruments could not run


# ---- the worksheet as a report --------------------------------------------------------------------------------------------


def test_worksheet_round_trips_and_is_json_safe():
    ws = _diagnosed(zoo.build("finetune", fault="stale_optimizer", seed=0))
    back = Report.from_dict(json.loads(ws.to_json()))
    assert isinstance(back, Worksheet) and back == ws
    assert back.field("MUST CHANGE") == ws.details["must_change"]
    assert back.report_of("four_structures").first_divergence.kind == "optimizer.stale_parameter"
    assert back.report_of("six_claims") is None


def test_user_strings_render_as_text_and_markdown_escapes_table_cells():
    program = zoo.build("mlp", fault="missing_zero_grad", seed=0)
    ws = diagnose(symptom="[bold red]loss[/bold red] | grows", expected="a | b", **program.evidence())
    assert "[bold red]loss[/bold red] | grows" in to_text(ws, width=140)
    md = ws.to_markdown()
    assert md.startswith("## PYTORCH INCIDENT (FAIL)") and "### MUST NOT CHANGE" in md
    assert "| 5 | step_probe | learning chain | FAIL |" in md
    assert all(line.count("|") - line.count("\\|") == 7 for line in md.splitlines() if line.startswith("| "))


def test_every_catalog_kind_has_its_own_playbook_entry():
    kinds = {e.kind for fault in zoo.FAULTS.values() for e in fault.expected if e.kind}
    kinds |= {"step.nonfinite_loss", "step.nonfinite_gradient", "step.no_optimizer_step", "gradient.missing",
              "update.not_moved", "memory.oom", "compile.eager_raised", "outputs.raised", "contract.not_reached",
              "shape.forward_raised", "attention.causality", "facts.nonfinite_loss", "task.label_out_of_range"}
    generic = sorted(k for k in kinds if play_for(k, "x")["playbook_key"] is None)
    assert generic == []
    assert play_for("no.such.kind", "p")["playbook_key"] is None  # still two hypotheses and an experiment
    assert len(play_for("no.such.kind", "p")["hypotheses"]) == 2


def test_contracts_follow_the_kind_before_the_instrument():
    assert contract_of("step_probe", "step.no_gradient") == "graph"
    assert contract_of("step_probe", "step.not_updated") == "ownership"
    assert contract_of("learning_ledger", "optimizer.stale_parameter") == "ownership"
    assert contract_of("learning_ledger", "task.label_mismatch") == "learning chain"
    assert contract_of("compare_outputs", "outputs.diverged") == "run comparison"
    assert contract_of("tensor_trace", "trace.forward_raised") == "geometry"


@pytest.mark.parametrize(("evidence", "message"), [
    ({"modle": 1}, "Expected evidence keys among"),
    ({"model": 3}, "Expected `model` to be a torch.nn.Module"),
    ({"symptom": 3}, "Expected `symptom` to be a string"),
    ({"stop_at_first": "yes"}, "Expected `stop_at_first`"),
    ({"attention": (1, 2, 3)}, "Expected `attention`"),
    ({"task_probe": 5}, "Expected `task_probe`"),
    ({"loader": 5}, "Expected `loader`"),
])
def test_misuse_is_one_clear_error(evidence, message):
    with pytest.raises(InvalidArgument, match=message):
        diagnose(**evidence)


# ---- command line -----------------------------------------------------------------------------------------------------------


CASE = textwrap.dedent("""
    from firstdiv import zoo

    def make_evidence():
        return {**zoo.build("finetune", fault="stale_optimizer", seed=0).evidence(), "symptom": "the head never moves"}

    def healthy():
        return zoo.build("regression", seed=0).evidence()

    def not_a_dict():
        return [1, 2]

    def broken():
        raise RuntimeError("no data today")
""")


@pytest.fixture
def case(tmp_path):
    path = tmp_path / "case.py"
    path.write_text(CASE)
    return str(path)


def _invoke(*args):
    return CliRunner().invoke(diagnose_command, list(args), standalone_mode=False)


def test_cli_prints_the_worksheet_and_returns_the_exit_code(case):
    found = _invoke(f"{case}:make_evidence")
    assert found.exception is None and found.return_value == 1
    assert "PYTORCH INCIDENT" in found.output and "four_structures:head.weight" in found.output
    assert "the head never moves" in found.output
    healthy = _invoke(f"{case}:healthy", "--json", "--symptom", "from the flag")
    assert healthy.return_value == 0
    data = json.loads(healthy.output)["payload"]
    assert data["type"] == "Worksheet" and data["status"] == "PASS" and data["details"]["symptom"] == "from the flag"


def test_cli_all_runs_past_the_first_divergence(case):
    data = json.loads(_invoke(f"{case}:make_evidence", "--json", "--all").output)["payload"]
    assert data["first_divergence"]["where"] == "four_structures:head.weight" and data["details"]["not_reached"] == []
    assert len(data["details"]["observations"]) > 3


@pytest.mark.parametrize(("suffix", "message"), [
    (":not_a_dict", "to return a dict of evidence"),
    (":missing", "has no function 'missing'"),
    (":broken", "raised RuntimeError: no data today"),
    ("", "Expected CASE like path/to/case.py:make_evidence"),
])
def test_cli_bad_case_is_an_input_error(case, suffix, message):
    result = _invoke(case + suffix)
    assert isinstance(result.exception, InvalidArgument) and message in str(result.exception)


def test_cli_missing_file_is_an_input_error(tmp_path):
    result = _invoke(f"{tmp_path / 'nope.py'}:make_evidence")
    assert isinstance(result.exception, InvalidArgument) and "does not exist" in str(result.exception)


def test_command_line_exit_codes(case, cli):
    found = cli("diagnose", f"{case}:make_evidence")
    assert found.returncode == 1, found.stderr
    assert "PYTORCH INCIDENT" in found.stdout and "four_structures:head.weight" in found.stdout
    healthy = cli("diagnose", f"{case}:healthy", "--json")
    assert healthy.returncode == 0, healthy.stderr
    assert json.loads(healthy.stdout)["payload"]["status"] == "PASS"
    bad = cli("diagnose", f"{case}:not_a_dict")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("firstdiv: error: Expected")
