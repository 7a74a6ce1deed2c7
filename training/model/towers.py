"""The towers' building blocks: the pooled encoder tower, its train modes, state tokens, the per-model lock.

Train modes: full, LoRA, top layers; the token plumbing splices a state's pieces; the lock serialises encoder calls.

Shape legend: B batch, L tokens, D vector dim.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from qrag.training.model.config import PRECISIONS as PRECISIONS
from qrag.training.model.config import ModelConfig, Precision
from qrag.training.model.precision import choose_precision
from qrag.training.model.trunk import run_top, run_trunk
from qrag.training.overlay import ConfigError

# Fast HF tokenizers refuse concurrent calls that set truncation/padding ("Already borrowed"), so encoder
# calls are serialised per model; scoring and top-k run outside the lock.
_MODEL_LOCKS: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def model_lock(model: Any) -> threading.Lock:
    """The lock that serialises encoder calls on `model` (shared by every searcher and adapter)."""
    with _LOCKS_GUARD:
        lock = _MODEL_LOCKS.get(model)
        if lock is None:
            lock = _MODEL_LOCKS[model] = threading.Lock()
        return lock


# On a GPU, torch may pick cuDNN's attention, which builds an execution plan for every new (batch, length)
# shape: training's state batches change shape at every step, and a plan build cost tens of milliseconds per
# call (measured on an H100: 8 ms per forward attention call, 90 ms per backward, against 0.3 ms once built).
# The memory-efficient kernel takes padding masks and needs no plans; the math kernel is the fallback.
_GPU_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def attention_kernels(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The scaled-dot-product attention kernels the towers use on `device` (torch's own choice on a CPU)."""
    return sdpa_kernel(_GPU_ATTENTION) if device.type == "cuda" else contextlib.nullcontext()


class Tower(nn.Module):
    """An encoder followed by masked mean pooling, optional L2 normalisation and division by `scale` (no head)."""

    def __init__(self, encoder: PreTrainedModel | nn.Module, scale: float, normalize: bool = False) -> None:
        super().__init__()
        self.encoder = encoder
        self.scale = scale
        self.normalize = normalize
        self.engine: Any = None  # a CPU engine for gradient-free passes (`qrag.training.model.onnx_engine`), or None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        engine = self.__dict__.get("engine")
        if engine is not None and self._engine_may_run(input_ids):
            hidden = engine.run(input_ids, attention_mask)  # (B, L, D), or None: the weights changed since its export
            if hidden is not None:
                return self.pool(hidden, attention_mask)
            self.engine = None
        with attention_kernels(input_ids.device):
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, L, D)
        return self.pool(hidden, attention_mask)

    def _engine_may_run(self, input_ids: torch.Tensor) -> bool:
        """A pass the CPU engine computes as torch would: no gradient, eval mode, a CPU batch, no autocast."""
        return (not torch.is_grad_enabled() and not self.training and not self.encoder.training
                and input_ids.device.type == "cpu" and not torch.is_autocast_enabled("cpu"))

    def with_engine(self, engine: Any) -> Tower:
        """A tower over this one's encoder (shared, not copied), pooling and scale whose gradient-free CPU passes run
        `engine` (`serve_in('int8')`); where the engine gives way (the weights changed), it runs the shared encoder."""
        other = Tower(self.encoder, self.scale, self.normalize)
        other.engine = engine
        other.training = False  # its own flag only: `.eval()` would walk the shared encoder
        return other

    def __getstate__(self) -> dict[str, Any]:
        """A copy (`copy.deepcopy`, pickling) carries no engine: the engine watches this tower's own weights."""
        state = self.__dict__.copy()
        state["engine"] = None
        return state

    def trunk(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, top: int) -> torch.Tensor:
        """(B, L, H) the encoder's embeddings and every layer below its top `top` (`qrag.training.model.trunk`)."""
        with attention_kernels(input_ids.device):
            return run_trunk(self.encoder, input_ids, attention_mask, top)

    def from_trunk(self, hidden: torch.Tensor, attention_mask: torch.Tensor, top: int) -> torch.Tensor:
        """(B, D) the tower's vectors from the trunk's output `hidden`: its top `top` layers, then pooling."""
        with attention_kernels(hidden.device):
            return self.pool(run_top(self.encoder, hidden, attention_mask, top), attention_mask)

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, D) masked mean of the last hidden state (B, L, H), normalised and scaled as configured."""
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, L, 1)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # (B, D)
        if self.normalize:
            pooled = F.normalize(pooled, dim=-1)  # (B, D) unit rows
        return pooled / self.scale

    def merge_adapters(self) -> bool:
        """Fold LoRA adapters into the encoder's weights (one matmul per layer instead of three); True if any."""
        merge = getattr(self.encoder, "merge_and_unload", None)
        if not callable(merge):
            return False
        self.encoder = merge()
        return True


@contextlib.contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """`module.eval()` for the block, then every submodule's own training flag back (`.train(True)` would
    also turn on the dropout of a pretrained encoder loaded in eval mode inside a training-mode wrapper).

    A module whose own flag says eval is taken as in eval mode throughout (`.eval()` sets every submodule): a served
    network is not walked on every pass (its few hundred submodules cost about half a millisecond a hop)."""
    if not module.training:
        yield
        return
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, mode in modes:
            m.training = mode


def _question_lengths(ids: torch.Tensor, mask: torch.Tensor, sep_id: int) -> torch.Tensor:
    """(B,) tokens of each state row's question piece: up to and including its first [SEP], the whole row without one."""
    is_sep = (ids == sep_id) & mask.bool()  # (B, L)
    return torch.where(is_sep.any(dim=1), is_sep.int().argmax(dim=1) + 1, mask.sum(dim=1))


def question_inputs(state_inputs: dict[str, torch.Tensor], sep_id: int) -> dict[str, torch.Tensor]:
    """The question piece of tokenised states `[CLS] q [SEP] c1 [SEP] …`: ids and mask up to and including each
    row's first [SEP] (the whole row where there is none), cut to the longest such prefix.

    Attending to the prefix alone gives the same vector as encoding `[CLS] q [SEP]` by itself: the question
    comes first, so its positions do not change.
    """
    ids, mask = state_inputs["input_ids"], state_inputs["attention_mask"]  # (B, L)
    length = _question_lengths(ids, mask, sep_id)  # (B,)
    width = int(length.max())
    keep = torch.arange(width, device=ids.device).unsqueeze(0) < length.unsqueeze(1)  # (B, width)
    return {"input_ids": ids[:, :width], "attention_mask": mask[:, :width] * keep.to(mask.dtype)}


def passage_inputs(state_inputs: dict[str, torch.Tensor], sep_id: int) -> dict[str, torch.Tensor]:
    """The passages of tokenised states `[CLS] q [SEP] c1 [SEP] …` without their question: `[CLS] c1 [SEP] …`,
    left-aligned and cut to the longest row. A bare question becomes `[CLS]` alone (a row without [SEP] too).

    Encoding the result gives the same vector as tokenising `[CLS] c1 [SEP] c2 [SEP] …` on its own.
    """
    ids, mask = state_inputs["input_ids"], state_inputs["attention_mask"]  # (B, L)
    cut = _question_lengths(ids, mask, sep_id) - 1  # (B,) tokens dropped after [CLS]: the question and its [SEP]
    length = mask.sum(dim=1) - cut  # (B,) [CLS] plus the passages
    width = int(length.max())
    j = torch.arange(width, device=ids.device).unsqueeze(0)  # (1, width)
    src = torch.where(j == 0, torch.zeros_like(j), j + cut.unsqueeze(1)).clamp(max=ids.shape[1] - 1)  # (B, width)
    keep = (j < length.unsqueeze(1)).to(mask.dtype)  # (B, width)
    return {"input_ids": ids.gather(1, src).masked_fill(keep == 0, 0), "attention_mask": keep}


def state_token_ids(tokenizer: Any, question: str, chunks: Sequence[str], piece_tokens: int, state_tokens: int,
                    passage_tokens: int | None = None) -> list[int]:
    """`[CLS] q [SEP] c1 [SEP] c2 [SEP]` (a tokenizer without [CLS]/[SEP] uses BOS/EOS), each piece cut to
    `piece_tokens` on its own (each chunk's to `passage_tokens` where given), the whole to `state_tokens`."""
    cut = piece_tokens if passage_tokens is None else passage_tokens
    pieces = tokenizer([question, *chunks], add_special_tokens=False, truncation=True,
                       max_length=max(piece_tokens, cut))["input_ids"]
    pieces = [pieces[0][:piece_tokens], *(p[:cut] for p in pieces[1:])]
    cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    sep_id = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    ids: list[int] = [cls_id] if cls_id is not None else []
    for piece in pieces:
        ids.extend(piece)
        if sep_id is not None:
            ids.append(sep_id)
    return ids[:state_tokens]


# Copies of fast tokenizers' Rust backends, one per (tokenizer, truncation length), for whole-corpus encodes:
# the transformers wrapper converts every encoding in Python (3.4 s for 50 000 sentences on a GPU box, where
# MiniLM's bf16 forward over them takes 0.3 s); the backend encodes the batch in parallel and we read the ids.
# Copies, so the wrapper's own per-call truncation settings never race with ours.
_BACKENDS: weakref.WeakKeyDictionary[Any, dict[int | None, Any]] = weakref.WeakKeyDictionary()


def _backend(tokenizer: Any, max_tokens: int | None) -> Any:
    """`tokenizer`'s Rust backend truncating to `max_tokens` (None: no truncation), or None for a slow tokenizer."""
    source = getattr(tokenizer, "backend_tokenizer", None)
    if source is None:
        return None
    with _LOCKS_GUARD:
        copies = _BACKENDS.setdefault(tokenizer, {})
        if max_tokens not in copies:
            backend = type(source).from_str(source.to_str())
            backend.no_padding()
            if max_tokens is None:
                backend.no_truncation()
            else:
                backend.enable_truncation(max_tokens)
            copies[max_tokens] = backend
        return copies[max_tokens]


def token_rows(tokenizer: Any, texts: Sequence[str], max_tokens: int | None) -> list[list[int]]:
    """Token ids of `texts` with special tokens, each cut to `max_tokens` (None: whole), in one batch call."""
    backend = _backend(tokenizer, max_tokens)
    if backend is None:
        kwargs = {"truncation": True, "max_length": max_tokens} if max_tokens is not None else {"verbose": False}
        return list(tokenizer(list(texts), **kwargs)["input_ids"])
    encodings = backend.encode_batch_fast(list(texts), add_special_tokens=True)
    return [e.ids for e in encodings]


def window_rows(tokenizer: Any, texts: Sequence[str], max_tokens: int, stride: int | None = None
                ) -> tuple[list[list[int]], list[int]]:
    """Token rows of the later windows of every text longer than `max_tokens` (special tokens included), and the
    index of the text each belongs to. A text's first window is its cut row (`towers.token_rows`), not repeated.

    Windows hold `max_tokens` tokens with the tokenizer's special tokens; they start every `stride` text tokens
    (None: half a window's text, so each window shares half its text with the next: 127 for 256 tokens), and a
    last window ends at the text's last token when the strides do not reach it.
    """
    prefix, suffix = _special_ends(tokenizer)
    body = max_tokens - len(prefix) - len(suffix)
    stride = max(1, body // 2) if stride is None else stride
    if body < 1 or stride < 1:
        raise ValueError(f"windows need max_tokens above the {len(prefix) + len(suffix)} special tokens and stride "
                         f">= 1, got max_tokens={max_tokens}, stride={stride}.")
    rows: list[list[int]] = []
    owner: list[int] = []
    for i, ids in enumerate(tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]):
        if len(ids) <= body:
            continue
        starts = list(range(stride, len(ids) - body + 1, stride))
        if not starts or starts[-1] + body < len(ids):
            starts.append(len(ids) - body)
        for s in starts:
            rows.append([*prefix, *ids[s : s + body], *suffix])
            owner.append(i)
    return rows, owner


def _special_ends(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special token ids a tokenizer puts before and after a text ([CLS] and [SEP] for BERT's)."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    at = next((i for i in range(len(full) - len(plain) + 1) if full[i : i + len(plain)] == plain), 0)
    return full[:at], full[at + len(plain):]


def token_rows_and_lengths(tokenizer: Any, texts: Sequence[str], max_tokens: int) -> tuple[list[list[int]], list[int]]:
    """`token_rows(tokenizer, texts, max_tokens)` and each text's whole length in tokens (special tokens included),
    from one batch call: the backend keeps what truncation cut as overflow pieces, each with its own special
    tokens, so the whole length is the kept ids plus the overflow pieces' ids less their special tokens."""
    backend = _backend(tokenizer, max_tokens)
    if backend is None:  # a slow tokenizer: two passes
        return token_rows(tokenizer, texts, max_tokens), [len(r) for r in token_rows(tokenizer, texts, None)]
    special = backend.post_processor.num_special_tokens_to_add(False) if backend.post_processor is not None else 0
    encodings = backend.encode_batch_fast(list(texts), add_special_tokens=True)
    lengths = [len(e.ids) + sum(len(o.ids) - special for o in e.overflowing) for e in encodings]
    return [e.ids for e in encodings], lengths


def encode_longest_first(encode: Callable[[dict[str, torch.Tensor]], torch.Tensor],
                         tokenize: Callable[[list[int]], dict[str, torch.Tensor]], lengths: list[int], batch_size: int,
                         dim: int, device: torch.device, *, desc: str, show: bool) -> torch.Tensor:
    """(N, dim) float32 vectors of N texts, encoded in batches of similar length (longest first, so padding is
    small and the first batch shows the peak memory); `tokenize(rows)` gives the inputs of those rows."""
    out = torch.empty(len(lengths), dim, device=device)  # (N, D)
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    for start in tqdm(range(0, len(order), batch_size), desc=desc, disable=not show or not order, unit="batch"):
        idx = order[start : start + batch_size]
        inputs = {k: to_device(v, device) for k, v in tokenize(idx).items()}
        out[to_device(torch.tensor(idx), device)] = encode(inputs).float()
    return out


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CPU tensor on `device`; to a GPU through pinned memory, asynchronously (the copy overlaps the work
    already queued)."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def tensors_digest(tensors: Sequence[tuple[str, torch.Tensor]], algorithm: str, hex_chars: int, prefix: str = "") -> str:
    """A hex digest of named tensors' float32 bytes (after `prefix`), `hex_chars` long."""
    h = hashlib.blake2b(digest_size=hex_chars // 2) if algorithm == "blake2b" else hashlib.new(algorithm)
    h.update(prefix.encode())
    for name, tensor in tensors:
        h.update(name.encode())
        h.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:hex_chars]


_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
PRECISION_OF_DTYPE: dict[torch.dtype, Precision] = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def precision_autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    """Autocast to `precision` on `device` ('fp32', or 'bf16'/'auto' without native bf16: nothing changes).

    Raises:
        ValueError: an unknown precision, or 'fp16' on a CPU (no fast fp16 there).
    """
    dtype = low_precision_dtype(device, precision)
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def check_precision(precision: str) -> None:
    """Refuse a value that names no precision (`PRECISIONS`), naming it.

    Raises:
        ValueError: `precision` is not one of `PRECISIONS`.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be 'fp32', 'bf16', 'fp16', 'int8' or 'auto', got {precision!r}.")


def low_precision_dtype(device: torch.device, precision: str) -> torch.dtype | None:
    """The dtype `precision` runs as on `device` (None for fp32): 'auto' is bf16 where the device has native bf16,
    and 'bf16' where it has none runs fp32 with a RuntimeWarning (`qrag.training.model.precision.choose_precision`).

    Raises:
        ValueError: an unknown precision, or 'fp16' on a CPU (no fast fp16 there).
    """
    check_precision(precision)
    if precision == "int8":
        raise ValueError("precision 'int8' is a serving precision (QNetwork.serve_in, a retriever's precision=): "
                         "torch passes and an index's embedding run in 'fp32' or 'bf16'.")
    precision, _ = choose_precision(precision, device)
    if precision == "fp32":
        return None
    if precision == "fp16" and device.type == "cpu":
        raise ValueError("precision='fp16' needs a GPU; on a CPU use 'bf16' (fast with AVX512-BF16/AMX) or 'fp32'.")
    return _AUTOCAST[precision]


def pad_rows(rows: Sequence[Sequence[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Token-id rows → right-padded (B, L) `input_ids` and `attention_mask` (one vectorised fill, no per-row
    tensors)."""
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))  # (B,)
    width = int(lengths.max())
    mask = np.arange(width)[None, :] < lengths[:, None]  # (B, L)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)  # (B, L)
    ids[mask] = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
    return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask.astype(np.int64))}


def apply_train_mode(encoder: nn.Module, config: ModelConfig) -> nn.Module:
    """Freeze or wrap the encoder so that only what `train_mode` names is trainable; `config.dropout`, when set,
    becomes the probability of the encoder's own dropout layers (LoRA's adapter dropout is `lora_dropout`)."""
    if config.dropout is not None:
        for module in encoder.modules():
            if isinstance(module, nn.Dropout):
                module.p = float(config.dropout)
    if config.train_mode == "full":
        return encoder
    if config.train_mode == "lora":
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(
            r=config.lora_rank,
            lora_alpha=config.lora_alpha,  # type: ignore[arg-type]  # PEFT annotates int, accepts float
            lora_dropout=config.lora_dropout,
            target_modules=config.lora_target_modules,
            bias="none",
        )
        try:
            with warnings.catch_warnings():
                # peft probes the deprecated `is_gradient_checkpointing` attribute of transformers' models; the
                # probe's FutureWarning says nothing about the user's code, so it is not shown on every load.
                warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
                return get_peft_model(encoder, lora)  # type: ignore[arg-type]
        except ValueError as e:
            raise ConfigError(f"cannot add LoRA adapters to this encoder ({e}); set model.lora_target_modules.") from None
    # top_layers: the last `trainable_layers` transformer blocks (and anything after them) train.
    layer_of = {n: _layer_index(n) for n, _ in encoder.named_parameters()}
    indices = [i for i in layer_of.values() if i is not None]
    if not indices:
        raise ConfigError("train_mode='top_layers' found no numbered transformer layers in this encoder; use 'lora' or 'full'.")
    first = max(indices) + 1 - config.trainable_layers
    for name, p in encoder.named_parameters():
        idx = layer_of[name]
        p.requires_grad = idx is not None and idx >= first
    return encoder


def _layer_index(name: str) -> int | None:
    parts = name.split(".")
    for prev, cur in zip(parts, parts[1:], strict=False):
        if prev in {"layer", "layers", "h", "block", "blocks"} and cur.isdigit():
            return int(cur)
    return None
