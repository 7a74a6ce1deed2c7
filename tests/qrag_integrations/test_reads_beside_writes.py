"""Both adapters serve reads beside writes: `invoke`/`ainvoke`/`abatch` and LlamaIndex `retrieve`/`aretrieve` run
while another thread adds and deletes documents; no exception, no result outside the filter, and no document
returned by a search that started after its delete had returned."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import MetadataFilter, MetadataFilters

from qrag.integrations import QRAGLlamaIndexRetriever, QRAGRetriever
from qrag.training.model.qnet import QNetwork

WHO = ("Mary", "John", "Sandra", "Daniel")
TEXTS = [f"{who} {verb} the {what} in room {i}." for i, (who, (verb, what)) in enumerate(
    (w, p) for w in WHO for p in (("took", "milk"), ("dropped", "apple"), ("went to", "garden"), ("left", "box")))]
META = [{"tenant": t.split()[0]} for t in TEXTS]
IDS = [f"d{i}" for i in range(len(TEXTS))]
QUESTIONS = ["Where is the milk?", "Who went to the garden?", "What did Mary drop?"]


class Churn:
    """A thread that adds a document of a rotating tenant and deletes an older added one, over and over, recording
    when each delete returned."""

    def __init__(self, add: Callable[[str, str, str], None], delete: Callable[[str], None]) -> None:
        self.add, self.delete = add, delete
        self.deleted: dict[str, float] = {}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        added: list[str] = []
        i = 0
        try:
            while not self._stop.is_set():
                cid = f"new{i}"
                self.add(cid, f"{WHO[i % 4]} carried the milk to room {i}.", WHO[i % 4])
                added.append(cid)
                if len(added) > 3:
                    gone = added.pop(0)
                    self.delete(gone)
                    self.deleted[gone] = time.monotonic()
                i += 1
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.errors.append(e)

    def gone_before(self, started: float) -> set[str]:
        return {cid for cid, t in list(self.deleted.items()) if t < started}

    def __enter__(self) -> Churn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        assert not self.errors, self.errors
        assert len(self.deleted) > 3  # the writer ran


def test_langchain_invoke_ainvoke_and_abatch_beside_adds_and_deletes(tiny_qnet: QNetwork) -> None:
    retriever = QRAGRetriever.from_texts(TEXTS, model=tiny_qnet, metadatas=META, ids=IDS, k=4,
                                         filter={"tenant": "Mary"})
    churn = Churn(lambda cid, text, who: retriever.add_texts([text], [{"tenant": who}], [cid]),
                  lambda cid: retriever.delete([cid]))

    async def reads(gone: set[str]) -> list[list[str]]:
        one = await retriever.ainvoke(QUESTIONS[0])
        many = await retriever.abatch(QUESTIONS)
        return [[d.id or "", d.metadata["tenant"]] for docs in [one, *many] for d in docs]  # type: ignore[misc]

    seen = 0
    with churn:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            started = time.monotonic()
            gone = churn.gone_before(started)
            docs = [[d.id or "", d.metadata["tenant"]] for d in retriever.invoke(QUESTIONS[1])]
            docs += asyncio.run(reads(gone))
            for cid, tenant in docs:
                assert tenant == "Mary" and cid not in gone, (cid, tenant)
                seen += 1
    assert seen > 0


def test_llama_index_retrieve_and_aretrieve_beside_inserts_and_deletes(tiny_qnet: QNetwork) -> None:
    nodes = [TextNode(text=t, id_=i, metadata=m) for t, i, m in zip(TEXTS, IDS, META, strict=True)]
    mary = MetadataFilters(filters=[MetadataFilter(key="tenant", value="Mary")])
    retriever = QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=tiny_qnet, similarity_top_k=4, filters=mary)
    churn = Churn(lambda cid, text, who: retriever.insert_nodes([TextNode(text=text, id_=cid, metadata={"tenant": who})]),
                  lambda cid: retriever.delete_nodes([cid]))

    async def reads() -> list[list[str]]:
        found = await asyncio.gather(*(retriever.aretrieve(q) for q in QUESTIONS))
        return [[n.node.node_id, n.node.metadata["tenant"]] for hits in found for n in hits]

    seen = 0
    with churn:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            gone = churn.gone_before(time.monotonic())
            hits = [[n.node.node_id, n.node.metadata["tenant"]] for n in retriever.retrieve(QUESTIONS[0])]
            hits += asyncio.run(reads())
            for cid, tenant in hits:
                assert tenant == "Mary" and cid not in gone, (cid, tenant)
                seen += 1
    assert seen > 0
