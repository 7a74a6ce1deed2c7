"""The evaluation-only data, recognised by the bytes of a file as well as by its name (the core's recogniser).

The recogniser lives in the core (`qrag.training.data.evaluation_only`), where `qrag-train` and `qrag-adapt` refuse
these files as training or validation data; eval reads it from there (`qrag-eval` records each read in its ledger,
`qrag.eval.ledger`).

Importing this loads no model library: `qrag-eval` checks its files before torch loads.
"""

from __future__ import annotations

from qrag.training.data.evaluation_only import (
    HOTPOTQA_TEST,
    KNOWN_FILES,
    MULTIRC_ODD,
    NAME_MARKS,
    EvaluationFile,
    EvaluationOnlyError,
    Recognised,
    file_sha256,
    recognise,
    refuse_evaluation_only,
)

__all__ = ["HOTPOTQA_TEST", "KNOWN_FILES", "MULTIRC_ODD", "NAME_MARKS", "EvaluationFile", "EvaluationOnlyError",
           "Recognised", "file_sha256", "recognise", "refuse_evaluation_only"]
