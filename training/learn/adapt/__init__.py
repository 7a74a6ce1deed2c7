"""`qrag-adapt`: a shipped model taught a corpus, without labelled questions, in one command.

- `cli.py`: the command line; `run.py`: its phases (questions, embed, start, train, choose, report);
- `choice.py`: the blend weight and horizon it ships; `folder.py`: its output folder and resume;
- `report.py`: DIR/report.md.

Arrows run one way: cli → run → choice, folder, report (report reads choice and folder).
"""
