"""Scrub secrets from text and JSON before anything is stored or shown on a page (chapter 31: "Save the
exact error message without secrets").

Rules, applied by :class:`Scrubber` (:func:`scrub_text`, :func:`scrub_json`) to every string (and, in
JSON, every key and value). The secret's value goes, replaced by ``[redacted]``; what labels it stays,
so a reader sees what was there.

Tokens, replaced whole wherever they appear (:mod:`firstdiv._secret_shapes`):
  Hugging Face ``hf_…``; GitHub ``ghp_/gho_/ghu_/ghs_/ghr_…`` and ``github_pat_…``; OpenAI/Anthropic
  style ``sk-…`` (and Stripe ``sk_live_/sk_test_/rk_…``); AWS access key ids ``AKIA…``/``ASIA…``;
  Slack ``xox?-…``; Google ``AIza…`` and OAuth ``ya29.…``; GitLab ``glpat-…``; npm ``npm_…``; PyPI
  ``pypi-…``; Databricks ``dapi…``; JSON web tokens ``eyJ….….…``; ``-----BEGIN … PRIVATE KEY-----``
  blocks (also PGP ``… PRIVATE KEY BLOCK``; to the END line, or to the end of the text when cut off);
  and the vendor shapes of detect-secrets' regex plugins (Twilio, SendGrid, Telegram, Discord,
  Mailchimp, Square, Azure storage, Artifactory, Stripe, npm, Cloudant and SoftLayer URLs;
  :mod:`firstdiv._secret_vendor` says which plugins are left out and why).
Credentials kept apart from their label (the label stays, the value goes):
  webhook URLs (Slack, Discord, Teams: the path after the host goes); ``Bearer <token>``,
  ``Authorization: <scheme> <credential>``, ``Cookie:`` / ``Set-Cookie:`` (the rest of the line);
  ``scheme://user:<password>@host``, also with an empty user (``redis://:PW@host``) and with ``@`` in
  the password; ``mysql … -pPW``, ``sshpass -p PW``, ``curl -u user:PW``, ``docker login … -p PW``,
  ``redis-cli … -a PW``, ``openssl … -passin pass:PW``, ``wandb login KEY``; ``.netrc`` entries
  (``machine H login U password PW``); ``--NAME value`` flags and assignments ``NAME=value`` /
  ``NAME: value`` / ``"NAME": "value"`` whose NAME is secret-like. Names are split into words
  (``accessToken`` -> access token; :mod:`firstdiv._secret_names`): secret-like is a name containing
  password/passwd/passphrase/secret/credential, the one-word names token, pwd, auth, authorization,
  cookie, apikey, sshpass, dsn, and a longer name ending in the word token, key, pwd, pw, pass, auth,
  authorization, cookie, apikey, dsn, signature or pat (``HF_TOKEN``, ``refreshToken``, ``db_pass``,
  ``X-Amz-Signature``, ``AccountKey``, ``Set-Cookie``). As URL query parameters ``key``, ``sig``,
  ``signature``, ``pass`` and ``pw`` are secrets too (``?key=``, ``&sig=``), elsewhere not
  (``key=val_loss``). Not secrets: tokenizer and generation settings (``pad_token``, ``eos_token``,
  ``next_token``, ... ``max_tokens``, ``token_type_ids``), keys of tables, caches and sorts
  (``sort_key``, ``primary_key``, ``cache_key``, ``foreign_key``, ``public_key``, ...), passes of a
  model or loop (``forward_pass``, ``second_pass``), and names whose
  last word says they are about a secret (``password_file``, ``token_type``, ``secret_name``, ``key_id``).
JSON: a value under a secret-like key is replaced whole, whatever its type.
No environment dumps: a dict is an environment dump when its key is ``env``/``environ``/
  ``environment``/``env_vars``/``environment_variables``/``os.environ`` or when it holds two or more of
  PATH, HOME, USER, SHELL, PWD, LOGNAME, HOSTNAME, TERM, LANG. In a dump, every key shaped like an
  environment variable (``UPPER_CASE``) is dropped unless it is on the diagnostic allowlist below
  and not secret-like; lower-case keys (firstdiv's own environment summary: python, torch, device)
  are kept, scrubbed like any other value. A pasted dump in text (``NAME=value`` assignments naming
  two or more of the markers above, or any text under an env key) loses its non-allowlisted
  assignments the same way, wherever they stand: one a line, after ``export``/``declare -x``, after
  a log prefix (``[rank0]:``), or several on one line after other text; a line left with nothing
  but its prefix is dropped. Allowlist: names starting with CUDA_, CUBLAS_, CUDNN_,
  NCCL_, NVIDIA_, TORCH_, PYTORCH_, TORCHINDUCTOR_, TORCHDYNAMO_, OMP_, MKL_, OPENBLAS_, KMP_, XLA_,
  HF_, TRANSFORMERS_, TOKENIZERS_, and PYTHONHASHSEED, WORLD_SIZE, RANK, LOCAL_RANK, MASTER_PORT.
Run records and sweeps (:func:`scrub_record`, :func:`scrub_sweep_info`): a run's error, hypothesis and
  success criterion and a sweep's declared hypothesis and success criterion, before they are stored.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, TypeVar

from . import _secret_vendor
from ._secret_names import secret_name
from ._secret_shapes import FLAG, LABELLED, PRIVATE_KEY, TOKENS

__all__ = ["ENV_KEYS", "REDACTED", "Scrubber", "scrub_json", "scrub_record", "scrub_sweep_info", "scrub_text",
           "secret_name"]

REDACTED = "[redacted]"

_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]*"
_ASSIGNMENT = re.compile(
    rf"(?P<q>[\"']?)(?P<name>{_NAME})(?P=q)(?P<sep>\s*[=:]\s*)"
    r"(?P<value>\[redacted\]|\"[^\"\n]*\"|'[^'\n]*'|[^\s,;&\"'}\]\)]+)")
#: every shape needs one of these (a sign, a flag, a run of 11 token characters or a keyword): most strings
#: in a report's JSON ("grad norm 0.031", "layer1.weight") have none and skip the rules
_CANDIDATE = re.compile(r"[=:@]|(?<!\S)-|[A-Za-z0-9_\-]{11,}|(?i:bearer|password|begin)")
#: "Authorization: Bearer x": the scheme word is not the secret; the Bearer/header rules take the credential
_SCHEMES = frozenset({"basic", "bearer", "token", "digest"})
#: values that hold no credential: no value, a reference to where it lives ($HF_TOKEN, ${DB_PASSWORD}), a
#: placeholder (<your-token>, ***)
_NO_SECRET_VALUE = re.compile(r"(?i)(?:none|null|nil|true|false|undefined|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|<[^<>]*>|\*+)")

ENV_KEYS = frozenset({"env", "environ", "environment", "env_vars", "environment_variables", "os.environ"})
_ENV_MARKERS = frozenset({"PATH", "HOME", "USER", "SHELL", "PWD", "LOGNAME", "HOSTNAME", "TERM", "LANG"})
_ENV_VAR = re.compile(r"^[A-Z_][A-Z0-9_]*$")
#: one assignment of a pasted dump: at a line's start, after whitespace or a "[rank0]:" log prefix
_ENV_ASSIGN = re.compile(r"(?:^|(?<=[\s\]])|(?<=\]:))(?:(?:export|declare\s+-x)\s+)?(?P<name>[A-Z_][A-Z0-9_]*)=",
                         re.MULTILINE)
#: what is left of a dump's line once its assignments are gone, when nothing worth keeping is left
_BARE_LINE = re.compile(r"\s*(?:\[[^\]\n]*\]:?|\d+:)?\s*")
_ENV_ALLOW_PREFIXES = ("CUDA_", "CUBLAS_", "CUDNN_", "NCCL_", "NVIDIA_", "TORCH_", "PYTORCH_", "TORCHINDUCTOR_",
                       "TORCHDYNAMO_", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "XLA_", "HF_", "TRANSFORMERS_", "TOKENIZERS_")
_ENV_ALLOW = frozenset({"PYTHONHASHSEED", "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT"})


def _env_var_kept(name: str) -> bool:
    return (name in _ENV_ALLOW or name.startswith(_ENV_ALLOW_PREFIXES)) and not secret_name(name)


@dataclass
class Scrubber:
    """Scrubs text and JSON, counting what it removed (``redacted`` values, ``dropped`` env variables)."""

    redacted: int = 0
    dropped: int = 0

    def text(self, value: str) -> str:
        if not _CANDIDATE.search(value):
            return value
        value = self._env_lines(value)
        value = self._whole(PRIVATE_KEY, value)
        for pattern in LABELLED:
            value = self._labelled(pattern, value)
        value = self._whole(TOKENS, value)
        value = FLAG.sub(self._flag, value)
        # last: a vendor pattern that includes its label (Azure's "AccountKey=...") finds it already redacted
        return self._vendor(self._assignments(value))

    def _whole(self, pattern: re.Pattern[str], value: str) -> str:
        value, n = pattern.subn(REDACTED, value)
        self.redacted += n
        return value

    def _labelled(self, pattern: re.Pattern[str], value: str) -> str:
        value, n = pattern.subn(lambda m: m.group("keep") + REDACTED, value)
        self.redacted += n
        return value

    def _flag(self, m: re.Match[str]) -> str:
        value = m.group(0)[len(m.group("keep")):].strip("\"'")
        if not secret_name(m.group("name")) or _NO_SECRET_VALUE.fullmatch(value):
            return m.group(0)
        self.redacted += 1
        return m.group("keep") + REDACTED

    def _vendor(self, value: str) -> str:
        spans = _secret_vendor.spans(value)
        for start, end in reversed(spans):
            value = value[:start] + REDACTED + value[end:]
        self.redacted += len(spans)
        return value

    def _env_lines(self, value: str, force: bool = False) -> str:
        """Drop the non-allowlisted assignments of a pasted environment dump (module docstring)."""
        names = {m.group("name") for m in _ENV_ASSIGN.finditer(value)}
        if not names or not (force or len(_ENV_MARKERS & names) >= 2):
            return value
        out = []
        for line in value.splitlines(keepends=True):
            body = line.rstrip("\r\n")
            found = list(_ENV_ASSIGN.finditer(body))
            # an assignment's value runs to the next assignment on its line (PATH=/a:/b HOME=/root)
            ends = [m.start() for m in found[1:]] + [len(body)]
            kept = [body[m.start():end] for m, end in zip(found, ends) if _env_var_kept(m.group("name"))]
            gone = len(found) - len(kept)
            if not gone:
                out.append(line)
                continue
            self.dropped += gone
            rest = body[:found[0].start()] + "".join(kept)
            if not _BARE_LINE.fullmatch(rest):
                out.append(rest.rstrip() + line[len(body):])
        return "".join(out)

    def _assignments(self, text: str) -> str:
        out, pos, start = [], 0, 0
        while m := _ASSIGNMENT.search(text, start):
            value = m.group("value")
            query = not m.group("q") and m.start() > 0 and text[m.start() - 1] in "?&"  # ?key=..., &sig=...
            bare = value.strip("\"'")
            if (not secret_name(m.group("name"), query=query) or bare in ("", REDACTED) or value.lower() in _SCHEMES
                    or _NO_SECRET_VALUE.fullmatch(bare)):
                start = m.end("name")  # rescan what followed: "failed: password=x" holds an assignment in its value
                continue
            self.redacted += 1
            quote = value[0] if value[:1] in ("'", '"') else ""
            out += [text[pos:m.start("value")], quote, REDACTED, quote]
            pos = start = m.end()
        return "".join(out) + text[pos:]

    def json(self, value: Any, key: str = "") -> Any:
        """A scrubbed copy of a JSON-like value (dicts, lists, strings, numbers)."""
        if isinstance(value, str):
            return self.text(self._env_lines(value, force=key.lower() in ENV_KEYS))
        if isinstance(value, (list, tuple)):
            return [self.json(v) for v in value]
        if not isinstance(value, dict):
            return value
        dump = key.lower() in ENV_KEYS or len(_ENV_MARKERS & {str(k) for k in value}) >= 2
        out: dict[str, Any] = {}
        for k, v in value.items():
            k = str(k)
            if dump and _ENV_VAR.match(k) and not _env_var_kept(k):
                self.dropped += 1
                continue
            if secret_name(k) and v not in (None, "", REDACTED):
                self.redacted += 1
                out[self.text(k)] = REDACTED
                continue
            out[self.text(k)] = self.json(v, k)
        return out


def scrub_text(value: str) -> str:
    """``value`` with every secret replaced by ``[redacted]``."""
    return Scrubber().text(value)


def scrub_json(value: Any) -> Any:
    """A copy of ``value`` with secrets redacted and environment dumps reduced (module docstring)."""
    return Scrubber().json(value)


_R = TypeVar("_R")
#: the free text a run record carries: an exception's message and traceback, the declared intent
_RECORD_TEXT = ("error", "hypothesis", "success")
_SWEEP_TEXT = ("hypothesis", "success")


def scrub_record(record: _R) -> _R:
    """A run record (a dataclass) with its error, hypothesis and success criterion scrubbed; the same
    object when there was nothing to scrub."""
    changed = {}
    for name in _RECORD_TEXT:
        text = getattr(record, name, None)
        if isinstance(text, str) and (clean := scrub_text(text)) != text:
            changed[name] = clean
    return dataclasses.replace(record, **changed) if changed else record  # type: ignore[type-var]


def scrub_sweep_info(info: dict[str, Any]) -> dict[str, Any]:
    """A sweep's info with its declared hypothesis and success criterion scrubbed (a copy)."""
    return {k: scrub_text(v) if k in _SWEEP_TEXT and isinstance(v, str) else v for k, v in info.items()}
