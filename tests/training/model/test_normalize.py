"""`model.normalize`: towers L2-normalise their pooled vectors before the division by `scale`, so an untrained
network's Q-value is the base encoder's cosine over scale², and (with the question anchor) its search is
cosine search at every hop."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from qrag.training.model.qnet import QNetwork
from qrag.training.search.index import ChunkIndex
from qrag.training.search.searcher import MultiHopSearcher

TEXTS = [
    "Mary went to the kitchen.", "John picked up the apple in the garden after breakfast.", "Mary took the milk.",
    "Sandra travelled to the office.", "John went to the garden.", "Daniel dropped the football.",
    "The milk is in the fridge, on the second shelf behind the cheese.", "Sandra grabbed the ball.",
]


def test_normalised_vectors_have_norm_one_over_scale_and_point_where_the_plain_ones_do(tiny_encoder_path: Path) -> None:
    plain = QNetwork.from_encoder(str(tiny_encoder_path), scale=1.0)
    normed = QNetwork.from_encoder(str(tiny_encoder_path), scale=2.0, normalize=True)
    raw, unit = plain.embed_chunks(TEXTS), normed.embed_chunks(TEXTS)  # (N, D)
    assert not torch.allclose(raw.norm(dim=-1), torch.ones(len(TEXTS)), atol=1e-2)  # the check below means something
    torch.testing.assert_close(unit.norm(dim=-1), torch.full((len(TEXTS),), 0.5))
    torch.testing.assert_close(unit, F.normalize(raw, dim=-1) / 2.0)
    states = normed.embed_states(["Where is the milk?"], [[TEXTS[2]]])  # (1, D)
    torch.testing.assert_close(states.norm(dim=-1), torch.tensor([0.5]))


def test_untrained_q_is_the_cosine_over_scale_squared(tiny_encoder_path: Path) -> None:
    plain = QNetwork.from_encoder(str(tiny_encoder_path), scale=1.0)
    normed = QNetwork.from_encoder(str(tiny_encoder_path), scale=0.5, normalize=True)
    q, c = plain.embed_states(["Who has the ball?"], [[]]), plain.embed_chunks(TEXTS)  # (1, D), (N, D)
    cosine = F.cosine_similarity(q, c)  # (N,)
    got = normed.score(normed.embed_states(["Who has the ball?"], [[]]), normed.embed_chunks(TEXTS))[0]  # (N,)
    torch.testing.assert_close(got, cosine / 0.25, atol=1e-5, rtol=1e-5)


def test_untrained_anchored_normalised_search_is_cosine_search_at_every_hop(tiny_encoder_path: Path) -> None:
    plain = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state")
    anchored = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", state_anchor="question",
                                     normalize=True, scale=1.0)
    index = ChunkIndex.from_texts(anchored, TEXTS)
    chunks = plain.embed_chunks(TEXTS)  # (N, D) unnormalised
    for question in ["Where is the milk?", "Who has the ball?"]:
        hits = MultiHopSearcher(anchored, index).search_one(question, k=5, max_hops=5, stop_threshold=None).hits
        cosine = F.cosine_similarity(plain.embed_states([question], [[]]), chunks)  # (N,)
        inner = plain.score(plain.embed_states([question], [[]]), chunks)[0]  # (N,)
        assert [int(h.chunk.id) for h in hits] == cosine.argsort(descending=True)[:5].tolist()
        assert [h.q_value for h in hits] == pytest.approx(cosine.sort(descending=True).values[:5].tolist(), abs=1e-5)
        assert cosine.argsort(descending=True).tolist() != inner.argsort(descending=True).tolist()  # not plain dense


def test_normalisation_is_part_of_chunk_vector_keys_and_fingerprints(tiny_encoder_path: Path) -> None:
    plain = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", scale=1.0)
    normed = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", scale=1.0, normalize=True)
    assert plain.chunk_vectors_key() != normed.chunk_vectors_key()
    assert plain.chunk_tower_fingerprint() != normed.chunk_tower_fingerprint()
    assert not plain.chunk_vectors_key().endswith("normalize")  # unnormalised keys are what they always were


def test_normalisation_survives_a_checkpoint_round_trip(tiny_encoder_path: Path, tmp_path: Path) -> None:
    normed = QNetwork.from_encoder(str(tiny_encoder_path), scale=0.5, normalize=True)
    loaded = QNetwork.from_pretrained(normed.save_pretrained(tmp_path / "ckpt"))
    assert loaded.config.normalize
    torch.testing.assert_close(loaded.embed_chunks(TEXTS), normed.embed_chunks(TEXTS))
