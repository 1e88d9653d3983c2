"""GAE kernel against a plain reference loop, with terminations and truncations mid-rollout."""

import numpy as np
import pytest

from fasttrain.kernels.gae import GAE, columns, gae


def per_column(gamma, gae_lambda, n: int) -> tuple:
    """One gamma and lambda as the kernel reads them: float64 ``(N,)`` each."""
    return columns(gamma, n), columns(gae_lambda, n)


def reference(rewards, values, last_values, final_values, terminated, truncated, gamma, lam):
    """Textbook GAE written independently: next state's value per step, then the lambda sum."""
    T, N = rewards.shape
    next_values = np.zeros((T, N))
    for t in range(T):
        for i in range(N):
            if terminated[t, i]:
                next_values[t, i] = 0.0
            elif truncated[t, i]:
                next_values[t, i] = final_values[t, i]
            else:
                next_values[t, i] = values[t + 1, i] if t + 1 < T else last_values[i]
    deltas = rewards + gamma * next_values - values
    advantages = np.zeros((T, N))
    for i in range(N):
        for t in range(T):  # forward sum over the rest of the episode segment
            total, factor = 0.0, 1.0
            for k in range(t, T):
                total += factor * deltas[k, i]
                if terminated[k, i] or truncated[k, i]:
                    break
                factor *= gamma * lam
            advantages[t, i] = total
    return advantages, advantages + values


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


@pytest.mark.parametrize("backend", ["python", "cpu"])
@pytest.mark.parametrize("T,N,seed", [(1, 3, 0), (17, 9, 1), (64, 32, 2)])
def test_gae_matches_reference(backend, T, N, seed):
    case = random_case(T, N, seed)
    adv = np.zeros((T, N), np.float32)
    ret = np.zeros((T, N), np.float32)
    GAE(backend, *case, *per_column(0.97, 0.9, case[0].shape[1]), adv, ret)
    want_adv, want_ret = reference(*case, 0.97, 0.9)
    assert case[4].any() and (case[5].any() or T == 1)
    np.testing.assert_allclose(adv, want_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, want_ret, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["python", "cpu"])
def test_a_discount_and_trace_decay_per_column_are_each_columns_own(backend):
    """A gamma and lambda per column (a population's members, each its own): column i equals
    the reference with column i's gamma and lambda."""
    T, N = 23, 6
    case = random_case(T, N, 5)
    gammas = np.array([0.9, 0.99, 0.5, 0.999, 0.97, 0.0])
    lambdas = np.array([0.95, 0.5, 1.0, 0.0, 0.8, 0.9])
    adv, ret = np.zeros((T, N), np.float32), np.zeros((T, N), np.float32)
    GAE(backend, *case, gammas, lambdas, adv, ret)
    for i in range(N):
        want_adv, want_ret = reference(*case, gammas[i], lambdas[i])
        np.testing.assert_allclose(adv[:, i], want_adv[:, i], rtol=1e-5, atol=1e-5, err_msg=i)
        np.testing.assert_allclose(ret[:, i], want_ret[:, i], rtol=1e-5, atol=1e-5, err_msg=i)


def test_truncation_bootstraps_from_final_value_and_termination_from_zero():
    # one env, three steps: truncated at t=0, terminated at t=1, running at t=2
    rewards = np.array([[1.0], [2.0], [3.0]], np.float32)
    values = np.array([[0.5], [0.25], [0.125]], np.float32)
    final_values = np.array([[10.0], [99.0], [99.0]], np.float32)
    terminated = np.array([[False], [True], [False]])
    truncated = np.array([[True], [False], [False]])
    last = np.array([4.0], np.float32)
    adv = np.zeros((3, 1), np.float32)
    ret = np.zeros((3, 1), np.float32)
    inputs = (rewards, values, last, final_values, terminated, truncated)
    GAE("cpu", *inputs, *per_column(0.5, 1.0, 1), adv, ret)
    assert adv[2, 0] == pytest.approx(3.0 + 0.5 * 4.0 - 0.125)
    assert adv[1, 0] == pytest.approx(2.0 - 0.25)  # terminal: no bootstrap, trace cut
    assert adv[0, 0] == pytest.approx(1.0 + 0.5 * 10.0 - 0.5)  # final_obs value, trace cut


def test_compiled_equals_python_bit_for_bit():
    case = random_case(33, 16, 7)
    out = [np.zeros((33, 16), np.float32) for _ in range(4)]
    gae(*case, 0.99, 0.95, out[0], out[1])
    GAE.bind("cpu", (*case, *per_column(0.99, 0.95, 16), out[2], out[3]))()
    assert np.array_equal(out[0], out[2]) and np.array_equal(out[1], out[3])


def test_a_bound_kernel_reads_its_buffers_at_each_launch():
    """``bind`` converts the arguments once; every launch sees what is in the buffers then."""
    case = random_case(12, 5, 3)
    adv, ret = np.zeros((12, 5), np.float32), np.zeros((12, 5), np.float32)
    bound = GAE.bind("cpu", (*case, *per_column(0.99, 0.95, 5), adv, ret))
    assert bound.num_columns == 5
    bound()
    first = adv.copy()
    case[0][...] = random_case(12, 5, 4)[0]  # new rewards written in place, as a rollout does
    bound(stream=0)
    want_adv, want_ret = np.zeros_like(adv), np.zeros_like(ret)
    gae(*case, 0.99, 0.95, want_adv, want_ret)
    assert not np.array_equal(first, adv)
    assert np.array_equal(adv, want_adv) and np.array_equal(ret, want_ret)
