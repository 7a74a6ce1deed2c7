"""Training mechanics: finite loss, every trainable parameter moves, targets move only by Polyak, exact resume."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from qrag.training.learn import td
from qrag.training.learn.checkpoint_files import ResumeError
from qrag.training.learn.config import TrainConfig
from qrag.training.learn.evaluation import evaluate
from qrag.training.learn.trainer import Trainer
from qrag.training.model.qnet import QNetwork
from qrag.training.search import hops
from tests.training.learn.two_hop import make_two_hop_episodes


def small_config(encoder: Path, out: Path, **trainer: object) -> TrainConfig:
    return TrainConfig.from_dict({
        "model": {"encoder": str(encoder), "max_chunk_tokens": 16, "max_state_piece_tokens": 16},
        "env": {"max_hops": 2},
        "rl": {"lam": 0.5, "alpha": 0.05, "tau": 0.25},
        "optim": {"lr": 1e-3, "warmup_steps": 1},
        "trainer": {"output_dir": str(out), "total_transitions": 16, "num_envs": 4, "rollout_steps": 2,
                    "minibatch_size": 4, "eval_every": 0, "save_every": 8, "log_every": 8, "progress": False,
                    **trainer},
    })


def test_update_moves_every_trainable_parameter_and_targets_only_by_polyak(tiny_encoder_path: Path, tmp_path: Path) -> None:
    cfg = small_config(tiny_encoder_path, tmp_path, minibatch_size=8)
    trainer = Trainer(cfg, make_two_hop_episodes(20, 0))
    before_online = copy.deepcopy(trainer.online.state_dict())
    before_target = copy.deepcopy(trainer.target.state_dict())
    batch = trainer.collect_rollout()
    # Acting alone changes nothing.
    for k, v in trainer.target.state_dict().items():
        assert torch.equal(v, before_target[k])
    stats = trainer.update(batch)  # 8 transitions, minibatch 8: exactly one optimiser step
    assert trainer.updates == 1
    assert torch.isfinite(torch.tensor(stats["losses/td_loss"]))
    after_online = trainer.online.state_dict()
    for name, p in trainer.online.named_parameters():
        assert p.requires_grad
        assert not torch.equal(after_online[name], before_online[name]), f"{name} did not change"
    tau = cfg.rl.tau
    for name, v in trainer.target.state_dict().items():
        expected = (1 - tau) * before_target[name] + tau * after_online[name]
        torch.testing.assert_close(v, expected, rtol=1e-5, atol=1e-7)
    assert all(not p.requires_grad for p in trainer.target.parameters())


def test_update_is_one_plain_soft_q_lambda_step(tiny_encoder_path: Path, tmp_path: Path) -> None:
    """One minibatch of the whole rollout: the trainer's update is the textbook step written out below (forward on
    the shuffled rows, TD loss, backward, clip, AdamW, Polyak), whatever its accumulation and grouping plumbing."""
    cfg = small_config(tiny_encoder_path, tmp_path, minibatch_size=8)
    cfg.model.dropout = 0.0  # the reference's forward pass must see the same network
    trainer = Trainer(cfg, make_two_hop_episodes(20, 0))
    batch = trainer.collect_rollout()  # 4 environments × 2 steps = 8 transitions
    net, target = copy.deepcopy(trainer.online).train(), copy.deepcopy(trainer.target)
    shuffle = torch.Generator()
    shuffle.set_state(trainer.act_gen.get_state())
    rows = torch.randperm(8, generator=shuffle).tolist()
    oc = cfg.optim
    params = [p for p in net.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=trainer.optimizer.param_groups[0]["lr"], betas=oc.betas, eps=oc.eps,
                                  weight_decay=oc.weight_decay)
    states = net.tokenize_states([batch["questions"][i] for i in rows], [batch["rendered"][i] for i in rows])
    q1, q2 = net(states, net.tokenize_chunks([batch["chunks"][i] for i in rows]))
    loss = td.td_loss(q1, q2, batch["returns"][rows])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, oc.max_grad_norm)
    optimizer.step()
    td.polyak_update(target, net, cfg.rl.tau)

    stats = trainer.update(batch)
    assert trainer.updates == 1
    assert stats["losses/td_loss"] == pytest.approx(float(loss.detach()), rel=1e-5)
    assert stats["losses/q_values"] == pytest.approx(float((q1 + q2).detach().mean()), rel=1e-5)
    for (name, want), got in zip(net.state_dict().items(), trainer.online.state_dict().values(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=f"online {name}")
    for (name, want), got in zip(target.state_dict().items(), trainer.target.state_dict().values(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=f"target {name}")


def test_lora_trains_only_adapters(tiny_encoder_path: Path, tmp_path: Path) -> None:
    cfg = small_config(tiny_encoder_path, tmp_path, minibatch_size=8)
    cfg.model.train_mode = "lora"
    cfg.model.lora_rank = 4
    trainer = Trainer(cfg, make_two_hop_episodes(20, 0))
    trainable = {n for n, p in trainer.online.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    before = copy.deepcopy(trainer.online.state_dict())
    trainer.update(trainer.collect_rollout())
    after = trainer.online.state_dict()
    for n in after:
        changed = not torch.equal(after[n], before[n])
        # lora_A starts random, lora_B at zero: both move after one step; frozen weights never do.
        assert changed == (n in trainable), n


@pytest.mark.parametrize("mode,towers,margin_weight", [  # one in the default suite, every variant in the slow one
    ("full", "both", 1.0), pytest.param("lora", "both", 0.0, marks=pytest.mark.slow),
    pytest.param("full", "state", 0.0, marks=pytest.mark.slow), pytest.param("full", "both", 0.0, marks=pytest.mark.slow),
    pytest.param("full", "state", 1.0, marks=pytest.mark.slow)])
def test_resume_matches_uninterrupted_run(tiny_encoder_path: Path, tmp_path: Path, mode: str, towers: str,
                                          margin_weight: float) -> None:
    def config(out: Path, **trainer: object) -> TrainConfig:
        cfg = small_config(tiny_encoder_path, out, **trainer)
        cfg.model.train_mode, cfg.model.train_towers = mode, towers  # type: ignore[assignment]
        cfg.rl.margin_weight = margin_weight
        return cfg

    full = Trainer(config(tmp_path / "a"), make_two_hop_episodes(30, 0))
    full.train()

    first = Trainer(config(tmp_path / "b"), make_two_hop_episodes(30, 0))
    first._prepare_output_dir()
    first.update(first.collect_rollout())  # 8 transitions, then the process "dies" after its checkpoint
    first.save_checkpoint()
    del first
    resumed = Trainer(config(tmp_path / "b", resume=True), make_two_hop_episodes(30, 0))
    resumed.train()

    assert resumed.transitions == full.transitions == 16
    assert resumed.updates == full.updates
    for (name, a), b in zip(full.online.state_dict().items(), resumed.online.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"online {name} differs after resume")
    for (name, a), b in zip(full.target.state_dict().items(), resumed.target.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"target {name} differs after resume")


def test_existing_run_is_not_overwritten_without_resume(tiny_encoder_path: Path, tmp_path: Path) -> None:
    Trainer(small_config(tiny_encoder_path, tmp_path), make_two_hop_episodes(10, 0)).train()
    stamp = (tmp_path / "last" / "trainer_state.json").read_bytes()
    with pytest.raises(ResumeError, match="--resume"):
        Trainer(small_config(tiny_encoder_path, tmp_path), make_two_hop_episodes(10, 0)).train()
    assert (tmp_path / "last" / "trainer_state.json").read_bytes() == stamp


def test_resume_with_different_model_settings_refused(tiny_encoder_path: Path, tmp_path: Path) -> None:
    Trainer(small_config(tiny_encoder_path, tmp_path), make_two_hop_episodes(10, 0)).train()
    cfg = small_config(tiny_encoder_path, tmp_path, resume=True)
    cfg.model.max_chunk_tokens = 32
    with pytest.raises(ResumeError, match="max_chunk_tokens"):
        Trainer(cfg, make_two_hop_episodes(10, 0)).train()


def test_resume_of_a_run_saved_before_a_model_setting_existed(tiny_encoder_path: Path, tmp_path: Path) -> None:
    from qrag.training.learn.checkpoint_files import TRAINER_STATE, find_last

    Trainer(small_config(tiny_encoder_path, tmp_path), make_two_hop_episodes(10, 0)).train()
    state_file = find_last(tmp_path) / TRAINER_STATE  # type: ignore[operator]
    state = json.loads(state_file.read_text())
    for added in ("normalize", "state_anchor"):  # what a run saved by an earlier qrag lacks
        del state["config"]["model"][added]
    state_file.write_text(json.dumps(state))
    resumed = Trainer(small_config(tiny_encoder_path, tmp_path, resume=True, total_transitions=24),
                      make_two_hop_episodes(10, 0))
    assert resumed.train()["transitions"] == 24
    cfg = small_config(tiny_encoder_path, tmp_path, resume=True, total_transitions=32)
    cfg.model.normalize = True  # not what it was saved with (the default, off)
    with pytest.raises(ResumeError, match="normalize"):
        Trainer(cfg, make_two_hop_episodes(10, 0)).train()


def test_best_checkpoint_and_logs_written(tiny_encoder_path: Path, tmp_path: Path) -> None:
    cfg = small_config(tiny_encoder_path, tmp_path, eval_every=8)
    val = make_two_hop_episodes(6, 1)
    summary = Trainer(cfg, make_two_hop_episodes(20, 0), val).train()
    assert (tmp_path / "best" / "model.safetensors").is_file()
    assert list((tmp_path / "tb").iterdir())
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert any('"losses/td_loss"' in line for line in lines) and any('"eval/return"' in line for line in lines)
    best = QNetwork.from_pretrained(tmp_path / "best")
    # best/ is chosen on fact EM at exactly |SF| hops (2 here, the horizon too)
    assert any('"eval/sf_em/all"' in line for line in lines)
    assert evaluate(best, val, cfg.env)["fact_em"] == pytest.approx(summary["best_metric"])
    # the stop rule was calibrated on the validation episodes when training ended, and saved with best/
    from qrag.training.learn.stop_calibration import calibrate_stop_threshold

    assert best.hop_settings.calibrated and best.hop_settings.max_hops == cfg.env.max_hops
    assert best.hop_settings.stop_threshold == pytest.approx(calibrate_stop_threshold(best, val).threshold)
    stored = json.loads((tmp_path / "best" / "eval.json").read_text())
    assert stored["stop/threshold"] == pytest.approx(best.hop_settings.stop_threshold)
    assert stored["stop/fact_em"] >= stored["stop/em_all_hops"] - 0.01


def test_the_starting_network_is_evaluated_and_kept_when_training_never_beats_it(tiny_encoder_path: Path,
                                                                                 tmp_path: Path) -> None:
    cfg = small_config(tiny_encoder_path, tmp_path, eval_every=8)
    cfg.optim.lr, cfg.optim.weight_decay = 1e-12, 0.0  # below fp32 resolution: no later evaluation can beat the first
    val = make_two_hop_episodes(6, 1)
    Trainer(cfg, make_two_hop_episodes(20, 0), val).train()
    evals = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if '"eval/return"' in line]
    assert [e["transitions"] for e in evals] == [0, 8, 16]
    assert json.loads((tmp_path / "best" / "eval.json").read_text())["transitions"] == 0
    untrained = QNetwork.from_encoder(str(tiny_encoder_path), max_chunk_tokens=16, max_state_piece_tokens=16)
    assert evaluate(QNetwork.from_pretrained(tmp_path / "best"), val, cfg.env) == evaluate(untrained, val, cfg.env)


@pytest.mark.parametrize(("tolerance", "kept_at"), [(None, 16), (0.0, 8)])
def test_best_keeps_the_latest_network_within_one_standard_error(
    tiny_encoder_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tolerance: float | None, kept_at: int
) -> None:
    import qrag.training.learn.evaluation as evaluation_module

    scores = iter([0.5, 0.9, 0.85])  # the start, then two trained networks, the later one a little lower

    def scripted(*args: object, **kwargs: object) -> dict[str, float]:
        v = next(scores)
        return {"sf_em/all": v, "sf_em": v}

    monkeypatch.setattr(evaluation_module, "evaluate_at_sf", scripted)  # what the trainer's validation_scores calls
    cfg = small_config(tiny_encoder_path, tmp_path, eval_every=8, select_tolerance=tolerance)
    cfg.trainer.calibrate_stop = False
    summary = Trainer(cfg, make_two_hop_episodes(20, 0), make_two_hop_episodes(6, 1)).train()
    evals = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if '"eval/sf_em"' in line]
    assert [e["transitions"] for e in evals] == [0, 8, 16]
    # one standard error of 0.85 on 6 validation episodes: sqrt(0.85·0.15/6) ≈ 0.146, so 0.85 ≥ 0.9 − 0.146
    expected = (0.85 * 0.15 / 6) ** 0.5 if tolerance is None else 0.0
    assert evals[-1]["eval/select/tolerance"] == pytest.approx(expected)
    assert json.loads((tmp_path / "best" / "eval.json").read_text())["transitions"] == kept_at
    assert summary["best_metric"] == {16: 0.85, 8: 0.9}[kept_at]
    state = json.loads((tmp_path / "last" / "trainer_state.json").read_text())
    assert state["selection"] == {"kept": summary["best_metric"], "top": 0.9, "start": 0.5}


def test_acting_schedule_follows_the_time_budget(tiny_encoder_path: Path, tmp_path: Path) -> None:
    cfg = small_config(tiny_encoder_path, tmp_path, total_transitions=100000, max_minutes=1.0)
    cfg.rl.act_temperature, cfg.rl.act_temperature_final, cfg.rl.act_epsilon = 0.5, 0.1, 0.4
    cfg.rl.explore_fraction, cfg.rl.alpha_final = 0.5, 0.01
    trainer = Trainer(cfg, make_two_hop_episodes(4, 0))
    now = [1000.0]  # the budget reads this clock: exact shares however slow the machine
    trainer.clock, trainer.created = lambda: now[0], 1000.0
    assert trainer.acting() == (pytest.approx(0.5), pytest.approx(0.4))
    now[0] = 1015.0  # a quarter of the minute: half of explore_fraction
    assert trainer.acting() == (pytest.approx(0.3), pytest.approx(0.2))
    assert trainer.alpha == pytest.approx(0.05 + (0.01 - 0.05) * 0.25)
    now[0] = 1040.0  # past explore_fraction: final temperature, no ε
    assert trainer.acting() == (pytest.approx(0.1), 0.0)


def test_learning_rate_decays_over_the_time_budget(tiny_encoder_path: Path, tmp_path: Path) -> None:
    cfg = small_config(tiny_encoder_path, tmp_path, total_transitions=100000, max_minutes=1.0)
    cfg.optim.schedule, cfg.optim.warmup_steps = "linear", 0
    trainer = Trainer(cfg, make_two_hop_episodes(4, 0))
    batch = trainer.collect_rollout()
    trainer.clock, trainer.created = lambda: 1045.0, 1000.0  # three quarters of the minute, far from 100 000 transitions
    trainer.update(batch)  # reads the budget's share once, then steps the optimiser and the schedule
    assert trainer.lr_progress == pytest.approx(0.75)
    assert trainer.scheduler.get_last_lr()[0] == pytest.approx(0.25 * cfg.optim.lr)


def test_task_weighting_moves_sampling_toward_the_unlearned_task(tiny_encoder_path: Path, tmp_path: Path) -> None:
    cfg = small_config(tiny_encoder_path, tmp_path, eval_every=8, task_weighting="error")
    train = [dataclasses.replace(e, metadata={"task": "a" if i % 2 else "b"})
             for i, e in enumerate(make_two_hop_episodes(20, 0))]
    val = [dataclasses.replace(e, metadata={"task": "a" if i % 2 else "b"}) for i, e in enumerate(make_two_hop_episodes(8, 1))]
    trainer = Trainer(cfg, train, val)
    trainer.train()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in lines if "eval/sf_em/a" in r]
    assert evals
    last = evals[-1]
    err = {t: max(0.05, 1 - last[f"eval/sf_em/{t}"]) for t in "ab"}
    assert last["eval/task_p/a"] == pytest.approx(err["a"] / (err["a"] + err["b"]))


def test_frozen_chunk_tower_trains_the_state_tower_only_and_embeds_each_chunk_once(
    tiny_encoder_path: Path, tmp_path: Path
) -> None:
    cfg = small_config(tiny_encoder_path, tmp_path, minibatch_size=8)
    cfg.model.train_towers = "state"
    episodes = make_two_hop_episodes(20, 0)
    trainer = Trainer(cfg, episodes)
    online = trainer.online
    assert online.chunk_tower_frozen and trainer.chunk_cache is not None
    assert all(not p.requires_grad for p in online.chunk_tower.parameters())
    calls: list[int] = []
    embed = online.embed_chunks
    online.embed_chunks = lambda texts, **kw: (calls.append(len(texts)), embed(texts, **kw))[1]  # type: ignore[method-assign]
    before = copy.deepcopy(online.state_dict())
    for _ in range(2):
        trainer.update(trainer.collect_rollout())
    after = online.state_dict()
    for name in after:
        moved = not torch.equal(after[name], before[name])
        assert moved == name.startswith("state_tower."), name
    # Acting, both rollouts and the updates read the run-long cache: no text was embedded twice.
    distinct = {t for e in episodes for t in e.chunks}
    assert sum(calls) == len(trainer.chunk_cache) <= len(distinct)
    # The target's chunk tower is the same frozen encoder: its vectors come from the same cache.
    assert trainer.target.chunk_vectors_key() == online.chunk_vectors_key()
    # A checkpoint of a frozen-chunk-tower run holds the state tower only.
    trainer.save_checkpoint()
    saved = QNetwork.from_pretrained(tmp_path / "last" / "model")
    assert saved.chunk_tower_frozen
    for name, value in saved.state_dict().items():
        torch.testing.assert_close(value, after[name], rtol=0, atol=0, msg=name)


def test_frozen_chunk_tower_forward_with_cached_vectors_equals_forward_with_ids(tiny_encoder_path: Path) -> None:
    qnet = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", position_mode="relative",
                                 max_chunk_tokens=16, max_state_piece_tokens=16)
    chunks = ["Mary went to the kitchen.", "John took the milk there."]
    states = qnet.tokenize_states(["Where is the milk?", "Where is Mary?"], [[], [chunks[0]]])
    positions = torch.tensor([3.0, 21.5])
    by_ids = qnet(states, qnet.tokenize_chunks(chunks), positions)
    by_vectors = qnet(states, qnet.embed_chunks(chunks), positions)
    for a, b in zip(by_ids, by_vectors, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    both = QNetwork.from_encoder(str(tiny_encoder_path))
    with pytest.raises(ValueError, match="train_towers='state'"):
        both(states, both.embed_chunks(chunks))
    # An untrained network with the same chunk settings shares the frozen one's chunk vectors; a network
    # whose chunk tower trains keys its vectors by itself.
    twin = QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", max_chunk_tokens=16)
    assert twin.chunk_vectors_key() == qnet.chunk_vectors_key()
    assert QNetwork.from_encoder(str(tiny_encoder_path), train_towers="state", max_chunk_tokens=8).chunk_vectors_key() \
        != qnet.chunk_vectors_key()
    assert both.chunk_vectors_key() == f"network:{id(both)}"


@pytest.mark.parametrize("towers", ["both", "state"])
def test_margin_loss_scores_each_transition_in_the_state_it_was_taken(tiny_encoder_path: Path, tmp_path: Path,
                                                                     towers: str) -> None:
    """The update's margin term sees, per transition, the chunks that were available, the supporting chunks not
    yet taken, the positions of that state, and the chunk vectors acting used; its value is DQfD's loss on them."""
    cfg = small_config(tiny_encoder_path, tmp_path, minibatch_size=8)
    cfg.model.position_mode, cfg.model.train_towers = "relative", towers  # type: ignore[assignment]
    cfg.rl.margin_weight, cfg.rl.margin = 1.0, 0.3
    trainer = Trainer(cfg, make_two_hop_episodes(20, 0))
    batch = trainer.collect_rollout()  # 4 environments × 2 steps
    assert len(batch["episodes"]) == len(batch["selected"]) == 8
    assert any(batch["selected"]) and not all(batch["selected"])  # first hops and later hops
    idx = list(range(8))
    corpora, taken_rows, gold = trainer.margin_inputs(batch, idx)
    online = trainer.online.eval()
    with torch.no_grad():
        states = online.embed_states(batch["questions"], batch["rendered"])  # (8, D)
        scores, _ = hops.q_values(online, states, corpora, idx, taken_rows)  # (8, N) what the update scores
    n = corpora.num_slots
    ref = torch.full((8, n), -math.inf)  # (8, N) each state scored alone, from scratch
    available, remaining = torch.zeros(8, n, dtype=torch.bool), torch.zeros(8, n, dtype=torch.bool)
    for row, i in enumerate(idx):
        ep = trainer.env.episodes[batch["episodes"][i]]
        taken = set(batch["selected"][i])
        assert taken_rows[row] == batch["selected"][i]
        assert gold[row].nonzero().flatten().tolist() == sorted(ep.supporting)
        vectors = trainer.online.embed_chunks(list(ep.chunks))  # (N_e, D)
        torch.testing.assert_close(corpora.vectors[row, : ep.num_chunks], vectors, atol=1e-5, rtol=1e-4)
        assert corpora.vectors[row, ep.num_chunks:].abs().sum() == 0
        sel = torch.zeros(1, ep.num_chunks, dtype=torch.bool)
        sel[0, list(taken)] = True
        with torch.no_grad():
            q = online.score(states[row : row + 1], vectors, online.positions(sel))[0]  # (N_e,)
        free = [c for c in range(ep.num_chunks) if c not in taken]
        ref[row, free] = q[free]
        available[row, free] = True
        remaining[row, sorted(set(ep.supporting) - taken)] = True
    torch.testing.assert_close(scores, ref, atol=1e-4, rtol=1e-4)
    # The logged margin term is td.margin_loss on the pre-update network's scores of those states.
    expected = td.margin_loss(ref.masked_fill(~available, 0.0), available, remaining, 0.3).item()
    cfg.trainer.update_epochs = 1  # one minibatch of all 8 transitions: one optimiser step
    stats = trainer.update(batch)
    assert stats["losses/margin_loss"] == pytest.approx(expected, rel=0.05, abs=1e-3)  # dropout on in training
