"""What serving adds to a `QNetwork`: state passes on a low-precision copy of the state tower (`serve_in`), replayed
as CUDA graphs on a GPU (`serve_graphed`), and LoRA adapters folded into the weights (`merge_adapters`). Training
never sees any of them: `train()` drops the copy and the graphs and refuses a network whose adapters were merged.
"""

from __future__ import annotations

import copy
import os
from typing import TYPE_CHECKING, Self

import torch
from torch import nn

from qrag.training.config import ModelConfig
from qrag.training.graphed import GraphedPass
from qrag.training.towers import PRECISION_OF_DTYPE, Precision, Tower, low_precision_dtype


class ServingMixin(nn.Module):
    """Serving precision and merged adapters; `QNetwork` sets `_serving` and `_adapters` to None at construction."""

    state_tower: Tower
    config: ModelConfig
    _serving: tuple[Precision, Tower] | None  # `serve_in`: a low-precision copy of the state tower
    _adapters: dict[str, torch.Tensor] | None  # the LoRA tensors, once merged for serving
    _graphed: GraphedPass | None  # `serve_graphed`: state passes replayed as CUDA graphs

    if TYPE_CHECKING:  # defined by QNetwork
        @property
        def device(self) -> torch.device: ...

        @property
        def pad_id(self) -> int: ...

        def state_vectors(self, state_inputs: dict[str, torch.Tensor]) -> torch.Tensor: ...

        @property
        def untrained(self) -> bool: ...

        def trainable_state_dict(self) -> dict[str, torch.Tensor]: ...

    @property
    def serving_precision(self) -> Precision:
        """The state tower's arithmetic in gradient-free passes ('fp32' unless `serve_in` chose another)."""
        return self._serving[0] if self._serving is not None else "fp32"

    def serve_in(self, precision: Precision) -> Self:
        """Run the gradient-free state passes (every served hop) on a copy of the state tower with its weights in
        `precision`: 'bf16' is faster on a CPU with bf16 units (AVX512-BF16, AMX) and moves the state vectors by
        rounding only (docs/RESULTS.md measures both); 'fp16' is for GPUs; 'fp32' drops the copy; 'auto' is bf16
        where the device has native bf16, and 'bf16' on a CPU without it warns and drops the copy.

        The fp32 tower stays as it is: passes with gradients (training), the chunk tower, the index and
        `save_pretrained` never see the copy, and `train()` drops it. The copy is taken now: call `serve_in`
        again after loading other weights into the state tower. Returns self.

        Raises:
            ValueError: an unknown precision, 'fp16' on a CPU, or a network in training mode.
        """
        dtype = low_precision_dtype(self.device, precision)
        self._recapture()
        if dtype is None:
            self._serving = None
            return self
        if self.training:
            raise ValueError("serve_in is for serving: put the network in eval mode first (model.eval()); training "
                             "passes keep the fp32 state tower.")
        self._serving = (PRECISION_OF_DTYPE[dtype], copy.deepcopy(self.state_tower).to(dtype).requires_grad_(False).eval())
        return self

    def serve_graphed(self) -> Self:
        """On a GPU, replay every gradient-free state pass from a CUDA graph captured once per padded shape
        (`qrag.training.graphed`): a served hop then costs its arithmetic, not a few hundred kernel launches. The
        same vectors up to float rounding. Call it last, once the network is on its GPU and in its serving precision
        (`load_model` does); a no-op on a CPU or with `QRAG_CUDA_GRAPHS=0`. Returns self."""
        if self.device.type == "cuda" and os.environ.get("QRAG_CUDA_GRAPHS", "1") != "0" and not self.training:
            self._graphed = GraphedPass(self.state_vectors, self.pad_id)
        return self

    def _state_pass(self) -> object:
        """What encodes states in a gradient-free pass: the graphed pass when serving on a GPU, else the plain one."""
        return self._graphed if self._graphed is not None and not self.training else self.state_vectors

    def _state_tower_for_pass(self) -> Tower:
        """The serving copy in a gradient-free pass, moved to the network's device if the network moved; else the
        state tower itself."""
        if self._serving is None or torch.is_grad_enabled():
            return self.state_tower
        precision, tower = self._serving
        if next(tower.parameters()).device != self.device:
            self._serving = (precision, tower.to(self.device))
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
                self._adapters = adapters
                self.requires_grad_(False).eval()
                self._recapture()  # graphs captured before replay the unmerged weights
        return self

    def _recapture(self) -> None:
        """Drop the graphs captured so far (they replay the weights they were captured with): the next passes
        capture again."""
        if self._graphed is not None:
            self._graphed = type(self._graphed)(self.state_vectors, self.pad_id)

    def train(self, mode: bool = True) -> Self:
        if mode and self._adapters is not None:
            raise RuntimeError("this network's LoRA adapters were merged into its weights for serving "
                               "(load_model does that); load the checkpoint with QNetwork.from_pretrained to train it.")
        if mode:
            self._serving = None  # a network that trains serves from the tower it trains
            self._graphed = None
        return super().train(mode)
