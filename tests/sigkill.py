"""SIGKILL during a save: the trials behind tests/test_bad_inputs.py and scripts/sigkill_saves.py.

A trial saves version A completely, then forks a child that saves version B over it and kills the child
with SIGKILL after a delay. The folder must then load as exactly A or exactly B (model, index and fields
agreeing: a fingerprint of a search through the loaded object equals A's or B's), and after the next save
no temporary or `.old` folder may remain beside it.
"""

from __future__ import annotations

import copy
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from qrag.training.model.qnet import QNetwork

QUESTION = "Where is the milk?"
TEXTS_A = ["Mary went to the kitchen.", "Mary took the milk.", "John is in the garden.", "The milk is cold."]
TEXTS_B = ["Sandra moved to the office.", "Mary dropped the milk there.", "Daniel went home.", "It rained."]


@dataclass
class Kind:
    """One save path under test: how to build A and B, save one, load and fingerprint the folder."""

    name: str
    build: Callable[[QNetwork, list[str], int], Any]
    save: Callable[[Any, Path], object]
    signature: Callable[[Path], tuple[Any, ...]]
    memory_signature: Callable[[Any], tuple[Any, ...]]


def _rounded(values: Any) -> tuple[float, ...]:
    return tuple(round(float(v), 4) for v in values)


def _retriever_sig(r: Any) -> tuple[Any, ...]:
    docs = r.invoke(QUESTION)
    return (r.k, tuple(d.id for d in docs), _rounded(d.metadata["q_value"] for d in docs))


def _llama_sig(r: Any) -> tuple[Any, ...]:
    nodes = r.retrieve(QUESTION)
    return (r.similarity_top_k, tuple(n.node.node_id for n in nodes), _rounded(n.score for n in nodes))


def _qnet_sig(q: QNetwork) -> tuple[Any, ...]:
    return (_rounded(q.embed_states([QUESTION], [[]])[0][:8]), _rounded(q.embed_chunks(TEXTS_A[:1])[0][:8]))


def _langchain_build(qnet: QNetwork, texts: list[str], k: int) -> Any:
    from qrag.integrations import QRAGRetriever

    return QRAGRetriever.from_texts(texts, qnet, k=k)


def _llama_build(qnet: QNetwork, texts: list[str], k: int) -> Any:
    from llama_index.core.schema import TextNode

    from qrag.integrations import QRAGLlamaIndexRetriever

    nodes = [TextNode(text=t, id_=f"n{i}-{k}") for i, t in enumerate(texts)]
    return QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=qnet, similarity_top_k=k)


def kinds() -> dict[str, Kind]:
    from qrag.integrations import QRAGLlamaIndexRetriever, QRAGRetriever

    return {
        "save_local": Kind("save_local", _langchain_build, lambda r, p: r.save_local(p),
                           lambda p: _retriever_sig(QRAGRetriever.load_local(p)), _retriever_sig),
        "persist": Kind("persist", _llama_build, lambda r, p: r.persist(p),
                        lambda p: _llama_sig(QRAGLlamaIndexRetriever.from_persist_dir(p)), _llama_sig),
        "save_pretrained": Kind("save_pretrained", lambda q, _t, _k: q, lambda q, p: q.save_pretrained(p),
                                lambda p: _qnet_sig(QNetwork.from_pretrained(p)), _qnet_sig),
    }


def perturbed(qnet: QNetwork, seed: int = 1) -> QNetwork:
    """A copy of `qnet` with every floating weight nudged, so its vectors and Q-values differ."""
    other = copy.deepcopy(qnet)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return other


def kill_during(save: Callable[[], object], delay: float) -> str:
    """Run `save()` in a forked child and SIGKILL it after `delay` s: 'killed', 'finished' or 'failed'."""
    pid = os.fork()
    if pid == 0:  # the child: save, then leave without running the parent's cleanup handlers
        code = 0
        try:
            save()
        except BaseException:  # noqa: BLE001 - any failure is reported through the exit code
            code = 3
        os._exit(code)
    time.sleep(delay)
    os.kill(pid, signal.SIGKILL)  # an exited but unreaped child is still killable (a no-op)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return "killed"
    return "finished" if os.WEXITSTATUS(status) == 0 else "failed"


def strays(folder: Path) -> list[str]:
    """Temporary or `.old` folders left beside `folder` or anywhere inside it."""
    names = [p for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}.")]
    inside = [p for p in folder.rglob(".*") if ".tmp-" in p.name or p.name.endswith(".old")] if folder.is_dir() else []
    return sorted(str(p) for p in [*names, *inside])


@dataclass
class Trial:
    kind: str
    delay: float
    outcome: str  # killed / finished / failed (the child)
    loaded: str  # old / new / mixed / unloadable
    strays_after_next_save: int


def run_trial(kind: Kind, a: Any, b: Any, sig_a: tuple[Any, ...], sig_b: tuple[Any, ...], folder: Path,
              delay: float) -> Trial:
    kind.save(a, folder)
    outcome = kill_during(lambda: kind.save(b, folder), delay)
    try:
        sig = kind.signature(folder)
        loaded = "old" if sig == sig_a else "new" if sig == sig_b else "mixed"
    except Exception:  # noqa: BLE001 - a save that cannot be loaded is the failure being counted
        loaded = "unloadable"
    kind.save(a, folder)
    return Trial(kind.name, delay, outcome, loaded, len(strays(folder)))


def save_seconds(kind: Kind, obj: Any, folder: Path, repeats: int = 3, fastest: bool = False) -> float:
    """Median (or fastest) wall time of one save of `obj` over an existing save, to spread kill delays over."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        kind.save(obj, folder)
        times.append(time.perf_counter() - start)
    return min(times) if fastest else sorted(times)[len(times) // 2]
