"""One plain gymnasium.Env per single-agent game: the ecosystem's checkers, final observations,
seeding and params (registration: ``test_gym_registry.py``; in either import order:
``tests/test_fasttrain.py``)."""

import warnings

import numpy as np
import pytest
import torch

gymnasium = pytest.importorskip("gymnasium")

import fasttrain  # noqa: E402
from fasttrain.adapters.gym import GymEnv, gym_id  # noqa: E402


@pytest.mark.parametrize("game", ["snake", "cartpole", "minatar-breakout"])
def test_gymnasium_check_env_passes(game):
    from gymnasium.utils.env_checker import check_env

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a checker warning is a failure here, except:
        # CartPole's velocity bounds are infinite, as in Gymnasium's own CartPole-v1
        warnings.filterwarnings("ignore", message=".*infinity.*")
        check_env(gymnasium.make(gym_id(game)).unwrapped, skip_render_check=False)


@pytest.mark.parametrize("game", ["snake", "cartpole"])
def test_stable_baselines3_check_env_passes(game):
    sb3_checker = pytest.importorskip("stable_baselines3.common.env_checker")
    sb3_checker.check_env(GymEnv(game), warn=True)


def test_an_episode_end_returns_its_final_observation_and_reset_starts_the_next():
    env = GymEnv("snake", height=5, width=5)
    twin = fasttrain.make("snake", num_envs=1, backend="cpu", seed=7, height=5, width=5)
    obs, _ = env.reset(seed=7)
    assert np.array_equal(obs, twin.obs[0].numpy())
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(300):
        action = int(rng.integers(4))
        obs, reward, terminated, truncated, _ = env.step(action)
        _, r, te, tr = twin.step(torch.tensor([action]))
        assert reward == float(r[0]) and terminated == bool(te[0]) and truncated == bool(tr[0])
        if terminated or truncated:
            ends += 1
            assert np.array_equal(obs, twin.final_obs[0].numpy())
            start, _ = env.reset()  # no reseed: the game restarted already, as the twin did
            assert np.array_equal(start, twin.obs[0].numpy())
        else:
            assert np.array_equal(obs, twin.obs[0].numpy())
    assert ends > 3


def test_the_same_seed_replays_the_same_episode():
    env = GymEnv("minatar-breakout")

    def play(seed):
        frames = [env.reset(seed=seed)[0]]
        for t in range(60):
            frames.append(env.step(t % 3)[0])
        return np.stack(frames)

    assert np.array_equal(play(3), play(3))
    assert not np.array_equal(play(3), play(4))


def test_params_renders_and_refusals():
    env = gymnasium.make("fasttrain/MinAtar-Freeway-v0", render_mode="rgb_array")
    env.reset(seed=0)
    picture = env.render()
    assert picture.dtype == np.uint8 and picture.shape == (10, 10, 3)
    assert gymnasium.make("fasttrain/Snake-v0", height=6, width=7).observation_space.shape == (
        4,
        6,
        7,
    )
    assert "\n" in GymEnv("cartpole", render_mode="ansi").render()
    with pytest.raises(ValueError, match="agents per environment"):
        GymEnv("arena")
    with pytest.raises(ValueError, match="render_mode must be"):
        GymEnv("snake", render_mode="human")
    with pytest.raises(ValueError, match=r"action must be an int in \[0, 2\)"):
        GymEnv("cartpole").step(2)
