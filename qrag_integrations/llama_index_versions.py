"""The versions of an in-process index's LlamaIndex nodes, which its retrievers read, persist and change.

Each version is a snapshot of the index and the node of each of its rows, published together, so that a retrieval's
node bodies and a persist's docstore are those of the rows it searched or saved. Every `QRAGLlamaIndexRetriever`
over one index shares its `Shelf` (one writer at a time, readers never wait), so a node inserted or deleted through
any of them is seen by all.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

from llama_index.core.schema import BaseNode

from qrag.training.search import Chunk, ChunkIndex


@dataclass(frozen=True)
class NodesVersion:
    """One version: an index snapshot and its rows' nodes (None for a row no retriever gave a node for)."""

    index: ChunkIndex  # a `ChunkIndex.snapshot()`
    nodes: list[BaseNode | None]  # items [0, len(index)) are this version's, later ones a newer one's (append-only)

    def node(self, chunk: Chunk) -> BaseNode | None:
        """The node of a chunk this version's index returned (None for one it does not hold)."""
        row = chunk.position
        node = self.nodes[row] if row is not None and 0 <= row < len(self.index) else None
        return node if node is not None and node.node_id == chunk.id else None

    def by_id(self) -> dict[str, BaseNode]:
        return {n.node_id: n for n in self.nodes[: len(self.index)] if n is not None}


class Shelf:
    """The current version of one live index's nodes, and the lock its changes take. It holds snapshots of the index,
    never the index itself (the registry of shelves must not keep an index alive)."""

    def __init__(self, index: ChunkIndex, nodes: list[BaseNode | None]) -> None:
        self.writer = threading.Lock()  # one insert or delete at a time; retrievals never wait
        self.version = NodesVersion(index.snapshot(), nodes)

    def held(self, index: ChunkIndex) -> NodesVersion:
        """The current version, before a change of `index` (under `writer`). The BM25 index a retrieval built on it
        (a lexical weight the searcher's own settings lack) is built on `index` too, so the next version extends it."""
        held = self.version
        if held.index.lexical is not None:
            index.with_lexical(pairs=held.index.lexical.pairs is not None)
        return held

    def publish(self, index: ChunkIndex, nodes: list[BaseNode | None], checked_from: int) -> None:
        """Make `index` as it now is, with `nodes` for its rows (checked from row `checked_from` on), the current
        version, in one assignment (under `writer`)."""
        view = index.snapshot()
        if [n.node_id if n else None for n in nodes[checked_from : len(view)]] != list(view.ids[checked_from:]):
            known = {n.node_id: n for n in nodes if n is not None}  # the index was changed beside the retrievers
            nodes = [known.get(i) for i in view.ids]
        self.version = NodesVersion(view, nodes)


_SHELVES: weakref.WeakKeyDictionary[ChunkIndex, Shelf] = weakref.WeakKeyDictionary()
_SHELVES_LOCK = threading.Lock()


def shelf_for(index: ChunkIndex, nodes: list[BaseNode]) -> Shelf:
    """The shelf of `index`, whose rows hold `nodes` (checked by the caller): the one other retrievers over it share,
    its current version taken again, or a new one where there is none or it holds other ids."""
    with _SHELVES_LOCK:
        shelf = _SHELVES.get(index)
        if shelf is None:
            shelf = _SHELVES[index] = Shelf(index, list(nodes))
            return shelf
    with shelf.writer:
        held = shelf.version
        same = [n.node_id if n else None for n in held.nodes[: len(held.index)]] == [n.node_id for n in nodes]
        shelf.publish(index, held.nodes if same else list(nodes), 0)
    return shelf
