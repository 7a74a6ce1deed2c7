"""The retrieval MDP (METHOD.md §1), batched over parallel episodes.

State = the question plus the chunks selected so far (and the availability mask); action = one
not-yet-selected chunk index; the transition appends and masks it. The reward is sparse: paid once, at
the first step where every supporting chunk is selected. `terminated` marks completion (unless
`never_terminate`), `truncated` the horizon or an exhausted document; the TD target treats both as ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from qrag.training.data.episode import Episode
from qrag.training.learn.config import EnvConfig
from qrag.training.model.config import StateOrder
from qrag.training.search.hops import state_pieces


def completion_reward(num_supporting: int, num_selected: int, penalize_extra_steps: bool) -> float:
    """`0.5 + 0.5·|SF|/|selected|` with `penalize_extra_steps`, else 1 (paid at completion only)."""
    if not penalize_extra_steps:
        return 1.0
    return 0.5 + 0.5 * num_supporting / num_selected


@dataclass
class EpisodeState:
    """One environment slot: its episode and what has been selected (in selection order)."""

    episode: Episode
    episode_index: int
    selected: list[int] = field(default_factory=list)
    completed: bool = False
    episode_return: float = 0.0

    @property
    def steps(self) -> int:
        return len(self.selected)

    def rendered(self, order: StateOrder) -> list[str]:
        """The selected chunks' texts in the order the state text shows them (`hops.state_pieces`)."""
        return state_pieces([self.episode.chunks[i] for i in self.selected], self.selected, order)

    @property
    def fact_recall(self) -> float:
        sf = set(self.episode.supporting)
        return len(sf & set(self.selected)) / len(sf) if sf else 1.0


@dataclass
class StepResult:
    """What one batched step returns; finished episodes are reported before their slots reset."""

    rewards: torch.Tensor  # (E,)
    terminated: torch.Tensor  # (E,) bool
    truncated: torch.Tensor  # (E,) bool
    finished: list[EpisodeState]  # the episodes that ended at this step, in slot order

    @property
    def dones(self) -> torch.Tensor:
        return self.terminated | self.truncated  # (E,)


class RetrievalEnv:
    """E parallel retrieval episodes.

    Args:
        episodes: the pool to draw from (each needs at least one supporting chunk).
        config: horizon and reward options.
        num_envs: parallel slots E.
        sampler: returns the index of the next episode to play. Without a sampler, slots play
            `episodes` in order, once each (an evaluation pass), and empty when the list is used up.
        auto_reset: refill a finished slot at once; off: every slot plays one episode only.
        state_order: how states render the selected chunks.

    Example:
        >>> ep = Episode("q?", ["a", "b", "c"], (0, 2))
        >>> env = RetrievalEnv([ep], EnvConfig(max_hops=3), num_envs=1, auto_reset=False)
        >>> env.step([0]).rewards.tolist(), env.step([2]).rewards.tolist()
        ([0.0], [1.0])
    """

    def __init__(
        self,
        episodes: Sequence[Episode],
        config: EnvConfig,
        num_envs: int,
        sampler: Callable[[], int] | None = None,
        auto_reset: bool = True,
        state_order: StateOrder = "selection",
    ) -> None:
        if not episodes:
            raise ValueError("the environment needs at least one episode.")
        for ep in episodes:
            if not ep.supporting:
                raise ValueError(f"episode {ep.id!r} has no supporting chunks; training needs at least one.")
        self.episodes = episodes
        self.config = config
        self.num_envs = num_envs
        self.sampler = sampler
        self.auto_reset = auto_reset
        self.state_order = state_order
        self._next_in_order = 0
        self.slots: list[EpisodeState | None] = [self._new_slot() for _ in range(num_envs)]

    def _new_slot(self) -> EpisodeState | None:
        if self.sampler is not None:
            i = self.sampler()
        elif self._next_in_order < len(self.episodes):
            i = self._next_in_order
            self._next_in_order += 1
        else:
            return None
        return EpisodeState(self.episodes[i], i)

    # ------------------------------------------------------------------ observation
    @property
    def active(self) -> list[int]:
        """Slots that hold an episode (all of them while auto-resetting)."""
        return [e for e, s in enumerate(self.slots) if s is not None]

    def slot(self, e: int) -> EpisodeState:
        s = self.slots[e]
        if s is None:
            raise IndexError(f"environment slot {e} has no episode (the evaluation pass is over for it).")
        return s

    def masks(self, slots: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(selected, valid) bool masks, each (E', N_max) for the given slots (default: active)."""
        slots = self.active if slots is None else slots
        n = max(self.slot(e).episode.num_chunks for e in slots)
        selected = torch.zeros(len(slots), n, dtype=torch.bool)  # (E', N)
        valid = torch.zeros(len(slots), n, dtype=torch.bool)  # (E', N)
        for row, e in enumerate(slots):
            s = self.slot(e)
            valid[row, : s.episode.num_chunks] = True
            if s.selected:
                selected[row, s.selected] = True
        return selected, valid

    def state_texts(self, slots: Sequence[int] | None = None) -> tuple[list[str], list[list[str]]]:
        """Questions and rendered selected chunks of the given slots (default: active)."""
        slots = self.active if slots is None else slots
        return [self.slot(e).episode.question for e in slots], [self.slot(e).rendered(self.state_order) for e in slots]

    # ------------------------------------------------------------------ dynamics
    def step(self, actions: Sequence[int]) -> StepResult:
        """Apply one action per active slot (in `active` order) and reset finished slots if auto-resetting."""
        slots = self.active
        if len(actions) != len(slots):
            raise ValueError(f"expected {len(slots)} actions (one per active slot), got {len(actions)}.")
        rewards = torch.zeros(len(slots))
        terminated = torch.zeros(len(slots), dtype=torch.bool)
        truncated = torch.zeros(len(slots), dtype=torch.bool)
        finished: list[EpisodeState] = []
        for row, (e, a) in enumerate(zip(slots, actions, strict=True)):
            s = self.slot(e)
            a = int(a)
            if not 0 <= a < s.episode.num_chunks or a in s.selected:
                raise ValueError(f"action {a} is not an available chunk of episode {s.episode.id!r} in slot {e}.")
            s.selected.append(a)
            if not s.completed and set(s.episode.supporting) <= set(s.selected):
                s.completed = True
                rewards[row] = completion_reward(
                    len(s.episode.supporting), len(s.selected), self.config.penalize_extra_steps
                )
                s.episode_return += float(rewards[row])
                terminated[row] = not self.config.never_terminate
            if not terminated[row] and (s.steps >= self.config.max_hops or s.steps >= s.episode.num_chunks):
                truncated[row] = True
            if terminated[row] or truncated[row]:
                finished.append(s)
                self.slots[e] = self._new_slot() if self.auto_reset else None
        return StepResult(rewards, terminated, truncated, finished)

    # ------------------------------------------------------------------ resume
    def state_dict(self) -> dict[str, object]:
        """JSON-serialisable slot contents (episode indices and selections) for checkpoints."""
        return {
            "next_in_order": self._next_in_order,
            "slots": [
                None
                if s is None
                else {"episode_index": s.episode_index, "selected": list(s.selected), "completed": s.completed,
                      "episode_return": s.episode_return}
                for s in self.slots
            ],
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        slots = state["slots"]
        assert isinstance(slots, list)
        if len(slots) != self.num_envs:
            raise ValueError(f"checkpoint has {len(slots)} environment slots, this run has {self.num_envs}.")
        self._next_in_order = int(state["next_in_order"])  # type: ignore[call-overload]
        self.slots = [
            None
            if s is None
            else EpisodeState(self.episodes[s["episode_index"]], s["episode_index"], list(s["selected"]),
                              bool(s["completed"]), float(s["episode_return"]))
            for s in slots
        ]
