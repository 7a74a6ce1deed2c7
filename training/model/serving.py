"""What a `QNetwork` does only to serve: a bf16 copy, CPU engines, CUDA graphs, lean passes, kept `f_0(q)`.

Training never sees any of it: `QNetwork.train()` drops the serving copy, the CPU engines and the graphs. The kept
vectors and layer counts follow the weights by their stamp (`weight_stamp`). `Serving` is a mixin of `QNetwork`,
which declares the state it reads (towers, tokenizer, config) and holds the caches this module fills.
"""

from __future__ import annotations

import copy
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

import torch
from torch import nn

from qrag.training.model.anchors import served_states
from qrag.training.model.graphed import GraphedPass
from qrag.training.model.onnx_engine import ENV, CPUEngine, wanted
from qrag.training.model.serving_speed import faster_serving
from qrag.training.model.towers import (
    PRECISION_OF_DTYPE,
    Precision,
    Tower,
    check_precision,
    eval_mode,
    low_precision_dtype,
)
from qrag.training.model.trunk import shared_layers
from qrag.training.model.weight_stamp import WatchedTensors

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from qrag.training.model.config import ModelConfig

QUESTION_VECTORS = 4096
"""Questions whose frozen-base vector `f_0(q)` a network keeps for its state anchor (the least recently used goes)."""
PARKED = "its served copy runs every gradient-free pass (serving_why); the fp32 engine is dropped"
"""`engine_why` for the state tower while a low-precision copy serves (`Serving._park_state_engine`)."""
_QUESTION_VECTORS_LOCK = threading.Lock()  # the kept f_0(q) of every network: passes may run in several threads


class Serving(nn.Module):
    """The serving half of `QNetwork` (module docstring)."""

    if TYPE_CHECKING:
        state_tower: Tower
        chunk_tower: Tower
        tokenizer: PreTrainedTokenizerBase
        config: ModelConfig
        _serving: tuple[Precision, Tower, Tower | None] | None
        _serving_asked: Precision
        _serving_why: str
        _engine_why: str
        _state_engine_parked: bool
        _graphed: GraphedPass | None
        _adapters: dict[str, torch.Tensor] | None
        _question_vectors: OrderedDict[tuple[Any, ...], torch.Tensor]
        _question_stamp: tuple[Any, ...] | None
        _shared: tuple[tuple[Any, ...], int] | None
        _tower_tensors: dict[int, tuple[Tower, WatchedTensors]]
        _tower_fp: tuple[Any, str] | None

        @property
        def device(self) -> torch.device: ...
        @property
        def pad_id(self) -> int: ...
        @property
        def untrained(self) -> bool: ...
        def state_vectors(self, state_inputs: Any) -> torch.Tensor: ...
        def trainable_state_dict(self) -> dict[str, torch.Tensor]: ...

    @property
    def serving_precision(self) -> Precision:
        """The state tower's arithmetic in gradient-free passes ('fp32' unless `serve_in` chose another)."""
        return self._serving[0] if self._serving is not None else "fp32"

    @property
    def serving_asked(self) -> Precision:
        """The precision `serve_in` was last asked for ('auto' kept as 'auto'): what a saved searcher records, so that
        it chooses again on the machine that loads it."""
        return self._serving_asked

    @property
    def serving_why(self) -> str:
        """Why the state passes run in `serving_precision` (for 'auto' on a CPU with native bf16: the two timed passes,
        `qrag.training.model.serving_speed`)."""
        return self._serving_why

    def serve_in(self, precision: Precision) -> Self:
        """Run the gradient-free state passes (every served hop) in `precision`: 'bf16' on a copy of the state tower
        with its weights in bf16, faster on a CPU with bf16 units (AVX512-BF16, AMX), the state vectors moved by
        rounding only; 'fp16' likewise, for GPUs; 'int8', on a CPU, through ONNX Runtime's int8 graphs of the state
        tower and the frozen base (`qrag.training.model.onnx_engine`: about half an fp32 pass's time, vectors at
        cosine ~0.99 to fp32's; docs/RESULTS.md measures both); 'fp32' drops the copy; 'auto', on a CPU, times a
        query's passes in fp32 and in each precision this CPU offers (bf16 where it has native bf16, int8 where the
        int8 graphs build) and keeps the fastest only where it is clearly faster (`qrag.training.model.serving_speed`;
        `serving_why` says which), elsewhere bf16 where the device has native bf16. 'bf16' on a CPU without native
        bf16, or 'int8' anywhere it cannot run, warns and serves fp32.

        The fp32 towers stay as they are: passes with gradients (training), the chunk tower's vectors of an index and
        `save_pretrained` never see the copy, and `train()` drops it. A bf16 copy is taken now: call `serve_in` again
        after loading other weights into the state tower (the int8 graphs give way to the fp32 towers by
        themselves once the weights change). While a copy serves, the state tower's own fp32 CPU engine, which would
        serve nothing, is dropped (`engine_why` says so; its session is freed); `serve_in('fp32')` and
        'auto' build it again. Returns self.

        Raises:
            ValueError: an unknown precision, 'fp16' on a CPU, or a network in training mode.
        """
        self._restore_state_engine()  # 'auto' times the fp32 passes as they run; 'fp32' serves from it
        self._choose_serving(precision)
        self._park_state_engine()
        return self

    def _choose_serving(self, precision: Precision) -> Self:
        """`serve_in`'s choice of the served copy (`_serving`) for `precision`."""
        check_precision(precision)
        if precision == "int8" and self.training:
            raise ValueError("serve_in is for serving: put the network in eval mode first (model.eval()); training "
                             "passes keep the fp32 state tower.")
        self._serving_asked = precision
        self._recapture()
        self.forget_kept()  # the serving copy replaced is listed no more
        self._serving = None
        if precision == "fp32":
            self._serving_why = "fp32 as asked"
            return self
        if precision == "int8":
            built = self._int8_towers()
            if isinstance(built, str):
                warnings.warn(f"precision 'int8' asked, but {built}; serving fp32 instead.", RuntimeWarning,
                              stacklevel=2)
                self._serving_why = built
            else:
                self._serving, self._serving_why = ("int8", *built), "int8 as asked"
            return self
        dtype = low_precision_dtype(self.device, precision)
        if self.training and dtype is not None:
            raise ValueError("serve_in is for serving: put the network in eval mode first (model.eval()); training "
                             "passes keep the fp32 state tower.")
        copies: list[Tower] = []  # the low-precision state tower, made once and only where it serves or is timed

        def state_copy() -> Tower:
            assert dtype is not None
            if not copies:
                copies.append(copy.deepcopy(self.state_tower).to(dtype).requires_grad_(False).eval())
            return copies[0]

        if precision == "auto" and self.device.type == "cpu" and not self.training:  # which of fp32, bf16 (native) and int8 is fastest here?
            int8: list[tuple[Tower, Tower] | str] = []

            def int8_state() -> Tower | None:
                if not int8:
                    int8.append(self._int8_towers())
                return None if isinstance(int8[0], str) else int8[0][0]

            offered: dict[Precision, Callable[[], Tower | None]] = {"int8": int8_state} if wanted() else {}
            if dtype is not None:
                offered["bf16"] = state_copy
            if not offered:
                self._serving_why = f"the device has no native low precision, and {ENV}=torch runs no int8 graph"
                return self
            chosen, self._serving_why = faster_serving(self.state_tower, offered, len(self.tokenizer))
            if chosen == "int8":
                towers = int8[0] if int8 else self._int8_towers()
                assert not isinstance(towers, str), "int8 is chosen only where its towers built"
                self._serving = ("int8", *towers)
                return self
            if chosen == "fp32":
                return self
        elif dtype is None:
            self._serving_why = "the device has no native low precision"
            return self
        else:
            self._serving_why = f"{PRECISION_OF_DTYPE[dtype]} as asked" if precision != "auto" else "the device's native type"
        assert dtype is not None
        # under anchor 'question' the frozen base's top layers run on the state tower's trunk: a copy of the base in the
        # same precision, so that the two still share their bottom layers (`_question_on_shared_trunk`)
        base = (copy.deepcopy(self.chunk_tower).to(dtype).requires_grad_(False).eval()
                if self.config.state_anchor == "question" else None)
        self._serving = (PRECISION_OF_DTYPE[dtype], state_copy(), base)
        return self

    def _int8_towers(self) -> tuple[Tower, Tower] | str:
        """(the state tower, the frozen base) each over its own fp32 encoder with an int8 CPU engine, for the served
        passes (`serve_in('int8')`), or why there are none."""
        if self.device.type != "cpu":
            return "int8 serving runs on a CPU (ONNX Runtime); this network is on " + self.device.type
        if not wanted():
            return f"{ENV}=torch keeps every pass in torch"
        towers: list[Tower] = []
        built: dict[int, Any] = {}
        for tower in (self.state_tower, self.chunk_tower):
            if id(tower.encoder) not in built:
                built[id(tower.encoder)] = CPUEngine.build(tower.encoder, int8=True)
            engine, why = built[id(tower.encoder)]
            if engine is None:
                return why
            towers.append(tower.with_engine(engine))
        return towers[0], towers[1]

    @property
    def engine_why(self) -> str:
        """What runs the towers' gradient-free CPU passes, and why (`serve_engine`)."""
        return self._engine_why

    def serve_engine(self) -> Self:
        """On a CPU, run both towers' gradient-free fp32 passes (every served hop, the chunk vectors of an index)
        through ONNX Runtime (`qrag.training.model.onnx_engine`): the same vectors within float rounding, a served
        query in about two thirds of eager torch's time (docs/RESULTS.md). Each tower keeps torch where its encoder
        does not export or disagrees, and for any pass with a gradient, under autocast or after its weights change;
        `engine_why` says what runs. Elsewhere (a GPU, a network in training mode, `QRAG_CPU_ENGINE=torch`) it drops
        the engines. `load_model` calls it for the networks it loads; call it again after changing a network's
        weights by hand. Returns self.

        Raises:
            ValueError: `QRAG_CPU_ENGINE` names no engine.
        """
        self.drop_engines()
        if self.device.type != "cpu" or self.training or not wanted():
            self._engine_why = ("torch: QRAG_CPU_ENGINE=torch" if self.device.type == "cpu" and not self.training
                                else "torch: the network is not serving on a CPU")
            return self
        whys: dict[str, str] = {}
        built: dict[int, tuple[object, str]] = {}
        for name, tower in (("state tower", self.state_tower), ("chunk tower", self.chunk_tower)):
            if tower is self.state_tower and self._parks_state_engine():
                self._state_engine_parked = True
                whys[name] = PARKED
                continue
            if id(tower.encoder) not in built:
                built[id(tower.encoder)] = CPUEngine.build(tower.encoder)
            tower.engine, whys[name] = built[id(tower.encoder)]
        self._engine_why = "; ".join(f"{name}: {why}" for name, why in whys.items())
        return self

    def _parks_state_engine(self) -> bool:
        """Whether the state tower's fp32 engine serves nothing: a low-precision copy serves every gradient-free state
        pass (`_state_tower_for_pass`), and the chunk tower runs an encoder of its own."""
        return self._serving is not None and self.state_tower.encoder is not self.chunk_tower.encoder

    def _park_state_engine(self) -> None:
        """Drop the state tower's fp32 engine while a low-precision copy serves (its session freed with it);
        `serve_in` builds it again when fp32 serves or is timed."""
        engine = self.state_tower.engine
        if engine is not None and self._parks_state_engine():
            engine.release()
            self.state_tower.engine = None
            self._state_engine_parked = True
            self._state_engine_why(PARKED)

    def _restore_state_engine(self) -> None:
        """The state tower's fp32 engine again where `_park_state_engine` dropped it (read from the graph cache)."""
        if not self._state_engine_parked:
            return
        self._state_engine_parked = False
        if self.device.type == "cpu" and not self.training and wanted():
            self.state_tower.engine, why = CPUEngine.build(self.state_tower.encoder)
            self._state_engine_why(why)

    def _state_engine_why(self, why: str) -> None:
        """`engine_why` with the state tower's part replaced by `why` (the chunk tower's kept as it is)."""
        _, sep, chunk = self._engine_why.partition("; chunk tower: ")
        self._engine_why = f"state tower: {why}{sep}{chunk}"

    def drop_engines(self) -> None:
        """Run every pass in torch again (the towers' CPU engines dropped)."""
        self.state_tower.engine = None
        self.chunk_tower.engine = None
        self._state_engine_parked = False
        self._engine_why = "torch"

    def serve_graphed(self) -> Self:
        """On a GPU, replay every gradient-free state pass from a CUDA graph captured once per padded shape
        (`qrag.training.model.graphed`): a served hop then costs its arithmetic, not a few hundred kernel launches. The
        same vectors up to float rounding. Call it last, once the network is on its GPU and in its serving precision
        (`load_model` does); a no-op on a CPU or with `QRAG_CUDA_GRAPHS=0`. Returns self."""
        if self.device.type == "cuda" and os.environ.get("QRAG_CUDA_GRAPHS", "1") != "0" and not self.training:
            self._graphed = GraphedPass(self.state_vectors, self.pad_id)
        return self

    def _state_pass(self) -> object:
        """What encodes states in a gradient-free pass: the graphed pass when serving on a GPU, else
        `served_vectors` (the same vectors, each term computed only where it does not cancel)."""
        return self._graphed if self._graphed is not None and not self.training else self.served_vectors

    @torch.no_grad()
    def served_vectors(self, state_inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, D) `state_vectors` of tokenised states (B, L) in a gradient-free pass, at the floor of its cost
        (`anchors.served_states`): a bare question's anchor terms that cancel are skipped, and `f_0(q)` is encoded
        once per question (`frozen_questions`), not at every hop."""
        tower = self._state_tower_for_pass()
        base = self._base_for_pass(tower)
        shared = self._shared_layers(tower, base)
        if not shared and self.serving_precision != "int8":  # a bf16 copy's f_0 passes stay the fp32 chunk tower's
            return served_states(self.config.state_anchor, tower, self.chunk_tower, state_inputs,
                                 self.tokenizer.sep_token_id, self.frozen_questions)

        def frozen(question: dict[str, torch.Tensor]) -> torch.Tensor:
            return self.frozen_questions(question, base)

        def keep(question: dict[str, torch.Tensor], vectors: torch.Tensor) -> None:
            self._keep_questions(question, vectors, base)

        return served_states(self.config.state_anchor, tower, base, state_inputs, self.tokenizer.sep_token_id, frozen,
                             shared, keep)

    def _base_for_pass(self, tower: Tower) -> Tower:
        """The frozen base a pass of `tower` anchors to: the serving copy's base (its precision) beside the serving
        copy, else the chunk tower."""
        if self._serving is not None and tower is self._serving[1] and self._serving[2] is not None:
            base = self._serving[2]
            if next(base.parameters()).device != self.device:
                base = base.to(self.device)
                self._serving = (self._serving[0], self._serving[1], base)
            return base
        return self.chunk_tower

    def _shared_layers(self, tower: Tower, base: Tower) -> int:
        """How many bottom layers the state tower `tower` shares with the frozen base `base` under anchor 'question'
        (`trunk.shared_layers`; 0 otherwise), found again whenever a weight of either changes. A tower that can train
        shares none: its weights move at every step, and acting keeps the passes it was trained with."""
        # the tensors listed once per tower (walking its module tree costs a millisecond a hop)
        if self.config.state_anchor != "question" or any(t.requires_grad for t in self._watched(tower).tensors):
            return 0
        stamp = (self._watched(tower).stamp(), self._watched(base).stamp())
        cached = self._shared
        if cached is None or cached[0] != stamp:
            cached = self._shared = (stamp, shared_layers(tower.encoder, base.encoder))
        return cached[1]

    def _question_keys(self, question: dict[str, torch.Tensor], base: Tower) -> list[tuple[Any, ...]]:
        """The kept-vector key of each tokenised question piece (B, Lq): autocast setting, the base's precision (its
        weights' dtype, or its int8 engine) and the question's tokens."""
        device = question["input_ids"].device.type
        autocast = (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        engine = base.__dict__.get("engine")
        dtype = "int8" if getattr(engine, "precision", None) == "int8" else next(base.parameters()).dtype
        lengths = question["attention_mask"].sum(dim=1).tolist()
        return [(autocast, dtype, tuple(row[:n])) for row, n in zip(question["input_ids"].tolist(), lengths, strict=True)]

    def _keep_questions(self, question: dict[str, torch.Tensor], vectors: torch.Tensor, base: Tower) -> None:
        """Keep `f_0(q)` of tokenised question pieces (B, Lq) computed elsewhere (`vectors` (B, D): on the state tower's
        trunk at a first hop), as `frozen_questions` keeps what it encodes."""
        keys = self._question_keys(question, base)
        stamp = self._watched(self.chunk_tower).stamp()
        with _QUESTION_VECTORS_LOCK:
            if stamp != self._question_stamp:
                self._question_vectors.clear()
                self._question_stamp = stamp
            for key, vector in zip(keys, vectors, strict=True):
                self._question_vectors[key] = vector.clone()
                self._question_vectors.move_to_end(key)
            while len(self._question_vectors) > QUESTION_VECTORS:
                self._question_vectors.popitem(last=False)

    @torch.no_grad()
    def frozen_questions(self, question: dict[str, torch.Tensor], base: Tower | None = None) -> torch.Tensor:
        """(B, D) `f_0(q)`, the frozen base's vectors of tokenised question pieces `[CLS] q [SEP]` (B, Lq) (`base`: the
        chunk tower, or its serving copy): kept per question, autocast setting and precision (`QUESTION_VECTORS` of
        them, while the chunk tower's weights stay as they are: `weight_stamp`), so a search's later hops and a
        training episode's later steps do not encode the question again. Each kept vector is a copy of its row,
        never a view holding its whole batch."""
        tower = self.chunk_tower if base is None else base
        keys = self._question_keys(question, tower)
        lengths = question["attention_mask"].sum(dim=1).tolist()
        stamp = self._watched(self.chunk_tower).stamp()
        with _QUESTION_VECTORS_LOCK:
            if stamp != self._question_stamp:
                self._question_vectors.clear()
                self._question_stamp = stamp
            current = self._question_stamp
            kept = {key: self._question_vectors.get(key) for key in keys}
        missing = [b for b, key in enumerate(keys) if kept[key] is None]
        if missing:
            idx = torch.tensor(missing, device=question["input_ids"].device)
            width = int(max(lengths[b] for b in missing))
            with eval_mode(tower):
                new = tower(**{k: v[idx][:, :width] for k, v in question.items()})  # (B', D)
            for b, vector in zip(missing, new, strict=True):
                kept[keys[b]] = vector.clone()
        with _QUESTION_VECTORS_LOCK:
            if self._question_stamp is current:  # the weights these were encoded with are still the kept ones
                for key, vector in kept.items():
                    self._question_vectors[key] = vector  # type: ignore[assignment]
                    self._question_vectors.move_to_end(key)
                while len(self._question_vectors) > QUESTION_VECTORS:
                    self._question_vectors.popitem(last=False)
        return torch.stack([kept[key] for key in keys])  # type: ignore[misc]  # (B, D)

    def _watched(self, tower: Tower) -> WatchedTensors:
        """`tower.parameters()`, listed once per tower object (their stamp is read at every served pass; a tower
        whose modules are replaced is listed again after `forget_kept`)."""
        listed = self._tower_tensors.get(id(tower))
        if listed is None or listed[0] is not tower:
            listed = self._tower_tensors[id(tower)] = (tower, WatchedTensors(list(tower.parameters())))
        return listed[1]

    def forget_kept(self) -> None:
        """Drop every vector and layer count kept from the current weights (the kept `f_0(q)`, the shared trunk,
        the fingerprint, the towers' listed tensors): after an edit `weight_stamp` cannot see, or a tower's modules
        replaced."""
        with _QUESTION_VECTORS_LOCK:
            self._question_vectors.clear()
            self._question_stamp = None
        self._shared = None
        self._tower_fp = None
        self._tower_tensors = {}

    def _state_tower_for_pass(self) -> Tower:
        """The serving copy in a gradient-free pass, moved to the network's device if the network moved; else the
        state tower itself."""
        if self._serving is None or torch.is_grad_enabled():
            return self.state_tower
        precision, tower, _ = self._serving
        if next(tower.parameters()).device != self.device:
            self._serving = (precision, tower.to(self.device), self._serving[2])
        return self._serving[1]

    def merge_adapters(self) -> Self:
        """Fold the state tower's LoRA adapters into its weights for serving: each hop's pass then runs plain
        linear layers, the same function up to float rounding.

        A trained chunk tower keeps its adapters: its vectors, and the `chunk_tower_fingerprint` a saved index is
        checked against, stay exactly those of the checkpoint however it was loaded. The network becomes
        inference-only: it stays in eval mode, `train()` raises, and `save_pretrained` still writes the adapters
        as they were. `load_model` does this for the checkpoints it loads; no-op without LoRA or while the
        adapters are untouched (`untrained`: nothing to fold, and a save still names only the base).
        """
        if self._adapters is None and self.config.train_mode == "lora" and not self.untrained:
            adapters = {k: v.detach().clone() for k, v in self.trainable_state_dict().items()}
            if self.state_tower.merge_adapters():
                self.forget_kept()  # the state tower's modules were replaced
                self._adapters = adapters
                self.requires_grad_(False).eval()
                self._recapture()  # graphs captured before replay the unmerged weights
        return self

    def _recapture(self) -> None:
        """Drop the graphs captured so far (they replay the weights they were captured with): the next passes
        capture again."""
        if self._graphed is not None:
            self._graphed = type(self._graphed)(self.state_vectors, self.pad_id)
