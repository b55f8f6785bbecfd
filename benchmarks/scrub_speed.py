"""Time to scrub secrets from 1 KB, 16 KB, 128 KB and 1 MB of text, for texts of several shapes, and the
growth per doubling of the size.

Target: linear time (a ratio near 2 per doubling; a quadratic rule shows 4) and well under a second for
1 MB of any shape. The shapes are the ones that made rules retry a token from each of its characters: one
unbroken token, one letter repeated, long lines of ``a=`` and ``key=value``, base64, hex, JSON, URLs, runs of
the words and prefixes that start a credential shape (``sk-``, ``_eyJ``, ``mysql -u``, ``default login``), and, for
comparison, prose and a training log. Each time is the best of several calls in one run of this script.

    python benchmarks/scrub_speed.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import random
import time

from firstdiv._secrets import scrub_text

SIZES = (1 << 10, 1 << 14, 1 << 17, 1 << 20)
ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def shapes(size: int) -> dict[str, str]:
    """Texts of about ``size`` characters."""
    rnd = random.Random(size)
    log = "".join(f"step={i} loss={2.5 / (i + 1):.4f} grad_norm=0.98 lr=3e-4 tokens/s=51234 commit 4b825dc642cb\n"
                  for i in range(size // 60 + 1))
    texts = {
        "one token": "".join(rnd.choice(ALNUM) for _ in range(size)),
        "one letter": "a" * size,
        "prose": "the run diverged after the warmup because the learning rate was too high " * (size // 70 + 1),
        "a=a=a=": "a=" * size,
        "key=value line": " ".join(f"k{i}=v{i}" for i in range(size // 6)),
        "base64": base64.b64encode(rnd.randbytes(size)).decode(),
        "hex": rnd.randbytes(size).hex(),
        "json": json.dumps({f"key_{i}": [i, f"val{i}", {"token_count": 7, "x": 0.5}] for i in range(size // 30 + 1)}),
        "urls": "see https://host.example/a/b?c=d " * (size // 30 + 1),
        "training log": log,
    }
    for prefix in ("xsk-", "_eyJabcdefghijk", "mysql -u ", "curl -u x ", "x://", "default login ", "--sshpass ", "aws key "):
        texts[f"run of {prefix.strip()!r}"] = prefix * (size // len(prefix) + 1)
    return {name: text[:size] for name, text in texts.items()}


def best_time(text: str, repeat: int) -> float:
    """The fastest of ``repeat`` timings, each of enough calls to take about 50 ms."""
    start = time.perf_counter()
    scrub_text(text)
    once = time.perf_counter() - start
    calls = max(1, int(0.05 / max(once, 1e-6)))
    best = once
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            scrub_text(text)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    scrub_text("warm up: token=abc")  # loads the vendor patterns once, outside the timings
    by_size = {size: shapes(size) for size in SIZES}
    labels = ["1 KB", "16 KB", "128 KB", "1 MB"]
    print(f"{'shape':26}" + "".join(f"{label:>10}" for label in labels)
          + "   ratio per doubling (1K->16K, 16K->128K, 128K->1M)")
    worst = (0.0, "")
    for name in by_size[SIZES[0]]:
        times = [best_time(by_size[size][name], args.repeat) for size in SIZES]
        ratios = [(b / a) ** (1 / math.log2(sb / sa)) for a, b, sa, sb in zip(times, times[1:], SIZES, SIZES[1:])]
        worst = max(worst, (times[-1], name))
        print(f"{name:26}" + "".join(f"{t * 1e3:8.2f}ms" for t in times)
              + "   " + "  ".join(f"{r:4.2f}" for r in ratios))
    print(f"slowest at 1 MB: {worst[1]} {worst[0]:.3f} s (target: well under 1 s; ratios near 2 are linear)")


if __name__ == "__main__":
    main()
