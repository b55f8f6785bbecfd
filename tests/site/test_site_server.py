"""`firstdiv ui`'s server over HTTP (urllib against a server on a free port in a thread): the index and its
filters, every linked page being the existing report page, 404/400/500 pages without tracebacks, a reload
showing new sweeps, the store never written; and the command itself (port in use, Ctrl-C)."""

import hashlib
import json
import re
import signal
import socket
import sqlite3
import subprocess
import sys

import pytest
from _site_store import FAST, get, serving, shared_store, sweep_ids

import firstdiv
from firstdiv import html
from firstdiv.diagnosis.incident import incident_show
from firstdiv.lab.store import Store


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return shared_store(tmp_path_factory)


@pytest.fixture(scope="module")
def server(store):
    with serving(store) as running:
        yield running


def _rows(page):
    return re.findall(r'<a class="sweep-link" href="[^"]+">([^<]+)</a>', page)


def _links(page):
    return sorted(set(re.findall(r'href="((?:sweep|compare|incident)/[^"]+)"', page)))


def _digest(store):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(store.parent.glob("runs.db*"))
            if not p.name.endswith("-shm")}  # the shared-memory index is a reader's scratch, not data


def test_server_binds_loopback_and_serves_the_index(server):
    assert server.url.startswith("http://127.0.0.1:")
    status, page, headers = get(server.url)
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert _rows(page) == ["tiny-fail", "LR-high", "base"]


@pytest.mark.parametrize(("query", "expected"), [
    ("?name=lr", ["LR-high"]),
    ("?workload=builtin%3Amlp", ["LR-high", "base"]),
    ("?since=2026-02-01&until=2026-03-05", ["LR-high"]),
    ("?since=2026-03-06", ["tiny-fail"]),
    ("?name=&workload=&since=&until=", ["tiny-fail", "LR-high", "base"]),  # an empty form
])
def test_filters_in_the_query_select_rows_on_the_server(server, query, expected):
    status, page, _ = get(server.url + query)
    assert status == 200 and _rows(page) == expected


def test_every_linked_page_is_the_report_firstdiv_report_writes(server, store):
    _, index, _ = get(server.url)
    links = _links(index)
    ids = sweep_ids(store)
    pair = f"compare/{ids['base']}--{ids['LR-high']}.html"
    incident = next(link for link in links if link.startswith("incident/inc-"))
    assert links == sorted([*(f"sweep/{i}.html" for i in ids.values()), pair, incident])  # one comparable pair
    with Store(store, readonly=True) as st:
        expected = {f"sweep/{i}.html": html.to_html(html.load_sweep(i, st)) for i in ids.values()}
        expected[pair] = html.to_html(html.comparison_view(ids["base"], ids["LR-high"], store=st))
        expected[incident] = html.to_html(incident_show(incident[len("incident/"):-len(".html")], store=st))
    for link in links:
        status, page, _ = get(server.url + link)
        assert status == 200 and page == expected[link], link
    assert "<title>Comparison base → LR-high on val_loss</title>" in expected[pair]
    assert "loss is flat after finetuning" in expected[incident]


@pytest.mark.parametrize("path", ["nope", "sweep/ffffffffffff.html", "sweep/../../etc/passwd", "compare/abc.html",
                                  "incident/inc-00000000.html", "sweep/%3Cscript%3E.html"])
def test_unknown_addresses_are_404_pages(server, path):
    status, page, _ = get(server.url + path)
    assert status == 404 and "<title>404 Not found</title>" in page
    assert "Traceback" not in page and "<script" not in page


def test_bad_filter_values_are_400_pages_with_the_reason(server):
    status, page, _ = get(server.url + "?since=yesterday")
    assert status == 400
    assert "Expected the since filter as a date YYYY-MM-DD (UTC) but got &#39;yesterday&#39;" in page
    status, page, _ = get(server.url + "?page=0")
    assert status == 400 and "Expected page as an integer from 1 to 1000000000 but got &#39;0&#39;" in page


@pytest.mark.parametrize("page", ["99999999999999999999", "46116860184273879", "1" + "0" * 5000, "-1", "abc", "1.5",
                                  "%C2%B2", "%EF%BC%91", "%00", "0x10"])
def test_a_page_number_that_is_not_a_page_is_a_400_page_with_the_reason(server, page):
    status, body, _ = get(server.url + "?page=" + page)
    assert status == 400, body
    reason = re.search(r'<p class="lead reason">(.*?)</p>', body, re.DOTALL).group(1)
    assert reason.startswith("Expected page as an integer from 1 to ") and "\n" not in reason, reason
    assert "Traceback" not in body


@pytest.mark.parametrize(("limit", "offset"), [(10**20, 0), (1, 10**20), (1, -1), (0, 0), (1, "2")])
def test_index_rows_refuses_limits_sqlite_cannot_hold_in_one_line(store, limit, offset):
    with pytest.raises(firstdiv.InvalidArgument) as info:
        firstdiv.site.index_rows(store, limit=limit, offset=offset)
    assert "\n" not in str(info.value)


def test_every_response_refuses_framing_and_names_no_python_version(server):
    for url, method in [(server.url, "GET"), (server.url + "?page=abc", "GET"), (server.url + "nope", "GET"),
                        (server.url, "HEAD"), (server.url, "POST")]:
        status, _, headers = get(url, method=method)
        assert headers["X-Frame-Options"] == "DENY", (url, method, status)
        assert "frame-ancestors 'none'" in headers["Content-Security-Policy"], (url, method, status)
        assert headers["Server"] == "firstdiv-ui", (url, method, status)
    status, _, headers = get(server.url, headers={"Host": "attacker.example"})
    assert status == 403 and headers["X-Frame-Options"] == "DENY" and headers["Server"] == "firstdiv-ui"


def test_a_malformed_request_line_is_answered_with_the_same_headers(server):
    host, port = server.server_address[:2]
    with socket.create_connection((host, port), timeout=60) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    assert head.startswith("HTTP/1.0 431"), head  # the header line is too long
    assert "X-Frame-Options: DENY" in head and "frame-ancestors 'none'" in head and "Python" not in head, head


def test_a_request_for_another_host_name_is_refused(server):
    status, page, _ = get(server.url, headers={"Host": "attacker.example"})
    assert status == 403 and "sweep-link" not in page
    assert get(server.url, headers={"Host": f"localhost:{server.server_address[1]}"})[0] == 200


def test_a_page_that_cannot_render_is_a_500_page_and_new_sweeps_show_on_reload(store, tmp_path, capsys):
    copy = tmp_path / "runs.db"
    with sqlite3.connect(store) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    ids = sweep_ids(copy)
    conn = sqlite3.connect(copy, isolation_level=None)
    conn.execute("UPDATE runs SET record='{\"seed\": 0' WHERE id=(SELECT MIN(id) FROM runs WHERE workload='builtin:mlp')")
    conn.close()
    with serving(copy) as running:
        status, page, _ = get(running.url + f"sweep/{ids['base']}.html")
        assert status == 500 and "<title>500 This page could not be rendered</title>" in page
        reason = re.search(r'<p class="lead reason">(.*?)</p>', page, re.DOTALL).group(1)
        assert "is damaged" in reason and "firstdiv runs --drop" in reason and "\n" not in reason
        assert "Traceback" not in page and "File &#34;" not in page
        assert get(running.url)[0] == 200  # the index reads no run record: it still lists everything
        firstdiv.sweep("builtin:mlp", "0-1", sets=[*FAST, "lr=0.01"], store=copy, name="fresh")
        assert _rows(get(running.url)[1])[0] == "fresh"
    assert "is damaged" in capsys.readouterr().err  # the server says which page failed, on its stderr


def test_serving_never_writes_the_store(store):
    before = _digest(store)
    with serving(store) as running:
        _, index, _ = get(running.url)
        for link in _links(index):
            if link.startswith(("incident/", f"sweep/{sweep_ids(store)['base']}")):
                assert get(running.url + link)[0] == 200
    assert _digest(store) == before


def _cli(*args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "firstdiv", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def test_ui_prints_the_url_serves_and_stops_cleanly_on_ctrl_c(store):
    proc = _cli("ui", "--store", store, "--port", "0", "--no-browser", "--json")
    try:
        lines = []
        while not lines or lines[-1] != "}\n":
            lines.append(proc.stdout.readline())
            assert lines[-1], proc.stderr.read()
        envelope = json.loads("".join(lines))
        assert (envelope["command"], envelope["status"], envelope["ok"], envelope["exit_code"]) == ("ui", "SERVING", True, 0)
        started = envelope["payload"]
        assert started["store"] == str(store) and started["url"].startswith("http://127.0.0.1:")
        assert get(started["url"])[0] == 200
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0 and out == "" and "Traceback" not in err, err  # stdout held the JSON alone


def test_ui_on_a_port_in_use_is_one_line_and_exit_2(store):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _cli("ui", "--store", store, "--port", port, "--no-browser")
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    assert err == f"firstdiv: error: Port {port} on 127.0.0.1 is in use; pass --port 0 for any free port, or another --port\n"


def test_ui_without_a_store_is_one_line_and_exit_2(tmp_path):
    proc = _cli("ui", "--store", tmp_path / "none.db", "--no-browser")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == "" and err.count("\n") == 1 and "does not exist; run `firstdiv sweep` first" in err


def test_pages_of_the_served_index_link_each_other_and_keep_the_filter(server, monkeypatch):
    from firstdiv.site import _pages

    monkeypatch.setattr(_pages, "PER_PAGE", 1)
    _, first, _ = get(server.url + "?workload=builtin%3Amlp")
    assert _rows(first) == ["LR-high"] and "2 sweeps match; showing 1–1" in first
    older = re.search(r'<a rel="next" href="([^"]+)">', first).group(1).replace("&amp;", "&")
    assert older == "?workload=builtin%3Amlp&page=2" and 'rel="prev"' not in first
    _, second, _ = get(server.url + older)
    assert _rows(second) == ["base"] and "showing 2–2" in second and 'rel="next"' not in second
    assert '<a rel="prev" href="?workload=builtin%3Amlp&amp;page=1">' in second
    _, beyond, _ = get(server.url + "?workload=builtin%3Amlp&page=9")
    assert _rows(beyond) == [] and "none on this page" in beyond
