"""What the probes over SQuAD-format validation files share: their common flags and the refusal of evaluation-only
files (the NYT, Reddit and SQuAD dev files judge; a probe chooses, so it reads new_wiki and amazon_reviews only). A
file is refused by its name or by its bytes (qrag.training.data.evaluation_only): a renamed copy is refused too."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from qrag.training.data.evaluation_only import recognise


def squad_probe_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser with the flags every such probe takes: --squad (repeat), --model, --num-questions, --seed,
    --chunk-vectors, --out."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--squad", action="append", required=True, help="a validation SQuAD-format file (repeat)")
    p.add_argument("--model", default="qrag/hotpotqa-minilm")
    p.add_argument("--num-questions", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk-vectors", type=Path, default=None, help="folder that keeps chunk vectors between runs")
    p.add_argument("--out", type=Path, required=True)
    return p


def parse_validation_args(p: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`p`'s arguments, an evaluation-only --squad file refused (exit 2, named)."""
    args = p.parse_args(argv)
    for f in args.squad:
        found = recognise(f)
        if found is not None:
            p.error(f"{f} is an evaluation-only file ({found.name}, known by its {' and '.join(found.by)}): this "
                    f"probe chooses, so it reads validation files only")
    return args
