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
  Mailchimp, Square, Azure storage, Artifactory, Stripe, Cloudant and SoftLayer URLs;
  :mod:`firstdiv._secret_vendor` says which plugins are left out and why).
Credentials kept apart from their label (the label stays, the value goes):
  webhook URLs (Slack, Discord, Teams: the path after the host goes); ``Bearer <token>``,
  ``Authorization: <scheme> <credential>``, ``Cookie:`` / ``Set-Cookie:`` (the rest of the line);
  ``scheme://user:<password>@host``, also with an empty user (``redis://:PW@host``) and with ``@`` in
  the password; ``mysql … -pPW``, ``sshpass -p PW``, ``curl -u user:PW``, ``docker login … -p PW``,
  ``redis-cli … -a PW``, ``openssl … -passin pass:PW``, ``wandb login [--host URL …] KEY`` (40 or more
  hex digits, any case, quoted or not) and ``wandb.login(key=KEY)``; ``.netrc`` entries
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
Credentials named in prose, with no sign: the word password, passphrase, passwd, secret, token,
  credential(s), api key, access key or secret (access) key, then a value, unless the word before makes the
  name no secret (``pad token``, ``next token``, as for names above). After "is"/"was" ("the password is
  X") any value but a plain word or number goes ("the password is required" stays); after the bare word
  ("signature mismatch for secret X") only a generated-looking value: 16 or more characters of base64
  holding upper and lower case letters and digits, or 32 or more hex digits ("password authentication
  failed", "token 50256", paths stay).
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
Time: linear in the text's length, whatever its shape (no rule retries a token from each of its characters),
  and a rule runs only on a text holding its keyword or sign; ``benchmarks/scrub_speed.py`` prints it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, TypeVar

from . import _secret_vendor
from ._secret_names import secret_name
from ._secret_shapes import FLAG, LABELLED, PRIVATE_KEY, PROSE, PROSE_WORDS, TOKENS, prose_value

__all__ = ["ENV_KEYS", "REDACTED", "Scrubber", "scrub_json", "scrub_record", "scrub_sweep_info", "scrub_text",
           "secret_name"]

REDACTED = "[redacted]"

#: a name and its sign. The name is read from where its run of name characters starts (digits, dots and dashes
#: before its first letter skipped), so a long token is read once, not once from each of its characters; and a
#: name followed by a sign is returned only when it holds a word that every secret-like name holds (not ``step=``)
_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]*+"
_ASSIGNMENT = re.compile(
    rf"(?P<q>[\"']?)(?<![A-Za-z0-9_.\-])[0-9.\-]*+(?={_NAME}(?P=q)\s*+[=:])"
    rf"(?P<name>(?=[A-Za-z0-9_.\-]*?(?i:pass|secret|credential|token|auth|cookie|key|dsn|sig|pat|pw)){_NAME})"
    r"(?P=q)\s*+[=:]\s*+")
#: the value after it, read only for a secret-like name (a long line of ``a=b=c`` is not read once per sign)
_ASSIGNED = re.compile(r"\[redacted\]|\"[^\"\n]*\"|'[^'\n]*'|[^\s,;&\"'}\]\)]+")
#: every shape needs one of these (a sign, a flag, a run of 11 token characters or a keyword): most strings
#: in a report's JSON ("grad norm 0.031", "layer1.weight") have none and skip the rules
_CANDIDATE = re.compile(r"[=:@]|(?<!\S)-|[A-Za-z0-9_\-]{11,}")
_CANDIDATE_WORDS = ("bearer", "begin", "pass", "secret", "token", "key", "credential")  # looked up lower-cased
#: "Authorization: Bearer x": the scheme word is not the secret; the Bearer/header rules take the credential
_SCHEMES = frozenset({"basic", "bearer", "token", "digest"})
#: values that hold no credential: no value, a reference to where it lives ($HF_TOKEN, ${DB_PASSWORD}), a
#: placeholder (<your-token>, ***)
_NO_SECRET_VALUE = re.compile(r"(?i)(?:none|null|nil|true|false|undefined|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|<[^<>]*>|\*+)")

#: the word before a credential noun in prose ("pad token" names no secret, "the token" does), reversed
_WORD_BEFORE = re.compile(r"[ _-]+([A-Za-z]+)")

ENV_KEYS = frozenset({"env", "environ", "environment", "env_vars", "environment_variables", "os.environ"})
_ENV_MARKERS = frozenset({"PATH", "HOME", "USER", "SHELL", "PWD", "LOGNAME", "HOSTNAME", "TERM", "LANG"})
_ENV_VAR = re.compile(r"^[A-Z_][A-Z0-9_]*$")
#: one assignment of a pasted dump: at a line's start, after whitespace or a "[rank0]:" log prefix
_ENV_ASSIGN = re.compile(r"(?=[A-Z_ed])(?:^|(?<=[\s\]])|(?<=\]:))(?:(?:export|declare\s+-x)\s+)?"
                         r"(?P<name>[A-Z_][A-Z0-9_]*+)=", re.MULTILINE)  # the lookahead fails most places at once
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
        low = value.lower()  # a rule runs only where its keyword or sign is (redacting adds none): a text pays for few
        if not _CANDIDATE.search(value) and not any(k in low for k in _CANDIDATE_WORDS):
            return value
        if "=" in value and (dumped := self._env_lines(value)) is not value:
            value, low = dumped, dumped.lower()
        if "-----begin" in low:
            value = self._whole(PRIVATE_KEY, value)
        for keywords, pattern in LABELLED:
            if any(k in low for k in keywords):
                value = self._labelled(pattern, value)
        value = self._whole(TOKENS, value)
        if "-" in value:
            value = FLAG.sub(self._flag, value)
        if "=" in value or ":" in value:
            value = self._assignments(value)
        if any(k in low for k in PROSE_WORDS):
            value = PROSE.sub(self._prose, value)
        # last: a vendor pattern that includes its label (Azure's "AccountKey=...") finds it already redacted
        return self._vendor(value, low)

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

    def _prose(self, m: re.Match[str]) -> str:
        value = m.group("value")
        quote = value[0] if value[0] in "'\"" else ""
        bare = value[1:-1] if quote else value.rstrip(".:!?)")  # the sentence's punctuation stays
        before = _WORD_BEFORE.match(m.string[max(0, m.start() - 40):m.start()][::-1])  # read backwards
        label = f"{before.group(1)[::-1]} {m.group('noun')}" if before else m.group("noun")
        if (REDACTED in value or not bare or _NO_SECRET_VALUE.fullmatch(bare) or not secret_name(label)
                or not prose_value(bare, verb=bool(m.group("verb")), quoted=bool(quote))):
            return m.group(0)
        self.redacted += 1
        cut = m.start("value") - m.start() + len(quote)
        return m.group(0)[:cut] + REDACTED + m.group(0)[cut + len(bare):]

    def _vendor(self, value: str, low: str) -> str:
        out, pos = [], 0
        for start, end in _secret_vendor.spans(value, low):  # one copy of the text, however many tokens it holds
            out += [value[pos:start], REDACTED]
            pos = end
        self.redacted += len(out) // 2
        return "".join(out) + value[pos:]

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
            start = m.end("name")  # unless redacted, rescan what follows: "failed: password=x" is in a value
            name = m.start("name")
            query = not m.group("q") and name > 0 and text[name - 1] in "?&"  # ?key=..., &sig=...
            if not secret_name(m.group("name"), query=query) or not (v := _ASSIGNED.match(text, m.end())):
                continue
            value = v.group()
            bare = value.strip("\"'")
            if bare in ("", REDACTED) or value.lower() in _SCHEMES or _NO_SECRET_VALUE.fullmatch(bare):
                continue
            self.redacted += 1
            quote = value[0] if value[:1] in ("'", '"') else ""
            out += [text[pos:m.end()], quote, REDACTED, quote]
            pos = start = v.end()
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
