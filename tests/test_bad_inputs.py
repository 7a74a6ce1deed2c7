"""Bad input and faults at every public entry point: a clear error of the project's own, never a library
traceback, never a silently wrong answer, never a lost save.

Covers persistence (corrupt checkpoints, indexes and saved retrievers; SIGKILL during a save; full disk;
stale temporary folders), finite numbers and the adapters' edges; the three CLIs are in test_bad_cli_inputs.py.
Everything runs on the tiny random BERT of tests/conftest.py.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from qrag.training.atomic import previous_dir, write_text_atomic
from qrag.training.model.qnet import CheckpointError, QNetwork
from qrag.training.search.index import ChunkIndex, IndexLoadError
from qrag.training.search.searcher import MultiHopSearcher, SearchError, load_model, search_many
from tests import sigkill

TEXTS = ["Mary went to the kitchen.", "Mary took the milk.", "John is in the garden.", "The milk is cold."]
SURROGATE = "milk \ud800 here"
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")


@pytest.fixture(scope="module")
def qnet(tiny_encoder_path: Path) -> QNetwork:
    # Nudged off the base encoder, as a trained model is: its checkpoint holds every weight.
    return sigkill.perturbed(QNetwork.from_encoder(str(tiny_encoder_path)), seed=2).eval()


@pytest.fixture(scope="module")
def saved(qnet: QNetwork, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A checkpoint, a searcher, a LangChain and a LlamaIndex save, written once for the module."""
    from qrag.integrations import QRAGRetriever

    root = tmp_path_factory.mktemp("saved")
    searcher = MultiHopSearcher(qnet, ChunkIndex.from_texts(qnet, TEXTS))
    return {"ckpt": qnet.save_pretrained(root / "ckpt"), "searcher": searcher.save(root / "searcher"),
            "retriever": QRAGRetriever.from_texts(TEXTS, qnet, k=2).save_local(root / "retriever")}


def _copy(src: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(src, tmp_path / src.name))


# ------------------------------------------------------------------ corrupt checkpoints


def _truncate(d: Path) -> None:
    w = d / "model.safetensors"
    w.write_bytes(w.read_bytes()[:100])


def _pickled(d: Path) -> None:
    (d / "model.safetensors").write_bytes(pickle.dumps({"w": [1.0, 2.0]}))


def _edit_header(edit: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        head = json.loads((d / "qrag_config.json").read_text())
        (d / "qrag_config.json").write_text(json.dumps(edit(head)))
    return apply


def _set_tensor(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        tensors = load_file(str(d / "model.safetensors"))
        name = next(k for k in tensors if k.endswith("word_embeddings.weight"))
        tensors[name] = fn(tensors[name])
        save_file(tensors, str(d / "model.safetensors"))
    return apply


def _break_tokenizer(d: Path) -> None:
    for f in (d / "tokenizer").iterdir():
        f.write_text("{not json")


def _nan(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t[0, 0] = float("nan")
    return t


CHECKPOINT_DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "truncated weights": (_truncate, "model.safetensors"),
    "zero-byte weights": (lambda d: (d / "model.safetensors").write_bytes(b""), "model.safetensors"),
    "pickle weights": (_pickled, "model.safetensors"),
    "missing tokenizer": (lambda d: shutil.rmtree(d / "tokenizer"), "tokenizer"),
    "corrupt tokenizer": (_break_tokenizer, "tokenizer"),
    "header is a list": (lambda d: (d / "qrag_config.json").write_text("[1, 2]"), "qrag_config.json"),
    "header not JSON": (lambda d: (d / "qrag_config.json").write_text("{oops"), "qrag_config.json"),
    "header not UTF-8": (lambda d: (d / "qrag_config.json").write_bytes(b"\xff\xfe{}"), "qrag_config.json"),
    "header lacks model": (_edit_header(lambda h: {k: v for k, v in h.items() if k != "model"}), "qrag_config.json"),
    "header lacks saved_params": (_edit_header(lambda h: {**h, "saved_params": None}), "qrag_config.json"),
    "unknown model key": (_edit_header(lambda h: {**h, "model": {**h["model"], "bogus": 1}}), "qrag_config.json"),
    "model value of wrong type": (_edit_header(lambda h: {**h, "model": {**h["model"], "max_chunk_tokens": "x"}}),
                                  "qrag_config.json"),
    "version is a string": (_edit_header(lambda h: {**h, "version": "1"}), "qrag_config.json"),
    "missing encoder config": (lambda d: shutil.rmtree(d / "encoder"), "encoder"),
    "wrong-dim weights": (_set_tensor(lambda t: t[:, :8].contiguous()), "model.safetensors"),
    "NaN weights": (_set_tensor(_nan), "NaN"),
    "missing weights": (lambda d: (d / "model.safetensors").unlink(), "model.safetensors"),
}


@pytest.mark.parametrize("case", list(CHECKPOINT_DAMAGE))
def test_damaged_checkpoint_is_a_checkpoint_error_naming_the_file(case: str, saved: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    damage, needle = CHECKPOINT_DAMAGE[case]
    d = _copy(saved["ckpt"], tmp_path)
    damage(d)
    with pytest.raises(CheckpointError, match=needle):
        QNetwork.from_pretrained(d)


def test_missing_checkpoint_folder(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        QNetwork.from_pretrained(tmp_path / "nope")


# ------------------------------------------------------------------ indexes and saved searchers


def _index_edit(edit: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        p = d / "index" / "index.json"
        p.write_text(json.dumps(edit(json.loads(p.read_text()))))
    return apply


def _nan_vectors(d: Path) -> None:
    p = d / "index" / "vectors.safetensors"
    v = load_file(str(p))["vectors"]
    v[1, 2] = float("inf")
    save_file({"vectors": v}, str(p))


def _search_json(text: str) -> Callable[[Path], None]:
    return lambda d: (d / "search.json").write_text(text)


SEARCHER_DAMAGE: dict[str, tuple[Callable[[Path], None], type[Exception], str]] = {
    "NaN index vectors": (_nan_vectors, IndexLoadError, "NaN or infinite"),
    "index header not JSON": (lambda d: (d / "index" / "index.json").write_text("{"), IndexLoadError, "index.json"),
    "index count disagrees": (_index_edit(lambda h: {**h, "count": 99}), IndexLoadError, "inconsistent"),
    "index metadata not dicts": (_index_edit(lambda h: {**h, "metadatas": [["ab", "cd"]] * 4}), IndexLoadError,
                                 "metadatas"),
    "truncated vectors": (lambda d: (d / "index" / "vectors.safetensors").write_bytes(b"\0" * 9), IndexLoadError,
                          "vectors.safetensors"),
    "search.json is a list": (_search_json("[]"), SearchError, "search.json"),
    "search.json bad k": (_search_json(json.dumps({"format": "qrag-multihop-searcher", "config": {"k": "3"}})),
                          SearchError, "search.json"),
    "search.json missing": (lambda d: (d / "search.json").unlink(), SearchError, "search.json"),
}


@pytest.mark.parametrize("case", list(SEARCHER_DAMAGE))
def test_damaged_saved_searcher_is_a_clear_error(case: str, saved: dict[str, Path], tmp_path: Path) -> None:
    damage, error, needle = SEARCHER_DAMAGE[case]
    d = _copy(saved["searcher"], tmp_path)
    damage(d)
    with pytest.raises(error, match=needle):
        MultiHopSearcher.load(d)


def test_index_of_another_chunk_tower_is_refused_at_load(qnet: QNetwork, saved: dict[str, Path],
                                                        tmp_path: Path) -> None:
    d = _copy(saved["searcher"], tmp_path)
    other = sigkill.perturbed(qnet)
    shutil.rmtree(d / "index")
    ChunkIndex.from_texts(other, TEXTS).save(d / "index")  # a mixed folder: this model, another's vectors
    with pytest.raises(SearchError, match="another chunk tower"):
        MultiHopSearcher.load(d)
    with pytest.raises(SearchError, match="another chunk tower"):  # and the same pairing is not saved either
        MultiHopSearcher(qnet, ChunkIndex.from_texts(other, TEXTS)).save(tmp_path / "mixed")


def test_corrupt_retriever_json(saved: dict[str, Path], tmp_path: Path) -> None:
    from qrag.integrations import QRAGRetriever

    d = _copy(saved["retriever"], tmp_path)
    (d / "retriever.json").write_text('{"format": "qrag-langchain-retriever", "fields": [1]}')
    with pytest.raises(ValueError, match="retriever.json"):
        QRAGRetriever.load_local(d)


# ------------------------------------------------------------------ atomic saves


def test_failed_save_keeps_the_previous_one_and_leaves_nothing(qnet: QNetwork, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from qrag.integrations import QRAGRetriever

    folder = tmp_path / "r"
    QRAGRetriever.from_texts(TEXTS, qnet, k=2).save_local(folder)
    before = {p.name: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    other = sigkill.perturbed(qnet)  # the failed saves carry another model: a replaced model/ would show
    with pytest.raises(ValueError, match="JSON"):  # metadata that is not JSON: refused before anything is embedded
        QRAGRetriever.from_texts(TEXTS, other, metadatas=[{"x": object()}] * 4, k=3)

    def disk_full(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("qrag.training.search.index_folder.save_file", disk_full)
    with pytest.raises(OSError, match="No space"):
        QRAGRetriever.from_texts(TEXTS, other, k=3).save_local(folder)
    assert {p.name: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    assert sigkill.strays(folder) == []
    assert QRAGRetriever.load_local(folder).k == 2


def test_save_refuses_to_replace_a_foreign_folder(qnet: QNetwork, tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("precious")
    with pytest.raises(FileExistsError, match="not an earlier save"):
        MultiHopSearcher(qnet, ChunkIndex.from_texts(qnet, TEXTS)).save(tmp_path)
    with pytest.raises(FileExistsError, match="not an earlier save"):
        qnet.save_pretrained(tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "precious"


def test_saved_folders_follow_the_umask(qnet: QNetwork, tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        qnet.save_pretrained(tmp_path / "ckpt")
    finally:
        os.umask(old)
    assert (tmp_path / "ckpt").stat().st_mode & 0o777 == 0o755


def test_stale_temp_folders_are_cleaned_and_an_interrupted_swap_is_undone(saved: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    d = _copy(saved["ckpt"], tmp_path)
    dead = tmp_path / f".{d.name}.tmp-999999999-dead"
    shutil.copytree(d, dead)
    live = tmp_path / f".{d.name}.tmp-{os.getpid()}-live"
    live.mkdir()
    os.replace(d, previous_dir(d))  # killed between "old out" and "new in"
    QNetwork.from_pretrained(d)  # loads the previous save, put back
    assert d.is_dir() and not previous_dir(d).exists() and not dead.exists()
    assert live.exists()  # a live writer's folder is left alone


@pytest.mark.parametrize("kind", [  # one in the default suite, every kind in the slow one
    "save_local", pytest.param("persist", marks=pytest.mark.slow), pytest.param("save_pretrained", marks=pytest.mark.slow)])
def test_sigkill_during_a_save_leaves_the_old_or_the_new_save(kind: str, qnet: QNetwork, tmp_path: Path) -> None:
    k = sigkill.kinds()[kind]
    a, b = k.build(qnet, sigkill.TEXTS_A, 2), k.build(sigkill.perturbed(qnet), sigkill.TEXTS_B, 3)
    sig_a, sig_b = k.memory_signature(a), k.memory_signature(b)
    seconds = sigkill.save_seconds(k, a, tmp_path / kind, repeats=1)
    trials = [sigkill.run_trial(k, a, b, sig_a, sig_b, tmp_path / kind, f * seconds) for f in (0.0, 0.3, 0.6, 0.9, 3.0)]
    assert all(t.loaded in ("old", "new") for t in trials), trials
    assert all(t.outcome != "failed" and t.strays_after_next_save == 0 for t in trials), trials
    assert any(t.outcome == "killed" for t in trials), trials


# ------------------------------------------------------------------ finite numbers


def test_nan_vectors_are_refused_when_indexing() -> None:
    vectors = torch.zeros(2, 4)
    vectors[1, 0] = float("nan")
    with pytest.raises(ValueError, match="chunk vector 1"):
        ChunkIndex(vectors, ["a", "b"])


def test_nan_q_values_raise_instead_of_returning_max_hops_chunks(qnet: QNetwork) -> None:
    import copy

    broken = copy.deepcopy(qnet)
    index = ChunkIndex.from_texts(broken, TEXTS)
    with torch.no_grad():
        next(broken.state_tower.parameters()).fill_(float("nan"))
    with pytest.raises(SearchError, match="NaN"):
        MultiHopSearcher(broken, index).search_one("Where is the milk?")
    with pytest.raises(SearchError, match="NaN"):
        search_many(broken, ["Where is the milk?"], [index])


# ------------------------------------------------------------------ the adapters' edges


@pytest.fixture(scope="module")
def retriever(qnet: QNetwork) -> Any:
    from qrag.integrations import QRAGRetriever

    return QRAGRetriever.from_texts(TEXTS, qnet, metadatas=[{"src": i} for i in range(4)], k=2)


BAD_ARGS = [{"k": "3"}, {"k": True}, {"k": 0}, {"k": 2.0}, {"stop_threshold": "0.5"}, {"stop_threshold": float("nan")},
            {"max_hops": True}, {"beam_size": 1.5}, {"order": "random"}]


@pytest.mark.parametrize("args", BAD_ARGS, ids=[repr(a) for a in BAD_ARGS])
def test_langchain_arguments_are_strict_in_the_constructor_and_per_call(args: dict[str, Any], retriever: Any) -> None:
    from qrag.integrations import QRAGRetriever

    name = next(iter(args))
    with pytest.raises(ValueError, match=name):
        QRAGRetriever(searcher=retriever.searcher, **args)
    with pytest.raises(ValueError, match=name):
        retriever.invoke("Where is the milk?", **args)


@pytest.mark.parametrize("args", BAD_ARGS[:5], ids=[repr(a) for a in BAD_ARGS[:5]])
def test_llama_index_arguments_are_strict(args: dict[str, Any], qnet: QNetwork) -> None:
    from llama_index.core.schema import TextNode

    from qrag.integrations import QRAGLlamaIndexRetriever

    nodes = [TextNode(text=t, id_=str(i)) for i, t in enumerate(TEXTS)]
    renamed = {("similarity_top_k" if k == "k" else k): v for k, v in args.items()}
    with pytest.raises(ValueError, match=next(iter(args))):
        QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=qnet, **renamed)


@pytest.mark.parametrize("query", ["", "   ", None, 3, SURROGATE])
def test_bad_queries(query: Any, retriever: Any) -> None:
    with pytest.raises(ValueError, match="query|Unicode"):
        retriever.invoke(query)


FROM_TEXTS = {
    "texts=None": ({"texts": None}, "texts must be a list"),
    "texts is a string": ({"texts": "Mary took the milk."}, "single string"),
    "no texts": ({"texts": []}, "empty corpus"),
    "a text is not a string": ({"texts": ["ok", 3]}, r"texts\[1\]"),
    "lone surrogate": ({"texts": ["ok", SURROGATE]}, "surrogate"),
    "metadatas not dicts": ({"metadatas": [["ab", "cd"]] * 4}, r"metadatas\[0\] must be a dict"),
    "metadatas is a dict": ({"metadatas": {"a": 1}}, "list of dicts"),
    "metadata key 'score'": ({"metadatas": [{"score": 1}] * 4}, "score"),
    "metadata key 'hop'": ({"metadatas": [{}, {"hop": 1}, {}, {}]}, r"metadatas\[1\].*hop"),
    "ids of the wrong length": ({"ids": ["a"]}, "ids for 4 texts"),
    "duplicate ids": ({"ids": ["a", "a", "b", "c"]}, "unique"),
}


@pytest.mark.parametrize("case", list(FROM_TEXTS))
def test_langchain_from_texts_refuses(case: str, qnet: QNetwork) -> None:
    from qrag.integrations import QRAGRetriever

    kwargs, needle = FROM_TEXTS[case]
    with pytest.raises(ValueError, match=needle):
        QRAGRetriever.from_texts(**{"texts": TEXTS, "model": qnet, **kwargs})


def test_llama_index_trace_keys_do_not_overwrite_node_metadata(qnet: QNetwork) -> None:
    from llama_index.core.schema import TextNode

    from qrag.integrations import QRAGLlamaIndexRetriever

    nodes = [TextNode(text=t, id_=str(i), metadata={"q_value": 7} if i == 2 else {}) for i, t in enumerate(TEXTS)]
    with pytest.raises(ValueError, match="node '2'.*q_value"):
        QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=qnet)


EMBED_CALLS: dict[str, tuple[str, Any, str]] = {
    "documents as one string": ("embed_documents", "text", "wrap a single text"),
    "a document that is None": ("embed_documents", ["ok", None], r"texts\[1\]"),
    "documents=None": ("embed_documents", None, "list of strings"),
    "empty query": ("embed_query", "", "non-empty"),
    "query None": ("embed_query", None, "non-empty"),
    "query with a lone surrogate": ("embed_query", SURROGATE, "surrogate"),
}


@pytest.mark.parametrize("case", list(EMBED_CALLS))
def test_embeddings_edges(case: str, qnet: QNetwork) -> None:
    from qrag.integrations import QRAGEmbeddings

    method, arg, needle = EMBED_CALLS[case]
    with pytest.raises(ValueError, match=needle):
        getattr(QRAGEmbeddings(qnet), method)(arg)


@pytest.mark.parametrize("query", ["", SURROGATE])
def test_llama_index_embedding_query_edges(query: str, qnet: QNetwork) -> None:
    from qrag.integrations import QRAGLlamaIndexEmbedding

    with pytest.raises(ValueError, match="non-empty|surrogate"):
        QRAGLlamaIndexEmbedding(qnet).get_query_embedding(query)


@NO_CUDA
@pytest.mark.parametrize("device", ["cuda", "cuda:3", "gpu0"])
def test_unusable_devices_are_named(device: str, qnet: QNetwork, saved: dict[str, Path]) -> None:
    from qrag.integrations import QRAGRetriever

    with pytest.raises(ValueError, match=device):
        load_model(qnet, device=device)
    with pytest.raises(ValueError, match=device):
        QRAGRetriever.load_local(saved["retriever"], device=device)


def test_a_failed_atomic_text_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "speed.json"
    write_text_atomic(path, "old")
    write_text_atomic(path, "new")
    assert path.read_text() == "new"
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(path, SURROGATE)  # fails while writing the temporary file
    assert path.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["speed.json"]



@pytest.mark.parametrize("backend", ["faiss", "annoy"])
def test_a_retriever_refuses_a_backend_its_hops_would_not_use(tiny_qnet: QNetwork, backend: str) -> None:
    """The hops score every chunk with the model: backend='faiss' would change nothing but the dependency."""
    from llama_index.core.schema import TextNode

    from qrag.integrations import QRAGLlamaIndexRetriever, QRAGRetriever

    with pytest.raises(ValueError, match=f"backend={backend!r}" if backend != "faiss" else "FAISS is never asked"):
        QRAGRetriever.from_texts(["a b", "c d"], model=tiny_qnet, backend=backend)
    with pytest.raises(ValueError, match="backend="):
        QRAGLlamaIndexRetriever.from_defaults(nodes=[TextNode(text="a b")], model=tiny_qnet, backend=backend)
