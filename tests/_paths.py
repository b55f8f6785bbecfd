"""Where the tests' own files are, for test modules in any folder and for the child processes they start."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
WORKLOADS = TESTS / "workloads"
