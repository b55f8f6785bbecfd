"""loader_timing's judgement: the limiting-phase rules (stated in loader_timing's docstring; the numbers
are the constants below), the cpu_contention rule over a num_workers sweep, and the findings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...report import Status
from .._core.checks import Check, check
from ._measure import Producer

FLOOR_MS = 0.5  # waits below this per batch are timer/scheduler noise, never starvation
WAIT_RATIO = 0.5  # starved when the effective wait exceeds this fraction of the work
STALL_SHARE = 0.25  # ... or when this share of steady batches waited longer than their work (and 1 ms)
H2D_RATIO = 0.5  # host_to_device limits a non-starved consumer when the copy exceeds this fraction of the work
FELL, ROSE, FLAT = 0.2, 0.2, 0.15  # cpu_contention: wait -20%, work +20%, examples/s within 15%
MIN_CHANGE_MS = 0.5

HINTS = {
    "read_decode_transform": "make __getitem__ cheaper: preprocess deterministic work once and cache what stays valid "
                             "under the augmentation; if CPU cores are free, more num_workers overlap it",
    "collate": "move per-example work out of collate_fn into __getitem__ (where workers parallelize it) and keep "
               "collate to stacking/padding",
    "process_startup": "persistent_workers=True, lighter worker start-up (imports, dataset copies, worker_init_fn), "
                       "or fewer workers for short epochs",
    "cpu_contention": "the CPU is saturated: fewer workers, cheaper preprocessing, or preprocessing done once offline",
    "producer": "time the producer's stages: pass the DataLoader itself (not an iterable) to split read/decode/"
                "transform from collate",
    "host_to_device": "pin_memory=True with non_blocking copies, smaller or lower-precision inputs, or move "
                      "preprocessing to the device",
}
PHASE_TEXT = {"read_decode_transform": "dataset __getitem__ (read, decode, transform)", "collate": "collate_fn",
              "process_startup": "worker process start-up", "cpu_contention": "CPU contention between workers and the step",
              "producer": "the producer (not split further)", "host_to_device": "host-to-device copies",
              "consumer_compute": "the consumer's own compute (step)"}


@dataclass(frozen=True)
class Numbers:
    """Per-batch medians in ms of the main measurement and the producer split (None: not measured)."""

    wait: float
    work: float
    stall_share: float
    first_wait: float | None
    getitem: float | None
    collate: float | None
    h2d: float | None
    workers: int
    persistent: bool
    epoch_batches: int  # len(loader), or the batches measured when the length is unknown
    step_given: bool


@dataclass(frozen=True)
class Verdict:
    starved: bool | None
    phase: str
    effective_wait: float
    startup_per_epoch: float | None
    startup_per_batch: float
    rule: str


def _startup(n: Numbers) -> tuple[float | None, float]:
    if n.workers == 0 or n.first_wait is None:
        return None, 0.0
    made = n.getitem + n.collate if n.getitem is not None and n.collate is not None else 0.0
    per_epoch = max(0.0, n.first_wait - max(n.wait, made))
    return round(per_epoch, 4), 0.0 if n.persistent else round(per_epoch / max(1, n.epoch_batches), 4)


def _producer_phase(n: Numbers, per_batch: float, contention: dict | None) -> tuple[str, str]:
    if contention:
        return "cpu_contention", (f"num_workers {contention['from_workers']} -> {contention['to_workers']}: wait fell, "
                                  f"work rose, examples/s flat")
    if n.workers > 0 and per_batch > n.wait:
        return "process_startup", f"start-up per batch {per_batch:.4g} ms > steady wait {n.wait:.4g} ms"
    if n.getitem is not None and n.collate is not None:
        if n.getitem >= n.collate:
            return "read_decode_transform", f"__getitem__ {n.getitem:.4g} ms >= collate {n.collate:.4g} ms per batch"
        return "collate", f"collate {n.collate:.4g} ms > __getitem__ {n.getitem:.4g} ms per batch"
    return "producer", "the producer could not be split into its phases"


def decide(n: Numbers, contention: dict | None) -> Verdict:
    """The rules of loader_timing's docstring, applied to ``n``."""
    per_epoch, per_batch = _startup(n)
    eff = round(n.wait + per_batch, 4)
    phase, why = _producer_phase(n, per_batch, contention)
    if not n.step_given:
        return Verdict(None, phase, eff, per_epoch, per_batch, f"no step: the loader's own limit is {why}")
    by_ratio, by_tail = eff > WAIT_RATIO * n.work, n.stall_share >= STALL_SHARE
    if eff >= FLOOR_MS and (by_ratio or by_tail):
        rule = (f"effective wait {eff:.4g} ms > {WAIT_RATIO} x work {n.work:.4g} ms" if by_ratio else
                f"{n.stall_share:.0%} of batches waited longer than their work (>= {STALL_SHARE:.0%})")
        return Verdict(True, phase, eff, per_epoch, per_batch, f"{rule}; {why}")
    if n.h2d is not None and n.h2d > H2D_RATIO * n.work:
        return Verdict(False, "host_to_device", eff, per_epoch, per_batch,
                       f"copy {n.h2d:.4g} ms > {H2D_RATIO} x work {n.work:.4g} ms")
    return Verdict(False, "consumer_compute", eff, per_epoch, per_batch,
                   f"effective wait {eff:.4g} ms <= max({FLOOR_MS} ms, {WAIT_RATIO} x work {n.work:.4g} ms) and "
                   f"{n.stall_share:.0%} of batches stalled (< {STALL_SHARE:.0%})")


def contention(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first num_workers setting (vs the fewest workers measured) whose median wait fell while median
    work rose and end-to-end examples/s stayed flat (thresholds above); None when no row shows it."""
    ok = sorted((r for r in rows if r.get("control") == "num_workers" and r.get("status") == "ok"
                 and r.get("examples_per_s")), key=lambda r: r["value"])
    if len(ok) < 2:
        return None
    base = ok[0]
    w0, k0, e0 = base["wait_ms"]["median"], base["work_ms"]["median"], base["examples_per_s"]
    for r in ok[1:]:
        w1, k1, e1 = r["wait_ms"]["median"], r["work_ms"]["median"], r["examples_per_s"]
        if r["value"] <= base["value"] or None in (w0, w1, k0, k1):
            continue
        fell = w1 <= (1 - FELL) * w0 and w0 - w1 >= MIN_CHANGE_MS
        rose = k1 >= (1 + ROSE) * k0 and k1 - k0 >= MIN_CHANGE_MS
        if fell and rose and abs(e1 / e0 - 1) <= FLAT:
            return {"from_workers": base["value"], "to_workers": r["value"], "wait_ms": [w0, w1], "work_ms": [k0, k1],
                    "examples_per_s": [e0, e1], "throughput_change": round(e1 / e0 - 1, 4)}
    return None


# ---- findings ------------------------------------------------------------------------------------------

def producer_checks(producer: Producer | None) -> list[Check]:
    """read_decode_transform and collate, timed in the main process (ms per batch); SKIPPED without a split."""
    if producer is None or producer.error or not producer.getitem:
        why = ("a plain iterable has no dataset or collate_fn to time apart: pass the DataLoader itself" if producer is None
               else f"timing the producer in this process raised {producer.error}" if producer.error
               else "the producer made no batch in this process")
        return [check(p, "loader.phase_time", Status.SKIPPED, why) for p in ("read_decode_transform", "collate")]
    g, c, examples, source = producer.getitem, producer.collate, producer.examples, producer.source
    gm, cm = _ms(g), _ms(c)
    per_example = round(sum(g) * 1e3 / max(1, sum(examples)), 4)
    ev = {"median_ms": gm, "max_ms": round(max(g) * 1e3, 4), "per_example_ms": per_example, "batches": len(g),
          "examples": sum(examples), "source": source}
    return [check("read_decode_transform", "loader.phase_time", Status.PASS,
                  f"dataset __getitem__: median {gm} ms per batch ({per_example} ms per example) over {len(g)} batches "
                  f"timed in this process", ev),
            check("collate", "loader.phase_time", Status.PASS, f"collate_fn: median {cm} ms per batch over {len(c)} batches",
                  {"median_ms": cm, "max_ms": round(max(c) * 1e3, 4), "batches": len(c)})]


def startup_check(v: Verdict, first_wait: float | None, workers: int, persistent: bool, epoch_batches: int) -> Check:
    if workers == 0:
        return check("process_startup", "loader.phase_time", Status.PASS,
                     "num_workers=0: batches are made in this process, no worker start-up", {"num_workers": 0})
    if first_wait is None:
        return check("process_startup", "loader.phase_time", Status.PASS,
                     f"{workers} persistent workers were already running: no start-up in this measurement",
                     {"num_workers": workers, "persistent_workers": persistent})
    ev = {"num_workers": workers, "first_wait_ms": first_wait, "startup_per_epoch_ms": v.startup_per_epoch,
          "startup_per_batch_ms": v.startup_per_batch, "batches_per_epoch": epoch_batches, "persistent_workers": persistent}
    paid = "once per run (persistent_workers)" if persistent else f"every epoch of {epoch_batches} batches"
    return check("process_startup", "loader.phase_time", Status.PASS,
                 f"worker start-up {v.startup_per_epoch} ms (first batch waited {first_wait} ms), paid {paid}: "
                 f"{v.startup_per_batch} ms per batch", ev)


def h2d_check(h2d: dict[str, Any], h_ms: float | None) -> Check:
    if h_ms is None:
        return check("host_to_device", "loader.phase_time", Status.SKIPPED,
                     f"host-to-device copies not measured: {h2d.get('reason', '')}; they are measured when CUDA is in "
                     f"use in this process (e.g. after model.cuda())")
    secs = h2d["seconds"]
    return check("host_to_device", "loader.phase_time", Status.PASS,
                 f"copy to the CUDA device: median {h_ms} ms per batch ({'pinned' if h2d['pinned'] else 'pageable'} memory, "
                 f"synchronized) over {len(secs)} batches", {"median_ms": h_ms, "batches": len(secs), "pinned": h2d["pinned"]})


def sweep_checks(rows: list[dict[str, Any]], controls: dict[str, list[Any]], plain: bool) -> list[Check]:
    if plain and controls:
        return [check(f"sweep:{k}", "loader.sweep", Status.SKIPPED,
                      "a sweep rebuilds DataLoaders over loader.dataset: pass the DataLoader itself, not an iterable")
                for k in controls]
    out = []
    for control in controls:
        mine = [r for r in rows if r["control"] == control]
        parts = [_row_text(r) for r in mine]
        out.append(check(f"sweep:{control}", "loader.sweep", Status.PASS, f"{control}: " + "; ".join(parts),
                         {"rows": [{k: v for k, v in r.items() if k not in ("control", "calls")} for r in mine]}))
    return out


def _row_text(r: dict[str, Any]) -> str:
    if r["status"] != "ok":
        return f"{r['value']} -> {r['status']} ({r.get('reason', '')})"
    note = f" [{r['notes'][0]}]" if r.get("notes") else ""
    return (f"{r['value']} -> {r['examples_per_s']} {r['unit']} (wait {r['wait_ms']['median']} ms, "
            f"work {r['work_ms']['median']} ms){note}")


def contention_check(rows: list[dict[str, Any]], found: dict[str, Any] | None) -> list[Check]:
    ok = [r for r in rows if r["control"] == "num_workers" and r["status"] == "ok"]
    if len(ok) < 2:
        return []
    if found is None:
        return [check("cpu_contention", "loader.cpu_contention", Status.PASS,
                      "no num_workers setting lowered the wait while raising the work at flat throughput",
                      {"settings": [r["value"] for r in ok]})]
    w, k, e = found["wait_ms"], found["work_ms"], found["examples_per_s"]
    return [check("cpu_contention", "loader.cpu_contention", Status.WARN,
                  f"num_workers {found['from_workers']} -> {found['to_workers']}: wait {w[0]} -> {w[1]} ms, work "
                  f"{k[0]} -> {k[1]} ms, end to end {e[0]} -> {e[1]} examples/s ({found['throughput_change']:+.0%}): the "
                  f"workers compete with the step for the same CPU", found)]


def _ms(seconds: list[float]) -> float:
    s = sorted(seconds)
    mid = len(s) // 2
    return round((s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2) * 1e3, 4)
