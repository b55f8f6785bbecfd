"""stage_trace on tabular pipelines: CSV-like rows (dicts of column -> value, missing values as NaN) through
imputation with train-set medians, standardization with train-set statistics, one-hot encoding of a
categorical column and conversion to a ``(features, label)`` tuple; the statistics are declared as the ones the
model was trained with (saved next to the checkpoint)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import torch
from _cases import Case

from firstdiv import stage_trace

NUMERIC = ["age", "income", "tenure"]
CITIES = ["lyon", "paris", "nice"]


def rows(seed, n, shift=0.0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        age = float(rng.normal(40 + 8 * shift, 12))
        out.append({"age": age if rng.random() > 0.2 else math.nan, "income": float(rng.lognormal(10.5 + shift, 0.4)),
                    "tenure": float(rng.integers(0, 20)), "city": CITIES[int(rng.integers(0, 3))],
                    "churned": int(rng.random() < 0.3)})
    return out


def fit(train, columns):
    """Medians, means and stds per numeric column, on the given rows."""
    cols = {c: np.array([r[c] for r in train if not math.isnan(r[c])]) for c in columns}
    return ({c: float(np.median(v)) for c, v in cols.items()}, np.array([cols[c].mean() for c in columns]),
            np.array([cols[c].std() for c in columns]))


class ToVector:
    def __call__(self, row):
        return {"num": np.array([row[c] for c in NUMERIC]), "city": row["city"], "label": row["churned"]}


class Impute:
    def __init__(self, medians):
        self.fill = np.array([medians[c] for c in NUMERIC])

    def __call__(self, row):
        return {**row, "num": np.where(np.isnan(row["num"]), self.fill, row["num"])}


class Standardize:
    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def __call__(self, row):
        return {**row, "num": (row["num"] - self.mean) / self.std}


class OneHot:
    def __call__(self, row):
        onehot = np.eye(len(CITIES))[CITIES.index(row["city"])]
        return {"features": np.concatenate([row["num"], onehot]).astype(np.float32), "label": row["label"]}


def to_tensor(row):
    return torch.from_numpy(row["features"]), torch.tensor(row["label"])


class ColumnStandardize:
    """Column-wise on the row dict (pandas style); ``columns`` from the CSV header's numeric columns."""

    def __init__(self, train, columns):
        self.columns = columns
        self.stats = {c: (np.mean([r[c] for r in train if not math.isnan(r[c])]),
                          np.std([r[c] for r in train if not math.isnan(r[c])])) for c in columns}

    def __call__(self, row):
        return {**row, **{c: (row[c] - m) / s for c, (m, s) in self.stats.items()}}


class ColumnImpute:
    def __init__(self, medians):
        self.medians = medians

    def __call__(self, row):
        return {**row, **{c: self.medians[c] if math.isnan(row[c]) else row[c] for c in self.medians}}


def program(seed, *, fit_on="train"):
    train, test = rows(seed, 200), rows(seed + 100, 60, shift=0.5)
    medians, mean, std = fit(train, NUMERIC)
    _, fit_mean, fit_std = fit(test if fit_on == "test" else train, NUMERIC)
    stages = [("to_vector", ToVector()), ("impute", Impute(medians)), ("standardize", Standardize(fit_mean, fit_std)),
              ("one_hot", OneHot()), ("to_tensor", to_tensor)]
    sample = next(r for r in test if math.isnan(r["age"]))
    return SimpleNamespace(sample=sample, stages=stages, declared={"mean": mean.tolist(), "std": std.tolist()})


def column_program(seed, *, columns=tuple(NUMERIC)):
    train = rows(seed, 200)
    medians, _, _ = fit(train, NUMERIC)
    stages = [("impute", ColumnImpute(medians)), ("standardize", ColumnStandardize(train, list(columns))),
              ("one_hot", lambda r: {**{c: r[c] for c in NUMERIC}, **{f"city_{c}": float(r["city"] == c) for c in CITIES},
                                     "churned": r["churned"]}),
              ("to_tensor", lambda r: (torch.tensor([v for k, v in r.items() if k != "churned"], dtype=torch.float32),
                                       torch.tensor(r["churned"])))]
    return SimpleNamespace(sample=rows(seed + 7, 5)[seed % 5], stages=stages)


def trace(p):
    return stage_trace(p.sample, p.stages, fields=("features", "label"), label_key="churned",
                       contracts={"standardize": {"num": {"normalized": p.declared}}})


def trace_columns(p):
    return stage_trace(p.sample, p.stages, fields=("features", "churned"), label_key="churned")


CASES = [
    Case("vector_pipeline_train_stats", "stage_trace", program, trace),
    Case("column_pipeline", "stage_trace", column_program, trace_columns),
    Case("standardize_refit_on_test", "stage_trace", lambda s: program(s, fit_on="test"), trace,
         bug=True, where=("standardize",), kind="normalization"),
    Case("standardize_scales_the_label", "stage_trace", lambda s: column_program(s, columns=(*NUMERIC, "churned")),
         trace_columns, bug=True, where=("standardize",), kind="label_changed"),
]
