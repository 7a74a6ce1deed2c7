"""What an x86 CPU without VNNI does to int8 serving, modelled where it cannot be run (issue "A multi-hop answer at a
plain retriever's price, second round").

ONNX Runtime's int8 matrix products take the input as u8 and the weights as s8. With VNNI (or AMX) each u8·s8
product is summed straight into 32 bits. Without it (AVX2, AVX-512 without VNNI) the kernel multiplies adjacent
pairs along K and adds each pair in 16 bits with saturation before widening, so a pair sum beyond ±32 767 clips.
255·127·2 can reach 64 770: 8-bit weights can clip; weights within ±64 cannot (255·64·2 = 32 640). ONNX Runtime picks
its kernel from the CPU itself, so a VNNI machine cannot run the AVX2 one; this probe computes both in torch.

Every linear layer of the shipped state tower's encoder is replaced, through a forward hook, by the integer
arithmetic of dynamic quantisation as ONNX Runtime does it: the input quantised per pass to u8 with a zero point,
each weight row to s8 with one scale (per channel), the products summed exactly or with the 16-bit pair clip,
then dequantised. Per weight width (8, 7) and kernel (exact, saturating): each paragraph's mean-pooled vector's cosine
to fp32's (min, mean) and the largest share, over the layers, of pair sums that clip. The paragraphs are the project's own prose (README.md,
docs/METHOD.md), no evaluation data.

    python experiments/int8_saturation.py --out experiments/results/int8_saturation.json
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from qrag.eval.ordinary_text import machine
from qrag.training.search.searcher import load_model

ROOT = Path(__file__).resolve().parent.parent
PAIR_LIMIT = 32767
"""The largest 16-bit pair sum."""


def paragraphs(count: int) -> list[str]:
    """The first `count` paragraphs of more than 20 words of README.md and docs/METHOD.md (no evaluation data)."""
    text = "\n\n".join((ROOT / f).read_text(encoding="utf-8") for f in ("README.md", "docs/METHOD.md"))
    return [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.split()) > 20][:count]


def quantised_linear(weight: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor, bits: int, saturate: bool,
                     clipped: list[float]) -> torch.Tensor:
    """`x @ weight.T + bias` as a u8·s8 kernel computes it: per-pass u8 input, per-channel s8 weights of `bits` bits."""
    x = x.float()
    lo, hi = min(0.0, float(x.min())), max(0.0, float(x.max()))
    scale = (hi - lo) / 255 or 1.0
    zero = round(-lo / scale)
    xq = torch.clamp(torch.round(x / scale) + zero, 0, 255).reshape(-1, x.shape[-1])
    qmax = 127 if bits == 8 else 64
    wscale = weight.float().abs().amax(1, keepdim=True).clamp_min(1e-12) / qmax
    wq = torch.round(weight.float() / wscale).clamp(-qmax, qmax)
    pairs = wq.t().reshape(-1, 2, wq.shape[0])  # (K/2, 2, out)
    total, clip = torch.zeros(xq.shape[0], wq.shape[0]), 0
    for start in range(0, xq.shape[0], 32):
        a = xq[start:start + 32].reshape(-1, pairs.shape[0], 2)
        pair = a[:, :, 0, None] * pairs[None, :, 0, :] + a[:, :, 1, None] * pairs[None, :, 1, :]
        if saturate:
            clip += int((pair.abs() > PAIR_LIMIT).sum())
            pair = pair.clamp(-PAIR_LIMIT - 1, PAIR_LIMIT)
        total[start:start + 32] = pair.sum(1)
    clipped.append(clip / (xq.shape[0] * pairs.shape[0] * wq.shape[0]))
    y = (total - zero * wq.sum(1)[None, :]) * scale * wscale.t()
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], wq.shape[0])


def _hooked(mod: torch.nn.Linear, x: torch.Tensor, *, bits: int, saturate: bool, clipped: list[float]) -> torch.Tensor:
    return quantised_linear(mod.weight, mod.bias, x, bits, saturate, clipped)


def pooled(encoder: torch.nn.Module, batch: dict[str, torch.Tensor],
           replace: Callable[[torch.nn.Linear, torch.Tensor], torch.Tensor] | None) -> torch.Tensor:
    hooks = [m.register_forward_hook(lambda mod, args, out: replace(mod, args[0]))
             for m in encoder.modules() if replace is not None and isinstance(m, torch.nn.Linear)]
    try:
        with torch.no_grad():
            hidden = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    finally:
        for h in hooks:
            h.remove()
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return (hidden * mask).sum(1) / mask.sum(1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qrag/hotpotqa-minilm")
    ap.add_argument("--paragraphs", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    net = load_model(args.model)
    encoder = net.state_tower.encoder
    paras = paragraphs(args.paragraphs)
    batch = net.tokenizer(paras, padding=True, truncation=True, max_length=args.max_tokens, return_tensors="pt")
    reference = pooled(encoder, batch, None)
    readings: dict[str, Any] = {}
    for bits in (8, 7):
        for saturate in (False, True):
            clipped: list[float] = []
            got = pooled(encoder, batch, functools.partial(_hooked, bits=bits, saturate=saturate, clipped=clipped))
            cos = F.cosine_similarity(got, reference)
            name = f"{bits}-bit {'saturating' if saturate else 'exact'}"
            readings[name] = {"cosine_min": round(float(cos.min()), 4), "cosine_mean": round(float(cos.mean()), 4),
                              "clipped_pair_share": max(clipped)}
            print(name, readings[name])
    result = {"command": "python experiments/int8_saturation.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": machine(), "model": args.model, "paragraphs": len(paras),
              "tokens": int(batch["attention_mask"].sum()), "readings": readings}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
