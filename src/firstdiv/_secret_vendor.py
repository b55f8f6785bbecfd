"""Vendor credential shapes from detect-secrets' maintained plugins (Twilio, SendGrid, Telegram, Discord,
Mailchimp, Square, Azure storage, Artifactory, Stripe, npm, Cloudant and SoftLayer URLs, ...).

Only its regex plugins are used, as a table of patterns: its high-entropy plugins would take git SHAs and
config hashes, which fill training logs and must stay; its keyword plugin is replaced by our name
rules (:mod:`firstdiv._secret_names`); its IP plugin flags addresses, which are not credentials; its
private-key plugin matches only the header line (we remove the whole block); and its JWT pattern ends
lazily, which would leave a token's signature behind (we match whole tokens). The keyword=value patterns of
its Cloudant, IBM and SoftLayer plugins are left to our name rules too (see ``_KEYWORD_FAMILY``).

detect-secrets is imported the first time text is scrubbed, never on ``import firstdiv`` (it costs
about 0.25 s and brings ``requests``). Without it installed, our own token rules still apply.
"""

from __future__ import annotations

import functools
import re

_SKIPPED = frozenset({"IPPublicDetector", "JwtTokenDetector", "PrivateKeyDetector", "BasicAuthDetector"})
#: how the keyword=value patterns of the Cloudant, IBM and SoftLayer plugins begin: our name rules take
#: those assignments (``cloudant_password=``, ``ibm_cos_hmac_secret_access_key:``), and these patterns, tried
#: at every position, would double the time to scrub a long log
_KEYWORD_FAMILY = r"(?:(?<=\W)|(?<=^))"
#: characters some plugins' patterns include around the token (Artifactory: ``(?:\s|=|:|"|^)AKC...``)
_EDGES = " \t\r\n=:\"'"


@functools.cache
def patterns() -> tuple[re.Pattern[str], ...]:
    """The denylist patterns of detect-secrets' regex plugins, in a stable order (empty if it is missing)."""
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins.base import RegexBasedDetector
    except ImportError:
        return ()
    plugins = sorted(get_mapping_from_secret_type_to_class().values(), key=lambda cls: cls.__name__)
    return tuple(rx for cls in plugins if issubclass(cls, RegexBasedDetector) and cls.__name__ not in _SKIPPED
                 for rx in cls.denylist if not rx.pattern.startswith(_KEYWORD_FAMILY))


def spans(text: str) -> list[tuple[int, int]]:
    """Where vendor tokens are in ``text``: sorted, non-overlapping ``(start, end)`` pairs."""
    found = []
    for rx in patterns():
        for m in rx.finditer(text):
            group = next((i for i in range(1, (rx.groups or 0) + 1) if m.group(i)), 0)
            start, end = m.span(group)
            while start < end and text[start] in _EDGES:
                start += 1
            while end > start and text[end - 1] in _EDGES:
                end -= 1
            # a match cut out of a longer word (a hash that happens to contain "SK" and 32 more) is not a token
            if end - start < 8 or (start and text[start - 1].isalnum()) or (end < len(text) and text[end].isalnum()):
                continue
            found.append((start, end))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(found):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged
