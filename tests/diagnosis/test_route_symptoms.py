"""Symptoms real users type, routed to an instrument that can see them: a loss that does not fall goes to one that
runs the user's own loop; autocast, generation length and batch layout each have their route."""

from __future__ import annotations

import pytest

import firstdiv


def _top(symptom: str) -> dict:
    report = firstdiv.route(symptom)
    assert report.status.value == "PASS", (symptom, report.details["matches"][:2])
    return report.details["matches"][0]


@pytest.mark.parametrize("symptom", ["loss does not go down", "my training loss is not decreasing at all",
                                     "the model is not learning anything"])
def test_a_flat_loss_goes_to_an_instrument_that_runs_the_users_loop(symptom):
    top = _top(symptom)
    assert "train_step=train_step" in top["call"], top["call"]
    assert "step_probe" in top["instruments"]


@pytest.mark.parametrize(("symptom", "route_id"), [
    ("the loss goes up every step instead of down", "learning.ascends"),
    ("loss explodes after a few steps of training", "learning.ascends"),
    ("bf16 autocast gives different results than fp32", "precision.autocast"),
    ("GradScaler skips every optimizer step", "precision.autocast"),
    ("generation stops after a few tokens", "generation.length"),
    ("the model never stops generating text", "generation.length"),
    ("it works with batch size 1 but breaks with batch size 32", "batch.shape"),
    ("my batch is [T, B] not [B, T]", "batch.shape"),
])
def test_symptom_classes_have_their_route(symptom, route_id):
    assert _top(symptom)["id"] == route_id


def test_the_batch_route_names_the_batch_axis_the_learning_instruments_take():
    top = _top("changing the batch size changes the predictions")
    assert "batch_axis" in top["focus"]
