"""Indexing and query speed side by side in one run: qrag against a plain transformers loop and dense search.

    .venv/bin/python scripts/bench_speed.py --chunks 2000 --repeats 5 --out results/bench_speed.json
    .venv/bin/python scripts/bench_speed.py --model qrag/babilong-minilm-cpu --threads 2 --out results/bench_speed.json
    python scripts/bench_speed.py --device cuda --chunks 100000 --batch-size 2048 --out bench_speed_gpu.json  # a GPU

Corpus: the sentences of one BabiLong-style qa2 haystack of `--chunks` sentences (real background text with
the bAbI facts in it), questions: the questions of `--queries` such haystacks. Phases, each repeated
`--repeats` times in this process, medians reported:

- **indexing**: chunks/s of a plain transformers loop over the bundled MiniLM (tokenise each batch of 128
  in corpus order, pad to the batch's longest, forward, mean-pool: what a user writes by hand) against
  `ChunkIndex.from_texts` with the same model and truncation (fp32), and both again under `--precision`
  autocast (bf16; fp16 on a GPU), with the smallest cosine between those and the fp32 vectors;
- **queries**: milliseconds per question, one question at a time, of a single dense query (question vector,
  inner products, top-k) against greedy qrag search with 1, 3 and 6 hops (`stop_threshold` off, so every
  hop is taken), and their ratios; and the same hops served in `--precision` (`QNetwork.serve_in`), with how
  many questions take the same 6 hops as in fp32;
- **where a hop's time goes**: the state's length in tokens at each hop and the time of the state-tower pass
  on it alone, against the whole hop, and the state pass alone (`QNetwork.state_vectors`: the state tower, with
  the anchor's base passes if the model has one) in fp32 and served in `--precision` (`QNetwork.serve_in`: the
  smallest cosine to the fp32 vectors beside it); and
  each part of a hop timed in place, hop by hop (`hop_parts`:
  tokenising, the state-tower pass, positions, scores (rotation and inner products), masks and the pick);
- **linear layers** (CPU only): GFLOP/s of one fp32 linear layer of the encoder's shapes (its
  attention projections and feed-forward in and out), at a one-question state's rows and at an indexing
  batch's, through torch's `F.linear` and through qrag's `CPULinear` (oneDNN), gradient-free;
- **memory**: the process's peak resident set after each phase (cumulative: it only grows), and on a GPU
  the peak memory torch allocated there.

Training throughput (transitions/s) has its own benchmark, `scripts/bench_train.py`.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModel, AutoTokenizer

from qrag.training.data import load_episodes
from qrag.training.data.text_pack import maybe_install_text_pack
from qrag.training.model.cpu_linear import CPULinear
from qrag.training.model.cpu_linear import available as onednn_available
from qrag.training.model.encoders import resolve_encoder
from qrag.training.model.towers import Precision, precision_autocast
from qrag.training.search.hops import check_finite_q, state_pieces
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher, SearchConfig, load_model

HOPS = (1, 3, 6)


def sync() -> None:
    """Wait for the GPU's queued work (timers read the host clock)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def median_time(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall seconds of `repeats` calls of `fn` (after one warm-up call) and the last call's result."""
    result = fn()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        result = fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def gpu_memory() -> dict[str, float]:
    """Peak GPU memory allocated so far (cumulative), when a GPU is in use."""
    return {"peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20} if torch.cuda.is_available() else {}


def plain_encode(path: str, texts: list[str], max_tokens: int, batch_size: int, device: torch.device,
                 precision: Precision = "fp32") -> Callable[[], torch.Tensor]:
    """The loop a user writes with transformers alone: corpus order, per-batch tokenisation, mean pooling
    (under autocast at `precision`)."""
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval().to(device)

    def run() -> torch.Tensor:
        out = []
        with torch.inference_mode(), precision_autocast(device, precision):
            for start in range(0, len(texts), batch_size):
                enc = tokenizer(texts[start : start + batch_size], padding=True, truncation=True,
                                max_length=max_tokens, return_tensors="pt").to(device)
                hidden = model(**enc).last_hidden_state  # (B, L, D)
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, L, 1)
                out.append(((hidden * mask).sum(1) / mask.sum(1).clamp(min=1)).float())  # (B, D)
        return torch.cat(out)

    return run


PARTS = ("tokenise", "state_pass", "positions", "scores", "mask_and_pick")


def hop_parts(model: Any, index: ChunkIndex, questions: list[str], hops: int, repeats: int) -> list[dict[str, Any]]:
    """Per hop, median milliseconds of each part of a greedy hop, timed in place: one question at a time, the
    parts run in the hop engine's order (`qrag.training.search.hops`), so each one finds the caches as a served hop
    leaves them (right after the state-tower pass, the chunk vectors are no longer in cache).

    Parts: render and tokenise the state; the state-tower pass; the chunks' positions; the scores (`QNetwork.score`:
    the rotation by those positions, none in position mode 'none', and the inner products with the state); the
    masks, the finite-value check and the pick.
    """
    vectors, n = index.vectors, len(index)
    texts = index.texts
    order = model.config.state_order
    times: list[dict[str, list[float]]] = [{part: [] for part in PARTS} for _ in range(hops)]
    for repeat in range(repeats + 1):  # the first round warms up and is not kept
        for q in questions:
            taken: list[int] = []
            for hop in range(hops):
                sync()
                t = [time.perf_counter()]
                with torch.no_grad():
                    inputs = model.tokenize_states([q], [state_pieces([texts[i] for i in taken], taken, order)])
                    t.append(time.perf_counter())
                    state = model.state_vectors({k: v.to(vectors.device) for k, v in inputs.items()}).float()  # (1, D)
                    sync()
                    t.append(time.perf_counter())
                    selected = torch.zeros(1, n, dtype=torch.bool, device=vectors.device)  # (1, N)
                    selected[0, taken] = True
                    positions = model.positions(selected)  # (1, N) | None
                    sync()
                    t.append(time.perf_counter())
                    scores = model.score(state, vectors, positions)  # (1, N): rotation and inner products
                    sync()
                    t.append(time.perf_counter())
                    scores = scores.masked_fill(selected, -math.inf)  # (1, N)
                    check_finite_q(scores.masked_fill(selected, 0.0), [q])
                    taken.append(int(scores.argmax(dim=1)))
                    sync()
                    t.append(time.perf_counter())
                if repeat:
                    for part, a, b in zip(PARTS, t[:-1], t[1:], strict=True):  # 6 clock readings, 5 parts
                        times[hop][part].append((b - a) * 1000)
    out = []
    for hop, parts in enumerate(times):
        row: dict[str, Any] = {"hop": hop + 1, **{part: statistics.median(v) for part, v in parts.items()}}
        row["sum"] = sum(row[part] for part in PARTS)
        out.append(row)
    return out


def linear_rates(width: int, ffn: int, rows: tuple[int, ...], repeats: int) -> list[dict[str, Any]]:
    """GFLOP/s of gradient-free fp32 linear layers of the encoder's shapes: `F.linear` against `CPULinear`."""

    def timed(layer: torch.nn.Module, x: torch.Tensor, calls: int) -> float:
        with torch.no_grad():
            return median_time(lambda: [layer(x) for _ in range(calls)], repeats)[0]

    out = []
    for m in rows:
        for k, n in ((width, width), (width, ffn), (ffn, width)):
            plain = torch.nn.Linear(k, n)
            fast = CPULinear(k, n)
            fast.load_state_dict(plain.state_dict())
            x, calls = torch.randn(m, k), max(1, 20000 // m)  # about 20 000 rows per timing
            plain_s, fast_s = timed(plain, x, calls), timed(fast, x, calls)
            flops = 2 * m * k * n * calls
            out.append({"rows": m, "in": k, "out": n, "torch_gflops": flops / plain_s / 1e9,
                        "qrag_gflops": flops / fast_s / 1e9, "speedup": plain_s / fast_s})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2",
                        help="a checkpoint, shipped name or encoder (default: the bundled MiniLM, untrained)")
    parser.add_argument("--chunks", type=int, default=2000, help="sentences in the corpus (default 2000)")
    parser.add_argument("--queries", type=int, default=20, help="questions timed one at a time (default 20)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--precision", default="bf16", choices=("bf16", "fp16"),
                        help="the reduced precision measured beside fp32 (fp16: GPU only; default bf16)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    for name in ("chunks", "queries", "repeats", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    if args.threads:
        torch.set_num_threads(args.threads)

    maybe_install_text_pack()  # $QRAG_TEXT_PACK: the text sources from a pack (scripts/gpu/offline.py)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no GPU here; use --device cpu.")
    if args.precision == "fp16" and device.type != "cuda":
        parser.error("--precision fp16 needs --device cuda; on a CPU use bf16.")
    low = args.precision
    model = load_model(args.model).eval().to(device)
    episodes = load_episodes("babilong", task="qa2", split="test", num_samples=args.queries, seed=0,
                             num_sentences=args.chunks)
    texts = list(episodes[0].chunks)
    questions = [ep.question for ep in episodes]
    max_tokens, encoder_path = model.config.max_chunk_tokens, resolve_encoder(model.config.encoder)
    rows: dict[str, Any] = {}

    # ---------------------------------------------------------------- indexing
    plain_s, plain_vectors = median_time(plain_encode(encoder_path, texts, max_tokens, args.batch_size, device),
                                         args.repeats)
    plain_low_s, _ = median_time(plain_encode(encoder_path, texts, max_tokens, args.batch_size, device, low), args.repeats)
    index_s, index = median_time(lambda: ChunkIndex.from_texts(model, texts, batch_size=args.batch_size,
                                                               show_progress=False, ordered=True), args.repeats)
    low_s, low_index = median_time(lambda: ChunkIndex.from_texts(model, texts, batch_size=args.batch_size,
                                                                 show_progress=False, ordered=True, precision=low),
                                   args.repeats)
    fp32_vectors = index.vectors.float()
    n = len(texts)
    rows["indexing"] = {
        "chunks": n,
        "batch_size": args.batch_size,
        "plain_transformers_chunks_per_s": n / plain_s,
        f"plain_transformers_{low}_chunks_per_s": n / plain_low_s,
        "qrag_fp32_chunks_per_s": n / index_s,
        f"qrag_{low}_chunks_per_s": n / low_s,
        "qrag_fp32_over_plain": plain_s / index_s,
        f"qrag_{low}_over_plain": plain_s / low_s,
        f"qrag_{low}_over_plain_{low}": plain_low_s / low_s,
        f"min_cosine_{low}_vs_fp32": float(torch.nn.functional.cosine_similarity(low_index.vectors.float(),
                                                                                  fp32_vectors).min()),
        "peak_rss_mb": peak_rss_mb(),
        **gpu_memory(),
    }
    if model.chunk_tower_frozen:  # the chunk tower is the base encoder, mean-pooled: the plain loop's vectors
        rows["indexing"]["min_cosine_qrag_vs_plain"] = float(
            torch.nn.functional.cosine_similarity(fp32_vectors, plain_vectors.float()).min())

    # ---------------------------------------------------------------- queries
    searcher = MultiHopSearcher(model, index, SearchConfig(stop_threshold=None), ordered=True)

    def dense_query(q: str) -> list[int]:
        with torch.no_grad():
            state = model.embed_states([q], [[]])  # (1, D)
            positions = model.positions(torch.zeros(1, len(index), dtype=torch.bool, device=index.device))  # (1, N) or None
            return model.score(state, index.vectors, positions)[0].topk(1).indices.tolist()

    def per_query(fn: Callable[[str], Any]) -> float:
        return median_time(lambda: [fn(q) for q in questions], args.repeats)[0] / len(questions) * 1000

    dense_ms = per_query(dense_query)
    def hops_query(hops: int) -> Callable[[str], Any]:
        return lambda q: searcher.search_one(q, k=hops, max_hops=hops)

    hop_ms = {h: per_query(hops_query(h)) for h in HOPS}
    served = copy.deepcopy(model).serve_in(low)  # the state passes from a `low` copy of the state tower
    low_searcher = MultiHopSearcher(served, index, SearchConfig(stop_threshold=None), ordered=True)
    low_ms = {h: per_query(lambda q, h=h: low_searcher.search_one(q, k=h, max_hops=h)) for h in HOPS}
    longest = [searcher.search_one(q, k=max(HOPS), max_hops=max(HOPS)).hits for q in questions]  # fp32, 6 hops
    same = sum([x.chunk.id for x in low_searcher.search_one(q, k=max(HOPS), max_hops=max(HOPS)).hits]
               == [x.chunk.id for x in hits] for q, hits in zip(questions, longest, strict=True))
    rows["queries_ms"] = {"dense": dense_ms, **{f"qrag_{h}_hops": ms for h, ms in hop_ms.items()},
                          **{f"qrag_{h}_hops_over_1": ms / hop_ms[1] for h, ms in hop_ms.items()},
                          **{f"qrag_{h}_hops_over_dense": ms / dense_ms for h, ms in hop_ms.items()},
                          **{f"qrag_{h}_hops_served_{low}": ms for h, ms in low_ms.items()},
                          **{f"qrag_{h}_hops_fp32_over_served_{low}": hop_ms[h] / ms for h, ms in low_ms.items()},
                          f"same_{max(HOPS)}_hops_served_{low}": same,
                          "peak_rss_mb": peak_rss_mb(), **gpu_memory()}

    # ---------------------------------------------------------------- where a hop's time goes
    taken = [[h.chunk.text for h in hits] for hits in longest]
    per_hop = []
    for hop in range(max(HOPS)):
        selected = [sel[:hop] for sel in taken]
        tokens = statistics.mean(len(model.state_token_ids(q, sel)) for q, sel in zip(questions, selected, strict=True))

        def encode(selected: list[list[str]] = selected) -> None:
            for q, sel in zip(questions, selected, strict=True):
                model.embed_states([q], [sel])

        encode_ms = median_time(encode, args.repeats)[0] / len(questions) * 1000
        inputs = [{k: v.to(device) for k, v in model.tokenize_states([q], [sel]).items()}
                  for q, sel in zip(questions, selected, strict=True)]
        tower_ms, cosine = {}, 1.0
        with torch.no_grad():  # gradient-free: `served` runs its `low` copy of the state tower
            for name, net in (("fp32", model), (low, served)):
                tower_ms[name] = median_time(lambda n=net, xs=inputs: [n.state_vectors(x) for x in xs],
                                             args.repeats)[0] / len(questions) * 1000
            for x in inputs:
                cos = torch.nn.functional.cosine_similarity(model.state_vectors(x), served.state_vectors(x).float())
                cosine = min(cosine, float(cos.min()))
        per_hop.append({"hop": hop + 1, "state_tokens": tokens, "state_encode_ms": encode_ms,
                        "state_tower_fp32_ms": tower_ms["fp32"], f"state_tower_{low}_weights_ms": tower_ms[low],
                        f"min_cosine_{low}_weights_vs_fp32": cosine})
    whole = [hop_ms[1]] + [(hop_ms[b] - hop_ms[a]) / (b - a) for a, b in zip(HOPS, HOPS[1:], strict=False)]
    rows["per_hop"] = per_hop
    rows["hop_ms_marginal"] = dict(zip(["1", "2-3", "4-6"], whole, strict=True))
    rows["hop_parts_ms"] = hop_parts(model, index, questions, max(HOPS), args.repeats)

    # ---------------------------------------------------------------- linear layers
    if device.type == "cpu":
        cfg = model.base_encoder(model.state_tower).config
        ffn = getattr(cfg, "intermediate_size", 4 * cfg.hidden_size)
        rows["linear_gflops"] = linear_rates(cfg.hidden_size, ffn, (7, args.batch_size * 24),
                                             args.repeats)
        rows["onednn_linear"] = onednn_available()

    meta = {"command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]), "machine": platform.machine(),
            "device": str(device), "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
            "processor": platform.processor(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "model": args.model, "max_chunk_tokens": max_tokens, "repeats": args.repeats, "queries": len(questions)}
    ix, qm = rows["indexing"], rows["queries_ms"]
    print(f"indexing {ix['chunks']} chunks ({max_tokens} tokens max, batches of {args.batch_size}), chunks/s: plain "
          f"transformers fp32 {ix['plain_transformers_chunks_per_s']:.0f}, {low} "
          f"{ix[f'plain_transformers_{low}_chunks_per_s']:.0f}; qrag fp32 {ix['qrag_fp32_chunks_per_s']:.0f} "
          f"({ix['qrag_fp32_over_plain']:.2f}x), qrag {low} {ix[f'qrag_{low}_chunks_per_s']:.0f} "
          f"({ix[f'qrag_{low}_over_plain']:.2f}x of plain fp32, {ix[f'qrag_{low}_over_plain_{low}']:.2f}x of plain {low}; "
          f"min cosine to fp32 {ix[f'min_cosine_{low}_vs_fp32']:.5f})")
    print("query (ms, one question at a time):  dense " + f"{qm['dense']:.1f}  "
          + "  ".join(f"{h} hops {qm[f'qrag_{h}_hops']:.1f} ({qm[f'qrag_{h}_hops_over_1']:.2f}x of 1 hop, "
                      f"{qm[f'qrag_{h}_hops_over_dense']:.2f}x of dense)" for h in HOPS))
    print(f"served in {low} (QNetwork.serve_in), ms: " + "  ".join(
        f"{h} hops {qm[f'qrag_{h}_hops_served_{low}']:.1f} ({qm[f'qrag_{h}_hops_fp32_over_served_{low}']:.2f}x faster)"
        for h in HOPS) + f"; the same {max(HOPS)} hops as fp32 for {qm[f'same_{max(HOPS)}_hops_served_{low}']} of "
        f"{len(questions)} questions")
    print(f"hop  state tokens  state-tower pass (ms)  the state pass alone: fp32, served in {low} (ms)  min cosine")
    for row in per_hop:
        print(f"{row['hop']:>3}  {row['state_tokens']:>12.1f}  {row['state_encode_ms']:>10.2f}  "
              f"{row['state_tower_fp32_ms']:>21.2f} {row[f'state_tower_{low}_weights_ms']:>8.2f}  "
              f"{row[f'min_cosine_{low}_weights_vs_fp32']:>24.5f}")
    print("hop  " + "  ".join(f"{part:>14}" for part in PARTS) + "     sum  (ms, in place, one question at a time)")
    for row in rows["hop_parts_ms"]:
        print(f"{row['hop']:>3}  " + "  ".join(f"{row[part]:>14.2f}" for part in PARTS) + f"  {row['sum']:>6.2f}")
    if "linear_gflops" in rows:
        print(f"fp32 linear layers, gradient-free, GFLOP/s (oneDNN path {'on' if rows['onednn_linear'] else 'off'}):")
        print(" rows    in   out   F.linear  CPULinear  speed-up")
        for r in rows["linear_gflops"]:
            print(f"{r['rows']:>5} {r['in']:>5} {r['out']:>5} {r['torch_gflops']:>10.1f} {r['qrag_gflops']:>10.1f} "
                  f"{r['speedup']:>8.2f}x")
    gpu = f"; peak GPU memory {gpu_memory()['peak_gpu_mb']:.0f} MB" if gpu_memory() else ""
    print(f"peak RSS {peak_rss_mb():.0f} MB; threads {torch.get_num_threads()}{gpu}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**meta, **rows}, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
