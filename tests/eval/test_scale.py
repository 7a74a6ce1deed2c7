"""`qrag-eval` at scale, at CPU size: the speed phase, per-length sample counts, grouping by haystack size,
precision, and the length drift report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from qrag.eval import speed
from qrag.eval.cli import main
from qrag.eval.report import drift_rows
from qrag.eval.runner import question_groups, read_results
from qrag.eval.sweep import RunConfig
from qrag.training.data import Episode
from tests.eval.fake_clock import FakeClock


def _args(out: Path, encoder: Path, *extra: str) -> list[str]:
    return ["babilong", "--tasks", "qa2,qa1", "--encoder", str(encoder), "--out", str(out), "--no-progress", *extra]


def test_speed_phase_and_samples_at_end_to_end(tmp_path: Path, tiny_encoder_path: Path, tiny_checkpoint: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    rc = main(_args(out, tiny_encoder_path, "--model", str(tiny_checkpoint), "--methods", "qrag,dense,bm25",
                    "--lengths", "40,60", "--num-samples", "3", "--samples-at", "60=2", "--speed-lengths", "60,40",
                    "--speed-hops", "1-2", "--speed-queries", "3", "--batch-size", "4"))
    assert rc == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "latency p50 ms" in printed and "Fact EM at 60 against 40" in printed

    records = read_results(out / "results.jsonl")
    per_cell = {(t, n): sum(1 for r in records if r["task"] == t and r["length"] == n and r["method"] == "qrag")
                for t in ("qa1", "qa2") for n in ("40", "60")}
    assert per_cell == {("qa1", "40"): 3, ("qa2", "40"): 3, ("qa1", "60"): 2, ("qa2", "60"): 2}
    assert all(r["settings"]["precision"] == "fp32" for r in records)
    machine = json.loads((out / "summary.json").read_text())["machine"]
    assert machine["device"] == "cpu" and machine["gpu"] is None and machine["torch"] == torch.__version__

    result = json.loads((out / "speed.json").read_text())
    assert result["task"] == "qa2" and result["gpu"] is None and result["precision"] == "fp32"
    assert [e["length"] for e in result["lengths"]] == ["60", "40"]  # in the order asked
    for e in result["lengths"]:
        assert e["chunks"] == int(e["length"])  # one chunk per sentence
        assert e["index_s"] > 0 and e["chunks_per_s"] == pytest.approx(e["chunks"] / e["index_s"], rel=0.05)
        assert e["flops_per_chunk_est"] > 0 and e["fraction_of_spec_peak_est"] is None
        assert [h["hops"] for h in e["hops"]] == [1, 2]
        for h in e["hops"]:
            assert h["queries"] == 3 and h["batch"] == 4
            assert 0 < h["single_ms_p50"] <= h["single_ms_p90"] and h["qps_batched"] > 0 and h["qps_single"] > 0
    table = (out / "speed.md").read_text()
    assert table.count("\n| 60 | ") == 3 and table.count("\n| 40 | ") == 3  # one indexing row, two hop rows each

    drift = (out / "drift.md").read_text()
    # Paired by sample: the samples run at both lengths (qa2 skips stories longer than a haystack, so fewer pair).
    rows = [line.split(" | ") for line in drift.splitlines() if line.startswith("| ") and "method" not in line]
    assert {(r[0][2:], r[1]) for r in rows} == {(m, t) for m in ("qrag", "dense", "bm25") for t in ("qa1", "qa2")}
    assert all(1 <= int(r[2]) <= 2 for r in rows)


@pytest.mark.usefixtures("bf16_as_native")
def test_bf16_records_are_their_own_settings(tmp_path: Path, tiny_encoder_path: Path) -> None:
    out = tmp_path / "run"
    base = _args(out, tiny_encoder_path, "--methods", "dense", "--lengths", "12", "--num-samples", "2")
    assert main([*base, "--precision", "bf16"]) == 0
    assert {r["settings"]["precision"] for r in read_results(out / "results.jsonl")} == {"bf16"}
    assert main(base) == 2  # resuming the bf16 records at fp32 is refused


def test_filler_pool_records_are_their_own_settings(tmp_path: Path, tiny_encoder_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    base = _args(out, tiny_encoder_path, "--methods", "dense", "--lengths", "60", "--num-samples", "2")
    assert main([*base, "--filler-sentences", "300"]) == 0
    assert {r["settings"]["filler_sentences"] for r in read_results(out / "results.jsonl")} == {300}
    assert main(base) == 2  # resuming the pooled records over the whole text is refused
    assert "filler_sentences: 300 there, None now" in capsys.readouterr().err
    assert main([*_args(tmp_path / "b", tiny_encoder_path, "--lengths", "60"), "--filler-sentences", "0"]) == 2
    assert "--filler-sentences) must be an integer >= 1, got 0" in capsys.readouterr().err


def test_a_background_file_fills_every_haystack_and_its_records_say_so(tmp_path: Path, tiny_encoder_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from qrag.eval.sweep import cell_episodes
    from qrag.training.data.babi import parse_fact

    lines = [f"The lighthouse keeper counted {n} ships before dawn." for n in range(40)]
    file = tmp_path / "held_out.txt"
    file.write_text("\n".join(lines[:20]) + "\n\n" + "\n".join(lines[20:]) + "\n")  # a blank line is skipped
    cfg = RunConfig(benchmark="babilong", out=tmp_path / "o", tasks=("qa2",), lengths=("60",), num_samples=2,
                    background=str(file)).validate()
    for ep in cell_episodes(cfg, "qa2", 60):
        story = [c for c in ep.chunks if parse_fact(c) is not None]
        assert ep.num_chunks == 60 and story and set(ep.chunks) - set(story) <= set(lines)  # no text-source sentence
        assert all(ep.chunks[i] in story for i in ep.supporting)
    out = tmp_path / "run"
    base = _args(out, tiny_encoder_path, "--methods", "dense", "--lengths", "60", "--num-samples", "2")
    assert main([*base, "--background", str(file)]) == 0
    assert {r["settings"]["background"] for r in read_results(out / "results.jsonl")} == {str(file)}
    assert main(base) == 2  # resuming records over the held-out text with the text sources is refused
    capsys.readouterr()
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    for extra, message in ((["--background", str(empty)], "holds no sentence"),
                           (["--background", str(tmp_path / "missing.txt")], "missing.txt' cannot be read"),
                           (["--background", str(file), "--filler-sentences", "300"], "give one")):
        assert main([*_args(tmp_path / "b", tiny_encoder_path, "--lengths", "60"), *extra]) == 2
        assert message in capsys.readouterr().err


def test_the_val_split_is_what_a_training_run_validates_on_and_its_records_say_so(
        tmp_path: Path, tiny_encoder_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from qrag.eval.sweep import cell_episodes
    from qrag.training.data.build import build_episodes
    from qrag.training.learn.config import DataConfig

    cfg = RunConfig(benchmark="babilong", out=tmp_path / "o", tasks=("qa2",), lengths=("60",), num_samples=3,
                    split="val").validate()
    _, val = build_episodes(DataConfig(source="babilong", task="qa2", num_sentences=60, num_train=1, num_val=3))
    assert cell_episodes(cfg, "qa2", 60) == val  # the same episodes, not the test split's
    test = cell_episodes(RunConfig(benchmark="babilong", out=tmp_path / "t", tasks=("qa2",), lengths=("60",),
                                   num_samples=3).validate(), "qa2", 60)
    assert {e.id for e in test}.isdisjoint({e.id for e in val})
    assert [e.chunks for e in test] != [e.chunks for e in val]
    out = tmp_path / "run"
    base = _args(out, tiny_encoder_path, "--methods", "dense", "--lengths", "60", "--num-samples", "2")
    assert main([*base, "--split", "val"]) == 0
    assert {r["settings"]["split"] for r in read_results(out / "results.jsonl")} == {"val"}
    assert main(base) == 2  # resuming the validation records as the test split is refused
    assert "split: 'val' there, 'test' now" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--split val applies to the generated benchmarks only"):
        RunConfig(benchmark="hotpotqa", out=tmp_path / "h", data=str(tmp_path), split="val").validate()
    with pytest.raises(ValueError, match=r"split \(--split\) must be one of test, val, got 'dev'"):
        RunConfig(benchmark="babilong", out=tmp_path / "d", lengths=("12",), split="dev").validate()


def test_records_without_precision_resume_as_fp32(tmp_path: Path, tiny_encoder_path: Path) -> None:
    out = tmp_path / "run"
    base = _args(out, tiny_encoder_path, "--methods", "dense", "--lengths", "12", "--num-samples", "2")
    assert main(base) == 0
    path = out / "results.jsonl"
    old = [json.loads(line) for line in path.read_text().splitlines()]
    for rec in old:  # as written before the setting existed
        del rec["settings"]["precision"]
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    assert main(base) == 0 and len(read_results(path)) == len(old)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"precision": "int8"}, "precision (--precision) must be one of"),
    ({"precision": "bf16", "chunk_vectors": Path("cv")}, "drop --chunk-vectors"),
    ({"precision": "fp16"}, "--precision fp16 needs a GPU (--device cuda), not device 'cpu'"),
    ({"samples_at": {"10m": 5}}, "--samples-at names length '10m'"),
    ({"samples_at": {"12": 0}}, "--samples-at 12=0"),
    ({"speed_lengths": ("huge",)}, "bad length 'huge'"),
    ({"speed_hops": (0, 1)}, "--speed-hops must name hop counts >= 1"),
    ({"speed_queries": 0}, "speed_queries (--speed-queries) must be an integer >= 1"),
])
def test_bad_scale_settings_are_named(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    cfg = RunConfig(benchmark="babilong", out=tmp_path / "o", lengths=("12",), **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cfg.validate()


def test_samples_at_ignores_case(tmp_path: Path) -> None:
    cfg = RunConfig(benchmark="babilong", out=tmp_path / "o", lengths=("32k", "10M"), samples_at={"10m": 5}).validate()
    assert cfg.samples("10M") == 5 and cfg.samples("32k") == cfg.num_samples


def test_speed_lengths_need_a_benchmark_with_lengths(tmp_path: Path) -> None:
    cfg = RunConfig(benchmark="wiki", out=tmp_path / "o", speed_lengths=("1k",))
    with pytest.raises(ValueError, match="fixed-size samples"):
        cfg.validate()


def test_cli_rejects_malformed_samples_at_and_hops(tmp_path: Path, tiny_encoder_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    for flag, value in (("--samples-at", "10m:50"), ("--speed-hops", "1-x")):
        with pytest.raises(SystemExit):
            main(_args(tmp_path / "o", tiny_encoder_path, "--lengths", "12", flag, value))
        assert value in capsys.readouterr().err


def _ep(i: int, n: int) -> Episode:
    return Episode(id=str(i), question="q", chunks=tuple(f"c{j}" for j in range(n)), supporting=(0,))


def test_question_groups_respect_size_and_chunk_total() -> None:
    eps = [_ep(i, n) for i, n in enumerate([3, 3, 3, 9, 1, 1, 1, 1])]
    groups = [[e.id for e in g] for g in question_groups(eps, size=3, max_chunks=6)]
    # 3+3 fills 6; 3 then 9 would pass 6; 9 alone is over and forms its own group; then size 3 caps.
    assert groups == [["0", "1"], ["2"], ["3"], ["4", "5", "6"], ["7"]]
    assert [[e.id for e in g] for g in question_groups(eps, size=32)] == [[e.id for e in eps]]


def test_drift_rows_pair_samples_by_id() -> None:
    def rec(method: str, length: str, i: str, em: float) -> dict[str, object]:
        return {"method": method, "task": "qa1", "length": length, "id": i, "fact_em": em}

    records = [rec("qrag", "1k", "a", 1.0), rec("qrag", "1k", "b", 1.0), rec("qrag", "1k", "c", 0.0),
               rec("qrag", "1m", "a", 1.0), rec("qrag", "1m", "b", 0.0), rec("qrag", "1m", "c", 1.0),
               rec("qrag", "1m", "d", 0.0)]  # d ran at 1m only: not paired
    (row,) = drift_rows(records, ["qrag"], "1k", "1m")
    assert row["n"] == 3 and row["short"] == pytest.approx(2 / 3) and row["long"] == pytest.approx(2 / 3)
    assert row["diff"] == 0.0 and row["lost"] == 1 and row["gained"] == 1


def test_spec_peak_matches_the_longest_fragment() -> None:
    assert speed.spec_bf16_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert speed.spec_bf16_tflops("NVIDIA H100 PCIe") == 756.0
    assert speed.spec_bf16_tflops("NVIDIA H100 NVL") == 835.0
    assert speed.spec_bf16_tflops("Tesla T4") is None and speed.spec_bf16_tflops(None) is None
    assert speed.matmul_tflops(torch.device("cpu")) is None and speed.gpu_info(torch.device("cpu")) is None


def test_chunk_flops_by_hand(_tiny_qnet_session) -> None:  # type: ignore[no-untyped-def]
    model = _tiny_qnet_session
    texts = ["Mary went to the kitchen.", "John took the milk there."]
    est = speed.chunk_flops(model, texts)
    base = model.base_encoder(model.chunk_tower)
    params = sum(p.numel() for n, p in base.named_parameters() if not n.startswith(("embeddings.", "pooler.")))
    tokens = [len(model.tokenize_chunks([t])["input_ids"][0]) for t in texts]
    layers, hidden = base.config.num_hidden_layers, base.config.hidden_size
    expected = sum(2 * params * t + 4 * layers * hidden * t * t for t in tokens) / 2
    assert est["nonembedding_params"] == params and est["flops_per_chunk_est"] == pytest.approx(expected)
    assert est["tokens_max"] == max(tokens)


def test_measure_rejects_empty_input(_tiny_qnet_session) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="haystack and at least one question"):
        speed.measure(_tiny_qnet_session, [], ["q"], [1])
    with pytest.raises(ValueError, match="hop counts must be >= 1"):
        speed.measure(_tiny_qnet_session, ["a"], ["q"], [0])


def test_measure_reports_the_spans_of_its_clock(_tiny_qnet_session) -> None:  # type: ignore[no-untyped-def]
    # Indexing 8 chunks takes 2 s; per hop count, 3 questions one at a time, then a batch of 4.
    hop1, hop2 = [0.0625, 0.1875, 0.125], [0.25, 0.25, 0.75]
    clock = FakeClock([2.0, *hop1, 0.5, *hop2, 0.25])
    texts = [f"Passage {i} names the harbour town number {i}." for i in range(8)]
    entry = speed.measure(_tiny_qnet_session, texts, ["where is the harbour?", "which town?"], [1, 2], queries=3,
                          batch=4, encode_batch=4, clock=clock)
    assert clock.spent
    assert entry["index_s"] == 2.0 and entry["chunks_per_s"] == 4.0  # 8 chunks / 2 s
    # p50 and p90 of (62.5, 187.5, 125) ms; p90 interpolates between the two largest: 125 + 0.8 * 62.5 = 175
    assert [(h["hops"], h["single_ms_p50"], h["single_ms_p90"], h["qps_single"], h["batch_s"], h["qps_batched"])
            for h in entry["hops"]] == [(1, 125.0, 175.0, 8.0, 0.5, 8.0),  # 3 questions / 0.375 s, 4 / 0.5 s
                                        (2, 250.0, 650.0, 2.4, 0.25, 16.0)]  # 250 + 0.8 * 500; 3 / 1.25 s, 4 / 0.25 s
