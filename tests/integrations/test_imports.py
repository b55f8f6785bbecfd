"""Importing firstdiv loads neither training library; an integration without its library is an ImportError that
gives the install line."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


def test_importing_firstdiv_and_the_package_loads_no_training_library():
    code = ("import sys, firstdiv, firstdiv.integrations\n"
            "print(sorted(m for m in ('pytorch_lightning', 'lightning', 'transformers', 'accelerate') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("module", "missing", "extra"), [
    ("firstdiv.integrations.lightning", ("pytorch_lightning", "lightning", "lightning.pytorch"), "lightning"),
    ("firstdiv.integrations.hf", ("transformers",), "hf"),
])
def test_an_integration_without_its_library_says_what_to_install(monkeypatch, module, missing, extra):
    for name in missing:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: importing it raises ImportError
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError, match=rf"pip install 'firstdiv\[{extra}\]'"):
        importlib.import_module(module)
