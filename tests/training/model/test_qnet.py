"""The two-tower Q-network: pooling, state rendering, scoring, positions, checkpoints."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from qrag.training.learn.config import ConfigError
from qrag.training.model.encoders import EncoderLoadError
from qrag.training.model.positions import rotate_halves
from qrag.training.model.qnet import CheckpointError, QNetwork
from tests.conftest import make_tiny_encoder

CHUNKS = ["Mary went to the kitchen.", "Mary took the milk there.", "The grass is green.", "John left."]


def test_tower_is_masked_mean_pool_over_ten(tiny_qnet: QNetwork) -> None:
    inputs = tiny_qnet.tokenize_chunks(["a b c", "a"])
    tower = tiny_qnet.chunk_tower.eval()
    with torch.no_grad():
        hidden = tower.encoder(**inputs).last_hidden_state
        pooled = tower(**inputs)
    n = int(inputs["attention_mask"][1].sum())
    torch.testing.assert_close(pooled[1], hidden[1, :n].mean(0) / 10)  # padding never enters the mean


def test_state_splices_separately_truncated_pieces(tiny_encoder_path: Path) -> None:
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), max_state_piece_tokens=3)
    tok = qnet.tokenizer
    ids = qnet.state_token_ids("where is the milk now", ["mary took the milk there", "ok"])
    q = tok("where is the", add_special_tokens=False)["input_ids"]
    c1 = tok("mary took the", add_special_tokens=False)["input_ids"]
    c2 = tok("ok", add_special_tokens=False)["input_ids"]
    cls, sep = tok.cls_token_id, tok.sep_token_id
    assert ids == [cls, *q, sep, *c1, sep, *c2, sep]
    # each passage cut shorter than the question (max_state_passage_tokens), or longer
    for passage_tokens, question, chunk in ((2, "where is the", "mary took"), (4, "where is the", "mary took the milk")):
        qnet.config.max_state_passage_tokens = passage_tokens
        q = tok(question, add_special_tokens=False)["input_ids"]
        c1 = tok(chunk, add_special_tokens=False)["input_ids"]
        assert qnet.state_token_ids("where is the milk now", ["mary took the milk there", "ok"]) == [
            cls, *q, sep, *c1, sep, *c2, sep]


def test_embed_matches_forward_and_batching_is_order_free(tiny_qnet: QNetwork) -> None:
    chunks = tiny_qnet.embed_chunks(CHUNKS, batch_size=3)
    one_by_one = torch.cat([tiny_qnet.embed_chunks([c]) for c in CHUNKS])
    torch.testing.assert_close(chunks, one_by_one, atol=1e-5, rtol=1e-4)
    states = tiny_qnet.embed_states(["Where is the milk?", "Where is Mary?"], [[CHUNKS[1]], []])
    tiny_qnet.eval()
    q1, q2 = tiny_qnet(tiny_qnet.tokenize_states(["Where is the milk?"], [[CHUNKS[1]]]),
                       tiny_qnet.tokenize_chunks([CHUNKS[0]]))
    q = tiny_qnet.score(states, chunks)
    assert q.shape == (2, 4)
    torch.testing.assert_close((q1 + q2)[0], q[0, 0], atol=1e-5, rtol=1e-4)
    heads = tiny_qnet.score(states, chunks, heads=True)
    torch.testing.assert_close(heads.sum(0), q, atol=1e-5, rtol=1e-4)


def test_relative_scoring_rotates_chunks_not_states(tiny_encoder_path: Path) -> None:
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), position_mode="relative")
    chunks = qnet.embed_chunks(CHUNKS)
    state = qnet.embed_states(["Where is the milk?"], [[CHUNKS[1]]])
    selected = torch.tensor([[False, True, False, False]])
    pos = qnet.positions(selected)
    assert pos is not None and pos[0].tolist() == pytest.approx([0.0, 0.0, 20.0, 38.0])  # the selected chunk: masked anyway
    expected = (rotate_halves(chunks, pos[0]) @ state[0])
    torch.testing.assert_close(qnet.score(state, chunks, pos)[0], expected)
    assert not torch.allclose(qnet.score(state, chunks, pos), qnet.score(state, chunks))


@pytest.mark.parametrize("mode", ["full", "top_layers", "lora"])
def test_checkpoint_round_trip_gives_identical_scores(tiny_encoder_path: Path, tmp_path: Path, mode: str) -> None:
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), train_mode=mode, trainable_layers=1, lora_rank=4)
    with torch.no_grad():  # make the trained part differ from the base so the test can fail
        for p in qnet.parameters():
            if p.requires_grad:
                p.add_(0.01 * torch.randn_like(p))
    qnet.save_pretrained(tmp_path / "ckpt")
    loaded = QNetwork.from_pretrained(tmp_path / "ckpt")
    s = ["Where is the milk?"]
    torch.testing.assert_close(
        loaded.score(loaded.embed_states(s, [[]]), loaded.embed_chunks(CHUNKS)),
        qnet.score(qnet.embed_states(s, [[]]), qnet.embed_chunks(CHUNKS)),
    )
    meta = json.loads((tmp_path / "ckpt" / "qrag_config.json").read_text())
    assert meta["saved_params"] == ("all" if mode == "full" else "trainable")
    if mode == "top_layers":
        trainable = [n for n, p in qnet.named_parameters() if p.requires_grad]
        assert trainable and all(".layer.1." in n for n in trainable)


def test_partial_checkpoint_is_small_beside_its_base(minilm_path: Path, tmp_path: Path) -> None:
    qnet = QNetwork.from_encoder(str(minilm_path), train_mode="lora", lora_rank=8)
    qnet.save_pretrained(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "model.safetensors").stat().st_size < 2_000_000  # the base is ~90 MB


def test_checkpoint_on_wrong_base_refused(tiny_encoder_path: Path, tmp_path: Path) -> None:
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), train_mode="lora", lora_rank=4)
    qnet.save_pretrained(tmp_path / "ckpt")
    other = make_tiny_encoder(tmp_path / "other", seed=1)
    with pytest.raises(CheckpointError, match="different base encoder"):
        QNetwork.from_pretrained(tmp_path / "ckpt", encoder=str(other))


def test_save_replaces_atomically_and_keeps_old_on_failure(tiny_qnet: QNetwork, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny_qnet.save_pretrained(tmp_path / "ckpt", extra_files={"eval.json": '{"fact_em": 0.5}'})
    before = (tmp_path / "ckpt" / "model.safetensors").read_bytes()
    assert (tmp_path / "ckpt" / "eval.json").read_text() == '{"fact_em": 0.5}'  # written inside the same swap

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr("qrag.training.model.folder.save_file", boom)
    with pytest.raises(RuntimeError):
        tiny_qnet.save_pretrained(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "model.safetensors").read_bytes() == before
    assert (tmp_path / "ckpt" / "eval.json").exists()  # the old save's report stays with the old model
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temp folder left behind


def test_bad_inputs_have_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(EncoderLoadError, match="does not exist"):
        QNetwork.from_encoder("./no/such/encoder")
    (tmp_path / "junk").mkdir()
    with pytest.raises(EncoderLoadError, match="no config.json"):
        QNetwork.from_encoder(str(tmp_path / "junk"))
    with pytest.raises(ConfigError, match="unknown QNetwork option"):
        QNetwork.from_encoder(str(tmp_path), top_k=3)
    with pytest.raises(CheckpointError, match="does not exist"):
        QNetwork.from_pretrained(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="qrag_config.json is missing"):
        QNetwork.from_pretrained(tmp_path / "junk")


def test_served_lora_checkpoint_is_merged_same_scores_same_save(tiny_encoder_path: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from qrag.training.search.index import ChunkIndex
    from qrag.training.search.searcher import MultiHopSearcher, load_model

    qnet = QNetwork.from_encoder(str(tiny_encoder_path), train_mode="lora", lora_rank=4)  # both towers train
    with torch.no_grad():  # non-zero adapters (B starts at zero), so a merge that drops or rescales them shows
        for p in qnet.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    qnet.save_pretrained(tmp_path / "ckpt")
    served = load_model(tmp_path / "ckpt")
    assert not any("lora_" in n for n, _ in served.state_tower.named_parameters())  # plain layers, adapters folded in
    # The chunk tower is left as loaded: its vectors and fingerprint (what a saved index is checked against) are the
    # checkpoint's, bit for bit, so a searcher built on the served model saves and loads back.
    assert served.chunk_tower_fingerprint() == QNetwork.from_pretrained(tmp_path / "ckpt").chunk_tower_fingerprint()
    searcher = MultiHopSearcher(served, ChunkIndex.from_texts(served, CHUNKS))
    searcher.save(tmp_path / "searcher")
    loaded = MultiHopSearcher.load(tmp_path / "searcher")  # a loaded searcher serves the merged network too
    assert not any("lora_" in n for n, _ in loaded.model.state_tower.named_parameters())
    assert [h.chunk.text for h in loaded.search_one("Where is the milk?", k=2).hits] \
        == [h.chunk.text for h in searcher.search_one("Where is the milk?", k=2).hits]
    loaded.save(tmp_path / "searcher_again")  # and saves the adapters exactly as they were
    assert load_file(tmp_path / "searcher" / "model" / "model.safetensors").keys() \
        == load_file(tmp_path / "searcher_again" / "model" / "model.safetensors").keys()
    assert not served.training and not any(p.requires_grad for p in served.parameters())
    s, sel = ["Where is the milk?", "Where was Mary?"], [[], [CHUNKS[0]]]
    with torch.no_grad():
        expected = qnet.eval().score(qnet.embed_states(s, sel), qnet.embed_chunks(CHUNKS))  # (2, N)
        got = served.score(served.embed_states(s, sel), served.embed_chunks(CHUNKS))
        base = QNetwork.from_encoder(str(tiny_encoder_path))
        untrained = base.score(base.embed_states(s, sel), base.embed_chunks(CHUNKS))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(untrained, expected, rtol=1e-3, atol=1e-4)  # the adapters do change the scores
    served.save_pretrained(tmp_path / "again")  # still saves the adapters, exactly as loaded
    first, again = load_file(tmp_path / "ckpt" / "model.safetensors"), load_file(tmp_path / "again" / "model.safetensors")
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
    with pytest.raises(RuntimeError, match="from_pretrained to train"):
        served.train()
    full = QNetwork.from_encoder(str(tiny_encoder_path), train_mode="full")
    assert full.merge_adapters() is full and full.train().training  # nothing to merge: still trainable
    untouched = QNetwork.from_encoder(str(tiny_encoder_path), train_mode="lora", lora_rank=4)
    untouched.save_pretrained(tmp_path / "untrained")  # names its base, stores no weights
    assert any("lora_" in n for n, _ in load_model(tmp_path / "untrained").named_parameters())  # nothing folded


@pytest.mark.usefixtures("bf16_as_native")
@pytest.mark.parametrize("anchor", ["none", "first_hop"])
def test_serve_in_bf16_serves_close_to_fp32_and_leaves_training_and_saves_in_fp32(
    tiny_encoder_path: Path, tmp_path: Path, anchor: str
) -> None:
    from safetensors.torch import load_file

    qnet = QNetwork.from_encoder(str(tiny_encoder_path), train_mode="full", train_towers="state", state_anchor=anchor)
    with torch.no_grad():  # a trained state tower (the base's would make the first_hop anchor's vectors trivial)
        for p in qnet.state_tower.parameters():
            p.add_(0.05 * torch.randn_like(p))
    qnet.eval()
    s, sel = ["Where is the milk?", "Where was Mary?", "Who left?"], [[], [CHUNKS[0]], [CHUNKS[1], CHUNKS[3]]]
    want = qnet.embed_states(s, sel)  # (3, D) fp32
    before = {k: v.clone() for k, v in qnet.state_dict().items()}
    assert qnet.serve_in("bf16") is qnet and qnet.serving_precision == "bf16"
    got = qnet.embed_states(s, sel)
    assert got.dtype == torch.float32 and not torch.equal(got, want)  # the bf16 copy ran
    assert torch.nn.functional.cosine_similarity(got, want).min() > 0.999
    after = qnet.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)  # fp32 as it was
    qnet.save_pretrained(tmp_path / "served")
    assert all(t.dtype == torch.float32 for t in load_file(tmp_path / "served" / "model.safetensors").values())
    inputs = qnet.tokenize_states(s, sel)
    out = qnet.state_vectors(inputs)  # a pass with gradients runs the fp32 tower
    assert out.dtype == torch.float32
    out.sum().backward()
    assert all(p.grad is not None for p in qnet.state_tower.parameters() if p.requires_grad)
    with pytest.raises(ValueError, match="'fp16' needs a GPU"):
        qnet.serve_in("fp16")
    with pytest.raises(ValueError, match="precision must be 'fp32', 'bf16', 'fp16', 'int8' or 'auto', got 'int4'"):
        qnet.serve_in("int4")  # type: ignore[arg-type]
    assert qnet.train().serving_precision == "fp32"  # a network that trains serves from the tower it trains
    with pytest.raises(ValueError, match="eval mode"):
        qnet.serve_in("bf16")
    qnet.eval().serve_in("bf16")
    assert qnet.serve_in("fp32").serving_precision == "fp32"
    torch.testing.assert_close(qnet.embed_states(s, sel), want)


@pytest.mark.parametrize("bad", [1.0, -0.1, True, "0.1"])
def test_dropout_must_be_a_probability(tiny_encoder_path: Path, bad: object) -> None:
    with pytest.raises(ConfigError, match=r"model\.dropout must be a probability"):
        QNetwork.from_encoder(str(tiny_encoder_path), dropout=bad)


def test_dropout_zero_makes_training_passes_deterministic_and_leaves_eval_passes_alone(tiny_encoder_path: Path) -> None:
    """`model.dropout: 0` turns off the training towers' dropout (two training passes agree; with the encoder's
    own 0.1 they do not), leaves a frozen chunk tower's layers as loaded, and changes nothing in eval mode."""
    own = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state")
    off = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", dropout=0.0)
    p = {m.p for m in off.state_tower.modules() if isinstance(m, torch.nn.Dropout)}
    assert p == {0.0}
    assert {m.p for m in off.chunk_tower.modules() if isinstance(m, torch.nn.Dropout)} == {0.1}  # frozen: untouched
    inputs = off.tokenize_states(["Where is the milk?", "Who took the apple?"], [["Mary took the milk."], []])
    for net, agree in ((off, True), (own, False)):
        net.train()
        torch.manual_seed(0)
        first = net.state_vectors(inputs)
        second = net.state_vectors(inputs)
        assert torch.equal(first, second) is agree
    questions, pieces = ["Where is the milk?"], [["Mary took the milk."]]
    assert torch.equal(off.embed_states(questions, pieces), own.embed_states(questions, pieces))  # eval mode


def test_a_deep_copy_shares_the_tokenizer_and_owns_its_weights(tiny_qnet: QNetwork) -> None:
    twin = copy.deepcopy(tiny_qnet)
    assert twin.tokenizer is tiny_qnet.tokenizer and twin.config == tiny_qnet.config
    mine, theirs = dict(tiny_qnet.named_parameters()), dict(twin.named_parameters())
    assert mine.keys() == theirs.keys()
    assert all(mine[k] is not theirs[k] and torch.equal(mine[k], theirs[k]) for k in mine)
    with torch.no_grad():
        want = tiny_qnet.embed_states(["Where is the milk?"], [[CHUNKS[0]]])
        next(twin.state_tower.parameters()).add_(1.0)  # the copy's weights are its own
        assert torch.equal(tiny_qnet.embed_states(["Where is the milk?"], [[CHUNKS[0]]]), want)
