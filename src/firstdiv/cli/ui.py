"""`firstdiv ui`: browse the run store in a web browser (a local server; see firstdiv.site)."""

from __future__ import annotations

import click

from ._common import EXIT_OK, echo, emit, flush_json, json_option, store_option


@click.command("ui")
@store_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (the default answers this machine only).")
@click.option("--port", type=int, default=8765, show_default=True, help="Port to listen on; 0 picks any free port.")
@click.option("--no-browser", is_flag=True, help="Print the URL without opening a browser.")
@json_option
def ui_command(store: str | None, host: str, port: int, no_browser: bool, as_json: bool) -> int:
    """Serve an index of the run store's sweeps, comparisons and incidents, each linked to its report page.

    The index filters by name, workload and date (?name=&workload=&since=&until=); every page is
    rendered from the store when it is opened, so a reload shows new runs. The store is only read.
    Ctrl-C stops the server. --json prints the envelope (status SERVING, the URL and the store) before serving.
    """
    from ..lab.store import default_path
    from ..site import make_server

    path = default_path() if store is None else store
    server = make_server(path, host=host, port=port)
    try:
        if as_json:
            emit(None, True, {"url": server.url, "store": str(path)}, status="SERVING")
            flush_json()
        else:
            echo(f"firstdiv ui: serving {path} at {server.url} (Ctrl-C stops)")
            if host not in ("127.0.0.1", "localhost", "::1"):
                echo(f"firstdiv ui: note: listening on {host}: whoever can reach this machine can read the store", err=True)
        if not no_browser:
            import webbrowser

            webbrowser.open(server.url)
        server.serve_forever()
    except KeyboardInterrupt:
        if not as_json:
            echo("firstdiv ui: stopped")
    finally:
        server.server_close()
    return EXIT_OK
