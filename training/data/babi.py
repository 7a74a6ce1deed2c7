"""bAbI qa1–qa5: a world simulator that writes stories, and a reader of the original text files.

The simulator follows BENCHMARKS.md §1: actors move between rooms, get, drop and give objects; every
action is rendered with one of the original verb variants; questions are asked only when the world state
gives them a defined answer, and the supporting-fact ids are recorded from the state that produced the
answer (not guessed afterwards). A sample is one question plus every statement of its story before it.

The same `World` replays parsed sentences, which is how the official BabiLong release (which ships no
supporting ids) gets its supporting facts, see `infer_sample`.

Example:
    >>> samples = generate_samples("qa2", 3, seed=0)
    >>> len(samples), samples[0].question.startswith("Where is the")
    (3, True)
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from qrag.training.data.episode import Episode, EpisodeError, open_utf8

Task = Literal["qa1", "qa2", "qa3", "qa4", "qa5"]
Split = Literal["train", "test"]
TASKS: tuple[Task, ...] = get_args(Task)
SPLITS: tuple[Split, ...] = get_args(Split)
TASK_NAMES: dict[Task, str] = {
    "qa1": "single supporting fact",
    "qa2": "two supporting facts",
    "qa3": "three supporting facts",
    "qa4": "two argument relations",
    "qa5": "three argument relations",
}

ACTORS = ("John", "Mary", "Sandra", "Daniel")
ACTORS_QA5 = ("Bill", "Fred", "Jeff", "Mary")
ROOMS = ("bedroom", "kitchen", "garden", "hallway", "bathroom", "office")
OBJECTS = ("apple", "football", "milk")
AXES = (("north", "south"), ("east", "west"))
MOVE_VERBS = ("went to", "journeyed to", "travelled to", "moved to", "went back to")
GET_VERBS = ("got", "grabbed", "took", "picked up")
DROP_VERBS = ("dropped", "put down", "discarded", "left")
GIVE_VERBS = ("gave", "handed", "passed")
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}

# Why these numbers: the original generator's per-task question rates are not published; these give fact
# counts per sample inside the original ranges (qa1 2–10, qa2 2–68, qa3 4–32, qa5 2–126), see DATA_CARD.md.
_QUESTIONS_PER_STORY = 5
_Q_PROB = {"qa2": 0.3, "qa3": 0.2, "qa5": 0.6}
_MIN_STORY = {"qa2": 2, "qa3": 4, "qa5": 2}
_MAX_STORY = {"qa2": 68, "qa3": 32, "qa5": 126}


def check_task(task: str) -> Task:
    """Return `task` as a `Task`, or raise a `ValueError` listing the valid tasks."""
    if task not in TASKS:
        raise ValueError(f"unknown bAbI task {task!r}; valid tasks: {', '.join(TASKS)}.")
    return task  # type: ignore[return-value]


@dataclass(frozen=True)
class BabiSample:
    """One bAbI question with the statements of its story before it.

    Args:
        task: The bAbI task.
        facts: The story's statements before the question, in order.
        question: The question.
        answer: The gold answer (one word).
        supporting: Indices into `facts` of the supporting facts, ascending.
    """

    task: Task
    facts: tuple[str, ...]
    question: str
    answer: str
    supporting: tuple[int, ...]

    def to_episode(self, id: str = "", metadata: dict[str, object] | None = None) -> Episode:
        """The sample as an episode whose chunks are the facts alone (BabiLong's 0K setting)."""
        meta: dict[str, object] = {"task": self.task, "num_facts": len(self.facts)}
        meta.update(metadata or {})
        return Episode(self.question, self.facts, self.supporting, self.answer, id, meta)


# --- actions, questions and the world --------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """One statement. `kind` is move/get/drop/give/relation; unused fields are empty."""

    kind: Literal["move", "get", "drop", "give", "relation"]
    actor: str
    target: str = ""  # move: room; get/drop/give: object; relation: the other room
    other: str = ""  # give: recipient; relation: direction


@dataclass(frozen=True)
class Question:
    """One question. `kind` names the form; see `render_question`."""

    kind: Literal[
        "where_actor", "where_object", "where_before", "what_dir_of", "what_is_dir_of",
        "who_gave", "what_gave", "who_received", "who_gave_to",
    ]
    a: str = ""
    b: str = ""


def render_action(act: Action, rng: random.Random) -> str:
    """Render an action with a random verb variant of BENCHMARKS.md §1."""
    if act.kind == "move":
        return f"{act.actor} {rng.choice(MOVE_VERBS)} the {act.target}."
    if act.kind == "get":
        return f"{act.actor} {rng.choice(GET_VERBS)} the {act.target} there."
    if act.kind == "drop":
        return f"{act.actor} {rng.choice(DROP_VERBS)} the {act.target}."
    if act.kind == "give":
        return f"{act.actor} {rng.choice(GIVE_VERBS)} the {act.target} to {act.other}."
    return f"The {act.actor} is {act.other} of the {act.target}."


def render_question(q: Question) -> str:
    """The question's text in the original wording."""
    return {
        "where_actor": f"Where is {q.a}?",
        "where_object": f"Where is the {q.a}?",
        "where_before": f"Where was the {q.a} before the {q.b}?",
        "what_dir_of": f"What is {q.a} of the {q.b}?",
        "what_is_dir_of": f"What is the {q.a} {q.b} of?",
        "who_gave": f"Who gave the {q.a} to {q.b}?",
        "what_gave": f"What did {q.a} give to {q.b}?",
        "who_received": f"Who received the {q.a}?",
        "who_gave_to": f"Who did {q.a} give the {q.b} to?",
    }[q.kind]


_W = r"([A-Za-z]+)"
_FACT_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"^{_W} (?:{'|'.join(MOVE_VERBS)}) the {_W}\.$"), "move"),
    (re.compile(rf"^{_W} (?:{'|'.join(GET_VERBS)}) the {_W}(?: there)?\.$"), "get"),
    (re.compile(rf"^{_W} (?:{'|'.join(DROP_VERBS)}) the {_W}\.$"), "drop"),
    (re.compile(rf"^{_W} (?:{'|'.join(GIVE_VERBS)}) the {_W} to {_W}\.$"), "give"),
    (re.compile(rf"^The {_W} is (north|south|east|west) of the {_W}\.$"), "relation"),
)
_QUESTION_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"^Where was the {_W} before the {_W}\?$"), "where_before"),
    (re.compile(rf"^Where is the {_W}\?$"), "where_object"),
    (re.compile(rf"^Where is {_W}\?$"), "where_actor"),
    (re.compile(rf"^What is (north|south|east|west) of the {_W}\?$"), "what_dir_of"),
    (re.compile(rf"^What is the {_W} (north|south|east|west) of\?$"), "what_is_dir_of"),
    (re.compile(rf"^Who gave the {_W} to {_W}\?$"), "who_gave"),
    (re.compile(rf"^What did {_W} give to {_W}\?$"), "what_gave"),
    (re.compile(rf"^Who received the {_W}\?$"), "who_received"),
    (re.compile(rf"^Who did {_W} give the {_W} to\?$"), "who_gave_to"),
)


def parse_fact(sentence: str) -> Action | None:
    """Parse a bAbI qa1–qa5 statement into an `Action`; None when it is not one (background text)."""
    s = sentence.strip()
    for pat, kind in _FACT_PATTERNS:
        m = pat.match(s)
        if m is None:
            continue
        g = m.groups()
        if kind == "relation":
            return Action("relation", g[0], g[2], g[1])
        if kind == "give":
            return Action("give", g[0], g[1], g[2])
        return Action(kind, g[0], g[1])  # type: ignore[arg-type]
    return None


def parse_question(text: str) -> Question | None:
    """Parse a bAbI qa1–qa5 question; None when the wording is not one of the original forms."""
    s = text.strip()
    for pat, kind in _QUESTION_PATTERNS:
        m = pat.match(s)
        if m is not None:
            return Question(kind, *m.groups())  # type: ignore[arg-type]
    return None


@dataclass
class World:
    """The state of a bAbI world, with the fact ids that established each part of it.

    `apply` is permissive (it also replays partial stories); the generator checks validity first with
    `can`. `answer` gives `(answer, supporting ids)` or None when the question has no defined answer.
    """

    actor_at: dict[str, tuple[str, int]] = field(default_factory=dict)  # actor -> (room, move id)
    holder: dict[str, tuple[str, int]] = field(default_factory=dict)  # object -> (actor, get/give id)
    lying: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)  # object -> (room, ids)
    # obj -> (carrier, previous room, room, previous move id, move id) of the last move that carried it
    carried: dict[str, tuple[str, str, str, int, int]] = field(default_factory=dict)
    # obj -> (actor, id, id of the get that began that actor's hold) of its latest get, drop or give
    events: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    gives: list[tuple[str, str, str, int]] = field(default_factory=list)  # (giver, object, recipient, id)
    relations: list[tuple[str, str, str, int]] = field(default_factory=list)  # (room, dir, room, id)
    # qa5 (as the original) lets actors whose room was never stated get and give: their room is hidden.
    hidden_rooms: bool = False

    def held_by(self, actor: str) -> list[str]:
        return sorted(o for o, (a, _) in self.holder.items() if a == actor)

    def can(self, act: Action) -> bool:
        """Whether the action is valid in the current state (consistency rules of BENCHMARKS.md §1)."""
        here = self.actor_at.get(act.actor)
        if act.kind == "move":
            return here is None or here[0] != act.target
        if act.kind == "get":
            if act.target in self.holder:
                return False
            if here is None:
                return self.hidden_rooms and act.target not in self.lying
            lying = self.lying.get(act.target)
            return lying is None or lying[0] == here[0]
        if act.kind == "drop":
            return self.holder.get(act.target, ("", 0))[0] == act.actor and here is not None
        if act.kind == "give":
            there = self.actor_at.get(act.other)
            if act.actor == act.other or self.holder.get(act.target, ("", 0))[0] != act.actor:
                return False
            if here is None or there is None:
                return self.hidden_rooms
            return here[0] == there[0]
        return True

    def apply(self, act: Action, fid: int) -> None:
        """Apply statement `fid` to the state."""
        if act.kind == "move":
            prev = self.actor_at.get(act.actor)
            for obj in self.held_by(act.actor):
                if prev is not None:
                    self.carried[obj] = (act.actor, prev[0], act.target, prev[1], fid)
            self.actor_at[act.actor] = (act.target, fid)
        elif act.kind == "get":
            self.holder[act.target] = (act.actor, fid)
            self.lying.pop(act.target, None)
            self.events[act.target] = (act.actor, fid, fid)
        elif act.kind == "drop":
            got = self.holder.get(act.target, ("", -1))[1]
            self.events[act.target] = (act.actor, fid, got)
            self.holder.pop(act.target, None)
            here = self.actor_at.get(act.actor)
            if here is not None:
                self.lying[act.target] = (here[0], tuple(sorted({here[1], fid})))
        elif act.kind == "give":
            self.holder[act.target] = (act.other, fid)
            self.events[act.target] = (act.other, fid, fid)
            self.gives.append((act.actor, act.target, act.other, fid))
        else:
            self.relations.append((act.actor, act.other, act.target, fid))

    def answer(self, q: Question) -> tuple[str, tuple[int, ...]] | None:
        """The answer and its supporting fact ids, or None when the state leaves it undefined."""
        if q.kind == "where_actor":
            at = self.actor_at.get(q.a)
            return None if at is None else (at[0], (at[1],))
        if q.kind == "where_object":
            if q.a in self.holder:
                actor, got = self.holder[q.a]
                at = self.actor_at.get(actor)
                return None if at is None else (at[0], tuple(sorted({got, at[1]})))
            lying = self.lying.get(q.a)
            return None if lying is None else (lying[0], lying[1])
        if q.kind == "where_before":
            return self._before_answer(q)
        if q.kind in ("what_dir_of", "what_is_dir_of"):
            return self._relation_answer(q)
        return self._give_answer(q)

    def _before_answer(self, q: Question) -> tuple[str, tuple[int, ...]] | None:
        # bAbI's qa3 rule: the object's latest get or drop, the move of its actor that carried it into L
        # during that hold, and the actor's move before that one (whose room is the answer). Defined only
        # when the latest event's actor carried the object into L after picking it up for that hold.
        c, e = self.carried.get(q.a), self.events.get(q.a)
        if c is None or e is None:
            return None
        carrier, prev_room, room, prev_move, move = c
        actor, event, got = e
        if actor != carrier or room != q.b or not got < move:
            return None
        return prev_room, tuple(sorted({event, prev_move, move}))

    def _relation_answer(self, q: Question) -> tuple[str, tuple[int, ...]] | None:
        # Normalise every fact to "x is d of y"; the question wants x given (d, y) or y given (x, d).
        edges = {(x, d, y) for x, d, y, _ in self.relations} | {
            (y, OPPOSITE[d], x) for x, d, y, _ in self.relations
        }
        if q.kind == "what_dir_of":
            hits = sorted({x for x, d, y in edges if d == q.a and y == q.b})
        else:
            hits = sorted({y for x, d, y in edges if x == q.a and d == q.b})
        if len(hits) != 1:
            return None
        return hits[0], tuple(sorted(i for *_, i in self.relations))

    def _give_answer(self, q: Question) -> tuple[str, tuple[int, ...]] | None:
        # The most recent give that matches the question's known arguments.
        for giver, obj, recipient, fid in reversed(self.gives):
            if q.kind == "who_gave" and (obj, recipient) == (q.a, q.b):
                return giver, (fid,)
            if q.kind == "what_gave" and (giver, recipient) == (q.a, q.b):
                return obj, (fid,)
            if q.kind == "who_received" and obj == q.a:
                return recipient, (fid,)
            if q.kind == "who_gave_to" and (giver, obj) == (q.a, q.b):
                return recipient, (fid,)
        return None


# --- the generator ---------------------------------------------------------------------------------------


def _random_action(task: Task, world: World, rng: random.Random) -> Action:
    actors = ACTORS_QA5 if task == "qa5" else ACTORS
    while True:
        actor = rng.choice(actors)
        r = rng.random()
        if task == "qa1" or r < 0.5 or (actor not in world.actor_at and not world.hidden_rooms):
            act = Action("move", actor, rng.choice(ROOMS))
        elif task == "qa5" and r < 0.75 and world.held_by(actor):
            act = Action("give", actor, rng.choice(world.held_by(actor)), rng.choice(actors))
        elif world.held_by(actor) and rng.random() < 0.5:
            act = Action("drop", actor, rng.choice(world.held_by(actor)))
        else:
            act = Action("get", actor, rng.choice(OBJECTS))
        if world.can(act):
            return act


def _candidate_questions(task: Task, world: World, last: Action | None) -> list[Question]:
    if task == "qa1":
        return [Question("where_actor", a) for a in sorted(world.actor_at)]
    if task == "qa2":
        return [Question("where_object", o) for o in OBJECTS]
    if task == "qa3":
        return [Question("where_before", o, c[2]) for o, c in sorted(world.carried.items())]
    if last is None or last.kind != "give":
        return []
    giver, obj, recipient = last.actor, last.target, last.other
    return [
        Question("who_gave", obj, recipient),
        Question("what_gave", giver, recipient),
        Question("who_received", obj),
        Question("who_gave_to", giver, obj),
    ]


def _qa4_story(rng: random.Random) -> Iterator[BabiSample]:
    a, b, c = rng.sample(ROOMS, 3)
    d = rng.choice(rng.choice(AXES))
    pairs = [(a, b), (b, c)]  # a is d of b, b is d of c
    facts: list[Action] = []
    for x, y in pairs:
        facts.append(Action("relation", x, y, d) if rng.random() < 0.5 else Action("relation", y, x, OPPOSITE[d]))
    rng.shuffle(facts)
    world = World()
    for i, f in enumerate(facts):
        world.apply(f, i)
    while True:
        x, y = rng.choice(pairs)
        dd = rng.choice((d, OPPOSITE[d]))
        if dd != d:
            x, y = y, x  # now "x is dd of y"
        q = Question("what_dir_of", dd, y) if rng.random() < 0.5 else Question("what_is_dir_of", y, OPPOSITE[dd])
        ans = world.answer(q)
        if ans is not None:
            text = tuple(render_action(f, rng) for f in facts)
            yield BabiSample("qa4", text, render_question(q), ans[0], ans[1])
            return


def _story(task: Task, rng: random.Random) -> Iterator[BabiSample]:
    """One story's samples. qa1: a question every 3rd line; others: questions at random valid moments."""
    if task == "qa4":
        yield from _qa4_story(rng)
        return
    world = World(hidden_rooms=task == "qa5")
    facts: list[str] = []
    asked = 0
    pending: tuple[int, list[Question]] | None = None  # qa5: (statements still to come, questions)
    while asked < _QUESTIONS_PER_STORY and len(facts) < _MAX_STORY.get(task, 10**9):
        act = _random_action(task, world, rng)
        world.apply(act, len(facts))
        facts.append(render_action(act, rng))
        if task == "qa1":
            if len(facts) % 2:
                continue
            candidates = _candidate_questions(task, world, act)
        elif task == "qa5":
            # After a give, a question about it follows 0–5 statements later.
            if pending is None and act.kind == "give" and rng.random() < _Q_PROB[task]:
                pending = (rng.randint(0, 5), _candidate_questions(task, world, act))
            elif pending is not None:
                pending = (pending[0] - 1, pending[1])
            if pending is None or pending[0] > 0:
                continue
            candidates, pending = pending[1], None
        else:
            if len(facts) < _MIN_STORY[task] or (rng.random() >= _Q_PROB[task] and len(facts) < _MAX_STORY[task]):
                continue
            candidates = _candidate_questions(task, world, act)
        answered = [(q, a) for q in candidates if (a := world.answer(q)) is not None]
        if not answered:
            continue  # a story that never reaches a valid question ends at its cap; the next starts afresh
        q, (ans, support) = rng.choice(answered)
        asked += 1
        yield BabiSample(task, tuple(facts), render_question(q), ans, support)


def _rng(task: Task, split: Split, seed: int) -> random.Random:
    # A string seed is hashed with SHA-512 by `random`: stable across processes and Python versions, and
    # train/test streams for the same integer seed never share a generator state.
    return random.Random(f"qrag-babi/{task}/{split}/{seed}")


def iter_samples(task: str, *, seed: int = 0, split: Split = "train") -> Iterator[BabiSample]:
    """An endless deterministic stream of samples of `task` (train and test streams are disjoint)."""
    t = check_task(task)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}.")
    rng = _rng(t, split, seed)
    while True:
        yield from _story(t, rng)


def generate_samples(task: str, num_samples: int, *, seed: int = 0, split: Split = "train") -> list[BabiSample]:
    """The first `num_samples` samples of the stream `iter_samples(task, seed=seed, split=split)`."""
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}.")
    out: list[BabiSample] = []
    for s in iter_samples(task, seed=seed, split=split):
        if len(out) >= num_samples:
            break
        out.append(s)
    return out


def infer_sample(task: str, facts: list[str] | tuple[str, ...], question: str) -> tuple[str, tuple[int, ...]]:
    """Replay `facts` (bAbI statements) and answer `question`: `(answer, supporting fact indices)`.

    Raises:
        ValueError: a fact or the question is not in the bAbI grammar, or the answer is undefined.
    """
    check_task(task)
    q = parse_question(question)
    if q is None:
        raise ValueError(f"{task}: question {question!r} is not a bAbI qa1–qa5 question form.")
    world = World()
    for i, f in enumerate(facts):
        act = parse_fact(f)
        if act is None:
            raise ValueError(f"{task}: fact {i} {f!r} is not a bAbI qa1–qa5 statement.")
        world.apply(act, i)
    ans = world.answer(q)
    if ans is None:
        raise ValueError(f"{task}: the facts leave {question!r} without a defined answer.")
    return ans


# --- the original text format ----------------------------------------------------------------------------

_TASK_IN_NAME = re.compile(r"qa(\d+)")


def read_babi_file(path: str | Path, *, task: str | None = None) -> list[BabiSample]:
    """Read an original bAbI file (`ID text`; `ID question?<TAB>answer<TAB>support ids`; ID 1 starts a story).

    Args:
        path: The file, e.g. `qa2_two-supporting-facts_test.txt`.
        task: The task; by default taken from the file name (`qaN`). Tasks beyond qa5 are read too and
            labelled by their number.

    Raises:
        FileNotFoundError: the file does not exist.
        EpisodeError: a malformed line, or a support id that is not an earlier statement (file and line).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"bAbI file {str(p)!r} does not exist (or is not a file).")
    if task is None:
        m = _TASK_IN_NAME.search(p.name)
        task = f"qa{m.group(1)}" if m else "qa?"
    samples: list[BabiSample] = []
    facts: list[str] = []
    fact_of_line: dict[int, int] = {}
    with open_utf8(p) as f:
        for lineno, raw in enumerate(f, start=1):
            line = raw.rstrip("\n")
            if not line.strip():
                continue
            where = f"{p}:{lineno}"
            head, _, rest = line.partition(" ")
            if not head.isdigit() or not rest:
                raise EpisodeError(f"{where}: expected 'ID text' with a numeric ID, got {line[:60]!r}.")
            lid = int(head)
            if lid == 1:
                facts, fact_of_line = [], {}
            if "\t" not in rest:
                fact_of_line[lid] = len(facts)
                facts.append(rest.strip())
                continue
            parts = rest.split("\t")
            if len(parts) < 3:
                raise EpisodeError(f"{where}: a question line needs 'question<TAB>answer<TAB>ids', got {line!r}.")
            ids = parts[2].split()
            bad = [i for i in ids if not i.isdigit() or int(i) not in fact_of_line]
            if bad:
                raise EpisodeError(f"{where}: supporting id {bad[0]!r} is not a statement earlier in the story.")
            support = tuple(sorted(fact_of_line[int(i)] for i in ids))
            samples.append(BabiSample(task, tuple(facts), parts[0].strip(), parts[1].strip(), support))  # type: ignore[arg-type]
    return samples
