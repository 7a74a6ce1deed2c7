"""The README's main job: a short CPU training run on the bundled encoder that shows what it learned.

    make demo            # or: python -m training.demo [--minutes 10] [--output-dir runs/demo]

It trains LoRA adapters on the bundled all-MiniLM-L6-v2 with soft Q(λ) on BabiLong-style bAbI qa1
haystacks (preset `cpu-small`), evaluates the same validation episodes before and after, and prints one
question answered hop by hop with its Q-values. Interrupt it and run it again: it resumes.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from training.cli import build_episodes
from training.config import load_preset
from training.data.episode import Episode
from training.index import ChunkIndex
from training.qnet import QNetwork
from training.search import MultiHopSearcher, SearchConfig
from training.trainer import Trainer, evaluate, read_best_eval


def show_hops(qnet: QNetwork, episode: Episode, max_hops: int) -> None:
    """The multi-hop searcher on one episode: every hop with its Q-value, and where the stop rule cuts."""
    index = ChunkIndex.from_texts(qnet, episode.chunks, ids=[str(i) for i in range(episode.num_chunks)])
    result = MultiHopSearcher(qnet, index, SearchConfig(k=max_hops, max_hops=max_hops)).search_one(episode.question)
    print(f"\nQ: {episode.question}   (gold answer: {episode.answer}; supporting chunks {list(episode.supporting)})")
    for hit in result.hits:
        i = int(hit.chunk.id)
        gold = "gold" if i in episode.supporting else "    "
        stop = "  (past the stop rule: dropped when k is not given)" if hit.past_stop else ""
        print(f"  hop {hit.hop}: Q={hit.q_value:+.3f} {gold} [{i:3d}] {hit.chunk.text}{stop}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="training time budget (default 10)")
    parser.add_argument("--output-dir", default="runs/demo")
    args = parser.parse_args(argv)

    config = load_preset("cpu-small")
    config.trainer.output_dir = args.output_dir
    config.trainer.max_minutes = args.minutes
    config.trainer.resume = True  # a second run continues the first
    train, val = build_episodes(config.data)
    print(f"qrag demo: {len(train)} training / {len(val)} validation episodes "
          f"(bAbI {config.data.task}, {config.data.num_sentences}-sentence haystacks), encoder {config.model.encoder}")
    trainer = Trainer(config, train, val)
    before = evaluate(trainer.online, val, config.env)
    print(f"before training: {json.dumps(before)}")
    summary = trainer.train()
    best_dir = Path(args.output_dir) / "best"
    model = QNetwork.from_pretrained(best_dir) if best_dir.is_dir() else trainer.online
    after = read_best_eval(args.output_dir) or evaluate(model, val, config.env)
    print(f"after training ({summary['transitions']} transitions, {summary['seconds'] / 60:.1f} min this run): "
          f"{json.dumps(after)}")
    for episode in val[:2]:
        show_hops(model, episode, config.env.max_steps)
    print(f"\nmodel saved in {best_dir} (load it with QNetwork.from_pretrained)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
