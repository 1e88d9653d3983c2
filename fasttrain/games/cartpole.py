"""CartPole: balance a pole on a cart; Gymnasium's ``CartPole-v1``, step for step.

Observation: float32, shape ``(4,)``: ``[x, x_dot, theta, theta_dot]`` (cart position in m, cart
    velocity, pole angle in radians from upright, pole angular velocity), the float64 state
    rounded to float32 exactly as Gymnasium does. With ``observe_velocity = false`` the two
    velocities read 0 (positions only): a partially observed CartPole that needs memory
    (a recurrent core, ``[model] core``) to infer how the cart and pole move.
Actions: 0 push the cart left (force ``-force_mag``), 1 push it right (``+force_mag``).
Dynamics: Gymnasium's ``CartPoleEnv.step`` with ``kinematics_integrator="euler"``: accelerations
    from the current state, then every variable advanced by ``tau`` with its *old* derivative
    (x from the old x_dot, theta from the old theta_dot). Same constants, same operation order,
    float64 state, so observations agree with Gymnasium to float32 rounding.
Start: every state variable uniform in ``[-0.05, 0.05)`` (24-bit ``rand_float``).
Rewards: 1.0 on every step, including the one that terminates (as Gymnasium without the
    Sutton-Barto reward).
Terminated: ``|x| > x_threshold`` (2.4) or ``|theta| > theta_threshold`` (12 degrees), strictly:
    exactly on a threshold is still alive.
Truncated: ``max_episode_steps`` (500) steps in the episode (Gymnasium's ``TimeLimit``), and only
    when the step did not also terminate. Gymnasium's ``TimeLimit`` reports both flags when the pole
    falls on step 500; here ``terminated`` wins, as in every fasttrain game.
Score: steps survived in the episode (equal to the return, since every step pays 1.0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fasttrain.kernels import Field, GameSpec, rand_float

LEFT, RIGHT = 0, 1
RESET_BOUND = 0.05  # initial state uniform in [-RESET_BOUND, RESET_BOUND)


@dataclass(frozen=True)
class CartPoleParams:
    """Mirrors ``[game.cartpole]`` in config.toml; defaults are Gymnasium's ``CartPole-v1``."""

    gravity: float = 9.8
    """gravitational acceleration (m/s^2)"""
    masscart: float = 1.0
    """mass of the cart (kg)"""
    masspole: float = 0.1
    """mass of the pole (kg)"""
    length: float = 0.5
    """half the pole's length (m), as in Gymnasium"""
    force_mag: float = 10.0
    """force of one push (N)"""
    tau: float = 0.02
    """seconds per step (Euler integration)"""
    x_threshold: float = 2.4
    """terminate when |x| exceeds this (m)"""
    theta_threshold: float = 12 * 2 * math.pi / 360
    """terminate when |theta| exceeds this (rad; 12 degrees)"""
    max_episode_steps: int = 500
    """truncate episodes at this many steps (0: no limit)"""
    observe_velocity: bool = True
    """observe x_dot and theta_dot (false: they read 0, so a policy needs memory)"""

    def __post_init__(self):
        if self.masscart <= 0 or self.masspole <= 0 or self.length <= 0 or self.tau <= 0:
            raise ValueError("masscart, masspole, length and tau must be > 0")
        if self.x_threshold <= 0 or self.theta_threshold <= 0:
            raise ValueError("x_threshold and theta_threshold must be > 0")
        if self.max_episode_steps < 0:
            raise ValueError("max_episode_steps must be >= 0 (0 means no limit)")


# Every value indexes nothing and bounds no loop, so finite floats (the runtime's rule) and a
# step count >= 0 are all a state from a file must hold: a position past a threshold ends the
# episode at the next step. No bound reads the thresholds: a curriculum may change them between
# steps, and a cart in flight may be where an earlier stage's thresholds let it be.
STATE = (
    Field("x", lambda p: (), np.float64, "() cart position (m)"),
    Field("x_dot", lambda p: (), np.float64, "() cart velocity (m/s)"),
    Field("theta", lambda p: (), np.float64, "() pole angle from upright (rad)"),
    Field("theta_dot", lambda p: (), np.float64, "() pole angular velocity (rad/s)"),
    Field("steps", lambda p: (), np.int32, "() steps in this episode", low=0),
)


# ------------------------------------------------------------------------------- sub-steps


def accelerations(force, theta, theta_dot, p):
    """(xacc, thetaacc) of the cart and pole; Gymnasium's formulas in its operation order."""
    total_mass = p.masspole + p.masscart
    polemass_length = p.masspole * p.length
    costheta = math.cos(theta)
    sintheta = math.sin(theta)
    temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass
    thetaacc = (p.gravity * sintheta - costheta * temp) / (
        p.length * (4.0 / 3.0 - p.masspole * (costheta * costheta) / total_mass)
    )
    xacc = temp - polemass_length * thetaacc * costheta / total_mass
    return xacc, thetaacc


def failed(x, theta, x_threshold, theta_threshold):
    """True when the cart left the track or the pole fell past the angle limit (strictly)."""
    return (
        x < -x_threshold or x > x_threshold or theta < -theta_threshold or theta > theta_threshold
    )


def write_obs(i, io, s, p):
    """Round env i's float64 state into its float32 observation row (velocities 0 when they
    are not observed)."""
    io.obs[i, 0] = s.x[i]
    io.obs[i, 1] = s.x_dot[i] if p.observe_velocity else 0.0
    io.obs[i, 2] = s.theta[i]
    io.obs[i, 3] = s.theta_dot[i] if p.observe_velocity else 0.0


# ------------------------------------------------------------------------------- reset, step


def reset_one(i, io, s, p):
    """Start a new episode in env i: every state variable uniform in [-0.05, 0.05)."""
    span = 2.0 * RESET_BOUND
    s.x[i] = -RESET_BOUND + span * rand_float(s.rng, i)
    s.x_dot[i] = -RESET_BOUND + span * rand_float(s.rng, i)
    s.theta[i] = -RESET_BOUND + span * rand_float(s.rng, i)
    s.theta_dot[i] = -RESET_BOUND + span * rand_float(s.rng, i)
    s.steps[i] = 0
    write_obs(i, io, s, p)


def step_one(i, io, s, p):
    """Advance env i by one Euler step of ``tau`` seconds."""
    force = p.force_mag if io.actions[i] == RIGHT else -p.force_mag
    xacc, thetaacc = accelerations(force, s.theta[i], s.theta_dot[i], p)
    # explicit Euler: positions move with the old velocities, read before they are updated
    new_x = s.x[i] + p.tau * s.x_dot[i]
    new_theta = s.theta[i] + p.tau * s.theta_dot[i]
    s.x_dot[i] = s.x_dot[i] + p.tau * xacc
    s.theta_dot[i] = s.theta_dot[i] + p.tau * thetaacc
    s.x[i] = new_x
    s.theta[i] = new_theta
    s.steps[i] += 1
    io.score[i] += 1.0
    dead = failed(new_x, new_theta, p.x_threshold, p.theta_threshold)
    io.rewards[i] = 1.0
    io.terminated[i] = dead
    io.truncated[i] = (not dead) and 0 < p.max_episode_steps <= s.steps[i]
    write_obs(i, io, s, p)


# ------------------------------------------------------------------------------- render


def obs_bounds(params) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the observation, float32: Gymnasium's bounds (twice each threshold)."""
    velocity = np.inf if params.observe_velocity else 0.0
    high = np.array(
        [params.x_threshold * 2, velocity, params.theta_threshold * 2, velocity], dtype=np.float32
    )
    return -high, high


def render_text(state, params) -> str:
    """The track as a line: '|' track ends, 'o' the cart, and the pole angle in degrees."""
    width = 41
    x, theta = float(state["x"]), float(state["theta"])
    track = ["-"] * width
    col = round((x + params.x_threshold) / (2 * params.x_threshold) * (width - 1))
    track[min(max(col, 0), width - 1)] = "o"
    lean = "/" if theta > 0.01 else "\\" if theta < -0.01 else "|"  # theta > 0 leans to +x
    return (
        f"|{''.join(track)}|\n"
        f"x={x:+.3f} x_dot={float(state['x_dot']):+.3f} "
        f"theta={math.degrees(theta):+.2f}deg {lean} theta_dot={float(state['theta_dot']):+.3f} "
        f"steps={int(state['steps'])}"
    )


# the picture: 60 x 96 pixels, the track 2.4 m either side across its width
RGB_HEIGHT, RGB_WIDTH, RGB_TRACK_ROW, RGB_POLE = 60, 96, 46, 30
SKY, TRACK, CART, POLE = (245, 245, 240), (90, 90, 90), (40, 40, 40), (200, 140, 60)


def render_rgb(state, obs, params) -> np.ndarray:
    """uint8 ``(60, 96, 3)``: the track, the cart at ``x`` (the thresholds at the edges) and the
    pole at angle ``theta`` from upright (leaning right for theta > 0, as x grows right)."""
    image = np.empty((RGB_HEIGHT, RGB_WIDTH, 3), dtype=np.uint8)
    image[...] = SKY
    image[RGB_TRACK_ROW, :] = TRACK
    x, theta = float(state["x"]), float(state["theta"])
    span = 2.0 * params.x_threshold
    col = int(round((x + params.x_threshold) / span * (RGB_WIDTH - 1)))
    col = min(max(col, 0), RGB_WIDTH - 1)
    left, right = max(col - 6, 0), min(col + 7, RGB_WIDTH)
    image[RGB_TRACK_ROW - 5 : RGB_TRACK_ROW + 1, left:right] = CART
    top = RGB_TRACK_ROW - 5  # the pole's pivot: the top of the cart
    for k in range(RGB_POLE):  # one pixel per unit of length along the pole
        r = int(round(top - k * math.cos(theta)))
        c = int(round(col + k * math.sin(theta)))
        if 0 <= r < RGB_HEIGHT and 0 <= c < RGB_WIDTH:
            image[r, c] = POLE
            if c + 1 < RGB_WIDTH:
                image[r, c + 1] = POLE  # two pixels wide
    return image


SPEC = GameSpec(
    name="cartpole",
    params_cls=CartPoleParams,
    state=STATE,
    obs_shape=lambda p: (4,),
    obs_dtype=np.float32,
    num_actions=2,
    reset_one=reset_one,
    step_one=step_one,
    render_text=render_text,
    render_rgb=render_rgb,
)


if __name__ == "__main__":  # speed check: python -m fasttrain.games.cartpole [num_envs] [steps]
    import sys

    from fasttrain.kernels.env import speed_check

    speed_check(SPEC, CartPoleParams(), sys.argv[1:])
