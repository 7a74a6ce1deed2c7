"""The learning floor: soft Q(λ) training of the Q-network and the commands that run it.

Imports every floor below it (data, model, search); nothing imports it but the entry points and eval.

- `td.py`: the TD math as pure tensor functions; `env.py`: the retrieval MDP;
- `acting.py`: what acting scores (Q-values and the soft value its TD target bootstraps from);
  `evaluation.py`: the greedy pass that validates a network;
- `trainer.py`: the loop (rollouts, updates, evaluation, checkpoints); `batching.py`: its minibatches;
  `distributed.py`: several processes; `resume.py` and `checkpoint_files.py`: a run's `last/` and `best/`;
- `checkpoint_selection.py`: what the trainer selects the best checkpoint on; `stop_calibration.py`: the stop rule;
- `config.py` and `presets/`: `TrainConfig`;
- `cli/`: the commands `qrag-train`, `qrag-blend`, `qrag-data`;
- `adapt/`: `qrag-adapt`, a shipped model taught a corpus in one command (its phases, choice, folder, report and
  command line).
"""
