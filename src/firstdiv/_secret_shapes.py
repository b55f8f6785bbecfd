"""The credential shapes that are not ``NAME=value`` (the rules are listed in :mod:`firstdiv._secrets`).

``TOKENS`` are replaced whole wherever they appear. Every pattern in ``LABELLED`` keeps its ``keep``
group (the label a reader needs: the URL's user, the header name, the command and its flag) and
replaces the credential after it; ``(?!\\[redacted\\])`` makes scrubbing twice change nothing.
Command-line rules are tied to their command: ``-p`` is a password to ``mysql`` and ``sshpass``, a
port to ``ssh``, and ``-P`` a port to ``mysql``.
"""

from __future__ import annotations

import re

_TOKEN_PATTERNS = (
    r"hf_[A-Za-z0-9]{16,}",
    r"gh[pousr]_[A-Za-z0-9]{20,}",
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"sk-[A-Za-z0-9_\-]{16,}",
    r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
    r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])",
    r"xox[abprs]-[A-Za-z0-9\-]{10,}",
    r"AIza[0-9A-Za-z_\-]{35}",
    r"ya29\.[0-9A-Za-z_\-]{20,}",  # a Google OAuth access token
    r"glpat-[A-Za-z0-9_\-]{20,}",
    r"npm_[A-Za-z0-9]{36}",
    r"pypi-[A-Za-z0-9_\-]{50,}",
    r"dapi[0-9a-f]{32}(?![0-9a-f])",  # a Databricks token
    # a JSON web token; its header stops at a later "_eyJ" or "-eyJ", where the next try starts, so that a
    # run of such prefixes is read once (linear time), not once from each of them
    r"eyJ(?:(?![_\-]eyJ)[A-Za-z0-9_\-]){8,}+\.[A-Za-z0-9_\-]{2,}+\.[A-Za-z0-9_\-+/=]*+",
)
# one boundary for all, and a lookahead on the first letters so that most positions fail at once (15x faster)
TOKENS = re.compile(r"(?<![A-Za-z0-9])(?=[hgsrAxyenpd])(?:" + "|".join(_TOKEN_PATTERNS) + ")")
PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
                         r"(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|.*\Z)", re.DOTALL)

_VALUE = r"(?:'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)"  # one shell word, quoted or not


def _command(head: str, flag: str) -> str:
    """``head`` (the command), the rest of that shell command up to ``flag``, as the ``keep`` group. The scan
    stops where the command occurs again, so a line repeating it is read once (linear time), not once per
    occurrence; the later occurrence is tried next and finds the same flag."""
    return rf"(?P<keep>{head}(?:(?!{head})[^\n|;&])*?\s{flag})(?!\[redacted\])"


#: (keywords, pattern): each pattern runs only on a text whose lower-cased copy holds one of its keywords (every
#: match holds one), so that a long text pays for the few rules it may need, each of them read once
LABELLED = tuple((keywords, re.compile(p)) for keywords, p in (
    # webhooks: the URL is the credential; keep where it points
    (("hooks.slack.com/",),
     r"(?P<keep>https?://hooks\.slack\.com/(?:services|workflows|triggers)/)(?!\[redacted\])[A-Za-z0-9_/\-]+"),
    (("/api/webhooks/",),
     r"(?P<keep>https?://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/)(?!\[redacted\])[\w/\-]+"),
    ((".webhook.office.com/",), r"(?P<keep>https?://[\w.\-]+\.webhook\.office\.com/)(?!\[redacted\])[^\s'\"]+"),
    # headers
    (("bearer",), r"(?i)(?P<keep>\bbearer\s+)(?!\[redacted\])[A-Za-z0-9\-._~+/]+=*"),
    (("authorization",),
     r"(?i)(?P<keep>\bauthorization\s*[:=]\s*[\"']?(?:(?:basic|bearer|token|digest)\s+)?+)(?!\[redacted\])[^\s\"',;]+"),
    (("cookie",), r"(?i)(?P<keep>\b(?:set-)?cookie\s*:\s*+)(?!\[redacted\])[^\r\n\"']+"),  # every cookie on the line
    # scheme://user:password@host, also with an empty user; the password may hold '@' (up to the last one)
    # (the scheme is read from where its run of characters starts, digits and signs before its first letter
    # kept: a long token is read once, not once from each of its characters)
    (("://",), (r"(?P<keep>(?<![A-Za-z0-9+.\-])[0-9+.\-]*+[A-Za-z][A-Za-z0-9+.\-]*+://[^/\s:@'\"]*+:)(?!\[redacted\]@)"
                r"[^\s/'\"?#]+(?=@)")),
    # command lines
    (("mysql", "mariadb"), _command(r"\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mariadb|mariadb-dump)\b", "-p") + _VALUE),
    (("sshpass",), rf"(?P<keep>\bsshpass\s+(?:-[^p\s]\S*\s+){{0,4}}+-p\s*)(?!\[redacted\]){_VALUE}"),  # a few flags
    (("curl",), _command(r"\bcurl\b", r"(?:-u|--user)\s*['\"]?[^\s:'\"]+:") + r"[^\s'\"]+"),
    (("login",), _command(r"\b(?:docker|podman|nerdctl|buildah|skopeo|helm\s+registry)\s+login\b", r"-p\s*") + _VALUE),
    (("redis-cli",), _command(r"\bredis-cli\b", r"-a\s+") + _VALUE),
    (("-pass",), r"(?P<keep>-pass(?:in|out)\s+pass:)(?!\[redacted\])[^\s'\"]+"),
    # W&B: the API key is 40 hex digits (a local server's has a prefix) wherever it stands in the command
    (("wandb",), _command(r"\bwandb\s+login\b", r"['\"]?") + r"(?:local-)?[0-9a-fA-F]{40,}+(?![0-9A-Za-z])"),
    (("wandb.login(",),  # the call's arguments, read up to the next call of it
     r"(?P<keep>\bwandb\.login\((?:(?!wandb\.login\()[^)\n])*?\bkey\s*=\s*['\"]?)(?!\[redacted\])[^\s'\",)]+"),
    # .netrc: "machine HOST login USER password PW", on one line or several (an entry names its login and
    # account once each: a line of "default login default login ..." is not read again from each "default")
    (("password",),
     r"(?P<keep>\b(?:machine\s+\S+|default)(?:\s+(?:login|account)\s+\S+){0,2}+\s+password\s+)(?!\[redacted\])\S+"),
))
#: ``--name value`` / ``--name=value``; the caller decides from the name whether the value is a secret
FLAG = re.compile(rf"(?<![\w-])(?P<keep>--?(?P<name>[A-Za-z][\w-]*)(?:\s+|=))(?!\[redacted\])(?!-){_VALUE}")

#: a credential named in prose, without a sign: "the password is X", "secret X", "invalid api key X". The
#: ``noun`` must stand as a word (``HF_TOKEN x``, ``--password-file x`` are not prose); the word before it is
#: read by the caller ("pad token", "next token" name no secret), and the value is judged by :func:`prose_value`
PROSE_WORDS = ("pass", "secret", "token", "credential", "key")  # one is in every match, lower-cased
PROSE = re.compile(
    r"(?i)\b(?=[pstca])(?P<noun>pass(?:word|phrase|wd)|secret(?:[ _-]+(?:access[ _-]+)?key)?|token|credentials?|api[ _-]?key"
    r"|access[ _-]+key)\s+(?:(?P<verb>is|was)\s*:?\s+)?(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"',;]+)")
#: a word of ordinary prose or a number: "the password is required", "the password is 8 characters"
_PLAIN = re.compile(r"[a-z]+|[A-Z][a-z]*|[A-Z]+|[-+]?[0-9][0-9.,_]*(?:[eE][-+]?[0-9]+)?%?")
#: what a generated credential looks like without a verb to say so: 16 or more characters of base64 or hex,
#: not a path ("/run/secrets/x", "./vocab.json")
_GENERATED = re.compile(r"(?![/\-])[A-Za-z0-9+/=_\-]{16,}")
_HEX = re.compile(r"[0-9a-fA-F]{32,}")


def prose_value(value: str, *, verb: bool, quoted: bool) -> bool:
    """True when ``value``, named by a credential noun in prose, is the credential. After "is"/"was" anything
    but a plain word or number is (a quoted value always); after the bare noun only a generated-looking value
    (upper and lower case letters and digits, or 32 or more hex digits), so "password authentication failed"
    and "token 50256" stay."""
    if verb:
        return quoted or not _PLAIN.fullmatch(value)
    if not _GENERATED.fullmatch(value):
        return False
    if _HEX.fullmatch(value):
        return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
    return any(c.isupper() for c in value) and any(c.islower() for c in value) and any(c.isdigit() for c in value)
