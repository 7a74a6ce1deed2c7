"""The training configuration (`TrainConfig`): one dataclass per concern, read from presets, YAML files and flags.

`qrag-train --preset babilong --config my.yaml --rl.lam 0.6` layers them in that order. Every field has
one docstring line; derived values are properties. Unknown keys are errors, never silently ignored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from qrag.training.data.build import rehearsed_source
from qrag.training.data.config import DataConfig as DataConfig
from qrag.training.input_checks import one_line
from qrag.training.model.config import ModelConfig as ModelConfig
from qrag.training.model.shipped import resolve_checkpoint, shipped_names
from qrag.training.overlay import ConfigError, check_choice, overlay

ValueTarget = Literal["mean", "min"]
Schedule = Literal["constant", "linear", "cosine"]
MixedPrecision = Literal["no", "bf16", "fp16", "auto"]
SelectOn = Literal["sf_em", "return", "fact_recall"]
TaskWeighting = Literal["uniform", "error"]
MarginOver = Literal["best", "all"]

PRESET_DIR = Path(__file__).parent / "presets"


@dataclass
class EnvConfig:
    """The retrieval MDP (METHOD.md §1)."""

    max_hops: int = 6
    """Episode horizon, the most hops per question; saved with the model as its search horizon."""
    penalize_extra_steps: bool = True
    """Completion reward 0.5 + 0.5·|SF|/|selected| instead of 1."""
    never_terminate: bool = False
    """Keep the episode going after completion (reward 0 afterwards) until max_hops."""

    def validate(self) -> None:
        if self.max_hops < 1:
            raise ConfigError(f"env.max_hops must be >= 1, got {self.max_hops}.")


@dataclass
class RLConfig:
    """Soft Q(λ) (METHOD.md §3)."""

    gamma: float = 0.99
    """Discount γ."""
    lam: float = 0.65
    """λ of the λ-return (0: one-step TD, 1: Monte Carlo)."""
    alpha: float = 0.01
    """Boltzmann temperature α for acting and the soft value."""
    alpha_final: float | None = None
    """If set, α decays linearly to this value over training (its own schedule, not the lr's)."""
    top_k: int = 5
    """Acting and the soft value use the top-k available chunks."""
    tau: float = 0.1
    """Polyak rate τ of the target towers."""
    value_target: ValueTarget = "mean"
    """Soft value on the two-head mean ('mean') or the smaller head ('min')."""
    learning_starts: int = 0
    """The first transitions act uniformly at random over the available chunks (a warm-up)."""
    act_temperature: float | None = None
    """Acting temperature over the top-k, kept apart from the soft value's α (None: act at α)."""
    act_temperature_final: float | None = None
    """If set, the acting temperature moves linearly to this over `explore_fraction` of the run's budget."""
    act_epsilon: float = 0.0
    """Probability of a uniform pick among the top-k instead of the Boltzmann one (decays like the temperature)."""
    margin_weight: float = 0.0
    """Weight of the large-margin loss on the supporting facts (DQfD's supervised loss, the gold facts as the
    demonstrator) beside the TD loss, at every visited state; 0: TD alone (METHOD.md)."""
    margin: float = 0.1
    """The margin m, in Q units: the best remaining gold chunk must score this much above every other chunk."""
    margin_over: MarginOver = "best"
    """Which other chunks the margin loss charges: the 'best' one (DQfD) or 'all' inside the margin (summed)."""
    explore_fraction: float = 1.0
    """Share of the run's budget (the larger of transitions / total_transitions and time / max_minutes) over
    which the acting temperature and ε decay; α's own schedule follows the same budget."""

    def validate(self) -> None:
        check_choice("rl.value_target", self.value_target, ValueTarget)
        check_choice("rl.margin_over", self.margin_over, MarginOver)
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"rl.gamma must be in [0, 1], got {self.gamma}.")
        if not 0.0 <= self.lam <= 1.0:
            raise ConfigError(f"rl.lam must be in [0, 1], got {self.lam}.")
        if self.alpha <= 0 or (self.alpha_final is not None and self.alpha_final <= 0):
            raise ConfigError(f"rl.alpha and rl.alpha_final must be > 0, got {self.alpha}, {self.alpha_final}.")
        if self.top_k < 1:
            raise ConfigError(f"rl.top_k must be >= 1, got {self.top_k}.")
        for name in ("act_temperature", "act_temperature_final"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ConfigError(f"rl.{name} must be > 0 (or null: act at α), got {getattr(self, name)}.")
        if not 0.0 <= self.act_epsilon <= 1.0:
            raise ConfigError(f"rl.act_epsilon must be in [0, 1], got {self.act_epsilon}.")
        if not 0.0 < self.explore_fraction <= 1.0:
            raise ConfigError(f"rl.explore_fraction must be in (0, 1], got {self.explore_fraction}.")
        if self.margin_weight < 0 or self.margin < 0:
            raise ConfigError(f"rl.margin_weight and rl.margin must be >= 0, got {self.margin_weight}, {self.margin}.")
        if self.learning_starts < 0:
            raise ConfigError(f"rl.learning_starts must be >= 0, got {self.learning_starts}.")
        if not 0.0 < self.tau <= 1.0:
            raise ConfigError(f"rl.tau must be in (0, 1], got {self.tau}.")


@dataclass
class OptimConfig:
    """AdamW and its learning-rate schedule (METHOD.md §3.5)."""

    lr: float = 5e-5
    """Peak learning rate."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.98)
    """AdamW β1, β2."""
    eps: float = 1e-6
    """AdamW ε."""
    warmup_steps: int = 50
    """Optimiser steps of linear warm-up."""
    schedule: Schedule = "linear"
    """Decay after warm-up: 'constant', 'linear' or 'cosine' (clamped at 0)."""
    max_grad_norm: float = 2.0
    """Gradient-norm clip."""
    grad_accum_steps: int = 1
    """Minibatches accumulated per optimiser step."""
    fused: bool = True
    """Use torch's fused AdamW kernel on CPU and CUDA (the same update in one pass; False: the per-tensor loop)."""

    def validate(self) -> None:
        check_choice("optim.schedule", self.schedule, Schedule)
        if self.lr <= 0:
            raise ConfigError(f"optim.lr must be > 0, got {self.lr}.")
        if self.grad_accum_steps < 1 or self.warmup_steps < 0:
            raise ConfigError("optim.grad_accum_steps must be >= 1 and optim.warmup_steps >= 0.")


@dataclass
class TrainerConfig:
    """The loop: rollouts, updates, evaluation, checkpoints, logging."""

    output_dir: str = "runs/qrag"
    """Run folder: checkpoints (last/, best/), TensorBoard logs, metrics.jsonl."""
    total_transitions: int = 20000
    """Stop after this many environment transitions."""
    num_envs: int = 4
    """Parallel environments (episodes) per process."""
    rollout_steps: int = 16
    """Steps per environment per rollout; one rollout = num_envs × rollout_steps transitions."""
    update_epochs: int = 1
    """Passes over each rollout."""
    minibatch_size: int = 64
    """Transitions per minibatch."""
    eval_every: int = 2000
    """Greedy evaluation on the validation split every this many transitions and once before training, so the
    starting network competes for best/ (0: only at the end)."""
    save_every: int = 2000
    """Checkpoint (last/) every this many transitions."""
    log_every: int = 200
    """Log training metrics every this many transitions."""
    seed: int = 0
    """Seed of acting, sampling and initialisation."""
    mixed_precision: MixedPrecision = "no"
    """accelerate mixed precision: 'no', 'bf16', 'fp16', or 'auto' (bf16 where the device has native bf16, 'no'
    otherwise; 'bf16' on a CPU without native bf16 warns and runs 'no': `qrag.training.model.precision`)."""
    cpu: bool = False
    """Force the CPU even when a GPU is present."""
    threads: int | None = None
    """torch CPU threads (None: leave torch's default)."""
    length_groups: int = 1
    """Encode each update minibatch in at most this many groups of similar state length, each padded only to
    its own longest state: the same loss and gradient with fewer padded tokens (1: one padded batch)."""
    encode_batch_size: int = 128
    """Batch size of no-grad chunk and state encoding."""
    train_layers: int = 0
    """Update only the top this many transformer layers of the state tower (0: every trained parameter). The layers
    below them and the state anchor's frozen term are then computed once per state, in acting, and the online
    towers, the target towers and the update run only the top layers on them (`qrag.training.model.trunk`): the
    same TD learning for far less arithmetic. Needs `model.train_towers` 'state', `model.train_mode` 'full' (the
    top layers' weights train) or 'lora' (their adapters train), `model.state_anchor` 'question' or 'none', a
    BERT-like encoder and one process. The saved model has the form its train mode gives (a whole state tower, or
    every adapter); what lies below the top layers is saved as it started."""
    max_minutes: float | None = None
    """Wall-clock budget: stop (checkpoint, final evaluation) once it is spent; None: no limit."""
    resume: bool = False
    """Continue from output_dir/last if it exists."""
    progress: bool = True
    """Show a console progress bar."""
    select_on: SelectOn = "sf_em"
    """best/ is chosen on 'sf_em' (per-task fact EM at exactly |SF| greedy hops, averaged over tasks), on the mean
    'return' with max_hops hops, or on 'fact_recall' (the share of each question's supporting chunks its max_hops
    hops find: questions with more supporting chunks than hops, as fan-out questions have)."""
    select_tolerance: float | None = None
    """best/ keeps the latest network whose score is within this much of the highest trained score so far (and
    above the starting network's); None: one standard error of that score on the validation episodes; 0: the
    highest only (ties to the later)."""
    calibrate_stop: bool = True
    """Calibrate the stop threshold on the validation episodes whenever best/ is saved, and save it with it."""
    task_weighting: TaskWeighting = "uniform"
    """Episode sampling: 'uniform', or 'error' (a task drawn in proportion to its validation error at
    |SF| hops, floor 0.05, then one of its episodes); the same as uniform for single-task data."""

    def validate(self) -> None:
        check_choice("trainer.mixed_precision", self.mixed_precision, MixedPrecision)
        check_choice("trainer.select_on", self.select_on, SelectOn)
        check_choice("trainer.task_weighting", self.task_weighting, TaskWeighting)
        for name in ("total_transitions", "num_envs", "rollout_steps", "update_epochs", "minibatch_size", "length_groups"):
            if getattr(self, name) < 1:
                raise ConfigError(f"trainer.{name} must be >= 1, got {getattr(self, name)}.")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise ConfigError(f"trainer.max_minutes must be > 0, got {self.max_minutes}.")
        if self.train_layers < 0:
            raise ConfigError(f"trainer.train_layers must be >= 0 (0: every layer trains), got {self.train_layers}.")
        if self.select_tolerance is not None and not self.select_tolerance >= 0:
            raise ConfigError(f"trainer.select_tolerance must be >= 0 (or None: one standard error), "
                              f"got {self.select_tolerance}.")


@dataclass
class TrainConfig:
    """Everything `qrag-train` needs."""

    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    data: DataConfig = field(default_factory=DataConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

    def validate(self) -> TrainConfig:
        for part in (self.model, self.env, self.rl, self.optim, self.data, self.trainer):
            part.validate()
        m = self.model
        if self.trainer.train_layers and not takes_train_layers(m):
            raise ConfigError(f"trainer.train_layers={self.trainer.train_layers} trains the top layers of a state tower "
                              "on its frozen trunk: it needs model.train_towers 'state', model.train_mode 'full' or "
                              "'lora' and "
                              f"model.state_anchor 'question' or 'none' (got {m.train_towers!r}, {m.train_mode!r}, "
                              f"{m.state_anchor!r}); set trainer.train_layers=0 for this model.")
        if self.data.rehearse is not None:
            rehearsed_source(self.data)  # the rehearsed source exists and can be mixed in
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, base: TrainConfig | None = None, where: str = "config") -> TrainConfig:
        """Overlay a nested dict on `base` (default: the defaults). Unknown keys raise `ConfigError`."""
        return overlay(base if base is not None else cls(), data, where, RENAMED_KEYS)

    def to_yaml(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(_plain(self.to_dict()), sort_keys=False), encoding="utf-8")


def takes_train_layers(model: ModelConfig) -> bool:
    """Whether a network of this model section can train its top layers on a frozen trunk (`trainer.train_layers`):
    a trained state tower alone, in 'full' or 'lora' mode, anchored at the question or not at all."""
    return (model.train_towers == "state" and model.train_mode in ("full", "lora")
            and model.state_anchor in ("question", "none"))


def init_model(init: str) -> tuple[ModelConfig, int]:
    """The model section (recording `init`) and the horizon of the checkpoint `--init` names.

    Raises:
        ConfigError: `init` is not a trained qrag checkpoint, or its files are damaged.
    """
    from qrag.training.model.folder import (
        CONFIG_FILE,
        CheckpointError,
        read_checkpoint_meta,
        read_hops,
        read_model_config,
    )

    try:
        folder = resolve_checkpoint(init)
        if not (folder / CONFIG_FILE).is_file():
            raise CheckpointError(f"no {CONFIG_FILE} there")
        meta = read_checkpoint_meta(folder)
        model = read_model_config(folder, meta, None)
        horizon = read_hops(meta, folder).max_hops
    except (CheckpointError, ValueError) as e:
        raise ConfigError(f"--init {init!r} is not a trained qrag checkpoint ({one_line(e)}); pass a checkpoint folder "
                          f"(a run's best/) or a shipped name ({', '.join(shipped_names())}); to start from a bare "
                          "encoder, pass --model.encoder instead.") from None
    return dataclasses.replace(model, init=init), horizon


def load_yaml(path: str | Path, base: TrainConfig | None = None) -> TrainConfig:
    """Read a YAML config file over `base`."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist.")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {str(p)!r} is not valid YAML: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {str(p)!r} is not UTF-8 text (byte {e.start}); save it as UTF-8.") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping of sections, got {type(data).__name__}.")
    return TrainConfig.from_dict(data, base=base, where=str(p))


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def preset_descriptions() -> dict[str, str]:
    """Each bundled preset with the one line that says what it is for (its file's first comment line)."""
    out = {}
    for name in preset_names():
        first = (PRESET_DIR / f"{name}.yaml").read_text(encoding="utf-8").splitlines()[:1]
        out[name] = first[0].lstrip("# ").strip() if first and first[0].startswith("#") else ""
    return out


def load_preset(name: str) -> TrainConfig:
    """A bundled preset (the paper's settings and CPU-sized ones): see `preset_names()`."""
    path = PRESET_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown preset {name!r}; available: {', '.join(preset_names())}.")
    return load_yaml(path)


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


RENAMED_KEYS: dict[str, str] = {"env.max_steps": "env.max_hops"}
"""Config keys of earlier qrag versions and their names now (read with a FutureWarning, so saved run configs
and users' YAML files keep working)."""
