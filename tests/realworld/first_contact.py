"""First contact: how firstdiv fares on ported public programs *before* any change is made for them (issue 26's
measure). Run it once per batch of new ports, before touching firstdiv for them, and commit what it writes.

For every program of the batch: ``diagnose(stop_at_first=False)`` on the correct program at each seed (its status,
and each instrument's FAIL and WARN with what it said); for every bug variant, the owning instrument (localized: its
first divergence names the bug's place) and plain ``diagnose`` (localized: its first divergence, whichever instrument
found it, names the bug's place and, where the bug declares one, its kind; batches up to public-21 were scored on the
place alone). An instrument or diagnose that raises is recorded as RAISED, never dropped.

The results are appended, as one batch, to ``first_contact.json`` beside this file, with the firstdiv commit they
were measured on; a batch already in the ledger is refused (first contact happens once). Rates printed at the end.

    python tests/realworld/first_contact.py --batch public-1 [--seeds 3] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import torch
from _api import load_dir
from _gate import localized, run_bug, run_correct

import firstdiv

LEDGER = HERE / "first_contact.json"


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, check=False).stdout.strip()

    return git("rev-parse", "HEAD") + (" (with uncommitted changes)" if git("status", "--porcelain", "--", "src") else "")


def _correct(module, seed: int) -> dict:
    t0 = time.perf_counter()
    try:
        status, verdicts = run_correct(module.build(seed))
    except Exception as exc:  # noqa: BLE001 - diagnose raising on a correct program is a finding of its own
        return {"seed": seed, "diagnose": "RAISED", "error": f"{type(exc).__name__}: {str(exc)[:300]}",
                "seconds": round(time.perf_counter() - t0, 1)}
    return {"seed": seed, "diagnose": status, "seconds": round(time.perf_counter() - t0, 1),
            "fail": {k: v.summary for k, v in verdicts.items() if v.status == "FAIL"},
            "warn": {k: v.summary for k, v in verdicts.items() if v.status == "WARN"}}


def diagnose_bug(bug) -> dict:
    try:
        ws = firstdiv.diagnose(**{k: v for k, v in bug.build(0).evidence().items() if k != "loader"})
    except Exception as exc:  # noqa: BLE001
        return {"status": "RAISED", "error": f"{type(exc).__name__}: {str(exc)[:300]}", "localized": False}
    first = ws.details.get("first_divergence") or {}
    where = f"{first.get('instrument_where') or ''} {first.get('where') or ''}"
    return {"status": ws.status.value, "instrument": first.get("instrument"), "where": where.strip() or None,
            "kind": first.get("kind"), "localized": bool(first) and all(w in where for w in bug.where)
            and (not bug.kind or bug.kind in (first.get("kind") or ""))}


def _bug(bug) -> dict:
    v = run_bug(bug)
    return {"name": bug.name, "instrument": bug.instrument, "expected_where": list(bug.where),
            "owning": {"status": v.status, "where": v.where, "kind": v.kind, "summary": v.summary,
                       "localized": localized(bug, v)},
            "diagnose": diagnose_bug(bug)}


def _rates(programs: dict) -> dict:
    runs = [r for p in programs.values() for r in p["correct"]]
    bugs = [b for p in programs.values() for b in p["bugs"]]
    return {"programs": len(programs), "correct_runs": len(runs),
            "correct_runs_failed": sum(r["diagnose"] in ("FAIL", "RAISED") for r in runs),
            "correct_runs_passed": sum(r["diagnose"] == "PASS" for r in runs),
            "programs_failed_at_every_seed": sum(all(r["diagnose"] in ("FAIL", "RAISED") for r in p["correct"])
                                                 for p in programs.values()),
            "bugs": len(bugs), "bugs_localized_by_owner": sum(b["owning"]["localized"] for b in bugs),
            "bugs_localized_by_diagnose": sum(b["diagnose"]["localized"] for b in bugs)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", required=True, help="the batch's name in the ledger, e.g. public-1")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--only", default="", help="comma-separated program names (default: every port not yet measured)")
    args = p.parse_args()
    ledger = json.loads(LEDGER.read_text()) if LEDGER.exists() else {"batches": []}
    if any(b["batch"] == args.batch for b in ledger["batches"]):
        sys.exit(f"batch {args.batch!r} is in the ledger already: first contact happens once")
    seen = {name for b in ledger["batches"] for name in b["programs"]}
    ports = load_dir(HERE / "public", "realworld_public")
    names = [n for n in (args.only.split(",") if args.only else sorted(ports)) if n and n not in seen]
    torch.set_num_threads(1)
    programs = {}
    for name in names:
        try:
            programs[name] = {"correct": [_correct(ports[name], s) for s in range(args.seeds)],
                              "bugs": [_bug(b) for b in ports[name].BUGS]}
        except Exception:  # noqa: BLE001 - the ledger keeps the program with why it could not be measured
            programs[name] = {"correct": [], "bugs": [], "error": traceback.format_exc(limit=3)[-600:]}
        print(name, json.dumps(_rates({name: programs[name]})), flush=True)
    batch = {"batch": args.batch, "date": datetime.date.today().isoformat(), "firstdiv_commit": _commit(),
             "seeds": args.seeds, "rates": _rates(programs), "programs": programs}
    ledger["batches"].append(batch)
    LEDGER.write_text(json.dumps(ledger, indent=1, sort_keys=True) + "\n")
    print(json.dumps(batch["rates"], indent=1))


if __name__ == "__main__":
    main()
