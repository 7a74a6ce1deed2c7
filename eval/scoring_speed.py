"""What one hop costs at scale, beside its floor: position-aware scoring against one plain inner-product pass.

For each corpus size N, over N random unit chunk vectors of the model's dimension (scoring does not look at the
texts), one question with two chunks taken:

- **floor**: one plain inner-product pass over the same vectors, `states @ vectors.T`, the least a hop can read;
- **scoring**: one hop's Q-values through the one place a hop scores, `QNetwork.score(states, vectors,
  model.positions(selected))`, as served now (the compiled one-pass form from `positions.FUSED_MIN_CHUNKS` chunks
  on), and the eager form beside it in the same run (`QRAG_FUSED_SCORES=0`'s path);
- **state pass**: the state tower on that question's two-hop state alone, eager (and on a GPU replayed from its
  CUDA graph, `QNetwork.serve_graphed`);
- **hops**: single-question latency of greedy search taking exactly 1…H hops (no stop rule) over an index of those
  vectors, with synthetic texts for the states (median over `queries` questions, after one warm-up each);
- **indexing** (optional): chunks per second of `ChunkIndex.from_texts` over `index_chunks` synthetic sentences of
  32-34 tokens (tokenisation included), in the given precision.

Timings depend on the encoder's shape, not its weights: `random_minilm` builds a network of all-MiniLM-L6-v2's
shape with random weights (for a machine without the model's package).

Medians of `repeats` calls after a warm-up; the GPU synchronised before every clock read. `scripts/bench_scoring.py`
prints the table and writes the JSON.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from qrag.training.model import positions
from qrag.training.model.qnet import QNetwork
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher

QUESTIONS = ("Where is the milk?", "Where was the apple before the kitchen?", "Who gave the football to Mary?",
             "What is north of the garden?", "Where is Daniel?")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn: Callable[[], Any], repeats: int, device: torch.device) -> float:
    """Median milliseconds of `repeats` calls of `fn`, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def scoring_row(model: QNetwork, n: int, *, repeats: int, hops: tuple[int, ...], queries: int,
                device: torch.device) -> dict[str, Any]:
    """The figures of one corpus size N (module docstring)."""
    gen = torch.Generator().manual_seed(n)
    vectors = torch.nn.functional.normalize(torch.randn(n, model.dim, generator=gen), dim=-1).to(device)  # (N, D)
    selected = torch.zeros(1, n, dtype=torch.bool, device=device)  # (1, N)
    selected[0, [n // 3, 2 * n // 3]] = True  # two chunks taken
    state = model.embed_states([QUESTIONS[0]], [["Mary took the milk there.", "Mary went to the kitchen."]])  # (1, D)
    row: dict[str, Any] = {"chunks": n}
    with torch.no_grad():
        row["floor_ms"] = median_ms(lambda: state @ vectors.T, repeats, device)
        row["scoring_ms"] = median_ms(lambda: model.score(state, vectors, model.positions(selected)), repeats, device)
        row["scoring_form"] = "fused" if positions.fused_scoring(n) and model.config.position_mode != "none" else "eager"
        served = model.score(state, vectors, model.positions(selected))  # (1, N)
        with positions.eager_scoring():
            row["eager_scoring_ms"] = median_ms(lambda: model.score(state, vectors, model.positions(selected)),
                                                repeats, device)
            eager = model.score(state, vectors, model.positions(selected))  # (1, N)
        row["scoring_max_abs_diff"] = float((served - eager).abs().max())  # the served form against the eager
        graphed, model._graphed = model._graphed, None  # the eager pass, whatever an earlier row left on
        row["state_pass_ms"] = median_ms(lambda: model.embed_states(
            [QUESTIONS[0]], [["Mary took the milk there.", "Mary went to the kitchen."]]), repeats, device)
        model._graphed = graphed
    row["scoring_over_floor"] = row["scoring_ms"] / row["floor_ms"]
    row["eager_over_floor"] = row["eager_scoring_ms"] / row["floor_ms"]
    index = ChunkIndex(vectors, [f"Sentence number {i} of the haystack." for i in range(n)], ordered=True)
    asked = [QUESTIONS[i % len(QUESTIONS)] for i in range(queries)]
    if device.type == "cuda":  # as served (CUDA graphs, fused scoring) and with both eager, side by side
        model._graphed = None
        with positions.eager_scoring():
            row["hop_ms_eager_state"] = hop_latency(MultiHopSearcher(model, index), asked, hops, device)
        states = ([QUESTIONS[i] for i in range(5)], [[f"Sentence number {j} of the haystack." for j in range(i)]
                                                     for i in range(5)])
        with torch.no_grad():
            eager_states = model.embed_states(*states)  # (5, D)
            model.serve_graphed()
            model.embed_states(*states)  # captured
            row["graphed_state_max_abs_diff"] = float((model.embed_states(*states) - eager_states).abs().max())
    row["hop_ms"] = hop_latency(MultiHopSearcher(model, index), asked, hops, device)
    if device.type == "cuda":
        with torch.no_grad():
            row["state_pass_graphed_ms"] = median_ms(lambda: model.embed_states(
                [QUESTIONS[0]], [["Mary took the milk there.", "Mary went to the kitchen."]]), repeats, device)
    if 1 in row["hop_ms"] and 3 in row["hop_ms"]:
        row["three_over_one_hop"] = row["hop_ms"][3] / row["hop_ms"][1]
    return row


def hop_latency(searcher: MultiHopSearcher, asked: list[str], hops: tuple[int, ...],
                device: torch.device) -> dict[int, float]:
    """Per hop count h, the median milliseconds of one question's greedy search taking exactly h hops."""
    out = {}
    for h in hops:
        def one(q: str, h: int = h) -> None:
            searcher.search_one(q, k=h, max_hops=h, stop_threshold=None)

        one(asked[0])
        times = []
        for q in asked:
            _sync(device)
            start = time.perf_counter()
            one(q)
            _sync(device)
            times.append(1000 * (time.perf_counter() - start))
        out[h] = statistics.median(times)
    return out


def indexing_rate(model: QNetwork, n: int, precision: str, device: torch.device) -> float:
    """Chunks per second of `ChunkIndex.from_texts` over n synthetic sentences of 32-34 MiniLM tokens (after a
    warm-up of 2 000)."""
    texts = [f"Sentence {i} of the haystack, where Mary went back to the kitchen with the milk and then travelled on "
             "to the garden by the old mill." for i in range(n)]
    ChunkIndex.from_texts(model, texts[:2000], precision=precision, show_progress=False)  # type: ignore[arg-type]
    _sync(device)
    start = time.perf_counter()
    ChunkIndex.from_texts(model, texts, precision=precision, show_progress=False)  # type: ignore[arg-type]
    _sync(device)
    return n / (time.perf_counter() - start)


def random_minilm(folder: str, tokenizer: str, position_mode: str = "relative") -> QNetwork:
    """A Q-network of all-MiniLM-L6-v2's shape (6 layers, 384 wide, 12 heads) with random weights, written to
    `folder` with the tokenizer of `tokenizer` (a folder), for timing where the model's package is not installed."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=1536, max_position_embeddings=512)
    torch.manual_seed(0)
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tokenizer).save_pretrained(folder)
    return QNetwork.from_encoder(folder, position_mode=position_mode, train_towers="state",  # type: ignore[arg-type]
                                 max_chunk_tokens=64, max_state_piece_tokens=64).eval()


def scoring_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: per N the floor, the scoring as served and eager, the state pass and the hop latencies (on a GPU
    also with eager state passes and eager scoring, beside the served CUDA graphs and fused scoring)."""
    hops = sorted({h for r in rows for h in r["hop_ms"]})
    head = " | ".join(f"{h} hop{'s' if h > 1 else ''} ms" for h in hops)
    lines = [f"| chunks | floor ms | scoring ms (form) | × floor | eager ms | × floor | state pass ms | {head} |",
             "|---|---|---|---|---|---|---|" + "---|" * len(hops)]
    for r in rows:
        lines.append(f"| {r['chunks']:,} | {r['floor_ms']:.2f} | {r['scoring_ms']:.2f} ({r['scoring_form']}) | "
                     f"{r['scoring_over_floor']:.2f} | {r['eager_scoring_ms']:.2f} | {r['eager_over_floor']:.1f} | "
                     f"{r['state_pass_ms']:.2f} | " + " | ".join(f"{r['hop_ms'][h]:.1f}" for h in hops) + " |")
        if "hop_ms_eager_state" in r:
            lines.append(f"| (eager state passes and scoring) | | | | | | {r['state_pass_graphed_ms']:.2f} graphed | "
                         + " | ".join(f"{r['hop_ms_eager_state'][h]:.1f}" for h in hops) + " |")
    return "\n".join(lines) + "\n"
