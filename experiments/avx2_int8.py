"""Int8 serving on a CPU with AVX2 and neither AVX-512 nor VNNI: ONNX Runtime's own kernels, run on an emulated CPU.

ONNX Runtime picks its integer kernels from what the CPU itself says it has (CPUID), so the AVX2 kernel cannot run
on a VNNI machine as it is. A user-mode emulator that presents an AVX2-only CPU can: under `qemu-x86_64 -cpu Haswell`
the same process sees AVX2 and FMA, no AVX-512 and no VNNI (torch reports its capability 'AVX2'), and ONNX Runtime
takes its AVX2 u8·s8 kernel, the one that adds neighbouring products in 16 bits with saturation
(`training/model/onnx_engine.py`; `experiments/int8_saturation.py` models it in torch). Times under the emulator
mean nothing and none are taken: this probe reads the vectors.

`dump` runs the shipped state tower's int8 graph (the graph cached on disk by a native run first, so both read the
same bytes) on the project's own prose (README.md, docs/METHOD.md: no evaluation data) and writes each paragraph's
vector as the tower pools it with fp32 torch's (skipped under the emulator: `--no-reference`); `compare` reads the dumps of
the same width from two CPUs and writes, per width, the cosine between the two CPUs' vectors and each CPU's cosine to
the native fp32 (min, mean).

    python experiments/avx2_int8.py dump --bits 7 --out runs/avx2_int8/native_7.json
    qemu-x86_64 -cpu Haswell .venv/bin/python experiments/avx2_int8.py dump --bits 7 --no-reference \
        --out runs/avx2_int8/haswell_7.json
    (the same for --bits 8)
    python experiments/avx2_int8.py compare --dir runs/avx2_int8 --out experiments/results/avx2_int8.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from int8_saturation import paragraphs  # the same paragraphs that probe reads


def cmd_dump(args: argparse.Namespace) -> int:
    os.environ["QRAG_INT8_WEIGHTS"] = str(args.bits)
    os.environ["QRAG_CPU_ENGINE"] = "torch"  # the model serves no engine of its own: the one below is the only session
    from qrag.training.model import onnx_engine
    from qrag.training.model.towers import tensors_digest
    from qrag.training.search.searcher import load_model

    torch.set_num_threads(1)
    net = load_model(args.model)  # its adapters merged, as it serves
    tower = net.state_tower
    encoder = tower.encoder
    batch = net.tokenizer(paragraphs(args.paragraphs), padding=True, truncation=True, max_length=args.max_tokens,
                          return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    reference = None
    if not args.no_reference:  # fp32 torch, skipped under the emulator (each pass there takes minutes)
        with torch.no_grad():
            reference = tower.pool(encoder(input_ids=ids, attention_mask=mask).last_hidden_state, mask).tolist()
    # the session itself, not `CPUEngine.build`: its cosine check could refuse a saturating kernel, whose vectors
    # are what this probe reads
    digest = tensors_digest(sorted(encoder.state_dict().items()), "blake2b", 32, prefix=type(encoder).__name__)
    session, cached = onnx_engine._kept(digest, 1, encoder, args.bits)
    engine = onnx_engine.CPUEngine(encoder, digest, session, 1, args.bits)
    got = engine.run(ids, mask)
    assert got is not None
    why = None if args.no_reference else onnx_engine.CPUEngine.build(encoder, int8=True)[1]
    out = {"command": "python experiments/avx2_int8.py " + " ".join(sys.argv[1:]),
           "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine(),
           "bits": args.bits, "graph_from_cache": cached, "engine_build": why, "tokens": int(mask.sum()),
           "int8": tower.pool(got, mask).tolist(), "fp32": reference}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out) + "\n", encoding="utf-8")
    print(args.out, out["torch_cpu_capability"], why)
    return 0


def _cosines(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    cos = F.cosine_similarity(a, b)
    return {"min": round(float(cos.min()), 6), "mean": round(float(cos.mean()), 6)}


def cmd_compare(args: argparse.Namespace) -> int:
    readings: dict[str, Any] = {}
    for bits in (7, 8):
        native, emulated = (json.loads((args.dir / f"{name}_{bits}.json").read_text(encoding="utf-8"))
                            for name in ("native", "haswell"))
        a, b = torch.tensor(native["int8"]), torch.tensor(emulated["int8"])
        readings[f"{bits}-bit"] = {
            "cpus": [native["torch_cpu_capability"], emulated["torch_cpu_capability"]],
            "graph_from_cache": [native["graph_from_cache"], emulated["graph_from_cache"]],
            "engine_build": [native["engine_build"], emulated["engine_build"]],
            "between_cpus_cosine": _cosines(a, b), "between_cpus_max_abs": float((a - b).abs().max()),
            "native_to_fp32": _cosines(a, torch.tensor(native["fp32"])),
            "emulated_to_fp32": _cosines(b, torch.tensor(native["fp32"])),  # the native CPU's fp32 torch
        }
        print(bits, readings[f"{bits}-bit"])
    from qrag.eval.ordinary_text import machine

    result = {"command": "python experiments/avx2_int8.py " + " ".join(sys.argv[1:]), "native_machine": machine(),
              "emulated": "qemu-x86_64 7.2 -cpu Haswell (avx2 fma; no avx512, no vnni)", "tokens": native["tokens"],
              "readings": readings}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--model", default="qrag/hotpotqa-minilm")
    d.add_argument("--bits", type=int, choices=(7, 8), required=True)
    d.add_argument("--paragraphs", type=int, default=8)
    d.add_argument("--max-tokens", type=int, default=128)
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--no-reference", action="store_true",
                   help="skip fp32 torch's vectors and the engine's own build check (compare reads the native ones)")
    c = sub.add_parser("compare")
    c.add_argument("--dir", type=Path, required=True)
    c.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    return {"dump": cmd_dump, "compare": cmd_compare}[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
