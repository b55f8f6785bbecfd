"""The index as a person reads it, against tests/golden/site_index.txt: a store whose every value is fixed
(sweeps written through the store's API with chosen identities and dates, runs by SQL in the schema's
shape: ok, failed and not yet run seeds), the page reduced to its text (cells joined by ' | ')."""

import sqlite3
from html.parser import HTMLParser

from firstdiv.lab.store import Store
from firstdiv.site import Filters, _pages

BLOCKS = {"h1", "h2", "p", "tr", "header", "footer", "form", "nav", "label", "div"}


class _Text(HTMLParser):
    def __init__(self):
        super().__init__()
        self.lines, self.line, self.skip = [], [], 0

    def handle_starttag(self, tag, attrs):
        if tag in ("style", "script", "title", "select"):
            self.skip += 1
        elif tag in BLOCKS:
            self._end()
        elif tag in ("td", "th") and "".join(self.line).strip():
            self.line.append(" | ")

    def handle_endtag(self, tag):
        if tag in ("style", "script", "title", "select"):
            self.skip -= 1
        elif tag in BLOCKS:
            self._end()

    def handle_data(self, data):
        if not self.skip:
            self.line.append(data)

    def _end(self):
        text = " ".join("".join(self.line).split())
        if text:
            self.lines.append(text)
        self.line = []


def text_of(page: str) -> str:
    parser = _Text()
    parser.feed(page)
    parser._end()
    return "\n".join(parser.lines) + "\n"


def build_fixed_store(path):
    sweeps = [("baseline", "w:train", "2026-01-10", {"lr": 0.01, "depth": 4}, [0, 1, 2], ["ok", "ok", "ok"]),
              ("lr-0.1", "w:train", "2026-02-03", {"lr": 0.1, "depth": 4}, [0, 1, 2], ["ok", "failed", "ok"]),
              ("deeper", "w:train", "2026-02-14", {"lr": 0.01, "depth": 8}, [0, 1, 2, 3], ["ok", "ok"]),
              ("other", "x:fit", "2026-03-01", {"size": 3}, [5], ["ok"])]
    with Store(path) as st:
        for i, (name, workload, _, config, seeds, _) in enumerate(sweeps):
            st.upsert_sweep(name, f"identity-{i}", workload, {"config": config, "config_hash": f"c0nf{i:08d}",
                                                               "code": {"version": f"1.{i}.0"}}, seeds)
        st.add_incident({"id": "inc-0000beef", "title": "val loss flat after resume", "status": "open",
                         "created": "2026-02-20T08:00:00.000+00:00", "updated": "2026-02-21T09:30:00.000+00:00"})
    conn = sqlite3.connect(path, isolation_level=None)
    for i, (name, workload, day, _, seeds, statuses) in enumerate(sweeps):
        conn.execute("UPDATE sweeps SET created=? WHERE name=?", (f"{day}T10:00:00.000+00:00", name))
        conn.executemany("INSERT INTO runs (identity, seed, workload, status, created, record) VALUES (?, ?, ?, ?, ?, '{}')",
                         [(f"identity-{i}", seed, workload, status, f"{day}T10:05:00.000+00:00")
                          for seed, status in zip(seeds, statuses, strict=False)])
    conn.close()


def test_index_text_matches_golden(tmp_path, golden):
    path = tmp_path / "runs.db"
    build_fixed_store(path)
    served = text_of(_pages.index_html(path, Filters()))
    filtered = text_of(_pages.index_html(path, Filters(workload="w:train", since="2026-02-01")))
    rows = [line.split()[0] for line in filtered.splitlines() if " | " in line and "w:train" in line]
    assert rows == ["deeper", "lr-0.1"], filtered  # the filter keeps w:train sweeps from 2026-02-01, newest first
    assert [line.split()[0] for line in served.splitlines() if " | 2026-" in line][:4] == ["other", "deeper", "lr-0.1",
                                                                                          "baseline"]
    footer_version = _pages._version()
    text = "== served, no filter ==\n" + served + "== served, workload=w:train since=2026-02-01 ==\n" + filtered
    golden("site_index.txt", text.replace(str(path), "STORE").replace(f"firstdiv {footer_version}", "firstdiv VERSION"))
