"""fasttrain.adapters.gym_registry: a Gymnasium id for each single-agent game, registered once."""

import pytest

gymnasium = pytest.importorskip("gymnasium")

import fasttrain  # noqa: E402
from fasttrain.adapters.gym_registry import gym_id, register_envs  # noqa: E402


def test_ids_name_every_single_agent_game():
    assert gym_id("snake") == "fasttrain/Snake-v0"
    assert gym_id("cartpole") == "fasttrain/CartPole-v0"
    assert gym_id("minatar-space_invaders") == "fasttrain/MinAtar-SpaceInvaders-v0"
    ids = register_envs()
    single = [g for g in fasttrain.games.names() if g != "arena"]
    assert sorted(ids) == sorted(gym_id(g) for g in single)
    assert all(i in gymnasium.registry for i in ids)
    assert gym_id("arena") not in gymnasium.registry  # several agents: not one Env


def test_registering_again_keeps_the_ids_there():
    first = register_envs()
    specs = {i: gymnasium.registry[i] for i in first}
    assert register_envs() == first
    assert all(gymnasium.registry[i] is specs[i] for i in first)
    assert specs[gym_id("snake")].kwargs == {"game": "snake"}
    assert specs[gym_id("snake")].entry_point == "fasttrain.adapters.gym:GymEnv"
