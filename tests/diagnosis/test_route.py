"""`firstdiv.route`: symptom -> contract, instrument, evidence packet, experiment, stop rule, exact call.

Three sources of phrasings: every phrasing the routing table itself holds (the appendix's and chapter 31's
symptoms, each must route to its own route), section 15's examples with what the appendix says they route to,
and phrasings written the way users type them, which must route to the right instrument and contract.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

import firstdiv
from firstdiv import InvalidArgument, Report, Status
from firstdiv.cli.diagnose import route_command
from firstdiv.diagnosis._routing_table import CONTRACTS, INSTRUMENTS, PACKETS, ROUTES
from firstdiv.diagnosis.route import EXAMPLES, Route, route, routes
from firstdiv.render import to_text

WORKSHEET_CONTRACTS = ("tensor", "graph", "ownership", "input representation", "geometry", "attention", "learning chain",
                       "performance", "compiler", "run comparison")
PUBLIC_INSTRUMENTS = ("step_probe", "reachability", "four_structures", "six_claims", "learning_ledger", "evidence_packet",
                      "tensor_trace", "shape_ledger", "feature_space", "attention_check", "stage_trace", "loader_timing",
                      "performance_ledger", "memory_phases", "compile_ledger", "compare_outputs", "DiagnosticSet",
                      "sweep", "compare", "bisect", "factorial", "Gate", "determinism", "rng_audit")

#: (what a user types, the instrument to run first, the contract to check first)
USER_PHRASINGS = [
    ("loss.backward() does not update my parameters", "step_probe", "learning chain"),
    ("optimizer.step() does nothing, weights are identical before and after", "step_probe", "learning chain"),
    ("the update isn't -lr * grad with plain SGD", "step_probe", "learning chain"),
    ("weights don't change after optimizer.step()", "step_probe", "learning chain"),
    ("I forgot optimizer.zero_grad()", "step_probe", "learning chain"),
    ("gradients keep growing every step", "step_probe", "learning chain"),
    ("reshape scrambles my data", "tensor_trace", "tensor"),
    ("same shape but the values are in the wrong order after transpose", "tensor_trace", "tensor"),
    ("RuntimeError: expected scalar type Float but found Long", "tensor_trace", "tensor"),
    ("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu", "tensor_trace", "tensor"),
    ("batch and time axes got swapped", "tensor_trace", "tensor"),
    ("I kept adding reshapes until the error went away", "tensor_trace", "tensor"),
    ("my layer gets no gradient", "reachability", "graph"),
    ("p.grad stays None after backward", "reachability", "graph"),
    ("I used detach() and now the encoder gets no gradient", "reachability", "graph"),
    ("the embedding layer has grad None", "reachability", "graph"),
    ("encoder weights never get gradients", "reachability", "graph"),
    ("some parameters have no grad after loss.backward()", "reachability", "graph"),
    ("the gradient is all zeros", "reachability", "graph"),
    ("I forgot the activation between my linear layers", "six_claims", "learning chain"),
    ("my MLP can't even fit XOR", "six_claims", "learning chain"),
    ("every neuron in the hidden layer has identical weights", "six_claims", "learning chain"),
    ("all hidden units learn the same thing", "six_claims", "learning chain"),
    ("my loss is negative", "six_claims", "learning chain"),
    ("forgot model.eval(), dropout still active at test time", "six_claims", "run comparison"),
    ("my eval results change every time I run them", "six_claims", "run comparison"),
    ("BatchNorm running stats are updated during validation", "six_claims", "run comparison"),
    ("the new classifier layer doesn't train", "four_structures", "ownership"),
    ("my head is frozen", "four_structures", "ownership"),
    ("fine-tuned head not updating", "four_structures", "ownership"),
    ("I swapped the classifier and now it doesn't learn", "four_structures", "ownership"),
    ("my layers in a python list are not in model.parameters()", "four_structures", "ownership"),
    ("model.to('cuda') leaves one tensor on the cpu", "four_structures", "ownership"),
    ("my buffer is not saved in the checkpoint", "four_structures", "ownership"),
    ("optimizer doesn't see my new parameters", "four_structures", "ownership"),
    ("GPU is idle", "loader_timing", "performance"),
    ("training is slow, GPU at 30%", "loader_timing", "performance"),
    ("low GPU utilization", "loader_timing", "performance"),
    ("nvidia-smi shows 20% gpu util", "loader_timing", "performance"),
    ("volatile GPU-util is 5%", "loader_timing", "performance"),
    ("GPU is underutilized", "loader_timing", "performance"),
    ("my GPU sits idle half the time", "loader_timing", "performance"),
    ("training waits on data", "loader_timing", "performance"),
    ("dataloader is the bottleneck", "loader_timing", "performance"),
    ("image decoding is the bottleneck", "loader_timing", "performance"),
    ("increasing num_workers doesn't help", "loader_timing", "performance"),
    ("num_workers=8 is no faster than num_workers=2", "loader_timing", "performance"),
    ("every few batches training pauses for a second", "loader_timing", "performance"),
    ("tiny model and the gpu is underutilized even with data preloaded", "performance_ledger", "performance"),
    ("the colors look wrong, maybe BGR vs RGB", "stage_trace", "input representation"),
    ("images look blue", "stage_trace", "input representation"),
    ("images were normalized twice", "stage_trace", "input representation"),
    ("forgot to normalize the images", "stage_trace", "input representation"),
    ("random flip applied to the image but not the mask", "stage_trace", "input representation"),
    ("the segmentation mask doesn't line up with the image after cropping", "stage_trace", "input representation"),
    ("tokenizer mismatch between training and inference", "compare_outputs", "input representation"),
    ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x4096 and 2048x10)", "shape_ledger", "geometry"),
    ("linear layer input size does not match after I changed the image size", "shape_ledger", "geometry"),
    ("the CNN throws a size mismatch in the fully connected layer", "shape_ledger", "geometry"),
    ("expected input[8, 224, 224, 3] to have 3 channels, but got 224 channels instead", "shape_ledger", "geometry"),
    ("NHWC batch fed into a conv", "shape_ledger", "geometry"),
    ("all my embeddings are identical", "feature_space", "tensor"),
    ("all the sentence embeddings have cosine similarity 0.99", "feature_space", "tensor"),
    ("I get one score per token instead of one per example", "feature_space", "tensor"),
    ("similarity changes when I rescale a vector", "feature_space", "tensor"),
    ("my transformer can see the future", "attention_check", "attention"),
    ("decoder attends to future tokens", "attention_check", "attention"),
    ("my GPT cheats by looking at future tokens", "attention_check", "attention"),
    ("attention weights don't sum to 1", "attention_check", "attention"),
    ("splitting heads scrambles values", "attention_check", "attention"),
    ("I forgot the 1/sqrt(d) scaling", "attention_check", "attention"),
    ("loss is flat", "learning_ledger", "learning chain"),
    ("my loss won't go down", "learning_ledger", "learning chain"),
    ("loss not decreasing", "learning_ledger", "learning chain"),
    ("why is my model not training", "learning_ledger", "learning chain"),
    ("my model doesn't learn anything", "learning_ledger", "learning chain"),
    ("training loss plateaus at 2.3", "learning_ledger", "learning chain"),
    ("loss stuck at ln(10)", "learning_ledger", "learning chain"),
    ("training accuracy stays at 10% on cifar", "learning_ledger", "learning chain"),
    ("the loss is 2.30 from the very first step and never changes", "learning_ledger", "learning chain"),
    ("the loss falls but the model learns the wrong task", "learning_ledger", "learning chain"),
    ("model predicts the input token instead of the next one", "learning_ledger", "learning chain"),
    ("first loss is 50 on a 10-class problem", "learning_ledger", "learning chain"),
    ("my manual loss disagrees with F.cross_entropy", "learning_ledger", "learning chain"),
    ("NaN", "step_probe", "learning chain"),
    ("loss is NaN after 100 steps", "step_probe", "learning chain"),
    ("loss explodes to inf", "step_probe", "learning chain"),
    ("nan loss with fp16", "step_probe", "learning chain"),
    ("iterations per second are low", "performance_ledger", "performance"),
    ("each epoch takes forever", "performance_ledger", "performance"),
    ("timings vary a lot between runs", "performance_ledger", "performance"),
    ("my GPU memory usage keeps climbing each epoch", "memory_phases", "performance"),
    ("I append the loss to a list and memory rises", "memory_phases", "performance"),
    ("CUDA OOM when I increase batch size to 64", "memory_phases", "performance"),
    ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", "memory_phases", "performance"),
    ("RuntimeError: CUDA error: out of memory", "memory_phases", "performance"),
    ("OOM during evaluation with a big batch", "memory_phases", "performance"),
    ("torch.compile keeps recompiling", "compile_ledger", "compiler"),
    ("torch.compile recompiles for every new batch size", "compile_ledger", "compiler"),
    ("dynamo recompiles when the sequence length changes", "compile_ledger", "compiler"),
    ("throughput dropped after enabling torch.compile", "compile_ledger", "compiler"),
    ("model is slower after torch.compile", "compile_ledger", "compiler"),
    ("graph breaks everywhere", "compile_ledger", "compiler"),
    ("new config improves one run by 0.001", "sweep", "run comparison"),
    ("metric improved by 0.001", "sweep", "run comparison"),
    ("is it noise?", "sweep", "run comparison"),
    ("is a 0.3% gain significant?", "sweep", "run comparison"),
    ("metric jumped 0.2% after refactor, is that real?", "sweep", "run comparison"),
    ("my new optimizer beats the baseline by 0.002 on one seed", "sweep", "run comparison"),
    ("accuracy dropped after my change", "sweep", "run comparison"),
    ("val loss went up after the update", "sweep", "run comparison"),
    ("the new commit made accuracy worse", "sweep", "run comparison"),
    ("validation metric computed on a different split now", "compare", "run comparison"),
    ("which commit caused the regression", "bisect", "run comparison"),
    ("each change helps alone but together they are worse", "factorial", "run comparison"),
    ("same seed gives different results", "determinism", "run comparison"),
    ("two runs with seed 0 disagree", "determinism", "run comparison"),
    ("cudnn nondeterminism between runs", "determinism", "run comparison"),
    ("results differ with 4 workers vs 0 workers", "rng_audit", "run comparison"),
    ("the CI gate is flaky", "Gate", "run comparison"),
    ("val loss goes up while train loss goes down", "stage_trace", "input representation"),
    ("validation accuracy is much lower than training accuracy", "stage_trace", "input representation"),
    ("the model repeats the same phrases", "DiagnosticSet", "run comparison"),
    ("after export to onnx the predictions are different", "compare_outputs", "run comparison"),
    ("TensorRT engine gives different logits than PyTorch", "compare_outputs", "run comparison"),
    ("the onnx runtime output doesn't match pytorch", "compare_outputs", "run comparison"),
    ("int8 model accuracy dropped", "compare_outputs", "run comparison"),
    ("outputs changed after a dependency upgrade", "DiagnosticSet", "run comparison"),
    ("I don't know where to start", "evidence_packet", "learning chain"),
]

TABLE_PHRASINGS = [(spec.id, p) for spec in ROUTES for p in spec.phrasings]


def _top(text: str) -> dict:
    report = route(text)
    assert report.status is Status.PASS, (text, report.status, report.reason, report.details["tokens"])
    return report.details["matches"][0]


# --- routing -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "instrument", "contract"), USER_PHRASINGS, ids=[t for t, _, _ in USER_PHRASINGS])
def test_user_phrasings_route_to_the_right_instrument_and_contract(text, instrument, contract):
    top = _top(text)
    assert (top["instruments"][0], top["contract"]) == (instrument, contract), (text, top["id"], top["matched_phrasing"])


@pytest.mark.parametrize(("route_id", "text"), TABLE_PHRASINGS, ids=[f"{i}:{p}" for i, p in TABLE_PHRASINGS])
def test_every_symptom_in_the_table_routes_to_its_own_route(route_id, text):
    assert _top(text)["id"] == route_id


SECTION_15 = [  # the appendix's examples: symptom, route, instruments, what to look at first
    ("Generated text is nonsense but training loss is excellent", "learning.task", ["learning_ledger"], "TASK"),
    ("A future token changes an earlier logit", "attention.causal", ["attention_check"], "LEVEL_4"),
    ("Initial loss is wildly inconsistent with the declared initialization", "learning.objective_init",
     ["learning_ledger"], "OBJECTIVE"),
    ("Gradients are finite but the head never moves", "ownership.head", ["four_structures", "step_probe"],
     "OPTIMIZER_OWNERSHIP"),
    ("Training is correct but throughput is low", "perf.throughput", ["performance_ledger"], "perf."),
    ("Compiled model pauses on new sequence lengths", "compile.recompile", ["compile_ledger"], "STABLE"),
    ("New configuration improves one run by 0.001", "regression.small_gain", ["sweep", "compare"], "paired deltas"),
]


@pytest.mark.parametrize(("text", "route_id", "instruments", "focus"), SECTION_15, ids=[s[0] for s in SECTION_15])
def test_section_15_examples(text, route_id, instruments, focus):
    top = _top(text)
    assert (top["id"], top["instruments"], top["score"]) == (route_id, instruments, 1.0)
    assert focus in top["focus"]


def test_the_appendix_distinguishing_experiments_are_attached_to_their_symptoms():
    grad = _top("grad is None")
    assert grad["hypotheses"] == {"A": "graph path is broken", "B": "path exists but local derivative is zero"}
    assert "clear grad to None" in grad["experiment"] and "zero tensor" in grad["experiment"]
    assert _top("GPU is idle")["experiment"] == "measure batch wait separately from post-batch work"
    slow = _top("torch.compile made it slower")
    assert slow["hypotheses"]["B"] == "recurring recompilation dominates" and "fixed-shape steady state" in slow["experiment"]
    small = _top("new config improves one run by 0.001")
    assert small["experiment"] == "run both versions on shared seeds and inspect paired deltas"
    assert small["packet"] == "regression" and "paired deltas if pairing is valid" in small["packet_items"]
    assert _top("CUDA out of memory")["packet"] == "performance"
    assert _top("loss is flat")["packet"] == "training" and "overfit" in _top("loss is flat")["experiment"]


def test_stop_rules_come_from_their_section():
    assert _top("mat1 and mat2 shapes cannot be multiplied")["stop_when"].startswith("Derived and observed geometry agree")
    causal = _top("a future token changes an earlier logit")
    assert causal["stop_when"] == "You know the earliest correctness level and stage that fails."
    assert "Do not tune learning rate" in _top("loss is flat")["stop_when"]
    assert "workload economics" in _top("compiled model pauses on new sequence lengths")["stop_when"]


def test_statuses_pass_warn_skipped_and_routing_is_never_a_verdict():
    strong, weak, none = route("loss is flat"), route("my weights"), route("the weather is nice today")
    assert strong.status is Status.PASS and strong.details["matches"][0]["strength"] == "strong"
    assert weak.status is Status.WARN and all(m["strength"] == "weak" for m in weak.details["matches"])
    assert none.status is Status.SKIPPED and none.details["matches"] == []
    for report in (strong, weak, none):
        assert report.first_divergence is None and report.ok and report.instrument == "route"
        assert isinstance(report, Route)
    for example in ('"loss is flat"', '"GPU is idle"', "--list"):
        assert example in none.reason
    assert none.details["did_you_mean"] and none.details["examples"] == list(EXAMPLES)
    assert [f.where for f in strong.findings] == [m["id"] for m in strong.details["matches"]]
    assert all(f.evidence["score"] == m["score"] for f, m in zip(strong.findings, strong.details["matches"]))


def test_ranking_is_deterministic_and_top_limits_the_matches():
    text = "training is slow, GPU at 30%, and the loss won't go down"
    first, again = route(text), route(text)
    assert first == again
    scores = [m["score"] for m in first.details["matches"]]
    assert scores == sorted(scores, reverse=True) and len(scores) == first.details["total_matches"] >= 3
    assert {m["id"] for m in first.details["matches"][:3]} >= {"loader.gpu_idle", "learning.flat"}
    assert [m["id"] for m in route(text, top=2).details["matches"]] == [m["id"] for m in first.details["matches"][:2]]


@pytest.mark.parametrize("bad", ["", "   ", None, 3])
def test_bad_text_is_invalid_argument(bad):
    with pytest.raises(InvalidArgument, match="Expected `text`"):
        route(bad)


def test_bad_top_is_invalid_argument():
    with pytest.raises(InvalidArgument, match="Expected `top`"):
        route("loss is flat", top=0)


# --- the table ---------------------------------------------------------------------------------------------------------
def test_table_uses_the_worksheet_contracts_and_public_instrument_names():
    assert CONTRACTS == WORKSHEET_CONTRACTS and INSTRUMENTS == PUBLIC_INSTRUMENTS
    assert all(name in firstdiv.__all__ for name in INSTRUMENTS)
    assert len({spec.id for spec in ROUTES}) == len(ROUTES) and len(TABLE_PHRASINGS) >= 300
    for spec in ROUTES:
        assert spec.contract in CONTRACTS and set(spec.instruments) <= set(INSTRUMENTS), spec.id
        assert spec.packet in PACKETS and all(spec.hypotheses) and spec.experiment and spec.stop_when, spec.id
        assert f"firstdiv.{spec.instruments[0]}" in spec.call, spec.id
    assert {spec.contract for spec in ROUTES} == set(CONTRACTS)


def test_table_covers_every_appendix_section_and_chapter_31():
    sections = {spec.section for spec in ROUTES}
    numbered = {int(m.group(1)) for s in sections if (m := re.match(r"appendix (\d+)$", s))}
    assert numbered == set(range(1, 16))
    ch31 = {s.split(": ", 1)[1] for s in sections if s.startswith("chapter 31: ")}
    assert ch31 == {"first wrong boundary", "loss does not fall", "training improves, validation worsens",
                    "GPU runs out of memory", "GPU mostly idle", "memorized or repetitive", "exported model differs",
                    "diagnostic dataset"}


def _resolve(func: ast.expr) -> object:
    """The object a call's function expression names: firstdiv.X.Y, or a method of what a classmethod returns."""
    if isinstance(func, ast.Attribute):
        if isinstance(func.value, ast.Call):  # firstdiv.Gate.calibrate(...).check -> Gate.check
            maker = _resolve(func.value.func)
            return getattr(getattr(maker, "__self__", None), func.attr)
        return getattr(_resolve(func.value), func.attr)
    assert isinstance(func, ast.Name) and func.id == "firstdiv", ast.dump(func)
    return firstdiv


@pytest.mark.parametrize("spec", ROUTES, ids=[spec.id for spec in ROUTES])
def test_each_call_binds_to_the_real_signature(spec):
    calls = [n for n in ast.walk(ast.parse(spec.call)) if isinstance(n, ast.Call) and "firstdiv" in ast.unparse(n.func)]
    assert calls, spec.call
    for node in calls:
        fn = _resolve(node.func)
        on_instance = isinstance(getattr(node.func, "value", None), ast.Call)  # a method looked up on the class: bind self
        args = [object()] * (len(node.args) + on_instance)
        inspect.signature(fn).bind(*args, **{kw.arg: object() for kw in node.keywords})


# --- the reverse view -------------------------------------------------------------------------------------------------
def test_reverse_view_covers_every_instrument_and_each_owns_a_symptom():
    view = routes()
    assert list(view) == list(INSTRUMENTS)
    assert all(view[name] for name in INSTRUMENTS), [n for n in INSTRUMENTS if not view[n]]
    for spec in ROUTES:
        for name in spec.instruments:
            assert spec.symptom in view[name]
    assert view["loader_timing"][0] == "Low GPU utilization"
    assert "New configuration improves one run by 0.001" in view["sweep"] and view["Gate"] and view["rng_audit"]
    view["step_probe"].clear()
    assert routes()["step_probe"], "routes() must return a fresh view"


# --- report model ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["loss is flat", "my weights", "the weather is nice today"])
def test_json_round_trip(text):
    report = route(text)
    back = Report.from_dict(json.loads(report.to_json()))
    assert type(back) is Route and back == report and back.to_dict() == report.to_dict()


def test_rich_rendering_shows_the_route_and_escapes_user_text():
    text = to_text(route("[red]loss[/red] is flat"), width=200)
    assert "[red]loss[/red]" in text and "learning.flat" in text and "learning_ledger" in text
    for label in ("contract", "run first", "call", "experiment", "capture", "stop when"):
        assert label in text
    assert "training packet: one known batch" in text
    assert "stop debugging when all four hold: (1) You can name the mechanism" in text
    assert "print / assert tensor facts -> known-sample contract" in text
    html = route("<script>alert(1)</script> loss is flat")._repr_html_()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
    assert 'did you mean: "' in to_text(route("the weather is nice today"))


def test_firstdiv_route_is_the_function_even_after_the_module_was_imported():
    import firstdiv.diagnosis.route

    assert firstdiv.route is route and firstdiv.route("loss is flat") == route("loss is flat")


# --- command line ------------------------------------------------------------------------------------------------------
def _invoke(*args: str):
    return CliRunner().invoke(route_command, list(args), env={"COLUMNS": "160"})


def test_cli_prints_the_top_routes():
    result = _invoke("loss", "is", "flat")
    assert result.exit_code == 0, result.output
    assert "learning.flat" in result.output and "firstdiv.learning_ledger(" in result.output
    assert result.output.count("\n  1  ") == 1


def test_cli_json_default_top_three_and_all():
    top = json.loads(_invoke("--json", "training is slow, GPU at 30%").output)["payload"]
    every = json.loads(_invoke("--json", "--all", "training is slow, GPU at 30%").output)["payload"]
    assert top["type"] == "Route" and top["details"]["matches"][0]["id"] == "loader.gpu_idle"
    assert len(top["details"]["matches"]) == 3 < len(every["details"]["matches"]) == every["details"]["total_matches"]
    assert Report.from_dict(every) == route("training is slow, GPU at 30%")


def test_cli_no_match_exits_zero_with_examples():
    result = _invoke("the weather is nice today")
    assert result.exit_code == 0 and "SKIPPED" in result.output and '"loss is flat"' in result.output
    assert json.loads(_invoke("--json", "zzz").output)["payload"]["status"] == "SKIPPED"


@pytest.mark.parametrize(("args", "message"), [
    ([""], "Expected a SYMPTOM"), ([], "Expected a SYMPTOM"), (["--instrument", "nope"], "Unknown instrument 'nope'"),
    (["--list", "loss is flat"], "not both"), (["--list", "--instrument", "sweep"], "not both"),
])
def test_cli_usage_errors_exit_2(args, message):
    result = _invoke(*args)
    assert result.exit_code == 2 and message in result.output, result.output


def test_cli_reverse_view():
    one = json.loads(_invoke("--instrument", "Loader_Timing", "--json").output)["payload"]
    assert one == {"instrument": "loader_timing", "symptoms": routes()["loader_timing"]}
    assert json.loads(_invoke("--list", "--json").output)["payload"] == {"instruments": routes()}
    listed = _invoke("--list").output
    assert all(name in listed for name in INSTRUMENTS) and "Low GPU utilization" in listed
    assert "attention.causal" in _invoke("--instrument", "attention_check").output


def test_python_m_firstdiv_route_subprocess():
    def run(*args):
        return subprocess.run([sys.executable, "-m", "firstdiv", "route", *args], check=False, capture_output=True,
                              text=True,
                              timeout=60, env={**os.environ, "COLUMNS": "140"})

    ok = run("--json", "GPU is idle")
    assert ok.returncode == 0 and json.loads(ok.stdout)["payload"]["details"]["matches"][0]["instruments"][0] == "loader_timing"
    empty = run("")
    assert empty.returncode == 2 and empty.stdout == "" and len(empty.stderr.splitlines()) == 1
    assert empty.stderr.startswith("firstdiv: error: Expected a SYMPTOM")
