"""fasttrain.kernels.spec: a GameSpec checks its game when it is made (function signatures, the
names a function and its helpers read, agent functions, str params and their choices, a constant
action count, the game's name, constructs a compiled game cannot have) and ``make_params`` checks
every override."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
from numpy import zeros

from fasttrain.config.read import tomllib
from fasttrain.games.snake import SPEC, SnakeParams
from tests.fasttrain.kernels.test_agents import COUNTER, COUNTER_WHOLE
from tests.fasttrain.kernels.test_env import DIAL, MODES
from tests.fasttrain.kernels.test_num_actions import PICK, PICK_FIXED, one_line


def test_unknown_step_argument_names_valid_ones():
    def step_one(i, io, s, p):
        io.rewards[i] = s.body[i, 0] * p.height + s.speed_of_light[i]

    with pytest.raises(ValueError) as excinfo:
        dataclasses.replace(SPEC, step_one=step_one)
    message = str(excinfo.value)
    assert "speed_of_light" in message and "\n" not in message
    for valid in ("obs_flat", "rewards", "rng", "body", "grid", "height", "reward_fruit"):
        assert valid in message


def _helper_reading_a_param_the_game_lacks(i, s, p):
    return s.length[i] * p.depth


def _step_calling_that_helper(i, io, s, p):
    io.rewards[i] = _helper_reading_a_param_the_game_lacks(i, s, p)


def test_an_unknown_name_in_a_helper_is_found_through_the_call_graph():
    with pytest.raises(ValueError) as excinfo:
        dataclasses.replace(SPEC, step_one=_step_calling_that_helper)
    message = str(excinfo.value)
    assert message.startswith("snake._helper_reading_a_param_the_game_lacks reads p.depth")
    assert "valid:" in message and "max_episode_steps" in message and "\n" not in message


def test_a_game_written_the_old_way_gets_one_line_saying_how_to_write_it_now():
    """Before the objects, a game function took one positional argument per array and param."""

    def step_one(i, actions, obs_flat, rewards, terminated, truncated, body, height):
        rewards[i] = actions[i]

    with pytest.raises(ValueError) as excinfo:
        dataclasses.replace(SPEC, step_one=step_one)
    message = str(excinfo.value)
    assert "\n" not in message
    assert message.startswith("snake.step_one must take the env index `i` first, then the objects")
    assert "def step_one(i, io, s, p)" in message
    assert (
        "it takes (i, actions, obs_flat, rewards, terminated, truncated, body, height)" in message
    )


def test_game_functions_must_take_i_first_and_names_must_not_clash():
    def reset_one(env, io, s, p):
        pass

    with pytest.raises(ValueError, match="`i` first"):
        dataclasses.replace(SPEC, reset_one=reset_one)

    @dataclasses.dataclass(frozen=True)
    class ClashParams:
        grid: int = 1  # also a state array

    with pytest.raises(ValueError, match=r"used twice: \['grid'\]"):
        dataclasses.replace(SPEC, params_cls=ClashParams)


# --------------------------------------------------------------- names and forbidden constructs


@pytest.mark.parametrize(
    "name", ["../../evil", "my game", "a.b", "x/y", "..", "", "-dash", "1st", "é", "a" * 65, 5]
)
def test_a_game_name_that_is_not_an_identifier_is_refused_in_one_line(name):
    with pytest.raises(ValueError) as excinfo:
        dataclasses.replace(SPEC, name=name)
    message = str(excinfo.value)
    assert message.startswith(f"game name {name!r} is not valid: a letter, then letters")
    assert "\n" not in message


@pytest.mark.parametrize("name", ["snake", "minatar-space_invaders", "My_Game-2", "a" * 64])
def test_a_valid_game_name_is_a_bare_toml_key_and_one_part_of_a_set_path(name):
    assert dataclasses.replace(SPEC, name=name).name == name
    text = f"[game.{name}]\nheight = 8\n"  # as config.toml writes it, unquoted
    assert tomllib.loads(text) == {"game": {name: {"height": 8}}}
    assert f"game.{name}.height".split(".") == ["game", name, "height"]


def _assigns_into_s(i, io, s, p):
    s.length = 3


def _builds_a_list(i, io, s, p):
    cells = [s.length[i], 0]
    io.rewards[i] = cells[0]


def _builds_in_a_comprehension(i, io, s, p):
    io.rewards[i] = sum({k: k for k in range(3)})


def _allocates(i, io, s, p):
    scratch = np.zeros(4)
    io.rewards[i] = scratch[0]


def _allocates_by_its_own_name(i, io, s, p):
    scratch = zeros(4)
    io.rewards[i] = scratch[0]


def _step_with_a_helper_that_allocates(i, io, s, p):
    io.rewards[i] = _helper_that_allocates(i, s)


def _helper_that_allocates(i, s):
    return np.empty_like(s.length)[i]


@pytest.mark.parametrize(
    "fn, where, says",
    [
        (
            _assigns_into_s,
            _assigns_into_s,
            "assigns to s.length (write into its array: s.length[i]",
        ),
        (_builds_a_list, _builds_a_list, "builds a list (a game may not allocate"),
        (_builds_in_a_comprehension, _builds_in_a_comprehension, "builds a dict"),
        (_allocates, _allocates, "calls np.zeros (a game may not allocate"),
        (_allocates_by_its_own_name, _allocates_by_its_own_name, "calls np.zeros"),
        (_step_with_a_helper_that_allocates, _helper_that_allocates, "calls np.empty_like"),
    ],
)
def test_a_forbidden_construct_is_refused_naming_the_rule_the_function_and_its_line(
    fn, where, says
):
    with pytest.raises(ValueError) as excinfo:
        dataclasses.replace(SPEC, step_one=fn)
    message = str(excinfo.value)
    lines, start = inspect.getsourcelines(where)
    line = start + 1  # each function's offending statement is its first
    assert message.startswith(f"game 'snake': {where.__name__} ({__file__}:{line}) {says}")
    assert "\n" not in message


def test_make_params_accepts_valid_overrides():
    params = SPEC.make_params(height=7, width=np.int32(9), reward_fruit=2, reward_step=-0.5)
    assert isinstance(params, SnakeParams)
    assert (params.height, params.width, params.reward_fruit, params.reward_step) == (7, 9, 2, -0.5)
    assert params.max_steps_without_food == SnakeParams().max_steps_without_food


def test_make_params_rejects_unknown_keys_naming_valid_ones():
    with pytest.raises(ValueError) as excinfo:
        SPEC.make_params(height=6, heigth=6)
    message = str(excinfo.value)
    assert "heigth" in message
    for field in dataclasses.fields(SnakeParams):
        assert field.name in message


@pytest.mark.parametrize(
    "key, value",
    [
        ("height", 8.0),
        ("height", "8"),
        ("height", True),
        ("reward_fruit", "1"),
        ("reward_fruit", None),
        ("max_episode_steps", 1.5),
    ],
)
def test_make_params_rejects_wrong_types(key, value):
    with pytest.raises(TypeError) as excinfo:
        SPEC.make_params(**{key: value})
    message = str(excinfo.value)
    assert key in message
    assert type(getattr(SnakeParams(), key)).__name__ in message


def test_params_reject_invalid_values():
    with pytest.raises(ValueError, match="at least 3x3"):
        SPEC.make_params(height=2)
    with pytest.raises(ValueError, match=">= 0"):
        SPEC.make_params(max_steps_without_food=-1)


def test_a_str_param_reaches_the_kernels_as_its_index():
    for index, mode in enumerate(MODES):
        assert DIAL.param_values(DIAL.make_params(mode=mode))["mode"] == index
    assert DIAL.param_values(DIAL.make_params())["mode"] == 0


@pytest.mark.parametrize("value", ["tripled", "Plain", "", 1, None])
def test_a_value_outside_the_choices_names_the_valid_ones(value):
    with pytest.raises(ValueError) as excinfo:
        DIAL.make_params(mode=value)
    assert str(excinfo.value) == (
        f"game 'dial' parameter 'mode' must be one of plain, doubled, negated; got {value!r}"
    )


def test_a_str_param_without_choices_is_refused_at_creation():
    with pytest.raises(ValueError, match="str param 'mode' needs its valid values in GameSpec"):
        dataclasses.replace(DIAL, name="dial_no_choices", choices={})
    # a default outside its own choices is refused too: kernels could not receive it
    with pytest.raises(ValueError, match="str param 'mode' needs its valid values"):
        dataclasses.replace(DIAL, name="dial_bad_choices", choices={"mode": ("fast", "slow")})


@pytest.mark.parametrize("num_agents", [2, lambda p: p.num_players])
def test_several_agents_without_observe_are_refused(num_agents):
    with pytest.raises(ValueError, match="observe"):
        dataclasses.replace(COUNTER_WHOLE, num_agents=num_agents, observe=None)


def test_reset_agent_without_observe_is_refused():
    with pytest.raises(ValueError, match="observe"):
        dataclasses.replace(COUNTER, num_agents=1, observe=None)


def _observe_agent_first(a, i, io, s, p):
    pass


def _observe_no_agent(i, io, s, p):
    pass


def _reset_agent_env_only(i, io, s, p):
    pass


@pytest.mark.parametrize(
    "field, fn",
    [
        ("observe", _observe_agent_first),
        ("observe", _observe_no_agent),
        ("reset_agent", _reset_agent_env_only),
    ],
)
def test_agent_functions_must_take_i_and_a_first(field, fn):
    with pytest.raises(ValueError, match=rf"{fn.__name__} must take .*`i` and the agent index `a`"):
        dataclasses.replace(COUNTER, **{field: fn})


def test_the_spec_gives_the_count_for_the_params():
    assert PICK.actions(PICK.make_params()) == 6
    assert PICK.actions(PICK.make_params(minimal_action_set=True)) == 3
    assert PICK_FIXED.actions(PICK.make_params(minimal_action_set=True)) == 4
    numpy_count = dataclasses.replace(PICK, num_actions=lambda p: np.int64(5))
    count = numpy_count.actions(PICK.make_params())
    assert count == 5 and type(count) is int


@pytest.mark.parametrize("count", [0, -1, True, 2.0, "3", None])
def test_a_bad_constant_count_fails_at_the_spec_in_one_line(count):
    with pytest.raises(ValueError) as excinfo:
        dataclasses.replace(PICK, name="bad_pick", num_actions=count)
    assert one_line(excinfo) == (
        f"game 'bad_pick': num_actions must be an int >= 1 or a function of the params, "
        f"got {count!r}"
    )
