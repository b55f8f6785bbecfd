"""The ports of public training programs (``public/``, see its README) are what they claim to be: each one trains
under its own loop, says where it comes from, and builds its bug variants. Nothing here runs firstdiv: the ports'
first contact with the instruments is measured elsewhere, once."""

from __future__ import annotations

import pathlib
import re

import pytest
import torch
from _api import Bug, Program, load_dir, self_check

PUBLIC_DIR = pathlib.Path(__file__).resolve().parent / "public"
PORTS = load_dir(PUBLIC_DIR, "realworld_public")

pytestmark = pytest.mark.usefixtures("one_thread")

REPOSITORY = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+")
COMMIT = re.compile(r"\b[0-9a-f]{40}\b")
LICENSE = re.compile(r"License:\s*\S+")


def test_there_are_ports():
    assert PORTS, f"no module in {PUBLIC_DIR}"


@pytest.mark.parametrize("name", sorted(PORTS))
def test_header_names_repository_commit_and_license(name):
    doc = PORTS[name].__doc__ or ""
    assert REPOSITORY.search(doc), f"{name}: the header names no https://github.com/<owner>/<repo>"
    assert COMMIT.search(doc), f"{name}: the header names no 40-hex commit"
    assert LICENSE.search(doc), f"{name}: the header names no 'License: ...'"
    assert "Deviations" in doc, f"{name}: the header lists no deviations"


@pytest.mark.parametrize("name", sorted(PORTS))
def test_port_learns_under_its_own_loop(name):
    program = PORTS[name].build(0)
    assert isinstance(program, Program)
    first, last = self_check(program, steps=getattr(PORTS[name], "SELF_CHECK_STEPS", 30))
    assert torch.isfinite(torch.tensor(last)) and last < first, (first, last)


@pytest.mark.parametrize("name", sorted(PORTS))
def test_port_has_buildable_bug_variants(name):
    bugs = PORTS[name].BUGS
    assert bugs and all(isinstance(b, Bug) for b in bugs)
    assert len({b.name for b in bugs}) == len(bugs)
    for bug in bugs:
        assert bug.instrument and bug.where, bug.name
        assert isinstance(bug.build(0), Program), bug.name
