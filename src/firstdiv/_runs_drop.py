"""`firstdiv runs --drop RUN_ID`: delete one stored run (a damaged one, typically) so that rerunning
its sweep records that seed again. The run id is the one a damage error names."""

from __future__ import annotations

import json

import click

from ._cli_common import EXIT_OK, echo
from .errors import InvalidArgument, NotFound


def drop_run(store: str | None, run_id: str, as_json: bool) -> int:
    """Drop run ``run_id`` from the store and say which sweeps will record its seed again."""
    from .lab.store import Store

    try:
        rid = int(run_id)
    except ValueError:
        raise InvalidArgument(f"Expected --drop RUN_ID to be a run's integer id (as an error names it) "
                              f"but got {run_id!r}") from None
    with Store(store, create=False) as st:
        dropped = st.drop_run(rid)
        path = st.path
    if dropped is None:
        raise NotFound(f"No run with id {rid} in {path}; the id is the one a damaged-run error names")
    identity, seed, sweeps = dropped
    if as_json:
        click.echo(json.dumps({"store": str(path), "dropped": rid, "identity": identity, "seed": seed,
                               "sweeps": sweeps}, indent=2))
        return EXIT_OK
    held = f" (sweeps {', '.join(repr(s) for s in sweeps)})" if sweeps else ""
    echo(f"dropped run {rid}, seed {seed} of identity {identity}{held}; rerun the sweep to record seed {seed} again")
    return EXIT_OK
