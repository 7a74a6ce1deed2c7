"""Bad input at the three CLIs, run in-process via `main`: `qrag-data`, `qrag-train` (resume included) and
`qrag-eval`. Each fails with one line of the project's own, never a traceback, and leaves no half-written file.
Everything runs on the tiny random BERT of tests/conftest.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from qrag.training.learn.checkpoint_files import ResumeError
from qrag.training.model.qnet import QNetwork
from tests import sigkill
from tests.training.learn.two_hop import make_two_hop_episodes


@pytest.fixture(scope="module")
def qnet(tiny_encoder_path: Path) -> QNetwork:
    # Nudged off the base encoder, as a trained model is: its checkpoint holds every weight.
    return sigkill.perturbed(QNetwork.from_encoder(str(tiny_encoder_path)), seed=2).eval()


def _nan_weight(d: Path) -> None:
    """Put a NaN into the word embeddings of the checkpoint in `d`."""
    tensors = load_file(str(d / "model.safetensors"))
    name = next(k for k in tensors if k.endswith("word_embeddings.weight"))
    tensors[name] = tensors[name].clone()
    tensors[name][0, 0] = float("nan")
    save_file(tensors, str(d / "model.safetensors"))


def _one_line_error(capsys: pytest.CaptureFixture[str], needle: str) -> str:
    """The command's error is one line, the last, and names `needle`; no traceback anywhere."""
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    errors = [line for line in lines if ": error:" in line]
    assert len(errors) == 1 and lines[-1] == errors[0] and needle in errors[0], lines
    assert not any("Traceback" in line for line in lines), lines
    return errors[0]


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    from qrag.training.data import write_jsonl

    good = tmp_path / "good.jsonl"
    write_jsonl(make_two_hop_episodes(6, 0), good)
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(good.read_bytes().split(b"\n")[0] + b"\n" + '{"question": "caf\u00e9?"}\n'.encode("latin-1"))
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    return {"good": good, "latin1": latin1, "file": a_file, "dir": tmp_path, "missing": tmp_path / "missing.jsonl"}


DATA_CASES: dict[str, tuple[list[str], str]] = {
    "negative --num-samples": (["babi", "--num-samples", "-5"], "--num-samples must be >= 1"),
    "zero --num-sentences": (["babilong", "--num-sentences", "0"], "--num-sentences"),
    "--out is a folder": (["jsonl", "--path", "{good}", "--out", "{dir}"], "is a folder"),
    "--out under a file": (["jsonl", "--path", "{good}", "--out", "{file}/x.jsonl"], "is a file"),
    "non-UTF-8 --path": (["jsonl", "--path", "{latin1}"], "latin1.jsonl:2: not UTF-8"),
    "missing --path": (["jsonl", "--path", "{missing}"], "missing.jsonl"),
    "--path is a folder": (["jsonl", "--path", "{dir}"], "is not a file"),
}


@pytest.mark.parametrize("case", list(DATA_CASES))
def test_qrag_data_bad_input(case: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    from qrag.training.learn.cli.data import main

    argv, needle = DATA_CASES[case]
    assert main([a.format(**files) for a in argv]) == 2
    _one_line_error(capsys, needle)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="a Linux system folder")
def test_qrag_data_out_in_a_system_folder_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """/proc takes no new files, even from root (whom permission bits do not stop): refused before any episode is
    generated, naming --out and its value, never the temporary file it would be written through."""
    from qrag.training.learn.cli.data import main

    assert main(["babi", "--num-samples", "1", "--out", "/proc/qrag.jsonl"]) == 2
    error = _one_line_error(capsys, "--out '/proc/qrag.jsonl' cannot be written")
    assert "pass a file in a folder you can write to" in error and ".tmp" not in error


def test_qrag_data_write_failure_names_the_flag(files: dict[str, Path], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A failure no check foresees (a disk filling up while the file is written) names --out too."""
    import errno

    from qrag.training.learn.cli import data as data_cli

    out = tmp_path / "eps.jsonl"

    def full_disk(episodes: object, path: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", f"{path}.tmp")

    monkeypatch.setattr(data_cli, "write_jsonl", full_disk)
    assert data_cli.main(["jsonl", "--path", str(files["good"]), "--out", str(out)]) == 2
    error = _one_line_error(capsys, f"--out {str(out)!r} cannot be written (No space left on device)")
    assert ".tmp" not in error


def test_qrag_data_failure_leaves_no_half_written_file(files: dict[str, Path], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from qrag.training.learn.cli.data import main

    out = tmp_path / "out" / "eps.jsonl"
    assert main(["jsonl", "--path", str(files["latin1"]), "--out", str(out)]) == 2  # fails at the second episode
    _one_line_error(capsys, "not UTF-8")
    assert not out.exists() and list(out.parent.iterdir()) == []


TRAIN_CASES: dict[str, tuple[list[str], str]] = {
    "negative num_train": (["--data.num_train", "-5"], "data.num_train must be >= 0"),
    "negative num_val": (["--data.num_val", "-1"], "data.num_val must be >= 0"),
    "num_distractors off the wiki source": (["--data.num_distractors", "50"], "applies to the wiki, hotpotqa_pool and corpus sources only"),
    "negative num_distractors": (["--data.source", "wiki", "--data.task", "bridge", "--data.num_distractors", "-1"],
                                 "data.num_distractors must be >= 0"),
    "output_dir is a file": (["--trainer.output_dir", "{file}"], "is a file"),
    "non-UTF-8 train_path": (["--data.source", "jsonl", "--data.train_path", "{latin1}"], "latin1.jsonl:2"),
    "missing train_path": (["--data.source", "jsonl", "--data.train_path", "{missing}"], "missing.jsonl"),
    "train_path is a folder": (["--data.source", "jsonl", "--data.train_path", "{dir}"], "not a file"),
}


@pytest.mark.parametrize("case", list(TRAIN_CASES))
def test_qrag_train_bad_input(case: str, files: dict[str, Path], tiny_encoder_path: Path, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    from qrag.training.learn.cli.train import main

    argv, needle = TRAIN_CASES[case]
    base = ["--model.encoder", str(tiny_encoder_path), "--trainer.output_dir", str(tmp_path / "run")]
    assert main([*base, *(a.format(**files) for a in argv)]) == 2
    _one_line_error(capsys, needle)


def test_qrag_train_caps_a_small_files_held_out_share_and_says_so(tiny_encoder_path: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Documented (docs/GUIDE.md, "Train": at most a fifth of a file is held out, a 30-line file lends 6): a
    --data.num_val larger than that is capped, not refused, and the run says so on stderr, naming the file, its
    episode count, the value asked for, the cap and the fix; it is a notice, not an error."""
    from qrag.training.data import write_jsonl
    from qrag.training.learn.cli.train import main

    path = tmp_path / "qa.jsonl"
    write_jsonl(make_two_hop_episodes(30, 0), path)
    argv = ["--model.encoder", str(tiny_encoder_path), "--trainer.output_dir", str(tmp_path / "run"),
            "--data.source", "jsonl", "--data.train_path", str(path), "--data.num_val", "50",
            "--trainer.total_transitions", "4", "--trainer.num_envs", "2", "--trainer.rollout_steps", "2",
            "--trainer.minibatch_size", "4", "--trainer.no-progress", "--env.max_hops", "2"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    notice = next(line for line in err.splitlines() if "has 30 episodes" in line)
    assert ": error:" not in err and str(path) in notice
    assert all(words in notice for words in ("holding out 6", "num_val=50", "20%", "--data.val_path")), notice


@pytest.mark.parametrize("damage", ["state not JSON", "state is a list", "tensors truncated", "model weights NaN"])
def test_resume_from_a_damaged_last_is_one_line(damage: str, qnet: QNetwork, files: dict[str, Path],
                                                tiny_encoder_path: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from qrag.training.learn.checkpoint_files import read_checkpoint
    from qrag.training.learn.cli.train import main

    last = tmp_path / "run" / "last"
    qnet.save_pretrained(last / "model")
    (last / "trainer_state.json").write_text({"state not JSON": "{", "state is a list": "[]"}.get(damage, "{}"))
    save_file({"rng.torch": torch.zeros(3)}, str(last / "trainer_tensors.safetensors"))
    if damage == "tensors truncated":
        (last / "trainer_tensors.safetensors").write_bytes(b"\x08")
    if damage == "model weights NaN":
        _nan_weight(last / "model")
    argv = ["--model.encoder", str(tiny_encoder_path), "--trainer.output_dir", str(tmp_path / "run"), "--resume",
            "--data.source", "jsonl", "--data.train_path", str(files["good"]), "--data.num_val", "2",
            "--trainer.no-progress"]
    assert main(argv) == 2
    _one_line_error(capsys, str(last))
    if damage != "model weights NaN":
        with pytest.raises(ResumeError, match="last"):
            read_checkpoint(last)


EVAL_CASES: dict[str, tuple[list[str], str]] = {
    "--budget 0": (["--budget", "0"], "--budget) must be an integer >= 1, got 0"),
    "--budget -3": (["--budget", "-3"], "got -3"),
    "--lengths inf": (["--lengths", "inf"], "bad length 'inf'"),
    "--lengths nan": (["--lengths", "nan"], "bad length 'nan'"),
    "--num-samples -5": (["--num-samples", "-5"], "--num-samples) must be an integer >= 1"),
    "--max-hops 0": (["--max-hops", "0"], "--max-hops"),
    "--stop-threshold nan": (["--stop-threshold", "nan"], "--stop-threshold"),
    "--out is a file": (["--out", "{file}"], "is a file"),
    "--out under a file": (["--out", "{file}/sub"], "is a file, not a folder"),
    "--out in a system folder": (["--out", "/proc/qrag-eval"], "--out '/proc/qrag-eval' cannot be written"),
}


@pytest.mark.parametrize("case", list(EVAL_CASES))
def test_qrag_eval_bad_input(case: str, files: dict[str, Path], tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    from qrag.eval.cli import main

    argv, needle = EVAL_CASES[case]
    base = ["babilong", "--out", str(tmp_path / "ev"), "--no-progress", "--num-samples", "1", "--methods", "bm25"]
    assert main([*base, *(a.format(**files) for a in argv)]) == 2
    _one_line_error(capsys, needle)


def test_run_config_names_a_bad_fill(tmp_path: Path) -> None:
    from qrag.eval.sweep import RunConfig

    with pytest.raises(ValueError, match=r"fill \(--fill\) must be one of model, state, question, question_unguarded, "
                                         r"got 'cosine'"):
        RunConfig(benchmark="babilong", out=tmp_path, fill="cosine").validate()


def test_qrag_eval_non_utf8_data(files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from qrag.eval.cli import main

    assert main(["jsonl", "--data", str(files["latin1"]), "--out", str(tmp_path / "ev"), "--methods", "bm25",
                 "--no-progress"]) == 2
    _one_line_error(capsys, "latin1.jsonl:2: not UTF-8")


@pytest.mark.parametrize("change", [["--budget", "3"], ["--seed", "1"], ["--encoder", "other-encoder"],
                                    ["--max-hops", "2"], ["--fill", "question"]])
def test_qrag_eval_resume_with_other_settings_is_refused(change: list[str], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from qrag.eval.cli import main
    from qrag.eval.runner import read_results

    base = ["babilong", "--out", str(tmp_path), "--no-progress", "--num-samples", "2", "--tasks", "qa1",
            "--lengths", "12", "--methods", "bm25", "--budget", "2"]
    assert main(base) == 0
    records = read_results(tmp_path / "results.jsonl")
    assert records and all(r["settings"]["budget"] == 2 for r in records)
    capsys.readouterr()
    assert main([*base, *change]) == 2
    err = capsys.readouterr().err
    assert change[0].removeprefix("--").replace("-", "_") in err and "other settings" in err
    assert read_results(tmp_path / "results.jsonl") == records


def test_sweep_key_follows_the_checkpoint_not_its_path(tmp_path: Path) -> None:
    from qrag.eval.runner import check_resumable

    settings = {"model": "runs/a/best", "model_fingerprint": "f1", "budget": 2}
    (tmp_path / "results.jsonl").write_text(json.dumps({"key": "k1", "settings": settings}) + "\n")
    assert len(check_resumable(tmp_path / "results.jsonl", {**settings, "model": "/abs/runs/a/best"})) == 1
    with pytest.raises(ValueError, match="model_fingerprint: 'f1' there, 'f2' now"):
        check_resumable(tmp_path / "results.jsonl", {**settings, "model_fingerprint": "f2"})
    (tmp_path / "results.jsonl").write_text(json.dumps({"key": "k1"}) + "\n")
    with pytest.raises(ValueError, match="without its settings"):
        check_resumable(tmp_path / "results.jsonl", settings)
