"""The Q-network's settings (`ModelConfig`) and the hop settings saved with a model (`HopSettings`).

Both travel in a model folder's `qrag_config.json`; `qrag.training.learn.config` composes `ModelConfig` into the
training config, and `qrag.training.search.settings` reads `HopSettings` as every search's defaults.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Literal

from qrag.training.overlay import ConfigError, check_choice

PositionMode = Literal["none", "relative", "absolute"]
Precision = Literal["fp32", "bf16", "fp16", "int8", "auto"]
"""An encoder's arithmetic; 'auto' is bf16 where the device has native bf16 and fp32 otherwise
(`qrag.training.model.precision`). 'int8' is for serving only: a network's gradient-free state passes on a CPU through
ONNX Runtime's int8 graph (`QNetwork.serve_in`); an index is embedded in fp32 then."""
PRECISIONS: tuple[str, ...] = typing.get_args(Precision)
ENCODER_PRECISIONS: tuple[str, ...] = tuple(p for p in PRECISIONS if p != "int8")
"""The precisions a torch pass runs in (autocast: an index's embedding, an evaluation's encoders): all but 'int8'."""
TrainMode = Literal["full", "top_layers", "lora"]
TrainTowers = Literal["both", "state"]
StateAnchor = Literal["none", "question", "first_hop", "passages"]
StateOrder = Literal["document", "selection"]
Fill = Literal["state", "question", "question_unguarded"]
FILLS: tuple[Fill, ...] = ("state", "question", "question_unguarded")


@dataclass
class ModelConfig:
    """The two-tower Q-network (METHOD.md §2)."""

    encoder: str = "sentence-transformers/all-MiniLM-L6-v2"
    """Hugging Face encoder both towers start from: a local folder or a hub id."""
    init: str | None = None
    """A trained Q-network to start from instead of the bare encoder (`qrag-train --init`): a shipped name
    (qrag/NAME) or a checkpoint folder; the rest of this section is then that network's, and a checkpoint records
    it as the model it was fine-tuned from."""
    position_mode: PositionMode = "none"
    """Chunk positions: 'none' (passage sets), 'relative' (long single documents), 'absolute' (index)."""
    state_order: StateOrder = "selection"
    """Order of the selected chunks in the state text: 'document' or 'selection' order."""
    max_chunk_tokens: int = 64
    """Chunk tokens kept by the chunk tower (special tokens included); longer chunks are cut."""
    max_state_piece_tokens: int = 64
    """Tokens kept of each state piece (the question, each selected chunk) before splicing."""
    max_state_passage_tokens: int | None = None
    """Tokens kept of each selected chunk's piece of a state, where it differs from `max_state_piece_tokens` (which
    then cuts the question alone): a later hop's state needs less of each passage than of the question (chosen on
    validation for the shipped paragraph model: docs/RESULTS.md). None: `max_state_piece_tokens`."""
    max_state_tokens: int = 512
    """Cap on the spliced state length (the end is cut)."""
    scale: float = 10.0
    """Pooled vectors are divided by this."""
    normalize: bool = False
    """L2-normalise pooled vectors before the division by `scale`: an untrained network's Q-value is then the
    cosine of the base encoder's vectors over `scale`², the ranking of a cosine vector store."""
    train_mode: TrainMode = "full"
    """What is trained: 'full' fine-tuning, the 'top_layers' only, or 'lora' adapters."""
    trainable_layers: int = 2
    """With train_mode='top_layers': how many top transformer layers train."""
    lora_rank: int = 16
    """With train_mode='lora': adapter rank."""
    lora_alpha: float = 32.0
    """With train_mode='lora': adapter scaling numerator."""
    lora_dropout: float = 0.0
    """With train_mode='lora': dropout on the adapter input."""
    dropout: float | None = None
    """Dropout probability inside the encoder layers of the towers that train, in training passes (None: the
    encoder's own). Acting, the target towers, evaluation and serving run in eval mode (no dropout) either way,
    so this changes only the updates."""
    lora_target_modules: list[str] | None = None
    """With train_mode='lora': module names to adapt (None: PEFT's default for the architecture)."""
    train_towers: TrainTowers = "both"
    """Which towers `train_mode` applies to: 'both' (METHOD.md), or 'state' (the chunk tower stays the base
    encoder, so chunk vectors are computed once for a whole run and shared with untrained indexes)."""
    state_anchor: StateAnchor = "none"
    """'question': a state's vector is the base encoder's vector of the question alone plus what training
    changed in the state tower, `f_0(q) + f_θ(s) − f_0(s)`, so an untrained network is single-hop dense search
    at every hop and training learns a correction to it (needs train_towers='state': f_0 is the chunk tower).
    'first_hop': as 'question', less what training changed on the question alone, so the first hop stays exactly
    the base encoder's single-hop search however the model is trained, and only later hops are learned.
    'passages': `f_0(q) + f_θ(p) − f_0(p)`, p the passages already taken without the question: the first hop is
    the base encoder's search, and the learned correction cannot read the question's wording (what it learns
    from template questions cannot key on the templates)."""

    @property
    def fixed_first_hop(self) -> bool:
        """Whether a bare question's state vector is the frozen base's whatever training does (anchors
        'first_hop' and 'passages'): its loss then has no gradient."""
        return self.state_anchor in ("first_hop", "passages")

    def validate(self) -> None:
        check_choice("model.position_mode", self.position_mode, PositionMode)
        check_choice("model.state_order", self.state_order, StateOrder)
        check_choice("model.train_mode", self.train_mode, TrainMode)
        check_choice("model.train_towers", self.train_towers, TrainTowers)
        check_choice("model.state_anchor", self.state_anchor, StateAnchor)
        if self.state_anchor != "none" and self.train_towers != "state":
            raise ConfigError(f"model.state_anchor={self.state_anchor!r} needs model.train_towers='state' (the frozen "
                              f"chunk tower is the base encoder the anchor is computed with), got {self.train_towers!r}.")
        for name in ("max_chunk_tokens", "max_state_piece_tokens", "max_state_tokens", "trainable_layers", "lora_rank"):
            if getattr(self, name) < 1:
                raise ConfigError(f"model.{name} must be >= 1, got {getattr(self, name)}.")
        if self.max_state_passage_tokens is not None and self.max_state_passage_tokens < 1:
            raise ConfigError(f"model.max_state_passage_tokens must be >= 1 (or None: max_state_piece_tokens), got "
                              f"{self.max_state_passage_tokens}.")
        if self.scale <= 0:
            raise ConfigError(f"model.scale must be > 0, got {self.scale}.")
        d = self.dropout
        if d is not None and (isinstance(d, bool) or not isinstance(d, (int, float)) or not 0.0 <= d < 1.0):
            raise ConfigError(f"model.dropout must be a probability in [0, 1) or null (the encoder's own), got {d!r}.")



@dataclass
class HopSettings:
    """How a model is meant to be searched (METHOD.md §4), saved with it and the default for every search.

    The trainer writes the horizon it trained with and, where it calibrates one, the stop threshold that
    suits the model's own Q-values; searchers, adapters and qrag-eval use these unless a caller overrides them.
    """

    max_hops: int = 4
    """Most hops per question: the horizon the model was trained for (`env.max_hops`)."""
    stop_threshold: float | None = 0.5
    """Adaptive search (and a guarded one, `fill='question'`) stops before a hop whose best Q-value is below this;
    None: the model has no stop rule."""
    calibrated: bool = False
    """Whether `stop_threshold` was calibrated on the model's own validation data (else the paper's 0.5)."""
    fill: Fill = "state"
    """What ranks the results of an exact-`k` search past its hops (METHOD.md §4.4). 'state': the Q-values of the
    state after the last hop; every hop up to `k` is taken. 'question' (the off-domain guard): a hop the stop
    rule refuses is not taken, nor one the question's own next passage outscores, and the rest come from the
    question's own ranking as the first hop ranks it (Q of the bare question's state plus its lexical evidence:
    scores on the hops' scale). 'question_unguarded': every hop up to `k` is taken, and the rest come from the
    question's own ranking."""
    lexical_weight: float = 0.0
    """Weight ω of lexical evidence at every hop (METHOD.md §4.5): chunks are ranked by Q + ω · BM25 of the
    state's text, scaled to [0, 1] by the best available chunk; the stop rule still reads Q alone. 0: Q alone
    (no lexical index is needed)."""
    pair_weight: float = 0.0
    """Weight ρ of the word pairs within the lexical evidence (METHOD.md §4.5): the evidence is the state text's
    BM25 over words plus ρ × the question's BM25 over adjacent word pairs, each scaled to [0, 1] by the best
    available chunk, so chunks are ranked by Q + ω · (words + ρ · pairs). 0: words alone (models saved before)."""

    def validate(self) -> HopSettings:
        if isinstance(self.max_hops, bool) or not isinstance(self.max_hops, int) or self.max_hops < 1:
            raise ConfigError(f"hops.max_hops must be an integer >= 1, got {self.max_hops!r}.")
        t = self.stop_threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or t != t or abs(t) == float("inf")):
            raise ConfigError(f"hops.stop_threshold must be a finite number or None, got {t!r}.")
        if not isinstance(self.calibrated, bool):
            raise ConfigError(f"hops.calibrated must be true or false, got {self.calibrated!r}.")
        if self.fill not in FILLS:
            raise ConfigError(f"hops.fill must be one of {list(FILLS)}, got {self.fill!r}.")
        if not lexical_weight_ok(self.lexical_weight):
            raise ConfigError(f"hops.lexical_weight must be a finite number >= 0, got {self.lexical_weight!r}.")
        if not lexical_weight_ok(self.pair_weight):
            raise ConfigError(f"hops.pair_weight must be a finite number >= 0, got {self.pair_weight!r}.")
        return self


def lexical_weight_ok(w: object) -> bool:
    return not isinstance(w, bool) and isinstance(w, (int, float)) and math.isfinite(w) and w >= 0
