"""Rewrite ``_public_missed.py``: run every public bug through its owning instrument and plain ``diagnose`` (the
gate's own jobs, two worker processes) and list those not localized by both, each with what was seen. Run it when
a change may localize more bugs (the gate does not run the listed ones: this script says which to take off), never to hide a
regression: the list only shrinks in review.

    python tests/realworld/public_misses.py [--only NAME,...]

``--only`` runs those programs' bugs alone and replaces their entries (a new batch, or the programs a change touched).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import pathlib
import pprint
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import _public_jobs as jobs
from _api import load_dir

HEADER = '''"""The public bugs firstdiv does not localize yet (by its owning instrument and by plain ``diagnose``), each with
what was seen: the expected failures ``test_public_gate.py`` does not run. Written by ``public_misses.py``."""

MISSED = '''


def _reason(out: dict) -> str:
    if "error" in out:
        return "the job raised: " + out["error"].strip().splitlines()[-1][:160]
    parts = [] if out["owner"] else [f"owner saw {out['owner_saw'][:140]}"]
    d = out["diagnose"]
    if not d["localized"]:
        parts.append(f"diagnose {d['status']} at {d.get('instrument')} {d.get('where') or ''}".strip())
    return "; ".join(parts)


def main() -> None:
    """Every program's bugs, or (``--only NAME,...``) those programs' bugs, their entries replaced in the list."""
    only = set(sys.argv[sys.argv.index("--only") + 1].split(",")) if "--only" in sys.argv else None
    public = load_dir(HERE / "public", "realworld_public")
    unknown = (only or set()) - set(public)
    if unknown:
        raise SystemExit(f"error: no public program named {', '.join(sorted(unknown))}: pass file stems of public/")
    cases = [(n, i, b.name) for n, m in public.items() for i, b in enumerate(m.BUGS) if only is None or n in only]
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as ex:
        outs = list(ex.map(jobs.bug, [n for n, _, _ in cases], [i for _, i, _ in cases], [True] * len(cases)))
    missed = {f"{n}.{b}": _reason(o) for (n, _, b), o in zip(cases, outs, strict=True)
              if "error" in o or not (o["owner"] and o["diagnose"]["localized"])}
    if only is not None:
        from _public_missed import MISSED

        missed |= {k: v for k, v in MISSED.items() if k.split(".")[0] not in only}
    (HERE / "_public_missed.py").write_text(HEADER + pprint.pformat(missed, width=118, sort_dicts=True) + "\n")
    print(f"{len(cases) - sum(k.split('.')[0] in {n for n, _, _ in cases} for k in missed)} of {len(cases)} bugs "
          f"localized by both; {len(missed)} listed")


if __name__ == "__main__":
    main()
