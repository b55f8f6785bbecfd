"""The book's vocabulary, written once: the worksheet's fields and contracts, the evidence packets, the
escalation ladder's rungs and when to stop debugging (the appendix and chapter 31). Data only; the router,
the ladder, the notebook and the pages read it from here."""

from __future__ import annotations

#: the incident worksheet's FIRST CONTRACT list, in its order
CONTRACTS = ("tensor", "graph", "ownership", "input representation", "geometry", "attention", "learning chain",
             "performance", "compiler", "run comparison")

#: the appendix's minimum evidence packets ("Preserve observations before your intervention destroys the failing state")
PACKETS: dict[str, tuple[str, ...]] = {
    "training": ("one known batch", "input shape / dtype / device / range", "target shape / dtype / meaning",
                 "model mode", "loss value", "loss.requires_grad", "loss.grad_fn", "expected trainable parameter names",
                 "grad state for those parameters", "optimizer parameter membership",
                 "parameter deltas after one controlled step", "current learning rate for every parameter group"),
    "performance": ("workload", "input shapes", "dtype", "device", "train/eval/inference mode", "eager/compiled",
                    "metric", "warmup", "measurement window", "repetitions", "synchronization boundary",
                    "peak allocated memory", "peak reserved memory"),
    "regression": ("code version", "configuration", "data version", "seed", "environment", "evaluation contract",
                   "baseline variation", "paired deltas if pairing is valid"),
}

#: "When to stop debugging": all four must be true
STOP_DEBUGGING = (
    "You can name the mechanism that produced the symptom.",
    "The repair changed the measurement the mechanism predicted.",
    "An independent correctness property remained unchanged.",
    "The failure can now be expressed as a test, assertion, contract or recorded comparison that would catch it.",
)

#: "When to escalate": start cheap, escalate only when the cheaper instrument passes
ESCALATION = ("print / assert tensor facts", "known-sample contract", "graph / ownership inspection",
              "controlled one-step probe", "tiny-batch capability test", "hooks / detailed activation inspection",
              "profiler / allocator snapshot / compiler logs", "multi-seed comparison")

#: the worksheet's fields, in the book's order, with the question each one answers
FIELDS: tuple[tuple[str, str], ...] = (
    ("SYMPTOM", "What exactly was observed?"),
    ("EXPECTED", "What specific value, shape, behavior or metric was expected?"),
    ("REPRODUCTION", "What is the smallest input / batch / configuration that reproduces it?"),
    ("FIRST CONTRACT", "Which contract should be checked first?"),
    ("OBSERVATIONS", "What did the instrument actually report?"),
    ("FIRST DIVERGENCE", "Where does observed behavior first disagree with the expectation?"),
    ("HYPOTHESES", "What are the smallest two or three mechanisms consistent with that evidence?"),
    ("DISTINGUISHING EXPERIMENT", "What one experiment makes those hypotheses predict different outcomes?"),
    ("INTERVENTION", "Change exactly one mechanism."),
    ("MUST CHANGE", "Which measurement should change if the diagnosis is correct?"),
    ("MUST NOT CHANGE", "Which correctness property must remain unchanged?"),
    ("VERIFICATION", "Did the original failure disappear for the predicted reason?"),
    ("REGRESSION TEST", "What small test should remain so this exact failure cannot silently return?"),
)

#: the appendix's warning, given with every clean bill
ALL_GREEN = ("An all-green report is not a clean bill of health for what was not probed: different failures violate "
             "different contracts, and the dangerous ones often preserve every simpler contract below them.")

#: The worksheet in the appendix's order: (field, heading, the question it answers). CAUSE and REPAIR
#: are the notebook's additions: the mechanism (hypothesis or confirmed) and the change actually made.
INCIDENT_WORKSHEET: tuple[tuple[str, str, str], ...] = (
    ("symptom", "SYMPTOM", "What exactly was observed?"),
    ("expected", "EXPECTED", "What specific value, shape, behavior or metric was expected?"),
    ("reproduction", "REPRODUCTION", "What is the smallest input / batch / configuration that reproduces it?"),
    ("first_contract", "FIRST CONTRACT", ("Which contract should be checked first? tensor, graph, ownership, input "
                                          "representation, geometry, attention, learning chain, performance, compiler, "
                                          "run comparison")),
    ("observations", "OBSERVATIONS", "What did the instrument actually report?"),
    ("first_divergence", "FIRST DIVERGENCE", "Where does observed behavior first disagree with the expectation?"),
    ("hypotheses", "HYPOTHESES", "What are the smallest two or three mechanisms consistent with that evidence?"),
    ("distinguishing_experiment", "DISTINGUISHING EXPERIMENT",
     "What one experiment makes those hypotheses predict different outcomes?"),
    ("cause", "CAUSE", "Which mechanism produced the symptom?"),
    ("intervention", "INTERVENTION", "Change exactly one mechanism."),
    ("repair", "REPAIR", "What change was made?"),
    ("must_change", "MUST CHANGE", "Which measurement should change if the diagnosis is correct?"),
    ("must_not_change", "MUST NOT CHANGE", "Which correctness property must remain unchanged?"),
    ("verification", "VERIFICATION", "Did the original failure disappear for the predicted reason?"),
    ("regression_test", "REGRESSION TEST", "What small test should remain so this exact failure cannot silently return?"),
)

#: The incident page's sections in the appendix's order; each entry lists the keys it may be stored under.
PAGE_WORKSHEET = (
    ("symptom", ("symptom",)), ("expected", ("expected",)), ("reproduction", ("reproduction",)),
    ("first contract", ("first_contract", "contract")), ("observations", ("observations",)),
    ("first divergence", ("first_divergence",)), ("hypotheses", ("hypotheses",)),
    ("distinguishing experiment", ("distinguishing_experiment", "experiment")), ("intervention", ("intervention",)),
    ("MUST CHANGE", ("must_change",)), ("MUST NOT CHANGE", ("must_not_change",)),
    ("cause", ("cause", "confirmed_cause")), ("repair", ("repair", "fix")), ("verification", ("verification",)),
    ("regression test", ("regression_test",)), ("notes", ("notes",)),
)
