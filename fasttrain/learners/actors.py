"""The agents of trained weights, for ``play`` and ``eval``: a policy's (its most likely action,
or a seeded sample, with a recurrent state per row) and a Q-network's (its argmax)."""

from __future__ import annotations

import torch

from fasttrain.errors import RunError


def greedy_q_actor(q_network, model_state: dict):
    """``obs -> actions``, the argmax of ``q_network`` loaded with ``model_state`` (the acting of
    every value learner in play and eval)."""
    q_network.load_state_dict(model_state)
    q_network.eval()

    def act(obs: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return q_network(obs).argmax(dim=1)

    return act


class PolicyActor:
    """``act(obs, episode_starts=None) -> actions`` of a trained policy (for play and eval).

    It picks the most likely action, or with ``greedy=False`` a sample of the policy (seeded).
    A recurrent policy keeps one state per row between calls: pass ``episode_starts``, a bool
    tensor true for the rows whose episode starts at ``obs`` (after ``terminated | truncated``),
    so those rows forget the previous episode; the first call starts every row fresh, and
    ``reset()`` starts them all again. Feed-forward policies ignore both.
    """

    def __init__(self, policy, greedy: bool = True, seed: int = 0):
        self.policy = policy
        self.greedy = greedy
        self.is_recurrent = policy.is_recurrent
        self.generator = torch.Generator().manual_seed(seed)
        self.state = None

    def reset(self) -> None:
        """Start every row's next episode with a fresh state."""
        self.state = None

    def __call__(self, obs: torch.Tensor, episode_starts=None) -> torch.Tensor:
        obs = torch.as_tensor(obs)
        if episode_starts is not None:
            episode_starts = torch.as_tensor(episode_starts, dtype=torch.bool).reshape(-1)
            if episode_starts.shape[0] != obs.shape[0]:
                raise ValueError(
                    f"episode_starts has {episode_starts.shape[0]} entries for "
                    f"{obs.shape[0]} rows of observations; pass one per row"
                )
        if self.state is not None and self.state.shape[0] != obs.shape[0]:
            raise ValueError(
                f"this actor holds the state of {self.state.shape[0]} rows, got {obs.shape[0]} "
                "observations; call reset() to start over with another number of rows"
            )
        with torch.inference_mode():
            logits, _, state = self.policy(obs, self.state, episode_starts)
            self.state = state
            if self.greedy:
                return logits.argmax(dim=1)
            probs = logits.float().softmax(dim=1)
            if not bool(torch.isfinite(probs).all()):  # logits that overflowed float32
                raise RunError(
                    "the policy's action probabilities are not finite for these observations "
                    "(its weights overflow float32); it cannot sample an action"
                )
            return torch.multinomial(probs, 1, generator=self.generator)[:, 0]


def actor_of(network, policy: bool):
    """A learner's registered actor (``Learner.actor``) from its ``new_network(config,
    obs_shape, obs_dtype, num_actions, obs_categories)`` builder: a ``PolicyActor`` of a policy
    (the most likely action, or with ``greedy=False`` a sample seeded with ``seed``), the argmax
    of a Q-network (which has no policy to sample: ``greedy`` and ``seed`` change nothing)."""

    def actor(
        config,
        obs_shape,
        obs_dtype,
        num_actions,
        model_state,
        obs_categories=0,
        greedy=True,
        seed=0,
    ):
        built = network(config, obs_shape, obs_dtype, num_actions, obs_categories)
        if not policy:
            return greedy_q_actor(built, model_state)
        built.load_state_dict(model_state)
        built.eval()
        return PolicyActor(built, greedy, seed)

    return actor
