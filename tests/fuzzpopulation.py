"""The population half of the checkpoint fuzzer (``tests/fuzzing.py``): a tiny population of two
members (seeds 0 and 1) read back by ``fasttrain run --resume POP`` after one change to

- member ``seed-1``'s checkpoint: every case of the solo fuzzer (``tests.fuzzcases``), which the
  population's resume must refuse where a solo resume must (the one reader of saved state);
- ``population.json``: every field, the same hostile values, and the file itself (not JSON,
  nested deep, too large, too many members, names that leave the folder);
- the member folders (a link, a missing one, another member's checkpoint);

and new populations made with hostile ``--seeds`` and ``--vary`` forms (the reader ``new``),
which must refuse in one line or train, writing nothing outside their ``--out``.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from tests.fuzzcases import Case, all_cases

MEMBER = "seed-1"  # the member whose checkpoint the solo cases change
READERS = ("resume", "new")
POPULATION_FILE = "population.json"


def member_cases(state: dict, seed: int) -> list[Case]:
    """The solo fuzzer's cases on member ``seed-1``'s checkpoint, read by the population's
    resume (refused wherever a solo resume must refuse)."""
    out = []
    for case in all_cases(state, seed):
        if "resume" not in case.readers:
            continue
        refuse = ("resume",) if "resume" in case.refuse else ()
        out.append(Case(f"{MEMBER}:{case.id}", case.kind, ("resume",), refuse, case.apply))
    return out


def _edit(change):
    """A case's ``apply`` on the population's folder: ``change(entries, data)`` edits the
    parsed ``population.json`` (its member list, and the whole table) in place."""

    def apply(folder: Path):
        path = folder / POPULATION_FILE
        data = json.loads(path.read_text())
        change(data["members"], data)
        path.write_text(json.dumps(data))

    return apply


def _put(index: int, key: str, value):
    def change(entries, data):
        if value is _MISSING:
            del entries[index][key]
        else:
            entries[index][key] = value

    return _edit(change)


_MISSING = object()
FIELD_VALUES = {  # population.json's member fields: hostile values, and whether run must refuse
    "dir": [
        ("'../victim'", "../victim", True),
        ("'a/b'", "a/b", True),
        ("'a\\\\b'", "a\\b", True),
        ("''", "", True),
        ("'.'", ".", True),
        ("'.hidden'", ".hidden", True),
        ("200 chars", "x" * 200, True),
        ("5", 5, True),
        ("none", None, True),
        ("missing", _MISSING, True),
        ("'seed-0'", "seed-0", True),  # two members, one folder
    ],
    "seed": [
        ("-1", -1, True),
        ("2**64", 2**64, True),
        ("'1'", "1", True),
        ("true", True, True),
        ("1.5", 1.5, True),
        ("nan", math.nan, True),
        ("none", None, True),
        ("missing", _MISSING, True),
        ("7", 7, True),  # another seed than the member's checkpoint holds
        ("0", 0, True),  # seed-0's seed: seed-1's checkpoint is not that member's
    ],
    "sets": [
        ("'x'", "x", True),
        ("[5]", [5], True),
        ("['x']", ["x"], True),
        ("['ppo.gamma=0.5']", ["ppo.gamma=0.5"], True),  # a variant the checkpoint lacks
        ("['ppo.gamma=[1]']", ["ppo.gamma=[1]"], True),
        ("none", None, True),
        ("missing", _MISSING, False),  # no variant: what a plain population writes
    ],
}


def _file(text):
    def apply(folder: Path):
        (folder / POPULATION_FILE).write_bytes(text if isinstance(text, bytes) else text.encode())

    return apply


def _members(count: int):
    entries = [{"dir": f"m{i}", "seed": i, "sets": []} for i in range(count)]
    return _file(json.dumps({"members": entries}))


def _link_member(folder: Path):
    victim = folder.parent / f"{folder.name}-victim"
    shutil.move(folder / MEMBER, victim)
    (folder / MEMBER).symlink_to(victim.resolve())


def _swap_checkpoints(folder: Path):
    shutil.copy(folder / "seed-0" / "checkpoint.pt", folder / MEMBER / "checkpoint.pt")


def file_cases() -> list[Case]:
    """``population.json`` and the member folders: each field's hostile values, the file's
    own forms; each must be refused (or, for a legal form, run)."""
    cases = []
    for key, values in FIELD_VALUES.items():
        for label, value, must in values:
            refuse = ("resume",) if must else ()
            case_id = f"members[1].{key}={label}"
            cases.append(Case(case_id, "file", ("resume",), refuse, _put(1, key, value)))
    forms = [
        ("file=not json", _file("not json")),
        ("file=empty", _file(b"")),
        ("file=nested 100000", _file("[" * 100_000 + "]" * 100_000)),
        ("file=members nested", _file('{"members": ' + "[" * 50_000 + "]" * 50_000 + "}")),
        ("file=5 MiB", _file(b" " * (5 << 20) + b"{}")),
        ("file=binary", _file(bytes(range(256)))),
        ("members=[]", _file('{"members": []}')),
        ("members={}", _file('{"members": {}}')),
        ("members=300", _members(300)),
        ("members=one twice", _edit(lambda e, d: e.append(dict(e[1])))),
        ("members[1]=5", _edit(lambda e, d: e.__setitem__(1, 5))),
        ("folder=link", _link_member),
        ("folder=missing", lambda folder: shutil.rmtree(folder / MEMBER)),
        ("folder=another member's checkpoint", _swap_checkpoints),
    ]
    cases += [Case(i, "file", ("resume",), ("resume",), apply) for i, apply in forms]
    return cases


SEEDS_FORMS = [  # --seeds texts: (label, text, must refuse)
    ("0-100000000", "0-100000000", True),
    ("'0-'", "0-", True),
    ("'-1'", "-1", True),
    ("'1--2'", "1--2", True),
    ("'+1'", "+1", True),
    ("'1e3'", "1e3", True),
    ("arabic three", "\u0663", True),
    ("'0,,1'", "0,,1", True),
    ("2**64", str(2**64), True),
    ("'0, 1'", "0, 1", False),
    ("'1,0'", "1,0", False),
]
VARY_FORMS = [  # --vary texts
    ("comment path", "ppo.gamma=0.99 #,0.98 #/../../victim", False),
    ("comment path, one value", "ppo.gamma=0.99 #,0.99 #/../../victim", True),  # issue 64's
    ("quoted path", 'ppo.gamma=0.99,"../victim"', True),
    ("string slash", "ppo.gamma=a/b,c", True),
    ("table", "ppo.gamma={a=1},0.9", True),
    ("array", "ppo.gamma=[1],0.9", True),
    ("nan", "ppo.gamma=nan,0.9", True),
    ("inf", "ppo.gamma=inf,0.9", True),
    ("same value twice", "ppo.gamma=0.9,0.90", True),
    ("empty value", "ppo.gamma=0.9,", True),
    ("newline", "ppo.gamma=0.9\n0.8,0.7", True),
    ("spaces and newlines", " ppo.gamma = 0.9\n , 0.8 ", False),
    ("grid over the cap", "ppo.gamma=" + ",".join(f"0.{i:03d}" for i in range(200)), True),
]


def command_cases() -> list[Case]:
    """New populations from hostile ``--seeds`` and ``--vary`` forms (the reader ``new``)."""
    cases = [
        Case(f"--seeds {label}", "command", ("new",), ("new",) if must else (), None)
        for label, _, must in SEEDS_FORMS
    ]
    cases += [
        Case(f"--vary {label}", "command", ("new",), ("new",) if must else (), None)
        for label, _, must in VARY_FORMS
    ]
    return cases


def command_args(case_id: str, algo: str) -> list[str]:
    """The options a ``command`` case adds to ``fasttrain run`` with learner ``algo`` (its
    ``--vary`` forms vary ``algo``'s discount)."""
    for label, text, _ in SEEDS_FORMS:
        if case_id == f"--seeds {label}":
            return ["--seeds", text]
    for label, text, _ in VARY_FORMS:
        if case_id == f"--vary {label}":
            return ["--seeds", "0-1", "--vary", text.replace("ppo.", f"{algo}.")]
    raise KeyError(case_id)


def all_population_cases(state: dict, seed: int) -> list[Case]:
    """Every case of a population base whose member ``seed-1`` holds ``state``."""
    cases = [*member_cases(state, seed), *file_cases(), *command_cases()]
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "case ids name one case each"
    return cases
