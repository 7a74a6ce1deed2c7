"""Lexical evidence (METHOD.md §4.5): BM25 over the chunks of a corpus, and reciprocal-rank fusion.

Shape legend: R queries (state rows), N chunks, P postings (a word's occurrences counted once per chunk).

A model whose `HopSettings.lexical_weight` ω is above 0 ranks the chunks at every hop by

    score(s, c) = Q(s, c) + ω · BM25(text(s), c) / max_{c' available} BM25(text(s), c'),

text(s) being the state's text (the question and the passages taken so far), so a passage that shares rare words
with the question, or with a passage already taken (the bridge entity of a two-hop question), climbs the
ranking. The Q-value alone still drives the stop rule. BM25 is `bm25s`'s Lucene variant, k1 1.5, b 0.75, over
`bm25s`'s words (lower-cased runs of two or more word characters, English stop words dropped), the same scores
the `bm25` and `hybrid` baselines of `qrag-eval` rank by:

    BM25(q, c) = Σ_{w in q} idf(w) · tf(w, c) / (tf(w, c) + k1 · (1 − b + b · |c| / avgdl)),
    idf(w) = ln(1 + (N − df(w) + 0.5) / (df(w) + 0.5)),

a word repeated in the query counting once per repetition, |c| the chunk's words, avgdl their mean over the N
chunks (chunks without a word count in N and avgdl, and score 0). An index built with `pairs` holds a second one
over adjacent word pairs (`_pairs`: stop words and one-letter words kept; `pair_scores`, where a query's pairs
made of two such words count nothing: `_query_pairs`), which a model with a
`HopSettings.pair_weight` ρ adds to its evidence, ρ × the question's pairs' BM25 scaled the same way (METHOD.md
§4.5).
`reciprocal_rank_fusion` is the fusion
LangChain's `EnsembleRetriever` and LlamaIndex's `QueryFusionRetriever` apply to BM25 and a vector store:
Σ_i w_i / (c + rank_i), c = 60.

A `LexicalIndex` is immutable and made of segments: each holds the term frequencies of a run of consecutive chunks,
and the document frequencies, N and avgdl are read off all of them at query time, so `added` and `deleted` give the
scores a fresh build over the resulting texts gives, while readers of the version they started from see it
unchanged. `added` indexes only the new texts (a new segment; segments merge like a binary counter, so a version
holds O(log N) of them and a chunk is merged O(log N) times in all); `deleted` drops rows of the segments that hold
them, with no text read again. Saved as NumPy arrays (never pickled) and JSON.

This module gathers the public names of four: `lexical_segments` (the terms, the vocabulary, the segments),
`lexical_index` (`LexicalIndex`: its versions, scores and saved form), `lexical_cache` (the per-corpus cache) and
`lexical_scoring` (the state's text, the evidence, reciprocal-rank fusion).
"""

from __future__ import annotations

from qrag.training.search.lexical_cache import CACHE_CHUNKS, CACHE_CORPORA, corpus_lexical, forget_corpus
from qrag.training.search.lexical_index import LexicalIndex, LexicalLoadError
from qrag.training.search.lexical_scoring import RRF_C, lexical_evidence, reciprocal_rank_fusion, state_text

__all__ = ["CACHE_CHUNKS", "CACHE_CORPORA", "RRF_C", "LexicalIndex", "LexicalLoadError", "corpus_lexical",
           "forget_corpus", "lexical_evidence", "reciprocal_rank_fusion", "state_text"]
