"""compare_outputs and compile_ledger on Hugging Face outputs: ``ModelOutput`` leaves by name, key/value cache
objects (``DynamicCache``, ``EncoderDecoderCache``) compared by the tensors they hold and said so, every variant
kind of a tiny T5 (random weights) with no false alarm."""

import copy
import sys

import pytest
import torch
from _paths import TESTS

from firstdiv import Status
from firstdiv.instruments._core.outputs import Tolerance, compare, leaves
from firstdiv.instruments.compare_outputs import compare_outputs
from firstdiv.instruments.compare_outputs.variants import variants
from firstdiv.instruments.compile_ledger._compare import compare as ledger_compare

pytestmark = pytest.mark.usefixtures("one_thread")
transformers = pytest.importorskip("transformers")
sys.path.insert(0, str(TESTS / "realworld" / "cases"))
from _deploy_common import gpt2, t5, tokens  # the corpus tiny configs


def _t5_inputs(seed=0):
    return {"input_ids": tokens(seed), "decoder_input_ids": tokens(seed + 7, length=5)}


def test_t5_every_variant_kind_passes_and_the_cache_is_noted():
    model = t5(0, layers=1)  # one encoder and one decoder block: compiling and exporting cost per block
    inputs = _t5_inputs()
    built, tols = variants(model, ("eager", "compiled", "reloaded", "export", "int8"), example_inputs=inputs,
                           compile_backend="eager")
    report = compare_outputs(built, inputs, tolerances=tols)
    assert report.status is Status.PASS, report
    note = next(f for f in report.findings if f.check == "outputs.cache_objects")
    assert note.message.startswith("note: ") and note.evidence["paths"] == ["output['cache']"]
    assert note.evidence["tensors"] == 4  # 1 layer x (self, cross) x (keys, values)
    for kind in ("compiled", "reloaded", "export"):
        info = report.details["variants"][kind]
        assert info["max_abs_error"] <= 1e-5 and info["elements"] > 2000, (kind, info)


def test_cache_leaves_are_named_and_a_changed_cache_tensor_is_found():
    model = gpt2(0)
    with torch.no_grad():
        out = model(tokens(0))
    caches: list = []
    names = leaves(out, caches=caches)
    assert caches == ["output['cache']"]
    assert "output['cache']['layers'][1]['values']" in names and "output['logits']" in names
    changed = copy.deepcopy(out)
    changed["cache"].layers[1].values.add_(1.0)
    result = compare(out, changed, Tolerance())
    assert not result.ok and result.summary()["worst_leaf"] == "output['cache']['layers'][1]['values']"
    assert compare(out, copy.deepcopy(out), Tolerance()).ok  # by value an equal cache would not compare equal
    ledger = ledger_compare(out, changed, 1e-4, 1e-5)
    assert ledger.caches == ["out['cache']"] and not ledger.ok and "layers" in ledger.worst


def test_gpt2_reloaded_with_its_default_cache_has_no_false_alarm():
    model = gpt2(1)
    built, tols = variants(model, ("eager", "reloaded"))
    report = compare_outputs(built, {"input_ids": tokens(1)}, tolerances=tols)
    assert report.status is Status.PASS, report
    assert report.details["cache_objects"] == ["output['cache']"]


def test_an_exported_bert_with_a_changed_layer_is_localized_past_tuple_outputs():
    from _deploy_common import bert

    model = bert(0)
    changed = copy.deepcopy(model)
    with torch.no_grad():
        changed.bert.encoder.layer[1].output.dense.weight.mul_(1.5)
    inputs = {"input_ids": tokens(0)}
    exported = variants(changed, ("export",), example_inputs=inputs)[0]["export"]
    report = compare_outputs({"eager": model, "export": exported}, inputs)
    assert report.first_divergence.where == "export:bert.encoder.layer.1.output.dense", report.first_divergence
    finding = next(f for f in report.findings if f.where.startswith("export:"))
    assert finding.evidence["layers_not_matched"]  # attention modules return tuples; their last graph node is not one


def test_a_cache_passed_in_is_private_to_each_compile_ledger_run():
    from firstdiv.instruments.compile_ledger._compare import clone_args

    model = gpt2(0)
    with torch.no_grad():
        past = model(tokens(0))["cache"]
    before = past.layers[0].keys.clone()
    copied = clone_args({"past_key_values": past})["past_key_values"]
    assert copied is not past and copied.layers[0].keys is not past.layers[0].keys
    with torch.no_grad():
        model(tokens(1, length=1), past_key_values=copied)  # the model appends to the cache it gets
    assert copied.get_seq_length() == past.get_seq_length() + 1 and torch.equal(past.layers[0].keys, before)
