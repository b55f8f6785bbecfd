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
    r"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{2,}\.[A-Za-z0-9_\-+/=]*",  # a JSON web token
)
# one boundary for all, and a lookahead on the first letters so that most positions fail at once (15x faster)
TOKENS = re.compile(r"(?<![A-Za-z0-9])(?=[hgsrAxyenpd])(?:" + "|".join(_TOKEN_PATTERNS) + ")")
PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
                         r"(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|.*\Z)", re.DOTALL)

_VALUE = r"(?:'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)"  # one shell word, quoted or not
_CMD = r"[^\n|;&]*?\s"  # the rest of one shell command before a flag
LABELLED = tuple(re.compile(p) for p in (
    # webhooks: the URL is the credential; keep where it points
    r"(?P<keep>https?://hooks\.slack\.com/(?:services|workflows|triggers)/)(?!\[redacted\])[A-Za-z0-9_/\-]+",
    r"(?P<keep>https?://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/)(?!\[redacted\])[\w/\-]+",
    r"(?P<keep>https?://[\w.\-]+\.webhook\.office\.com/)(?!\[redacted\])[^\s'\"]+",
    # headers
    r"(?i)(?P<keep>\bbearer\s+)(?!\[redacted\])[A-Za-z0-9\-._~+/]+=*",
    r"(?i)(?P<keep>\bauthorization\s*[:=]\s*[\"']?(?:(?:basic|bearer|token|digest)\s+)?+)(?!\[redacted\])[^\s\"',;]+",
    r"(?i)(?P<keep>\b(?:set-)?cookie\s*:\s*+)(?!\[redacted\])[^\r\n\"']+",  # every cookie on the line
    # scheme://user:password@host, also with an empty user; the password may hold '@' (up to the last one)
    r"(?P<keep>[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@'\"]*:)(?!\[redacted\]@)[^\s/'\"?#]+(?=@)",
    # command lines
    rf"(?P<keep>\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mariadb|mariadb-dump)\b{_CMD}-p)(?!\[redacted\]){_VALUE}",
    rf"(?P<keep>\bsshpass\s+(?:-[^p\s]\S*\s+)*-p\s*)(?!\[redacted\]){_VALUE}",
    rf"(?P<keep>\bcurl\b{_CMD}(?:-u|--user)\s*['\"]?[^\s:'\"]+:)(?!\[redacted\])[^\s'\"]+",
    rf"(?P<keep>\b(?:docker|podman|nerdctl|buildah|skopeo|helm\s+registry)\s+login\b{_CMD}-p\s*)(?!\[redacted\]){_VALUE}",
    rf"(?P<keep>\bredis-cli\b{_CMD}-a\s+)(?!\[redacted\]){_VALUE}",
    r"(?P<keep>-pass(?:in|out)\s+pass:)(?!\[redacted\])[^\s'\"]+",
    r"(?P<keep>\bwandb\s+login\s+(?:--?[\w-]+\s+)*)(?!\[redacted\])[0-9a-f]{40}(?![0-9a-zA-Z])",
    # .netrc: "machine HOST login USER password PW", on one line or several
    r"(?P<keep>\b(?:machine\s+\S+|default)(?:\s+(?:login|account)\s+\S+)*\s+password\s+)(?!\[redacted\])\S+",
))
#: ``--name value`` / ``--name=value``; the caller decides from the name whether the value is a secret
FLAG = re.compile(rf"(?<![\w-])(?P<keep>--?(?P<name>[A-Za-z][\w-]*)(?:\s+|=))(?!\[redacted\])(?!-){_VALUE}")
