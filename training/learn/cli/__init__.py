"""The training floor's commands: `train.py` `qrag-train`, `blend.py` `qrag-blend`, `data.py` `qrag-data`.

Each parses its flags before the model libraries load, so `--help` and a bad flag answer at once; what a command
runs lives beside it in `qrag.training.learn` (or the floors below). `qrag-adapt` keeps its command line with its
phases, in `qrag.training.learn.adapt.cli`.
"""
