"""A game written by a user, in the shape every game takes: ``step_one(i, io, s, p)``.

Forage, defined here as a user would: a forager walks a ring of ``cells`` cells and gathers the
food on the cell it stands on; food regrows on a random cell every step. Helpers take the same
three objects (``gather(i, s, p)``), a str param picks the reward rule, a state array has a
shape set by a param, and ``s.rng`` draws the random numbers. It registers like a built-in
game, runs on ``python`` and ``cpu`` bit for bit alike, and on the CUDA simulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import fasttrain
from fasttrain import games
from fasttrain.kernels import Field, GameSpec, KernelEnv, assert_backends_agree, rand_int
from tests.cli import ROOT
from tests.simulator import run_on_simulator

LEFT, STAY, RIGHT = 0, 1, 2
RULES = ("count", "squared")


@dataclass(frozen=True)
class ForageParams:
    cells: int = 6
    """cells on the ring (sets the food array's shape)"""
    rule: str = "count"
    """count | squared: the reward for gathering n food"""
    max_episode_steps: int = 20
    """truncate episodes at this many steps"""


STATE = (
    Field("where", lambda p: (), np.int32, "() the forager's cell"),
    Field("food", lambda p: (p.cells,), np.int32, "(cells,) food on each cell"),
    Field("steps", lambda p: (), np.int32, "() steps in this episode"),
)


def gather(i, s, p):
    """Take the food on the forager's cell; returns the reward for it."""
    n = s.food[i, s.where[i]]
    s.food[i, s.where[i]] = 0
    return float(n * n) if p.rule == 1 else float(n)


def write_obs(i, io, s, p):
    """The food on the forager's cell and on its two neighbours."""
    c = s.where[i]
    io.obs[i, 0] = s.food[i, c - 1 if c > 0 else p.cells - 1]
    io.obs[i, 1] = s.food[i, c]
    io.obs[i, 2] = s.food[i, c + 1 if c + 1 < p.cells else 0]


def reset_one(i, io, s, p):
    """A ring with one food on every cell, the forager on a random one."""
    for c in range(p.cells):
        s.food[i, c] = 1
    s.where[i] = rand_int(s.rng, i, p.cells)
    s.steps[i] = 0
    write_obs(i, io, s, p)


def step_one(i, io, s, p):
    """Walk, gather, regrow one food at random; the episode ends when the ring is bare."""
    s.where[i] = (s.where[i] + io.actions[i] - 1 + p.cells) % p.cells
    reward = gather(i, s, p)
    s.food[i, rand_int(s.rng, i, p.cells)] += 1
    s.steps[i] += 1
    bare = True
    for c in range(p.cells):
        if s.food[i, c] > 0:
            bare = False
    io.rewards[i] = reward
    io.score[i] += reward
    io.terminated[i] = bare
    io.truncated[i] = not bare and s.steps[i] >= p.max_episode_steps
    write_obs(i, io, s, p)


FORAGE = GameSpec(
    name="test_forage",
    params_cls=ForageParams,
    state=STATE,
    obs_shape=lambda p: (3,),
    obs_dtype=np.float32,
    num_actions=3,
    reset_one=reset_one,
    step_one=step_one,
    render_text=lambda state, params: " ".join(str(int(n)) for n in state["food"]),
    choices={"rule": RULES},
)


@pytest.fixture
def registered():
    games.register(FORAGE, overwrite=True)
    yield FORAGE
    games._REGISTRY.pop(FORAGE.name, None)


def test_it_registers_and_plays_through_make(registered):
    assert FORAGE.name in games.names()
    env = fasttrain.make(FORAGE.name, num_envs=4, backend="cpu", seed=0, cells=5)
    assert tuple(env.obs.shape) == (4, 3) and env.num_actions == 3
    for _ in range(30):
        env.step(np.full(4, STAY))  # gathering the own cell only: ends at the time limit
    assert env.stats()["episodes"] == 4
    assert env.render(0).count(" ") == 4  # five cells


@pytest.mark.parametrize("rule", RULES)
def test_python_and_cpu_agree_bit_for_bit(rule):
    params = FORAGE.make_params(rule=rule, cells=4)
    episodes = assert_backends_agree(FORAGE, ["python", "cpu"], 8, 60, seed=3, params=params)
    assert episodes > 8


def test_a_step_does_what_the_rules_say():
    env = KernelEnv(FORAGE, 1, "python", FORAGE.make_params(rule="squared"), seed=0)
    env.reset(seed=0)
    s = env.state
    s["where"][0], s["food"][0] = 2, [0, 0, 0, 3, 0, 0]
    env.arrays["actions"][0] = RIGHT  # onto the cell of 3 food: 3 * 3 rewarded
    env.step()
    assert float(env.arrays["rewards"][0]) == 9.0 and int(s["where"][0]) == 3
    assert int(s["food"][0].sum()) == 1  # all gathered, one regrown


# Run in a subprocess: the simulator is chosen when numba.cuda is first imported.
SIM_SCRIPT = """
import importlib.util
import sys

from fasttrain.kernels import assert_backends_agree

sys.path.insert(0, sys.argv[2])  # the repository root: the test module imports tests.*
module_spec = importlib.util.spec_from_file_location("user_game", sys.argv[1])
user = importlib.util.module_from_spec(module_spec)
sys.modules["user_game"] = user
module_spec.loader.exec_module(user)
for rule in user.RULES:
    params = user.FORAGE.make_params(rule=rule, cells=4)
    episodes = assert_backends_agree(user.FORAGE, ["cpu", "cuda"], 4, 40, seed=2, params=params)
    assert episodes > 4, episodes
print("SIMULATOR OK")
"""


def test_cuda_on_the_simulator_matches_cpu_bit_for_bit(tmp_path):
    here = Path(__file__).resolve()
    result = run_on_simulator(SIM_SCRIPT, str(here), str(ROOT), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "SIMULATOR OK" in result.stdout
