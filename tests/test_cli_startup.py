"""The command lines parse before the model libraries load: `--help` and a bad flag answer without importing torch
or transformers (seconds on a slow CPU otherwise)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from {module} import main
try:
    code = main({argv!r})
except SystemExit as e:
    code = e.code
print(code, sorted(m for m in ("torch", "transformers") if m in sys.modules))
"""


@pytest.mark.parametrize(("module", "argv", "code"), [
    ("qrag.training.learn.cli.train", ["--help"], 0),
    ("qrag.training.learn.cli.train", ["--trainer.select_tolerance", "-1"], 2),
    ("qrag.eval.cli", ["--help"], 0),
    ("qrag.eval.cli", ["babilong", "--out", "unused", "--budget", "0"], 2),
    ("qrag.eval.cli", ["babilong", "--out", "unused", "--methods", "nope"], 2),
])
def test_help_and_bad_flags_answer_before_torch_loads(module: str, argv: list[str], code: int) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE.format(module=module, argv=argv)], capture_output=True,
                         text=True, check=True).stdout.strip().splitlines()[-1]
    assert out == f"{code} []", out
