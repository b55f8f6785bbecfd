"""Vendor credential shapes from detect-secrets' maintained plugins (Twilio, SendGrid, Telegram, Discord,
Mailchimp, Square, Azure storage, Artifactory, Stripe, Cloudant and SoftLayer URLs, ...).

Only its regex plugins are used, as a table of patterns: its high-entropy plugins would take git SHAs and
config hashes, which fill training logs and must stay; its keyword plugin is replaced by our name
rules (:mod:`firstdiv._secret_names`); its IP plugin flags addresses, which are not credentials; its
private-key plugin matches only the header line (we remove the whole block); and its JWT pattern ends
lazily, which would leave a token's signature behind (we match whole tokens). Its OpenAI and npm patterns find
nothing our rules miss (every ``sk-`` token, every ``_authToken=`` value) and would make scrubbing quadratic: the
first is retried from each ``sk-`` of a run of them, the second from each ``//`` of a line. The keyword=value
patterns of its Cloudant, IBM and SoftLayer plugins are left to our name rules too (see ``_KEYWORD_FAMILY``).

detect-secrets is imported the first time text is scrubbed, never on ``import firstdiv`` (it costs
about 0.25 s and brings ``requests``). Without it installed, our own token rules still apply.
"""

from __future__ import annotations

import functools
import re

_SKIPPED = frozenset({"IPPublicDetector", "JwtTokenDetector", "PrivateKeyDetector", "BasicAuthDetector",
                      "OpenAIDetector", "NpmDetector"})
#: how the keyword=value patterns of the Cloudant, IBM and SoftLayer plugins begin: our name rules take
#: those assignments (``cloudant_password=``, ``ibm_cos_hmac_secret_access_key:``), and these patterns, tried
#: at every position, would double the time to scrub a long log
_KEYWORD_FAMILY = r"(?:(?<=\W)|(?<=^))"
#: characters some plugins' patterns include around the token (Artifactory: ``(?:\s|=|:|"|^)AKC...``)
_EDGES = " \t\r\n=:\"'"


#: what every token of a plugin holds (lower-cased): a pattern runs only on a text holding one of the keywords
#: its own source names (a pattern naming none, as a newer plugin's may, always runs)
_KEYWORDS = {
    "AWSKeyDetector": ("a3t", "abia", "acca", "akia", "asia", "aws"),
    "ArtifactoryDetector": ("akc", "ap"),
    "AzureStorageKeyDetector": ("accountkey=",),
    "CloudantDetector": ("cloudant",),
    "DiscordBotTokenDetector": (".",),
    "GitHubTokenDetector": ("ghp", "gho", "ghu", "ghs", "ghr"),
    "GitLabTokenDetector": ("gl", "gr1348941"),
    "MailchimpDetector": ("-us",),
    "PypiTokenDetector": ("pypi-",),
    "SendGridDetector": ("sg.",),
    "SlackDetector": ("xox", "hooks.slack.com"),
    "SoftlayerDetector": ("softlayer",),
    "SquareOAuthDetector": ("sq0csp-",),
    "StripeDetector": ("k_live_",),
    "TelegramBotTokenDetector": (":",),
    "TwilioKeyDetector": ("ac", "sk"),
}


def _keywords(cls: type, rx: re.Pattern[str]) -> tuple[str, ...]:
    source = rx.pattern.replace("\\", "").lower()
    return tuple(k for k in _KEYWORDS.get(cls.__name__, ()) if k in source)


@functools.cache
def patterns() -> tuple[tuple[tuple[str, ...], re.Pattern[str]], ...]:
    """The denylist patterns of detect-secrets' regex plugins with their keywords (``()``: run always), in a
    stable order (empty if it is missing)."""
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins.base import RegexBasedDetector
    except ImportError:
        return ()
    plugins = sorted(get_mapping_from_secret_type_to_class().values(), key=lambda cls: cls.__name__)
    return tuple((_keywords(cls, rx), rx) for cls in plugins
                 if issubclass(cls, RegexBasedDetector) and cls.__name__ not in _SKIPPED
                 for rx in cls.denylist if not rx.pattern.startswith(_KEYWORD_FAMILY))


def spans(text: str, low: str | None = None) -> list[tuple[int, int]]:
    """Where vendor tokens are in ``text`` (``low``: its lower-cased copy, or one with the same keywords):
    sorted, non-overlapping ``(start, end)`` pairs."""
    low = text.lower() if low is None else low
    found = []
    for keywords, rx in patterns():
        if keywords and not any(k in low for k in keywords):
            continue
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
