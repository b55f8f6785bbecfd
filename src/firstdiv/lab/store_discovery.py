"""Where the run store is when no ``--store`` or ``$FIRSTDIV_STORE`` names one: found the way git finds its repository.

From the working directory upwards, the first directory holding ``.firstdiv/`` owns the store
(``.firstdiv/runs.db``), so every command run from a subdirectory of a project reads and writes the project's
store. The search does not leave the git work tree it starts in (a directory holding ``.git``, a folder or a
worktree's file): another project's or the home directory's store is never picked up from inside a repository.
Outside a git work tree it goes up to the filesystem root. When no store is found, it is created at the top of the
git work tree, or in the working directory outside one. A store in the working directory is named by the relative
path ``.firstdiv/runs.db``; one found or created elsewhere by its absolute path.
"""

from __future__ import annotations

from pathlib import Path

STORE_DIR = ".firstdiv"
STORE_FILE = "runs.db"
#: the ``.gitignore`` a newly created ``.firstdiv/`` carries: nothing in it is ever committed by accident
GITIGNORE = "# created by firstdiv: the run store is local data\n*\n"


def discover(start: Path | None = None) -> Path:
    """The store path for commands run in ``start`` (default: the working directory); see the module docstring."""
    try:
        here = Path.cwd() if start is None else Path(start).absolute()
    except OSError:  # the working directory was deleted: the plain relative default, and its error, stand
        return Path(STORE_DIR) / STORE_FILE
    top = None
    for folder in (here, *here.parents):
        if (folder / STORE_DIR).is_dir():
            return _named(folder, here)
        if (folder / ".git").exists():
            top = folder
            break
    return _named(top if top is not None else here, here)


def _named(folder: Path, here: Path) -> Path:
    return Path(STORE_DIR) / STORE_FILE if folder == here else folder / STORE_DIR / STORE_FILE


def make_store_dir(folder: Path) -> None:
    """Create ``folder`` (and its parents); a new ``.firstdiv/`` gets its ``.gitignore``. OSError when it cannot."""
    new = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    if new and folder.name == STORE_DIR:
        (folder / ".gitignore").write_text(GITIGNORE)
