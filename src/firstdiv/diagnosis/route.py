"""Route a symptom to the instrument to reach for first (the appendix's routing table, chapter 31's failures).

``route("loss is flat")`` matches free text against every phrasing of :data:`._routing_table.ROUTES` and returns
a :class:`Route` report whose ``details["matches"]`` rank the routes: the symptom phrasing matched, the contract
to check first, the instruments by their firstdiv names, what to look at, the evidence packet to capture, the
distinguishing experiment, when to stop, and the exact call. Routing is not a verdict: ``first_divergence`` is
always None. PASS = at least one strong match, WARN = only weak ones, SKIPPED = nothing matched (the reason gives
example phrasings). :func:`routes` is the reverse view: each instrument and the symptoms it owns.

Matching is deterministic, offline and explainable (no model, no network):

1. normalize: NFKC, lower case, contractions expanded ("won't" -> "will not");
2. concepts: the ordered :data:`~._routing_table.SYNONYMS` rewrite synonyms to one upper-case token each
   ("GPU at 30%" -> ``GPU IDLE``, "out of memory" -> ``OOM``, "recompiles" -> ``RECOMPILE``);
3. the remaining words lose stop words and are stemmed ("moves" -> "mov");
4. each phrasing scores ``0.75 * recall + 0.25 * precision`` over those tokens, each weighted by its rarity across
   routes (``1 + ln(routes / routes using it)``: "OOM" weighs more than "LOSS"), plus 0.1 when the phrasing's
   tokens appear contiguously in the text. A route scores its best phrasing; strong >= 0.6, weak >= 0.35.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from .._book import ESCALATION, PACKETS, STOP_DEBUGGING
from ..errors import InvalidArgument
from ..report import Finding, Report, Status
from ._routing_table import INSTRUMENTS, ROUTES, SYNONYMS, RouteSpec

__all__ = ["EXAMPLES", "Route", "route", "routes"]

_NAME = "route"
STRONG, WEAK, _CONTIGUOUS_BONUS = 0.6, 0.35, 0.1
#: shown when nothing matches: one phrasing per contract family
EXAMPLES = ("loss is flat", "GPU is idle", "CUDA out of memory", "grad is None", "mat1 and mat2 shapes cannot be multiplied",
            "a future token changes an earlier logit", "compiled model pauses on new sequence lengths",
            "new config improves one run by 0.001", "the exported model differs")

_CONTRACTIONS = ((r"\bwon'?t\b", "will not"), (r"\bcan'?t\b", "can not"), (r"\bcannot\b", "can not"),
                 (r"\bain'?t\b", "is not"), (r"\b(\w+)n't\b", r"\1 not"),
                 (r"\b(does|do|did|is|are|was|were|has|have|had|would|should|could)nt\b", r"\1 not"))
_STOPWORDS = frozenset((
    "a", "an", "the", "is", "are", "was", "were", "be", "been", "being", "am", "my", "our", "your", "their", "his",
    "her", "its", "it", "this", "that", "these", "those", "of", "in", "on", "at", "to", "for", "with", "by", "from",
    "and", "or", "but", "so", "as", "if", "when", "while", "do", "does", "did", "done", "has", "have", "had", "having",
    "just", "very", "really", "still", "even", "also", "then", "than", "there", "here", "what", "which", "who", "whom",
    "how", "why", "can", "could", "should", "would", "will", "shall", "may", "might", "must", "me", "we", "us", "you",
    "they", "i", "he", "she", "them", "him", "get", "gets", "got", "getting", "seem", "seems", "seemed", "look",
    "looks", "looked", "like", "some", "any", "about", "into", "onto", "over", "out", "off", "up", "down", "only",
    "same", "not", "no", "yet", "again", "each", "per", "whenever", "whatever", "model", "models", "network", "net",
    "now", "ever", "too", "much", "many", "more", "most", "lot", "lots", "kind", "sort", "thing", "things", "something",
    "anything", "everything", "way", "please", "help", "hi", "hello", "one"
))
_WORD = re.compile(r"[A-Za-z0-9_]+")


# --- normalization ----------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _compiled() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((f" {tokens} ", re.compile("|".join(f"(?:{p})" for p in patterns))) for tokens, patterns in SYNONYMS)


def _stem(word: str) -> str:
    """A deliberately small suffix stripper: "moves"/"moved"/"moving" -> "mov", "losses" -> "loss"."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not (suffix == "s" and word.endswith("ss")):
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def tokens(text: str) -> list[str]:
    """Concept tokens (upper case) and stemmed content words of ``text``, in order."""
    out = unicodedata.normalize("NFKC", text).replace("\u2019", "'").replace("\u2018", "'").lower()
    for pattern, repl in _CONTRACTIONS:
        out = re.sub(pattern, repl, out)
    out = " " + re.sub(r"\s+", " ", out) + " "
    for repl, pattern in _compiled():
        out = pattern.sub(repl, out)
    words: list[str] = []
    for word in _WORD.findall(out):
        if word.isupper():
            words.append(word)
        elif len(word) > 1 and not word.isdigit() and word not in _STOPWORDS:
            words.append(_stem(word))
    return words


# --- scoring -----------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _index() -> tuple[tuple[tuple[RouteSpec, tuple[tuple[str, tuple[str, ...]], ...]], ...], dict[str, float]]:
    """Every route with its tokenized phrasings, and each token's weight (rarer across routes = heavier)."""
    table = tuple((spec, tuple((p, tuple(tokens(p))) for p in spec.phrasings)) for spec in ROUTES)
    df: dict[str, int] = {}
    for _, phrasings in table:
        for tok in {t for _, toks in phrasings for t in toks}:
            df[tok] = df.get(tok, 0) + 1
    return table, {tok: 1.0 + math.log(len(table) / n) for tok, n in df.items()}


def _contiguous(needle: tuple[str, ...], hay: list[str]) -> bool:
    n = len(needle)
    return n >= 2 and any(tuple(hay[i:i + n]) == needle for i in range(len(hay) - n + 1))


def _score(phrase: tuple[str, ...], text: list[str], weights: dict[str, float]) -> tuple[float, list[str]]:
    if not phrase or not text:
        return 0.0, []
    have, want = set(text), set(phrase)
    shared = sorted(want & have)
    if not shared:
        return 0.0, []
    hit = sum(weights.get(t, 1.0) for t in shared)
    recall = hit / sum(weights.get(t, 1.0) for t in want)
    precision = hit / sum(weights.get(t, 1.0) for t in have)
    bonus = _CONTIGUOUS_BONUS if _contiguous(phrase, text) else 0.0
    return min(1.0, 0.75 * recall + 0.25 * precision + bonus), shared


def _ranked(words: list[str]) -> list[tuple[float, int, RouteSpec, str, list[str]]]:
    """(score, table order, route, phrasing matched, tokens shared) for every route scoring above zero, best first."""
    table, weights = _index()
    out = []
    for order, (spec, phrasings) in enumerate(table):
        best = max(((*_score(toks, words, weights), p) for p, toks in phrasings), key=lambda s: s[0])
        if best[0] > 0:
            out.append((round(best[0], 4), order, spec, best[2], best[1]))
    out.sort(key=lambda r: (-r[0], r[1]))
    return out


def _match(rank: int, score: float, spec: RouteSpec, phrasing: str, shared: list[str]) -> dict[str, Any]:
    return {"rank": rank, "id": spec.id, "score": score, "strength": "strong" if score >= STRONG else "weak",
            "symptom": spec.symptom, "matched_phrasing": phrasing, "matched_terms": shared, "section": spec.section,
            "contract": spec.contract, "instruments": list(spec.instruments), "focus": spec.focus,
            "packet": spec.packet, "packet_items": list(PACKETS[spec.packet]),
            "hypotheses": {"A": spec.hypotheses[0], "B": spec.hypotheses[1]}, "experiment": spec.experiment,
            "stop_when": spec.stop_when, "call": spec.call, "command": spec.command}


# --- public API --------------------------------------------------------------------------------------------------------
class Route(Report):
    """The ranked routes for one symptom; ``details["matches"]`` holds them (see the module docstring)."""

    @property
    def matches(self) -> list[dict[str, Any]]:
        return list(self.details.get("matches", []))

    def __rich_body__(self) -> Iterable[Any]:
        from ..render.worksheet import render_route

        return render_route(self)


def route(text: str, *, top: int | None = None) -> Route:
    """Match a free-text symptom to the routing table; ``top`` keeps only the best ``top`` matches (None = all).

    Raises InvalidArgument for a non-string or blank ``text``, or a ``top`` below 1.
    """
    if not isinstance(text, str):
        raise InvalidArgument(f"Expected `text` to be a symptom string but got {type(text).__name__}")
    if not text.strip():
        raise InvalidArgument('Expected `text` to describe a symptom, e.g. "loss is flat", but got an empty string')
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise InvalidArgument(f"Expected `top` to be a positive integer or None but got {top!r}")
    words = tokens(text)
    ranked = _ranked(words)
    kept = [r for r in ranked if r[0] >= WEAK]
    details: dict[str, Any] = {"symptom": text, "tokens": words, "total_matches": len(kept),
                               "thresholds": {"strong": STRONG, "weak": WEAK}}
    if not kept:
        near = [r[3] for r in ranked[:3]]
        details.update(matches=[], did_you_mean=near or list(EXAMPLES[:3]), examples=list(EXAMPLES))
        return Route(_NAME, Status.SKIPPED, reason=_no_match_reason(text, near), details=details)
    shown = kept if top is None else kept[:top]
    matches = [_match(i, score, spec, phrasing, shared) for i, (score, _, spec, phrasing, shared) in enumerate(shown, 1)]
    findings = tuple(Finding(m["id"], "route", Status.PASS if m["strength"] == "strong" else Status.WARN,
                             f'"{m["matched_phrasing"]}" -> {", ".join(m["instruments"])} (contract: {m["contract"]})',
                             {"score": m["score"], "matched_terms": m["matched_terms"]}) for m in matches)
    details.update(matches=matches, escalation=list(ESCALATION), stop_debugging=list(STOP_DEBUGGING))
    status = Status.PASS if kept[0][0] >= STRONG else Status.WARN
    return Route(_NAME, status, findings=findings, details=details)


def routes() -> dict[str, list[str]]:
    """The reverse view: every instrument (INSTRUMENTS order) -> the symptoms it owns, routes that run it first
    listed before routes that name it as a follow-up."""
    out: dict[str, list[str]] = {name: [] for name in INSTRUMENTS}
    for first in (True, False):
        for spec in ROUTES:
            for i, name in enumerate(spec.instruments):
                if (i == 0) is first:
                    out[name].append(spec.symptom)
    return out


def _no_match_reason(text: str, near: list[str]) -> str:
    examples = ", ".join(f'"{e}"' for e in EXAMPLES)
    hint = (" Closest phrasings: " + "; ".join(f'"{p}"' for p in near) + ".") if near else ""
    return (f"No route matches {text!r}: describe what you observed in a few words, e.g. {examples}.{hint} "
            f"`firstdiv route --list` shows every symptom each instrument owns.")
