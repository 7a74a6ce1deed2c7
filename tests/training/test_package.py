"""`qrag.training` exports its main types at the package top, imported on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_main_types_are_exported_lazily() -> None:
    """Importing the package loads no torch and no submodule; touching a name loads exactly its module."""
    code = (
        "import sys\n"
        "import qrag.training as t\n"
        "heavy = ['torch', 'qrag.training.model.qnet', 'qrag.training.search.searcher', 'qrag.training.search.index']\n"
        "assert not [m for m in heavy if m in sys.modules], [m for m in heavy if m in sys.modules]\n"
        "from qrag.training import ChunkIndex, MultiHopSearcher, QNetwork, load_model\n"
        "from qrag.training.search.index import ChunkIndex as C\n"
        "from qrag.training.model.qnet import QNetwork as Q\n"
        "from qrag.training.search.searcher import MultiHopSearcher as M, load_model as L\n"
        "assert (ChunkIndex, MultiHopSearcher, QNetwork, load_model) == (C, M, Q, L)\n"
        "assert set(t.__all__) == {'ChunkIndex', 'MultiHopSearcher', 'QNetwork', 'load_model'} <= set(dir(t))\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


def test_unknown_name_is_an_attribute_error_and_submodules_still_import() -> None:
    import qrag.training as t

    with pytest.raises(AttributeError, match="qrag.training attribute Searcher"):
        t.Searcher  # noqa: B018
    from qrag.training.learn import td

    assert td.__name__ == "qrag.training.learn.td"
    assert t.load_model is __import__("qrag.training.search.searcher", fromlist=["load_model"]).load_model
