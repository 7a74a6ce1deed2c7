"""Soft Q(λ) training with parallel on-policy rollouts (PQN-style), on accelerate (METHOD.md §3).

Read top to bottom: set-up, acting (rollout), targets (λ-returns), loss and update, the loop, evaluation. The
math lives in `qrag.training.learn.td`, the hops in `qrag.training.search.hops`, saving and resuming in
`qrag.training.learn.resume`; this file owns devices, the loop and logging.
Shape legend: E environments, T rollout steps, N chunks, D dim, B minibatch.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm

from qrag.training.data.episode import Episode
from qrag.training.learn import td
from qrag.training.learn.acting import ChunkCache, frozen_chunk_cache, score_step
from qrag.training.learn.batching import Minibatch, length_groups, take_rows
from qrag.training.learn.checkpoint_selection import (
    Selection,
    TaskSampler,
    calibrate_stop_rule,
    standard_error,
)
from qrag.training.learn.config import TrainConfig
from qrag.training.learn.distributed import any_process, max_over_processes, shard
from qrag.training.learn.env import RetrievalEnv
from qrag.training.learn.evaluation import validation_scores
from qrag.training.learn.resume import Resumable
from qrag.training.learn.run_loop import Milestones, RunBar, TimeBudget
from qrag.training.model.precision import accelerate_precision
from qrag.training.model.qnet import QNetwork
from qrag.training.model.trunk import StateParts, check_splittable, layers_of
from qrag.training.overlay import ConfigError
from qrag.training.search import hops
from qrag.training.search.chunk_vectors import ChunkVectorCache

BEST_EVAL_FILE = "eval.json"  # beside best/'s model: its validation result and when it was reached


def read_best_eval(output_dir: str | Path) -> dict[str, float] | None:
    """The validation result stored with `output_dir/best`, or None when there is none."""
    path = Path(output_dir) / "best" / BEST_EVAL_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None  # type: ignore[no-any-return]


def top_layer_names(qnet: QNetwork, top: int) -> set[str]:
    """The names (in `qnet.named_parameters()`) of the trainable parameters of the state tower's top `top` transformer
    layers (their weights, or their LoRA adapters): what `trainer.train_layers` trains.

    Raises:
        ConfigError: the state tower's encoder cannot be split (`qrag.training.model.trunk.check_splittable`).
    """
    check_splittable(qnet.state_tower.encoder, top, "trainer.train_layers")
    found = layers_of(qnet.state_tower.encoder)
    assert found is not None
    ids = {id(p) for layer in found[1][-top:] for p in layer.parameters() if p.requires_grad}
    return {n for n, p in qnet.named_parameters() if id(p) in ids}


class Trainer(Resumable):
    """Trains a `QNetwork` on episodes with soft Q(λ).

    Example:
        >>> trainer = Trainer(TrainConfig(), train_episodes, val_episodes)  # doctest: +SKIP
        >>> summary = trainer.train()  # writes runs/qrag/{last,best}/, tb/, metrics.jsonl
    """

    def __init__(
        self, config: TrainConfig, train_episodes: Sequence[Episode], val_episodes: Sequence[Episode] = (),
        qnet: QNetwork | None = None, chunk_cache: ChunkVectorCache | None = None,
    ) -> None:
        """Set up the networks, optimiser and environments.

        Args:
            config: The run.
            train_episodes / val_episodes: Training and validation episodes.
            qnet: A network to train (default: built from `config.model`).
            chunk_cache: With `model.train_towers='state'`, chunk vectors already computed (they are kept
                for the whole run either way; pass one to share it with other work).
        """
        self.clock: Callable[[], float] = time.perf_counter  # what the time budget reads (tests set their own)
        self.created = self.clock()  # a time budget counts from here: set-up is part of the run
        self.config = config.validate()
        tc = config.trainer
        if tc.threads:
            torch.set_num_threads(tc.threads)
        # accelerate keeps one precision per process; a second Trainer in the same process (a sweep, a test
        # suite) may ask for another, so forget the last one's settings (the process group is kept).
        AcceleratorState._reset_state(reset_partial_state=False)
        device = torch.device("cpu" if tc.cpu or not torch.cuda.is_available() else "cuda")
        self.mixed_precision, self.precision_reason = accelerate_precision(tc.mixed_precision, device)
        self.accelerator = Accelerator(
            cpu=tc.cpu, mixed_precision=self.mixed_precision, gradient_accumulation_steps=config.optim.grad_accum_steps
        )
        rank = self.accelerator.process_index
        torch.manual_seed(tc.seed + rank)
        self.output_dir = Path(tc.output_dir)
        self.val_episodes = list(val_episodes)

        if qnet is not None:
            online = qnet
        elif config.model.init is not None:  # a fine-tune: the trained network, its lineage recorded in its config
            online = QNetwork.from_pretrained(config.model.init)
            online.config = config.model
        else:
            online = QNetwork.from_config(config.model)
        online.hop_settings = dataclasses.replace(online.hop_settings, max_hops=config.env.max_hops)  # saved with it
        self.target = copy.deepcopy(online).eval().requires_grad_(False)
        self.top = tc.train_layers
        trained = top_layer_names(online, self.top) if self.top else None
        self.params = [p for n, p in online.named_parameters() if p.requires_grad and (trained is None or n in trained)]
        if self.top and self.accelerator.num_processes > 1:
            raise ConfigError(f"trainer.train_layers={self.top} trains in one process (the frozen trunk's parameters "
                              "get no gradient for the processes to average); run one process or set it to 0.")
        oc = config.optim
        # The fused kernel is the same AdamW update in one pass over the parameters instead of a loop over tensors.
        fused = oc.fused and self.accelerator.device.type in ("cpu", "cuda") and all(
            p.dtype == torch.float32 for p in self.params)
        self.optimizer = torch.optim.AdamW(
            self.params, lr=oc.lr, betas=oc.betas, eps=oc.eps, weight_decay=oc.weight_decay, fused=fused or None
        )
        self.transitions = 0
        # The decay follows the run's real budget; every process reads the same share (a clock is per process,
        # and ranks stepping with different learning rates would drift apart).
        self.lr_progress = 0.0
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: td.lr_factor(s, oc.warmup_steps, self.lr_progress, oc.schedule)
        )
        self.model, self.optimizer = self.accelerator.prepare(online, self.optimizer)
        # Across processes the online network now holds rank 0's weights (DDP broadcasts them): copy them into
        # the target towers too, so random initial weights (LoRA adapters) are the same on every rank.
        self.target.load_state_dict(self.online.state_dict())
        self.target.to(self.accelerator.device)

        self.sample_gen = torch.Generator().manual_seed(tc.seed * 7919 + rank)
        self.act_gen = torch.Generator().manual_seed(tc.seed * 104729 + rank + 1)
        self.shard = shard(len(train_episodes), rank, self.accelerator.num_processes)  # this process's episodes
        # (error-weighted task sampling draws from every episode, not the shard)
        self.task_sampler = (TaskSampler(train_episodes, self.sample_gen) if tc.task_weighting == "error" else None)
        self.env = RetrievalEnv(
            train_episodes, config.env, tc.num_envs, sampler=self._sample_episode, state_order=config.model.state_order
        )
        self.chunk_cache = frozen_chunk_cache(self.online, chunk_cache)
        self.online_cache = ChunkCache(self.online, tc.encode_batch_size, self.chunk_cache)
        self.target_cache = ChunkCache(self.target, tc.encode_batch_size, self.chunk_cache)
        self.transitions = 0
        self.updates = 0
        self.resumed_from: Path | None = None
        self.selection = Selection()
        self.recent: deque[tuple[float, float, bool]] = deque(maxlen=100)  # (return, fact recall, completed)

    def top_layer_names(self) -> set[str]:
        """The parameters `trainer.train_layers` trains, by name (every trainable one when it is 0)."""
        if self.top:
            return top_layer_names(self.online, self.top)
        return {n for n, p in self.online.named_parameters() if p.requires_grad}

    @property
    def online(self) -> QNetwork:
        return self.accelerator.unwrap_model(self.model)  # type: ignore[no-any-return]

    def _sample_episode(self) -> int:
        if self.task_sampler is not None:
            return self.task_sampler()
        return self.shard[int(torch.randint(len(self.shard), (1,), generator=self.sample_gen))]

    @property
    def progress(self) -> float:
        """Share of the run's real budget spent: the larger of transitions / total_transitions and, with a
        time budget, this run's minutes / max_minutes (schedules follow the limit that binds)."""
        tc = self.config.trainer
        p = self.transitions / tc.total_transitions
        if tc.max_minutes:
            p = max(p, (self.clock() - self.created) / (60 * tc.max_minutes))
        return min(1.0, p)

    @property
    def alpha(self) -> float:
        rl = self.config.rl
        return td.linear_decay(rl.alpha, rl.alpha_final, self.progress)

    def acting(self) -> tuple[float, float]:
        """(temperature, ε) of the acting policy now: they decay over `explore_fraction` of the budget."""
        rl = self.config.rl
        p = min(1.0, self.progress / rl.explore_fraction)
        start = rl.act_temperature if rl.act_temperature is not None else self.alpha
        temperature = td.linear_decay(start, rl.act_temperature_final, p)
        return temperature, rl.act_epsilon * (1.0 - p)

    # ------------------------------------------------------------------ rollout
    @torch.no_grad()
    def collect_rollout(self) -> dict[str, Any]:
        """T steps in E environments with Boltzmann acting; returns the segment and its λ-returns."""
        tc, rl = self.config.trainer, self.config.rl
        self.online_cache.clear()  # the networks changed since the last rollout: refresh chunk vectors
        self.target_cache.clear()
        questions, rendered, chunks, positions = [], [], [], []
        parts: list[StateParts] = []  # with train_layers: each transition's state, as the update's forward starts it
        rewards, dones, values = [], [], []
        # For the margin loss: each transition's episode and what it had selected, and the episodes' chunk vectors.
        episodes: list[int] = []
        selected: list[list[int]] = []
        episode_vectors: dict[int, torch.Tensor] = {}
        for _ in range(tc.rollout_steps):
            with self.accelerator.autocast():
                obs = score_step(self.env, self.online, self.online_cache, self.target, self.target_cache,
                                 rl.top_k, self.alpha, rl.value_target, self.top)
            if self.transitions < rl.learning_starts:
                actions = td.uniform_actions(obs.available, self.act_gen)  # (E,)
            else:
                temperature, epsilon = self.acting()
                actions = td.explore_actions(obs.q_online, obs.available, rl.top_k, temperature, epsilon, self.act_gen)
            if obs.parts is not None:
                parts.extend(obs.parts)
            for row, e in enumerate(obs.slots):
                slot = self.env.slot(e)
                questions.append(obs.questions[row])
                rendered.append(obs.rendered[row])
                chunks.append(slot.episode.chunks[int(actions[row])])
                if rl.margin_weight > 0:
                    episodes.append(slot.episode_index)
                    selected.append(list(slot.selected))
                    episode_vectors[slot.episode_index] = self.online_cache.slot_vectors(e)
            pos = obs.positions.gather(1, actions.unsqueeze(1)).squeeze(1) if obs.positions is not None else None
            positions.append(pos if pos is not None else torch.zeros(len(obs.slots)))
            values.append(obs.value.float().cpu())
            result = self.env.step(actions.tolist())
            rewards.append(result.rewards)
            dones.append(result.dones.float())
            self.recent.extend((s.episode_return, s.fact_recall, s.completed) for s in result.finished)
            self.transitions += len(obs.slots) * self.accelerator.num_processes
        with self.accelerator.autocast():
            last = score_step(self.env, self.online, self.online_cache, self.target, self.target_cache,
                              rl.top_k, self.alpha, rl.value_target, self.top)
        v = torch.stack(values)  # (T, E)
        next_values = torch.cat([v[1:], last.value.float().cpu().unsqueeze(0)])  # (T, E) V(s_{t+1})
        returns = td.lambda_returns(torch.stack(rewards), torch.stack(dones), next_values, rl.gamma, rl.lam)
        # Flatten time-major (t, e) → rows, matching the order the lists were filled.
        return {
            "questions": questions, "rendered": rendered, "chunks": chunks, "parts": parts,
            "positions": torch.stack(positions).reshape(-1).float(),  # (T·E,)
            "returns": returns.reshape(-1),  # (T·E,)
            "episodes": episodes, "selected": selected, "episode_vectors": episode_vectors,
        }

    # ------------------------------------------------------------------ update
    def update(self, batch: dict[str, Any]) -> dict[str, float]:
        """`update_epochs` shuffled passes of minibatch TD regression on the rollout (METHOD.md §3.5), one
        optimiser step per minibatch (every `grad_accum_steps` with accumulation), Polyak after each step."""
        self.lr_progress = max_over_processes(self.accelerator, self.progress)
        self.model.train()
        margin_weight = self.config.rl.margin_weight
        td_losses, q_means, margin_losses = [], [], []
        for idx in self._minibatches(len(batch["questions"])):
            mb = self._minibatch_inputs(batch, idx)
            td_sum = q_sum = margin_sum = 0.0
            with self._optimizer_step():
                for g, rows in enumerate(mb.groups):
                    with self._sync_gradients(last=g == len(mb.groups) - 1):
                        td_loss, margin_loss, q = self._group_loss(mb, rows)
                        self.accelerator.backward(td_loss if margin_loss is None else td_loss + margin_weight * margin_loss)
                    td_sum += float(td_loss.detach())
                    q_sum += float(q.sum())
                    margin_sum += 0.0 if margin_loss is None else float(margin_loss.detach())
            if self.accelerator.sync_gradients:
                self.scheduler.step()
                td.polyak_update(self.target, self.online, self.config.rl.tau)
                self.updates += 1
            td_losses.append(td_sum)
            q_means.append(q_sum / len(mb.rows))
            margin_losses.append(margin_sum)
        stats = {"losses/td_loss": sum(td_losses) / len(td_losses), "losses/q_values": sum(q_means) / len(q_means)}
        if margin_weight > 0:
            stats["losses/margin_loss"] = sum(margin_losses) / len(margin_losses)
        return stats

    def _minibatches(self, n: int) -> Iterator[list[int]]:
        """`update_epochs` shuffled passes over the rollout's `n` transitions, `minibatch_size` rows at a time."""
        tc = self.config.trainer
        for _ in range(tc.update_epochs):
            order = torch.randperm(n, generator=self.act_gen)
            for start in range(0, n, tc.minibatch_size):
                yield order[start : start + tc.minibatch_size].tolist()

    def _minibatch_inputs(self, batch: dict[str, Any], idx: list[int]) -> Minibatch:
        """Rollout rows `idx` as the update's inputs on the device: tokenised states, the taken chunks (tokenised, or
        their cached vectors with a frozen chunk tower), positions, λ-returns, length groups, the margin's inputs."""
        tc, online, dev = self.config.trainer, self.online, self.accelerator.device
        size = len(idx)
        idx = self.rows_with_gradient(batch, idx)
        states: dict[str, torch.Tensor] | list[StateParts]
        if self.top:  # the trunk's output from acting: only the top layers run
            states = [batch["parts"][i] for i in idx]
            lengths = [p.hidden.shape[1] for p in states]
        else:
            states = {k: v.to(dev) for k, v in online.tokenize_states(
                [batch["questions"][i] for i in idx], [batch["rendered"][i] for i in idx]).items()}
            lengths = states["attention_mask"].sum(dim=1).tolist()
        taken = [batch["chunks"][i] for i in idx]
        chunks: dict[str, torch.Tensor] | torch.Tensor
        if self.chunk_cache is not None:  # frozen chunk tower: its vectors, not its gradient
            chunks = self.chunk_cache.vectors(online, taken, batch_size=tc.encode_batch_size)  # (B, D)
        else:
            chunks = {k: v.to(dev) for k, v in online.tokenize_chunks(taken).items()}
        return Minibatch(
            size=size, rows=idx, states=states, chunks=chunks,
            positions=batch["positions"][idx].to(dev) if online.config.position_mode != "none" else None,
            targets=batch["returns"][idx].to(dev),
            groups=length_groups(lengths, tc.length_groups),
            margin=self.margin_inputs(batch, idx) if self.config.rl.margin_weight > 0 else None,
        )

    def rows_with_gradient(self, batch: dict[str, Any], idx: list[int]) -> list[int]:
        """The minibatch rows whose loss can move the network. With `state_anchor` 'first_hop' or 'passages' a bare
        question's state vector is the frozen base's, so its TD and margin terms have no gradient: those rows are left out
        of the update's forward and backward passes (the same gradient, less work; the logged losses then cover
        the rows kept). One row is always kept, so every process runs the same passes."""
        if not self.online.config.fixed_first_hop:
            return idx
        kept = [i for i in idx if batch["rendered"][i]]
        return kept or idx[:1]

    def margin_inputs(self, batch: dict[str, Any], idx: list[int]) -> tuple[hops.Corpora, list[list[int]], torch.Tensor]:
        """For minibatch rows `idx`: their episodes as the hop engine's corpora, what each state had taken, and
        the (B, N) mask of its supporting chunks."""
        eps = [self.env.episodes[batch["episodes"][i]] for i in idx]
        corpora = hops.Corpora.padded([batch["episode_vectors"][batch["episodes"][i]] for i in idx],
                                      [ep.chunks for ep in eps], self.accelerator.device)
        gold = torch.zeros(len(idx), corpora.num_slots, dtype=torch.bool)  # (B, N)
        for row, ep in enumerate(eps):
            gold[row, list(ep.supporting)] = True
        return corpora, [batch["selected"][i] for i in idx], gold.to(self.accelerator.device)

    def _group_loss(self, mb: Minibatch, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Forward pass of the minibatch rows `rows` (one length group): their TD loss and, with `margin_weight`,
        their margin loss, each weighted by the group's share of the minibatch (so the groups' sum is the
        minibatch's mean), and their (G,) Q-values, detached."""
        rl = self.config.rl
        r = torch.as_tensor(rows, dtype=torch.long, device=self.accelerator.device)  # (G,)
        chunks = mb.chunks[r] if isinstance(mb.chunks, torch.Tensor) else take_rows(mb.chunks, rows)
        states = (StateParts.cat([mb.states[i] for i in rows], self.accelerator.device) if isinstance(mb.states, list)
                  else take_rows(mb.states, rows))
        q1, q2, s = self.model(states, chunks, None if mb.positions is None else mb.positions[r],
                               return_states=True)  # (G,), (G,), (G, D)
        share = len(rows) / mb.size  # rows left out by `rows_with_gradient` count 0 in the minibatch's mean
        td_loss = td.td_loss(q1, q2, mb.targets[r]) * share
        margin_loss = None
        if mb.margin is not None:  # every chunk of the state scored by the hop engine, with these state vectors
            corpora, taken, gold = mb.margin
            q_all, _ = hops.q_values(self.online, s, corpora, rows, [taken[i] for i in rows])  # (G, N)
            available = torch.isfinite(q_all)  # (G, N)
            margin_loss = td.margin_loss(q_all.masked_fill(~available, 0.0), available, gold[r] & available,
                                         rl.margin, rl.margin_over) * share
        return td_loss, margin_loss, (q1 + q2).detach()

    @contextlib.contextmanager
    def _optimizer_step(self) -> Iterator[None]:
        """Around one minibatch's backward passes: gradient accumulation and autocast; then, once the body is
        done, clip (when gradients are synchronised), step and zero the gradients."""
        with self.accelerator.accumulate(self.model), self.accelerator.autocast():
            yield
            if self.accelerator.sync_gradients:
                self.accelerator.clip_grad_norm_(self.params, self.config.optim.max_grad_norm)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)

    def _sync_gradients(self, last: bool) -> contextlib.AbstractContextManager[Any]:
        """Multi-process: gradients are averaged across processes once per minibatch, after its last group."""
        return contextlib.nullcontext() if last else self.accelerator.no_sync(self.model)

    # ------------------------------------------------------------------ loop
    def train(self) -> dict[str, Any]:
        """Run until `total_transitions` (or the time budget); resumes from `output_dir/last` when `trainer.resume`
        is set."""
        tc = self.config.trainer
        self._prepare_output_dir()
        main = self.accelerator.is_main_process
        self._announce(main)
        writer = SummaryWriter(str(self.output_dir / "tb")) if main else None
        bar = RunBar(tc, self.transitions, shown=tc.progress and main)
        due = Milestones(self.transitions, log=tc.log_every, eval=tc.eval_every, save=tc.save_every).due
        budget = TimeBudget(self.clock, self.created, tc.max_minutes)
        started, start_transitions = self.clock(), self.transitions
        last_eval: dict[str, float] = {}
        if self.transitions == 0 and tc.eval_every and self.val_episodes:
            # The starting point competes for best/ too: a run whose training never beats it on validation
            # keeps the network it started from (for an anchored model, the base encoder's own search).
            with budget.timing("eval"):
                last_eval = self._evaluate_and_keep_best(writer)
        while self.transitions < tc.total_transitions:
            before = self.transitions
            with budget.timing("step"):
                stats = self.update(self.collect_rollout())
            bar.advance(before, self.transitions, self.clock() - self.created, stats["losses/td_loss"])
            if due("log", self.transitions):
                sps = (self.transitions - start_transitions) / max(1e-9, self.clock() - started)
                self._log_progress(stats, writer, bar, sps)
            # Each process measures its own clock: any process out of time stops them all, in step.
            out_of_time = budget.limited and any_process(self.accelerator, budget.short())
            finished = self.transitions >= tc.total_transitions or out_of_time
            if due("eval", self.transitions) or (finished and self.val_episodes):
                with budget.timing("eval"):
                    last_eval = self._evaluate_and_keep_best(writer)
                if last_eval:
                    bar.show(val_em=f"{last_eval['fact_em']:.3f}")
            if due("save", self.transitions) or finished:
                with budget.timing("save"):
                    self.save_checkpoint()
            if out_of_time:
                break
        bar.close()
        if writer is not None:
            writer.close()
        return {"transitions": self.transitions, "updates": self.updates, "eval": last_eval,
                "best_metric": self.selection.kept, "seconds": self.clock() - started,
                "resumed_from": str(self.resumed_from) if self.resumed_from is not None else None}

    def _announce(self, main: bool) -> None:
        """Say where the run resumed from and which arithmetic it trains in."""
        tc = self.config.trainer
        if self.resumed_from is not None and main:
            tqdm.write(f"resumed from {self.resumed_from} at {self.transitions} transitions, {self.updates} updates",
                       file=sys.stderr)
        if main and tc.progress:
            arithmetic = "fp32" if self.mixed_precision == "no" else f"{self.mixed_precision} autocast"
            tqdm.write(f"training arithmetic: {arithmetic} (mixed_precision {tc.mixed_precision!r}: "
                       f"{self.precision_reason})", file=sys.stderr)

    def _log_progress(self, stats: dict[str, float], writer: SummaryWriter | None, bar: RunBar, sps: float) -> None:
        """Log the update's statistics with the episodes', the schedules' and the speed, and show them on the bar."""
        stats.update(self._episode_stats())
        temperature, epsilon = self.acting()  # one reading of the time-keyed schedule for both figures
        stats.update({"charts/SPS": sps, "charts/lr": float(self.scheduler.get_last_lr()[0]),
                      "charts/alpha": self.alpha, "charts/act_temperature": temperature,
                      "charts/act_epsilon": epsilon, "charts/updates": self.updates})
        self._log(stats, writer)
        bar.show(tr=str(self.transitions), ret=f"{stats.get('charts/episodic_return', 0):.3f}",
                 recall=f"{stats.get('charts/fact_recall', 0):.2f}", loss=f"{stats['losses/td_loss']:.4f}", sps=f"{sps:.1f}")

    def _episode_stats(self) -> dict[str, float]:
        if not self.recent:
            return {}
        n = len(self.recent)
        returns, recalls, completed = zip(*self.recent, strict=True)
        return {"charts/episodic_return": sum(returns) / n, "charts/fact_recall": sum(recalls) / n,
                "charts/success": sum(completed) / n}

    def _log(self, stats: dict[str, float], writer: SummaryWriter | None) -> None:
        if writer is None:
            return
        for key, value in stats.items():
            writer.add_scalar(key, value, self.transitions)
        with (self.output_dir / "metrics.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps({"transitions": self.transitions, **stats}) + "\n")

    def _evaluate_and_keep_best(self, writer: SummaryWriter | None) -> dict[str, float]:
        if not self.val_episodes or not self.accelerator.is_main_process:
            return {}
        tc = self.config.trainer
        with self.accelerator.autocast():
            result = validation_scores(self.online, self.val_episodes, self.config.env, tc.num_envs * 4,
                                       tc.encode_batch_size, self.chunk_cache)
        if self.task_sampler is not None:
            self.task_sampler.set_errors({k[len("sf_em/"):]: 1.0 - v for k, v in result.items() if k.startswith("sf_em/")})
            result.update({f"task_p/{t}": p for t, p in self.task_sampler.probabilities().items()})
        result["select/tolerance"] = (standard_error(result, tc.select_on, self.val_episodes)
                                      if tc.select_tolerance is None else tc.select_tolerance)
        self._log({f"eval/{k}": v for k, v in result.items()}, writer)
        trained = self.transitions > 0
        if self.selection.offer(result[tc.select_on], tolerance=result["select/tolerance"], trained=trained):
            if tc.calibrate_stop:  # inside the evaluation's time, which the time budget accounts for
                with self.accelerator.autocast():
                    result.update(calibrate_stop_rule(self.online, self.val_episodes, self.chunk_cache))
            report = json.dumps({"transitions": self.transitions, **result}, indent=1)
            self.online.save_pretrained(self.output_dir / "best", extra_files={BEST_EVAL_FILE: report})
        return result
