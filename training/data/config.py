"""Where training and validation episodes come from: `DataConfig`, the `data` section of a training config."""

from __future__ import annotations

from dataclasses import dataclass

from qrag.training.data.evaluation_only import refuse_evaluation_only
from qrag.training.overlay import ConfigError

OWN_DATA = ("Train and validate on your own questions (--data.source corpus or jsonl) or on a training split "
            "(e.g. --data.source hotpotqa_pool, wiki)")
"""What to use instead of an evaluation-only file, the end of the refusal."""


@dataclass
class DataConfig:
    """Where training and validation episodes come from (see `qrag.training.data.load_episodes`)."""

    source: str = "babilong"
    """Data source: babi, babilong, ruler_niah, hotpotqa, musique, 2wiki, jsonl, ..."""
    task: str | None = "qa2"
    """Task or subtask within the source (e.g. qa1..qa5, niah_multivalue); comma-separated to mix."""
    train_path: str | None = None
    """Training file (file-based sources such as jsonl, hotpotqa; the `corpus` source's questions)."""
    corpus: str | None = None
    """`corpus` source: your passages, a JSON Lines file of {"id", "text"} or a folder of .txt/.md files (the
    questions of `train_path` name their supporting passages by id)."""
    val_path: str | None = None
    """Validation file; without it a validation split is generated or held out from training."""
    num_sentences: int | None = 100
    """Haystack length in sentences for generated long-document sources."""
    num_train: int = 2000
    """Training episodes to generate or to keep (0: all of a file)."""
    num_val: int = 100
    """Validation episodes (never the test split)."""
    seed: int = 0
    """Seed of the data generators."""
    num_distractors: int | None = None
    """`wiki` source: non-gold pages per episode (None: the source's default, 30). Larger pools are closer to
    searching a whole corpus. `hotpotqa_pool` and `corpus`: hard and random negatives per episode (None: the whole
    pool or corpus)."""
    filler_sentences: int | None = None
    """`babilong` source: draw every haystack's background from one pool of this many sentences per split
    (training and validation share one, the test split has its own); None: all of the text sources."""
    confusers: float = 0.0
    """`babilong` source: the share of each training and validation haystack's background slots given to sentences
    of the text sources that name the story's people, rooms or objects (`qrag.training.data.confusers`), what a
    10M-token haystack is full of; 0: the background as it comes. The test split never has them."""
    rehearse: str | None = None
    """A generated source (`NAME` or `NAME:TASK`, e.g. hotpotqa_pool, what qrag/hotpotqa-minilm learned on) whose
    training episodes are mixed into the training set, so that a fine-tune keeps what its starting model knew
    (rehearsal); validation stays yours. None: your episodes alone."""
    rehearse_share: float = 0.3
    """With `rehearse`: the share of the training episodes drawn from it (0 < share < 1). Whether the rehearsed
    source exists is checked where episodes are built (`qrag.training.data.build.rehearsed_source`)."""

    def validate(self) -> None:
        for name in ("num_train", "num_val"):
            value = getattr(self, name)
            if value < 0:
                raise ConfigError(f"data.{name} must be >= 0 (0: all of a file), got {value}.")
        if (self.corpus is None) != (self.source != "corpus"):
            raise ConfigError("data.corpus goes with data.source corpus (your questions over your passages): pass "
                              f"both --data.source corpus and --data.corpus PATH (got source {self.source!r}, corpus "
                              f"{self.corpus!r}).")
        if self.num_distractors is not None:
            if self.source not in ("wiki", "hotpotqa_pool", "corpus"):
                raise ConfigError(f"data.num_distractors applies to the wiki, hotpotqa_pool and corpus sources only, "
                                  f"not {self.source!r}: leave it unset.")
            if self.num_distractors < 0:
                raise ConfigError(f"data.num_distractors must be >= 0, got {self.num_distractors}.")
        if self.filler_sentences is not None:
            if self.source != "babilong":
                raise ConfigError(f"data.filler_sentences applies to the babilong source only, not {self.source!r}: "
                                  "leave it unset.")
            if self.filler_sentences < 1:
                raise ConfigError(f"data.filler_sentences must be >= 1, got {self.filler_sentences}.")
        if self.confusers:
            if self.source != "babilong":
                raise ConfigError(f"data.confusers applies to the babilong source only, not {self.source!r}: leave it "
                                  "unset.")
            if not 0 <= self.confusers < 1:
                raise ConfigError(f"data.confusers must be a share in [0, 1) of each haystack's background, got "
                                  f"{self.confusers}.")
        if self.num_sentences is not None and self.num_sentences < 1:
            raise ConfigError(f"data.num_sentences must be >= 1, got {self.num_sentences}.")
        if not 0 < self.rehearse_share < 1:
            raise ConfigError(f"data.rehearse_share must be between 0 and 1 (exclusive), got {self.rehearse_share}.")
        for name in ("train_path", "val_path"):  # by their bytes too: a renamed copy is refused
            refuse_evaluation_only(getattr(self, name), f"--data.{name}", OWN_DATA)
