"""The locked test environment: what the suite runs on is what requirements/dev.lock says, so a fresh clone tests
what was tested; a drifted .venv is named package by package with the way back; and the lock covers every
requirement of the dev extra (a requirement added without refreshing the lock fails here, not on a fresh machine
next month)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib

from _paths import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

LOCK = ROOT / "requirements" / "dev.lock"
#: installed by venv itself, not by the dev extra (pip freeze leaves them out too)
TOOLING = {"pip", "setuptools", "wheel", "firstdiv"}
REFRESH = ("rebuild it from the lock with `make clean && make test`, or move the lock to today's releases with "
           "`make lock` (README, 'The locked test environment')")


def read_lock(text: str) -> dict[str, str]:
    """``{canonical name: version}`` from ``name==version`` lines; comments and blank lines skipped."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
            assert m, f"requirements/dev.lock: {line!r} is not an exact name==version pin"
            pins[canonicalize_name(m[1])] = m[2]
    return pins


def drift(pins: dict[str, str], installed: dict[str, str]) -> list[str]:
    """One line per package whose installed version is not the locked one (a local label such as ``+cpu`` on
    either side is kept: the lock names the build that was tested), or that is missing, or installed unlocked."""
    out = [f"{name}: locked {want}, installed {installed.get(name, 'nothing')}"
           for name, want in sorted(pins.items()) if installed.get(name) is None or Version(installed[name]) != Version(want)]
    out += [f"{name}: installed {have}, not in the lock" for name, have in sorted(installed.items())
            if name not in pins and name not in TOOLING]
    return out


#: a fresh interpreter's view of the environment: within the suite, a test that imported setuptools has put its
#: vendored packages (an older packaging, jaraco.*) on sys.path, and they are not what the environment installed
_LIST = ("import importlib.metadata as m, json\nout = {}\nfor d in m.distributions():\n"
         "    out.setdefault(d.metadata['Name'], d.version)\nprint(json.dumps(out))")


def _installed() -> dict[str, str]:
    proc = subprocess.run([sys.executable, "-I", "-c", _LIST], capture_output=True, text=True, timeout=300, check=True)
    return {canonicalize_name(name): version for name, version in json.loads(proc.stdout).items()}


def test_the_installed_packages_are_the_locked_ones():
    import setuptools  # noqa: F401 - as a library may: its vendored packages join sys.path, and must not count

    problems = drift(read_lock(LOCK.read_text()), _installed())
    assert not problems, f"this environment is not the locked one ({len(problems)} packages): " + "; ".join(
        problems[:12]) + f". {REFRESH}"


def test_drift_names_each_package_and_the_build():
    pins = {"torch": "2.13.0+cpu", "transformers": "5.25.0", "ray": "2.60.0"}
    assert drift(pins, {"torch": "2.13.0+cpu", "transformers": "5.25.0", "ray": "2.60.0", "pip": "23.2.1"}) == []
    assert drift(pins, {"torch": "2.13.0", "transformers": "5.26.0", "pandas": "3.1.1", "pip": "23.2.1"}) == [
        "ray: locked 2.60.0, installed nothing", "torch: locked 2.13.0+cpu, installed 2.13.0",
        "transformers: locked 5.25.0, installed 5.26.0", "pandas: installed 3.1.1, not in the lock"]


def test_the_lock_pins_every_requirement_of_the_dev_extra_within_its_range():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = read_lock(LOCK.read_text())
    wanted = [Requirement(r) for r in (*project["dependencies"], *project["optional-dependencies"]["dev"])]
    missing = [str(r) for r in wanted if canonicalize_name(r.name) not in pins]
    assert not missing, f"requirements/dev.lock does not pin {missing}: run `make lock`"
    outside = [f"{r} (locked {pins[canonicalize_name(r.name)]})" for r in wanted
               if not r.specifier.contains(pins[canonicalize_name(r.name)], prereleases=True)]
    assert not outside, f"the lock is outside pyproject.toml's ranges: {outside}: run `make lock`"


def test_every_user_facing_extra_keeps_a_range():
    """The lock is for the tests: what users install from the extras stays a range (ruff, a dev tool, is pinned
    on purpose: its default rules change between releases)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    exact = [r for name, reqs in extras.items() if name != "dev" for r in reqs if "==" in r]
    assert not exact, f"user-facing extras pin exact versions: {exact}"
