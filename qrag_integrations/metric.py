"""Which metric a vector store ranks by: qrag's hops need the raw inner product ⟨query, g_φ(c)⟩.

It is the Q-value the stop rule compares with its threshold. Framework-free (no LangChain / LlamaIndex import).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

IP_SPACE_HINT = "configuration={'hnsw': {'space': 'ip'}}"


class MetricError(ValueError):
    """A vector store ranks by a metric other than the inner product, so its scores are not Q-values."""


def chroma_space(collection: Any) -> str:
    """The distance space ('ip', 'cosine', 'l2') of a Chroma collection (its configuration, else metadata)."""
    config = getattr(collection, "configuration", None) or {}
    if isinstance(config, dict):
        for index in ("hnsw", "spann"):
            space = (config.get(index) or {}).get("space")
            if space:
                return str(space)
    return str((getattr(collection, "metadata", None) or {}).get("hnsw:space", "l2"))  # Chroma's default: l2


# ---------------------------------------------------------------------- cosine and L2 stores of unit vectors
# How a store's score s for a query q relates to the inner product ⟨q, x⟩ with a stored unit vector x. Chroma
# reports distances ('ip': 1 − ⟨q, x⟩, 'cosine': 1 − cos, 'l2': squared L2), FAISS's flat L2 index squared L2,
# Qdrant cosine similarity or plain euclidean distance, LangChain's InMemoryVectorStore cosine similarity.
Convention = Literal["ip", "ip_distance", "cosine", "cosine_distance", "l2_squared", "l2"]
CONVENTIONS: tuple[Convention, ...] = ("ip", "ip_distance", "cosine", "cosine_distance", "l2_squared", "l2")
SAME_VECTORS = 0.999  # cosine between a stored vector and this chunk tower's vector of its text: the same encoder
UNIT_NORM = 1e-3  # |‖x‖ − 1| of a stored vector that counts as unit-norm
PROBE_SCALE = 3.0  # a probe query is 3 × a stored text's vector: every convention then reports another score
SAMPLE = 4  # stored documents checked before the first query
CHROMA_CONVENTIONS: dict[str, Convention] = {"ip": "ip_distance", "cosine": "cosine_distance", "l2": "l2_squared"}
"""What a Chroma collection's distance is in each of its spaces (LangChain's and LlamaIndex's stores alike)."""


@dataclass(frozen=True)
class ScoreMap:
    """How a store's score turns into the inner product ⟨q, x⟩ qrag ranks by (x unit-norm outside 'ip').

    Args:
        convention: What the store reports for a query q (see `CONVENTIONS`).
        normalizes_query: The store divides q by its norm before searching (FAISS `normalize_L2=True`).
        scale: The model's `scale`: its chunk vectors are the store's unit vectors divided by it.
    """

    convention: Convention
    normalizes_query: bool = False
    scale: float = 1.0

    @property
    def metric(self) -> str:
        """'ip', 'cosine' or 'l2': what the store ranks by."""
        return self.convention.split("_")[0]

    def inner(self, score: float, qnorm: float) -> float:
        """⟨q, g_φ(c)⟩ from the store's `score` for a query of norm `qnorm`: cosine c gives c·‖q‖, squared L2 d²
        gives (‖q‖² + 1 − d²) / 2 (x unit-norm)."""
        n = 1.0 if self.normalizes_query else qnorm
        c = self.convention
        ip = (score if c == "ip" else 1.0 - score if c == "ip_distance" else score * n if c == "cosine"
              else (1.0 - score) * n if c == "cosine_distance" else (n * n + 1.0 - score) / 2 if c == "l2_squared"
              else (n * n + 1.0 - score * score) / 2)
        return (ip * qnorm if self.normalizes_query else ip) / self.scale

    def predict(self, ip: float, qnorm: float, xnorm: float = 1.0) -> float:
        """The score the store reports for a query of norm `qnorm` and a stored vector of norm `xnorm` whose inner
        product (in the store's units) is `ip`."""
        if self.normalizes_query:
            ip, qnorm = ip / qnorm, 1.0
        c = self.convention
        if c in ("ip", "ip_distance"):
            return ip if c == "ip" else 1.0 - ip
        cos = ip / max(qnorm * xnorm, 1e-12)
        if c in ("cosine", "cosine_distance"):
            return cos if c == "cosine" else 1.0 - cos
        squared = qnorm * qnorm + xnorm * xnorm - 2.0 * ip
        return squared if c == "l2_squared" else math.sqrt(max(squared, 0.0))


def unit_vector_model_problem(model: Any) -> str | None:
    """Why `model`'s Q-values cannot be read off a cosine or L2 store of base-encoder vectors, or None when they can:
    its chunk tower must be the untouched base encoder (never trained), position-free and normalised."""
    config = model.config
    if config.position_mode != "none":
        return f"the model scores chunks by their position (position_mode={config.position_mode!r})"
    if not (model.chunk_tower_frozen or model.untrained):
        return ("the model's chunk tower was trained (train_towers='both'), so its vectors are not the base "
                f"encoder's {config.encoder!r}")
    if not config.normalize:
        return "the model's chunk vectors are not unit-norm (normalize=False)"
    return None


def metric_refusal(where: str, metric: str, why: str) -> MetricError:
    """The refusal of a cosine / L2 store a model cannot read Q-values from, naming the store, its metric and why."""
    return MetricError(
        f"{where} ranks by {metric!r}; qrag reads Q-values off a cosine or L2 store only for a model whose chunk tower "
        f"is the normalised, untrained base encoder that filled it, and {why}. Build the store with this model's "
        f"QRAGEmbeddings and an inner-product metric (Chroma {IP_SPACE_HINT}, i.e. 'hnsw:space': 'ip'; Qdrant "
        "Distance.DOT; FAISS DistanceStrategy.MAX_INNER_PRODUCT), or use QRAGRetriever.from_texts."
    )


def fresh_unit_vectors(model: Any, texts: Sequence[str]) -> torch.Tensor:
    """(S, D) this model's chunk-tower vectors of `texts` in the store's units (times the model's `scale`)."""
    from qrag.training.model import model_lock

    with model_lock(model):
        vectors = model.embed_chunks(list(texts))  # (S, D)
    return vectors.float().cpu() * float(model.config.scale)


def check_stored_vectors(where: str, stored: torch.Tensor, fresh: torch.Tensor, unit: bool) -> None:
    """Refuse stored vectors (S, D) that are not this chunk tower's `fresh` vectors of the same texts (S, D) (cosine
    ≤ `SAME_VECTORS`), or not unit-norm when `unit`; the message names what was found."""
    if stored.shape != fresh.shape:
        raise MetricError(f"{where} holds {stored.shape[-1]}-dimensional vectors, this model's chunk tower makes "
                          f"{fresh.shape[-1]}-dimensional ones: the store was filled by another encoder.")
    cos = torch.nn.functional.cosine_similarity(stored.double(), fresh.double(), dim=-1)  # (S,)
    if float(cos.min()) <= SAME_VECTORS:
        raise MetricError(f"{where} was filled by another encoder than this model's chunk tower: the stored vectors of "
                          f"{len(cos)} sampled documents have cosine {float(cos.min()):.4f} to {float(cos.max()):.4f} "
                          f"to this chunk tower's embeddings of their own texts (the same encoder: > {SAME_VECTORS}). "
                          "Rebuild the store with this model's QRAGEmbeddings.")
    norms = stored.double().norm(dim=-1)  # (S,)
    if unit and float((norms - 1).abs().max()) > UNIT_NORM:
        raise MetricError(f"{where} holds vectors that are not unit-norm (norms {float(norms.min()):.4f} to "
                          f"{float(norms.max()):.4f} in {len(norms)} sampled documents): cosine and L2 scores give "
                          "Q-values only for normalised vectors; store normalised embeddings.")


def probe_score_map(where: str, texts: Sequence[str], fresh: torch.Tensor,
                    search: Callable[[list[float], int], list[tuple[str, float]]],
                    known: ScoreMap | None) -> ScoreMap:
    """Check (or, `known` None, infer) how the store scores, from its score of each sampled text against 3 × this
    chunk tower's vector of that text: each convention reports another value there (ip 3, cosine 1, squared L2 4,
    ...). `search(vector, n)` returns the store's n best (text, score) pairs.

    Raises:
        MetricError: a text the store does not find near its own vector, or a score no convention gives (the
            store was filled by another encoder, or ranks by a metric qrag cannot read): named with the values.
    """
    candidates = [known] if known is not None else [ScoreMap(c) for c in CONVENTIONS]
    for text, x in zip(texts, fresh, strict=True):
        xnorm = float(x.norm())
        hits = search((PROBE_SCALE * x).tolist(), SAMPLE)
        scores = [s for t, s in hits if t == text]
        if not scores:
            raise MetricError(f"{where} does not return the stored document {text[:60]!r} among the {SAMPLE} nearest "
                              "to this model's chunk-tower vector of its own text: the store was filled by another "
                              "encoder. Rebuild it with this model's QRAGEmbeddings.")
        score, qnorm, ip = scores[0], PROBE_SCALE * xnorm, PROBE_SCALE * xnorm * xnorm
        fits = [m for m in candidates if abs(m.predict(ip, qnorm, xnorm) - score) <= 1e-3 * max(1.0, abs(score))]
        if not fits:
            if known is not None:
                found = known.inner(score, qnorm) * known.scale / qnorm  # the cosine, if the stored vector is unit
                raise MetricError(
                    f"{where} scores the stored document {text[:60]!r} at {score:.4f} against this model's chunk-tower "
                    f"vector of its own text (times {PROBE_SCALE:g}); the same vector under {known.convention!r} "
                    f"scores {known.predict(ip, qnorm, xnorm):.4f}: the stored vector has cosine {found:.4f} to this "
                    "chunk tower's (the same encoder: 1). The store was filled by another encoder; rebuild it with "
                    "this model's QRAGEmbeddings.")
            raise MetricError(
                f"{where} does not say which metric it ranks by, and its score {score:.4f} for the stored document "
                f"{text[:60]!r} against this model's vector of its own text (times {PROBE_SCALE:g}) is none of what an "
                "inner product (3), cosine (1), squared L2 (4) or L2 (2) of the same vector gives: the store was filled "
                "by another encoder or ranks by a metric qrag cannot read.")
        candidates = fits[:1]
    return candidates[0]


def checked_score_map(where: str, model: Any, known: ScoreMap | None,
                      sample: Callable[[], tuple[list[str], list[list[float]] | None]],
                      search: Callable[[list[float], int], list[tuple[str, float]]]) -> ScoreMap:
    """How a store's scores give Q-values, checked before the first query.

    An inner-product store (`known` 'ip') is checked by `checked_inner_product` (any chunk tower's `QRAGEmbeddings`,
    or the base encoder's unit vectors for a model that reads them). A cosine or L2 one
    needs a model whose chunk tower is the untrained normalised base encoder, and `sample()` (a few stored texts and,
    where the store gives them, their vectors) must be that encoder's: the stored vectors unit-norm and the same as
    this chunk tower's, and the store's scores what the metric gives (`probe_score_map`). A store that does not say
    its metric (`known` None) is probed: first as `QRAGEmbeddings` under a dot product, then as unit vectors under
    every convention. `model` None: an inner-product or unknown store is trusted as a dot product, a cosine or L2 one
    refused.

    Raises:
        MetricError: named: the store, its metric, and the model's problem or the mismatch found.
    """
    if known is not None and known.metric == "ip" and not known.normalizes_query:
        return known if model is None else checked_inner_product(where, model, known, sample)
    if model is None:
        if known is None:
            return ScoreMap("ip")
        raise metric_refusal(where, known.metric, "no model was given to check the stored vectors against (pass model=)")
    problem = unit_vector_model_problem(model)
    if known is not None and problem:
        raise metric_refusal(where, known.metric, problem)
    texts, stored = sample()
    if not texts:
        return known or ScoreMap("ip")  # nothing stored yet: what qrag adds is this chunk tower's
    if known is None:  # a store that does not say its metric: QRAGEmbeddings under a dot product?
        from qrag.training.model import model_lock

        try:
            with model_lock(model):
                raw = model.embed_chunks(list(texts)).float().cpu()  # (S, D)
            return probe_score_map(where, texts, raw, search, ScoreMap("ip"))
        except MetricError:
            if problem:
                raise
    fresh = fresh_unit_vectors(model, texts)  # (S, D)
    if stored is not None:
        check_stored_vectors(where, torch.tensor(stored, dtype=torch.float32), fresh, unit=True)
    found = probe_score_map(where, texts, fresh, search, known)
    return ScoreMap(found.convention, found.normalizes_query, float(model.config.scale))


def checked_inner_product(where: str, model: Any, known: ScoreMap,
                          sample: Callable[[], tuple[list[str], list[list[float]] | None]]) -> ScoreMap:
    """How an inner-product store's scores give Q-values, checked on a few stored documents before the first query:
    their stored vectors must be this chunk tower's `QRAGEmbeddings` vectors of their texts (Q is the store's inner
    product), or, for a model whose chunk tower is the untrained normalised base encoder, that encoder's unit vectors
    (Q is the inner product divided by the model's `scale`). A store that gives no vectors is taken as it says.
    (No probe by score here: under an inner product a document need not be the nearest to its own vector.)

    Raises:
        MetricError: the store was filled by another encoder (named: the cosine found), or holds this encoder's
            directions at a norm neither convention gives.
    """
    texts, stored = sample()
    if not texts or stored is None:
        return known  # nothing stored yet (what qrag adds is this chunk tower's), or nothing to compare
    from qrag.training.model import model_lock

    with model_lock(model):
        raw = model.embed_chunks(list(texts)).float().cpu()  # (S, D) what QRAGEmbeddings stores
    scale = float(model.config.scale)
    held = torch.tensor(stored, dtype=torch.float32)  # (S, D)
    check_stored_vectors(where, held, raw, unit=False)  # the same encoder: the same directions
    ratio = held.double().norm(dim=-1) / raw.double().norm(dim=-1).clamp(min=1e-12)  # (S,)
    if float((ratio - 1).abs().max()) <= UNIT_NORM:
        return known
    if unit_vector_model_problem(model) is None and float((ratio - scale).abs().max()) <= UNIT_NORM * max(1.0, scale):
        return ScoreMap(known.convention, known.normalizes_query, scale)
    raise MetricError(f"{where} holds this chunk tower's directions at other norms (stored / this model's "
                      f"{float(ratio.min()):.4f} to {float(ratio.max()):.4f}): its inner products are not Q-values. "
                      "Rebuild the store with this model's QRAGEmbeddings.")
