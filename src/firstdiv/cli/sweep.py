"""``firstdiv sweep``: a workload (``builtin:mlp``, ``file.py:fn``, ``module:fn``) or, after ``--``, a command run as
a child process per seed: ``firstdiv sweep --name base --seeds 0-11 -- python train.py --seed {seed} --lr {lr}``."""

from __future__ import annotations

from typing import Any

import click

from ..errors import InvalidArgument
from ._common import EXIT_FOUND, EXIT_OK, emit, json_option, show_progress, store_option


class _SweepCommand(click.Command):
    """Notes whether the arguments hold ``--``: what follows it is a command, even a single word."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["firstdiv_sweep_command"] = "--" in args
        return super().parse_args(ctx, args)


@click.command("sweep", cls=_SweepCommand)
@click.argument("target", nargs=-1, type=click.UNPROCESSED, metavar="TARGET | -- COMMAND...")
@click.option("--seeds", default="0-11", show_default=True, help="Seeds: 0-11, 0,3,5 or 0-3,8.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a config key (repeatable); a "
              "command's {KEY} placeholders take these values.")
@click.option("--name", default=None, help="Sweep name (default: derived from the changed config keys).")
@click.option("--backend", default="serial", show_default=True, help="serial, process, vectorized or ray.")
@click.option("--workers", type=int, default=None, help="Parallel workers: process/ray (default: CPU count); vectorized (default 1: one process).")
@click.option("--address", default=None, help="Ray cluster address for --backend ray (default: start a local Ray).")
@click.option("--chunk", type=int, default=None, help="Seeds trained at once by --backend vectorized (default: by memory).")
@click.option("--timeout", type=int, default=None, metavar="S", help="A command: kill a run still going after S "
              "seconds (a failed run).")
@click.option("--hypothesis", default=None, help="What you expect, declared before the runs.")
@click.option("--success", default=None, help="Gradeable criterion, e.g. 'val_loss delta within noise'.")
@click.option("--checkpoint-policy", default=None, help="Declared checkpoint selection: last, best or best:patience=N.")
@click.option("--force", is_flag=True, help="Rerun seeds already recorded for this identity.")
@store_option
@json_option
@click.pass_context
def sweep_command(ctx: click.Context, target: tuple[str, ...], seeds: str, sets: tuple[str, ...], name: str | None,
                  backend: str, workers: int | None, address: str | None, chunk: int | None, timeout: int | None,
                  hypothesis: str | None, success: str | None, checkpoint_policy: str | None, force: bool,
                  store: str | None, as_json: bool) -> int:
    """Run TARGET (builtin:mlp, file.py:fn or module:fn), or the COMMAND after --, at many seeds; print the noise
    floor. A command gets {seed} and each --set KEY as {KEY}; its script reports with firstdiv.log(val_loss=...)."""
    # lab.sweep loads no scipy or torch at import: sweep() warms the backend (the process backend's fork server)
    # before it imports them and the workload
    from ..lab.sweep import sweep as run_sweep

    chosen = _target(target, bool(ctx.meta.get("firstdiv_sweep_command")), timeout)
    options = {k: v for k, v in (("address", address), ("chunk", chunk)) if v is not None} or None
    config = {"timeout": timeout} if timeout is not None else None
    result = run_sweep(chosen, seeds, config=config, sets=list(sets), name=name, store=store, backend=backend,
                       workers=workers, backend_options=options,
                       hypothesis=hypothesis, success=success, checkpoint_policy=checkpoint_policy, force=force,
                       progress=show_progress(as_json))
    trouble = bool(result.failed or result.diverged)
    emit(result, as_json, status="FAIL" if trouble else "OK", ok=not trouble)
    return EXIT_FOUND if trouble else EXIT_OK


def _target(args: tuple[str, ...], command: bool, timeout: int | None) -> Any:
    if command:
        if not args:
            raise InvalidArgument("Expected a command after --, like: firstdiv sweep -- python train.py --seed {seed}")
        return list(args)
    if len(args) != 1:
        raise InvalidArgument("Expected one TARGET (builtin:mlp, file.py:fn or module:fn) or a command after --, "
                              "like: firstdiv sweep -- python train.py --seed {seed}" if not args else
                              f"Expected one TARGET but got {len(args)} arguments {' '.join(args)!r}; put a command "
                              "after --: firstdiv sweep [OPTIONS] -- python train.py --seed {seed}")
    if timeout is not None:
        raise InvalidArgument("--timeout applies to a command sweep (firstdiv sweep -- COMMAND), not to a workload "
                              "target: drop it")
    return args[0]
