"""CartPole against Gymnasium's CartPole-v1: one step from many states, whole trajectories,
the failure thresholds, truncation at 500 and the initial state range."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fasttrain
from fasttrain.games.cartpole import SPEC, CartPoleParams, failed
from fasttrain.kernels.statecheck import StateError, state_problem

gymnasium = pytest.importorskip("gymnasium")
from gymnasium.envs.classic_control.cartpole import CartPoleEnv  # noqa: E402

X_LIMIT = 2.4
THETA_LIMIT = 12 * 2 * math.pi / 360
STATE_NAMES = ("x", "x_dot", "theta", "theta_dot")
BACKENDS = ("python", "cpu")


def threshold_states() -> np.ndarray:
    """States whose next x or theta lands exactly on a threshold or one float64 step beyond.

    With the velocity 0, Euler leaves the position unchanged (``x + tau * 0 == x``), so the state
    after the step sits exactly where it was put.
    """
    rows = []
    for limit, col in ((X_LIMIT, 0), (THETA_LIMIT, 2)):
        for sign in (-1.0, 1.0):
            edge = sign * limit
            for value in (
                edge,
                np.nextafter(edge, sign * np.inf),
                edge + sign * 1e-6,
                np.nextafter(edge, 0.0),
            ):
                row = [0.0, 0.0, 0.0, 0.0]
                row[col] = value
                rows.append(row)
            # on the edge now, moving outwards or inwards this step
            for velocity in (sign, -sign):
                row = [0.0, 0.0, 0.0, 0.0]
                row[col], row[col + 1] = edge, velocity
                rows.append(row)
    return np.array(rows, dtype=np.float64)


def random_states(n: int, seed: int = 0) -> np.ndarray:
    """States across and beyond the whole live region, velocities up to fast swings."""
    rng = np.random.default_rng(seed)
    scale = np.array([2.6, 3.0, 0.23, 4.0])
    return rng.uniform(-1, 1, (n, 4)) * scale


def gym_step(state: np.ndarray, action: int):
    """Gymnasium's CartPole-v1 step from ``state`` (obs float32, reward, terminated)."""
    env = CartPoleEnv()
    env.reset(seed=0)
    env.state = state.copy()
    obs, reward, terminated, truncated, _ = env.step(action)
    assert not truncated
    return obs, reward, terminated


def set_state(env, states: np.ndarray, steps: int = 0):
    """Write float64 states (num_envs, 4) into a fasttrain cartpole env."""
    for k, name in enumerate(STATE_NAMES):
        env.state[name][:] = states[:, k]
    env.state["steps"][:] = steps


def observed(env) -> np.ndarray:
    """The observation each env ended its step with (final_obs where it auto-reset)."""
    done = (env.terminated | env.truncated).numpy()
    return np.where(done[:, None], env.final_obs.numpy(), env.obs.numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_step_matches_gymnasium(backend):
    states = np.concatenate([threshold_states(), random_states(300)])
    states = np.repeat(states, 2, axis=0)
    actions = np.tile([0, 1], len(states) // 2)
    env = fasttrain.make("cartpole", num_envs=len(states), backend=backend, seed=0)
    set_state(env, states)
    env.step(actions)
    expected = [gym_step(s, int(a)) for s, a in zip(states, actions, strict=True)]
    want_obs = np.array([e[0] for e in expected])
    want_terminated = np.array([e[2] for e in expected])
    assert 20 < want_terminated.sum() < len(states) - 20  # both outcomes are well covered
    np.testing.assert_array_equal(env.terminated.numpy(), want_terminated)
    np.testing.assert_array_equal(env.rewards.numpy(), [e[1] for e in expected])
    assert not env.truncated.numpy().any()
    # the float64 state rounded to float32; sin/cos may differ by one float64 ulp between libms
    np.testing.assert_array_max_ulp(observed(env), want_obs, maxulp=1)


def test_thresholds_are_strict():
    """Exactly on a threshold is alive; one float64 step beyond is dead, on either side."""
    for limit, as_x in ((X_LIMIT, True), (THETA_LIMIT, False)):
        for edge in (limit, -limit):
            beyond = np.nextafter(edge, math.copysign(np.inf, edge))
            x, theta = (edge, 0.0) if as_x else (0.0, edge)
            assert not failed(x, theta, X_LIMIT, THETA_LIMIT)
            x, theta = (beyond, 0.0) if as_x else (0.0, beyond)
            assert failed(x, theta, X_LIMIT, THETA_LIMIT)
    params = CartPoleParams()
    assert params.theta_threshold == CartPoleEnv().theta_threshold_radians
    assert params.x_threshold == CartPoleEnv().x_threshold


def test_whole_episodes_match_gymnasium():
    """Start from fasttrain's reset states and follow random actions until each pole falls."""
    num_envs = 16
    env = fasttrain.make("cartpole", num_envs=num_envs, backend="cpu", seed=3)
    refs = []
    for i in range(num_envs):
        ref = CartPoleEnv()
        ref.reset(seed=0)
        ref.state = np.array([env.state[name][i] for name in STATE_NAMES])
        np.testing.assert_array_equal(env.obs[i].numpy(), ref.state.astype(np.float32))
        refs.append(ref)
    alive = np.ones(num_envs, dtype=bool)
    rng = np.random.default_rng(0)
    for t in range(200):
        actions = rng.integers(0, 2, num_envs)
        env.step(actions)
        got = observed(env)
        for i in np.flatnonzero(alive):
            obs, reward, terminated, _, _ = refs[i].step(int(actions[i]))
            np.testing.assert_allclose(got[i], obs, rtol=1e-6, atol=1e-7, err_msg=f"t={t} i={i}")
            assert bool(env.terminated[i]) == terminated, (t, i)
            assert float(env.rewards[i]) == reward
            alive[i] = not terminated
        if not alive.any():
            break
    assert not alive.any()  # random actions drop every pole well within 200 steps


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncates_at_500_steps_unless_terminated(backend):
    env = fasttrain.make("cartpole", num_envs=3, backend=backend, seed=0)
    states = np.array([[0.0, 0.0, 0.01, 0.0], [0.0, 0.0, 0.01, 0.0], [X_LIMIT, 1.0, 0.0, 0.0]])
    set_state(env, states, steps=498)
    env.state["steps"][1] = 499
    env.state["steps"][2] = 499
    env.step(np.zeros(3, dtype=np.int64))
    np.testing.assert_array_equal(env.truncated.numpy(), [False, True, False])
    np.testing.assert_array_equal(env.terminated.numpy(), [False, False, True])
    np.testing.assert_array_equal(env.rewards.numpy(), [1.0, 1.0, 1.0])
    # the ended envs restarted: step counter back to 0, a fresh state near upright
    np.testing.assert_array_equal(env.state["steps"], [499, 0, 0])
    assert np.all(np.abs(env.obs[1:].numpy()) <= 0.05)
    assert env.final_obs[1, 2].item() == pytest.approx(0.01)


def test_truncation_follows_gymnasium_time_limit():
    """A short limit, from the same start as Gymnasium's TimeLimit wrapper."""
    limit = 7
    env = fasttrain.make("cartpole", num_envs=1, backend="cpu", seed=0, max_episode_steps=limit)
    ref = gymnasium.make("CartPole-v1", max_episode_steps=limit)
    ref.reset(seed=0)
    ref.unwrapped.state = np.array([env.state[name][0] for name in STATE_NAMES])
    for t in range(limit):
        action = t % 2  # alternate pushes keep the pole up
        env.step(np.array([action]))
        _, reward, terminated, truncated, _ = ref.step(action)
        assert (bool(env.terminated[0]), bool(env.truncated[0])) == (terminated, truncated), t
    assert truncated and not terminated
    stats = env.stats()
    assert stats["length"] == limit and stats["return"] == limit and stats["score"] == limit


@pytest.mark.parametrize("backend", BACKENDS)
def test_initial_state_is_uniform_in_small_box(backend):
    env = fasttrain.make("cartpole", num_envs=2000, backend=backend, seed=5)
    states = np.stack([env.state[name] for name in STATE_NAMES], axis=1)
    assert states.dtype == np.float64
    assert np.all(states >= -0.05) and np.all(states < 0.05)
    np.testing.assert_array_equal(env.obs.numpy(), states.astype(np.float32))
    np.testing.assert_array_equal(env.state["steps"], 0)
    assert np.all(states.min(axis=0) < -0.045) and np.all(states.max(axis=0) > 0.045)
    assert np.all(np.abs(states.mean(axis=0)) < 0.006)  # uniform: mean 0, sd 0.0289/sqrt(n)
    # the four variables are drawn independently, not one number copied four times
    assert np.all(np.abs(np.corrcoef(states.T) - np.eye(4)) < 0.15)  # sd 0.022


def test_score_counts_steps_survived():
    env = fasttrain.make("cartpole", num_envs=64, backend="cpu", seed=1)
    for _ in range(100):
        env.step(np.ones(64, dtype=np.int64))  # always right: every pole falls quickly
    stats = env.stats()
    assert stats["episodes"] >= 64
    assert stats["score"] == stats["length"] == stats["return"]
    assert 5 < stats["length"] < 30


def test_render_shows_cart_and_angle():
    env = fasttrain.make("cartpole", num_envs=1, backend="python", seed=0)
    set_state(env, np.array([[X_LIMIT, 0.0, math.radians(5.0), 0.0]]))
    text = env.render(0)
    track = text.splitlines()[0]
    assert track.endswith("o|") and "theta=+5.00deg /" in text


# ------------------------------------------------------------------------------- state from a file


def test_every_state_random_play_reaches_loads_whatever_the_thresholds():
    """Bounds read no param a curriculum may change: a cart in flight where a wider stage let
    it go still loads under the narrower thresholds."""
    env = fasttrain.make("cartpole", num_envs=32, backend="cpu", seed=2, x_threshold=9.0)
    gen = np.random.default_rng(2)
    narrow = CartPoleParams()
    wide = 0
    for t in range(400):
        st = env.state  # balance the pole, mostly: the cart drifts far
        balance = (st["theta"] + 0.5 * st["theta_dot"] > 0).astype(np.int64)
        env.step(np.where(gen.random(env.num_rows) < 0.2, gen.integers(0, 2, 32), balance))
        wide += int((np.abs(env.state["x"]) > narrow.x_threshold).sum())
        if t % 5 == 0:
            assert state_problem(SPEC, narrow, env.state_dict(), 2) is None, t
    assert wide > 0


@pytest.mark.parametrize(
    ("name", "value", "valid"),
    [
        ("steps", -1, "0 to 1073741824"),
        ("x", np.inf, "finite"),
        ("x_dot", np.nan, "finite"),
        ("theta", -np.inf, "finite"),
        ("theta_dot", np.nan, "finite"),
    ],
)
def test_a_field_outside_its_range_is_refused_and_never_reaches_the_step(name, value, valid):
    env = fasttrain.make("cartpole", num_envs=3, backend="cpu", seed=0)
    twin = fasttrain.make("cartpole", num_envs=3, backend="cpu", seed=0)
    state = env.state_dict()
    state[name] = state[name].copy()
    state[name][1] = value
    with pytest.raises(StateError) as info:
        env.load_state_dict(state)
    assert str(info.value) == f"game 'cartpole' state, env 1: {name} = {value!r}; valid: {valid}"
    for e in (env, twin):  # nothing was written: both step on alike
        e.step(np.array([0, 1, 0]))
    for key, array in env.state_dict().items():
        np.testing.assert_array_equal(array, twin.state_dict()[key], err_msg=key)
