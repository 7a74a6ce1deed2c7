"""`trainer.train_layers`: the top layers of the state tower train on a trunk computed once per state.

The cached path must be the same learning as the full pass restricted to the top layers: the same Q-values and soft
values in acting, the same update (the textbook step written out with whole-network forward passes), nothing below
the top layers moving, and a saved model that is a whole state tower."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from qrag.training.learn import td
from qrag.training.learn.acting import score_step
from qrag.training.learn.checkpoint_files import ResumeError
from qrag.training.learn.config import TrainConfig
from qrag.training.learn.trainer import Trainer
from qrag.training.model.qnet import QNetwork
from qrag.training.model.trunk import StateParts
from qrag.training.overlay import ConfigError
from tests.conftest import make_tiny_encoder
from tests.training.learn.two_hop import make_two_hop_episodes


@pytest.fixture(scope="module")
def three_layer_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_encoder(tmp_path_factory.mktemp("tiny-3-layers"), layers=3)


def config(encoder: Path, out: Path, anchor: str = "question", layers: int = 1, **trainer: object) -> TrainConfig:
    return TrainConfig.from_dict({
        "model": {"encoder": str(encoder), "max_chunk_tokens": 16, "max_state_piece_tokens": 16,
                  "train_towers": "state", "state_anchor": anchor, "dropout": 0.0},
        "env": {"max_hops": 2},
        "rl": {"lam": 0.5, "alpha": 0.05, "tau": 0.25, "margin_weight": 0.0},
        "optim": {"lr": 1e-3, "warmup_steps": 1},
        "trainer": {"output_dir": str(out), "total_transitions": 16, "num_envs": 4, "rollout_steps": 2,
                    "minibatch_size": 8, "eval_every": 0, "save_every": 8, "log_every": 8, "progress": False,
                    "train_layers": layers, "length_groups": 2, **trainer},
    })


@pytest.mark.parametrize("anchor", ["question", "none"])
def test_state_parts_give_the_full_pass_vectors(three_layer_encoder: Path, anchor: str) -> None:
    net = QNetwork.from_encoder(str(three_layer_encoder), train_towers="state", state_anchor=anchor).eval()
    # the state tower differs from the frozen base, as a fine-tuned start's does
    with torch.no_grad():
        for p in net.state_tower.parameters():
            p.add_(0.05 * torch.randn_like(p))
    inputs = net.tokenize_states(["where is the milk?", "who took it?"],
                                 [["Mary went to the kitchen.", "Mary took the milk."], []])
    with torch.no_grad():
        full = net.state_vectors(inputs)
        for top in (1, 2):
            parts = net.state_parts(inputs, top)
            assert (parts.anchor is None) == (anchor == "none")
            torch.testing.assert_close(net.state_vectors(parts), full, rtol=1e-5, atol=1e-6)
            rows = parts.rows()  # per transition, cut to its own tokens, then stacked again in another order
            assert [r.hidden.shape[1] for r in rows] == inputs["attention_mask"].sum(dim=1).tolist()
            torch.testing.assert_close(net.state_vectors(StateParts.cat(rows[::-1])), full.flip(0), rtol=1e-5, atol=1e-6)


def test_acting_scores_are_the_full_pass_scores(three_layer_encoder: Path, tmp_path: Path) -> None:
    trainer = Trainer(config(three_layer_encoder, tmp_path), make_two_hop_episodes(20, 0))
    with torch.no_grad():
        for p in trainer.target.state_tower.parameters():  # the target's top layers differ from the online's
            p.add_(0.01 * torch.randn_like(p))
        top = trainer.top_layer_names()
        for name, p in trainer.target.named_parameters():  # ... and its trunk is the online's (frozen, equal)
            if name.startswith("state_tower") and name not in top:
                p.copy_(dict(trainer.online.named_parameters())[name])
        split = score_step(trainer.env, trainer.online, trainer.online_cache, trainer.target, trainer.target_cache,
                           5, 0.05, "mean", top=1)
        full = score_step(trainer.env, trainer.online, trainer.online_cache, trainer.target, trainer.target_cache,
                          5, 0.05, "mean")
    assert split.parts is not None and full.parts is None
    torch.testing.assert_close(split.q_online, full.q_online, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(split.value, full.value, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("anchor,mode", [("question", "full"), ("none", "full"), ("question", "lora")])
def test_update_is_the_textbook_step_on_the_top_layers(three_layer_encoder: Path, tmp_path: Path, anchor: str,
                                                       mode: str) -> None:
    """The whole network's forward on the tokenised states, TD loss, backward, clip and AdamW over the top layer's
    trainable parameters only (its weights, or its LoRA adapters), Polyak: what the cached path's update does."""
    cfg = config(three_layer_encoder, tmp_path, anchor)
    cfg.model.train_mode = mode  # type: ignore[assignment]
    cfg.model.lora_rank = 4
    trainer = Trainer(cfg, make_two_hop_episodes(20, 0))
    batch = trainer.collect_rollout()  # 4 environments × 2 steps = 8 transitions, one minibatch
    net, target = copy.deepcopy(trainer.online).train(), copy.deepcopy(trainer.target)
    shuffle = torch.Generator()
    shuffle.set_state(trainer.act_gen.get_state())
    rows = torch.randperm(8, generator=shuffle).tolist()
    top = trainer.top_layer_names()
    assert top and all(dict(net.named_parameters())[n].requires_grad for n in top)
    params = [p for n, p in net.named_parameters() if n in top]
    assert len(params) < sum(1 for p in net.parameters() if p.requires_grad)
    if mode == "lora":
        assert all("lora_" in n for n in top)
    oc = cfg.optim
    optimizer = torch.optim.AdamW(params, lr=trainer.optimizer.param_groups[0]["lr"], betas=oc.betas, eps=oc.eps,
                                  weight_decay=oc.weight_decay)
    states = net.tokenize_states([batch["questions"][i] for i in rows], [batch["rendered"][i] for i in rows])
    chunks = trainer.chunk_cache.vectors(net, [batch["chunks"][i] for i in rows])
    q1, q2 = net(states, chunks)
    loss = td.td_loss(q1, q2, batch["returns"][rows])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, oc.max_grad_norm)
    optimizer.step()
    td.polyak_update(target, net, cfg.rl.tau)

    before = copy.deepcopy(trainer.online.state_dict())
    stats = trainer.update(batch)
    assert trainer.updates == 1
    assert stats["losses/td_loss"] == pytest.approx(float(loss.detach()), rel=1e-4)
    after = trainer.online.state_dict()
    for name, want in net.state_dict().items():
        torch.testing.assert_close(after[name], want, rtol=1e-4, atol=1e-6, msg=f"online {name}")
        assert torch.equal(after[name], before[name]) == (name not in top), f"{name}: moved iff a top-layer weight"
    for (name, want), got in zip(target.state_dict().items(), trainer.target.state_dict().values(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6, msg=f"target {name}")


def test_a_run_saves_a_whole_state_tower_and_resumes(three_layer_encoder: Path, tmp_path: Path) -> None:
    trainer = Trainer(config(three_layer_encoder, tmp_path / "a"), make_two_hop_episodes(30, 0))
    trainer.train()
    loaded = QNetwork.from_pretrained(tmp_path / "a" / "last" / "model" if (tmp_path / "a" / "last" / "model").is_dir()
                                      else tmp_path / "a" / "last")
    for name, value in trainer.online.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], value, rtol=0, atol=0, msg=name)

    first = Trainer(config(three_layer_encoder, tmp_path / "b"), make_two_hop_episodes(30, 0))
    first._prepare_output_dir()
    first.update(first.collect_rollout())
    first.save_checkpoint()
    del first
    resumed = Trainer(config(three_layer_encoder, tmp_path / "b", resume=True), make_two_hop_episodes(30, 0))
    resumed.train()
    assert resumed.transitions == trainer.transitions and resumed.updates == trainer.updates
    for (name, a), b in zip(trainer.online.state_dict().items(), resumed.online.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"online {name} differs after resume")


def test_resuming_with_other_top_layers_is_refused_by_name_and_the_checkpoint_kept(three_layer_encoder: Path,
                                                                                   tmp_path: Path) -> None:
    first = Trainer(config(three_layer_encoder, tmp_path, layers=1), make_two_hop_episodes(30, 0))
    first._prepare_output_dir()
    first.update(first.collect_rollout())
    first.save_checkpoint()
    saved = sorted(p.name for p in (tmp_path / "last").rglob("*"))
    del first
    with pytest.raises(ResumeError, match="trained with trainer.train_layers 1, this run asks for 2; resume with "
                                          "train_layers 1"):
        Trainer(config(three_layer_encoder, tmp_path, layers=2, resume=True), make_two_hop_episodes(30, 0)).train()
    assert sorted(p.name for p in (tmp_path / "last").rglob("*")) == saved
    resumed = Trainer(config(three_layer_encoder, tmp_path, layers=1, resume=True), make_two_hop_episodes(30, 0))
    resumed.train()
    assert resumed.updates > 1


@pytest.mark.parametrize("change,message", [
    ({"model": {"train_towers": "both", "state_anchor": "none"}}, "train_towers 'state'"),
    ({"model": {"state_anchor": "first_hop"}}, "state_anchor 'question' or 'none'"),
    ({"model": {"train_mode": "top_layers"}}, "train_mode 'full' or 'lora'"),
    ({"trainer": {"train_layers": -1}}, "must be >= 0"),
])
def test_settings_it_cannot_serve_are_refused_by_name(three_layer_encoder: Path, tmp_path: Path,
                                                      change: dict[str, dict[str, object]], message: str) -> None:
    base = config(three_layer_encoder, tmp_path)
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_dict(change, base=base).validate()


def test_as_many_top_layers_as_the_tower_has_is_refused(three_layer_encoder: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="between 1 and 2"):
        Trainer(config(three_layer_encoder, tmp_path, layers=3), make_two_hop_episodes(10, 0))
