"""Scrub secrets from text and JSON before anything is stored (chapter 31: "Save the exact error
message without secrets").

Rules, applied by :class:`Scrubber` (:func:`scrub_text`, :func:`scrub_json`) to every string (and, in JSON, every key and value):

Tokens, replaced by ``[redacted]`` wherever they appear:
  Hugging Face ``hf_…``; GitHub ``ghp_/gho_/ghu_/ghs_/ghr_…`` and ``github_pat_…``; OpenAI/Anthropic
  style ``sk-…`` (and Stripe ``sk_live_/sk_test_/rk_…``); AWS access key ids ``AKIA…``/``ASIA…``;
  Slack ``xox?-…``; Google ``AIza…``; GitLab ``glpat-…``; npm ``npm_…``; PyPI ``pypi-…``; JSON web
  tokens ``eyJ….eyJ….…``;
  ``-----BEGIN … PRIVATE KEY-----`` blocks (to the END line, or to the end of the text when cut off).
Credentials kept apart from their label (the label stays, the value goes):
  ``Bearer <token>``, ``Authorization: <scheme> <credential>``, ``scheme://user:<password>@host``,
  command-line flags ``--token X`` / ``--password X`` / ``--secret X`` / ``--api-key X``, and
  assignments ``NAME=value`` / ``NAME: value`` / ``"NAME": "value"`` whose NAME is secret-like: it
  contains ``password``/``passwd``/``secret``/``credential``, or is ``token``/``pwd``/``auth``/
  ``authorization``/``cookie``/``apikey``/``api_key``/``api-key``, or ends in ``_token``/``-token``/``_key``/``-key``/``_pwd`` (so
  ``HF_TOKEN=``, ``AWS_SECRET_ACCESS_KEY=``, ``db_password:`` are scrubbed). Tokenizer settings are not
  secrets and stay: ``pad_token``, ``eos_token``, ``bos_token``, ``unk_token``, ``sep_token``,
  ``cls_token``, ``mask_token``, also as the last part of a dotted name (``tokenizer.pad_token``);
  ``max_tokens``, ``num_tokens``, ``token_count`` never match.
JSON: a value under a secret-like key is replaced whole, whatever its type.
No environment dumps: a dict is an environment dump when its key is ``env``/``environ``/
  ``environment``/``env_vars``/``environment_variables``/``os.environ`` or when it holds two or more of
  PATH, HOME, USER, SHELL, PWD, LOGNAME, HOSTNAME, TERM, LANG. In a dump, every key shaped like an
  environment variable (``UPPER_CASE``) is dropped unless it is on the diagnostic allowlist below
  and not secret-like; lower-case keys (firstdiv's own environment summary: python, torch, device)
  are kept, scrubbed like any other value. A pasted dump in text (two or more ``NAME=value`` lines
  naming the markers above, or any text under an env key) loses its non-allowlisted lines the same
  way. Allowlist: names starting with CUDA_, CUBLAS_, CUDNN_,
  NCCL_, NVIDIA_, TORCH_, PYTORCH_, TORCHINDUCTOR_, TORCHDYNAMO_, OMP_, MKL_, OPENBLAS_, KMP_, XLA_,
  HF_, TRANSFORMERS_, TOKENIZERS_, and PYTHONHASHSEED, WORLD_SIZE, RANK, LOCAL_RANK, MASTER_PORT.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

REDACTED = "[redacted]"

_TOKEN_PATTERNS = (
    r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{16,}",
    r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{20,}",
    r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{20,}",
    r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_\-]{16,}",
    r"(?<![A-Za-z0-9])(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
    r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])",
    r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9\-]{10,}",
    r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_\-]{35}",
    r"(?<![A-Za-z0-9])glpat-[A-Za-z0-9_\-]{20,}",
    r"(?<![A-Za-z0-9])npm_[A-Za-z0-9]{36}",
    r"(?<![A-Za-z0-9])pypi-[A-Za-z0-9_\-]{50,}",
    r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",  # a JSON web token
)
_TOKENS = re.compile("|".join(_TOKEN_PATTERNS))
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*\Z)", re.DOTALL)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9\-._~+/]+=*")
_AUTH_HEADER = re.compile(r"(?i)\b(authorization\s*[:=]\s*[\"']?(?:(?:basic|bearer|token|digest)\s+)?+)(?!\[redacted\])[^\s\"',;]+")
_FLAG = re.compile(r"(?i)(?<![\w-])(--?(?:password|passwd|token|secret|api[_\-]key|access[_\-]key)\s+)(?!\[redacted\])[^\s\"']+")
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]+:)(?!\[redacted\]@)[^/\s@]+@")
_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]*"
_ASSIGNMENT = re.compile(
    rf"(?P<q>[\"']?)(?P<name>{_NAME})(?P=q)(?P<sep>\s*[=:]\s*)"
    r"(?P<value>\[redacted\]|\"[^\"\n]*\"|'[^'\n]*'|[^\s,;&\"'}\]\)]+)")
_SECRET_NAME = re.compile(r"(?i)(?:password|passwd|secret|credential|^(?:token|pwd|auth|authorization|cookie|apikey|api[_\-]key)$"
                          r"|[_\-](?:token|key|pwd)$)")
#: "Authorization: Bearer x": the scheme word is not the secret; the Bearer/header rules take the credential
_SCHEMES = frozenset({"basic", "bearer", "token", "digest"})
_NOT_SECRET = frozenset({"pad_token", "eos_token", "bos_token", "unk_token", "sep_token", "cls_token", "mask_token"})

ENV_KEYS = frozenset({"env", "environ", "environment", "env_vars", "environment_variables", "os.environ"})
_ENV_MARKERS = frozenset({"PATH", "HOME", "USER", "SHELL", "PWD", "LOGNAME", "HOSTNAME", "TERM", "LANG"})
_ENV_VAR = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Z_][A-Z0-9_]*)=")
_ENV_ALLOW_PREFIXES = ("CUDA_", "CUBLAS_", "CUDNN_", "NCCL_", "NVIDIA_", "TORCH_", "PYTORCH_", "TORCHINDUCTOR_",
                       "TORCHDYNAMO_", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "XLA_", "HF_", "TRANSFORMERS_", "TOKENIZERS_")
_ENV_ALLOW = frozenset({"PYTHONHASHSEED", "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT"})


def secret_name(name: str) -> bool:
    """True for a key or variable name whose value is a credential (see module docstring)."""
    return name.lower().rsplit(".", 1)[-1] not in _NOT_SECRET and bool(_SECRET_NAME.search(name))


def _env_var_kept(name: str) -> bool:
    return (name in _ENV_ALLOW or name.startswith(_ENV_ALLOW_PREFIXES)) and not secret_name(name)


@dataclass
class Scrubber:
    """Scrubs text and JSON, counting what it removed (``redacted`` values, ``dropped`` env variables)."""

    redacted: int = 0
    dropped: int = 0

    def text(self, value: str) -> str:
        value = self._env_lines(value)
        value, n = _PRIVATE_KEY.subn(REDACTED, value)
        self.redacted += n
        value, n = _TOKENS.subn(REDACTED, value)
        self.redacted += n
        for pattern in (_BEARER, _AUTH_HEADER, _FLAG):
            value, n = pattern.subn(lambda m: m.group(1) + REDACTED, value)
            self.redacted += n
        value, n = _URL_PASSWORD.subn(lambda m: m.group(1) + REDACTED + "@", value)
        self.redacted += n
        return self._assignments(value)

    def _env_lines(self, value: str, force: bool = False) -> str:
        """Drop the lines of a pasted environment dump (``NAME=value`` lines) that are not on the allowlist."""
        names = [m.group(1) for m in map(_ENV_LINE.match, value.splitlines()) if m]
        if not names or not (force or len(_ENV_MARKERS & set(names)) >= 2):
            return value
        kept = []
        for line in value.splitlines(keepends=True):
            m = _ENV_LINE.match(line)
            if m and not _env_var_kept(m.group(1)):
                self.dropped += 1
                continue
            kept.append(line)
        return "".join(kept)

    def _assignments(self, text: str) -> str:
        out, pos, start = [], 0, 0
        while m := _ASSIGNMENT.search(text, start):
            value = m.group("value")
            if not secret_name(m.group("name")) or value.strip("\"'") in ("", REDACTED) or value.lower() in _SCHEMES:
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
