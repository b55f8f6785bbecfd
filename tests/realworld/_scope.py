"""How much of the public corpus the per-program tests run (``test_public_gate.py``, ``test_public_programs.py``).

The whole corpus is hundreds of programs, each diagnosed at three seeds with every bug variant: hours of CPU on the
CI machine's two cores. ``make test`` therefore runs a fixed sample, the same for every run of the same tree, and
``make test-corpus`` (``FIRSTDIV_CORPUS=full``) runs all of it:

- ``sample`` (the default): the programs whose name falls in one of :data:`BUCKETS` hash buckets (CRC-32, so the
  choice does not move between machines or Python versions), each correct one at one seed that rotates with the name
  (all three seeds appear across the sample), with every bug variant and port check of those programs; plus every
  program with a known true finding, so each strict expected failure keeps being checked;
- ``full``: every program at seeds 0, 1 and 2, every bug, every port check.

The cheap static checks (headers, licenses, bug declarations, the first-contact ledger) always cover every port.
"""

from __future__ import annotations

import os
import zlib

#: the variable that selects the scope, and its values
VARIABLE = "FIRSTDIV_CORPUS"
SCOPES = ("sample", "full")
#: the sample: programs in ``BUCKETS`` buckets out of ``OF``
BUCKETS, OF = 1, 5
SEEDS = (0, 1, 2)


def scope() -> str:
    """The scope the environment selects; a value other than those of :data:`SCOPES` is refused by name."""
    value = os.environ.get(VARIABLE, "sample").strip().lower() or "sample"
    if value not in SCOPES:
        raise ValueError(f"{VARIABLE}={value!r} is not a corpus scope: use one of {', '.join(SCOPES)}")
    return value


def _hash(name: str) -> int:
    return zlib.crc32(name.encode("utf-8"))


def selected(name: str, always: frozenset[str] = frozenset()) -> bool:
    """Whether program ``name`` runs in this scope (``always``: programs the sample keeps whatever their bucket)."""
    return scope() == "full" or name in always or _hash(name) % OF < BUCKETS


def seeds(name: str) -> tuple[int, ...]:
    """The seeds its correct runs use: all three in ``full``, one rotating with the name in ``sample``."""
    return SEEDS if scope() == "full" else (SEEDS[_hash(name) // OF % len(SEEDS)],)


def line(selected_names: int, total: int) -> str:
    """One line for the suite's summary: what this run covered and how to run the rest."""
    if scope() == "full":
        return f"public corpus: all {total} programs at seeds {', '.join(map(str, SEEDS))} ({VARIABLE}=full)"
    return (f"public corpus: a fixed sample of {selected_names} of {total} programs, one seed each; "
            f"`make test-corpus` ({VARIABLE}=full) runs all of them at three seeds")
