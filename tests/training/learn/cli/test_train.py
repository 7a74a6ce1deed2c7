"""`qrag-train` end to end: custom JSONL on the bundled encoder, kill -9 and --resume, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from qrag.training.data import write_jsonl
from qrag.training.learn.cli.train import main
from qrag.training.model.qnet import QNetwork
from tests.training.learn.two_hop import make_two_hop_episodes

SMALL = ["--trainer.num_envs", "2", "--trainer.rollout_steps", "2", "--trainer.minibatch_size", "4",
         "--trainer.log_every", "4", "--trainer.eval_every", "8", "--trainer.save_every", "4",
         "--trainer.no-progress", "--env.max_hops", "2", "--data.num_val", "4",
         "--model.max_chunk_tokens", "16", "--model.max_state_piece_tokens", "16"]


@pytest.fixture()
def qa_file(tmp_path: Path) -> Path:
    path = tmp_path / "qa.jsonl"
    write_jsonl(make_two_hop_episodes(16, 0), path)
    return path


@pytest.mark.slow
def test_custom_jsonl_on_bundled_minilm(qa_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(["--data.source", "jsonl", "--data.train_path", str(qa_file), "--model.train_mode", "lora",
                 "--trainer.total_transitions", "8", "--trainer.output_dir", str(out), *SMALL])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert summary["transitions"] == 8 and "best_eval" in summary
    for name in ("last/model/model.safetensors", "last/trainer_state.json", "best/model.safetensors",
                 "metrics.jsonl", "config.yaml"):
        assert (out / name).is_file(), name
    model = QNetwork.from_pretrained(out / "best")
    again = QNetwork.from_pretrained(out / "best")
    ep = make_two_hop_episodes(1, 5)[0]
    a = model.score(model.embed_states([ep.question], [[]]), model.embed_chunks(ep.chunks))
    b = again.score(again.embed_states([ep.question], [[]]), again.embed_chunks(ep.chunks))
    assert torch.equal(a, b)


@pytest.mark.slow
def test_killed_run_resumes(qa_file: Path, tmp_path: Path, tiny_encoder_path: Path) -> None:
    out = tmp_path / "run"
    args = [sys.executable, "-m", "qrag.training.learn.cli.train", "--data.source", "jsonl", "--data.train_path", str(qa_file),
            "--model.encoder", str(tiny_encoder_path), "--trainer.output_dir", str(out), *SMALL]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([*args, "--trainer.total_transitions", "100000"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (out / "last" / "trainer_state.json").is_file() and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    saved = json.loads((out / "last" / "trainer_state.json").read_text())["transitions"]
    assert saved >= 4
    done = subprocess.run([*args, "--trainer.total_transitions", str(saved + 8), "--resume"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    final = json.loads((out / "last" / "trainer_state.json").read_text())["transitions"]
    assert final == saved + 8  # continued from the checkpoint, not from zero
    assert f"resumed from {out / 'last'} at {saved} transitions" in done.stderr


def test_a_file_is_never_silently_ignored(qa_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--data.train_path", str(qa_file), "--trainer.output_dir", str(tmp_path / "o")])  # source left at babilong
    assert code == 2
    err = capsys.readouterr().err
    assert "generates its own episodes and would ignore it" in err and "--data.source jsonl" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_readme_custom_data_command_on_a_small_file_honours_the_time_budget(
    tmp_path: Path, tiny_encoder_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's custom-data command on a 30-line file (tiny encoder, 6-second budget for speed): it holds out
    what the file can spare, ends because of the budget (not its transitions), and its best/ serves a retriever."""
    path = tmp_path / "my_qa.jsonl"
    write_jsonl(make_two_hop_episodes(30, 0), path)
    out, budget_s = tmp_path / "run", 6.0
    started = time.perf_counter()
    code = main(["--preset", "cpu-small", "--data.source", "jsonl", "--data.train_path", str(path),
                 "--data.num_val", "50", "--trainer.max_minutes", str(budget_s / 60), "--trainer.output_dir", str(out),
                 "--model.encoder", str(tiny_encoder_path), "--trainer.no-progress", "--trainer.eval_every", "64"])
    elapsed = time.perf_counter() - started
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "holding out 6 for validation" in captured.err
    summary = json.loads(captured.out.split("\n", 1)[1])
    assert summary["transitions"] > 0 and "best_eval" in summary
    evals = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if "eval/fact_em" in line]
    assert evals
    # The budget, not the preset's 20 000 transitions, ended it (a slow or busy machine changes how many fit, not
    # which limit binds); set-up included, it stops within minutes, not the hours 20 000 transitions take here.
    assert 0 < summary["transitions"] < 20_000
    assert elapsed < 300
    pytest.importorskip("langchain_core")
    from qrag import QRAGRetriever

    ep = make_two_hop_episodes(1, 99)[0]
    assert len(QRAGRetriever.from_texts(list(ep.chunks), model=out / "best", k=2).invoke(ep.question)) == 2


def test_presets_are_listed_with_what_they_are_for_and_entry_flags_are_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--list-presets"])
    listing = capsys.readouterr().out.splitlines()
    assert any(line.startswith("babilong-cpu ") and "main job" in line for line in listing)
    assert all(len(line.split(None, 1)) == 2 for line in listing)  # every preset has a description
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    for flag in ("--preset", "--config", "--resume", "--list-presets"):
        assert flag in help_text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"question": "q", "chunks": ["a"], "supporting": [0]}\n{"question": "q", "chunks": [', "qa.jsonl:2: malformed JSON"),
        ('{"question": "q", "chunks": ["a", "b"], "supporting": [5]}\n', "qa.jsonl:1: supporting index 5 is outside"),
        ('{"question": "q", "chunks": [], "supporting": []}\n', "qa.jsonl:1: 'chunks' is empty"),
    ],
)
def test_bad_episode_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str) -> None:
    path = tmp_path / "qa.jsonl"
    path.write_text(content)
    code = main(["--data.source", "jsonl", "--data.train_path", str(path), "--trainer.output_dir", str(tmp_path / "o")])
    assert code == 2
    assert message in capsys.readouterr().err


def test_bad_model_and_config(qa_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--data.source", "jsonl", "--data.train_path", str(qa_file), "--data.num_val", "4",
            "--trainer.output_dir", str(tmp_path / "o")]
    assert main([*base, "--model.encoder", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "notamodel").mkdir()
    assert main([*base, "--model.encoder", str(tmp_path / "notamodel")]) == 2
    assert "not a Hugging Face model folder" in capsys.readouterr().err
    bad_yaml = tmp_path / "c.yaml"
    bad_yaml.write_text("rl:\n  lambda: 0.5\n")
    assert main([*base, "--config", str(bad_yaml)]) == 2
    assert "unknown config key 'lambda'" in capsys.readouterr().err
    assert main([*base, "--preset", "nonesuch"]) == 2
    assert "unknown preset 'nonesuch'" in capsys.readouterr().err
    assert main([*base, "--trainer.select_tolerance", "-0.1"]) == 2
    assert "trainer.select_tolerance must be >= 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*base, "--rl.lambda", "0.5"])  # an unknown flag: tyro prints the valid ones


def test_yaml_numbers_in_exponent_form_read_as_numbers(tmp_path: Path) -> None:
    """YAML 1.1 reads `2e-4` (no '.') as a string: a float field takes it as the number it means."""
    from qrag.training.learn.config import ConfigError, load_yaml

    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  lr: 2e-4\nrl:\n  margin: 1E-1\n")
    cfg = load_yaml(path)
    assert cfg.optim.lr == 2e-4 and cfg.rl.margin == 0.1
    path.write_text("optim:\n  lr: fast\n")
    with pytest.raises(ConfigError, match="lr: expected a number, got 'fast'"):
        load_yaml(path)
