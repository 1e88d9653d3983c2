"""The Gymnasium and Stable-Baselines3 adapters: spaces, return types, same-step auto-reset,
final observations, copies, seeding, and a short SB3 PPO run on CartPole."""

from __future__ import annotations

import numpy as np
import pytest

import fasttrain

gymnasium = pytest.importorskip("gymnasium")
from gymnasium.vector import AutoresetMode  # noqa: E402

from fasttrain.adapters.gym import make_vec  # noqa: E402

X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * np.pi / 360
ARENA = dict(width=12, height=12, num_snakes=3, num_food=2, vision=2)  # 3 agents per env


def gym_cartpole(num_envs):
    """Gymnasium's own CartPole-v1 vector env in the mode our adapter declares."""
    return gymnasium.make_vec(
        "CartPole-v1",
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )


def first_episode_end(envs, actions, max_steps=200):
    """Step with ``actions`` until some episode ends; returns the step's results."""
    for _ in range(max_steps):
        out = envs.step(actions)
        if out[2].any() or out[3].any():
            return out
    raise AssertionError("no episode ended")


# ------------------------------------------------------------------------------- gymnasium


def test_gym_spaces_match_gymnasium_cartpole():
    ours, ref = make_vec("cartpole", 3), gym_cartpole(3)
    assert ours.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    assert ours.single_observation_space == ref.single_observation_space
    assert ours.observation_space == ref.observation_space
    assert ours.single_action_space == ref.single_action_space
    assert ours.action_space == ref.action_space
    assert ours.num_envs == 3


def test_gym_snake_grid_is_uint8_box_0_255():
    envs = make_vec("snake", 2, seed=0, height=6, width=7)
    space = envs.single_observation_space
    assert space.dtype == np.uint8 and space.shape == (4, 6, 7)
    assert np.all(space.low == 0) and np.all(space.high == 255)
    assert envs.action_space == gymnasium.spaces.MultiDiscrete([4, 4])
    obs, _ = envs.reset(seed=0)
    for _ in range(30):
        assert envs.observation_space.contains(obs)
        obs, *_ = envs.step(envs.action_space.sample())


def test_gym_reset_and_step_types_and_values():
    envs = make_vec("cartpole", 4, seed=0)
    envs.action_space.seed(0)
    obs, infos = envs.reset(seed=1)
    assert isinstance(obs, np.ndarray) and obs.dtype == np.float32 and obs.shape == (4, 4)
    assert infos == {}
    assert envs.observation_space.contains(obs)
    for _ in range(100):
        obs, rewards, terminated, truncated, infos = envs.step(envs.action_space.sample())
        assert envs.observation_space.contains(obs)
        assert isinstance(infos, dict)
        for array, dtype in ((rewards, np.float32), (terminated, np.bool_), (truncated, np.bool_)):
            assert isinstance(array, np.ndarray) and array.shape == (4,) and array.dtype == dtype
        np.testing.assert_array_equal(rewards, 1.0)


def test_gym_reset_seed_is_deterministic():
    envs = make_vec("cartpole", 5)
    a, _ = envs.reset(seed=11)
    steps_a = [envs.step(np.ones(5, dtype=np.int64))[0] for _ in range(20)]
    b, _ = envs.reset(seed=11)
    steps_b = [envs.step(np.ones(5, dtype=np.int64))[0] for _ in range(20)]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.stack(steps_a), np.stack(steps_b))
    c, _ = envs.reset(seed=12)
    assert not np.array_equal(a, c)
    d, _ = envs.reset()  # no seed: the streams go on, so a new start
    assert not np.array_equal(c, d)
    assert envs.np_random_seed == 12


def test_gym_same_step_autoreset_and_final_obs():
    envs = make_vec("cartpole", 6, seed=0)
    envs.reset(seed=0)
    obs, _, terminated, truncated, infos = first_episode_end(envs, np.ones(6, dtype=np.int64))
    done = terminated | truncated
    np.testing.assert_array_equal(infos["_final_obs"], done)
    np.testing.assert_array_equal(infos["_final_info"], done)
    assert infos["final_obs"].dtype == object and infos["final_obs"].shape == (6,)
    for i in range(6):
        final = infos["final_obs"][i]
        if not done[i]:
            assert final is None
            continue
        assert envs.single_observation_space.contains(final)
        # the final observation is past a threshold; the returned one is a new episode's start
        assert abs(final[0]) > X_LIMIT or abs(final[2]) > THETA_LIMIT
        assert np.all(np.abs(obs[i]) <= 0.05)
    assert terminated.any() and not truncated.any()


def test_gym_infos_have_the_keys_sync_vector_env_gives():
    ours, ref = make_vec("cartpole", 2, seed=0), gym_cartpole(2)
    ours.reset(seed=0)
    ref.reset(seed=0)
    actions = np.array([1, 1])
    ours_infos = first_episode_end(ours, actions)[4]
    ref_infos = first_episode_end(ref, actions)[4]
    assert (
        set(ours_infos)
        == set(ref_infos)
        == {"final_obs", "_final_obs", "final_info", "_final_info"}
    )
    ours.reset(seed=0)
    assert ours.step(np.array([0, 1]))[4] == {}  # nothing ends on the first step


def test_gym_truncation_final_obs():
    envs = make_vec("cartpole", 2, seed=0, max_episode_steps=4)
    envs.reset(seed=0)
    for t in range(4):
        obs, _, terminated, truncated, infos = envs.step(np.array([t % 2, 1 - t % 2]))
    np.testing.assert_array_equal(truncated, [True, True])
    assert not terminated.any()
    for i in range(2):
        assert not np.array_equal(infos["final_obs"][i], obs[i])


def test_gym_copy_keeps_returned_arrays_and_views_share_memory():
    envs = make_vec("cartpole", 3, seed=0)
    obs0, _ = envs.reset(seed=0)
    kept = obs0.copy()
    obs1, rewards, *_ = envs.step(np.ones(3, dtype=np.int64))
    envs.step(np.zeros(3, dtype=np.int64))
    np.testing.assert_array_equal(obs0, kept)  # a later step does not change what was returned
    assert not np.shares_memory(obs1, envs.env.arrays["obs"])
    views = make_vec("cartpole", 3, seed=0, copy=False)
    obs, rewards, terminated, truncated, _ = views.step(np.ones(3, dtype=np.int64))
    for array, name in ((obs, "obs"), (rewards, "rewards"), (terminated, "terminated")):
        assert np.shares_memory(array, views.env.arrays[name])
    before = obs.copy()
    views.step(np.ones(3, dtype=np.int64))
    assert not np.array_equal(obs, before)  # the view shows the newest step


def test_gym_record_episode_statistics_wrapper():
    """Gymnasium's own statistics wrapper reads our same-step auto-reset correctly."""
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    envs = RecordEpisodeStatistics(make_vec("cartpole", 4, seed=0, max_episode_steps=30))
    envs.reset(seed=0)
    inner = envs.unwrapped.env
    inner.stats()
    lengths = []
    for t in range(120):
        _, _, _, _, infos = envs.step(np.array([t % 2, 1, 0, (t // 3) % 2]))
        if "episode" in infos:
            lengths += list(infos["episode"]["l"][infos["_episode"]])
            np.testing.assert_array_equal(
                infos["episode"]["r"][infos["_episode"]], infos["episode"]["l"][infos["_episode"]]
            )
    ours = inner.stats()
    assert len(lengths) == ours["episodes"] > 4
    assert np.mean(lengths) == pytest.approx(ours["length"])


def test_gym_bad_input_raises():
    envs = make_vec("cartpole", 2)
    with pytest.raises(ValueError, match="out of range"):
        envs.step(np.array([0, 2]))
    with pytest.raises(ValueError, match="shape"):
        envs.step(np.array([0, 1, 1]))
    with pytest.raises(ValueError, match="options"):
        envs.reset(options={"low": -0.1})
    with pytest.raises(ValueError, match="unknown parameter"):
        make_vec("cartpole", 2, gravity_x=1.0)


def test_gym_render_ansi():
    envs = make_vec("cartpole", 2, render_mode="ansi")
    frames = envs.render()
    assert len(frames) == 2 and all("theta=" in f for f in frames)
    assert make_vec("cartpole", 1).render() is None


def test_gym_arena_agents_are_rows():
    """Agent a of env i is row i*num_agents + a, with its own episodes and final_obs."""
    envs = make_vec("arena", 2, seed=0, render_mode="ansi", **ARENA)
    twin = fasttrain.make("arena", num_envs=2, seed=0, **ARENA)
    assert envs.num_envs == 6
    space = envs.single_observation_space
    assert space.dtype == np.uint8 and space.shape == (5, 5)
    assert np.all(space.low == 0) and np.all(space.high == 5)
    assert envs.action_space == gymnasium.spaces.MultiDiscrete([4] * 6)
    obs, _ = envs.reset(seed=0)
    np.testing.assert_array_equal(obs, twin.obs.numpy())
    rng = np.random.default_rng(0)
    some_rows_ended = False
    for _ in range(60):
        actions = rng.integers(4, size=6)
        obs, rewards, terminated, truncated, infos = envs.step(actions)
        twin.step(actions)
        assert envs.observation_space.contains(obs)
        for mine, kernel in ((obs, twin.obs), (rewards, twin.rewards)):
            np.testing.assert_array_equal(mine, kernel.numpy())
        np.testing.assert_array_equal(terminated, twin.terminated.numpy())
        done = terminated | truncated
        if not done.any():
            assert infos == {}
            continue
        some_rows_ended |= not done.all()
        np.testing.assert_array_equal(infos["_final_obs"], done)
        for row in range(6):
            if done[row]:
                np.testing.assert_array_equal(infos["final_obs"][row], twin.final_obs[row].numpy())
            else:
                assert infos["final_obs"][row] is None
    assert some_rows_ended  # rows end apart: one agent's death ends no other row's episode
    frames = envs.render()
    assert frames == (twin.render(0), twin.render(1)) and frames[0] != frames[1]


# ------------------------------------------------------------------------------- sb3

sb3 = pytest.importorskip("stable_baselines3")
from stable_baselines3.common.vec_env import VecCheckNan, VecEnv, VecMonitor  # noqa: E402

from fasttrain.adapters.sb3 import make_vec_env  # noqa: E402


def test_sb3_step_semantics_match_dummy_vec_env():
    venv = VecCheckNan(
        make_vec_env("cartpole", 3, seed=0, max_episode_steps=5), raise_exception=True
    )
    assert isinstance(venv.unwrapped, VecEnv)
    assert venv.observation_space == gymnasium.spaces.Box(
        -np.array([4.8, np.inf, 2 * THETA_LIMIT, np.inf], dtype=np.float32),
        np.array([4.8, np.inf, 2 * THETA_LIMIT, np.inf], dtype=np.float32),
    )
    assert venv.action_space == gymnasium.spaces.Discrete(2)
    obs = venv.reset()
    assert obs.shape == (3, 4) and obs.dtype == np.float32
    for t in range(5):  # alternate pushes keep every pole up until the 5-step limit
        kept = obs.copy()
        obs, rewards, dones, infos = venv.step(np.full(3, t % 2))
        assert not np.shares_memory(obs, venv.unwrapped.env.arrays["obs"])
        assert not np.array_equal(kept, obs)  # what was returned before stays as it was
        assert dones.dtype == np.bool_ and rewards.shape == (3,) and len(infos) == 3
        assert dones.all() == (t == 4)
    for i in range(3):
        assert infos[i]["TimeLimit.truncated"] is True
        assert infos[i]["terminal_observation"].shape == (4,)
        assert not np.array_equal(infos[i]["terminal_observation"], obs[i])
        assert np.all(np.abs(obs[i]) <= 0.05)
    # env 2 pushed right until its pole falls: terminated, so TimeLimit.truncated is False
    venv = make_vec_env("cartpole", 3, seed=0)
    venv.reset()
    for _ in range(50):
        obs, rewards, dones, infos = venv.step(np.array([0, 1, 1]))
        if dones[2]:
            break
    assert dones[2] and infos[2]["TimeLimit.truncated"] is False
    final = infos[2]["terminal_observation"]
    assert abs(final[0]) > X_LIMIT or abs(final[2]) > THETA_LIMIT
    if not dones[0]:
        assert infos[0] == {"TimeLimit.truncated": False}


def test_sb3_seed_attrs_and_methods():
    venv = make_vec_env("cartpole", 4, seed=0)
    venv.seed(7)
    np.testing.assert_array_equal(venv.reset(), make_vec_env("cartpole", 4, seed=7).reset())
    again = venv.reset()  # the seed is used once; the streams then go on
    assert not np.array_equal(again, make_vec_env("cartpole", 4, seed=7).reset())
    assert venv.get_attr("render_mode") == [None] * 4
    assert venv.get_attr("max_episode_steps", indices=[1, 2]) == [500, 500]
    assert venv.get_attr("num_actions") == [2] * 4
    with pytest.raises(AttributeError):
        venv.get_attr("no_such_thing")
    with pytest.raises(AttributeError):
        venv.set_attr("gravity", 1.0)
    pictures = venv.env_method("render", indices=[0, 3])
    assert len(pictures) == 2 and "theta=" in pictures[0]
    assert venv.env_is_wrapped(VecMonitor) == [False] * 4
    venv.close()


def test_sb3_arena_agents_are_envs():
    venv = make_vec_env("arena", 2, seed=0, **ARENA)
    twin = fasttrain.make("arena", num_envs=2, seed=0, **ARENA)
    assert venv.num_envs == 6 and venv.action_space == gymnasium.spaces.Discrete(4)
    obs = venv.reset()
    assert obs.shape == (6, 5, 5) and obs.dtype == np.uint8
    np.testing.assert_array_equal(obs, twin.obs.numpy())
    rng = np.random.default_rng(1)
    ended = 0
    for _ in range(40):
        actions = rng.integers(4, size=6)
        obs, rewards, dones, infos = venv.step(actions)
        twin.step(actions)
        np.testing.assert_array_equal(obs, twin.obs.numpy())
        np.testing.assert_array_equal(rewards, twin.rewards.numpy())
        assert len(infos) == 6
        for row in range(6):
            if dones[row]:
                final = infos[row]["terminal_observation"]
                np.testing.assert_array_equal(final, twin.final_obs[row].numpy())
                ended += 1
            else:
                assert "terminal_observation" not in infos[row]
    assert ended > 0
    assert venv.get_attr("num_snakes") == [3] * 6
    assert venv.env_method("render", indices=[2, 3]) == [twin.render(0), twin.render(1)]


def test_sb3_ppo_learns_cartpole_a_little():
    """4k steps of RL-Zoo PPO lift a deterministic policy well above a constant push (~9-10)."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(1)
    venv = VecMonitor(make_vec_env("cartpole", 8, seed=0))
    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=lambda p: 1e-3 * p,
        clip_range=lambda p: 0.2 * p,
        seed=0,
        device="cpu",
    )
    model.learn(4096)
    assert model.num_timesteps == 4096
    episodes = list(model.ep_info_buffer)
    assert len(episodes) >= 50 and all(e["r"] == e["l"] for e in episodes)
    eval_env = VecMonitor(make_vec_env("cartpole", 8, seed=123))
    mean_return, _ = evaluate_policy(model, eval_env, n_eval_episodes=16, deterministic=True)
    assert mean_return > 40


def test_adapters_work_on_the_python_backend():
    gym_envs = make_vec("cartpole", 2, backend="python", seed=0)
    sb3_env = make_vec_env("cartpole", 2, backend="python", seed=0)
    np.testing.assert_array_equal(gym_envs.reset(seed=0)[0], sb3_env.reset())
    cpu = fasttrain.make("cartpole", num_envs=2, backend="cpu", seed=0)
    np.testing.assert_array_equal(gym_envs.step(np.array([0, 1]))[0], cpu.step(np.array([0, 1]))[0])
