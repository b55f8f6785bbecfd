"""``mlflow:EXPERIMENT?KEY=VALUE&...``: which MLflow runs one side of a comparison is.

Keys: ``sweep=NAME`` (runs firstdiv pushed from sweep NAME: tag ``firstdiv.sweep``), ``run_name=NAME`` (MLflow's
run name), ``tag.KEY=VALUE`` and ``param.KEY=VALUE`` (a tag or param equal to VALUE), and ``tag=VALUE`` (a run
labelled VALUE: some tag of the user's or firstdiv's, whatever its key, has the value VALUE, or a tag is named
VALUE; MLflow's own ``mlflow.*`` tags do not count). Conditions joined by ``&``
must all hold; values are URL-decoded (``%26`` for ``&``, ``%3D`` for ``=``, ``+`` or ``%20`` for a space).
No query: every active run of the experiment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote

from ..errors import InvalidArgument
from ._mlflow_records import RUN_NAME_TAG, SWEEP_TAG

PREFIX = "mlflow:"
SYNTAX = "mlflow:EXPERIMENT?sweep=NAME | run_name=NAME | tag=VALUE | tag.KEY=VALUE | param.KEY=VALUE, joined by &"


def is_ref(ref: Any) -> bool:
    return isinstance(ref, str) and ref.startswith(PREFIX)


@dataclass(frozen=True)
class Query:
    """One side's selection: the experiment, and the tags and params its runs must carry."""

    ref: str
    experiment: str
    tags: tuple[tuple[str, str], ...] = ()
    params: tuple[tuple[str, str], ...] = ()
    labels: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return self.ref.partition("?")[2]

    def filter_string(self) -> str:
        """MLflow's search filter for the conditions it can quote safely (the rest are checked by :meth:`matches`)."""
        parts = [f"{kind}.`{k}` = {_quoted(v)}" for kind, pairs in (("tags", self.tags), ("params", self.params))
                 for k, v in pairs if "`" not in k and _quoted(v) is not None]
        return " and ".join(parts)

    def matches(self, run: Any) -> bool:
        tags, params = run.data.tags, run.data.params
        return (all(tags.get(k) == v for k, v in self.tags) and all(params.get(k) == v for k, v in self.params)
                and all(_labelled(tags, label) for label in self.labels))


def _labelled(tags: dict[str, str], label: str) -> bool:
    """``tag=LABEL``: a tag other than MLflow's own has the value LABEL, or is named LABEL."""
    return any(not k.startswith("mlflow.") and (v == label or k == label) for k, v in tags.items())


def _quoted(value: str) -> str | None:
    for q in ("'", '"'):
        if q not in value and "\\" not in value:
            return f"{q}{value}{q}"
    return None


def parse(ref: str) -> Query:
    """``mlflow:EXP?...`` as a Query; anything else is a one-line error showing the syntax."""
    if not is_ref(ref):
        raise InvalidArgument(f"Expected an MLflow reference like {SYNTAX} but got {ref!r}")
    experiment, _, query = ref[len(PREFIX):].partition("?")
    experiment = unquote(experiment)
    if not experiment.strip():
        raise InvalidArgument(f"{ref!r} names no experiment; write {SYNTAX}")
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True) if query else []
    except ValueError:
        raise InvalidArgument(f"Cannot read the query of {ref!r}: write {SYNTAX}") from None
    conditions: dict[str, dict[str, str]] = {"tags": {}, "params": {}}
    labels: list[str] = []
    for name, value in pairs:
        if name == "tag":
            if not value:
                raise InvalidArgument(f"{ref!r}: tag= needs a value, as in tag=base or tag.KEY=VALUE; write {SYNTAX}")
            labels.append(value)
            continue
        kind, k = _condition(ref, name)
        if k in conditions[kind]:
            raise InvalidArgument(f"{ref!r} gives {name} twice; a run has one value for it, so keep one condition")
        conditions[kind][k] = value
    return Query(ref, experiment, tuple(conditions["tags"].items()), tuple(conditions["params"].items()), tuple(labels))


def _condition(ref: str, name: str) -> tuple[str, str]:
    """("tags" or "params", the key) a query key selects on."""
    if name == "sweep":
        return "tags", SWEEP_TAG
    if name == "run_name":
        return "tags", RUN_NAME_TAG
    kind, dot, k = name.partition(".")
    if dot and k and kind in ("tag", "param"):
        return kind + "s", k
    if name == "param":
        raise InvalidArgument(f"{ref!r}: {name}= needs the {name}'s name, as in {name}.KEY=VALUE "
                              f"(e.g. {name}.variant=base); write {SYNTAX}")
    raise InvalidArgument(f"{ref!r}: unknown key {name!r}; write {SYNTAX}")
