"""The two-tower Q-network (METHOD.md §2): `Q(s, a_i) = ⟨f_θ(state), R(p_i)·g_φ(c_i)⟩`.

Shape legend: B batch, N chunks, L tokens, D vector dim (H = D // 2 per head half).

One class, read top to bottom: construction, tokenisation, encoding and scoring; the model folder
(`save_pretrained` / `from_pretrained`: safetensors + JSON, never pickle; `qrag.training.model.folder` reads and
writes the files); serving (`serve_in`, `serve_graphed`, `merge_adapters`), which training never sees: `train()`
drops the low-precision copy and the graphs and refuses a network whose adapters were merged.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from qrag.training.atomic import recover
from qrag.training.model.anchors import anchored_states, served_anchor
from qrag.training.model.config import HopSettings, ModelConfig
from qrag.training.model.cpu_linear import use_cpu_linears
from qrag.training.model.encoders import load_encoder, resolve_encoder
from qrag.training.model.folder import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSION,
    CONFIG_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    load_checked,
    read_base_encoder,
    read_checkpoint_meta,
    read_hops,
    read_model_config,
    read_tokenizer,
    read_weights,
    write_model_folder,
)
from qrag.training.model.graphed import GraphedPass
from qrag.training.model.positions import absolute_positions, relative_positions, rotary_scores, rotate_halves
from qrag.training.model.serving import Serving
from qrag.training.model.shipped import ShippedNameError, resolve_checkpoint
from qrag.training.model.towers import (
    Precision,
    Tower,
    apply_train_mode,
    encode_longest_first,
    eval_mode,
    model_lock,
    pad_rows,
    precision_autocast,
    question_inputs,
    state_token_ids,
    tensors_digest,
    token_rows,
    token_rows_and_lengths,
    window_rows,
)
from qrag.training.model.trunk import StateParts, check_splittable
from qrag.training.model.weight_stamp import WatchedTensors
from qrag.training.overlay import ConfigError

__all__ = ["CONFIG_FILE", "WEIGHTS_FILE", "CheckpointError", "ChunkLengthWarning", "QNetwork", "Tower", "eval_mode",
           "model_lock", "question_inputs", "read_checkpoint_meta"]

TRANSIENT_KEY_PREFIX = "network:"
"""`QNetwork.chunk_vectors_key` of a chunk tower that can train: valid for one network object only, so its
vectors are never written to disk by a `ChunkVectorFolder`."""


CHUNK_BATCH = 128
"""Chunks per encoder pass when indexing on a CPU."""
GPU_CHUNK_BATCH = 1024
"""Chunks per encoder pass when indexing on a GPU: 51 000 chunks/s of 32-34 tokens in bf16 on one H200
(docs/RESULTS.md, "Position-aware scoring")."""


class ChunkLengthWarning(UserWarning):
    """Chunks longer than the model's `max_chunk_tokens` are cut: only their beginning is embedded."""


class QNetwork(Serving):
    """State tower f_θ and chunk tower g_φ with unshared weights, initialised from one encoder.

    Example:
        >>> qnet = QNetwork.from_encoder("sentence-transformers/all-MiniLM-L6-v2")  # doctest: +SKIP
        >>> chunks = qnet.embed_chunks(["Mary went to the kitchen.", "Mary took the milk."])  # (2, 384)
        >>> states = qnet.embed_states(["Where is the milk?"], [[]])  # (1, 384)
        >>> q = qnet.score(states, chunks)  # (1, 2) Q-values
    """

    def __init__(
        self,
        state_tower: Tower,
        chunk_tower: Tower,
        tokenizer: PreTrainedTokenizerBase,
        config: ModelConfig,
    ) -> None:
        super().__init__()
        self.state_tower = state_tower
        self.chunk_tower = chunk_tower
        self.tokenizer = tokenizer
        self.config = config
        self.hop_settings = HopSettings()  # the search defaults saved with the model (the trainer sets them)
        self._base_key: str | None = None
        self._tower_fp: tuple[Any, str] | None = None
        self._untrained_sums: list[float] | None = None  # set while both towers are the base encoder as loaded
        self._checked_rows: tuple[tuple[str, ...], list[list[int]]] | None = None  # check_chunk_lengths → embed_chunks
        self._adapters: dict[str, torch.Tensor] | None = None  # the LoRA tensors, once merged for serving
        self._serving: tuple[Precision, Tower, Tower | None] | None = None  # `serve_in`: low-precision copies
        self._serving_asked: Precision = "fp32"  # what `serve_in` was asked (a save records it: 'auto' stays 'auto')
        self._serving_why = "fp32 unless serve_in chooses another"  # `serving_why`
        self._engine_why = "torch"  # `engine_why`: what runs the CPU passes (`serve_engine`)
        self._state_engine_parked = False  # the state tower's fp32 engine dropped while a copy serves (`serve_in`)
        self._graphed: GraphedPass | None = None  # `serve_graphed`: state passes replayed as CUDA graphs
        # f_0(q) by the question piece's token ids, valid while the chunk tower's tensors are these (`_base_stamp`)
        self._question_vectors: OrderedDict[tuple[Any, ...], torch.Tensor] = OrderedDict()
        self._question_stamp: tuple[Any, ...] | None = None
        self._shared: tuple[tuple[Any, ...], int] | None = None  # `_shared_layers`: (weights' stamp, layers shared)
        self._tower_tensors: dict[int, tuple[Tower, WatchedTensors]] = {}  # `_watched`
        if self.dim % 4 and config.position_mode != "none":
            raise ConfigError(f"position_mode={config.position_mode!r} needs a vector dim divisible by 4, got {self.dim}.")
        if self.dim % 2:
            raise ConfigError(f"the two-head ensemble needs an even vector dim, got {self.dim}.")
        if config.state_anchor != "none" and tokenizer.sep_token_id is None:
            raise ConfigError(f"model.state_anchor={config.state_anchor!r} finds the question in a state by its [SEP] "
                              f"token; the tokenizer of {config.encoder!r} has none: use state_anchor='none'.")

    def __deepcopy__(self, memo: dict[int, Any]) -> QNetwork:
        """A copy of the towers and settings sharing the tokenizer: it is read-only here, and copying its
        vocabulary cost more than copying a small network (every target network and test fixture is a copy)."""
        memo[id(self.tokenizer)] = self.tokenizer
        twin = self.__class__.__new__(self.__class__)
        memo[id(self)] = twin
        twin.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return twin

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_encoder(cls, name_or_path: str, **options: Any) -> QNetwork:
        """Both towers from one pretrained encoder; `options` are `ModelConfig` fields.

        Raises:
            ConfigError: an unknown or invalid option.
            EncoderLoadError: the encoder cannot be found or is not an encoder.
        """
        known = {f.name for f in dataclasses.fields(ModelConfig)} - {"encoder"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"unknown QNetwork option(s) {unknown}; known: {sorted(known)}.")
        config = ModelConfig(encoder=name_or_path, **options)
        config.validate()
        encoder, tokenizer = load_encoder(name_or_path)
        qnet = cls._assemble(encoder, copy.deepcopy(encoder), tokenizer, config)
        if Path(resolve_encoder(name_or_path)).is_dir():  # the base can be found again offline: saves may name it
            qnet._untrained_sums = qnet._weight_sums()
        return qnet

    @classmethod
    def from_config(cls, config: ModelConfig) -> QNetwork:
        options = {k: v for k, v in dataclasses.asdict(config).items() if k != "encoder"}
        return cls.from_encoder(config.encoder, **options)

    @classmethod
    def _assemble(
        cls, state_enc: nn.Module, chunk_enc: nn.Module, tokenizer: PreTrainedTokenizerBase, config: ModelConfig
    ) -> Self:
        state_enc = apply_train_mode(state_enc, config)
        chunk_enc = apply_train_mode(chunk_enc, config) if config.train_towers == "both" else chunk_enc.requires_grad_(False)
        for encoder in (state_enc, chunk_enc):
            use_cpu_linears(encoder)  # oneDNN's GEMM for gradient-free CPU passes (training/model/cpu_linear.py)
        return cls(Tower(state_enc, config.scale, config.normalize), Tower(chunk_enc, config.scale, config.normalize),
                   tokenizer, config)

    # ------------------------------------------------------------------ properties
    @property
    def dim(self) -> int:
        return int(self.base_encoder(self.state_tower).config.hidden_size)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def self_contained(self) -> bool:
        """Whether checkpoints hold every weight ('full' mode, both towers) rather than the trained part only."""
        return self.config.train_mode == "full" and self.config.train_towers == "both"

    @property
    def hops(self) -> HopSettings:
        """Deprecated name of `hop_settings` (`qrag.training.search.hops` is the hop engine)."""
        warnings.warn("QNetwork.hops is renamed QNetwork.hop_settings.", FutureWarning, stacklevel=2)
        return self.hop_settings

    @hops.setter
    def hops(self, value: HopSettings) -> None:
        warnings.warn("QNetwork.hops is renamed QNetwork.hop_settings.", FutureWarning, stacklevel=2)
        self.hop_settings = value

    @property
    def untrained(self) -> bool:
        """True while both towers are exactly the base encoder they were loaded from (which a save then names
        instead of copying its weights); any change to any weight makes it False."""
        return self._untrained_sums is not None and self._weight_sums() == self._untrained_sums

    def _weight_sums(self) -> list[float]:
        # Two moments per tensor in float64: any training step moves them.
        return [float(s) for v in self.state_dict().values() if v.is_floating_point()
                for s in (v.double().sum(), v.double().square().sum())]

    @property
    def chunk_tower_frozen(self) -> bool:
        """True when the chunk tower is the base encoder and never trains (`train_towers='state'`)."""
        return self.config.train_towers == "state"

    def chunk_vectors_key(self) -> str:
        """What a chunk vector depends on besides its text, for caches shared between networks.

        With a frozen chunk tower that is the base encoder, the truncation, the scale and the normalisation, so an untrained
        network and one trained with `train_towers='state'` share their vectors; otherwise it is this
        network object itself (its chunk tower may change as it trains).
        """
        if not self.chunk_tower_frozen:
            return f"{TRANSIENT_KEY_PREFIX}{id(self)}"
        if self._base_key is None:
            self._base_key = f"base:{self.base_fingerprint()}"
        return f"{self._base_key}:tokens={self.config.max_chunk_tokens}:scale={self.config.scale:g}{self._norm_tag}"

    # ------------------------------------------------------------------ tokenisation
    def tokenize_chunks(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Chunk texts → right-padded ids truncated to `max_chunk_tokens` (special tokens included)."""
        return pad_rows(token_rows(self.tokenizer, texts, self.config.max_chunk_tokens), self.pad_id)

    @property
    def pad_id(self) -> int:
        """The id padded rows are filled with (0 when the tokenizer has no pad token)."""
        return self.tokenizer.pad_token_id or 0

    def check_chunk_lengths(self, texts: Sequence[str], *, stacklevel: int = 2) -> int:
        """Warn once (`ChunkLengthWarning`) when chunks exceed `max_chunk_tokens`: how many, and by how much.

        The texts are tokenised once, cut to `max_chunk_tokens`; the next `embed_chunks` of the same texts takes
        those rows instead of tokenising again (the model holds them until then).

        Returns:
            How many of `texts` are longer than `max_chunk_tokens` tokens (special tokens included).
        """
        limit = self.config.max_chunk_tokens
        rows, lengths = token_rows_and_lengths(self.tokenizer, texts, limit)
        # The cut rows are what embedding these texts needs next (ChunkIndex.from_texts, the embeddings adapters):
        # kept for the next `embed_chunks` of the same texts, so the corpus is tokenised once, not twice.
        self._checked_rows = (tuple(texts), rows)
        over = [n - limit for n in lengths if n > limit]
        if over:
            fix = ("split them into smaller chunks: this model scores chunks by their position in one document, so it "
                   "reads each from its first tokens (no windows)") if self.config.position_mode != "none" else (
                   "split them into smaller chunks, or index them in process with long_chunks='windows' "
                   "(ChunkIndex.from_texts' and the retrievers' default), which searches each by its best window")
            warnings.warn(
                f"{len(over)} of {len(lengths)} chunks are longer than this model's max_chunk_tokens={limit} (by up "
                f"to {max(over)} tokens, {sum(over) / len(over):.0f} on average) and are embedded from their first "
                f"{limit} tokens only; {fix}.",
                ChunkLengthWarning, stacklevel=stacklevel + 1,
            )
        return len(over)

    def state_token_ids(self, question: str, selected_chunks: Sequence[str]) -> list[int]:
        """`[CLS] q [SEP] c1 [SEP] c2 [SEP]`, each piece truncated on its own: the question to `max_state_piece_tokens`,
        each chunk to `max_state_passage_tokens` (where set, else the same)."""
        return state_token_ids(self.tokenizer, question, selected_chunks, self.config.max_state_piece_tokens,
                               self.config.max_state_tokens, self.config.max_state_passage_tokens)

    def tokenize_states(
        self, questions: Sequence[str], selected_chunks: Sequence[Sequence[str]]
    ) -> dict[str, torch.Tensor]:
        """Batch of states → padded ids; `selected_chunks[b]` is already in the order to render."""
        if len(questions) != len(selected_chunks):
            raise ValueError(f"got {len(questions)} questions but {len(selected_chunks)} lists of selected chunks.")
        rows = [self.state_token_ids(q, sel) for q, sel in zip(questions, selected_chunks, strict=True)]
        return pad_rows(rows, self.pad_id)

    # ------------------------------------------------------------------ encoding
    def forward(
        self,
        state_inputs: dict[str, torch.Tensor] | StateParts,
        chunk_inputs: dict[str, torch.Tensor] | torch.Tensor,
        chunk_positions: torch.Tensor | None = None,
        return_states: bool = False,
    ) -> tuple[torch.Tensor, ...]:
        """Training forward for B (state, taken chunk) pairs: the two heads' Q-values.

        Args:
            state_inputs: tokenised states, (B, L) ids and mask; or their `StateParts` (only the top layers run).
            chunk_inputs: tokenised taken chunks, (B, L) ids and mask; or, with a frozen chunk tower, their
                (B, D) unrotated chunk vectors, already computed (a cache).
            chunk_positions: (B,) float positions of the taken chunks (None in 'none' mode).

            return_states: also return the (B, D) state vectors (to score other chunks against them).

        Returns:
            (q1, q2), each (B,): `⟨s¹, a¹⟩` and `⟨s², a²⟩`; their sum is Q. With `return_states`, (q1, q2, s).
        """
        s = self.state_vectors(state_inputs)  # (B, D)
        if isinstance(chunk_inputs, torch.Tensor):
            if not self.chunk_tower_frozen:
                raise ValueError("precomputed chunk vectors carry no gradient: pass token ids unless train_towers='state'.")
            a = chunk_inputs  # (B, D)
        else:
            a = self.chunk_tower(**chunk_inputs)  # (B, D)
        if chunk_positions is not None and self.config.position_mode != "none":
            a = rotate_halves(a.unsqueeze(1), chunk_positions.unsqueeze(1)).squeeze(1)  # (B, D)
        h = s.shape[-1] // 2
        q1 = (s[:, :h] * a[:, :h]).sum(-1)  # (B,)
        q2 = (s[:, h:] * a[:, h:]).sum(-1)  # (B,)
        return (q1, q2, s) if return_states else (q1, q2)

    @torch.no_grad()
    def embed_chunks(self, texts: Sequence[str], batch_size: int | None = None, show_progress: bool = False,
                     precision: Precision = "fp32") -> torch.Tensor:
        """Chunk-tower vectors g_φ(c), unrotated, (N, D) float32 on the model's device.

        Batches are length-sorted so padding is small; dropout is off (eval mode) while encoding. `precision`
        'bf16' or 'fp16' runs the encoder under autocast (faster where the hardware has those units, vectors
        within about 0.5% of fp32's; fp16 needs a GPU). `batch_size` None: `CHUNK_BATCH` on a CPU, `GPU_CHUNK_BATCH`
        on a GPU (small passes leave a GPU waiting on the host).
        """
        batch_size = batch_size or (GPU_CHUNK_BATCH if self.device.type == "cuda" else CHUNK_BATCH)
        # One fast-tokenizer call over the whole corpus, then batches of similar token length padded from those
        # ids: no tokenizer call per batch, and the length sort sees tokens, not characters.
        rows = self._rows_of_checked(texts) or token_rows(self.tokenizer, texts, self.config.max_chunk_tokens)
        with precision_autocast(self.device, precision):
            return self._embed(lambda inputs: self.chunk_tower(**inputs),
                               lambda idx: pad_rows([rows[i] for i in idx], self.pad_id),
                               [len(r) for r in rows], batch_size, show_progress, "chunks")

    @torch.no_grad()
    def embed_windows(self, texts: Sequence[str], batch_size: int | None = None, show_progress: bool = False,
                      precision: Precision = "fp32") -> tuple[torch.Tensor, torch.Tensor]:
        """Chunk-tower vectors of the later windows of the texts longer than `max_chunk_tokens` (a text's first
        window is its `embed_chunks` vector; `towers.window_rows` says where windows start): (W, D) float32 on the
        model's device, and (W,) long, the index in `texts` of the text each window belongs to (ascending).
        A search scores such a text by its best window (`qrag.training.search.windows`)."""
        rows, owner = window_rows(self.tokenizer, texts, self.config.max_chunk_tokens)
        if not rows:
            return torch.empty(0, self.dim, device=self.device), torch.empty(0, dtype=torch.long)
        batch_size = batch_size or (GPU_CHUNK_BATCH if self.device.type == "cuda" else CHUNK_BATCH)
        with precision_autocast(self.device, precision):
            vectors = self._embed(lambda inputs: self.chunk_tower(**inputs),
                                  lambda idx: pad_rows([rows[i] for i in idx], self.pad_id),
                                  [len(r) for r in rows], batch_size, show_progress, "windows")
        return vectors, torch.tensor(owner, dtype=torch.long)

    def _rows_of_checked(self, texts: Sequence[str]) -> list[list[int]] | None:
        """The cut token rows `check_chunk_lengths` made of exactly these texts, handed over once; else None."""
        checked, self._checked_rows = self._checked_rows, None
        return checked[1] if checked is not None and checked[0] == tuple(texts) else None

    @torch.no_grad()
    def embed_states(
        self,
        questions: Sequence[str],
        selected_chunks: Sequence[Sequence[str]],
        batch_size: int = 128,
        *,
        tokenize_lock: contextlib.AbstractContextManager[Any] | None = None,
    ) -> torch.Tensor:
        """State-tower vectors f_θ(q [SEP] c_i1 [SEP] …), (B, D); chunks in the order to render.

        `tokenize_lock`, when given, is held while the states are tokenised and released for the passes (the fast
        tokenizers refuse concurrent calls; gradient-free passes of one network may run at once)."""
        if len(questions) != len(selected_chunks):
            raise ValueError(f"got {len(questions)} questions but {len(selected_chunks)} lists of selected chunks.")
        lengths = [len(q) + sum(len(c) for c in sel) for q, sel in zip(questions, selected_chunks, strict=True)]

        def tokenize(idx: list[int]) -> dict[str, torch.Tensor]:
            with tokenize_lock or contextlib.nullcontext():
                return self.tokenize_states([questions[i] for i in idx], [selected_chunks[i] for i in idx])

        return self._embed(
            self._state_pass(),
            tokenize,
            lengths,
            batch_size,
            False,
            "states",
        )

    @torch.no_grad()
    def embed_questions(self, questions: Sequence[str], batch_size: int = 128) -> torch.Tensor:
        """(B, D) chunk-tower vectors g_φ(`[CLS] q [SEP]`) of bare questions: what cosine search with the base
        encoder ranks by when the chunk tower is frozen (the off-domain guard's ranking, METHOD.md §4.4)."""
        return self._embed(lambda inputs: self.chunk_tower(**inputs),
                           lambda idx: self.tokenize_states([questions[i] for i in idx], [[] for _ in idx]),
                           [len(q) for q in questions], batch_size, False, "questions")

    def state_vectors(self, state_inputs: dict[str, torch.Tensor] | StateParts) -> torch.Tensor:
        """Tokenised states (B, L) → state vectors (B, D): `f_θ(s)`, or under `model.state_anchor` the frozen base's
        question vector plus what training changed (`qrag.training.model.anchors`). From `StateParts` (`state_parts`),
        only the state tower's top layers run."""
        if isinstance(state_inputs, StateParts):
            p = state_inputs
            s = self.state_tower.from_trunk(p.hidden, p.mask, p.top)  # (B, D)
            return s if p.anchor is None else s + p.anchor.to(s.dtype)
        return anchored_states(self.config.state_anchor, self._state_tower_for_pass(), self.chunk_tower, state_inputs,
                               self.tokenizer.sep_token_id)

    @torch.no_grad()
    def state_parts(self, state_inputs: dict[str, torch.Tensor], top: int) -> StateParts:
        """What `state_vectors` needs of tokenised states (B, L) that training their top `top` state-tower layers
        does not change: the trunk's output and, under state anchor 'question', the frozen base's `f_0(q) − f_0(s)`
        (`qrag.training.model.trunk`); computed in eval mode, without gradient.

        Raises:
            ConfigError: a state anchor other than 'question' or 'none', or an encoder that cannot be split.
        """
        if self.config.state_anchor not in ("question", "none"):
            raise ConfigError(f"training the top layers on a frozen trunk needs state_anchor 'question' or 'none'; "
                              f"this network has {self.config.state_anchor!r}.")
        check_splittable(self.state_tower.encoder, top, "trainer.train_layers")
        with eval_mode(self):
            hidden = self.state_tower.trunk(state_inputs["input_ids"], state_inputs["attention_mask"], top)
            anchor = None
            if self.config.state_anchor == "question":  # zero on bare questions; f_0(q) kept per question
                anchor = served_anchor(self.chunk_tower, state_inputs, self.tokenizer.sep_token_id,
                                       self.frozen_questions)
        return StateParts(hidden, state_inputs["attention_mask"], anchor, top)

    def _embed(self, encode: Any, tokenize: Any, lengths: list[int], batch_size: int, show: bool, what: str) -> torch.Tensor:
        with eval_mode(self):
            return encode_longest_first(encode, tokenize, lengths, batch_size, self.dim, self.device,
                                        desc=f"embedding {what}", show=show)

    # ------------------------------------------------------------------ scoring
    def positions(self, selected: torch.Tensor, valid: torch.Tensor | None = None,
                  num_gaps: int | None = None) -> torch.Tensor | None:
        """(B, N) chunk positions for the model's position mode, or None in 'none' mode (`num_gaps`: at least
        every row's selected chunks + 1, when known: `relative_positions` then does not count them on the device)."""
        mode = self.config.position_mode
        if mode == "relative":
            return relative_positions(selected, valid, num_gaps)
        if mode == "absolute":
            return absolute_positions(selected.shape[1], selected.shape[0], selected.device)
        return None

    def score(
        self, states: torch.Tensor, chunks: torch.Tensor, positions: torch.Tensor | None = None, heads: bool = False
    ) -> torch.Tensor:
        """Q-values of every chunk for every state.

        Args:
            states: (B, D) state vectors.
            chunks: (N, D) chunk vectors shared by the batch, or (B, N, D) per-state chunks.
            positions: (B, N) positions (rotation applied unless the mode is 'none').
            heads: return the two heads separately.

        Returns:
            (B, N) Q-values, or (2, B, N) per-head values when `heads` is true.
        """
        with torch.autocast(states.device.type, enabled=False):  # Q-values in fp32 even under autocast
            return self._score(states.float(), chunks.float(), positions, heads)

    def _score(
        self, states: torch.Tensor, chunks: torch.Tensor, positions: torch.Tensor | None, heads: bool
    ) -> torch.Tensor:
        if positions is not None and self.config.position_mode != "none":
            return rotary_scores(states, chunks, positions, heads)  # (B, N) | (2, B, N), nothing rotated copied
        h = states.shape[-1] // 2
        if not heads:
            if chunks.dim() == 2:
                return states @ chunks.T  # (B, N)
            return torch.einsum("bd,bnd->bn", states, chunks)  # (B, N)
        if chunks.dim() == 2:
            chunks = chunks.unsqueeze(0)  # (1, N, D)
        q1 = torch.einsum("bd,bnd->bn", states[:, :h], chunks[..., :h].expand(states.shape[0], -1, -1))  # (B, N)
        q2 = torch.einsum("bd,bnd->bn", states[:, h:], chunks[..., h:].expand(states.shape[0], -1, -1))  # (B, N)
        return torch.stack((q1, q2))  # (2, B, N)

    # ------------------------------------------------------------------ parameters
    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """What training changes: every parameter in 'full' mode with both towers, else the trained subset only."""
        if self._adapters is not None:
            return dict(self._adapters)
        if self.self_contained:
            return {k: v for k, v in self.state_dict().items()}
        trainable = {n for n, p in self.named_parameters() if p.requires_grad}
        return {k: v for k, v in self.state_dict().items() if k in trainable}

    @staticmethod
    def base_encoder(tower: Tower) -> PreTrainedModel:
        """The tower's transformers model under any LoRA adapters (its config, parameters and embeddings)."""
        enc = tower.encoder
        get_base = getattr(enc, "get_base_model", None)
        base = get_base() if callable(get_base) else enc
        assert isinstance(base, PreTrainedModel)
        return base

    def base_fingerprint(self) -> str:
        """A short hash of the base encoder's input embeddings, to catch a checkpoint on the wrong base."""
        base: Any = self.base_encoder(self.chunk_tower)  # transformers' stubs mistype get_input_embeddings
        return tensors_digest([("", base.get_input_embeddings().weight)], "sha256", 16)

    def chunk_tower_fingerprint(self) -> str:
        """A short hash of everything a chunk vector depends on: the chunk tower's weights, truncation, scale
        and normalisation.

        A saved `ChunkIndex` records it, and `MultiHopSearcher.load` compares it with the loaded model's,
        so an index is never searched with a chunk tower other than the one that embedded it.
        """
        tensors = sorted(self.chunk_tower.state_dict().items())
        # Cached until a weight changes (`weight_stamp`) or a setting does.
        settings = f"tokens={self.config.max_chunk_tokens}:scale={self.config.scale!r}{self._norm_tag}"
        stamp = (settings, self._watched(self.chunk_tower).stamp())
        cached = self._tower_fp
        if cached is not None and cached[0] == stamp:
            return str(cached[1])
        self._tower_fp = (stamp, tensors_digest(tensors, "blake2b", 16, prefix=settings))
        return self._tower_fp[1]

    @property
    def _norm_tag(self) -> str:
        """Normalisation's part of chunk-vector keys and fingerprints (empty when off, so the keys and saved
        indexes of unnormalised models are what they were before the option existed)."""
        return ":normalize" if self.config.normalize else ""

    # ------------------------------------------------------------------ the model folder
    def save_pretrained(self, directory: str | Path, extra_files: dict[str, str] | None = None) -> Path:
        """Write safetensors + JSON (+ tokenizer, + `extra_files`: name → text); atomic: a temp folder renamed
        into place, so the files beside the model (e.g. the trainer's eval.json) are never from another save.

        In 'full' mode with both towers trained the folder is self-contained; otherwise it holds only the
        trained parameters and names its base encoder (the state tower's weights alone with
        `train_towers='state'`). An `untrained` network whose base encoder can be found offline stores no
        weights at all: the folder names its base.
        """
        target = Path(directory)
        saved = "none" if self.untrained else "all" if self.self_contained else "trainable"
        weights = {} if saved == "none" else self.trainable_state_dict()
        meta: dict[str, Any] = {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "model": dataclasses.asdict(self.config),
            "saved_params": saved,
            "base_fingerprint": self.base_fingerprint(),
            "hops": dataclasses.asdict(self.hop_settings),
        }
        encoder_config = self.base_encoder(self.state_tower).config if saved == "all" else None
        write_model_folder(target, weights, meta, self.tokenizer, encoder_config, extra_files)
        return target

    @classmethod
    def from_pretrained(cls, directory: str | Path, *, encoder: str | None = None) -> Self:
        """Load a folder written by `save_pretrained`, in eval mode.

        Args:
            directory: the checkpoint folder, or the name of a checkpoint shipped with qrag
                (`qrag.training.model.shipped.shipped_names()`, e.g. "qrag/babilong-minilm").
            encoder: override where the base encoder is found (for checkpoints that store only trained
                parameters, when the base lives elsewhere on this machine).

        Raises:
            CheckpointError: not a qrag checkpoint, incomplete, or saved on a different base encoder.
        """
        try:
            d = resolve_checkpoint(directory)
        except ShippedNameError as e:
            raise CheckpointError(str(e)) from None
        recover(d)
        meta = read_checkpoint_meta(d)
        config = read_model_config(d, meta, encoder)
        tensors = read_weights(d / WEIGHTS_FILE)
        base = read_base_encoder(d, meta, config)
        qnet = cls._assemble(base, copy.deepcopy(base), read_tokenizer(d / "tokenizer"), config)
        if meta["saved_params"] != "all" and qnet.base_fingerprint() != meta.get("base_fingerprint"):
            raise CheckpointError(
                f"checkpoint {str(d)!r} was trained on a different base encoder than {config.encoder!r} "
                f"(resolved to {resolve_encoder(config.encoder)!r}); pass `encoder=` with the right one."
            )
        expected = {"none": set(), "trainable": set(qnet.trainable_state_dict())}.get(meta["saved_params"],
                                                                                     set(qnet.state_dict()))
        load_checked(qnet, tensors, expected, d)
        qnet.hop_settings = read_hops(meta, d)
        if meta["saved_params"] == "none":
            qnet._untrained_sums = qnet._weight_sums()
        return qnet.eval()

    def train(self, mode: bool = True) -> Self:
        if mode and self._adapters is not None:
            raise RuntimeError("this network's LoRA adapters were merged into its weights for serving "
                               "(load_model does that); load the checkpoint with QNetwork.from_pretrained to train it.")
        if mode:
            self._serving = None  # a network that trains serves from the tower it trains
            self._serving_asked = "fp32"
            self._serving_why = "a network that trains serves from the tower it trains"
            self._graphed = None
            self.drop_engines()
        return super().train(mode)
