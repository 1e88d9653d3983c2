"""Arena bots, hand-worked on the 10x10 map of test_arena.py (vision 2: the inside is rows and
columns 2..7, a bot at (4, 4) sees rows and columns 2..6). Bots are the snakes after the agents;
they choose their moves after the agents have moved, inside the same step."""

from __future__ import annotations

import numpy as np
import pytest

import fasttrain
from fasttrain import games
from fasttrain.kernels import assert_backends_agree, rand_int
from tests.fasttrain.games.test_arena import (
    CORPSE,
    DELTA,
    DOWN,
    EMPTY,
    FOOD,
    LEFT,
    OTHER,
    RIGHT,
    SNAKE,
    UP,
    WALL,
    cells,
    make,
    place,
    step,
    tiles,
    window,
)
from tests.simulator import run_on_simulator

S0, S1, S2, S3 = SNAKE, SNAKE + 1, SNAKE + 2, SNAKE + 3
AGENT_AWAY = [(7, 7)]  # one agent, out of every bot's sight here; it plays LEFT to (7, 6)


@pytest.fixture(params=["python", "cpu"])
def backend(request):
    return request.param


def bots(
    backend="cpu", policy="greedy", num_snakes=1, max_bots=1, num_bots=None, num_envs=1, **params
):
    """The 10x10 arena of test_arena.py (one agent, no food unless asked) with ``max_bots`` bot
    slots, all active unless ``num_bots`` says."""
    num_bots = max_bots if num_bots is None else num_bots
    params = {"width": 10, "height": 10, "vision": 2, "num_food": 0, **params}
    return fasttrain.make(
        "arena",
        num_envs=num_envs,
        backend=backend,
        seed=0,
        num_snakes=num_snakes,
        max_bots=max_bots,
        num_bots=num_bots,
        bot_policy=policy,
        **params,
    )


def moved(before, after):
    """The action that took a head from ``before`` to the next cell ``after``."""
    (action,) = [a for a, (dr, dc) in DELTA.items() if (before[0] + dr, before[1] + dc) == after]
    return action


def bot_done(env, i=0):
    """(food, steps, lives) of env ``i``'s ended bot lives."""
    return [float(env.state[f"bot_done_{name}"][i]) for name in ("food", "steps", "lives")]


# ------------------------------------------------------------------------------- greedy

GREEDY = {  # food, corpse (bot a single cell at (4, 4)), the move: worked out in the comments
    # the adjacent food at distance 1 beats (2, 4) at 2
    "adjacent food": ([(4, 5), (2, 4)], [], RIGHT),
    # (6, 5) at 3 beats (2, 6) at 4; toward (6, 5) down and right tie at 2, down comes first
    "nearest food": ([(2, 6), (6, 5)], [], DOWN),
    # (4, 2) and (4, 6) both at 2: the first in row order, (4, 2)
    "tie in a row": ([(4, 2), (4, 6)], [], LEFT),
    # (2, 5) and (5, 2) both at 3: row order takes (2, 5) (column order would take (5, 2),
    # reached by down); toward (2, 5) up and right tie, up comes first
    "tie across rows": ([(5, 2), (2, 5)], [], UP),
    # (7, 4) at 3 is out of sight (row 7): (2, 6) at 4 is the target, up before right
    "out of sight": ([(7, 4), (2, 6)], [], UP),
    # a corpse is a target like food
    "corpse": ([(2, 6)], [(4, 3)], LEFT),
}


@pytest.mark.parametrize("case", list(GREEDY))
def test_greedy_heads_for_the_nearest_food_in_sight(backend, case):
    food, corpse, action = GREEDY[case]
    env = bots(backend, num_food=len(food))
    place(env, [AGENT_AWAY, [(4, 4)]], food=food, corpse=corpse)
    assert step(env, LEFT) == [(0.0, False, False)]
    new = (4 + DELTA[action][0], 4 + DELTA[action][1])
    ate = new in food + corpse
    assert cells(env, 1) == ([(4, 4), new] if ate else [new])  # it grows where it eats
    assert env.state["bot_score"][0].tolist() == [int(ate)]
    assert env.state["steps"][0].tolist() == [1, 1]
    assert bot_done(env) == [0.0, 0.0, 0.0]


CORNERED = {  # the bot tail first, extra walls, food, the move
    # its own tail: entering the cell the tail leaves is death, so not toward (4, 6); up and
    # left tie at 3 from it, up comes first
    "own tail": ([(4, 5), (5, 5), (5, 4), (4, 4)], [], [(4, 6)], UP),
    # up is its own body (the food (2, 4) is behind it), left the neck, down a wall
    "own body": ([(3, 5), (3, 4), (3, 3), (4, 3), (4, 4)], [(5, 4)], [(2, 4)], RIGHT),
    # top-left corner heading up: up and left are wall, down (toward the food) is the neck,
    # which would keep it going up into the wall
    "corner": ([(3, 2), (2, 2)], [], [(4, 2)], RIGHT),
}


@pytest.mark.parametrize("policy", ["greedy", "cautious"])
@pytest.mark.parametrize("case", list(CORNERED))
def test_greedy_never_moves_into_a_wall_or_a_body_when_a_safe_move_exists(backend, case, policy):
    body, walls, food, action = CORNERED[case]
    env = bots(backend, policy, num_food=len(food))
    place(env, [AGENT_AWAY, body], food=food, walls=walls)
    step(env, LEFT)
    head = body[-1]
    new = (head[0] + DELTA[action][0], head[1] + DELTA[action][1])
    assert cells(env, 1) == [*body[1:], new]  # moved (its tail too), did not die
    assert bot_done(env) == [0.0, 0.0, 0.0]


def test_greedy_avoids_another_snakes_body():
    """Bot 2's body covers (3, 4), the step toward the food; down, left and right tie at 3."""
    env = bots(max_bots=2, num_food=0)
    place(env, [AGENT_AWAY, [(4, 4)], [(3, 5), (3, 4), (3, 3)]], food=[(2, 4)])
    step(env, LEFT)
    assert cells(env, 1) == [(5, 4)]


@pytest.mark.parametrize("policy", ["random", "greedy", "cautious"])
def test_with_no_safe_move_a_bot_goes_straight_and_dies(backend, policy):
    """Heading right along the top row with walls ahead and below: the move is straight
    (greedy and cautious; random by its own draw may also hit the neck, i.e. straight on, or
    a wall), into the wall; the head cell, two from the tail, turns corpse."""
    env = bots(backend, policy, num_food=0, reward_death=-2.5)
    place(env, [AGENT_AWAY, [(2, 2), (2, 3)]], walls=[(2, 4), (3, 3)], steps={1: 5})
    env.state["bot_score"][0, 0] = 2  # food this life, summed at its end
    assert step(env, LEFT) == [(0.0, False, False)]  # agents get no reward for a bot's death
    assert int(env.state["length"][0, 1]) == 0
    assert tiles(env) == {(7, 6): S0, (2, 4): WALL, (3, 3): WALL, (2, 3): CORPSE}
    assert bot_done(env) == [2.0, 6.0, 1.0]  # its food, 5 steps + the fatal one, one life


def test_a_single_cell_bot_walled_in_dies_without_a_corpse(backend):
    env = bots(backend, num_food=0)
    place(env, [AGENT_AWAY, [(4, 4)]], walls=[(3, 4), (5, 4), (4, 3), (4, 5)])
    step(env, LEFT)
    assert int(env.state["length"][0, 1]) == 0 and bot_done(env) == [0.0, 1.0, 1.0]
    assert (4, 4) not in tiles(env)  # one cell: an odd count to the tail, no corpse


def safe_moves_draw(env, moves, trials=120, **place_args):
    """Place and step ``trials`` times; each time the bot's first move must be the one the env's
    stream draws from ``moves`` (the safe moves in action order), as documented: one draw of
    ``rand_int`` over them. Returns how often each was taken."""
    counts = dict.fromkeys(moves, 0)
    for _ in range(trials):
        place(env, **place_args)
        rng = env.arrays["rng"].copy()  # nothing else draws before the bot in this step
        want = moves[int(rand_int(rng, 0, len(moves)))]
        step(env, LEFT)
        got = moved((4, 4), cells(env, 1)[-1])
        assert got == want
        counts[got] += 1
    return counts


def test_greedy_with_no_food_in_sight_picks_a_random_safe_move():
    """Walls above and to the left; the food (7, 2) is out of sight (row 7)."""
    env = bots(num_food=1)
    counts = safe_moves_draw(
        env,
        [DOWN, RIGHT],
        snakes=[AGENT_AWAY, [(4, 4)]],
        food=[(7, 2)],
        walls=[(3, 4), (4, 3)],
    )
    assert min(counts.values()) >= 40, counts  # 60 each expected, both occur


# ------------------------------------------------------------------------------- cautious

# the other snake's head is next to (4, 5), the cell of the food: the agent moves to (4, 6) in
# this step (the bots see the map after the agents' moves), or bot 2 sits at (4, 6)
OTHER_HEAD = {
    "agent": ([[(3, 6)], [(4, 4)], []], DOWN),
    "bot": ([AGENT_AWAY, [(4, 4)], [(4, 6)]], LEFT),
}


@pytest.mark.parametrize("other", list(OTHER_HEAD))
@pytest.mark.parametrize("policy, action", [("greedy", RIGHT), ("cautious", UP)])
def test_cautious_avoids_a_cell_next_to_another_head(backend, other, policy, action):
    """Greedy eats the food; cautious keeps away: up, down and left are 2 from the food, up
    comes first."""
    snakes, agent_action = OTHER_HEAD[other]
    env = bots(backend, policy, max_bots=2, num_food=0)
    place(env, snakes, food=[(4, 5)])
    step(env, agent_action)
    dr, dc = DELTA[action]
    expected = [(4, 4), (4, 5)] if action == RIGHT else [(4 + dr, 4 + dc)]
    assert cells(env, 1) == expected


def test_cautious_takes_the_cell_next_to_a_head_when_it_is_the_only_safe_one(backend):
    env = bots(backend, "cautious", num_food=0)
    place(env, [[(3, 6)], [(4, 4)]], food=[(4, 5)], walls=[(3, 4), (5, 4), (4, 3)])
    step(env, DOWN)  # the agent's head to (4, 6)
    assert cells(env, 1) == [(4, 4), (4, 5)]
    assert env.state["bot_score"][0].tolist() == [1]


def test_cautious_does_not_fear_a_body_that_is_not_a_head():
    """Bot 2 lies along (3, 5) (next to the food) with its head at (2, 5), two cells away."""
    env = bots(policy="cautious", max_bots=2, num_food=0)
    place(env, [AGENT_AWAY, [(4, 4)], [(3, 5), (2, 5)]], food=[(4, 5)])
    step(env, LEFT)
    assert cells(env, 1) == [(4, 4), (4, 5)]


def test_cautious_with_no_food_picks_a_random_calm_move():
    """No food; the agent's head lands on (4, 6), so right is not calm: up, down, left are."""
    env = bots(policy="cautious", num_food=0)
    counts = {UP: 0, DOWN: 0, LEFT: 0}
    for _ in range(150):
        place(env, [[(3, 6)], [(4, 4)]])
        rng = env.arrays["rng"].copy()
        want = [UP, DOWN, LEFT][int(rand_int(rng, 0, 3))]
        step(env, DOWN)
        got = moved((4, 4), cells(env, 1)[-1])
        assert got == want
        counts[got] += 1
    assert min(counts.values()) >= 30, counts  # 50 each expected


# ------------------------------------------------------------------------------- random


def test_random_bots_draw_each_action_from_the_stream(backend):
    """A single cell (no neck) in the open: the move is ``rand_int(rng, 4)`` of the env's
    stream, every action occurs about as often."""
    env = bots(backend, "random", num_food=0)
    counts = safe_moves_draw(
        env, [UP, DOWN, LEFT, RIGHT], trials=200, snakes=[AGENT_AWAY, [(4, 4)]]
    )
    assert min(counts.values()) >= 30, counts  # 50 each expected


def test_random_bots_same_seed_same_moves_other_seed_other_moves():
    def trajectory(seed):
        env = bots("cpu", "random", num_snakes=2, max_bots=2, num_food=3)
        env.reset(seed=seed)
        gen = np.random.default_rng(0)  # the agents' actions are the same in every run
        out = []
        for _ in range(40):
            env.step(gen.integers(0, 4, env.num_rows))
            out.append(env.state["head"][0, 2:].tolist() + env.state["length"][0, 2:].tolist())
        return out

    assert trajectory(1) == trajectory(1)
    assert trajectory(1) != trajectory(2)


# ------------------------------------------------------------------------------- lives


def test_a_dead_bot_respawns_at_its_next_turn_without_moving(backend):
    env = bots(backend, num_food=0)
    place(env, [AGENT_AWAY, [(4, 4)]], walls=[(3, 4), (5, 4), (4, 3), (4, 5)])
    env.state["bot_score"][0, 0] = 3
    step(env, LEFT)  # the walled-in bot dies
    assert int(env.state["length"][0, 1]) == 0 and bot_done(env) == [3.0, 1.0, 1.0]
    before = tiles(env)
    step(env, RIGHT)  # its next turn: it respawns, on a free cell, and stays
    (cell,) = cells(env, 1)
    assert {**before, (7, 6): EMPTY, (7, 7): S0}.get(cell, EMPTY) == EMPTY
    assert int(env.state["steps"][0, 1]) == 0 and env.state["bot_score"][0].tolist() == [0]
    assert tiles(env) == {(7, 7): S0, **{c: t for c, t in before.items() if c != (7, 6)}, cell: S1}
    assert bot_done(env) == [3.0, 1.0, 1.0]
    step(env, LEFT)  # and moves from the step after
    assert int(env.state["steps"][0, 1]) == 1 and int(env.state["length"][0, 1]) == 1


def test_a_bot_at_max_episode_steps_ends_its_life_without_a_corpse(backend):
    """Its third step eats the food: the life ends with 2 food (one before) and 3 steps."""
    env = bots(backend, num_food=0, max_episode_steps=3)
    place(env, [AGENT_AWAY, [(4, 3), (4, 4)]], food=[(4, 5)], steps={1: 2})
    env.state["bot_score"][0, 0] = 1
    step(env, LEFT)
    assert int(env.state["length"][0, 1]) == 0
    assert bot_done(env) == [2.0, 3.0, 1.0]
    assert tiles(env) == {(7, 6): S0}  # removed, no corpse; the food not replaced (num_food 0)
    step(env, RIGHT)
    assert int(env.state["length"][0, 1]) == 1 and bot_done(env) == [2.0, 3.0, 1.0]


def test_a_bot_eats_grows_and_the_food_is_replaced(backend):
    env = bots(backend, num_food=2, reward_food=0.5)
    place(env, [AGENT_AWAY, [(4, 3), (4, 4)]], food=[(4, 5), (2, 2)])
    assert step(env, LEFT) == [(0.0, False, False)]  # a bot's food is no agent's reward
    assert cells(env, 1) == [(4, 3), (4, 4), (4, 5)]
    assert env.state["bot_score"][0].tolist() == [1]
    now = tiles(env)
    food = {c for c, t in now.items() if t == FOOD}
    assert (2, 2) in food and len(food) == 2 and int(env.state["food_count"][0]) == 2
    assert not food & {(4, 3), (4, 4), (4, 5), (7, 6)}


def test_a_map_restart_ends_the_bots_lives_into_bot_done(backend):
    """The only agent dies into the wall, so the whole map restarts after the bots moved."""
    env = bots(backend, num_food=0)
    place(env, [[(2, 4)], [(4, 3), (4, 4)]], steps={1: 5})
    env.state["bot_score"][0, 0] = 2
    assert step(env, UP) == [(-1.0, True, False)]
    assert int(env.state["length"][0, 1]) == 1  # respawned by the restart
    assert bot_done(env) == [2.0, 6.0, 1.0]  # its life: 2 food, 5 steps + this one


def test_a_state_from_before_the_bot_sums_had_names_is_refused_and_nothing_is_written():
    """States of development checkpoints kept the bots' ended lives as the columns of one array
    ``bot_done``; fasttrain was never released with them, so such a state is refused, naming
    what it lacks, before any array is written."""
    env = bots("cpu", policy="random", max_bots=2, num_envs=3, num_food=2)
    for _ in range(40):
        env.step(np.zeros(3, dtype=np.int64))
    saved = env.state_dict()
    names = ["bot_done_food", "bot_done_steps", "bot_done_lives"]
    assert saved["bot_done_lives"].sum() > 0  # some bot lives ended
    old = {name: array for name, array in saved.items() if name not in names}
    old["bot_done"] = np.stack([saved[name] for name in names], axis=1)
    fresh = bots("cpu", policy="random", max_bots=2, num_envs=3, num_food=2)
    before = fresh.state_dict()
    with pytest.raises(ValueError, match=r"^state_dict lacks environment arrays 'bot_done_food'"):
        fresh.load_state_dict(old)
    for name, array in fresh.state_dict().items():
        np.testing.assert_array_equal(array, before[name], err_msg=name)


# ------------------------------------------------------------------------------- with agents


def test_the_bots_move_after_the_agents():
    """The bot's one free neighbour is the agent's tail cell, free only once the agent moved."""
    env = bots(num_food=0)
    place(env, [[(4, 5), (4, 6)], [(4, 4)]], walls=[(3, 4), (5, 4), (4, 3)])
    assert step(env, RIGHT) == [(0.0, False, False)]
    assert cells(env, 0) == [(4, 6), (4, 7)] and cells(env, 1) == [(4, 5)]
    assert bot_done(env) == [0.0, 0.0, 0.0]


def test_an_agent_dies_into_a_bot_which_eats_its_corpse(backend):
    """Agent 0 runs into the bot (the bot has not moved yet); its head cell turns corpse, the
    greedy bot (which moves after) eats it."""
    env = bots(backend, num_snakes=2, num_food=0, reward_death=-2.5)
    place(env, [[(4, 2), (4, 3)], [(7, 7)], [(4, 4)]])
    assert step(env, RIGHT, UP) == [(-2.5, True, False), (0.0, False, False)]
    assert cells(env, 2) == [(4, 4), (4, 3)] and env.state["bot_score"][0].tolist() == [1]
    expected = {(6, 7): S1, (4, 4): S2, (4, 3): S2}
    final = window(env.params, expected, (4, 3), 0)  # its last window: the bot's head there
    np.testing.assert_array_equal(env.final_obs[0].numpy(), final)
    assert final[2, 2] == OTHER
    (respawn,) = cells(env, 0)
    assert respawn not in expected and tiles(env) == {**expected, respawn: S0}


def test_a_bot_dies_into_an_agent(backend):
    """The agent eats (growing, so its tail stays at (3, 3)); the bot heading right along the
    top row then has the agent ahead and below, a wall above: it goes straight, into the
    agent's body."""
    env = bots(backend, num_food=0, reward_food=0.5)
    place(env, [[(3, 3), (3, 4), (2, 4)], [(2, 2), (2, 3)]], food=[(2, 5)])
    assert step(env, RIGHT) == [(0.5, False, False)]
    assert int(env.state["length"][0, 1]) == 0 and bot_done(env) == [0.0, 1.0, 1.0]
    agent = [(3, 3), (3, 4), (2, 4), (2, 5)]
    assert cells(env, 0) == agent
    assert tiles(env) == {**dict.fromkeys(agent, S0), (2, 3): CORPSE}


# ------------------------------------------------------------------------------- slots


def test_slots_above_num_bots_stay_empty():
    env = bots("cpu", "random", num_snakes=2, max_bots=3, num_bots=1, num_envs=1, num_food=3)
    gen = np.random.default_rng(1)
    alive = 0
    for _ in range(200):
        env.step(gen.integers(0, 4, env.num_rows))
        st = env.state
        assert st["length"][0, 3:].tolist() == [0, 0]
        assert not np.isin(st["grid"][0], [S3, S3 + 1]).any()
        assert st["bot_score"][0, 1:].tolist() == [0, 0]
        alive += int(st["length"][0, 2] > 0)
    assert alive > 100  # the active bot is mostly on the map
    assert bot_done(env)[2] > 3  # and lived several lives


def test_set_params_num_bots_up_spawns_at_the_next_turn_and_down_clears(backend):
    env = bots(backend, max_bots=3, num_bots=1, num_food=0)
    place(env, [AGENT_AWAY, [(4, 3), (4, 4)], [], []], food=[(4, 5)])
    env.set_params(num_bots=3)
    step(env, LEFT)
    assert cells(env, 1) == [(4, 3), (4, 4), (4, 5)]  # slot 1 played on
    new = [cells(env, k) for k in (2, 3)]
    assert [len(c) for c in new] == [1, 1]  # spawned, did not move
    assert env.state["steps"][0, 2:].tolist() == [0, 0]
    assert {new[0][0], new[1][0]}.isdisjoint({(4, 3), (4, 4), (4, 5), (7, 6)})
    step(env, *safe_actions(env, np.random.default_rng(0)))  # the agent keeps clear of them
    assert env.state["steps"][0, 1:].tolist() == [2, 1, 1]  # all three moved
    # down to one: the upper slots are cleared at the next step, no corpse left behind
    place(env, [AGENT_AWAY, [(4, 4)], [(6, 2), (6, 3), (6, 4)], [(2, 6), (2, 7)]])
    env.set_params(num_bots=1)
    assert int(env.state["length"][0, 2]) == 3  # nothing changes between steps
    step(env, LEFT)
    assert env.state["length"][0, 2:].tolist() == [0, 0]
    now = tiles(env)
    assert not set(now) & {(6, 2), (6, 3), (6, 4), (2, 6), (2, 7)}, now
    assert len(cells(env, 1)) == 1 and now[(7, 6)] == S0 and len(now) == 2


def test_set_params_bot_policy_changes_the_next_move(backend):
    """The cautious case above, played greedy, cautious, greedy on one env."""
    env = bots(backend, "greedy", num_food=0)
    for policy, expected in [("greedy", RIGHT), ("cautious", UP), ("greedy", RIGHT)]:
        env.set_params(bot_policy=policy)
        place(env, [[(3, 6)], [(4, 4)]], food=[(4, 5)])
        step(env, DOWN)
        assert moved((4, 4), cells(env, 1)[-1]) == expected, policy


# ------------------------------------------------------------------------------- food count


def test_raising_num_food_tops_the_map_up_before_the_moves(backend):
    env = bots(backend, num_food=1)
    place(env, [AGENT_AWAY, [(4, 4)]], food=[(2, 2)])
    env.set_params(num_food=4)
    step(env, LEFT)
    food = [c for c, t in tiles(env).items() if t == FOOD]
    assert len(food) == 4 and int(env.state["food_count"][0]) == 4


def test_lowering_num_food_takes_effect_as_food_is_eaten(backend):
    """Three food on the map, num_food 1: the first two eaten are not replaced, the third is."""
    env = make(backend, num_food=3, reward_food=0.5)
    place(env, [[(4, 2), (4, 3)], [(7, 2), (7, 3)]], food=[(4, 4), (7, 4), (2, 7)])
    env.set_params(num_food=1)
    assert step(env, RIGHT, RIGHT) == [(0.5, False, False)] * 2
    assert {c: t for c, t in tiles(env).items() if t == FOOD} == {(2, 7): FOOD}
    assert int(env.state["food_count"][0]) == 1
    place(env, [[(2, 5), (2, 6)], [(7, 2)]], food=[(2, 7)])
    assert step(env, RIGHT, UP)[0] == (0.5, False, False)
    food = [c for c, t in tiles(env).items() if t == FOOD]
    assert len(food) == 1 and food[0] != (2, 7) and int(env.state["food_count"][0]) == 1


# ------------------------------------------------------------------------------- bookkeeping


def safe_actions(env, gen):
    """A random move into an empty, food or corpse cell of each agent's window (up when none)."""
    obs = env.obs.numpy()
    v = env.params.vision
    out = np.zeros(env.num_rows, np.int64)
    for row in range(env.num_rows):
        moves = [a for a, (dr, dc) in DELTA.items() if obs[row, v + dr, v + dc] <= CORPSE]
        out[row] = gen.choice(moves) if moves else UP
    return out


@pytest.mark.parametrize("policy", ["random", "greedy", "cautious"])
def test_bot_done_sums_the_lives_followed_by_hand(policy):
    """Each bot followed through its length alone: a life ends when a bot on the map is gone
    after a step; it moved once in every step it started on the map, and ate in every step it
    grew (the cap is never reached here). The agents play safe, so no step ends them all (which
    would restart the whole map)."""
    num_envs, num_snakes, max_bots = 3, 3, 3
    env = bots(
        "cpu",
        policy,
        num_snakes=num_snakes,
        max_bots=max_bots,
        num_envs=num_envs,
        width=12,
        height=12,
        num_food=6,
        max_snake_length=64,
    )
    gen = np.random.default_rng(2)
    st = env.state
    moves = np.zeros((num_envs, max_bots))
    food = np.zeros((num_envs, max_bots))
    expected = np.zeros((num_envs, 3))
    for _ in range(250):
        before = st["length"][:, num_snakes:].copy()
        env.step(safe_actions(env, gen))
        ended = (env.terminated | env.truncated).numpy().reshape(num_envs, num_snakes)
        assert not ended.all(axis=1).any()  # the map was never restarted
        after = st["length"][:, num_snakes:]
        assert after.max() < 64
        alive = before > 0
        moves += alive
        food += alive & (after == before + 1)
        died = alive & (after == 0)
        expected += np.stack([(food * died).sum(1), (moves * died).sum(1), died.sum(1)], 1)
        moves[died | ~alive] = 0
        food[died | ~alive] = 0
        done = [st[f"bot_done_{name}"] for name in ("food", "steps", "lives")]
        np.testing.assert_array_equal(np.stack(done, 1), expected)
        # the bot's running food this life is what it grew by
        np.testing.assert_array_equal(st["bot_score"][after > 0], food[after > 0])
        for i in range(num_envs):
            grid = st["grid"][i]
            assert int((grid == FOOD).sum()) == 6 == int(st["food_count"][i])
            np.testing.assert_array_equal(st["tiles"][i], np.minimum(grid, SNAKE))
            for k in range(num_snakes + max_bots):
                body = cells(env, k, i)
                assert sorted(divmod(int(c), 12) for c in np.flatnonzero(grid == SNAKE + k)) == (
                    sorted(body)
                )
    assert expected[:, 2].sum() >= 5 and expected[:, 0].sum() >= 1  # lives ended, bots ate


# ------------------------------------------------------------------------------- backends

SPEC = games.get("arena")


def bot_params(policy, num_bots=2):
    return SPEC.make_params(
        width=10,
        height=10,
        vision=2,
        num_snakes=2,
        num_food=4,
        max_bots=2,
        num_bots=num_bots,
        bot_policy=policy,
    )


@pytest.mark.parametrize("num_bots", [1, 2])
@pytest.mark.parametrize("policy", ["random", "greedy", "cautious"])
def test_python_and_cpu_bots_agree_bit_for_bit(policy, num_bots):
    episodes = assert_backends_agree(
        SPEC, ["python", "cpu"], 3, 80, seed=5, params=bot_params(policy, num_bots)
    )
    assert episodes > 10


SIM_SCRIPT = """
import numpy as np

from fasttrain import games
from fasttrain.kernels import KernelEnv, assert_backends_agree

spec = games.get("arena")


def params(policy, num_bots):
    return spec.make_params(width=8, height=8, vision=1, num_snakes=2, num_food=3, max_bots=2,
                            num_bots=num_bots, bot_policy=policy)


for policy in ("random", "greedy", "cautious"):
    assert assert_backends_agree(spec, ["cpu", "cuda"], 2, 25, seed=3,
                                 params=params(policy, 2)) > 0
# set_params between steps: the cuda launcher arguments take the new values too
envs = [KernelEnv(spec, 2, backend, params("greedy", 1), seed=4) for backend in ("cpu", "cuda")]
for env in envs:
    env.reset(seed=4)
gen = np.random.default_rng(4)
for t, change in enumerate([None] * 5 + [("cautious", 2)] + [None] * 5 + [("random", 0)] * 6):
    actions = gen.integers(0, 4, (envs[0].num_rows,))
    for env in envs:
        if change:
            env.set_params(params(*change))
        env.arrays["actions"][...] = env.xp.asarray(actions)
        assert env.step() == -1
    cpu, cuda = (env.state_dict() for env in envs)
    for name in cpu:
        if name != "final_obs":  # defined only where an episode ended
            assert np.array_equal(cpu[name], cuda[name]), (t, name)
# a reset after set_params spawns the new number of bots on both
for env in envs:
    env.set_params(params("cautious", 2))
    env.reset(seed=9)
cpu, cuda = (env.state_dict() for env in envs)
assert (cpu["length"][:, 2:] > 0).all()
for name in cpu:
    if name != "final_obs":
        assert np.array_equal(cpu[name], cuda[name]), ("reset", name)
print("SIMULATOR OK")
"""


def test_bots_on_the_cuda_simulator_match_cpu(tmp_path):
    result = run_on_simulator(SIM_SCRIPT, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "SIMULATOR OK" in result.stdout


# ------------------------------------------------------------------------------- params, render


@pytest.mark.parametrize(
    "params, message",
    [
        ({"max_bots": 1, "num_bots": 2}, r"num_bots must be in 0..max_bots = 1, got 2"),
        ({"max_bots": 1, "num_bots": -1}, r"num_bots must be in 0..max_bots = 1, got -1"),
        ({"num_bots": 1}, r"num_bots must be in 0..max_bots = 0, got 1"),
        (
            {"width": 8, "height": 8, "vision": 3, "num_snakes": 1, "num_food": 1, "max_bots": 3},
            "1 snakes, 3 bots and 1 food do not fit on 4 free cells",
        ),
        ({"bot_policy": "smart"}, "'bot_policy' must be one of random, greedy, cautious"),
    ],
)
def test_invalid_bot_params_raise(params, message):
    with pytest.raises(ValueError, match=message):
        make("cpu", **{"width": 24, "height": 24, "vision": 3, **params})


def test_render_draws_bot_heads_in_upper_case():
    env = bots(max_bots=1)
    place(env, [[(4, 3), (4, 4)], [(6, 6), (6, 7)]])
    assert env.render(0).splitlines()[6] == "##....bB##"


def test_the_bots_read_the_maps_tile_codes():
    """arena_bots keeps its own copy of the tile codes (arena imports it, not the reverse)."""
    from fasttrain.games import arena, arena_bots

    copies = (arena_bots._WALL, arena_bots._FOOD, arena_bots._CORPSE, arena_bots._SNAKE)
    assert copies == (arena.WALL, arena.FOOD, arena.CORPSE, arena.SNAKE)
    assert arena.SPEC.choices["bot_policy"] == arena_bots.BOT_POLICIES
