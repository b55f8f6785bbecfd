"""Which key, variable or flag names hold a credential (the rules are listed in :mod:`firstdiv._secrets`).

A name is split into lower-case words at ``_``, ``-``, spaces and case changes, after its last dot:
``accessToken`` -> access token, ``X-Amz-Signature`` -> x amz signature, ``tokenizer.pad_token`` ->
pad token. Words, not substrings, decide, so ``sort_key`` and ``max_tokens`` are told apart from
``api_key`` and ``hf_token``; where a name is ambiguous (``s3_key``) it counts as a secret, because a
leaked credential costs more than a hidden column name.
"""

from __future__ import annotations

import functools
import re

#: a name containing one of these (words joined) is a secret unless its last word says it is about one
_SUBSTRINGS = ("password", "passwd", "passphrase", "secret", "credential")
#: one-word names that are secrets
_EXACT = frozenset({"token", "pwd", "auth", "authorization", "cookie", "cookies", "apikey", "sshpass", "dsn"})
#: one-word names that are secrets only as a URL query parameter (``?key=``, ``&sig=``): in a training
#: log ``key=val_loss`` and ``sig=0.01`` are not
_QUERY_ONLY = frozenset({"key", "sig", "signature", "pass", "pw"})
#: a last word that makes a longer name a secret (``refresh_token``, ``account_key``, ``set_cookie``)
_LAST_WORDS = frozenset({"token", "key", "pwd", "auth", "authorization", "cookie", "cookies", "apikey", "dsn",
                         "signature", "pat", "pw", "pass"})
#: ... unless the word before it says what kind of non-secret it is
_NOT_SECRET_BEFORE = {
    # tokenizer and generation settings
    "token": frozenset({"pad", "eos", "bos", "unk", "sep", "cls", "mask", "start", "end", "sos", "eot", "eod",
                        "special", "image", "audio", "video", "unknown", "begin", "next", "prev", "previous", "last",
                        "first", "current", "cur", "new", "predicted", "pred", "generated", "sampled", "input",
                        "output", "target", "max", "min", "num", "changed", "per"}),
    # passes of a model or a loop (forward_pass, second_pass)
    "pass": frozenset({"forward", "backward", "fwd", "bwd", "first", "second", "third", "last", "final", "single",
                       "multi", "one", "two", "num", "eval", "train", "val", "test", "max", "min", "next", "prev",
                       "each", "per", "all", "high", "low", "band"}),
    # keys of tables, dicts, caches, sorts and attention
    "key": frozenset({"sort", "primary", "foreign", "partition", "cache", "group", "lookup", "hash", "dict", "index",
                      "metric", "monitor", "batch", "input", "output", "label", "target", "text", "image", "audio",
                      "video", "column", "col", "field", "row", "join", "shard", "sharding", "split", "dataset",
                      "data", "sample", "feature", "config", "state", "layer", "module", "param", "name", "map",
                      "public", "sequence", "seq", "cluster", "routing", "prompt", "message", "record", "event",
                      "composite", "unique", "natural", "object", "blob", "file", "path", "query", "attn",
                      "attention", "kv", "sorting", "grouping", "dedup", "playbook", "in", "out", "src", "tgt"}),
}
#: a last word saying the value is about a secret, not the secret (``password_file``, ``token_type``)
_NOT_SECRET_LAST = frozenset({"file", "path", "dir", "stdin", "env", "cmd", "command", "prompt", "policy", "length",
                              "len", "name", "id", "ids", "type", "types", "required", "hint", "count", "dim"})


def name_words(name: str) -> list[str]:
    """``"X-Amz-Signature"`` -> ``["x", "amz", "signature"]``; ``"HFToken"`` -> ``["hf", "token"]``."""
    last = name.rsplit(".", 1)[-1]
    last = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", last)
    last = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", last)
    return [w for w in re.split(r"[_\-\s]+", last.lower()) if w]


@functools.lru_cache(maxsize=4096)  # a log repeats its names (step=, loss=) thousands of times
def secret_name(name: str, *, query: bool = False) -> bool:
    """True for a key, variable or flag name whose value is a credential.

    ``query`` says the name is a URL query parameter, where short names (``key``, ``sig``) are secrets.
    """
    words = name_words(name)
    if not words:
        return False
    last, joined = words[-1], "".join(words)
    if len(words) > 1 and last in _NOT_SECRET_LAST:
        return False
    if any(s in joined for s in _SUBSTRINGS):
        return True
    if len(words) == 1:
        return last in _EXACT or (query and last in _QUERY_ONLY)
    return last in _LAST_WORDS and words[-2] not in _NOT_SECRET_BEFORE.get(last, frozenset())
