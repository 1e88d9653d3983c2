"""Q(lambda) kernel against a plain NumPy reference: random rewards, terminations and
truncations mid-rollout; lambda = 0 gives one-step Q-learning targets, lambda = 1 Monte-Carlo
returns."""

import numpy as np
import pytest

from fasttrain.kernels.gae import columns
from fasttrain.kernels.qlambda import QLAMBDA, qlambda


def bootstraps(values, last_values, final_values, terminated, truncated):
    """``B[t]``: the greedy value of the state after step ``t`` (0 after a termination, the
    final observation's after a truncation, the rollout's last observation's after step T-1)."""
    T, N = values.shape
    after = np.zeros((T, N))
    for t in range(T):
        for i in range(N):
            if terminated[t, i]:
                after[t, i] = 0.0
            elif truncated[t, i]:
                after[t, i] = final_values[t, i]
            else:
                after[t, i] = values[t + 1, i] if t + 1 < T else last_values[i]
    return after


def reference(rewards, values, last_values, final_values, terminated, truncated, gamma, lam):
    """The forward view, written independently of the kernel's backward recursion: the
    lambda-weighted mean of the n-step returns ``G(n) = r[t] + ... + gamma^(n-1) r[t+n-1] +
    gamma^n B[t+n-1]`` up to the segment's last step L (the episode's end or the rollout's),
    whose return takes the remaining weight lambda^(L-1)."""
    T, N = rewards.shape
    after = bootstraps(values, last_values, final_values, terminated, truncated)
    ended = terminated | truncated
    returns = np.zeros((T, N))
    for i in range(N):
        for t in range(T):
            end = t
            while end < T - 1 and not ended[end, i]:
                end += 1
            length = end - t + 1
            total, discounted = 0.0, 0.0
            for n in range(1, length + 1):
                discounted += gamma ** (n - 1) * rewards[t + n - 1, i]
                n_step = discounted + gamma**n * after[t + n - 1, i]
                weight = lam ** (n - 1) * ((1 - lam) if n < length else 1.0)
                total += weight * n_step
            returns[t, i] = total
    return returns


def random_case(T, N, seed, p_end=0.15):
    rng = np.random.default_rng(seed)
    f32 = np.float32
    rewards = rng.standard_normal((T, N)).astype(f32)
    values = rng.standard_normal((T, N)).astype(f32)
    last_values = rng.standard_normal(N).astype(f32)
    final_values = rng.standard_normal((T, N)).astype(f32) * 5
    terminated = rng.random((T, N)) < p_end
    truncated = (rng.random((T, N)) < p_end) & ~terminated
    return rewards, values, last_values, final_values, terminated, truncated


def run(backend, case, gamma, lam):
    returns = np.zeros(case[0].shape, np.float32)
    n = case[0].shape[1]
    QLAMBDA(backend, *case, columns(gamma, n), columns(lam, n), returns)
    return returns


@pytest.mark.parametrize("backend", ["python", "cpu"])
@pytest.mark.parametrize("lam", [0.0, 0.65, 0.95, 1.0])
@pytest.mark.parametrize("T,N,seed", [(1, 3, 0), (17, 9, 1), (64, 32, 2)])
def test_qlambda_matches_the_forward_view_reference(backend, lam, T, N, seed):
    case = random_case(T, N, seed)
    assert case[4].any() and (case[5].any() or T == 1)
    want = reference(*case, 0.97, lam)
    np.testing.assert_allclose(run(backend, case, 0.97, lam), want, rtol=1e-5, atol=1e-5)


def test_lambda_zero_gives_one_step_q_learning_targets():
    case = random_case(40, 16, 3)
    rewards, values, last_values, final_values, terminated, truncated = case
    after = bootstraps(values, last_values, final_values, terminated, truncated)
    np.testing.assert_allclose(run("cpu", case, 0.9, 0.0), rewards + 0.9 * after, rtol=1e-6)


def test_lambda_one_gives_monte_carlo_returns():
    """Discounted reward sums to the episode's end: nothing after a termination, the final
    observation's value after a truncation, the last observation's at the rollout's end; the
    values met on the way do not enter."""
    case = random_case(40, 16, 4)
    rewards, _, last_values, final_values, terminated, truncated = case
    want = np.zeros(rewards.shape)
    for i in range(rewards.shape[1]):
        following = float(last_values[i])
        for t in reversed(range(rewards.shape[0])):
            if terminated[t, i]:
                following = 0.0
            elif truncated[t, i]:
                following = float(final_values[t, i])
            want[t, i] = following = rewards[t, i] + 0.9 * following
    got = run("cpu", case, 0.9, 1.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    other_values = (case[0], case[1] * 7 + 3, *case[2:])
    np.testing.assert_array_equal(run("cpu", other_values, 0.9, 1.0), got)


def test_truncation_bootstraps_from_final_value_and_termination_from_nothing():
    # one env, three steps: truncated at t=0, terminated at t=1, running at t=2
    rewards = np.array([[1.0], [2.0], [3.0]], np.float32)
    values = np.array([[0.5], [0.25], [0.125]], np.float32)
    final_values = np.array([[10.0], [99.0], [99.0]], np.float32)
    terminated = np.array([[False], [True], [False]])
    truncated = np.array([[True], [False], [False]])
    last = np.array([4.0], np.float32)
    case = (rewards, values, last, final_values, terminated, truncated)
    returns = run("cpu", case, 0.5, 0.5)
    assert returns[2, 0] == pytest.approx(3.0 + 0.5 * 4.0)  # G[T] is last_values itself
    assert returns[1, 0] == pytest.approx(2.0)  # terminal: the reward alone, trace cut
    assert returns[0, 0] == pytest.approx(1.0 + 0.5 * 10.0)  # final_obs value, trace cut


def test_a_running_step_mixes_the_next_value_and_the_next_return():
    rewards = np.array([[1.0], [2.0]], np.float32)
    values = np.array([[0.0], [8.0]], np.float32)  # values[1]: max Q of the second state
    flags = np.zeros((2, 1), bool)
    case = (
        rewards,
        values,
        np.array([4.0], np.float32),
        np.zeros((2, 1), np.float32),
        flags,
        flags,
    )
    returns = run("python", case, 0.5, 0.25)
    second = 2.0 + 0.5 * 4.0
    assert returns[1, 0] == pytest.approx(second)
    assert returns[0, 0] == pytest.approx(1.0 + 0.5 * (0.75 * 8.0 + 0.25 * second))


def test_compiled_equals_python_bit_for_bit():
    case = random_case(33, 16, 7)
    want = np.zeros((33, 16), np.float32)
    qlambda(*case, 0.99, 0.65, want)
    got = np.zeros((33, 16), np.float32)
    n = case[0].shape[1]
    QLAMBDA.bind("cpu", (*case, columns(0.99, n), columns(0.65, n), got))()
    assert np.array_equal(want, got)
