"""The agents of trained weights (``learners/actors.py``): a Q-network's argmax, a policy's most
likely action or seeded sample, and a recurrent policy's state per row."""

import pytest
import torch

from fasttrain.config import resolve as cfg
from fasttrain.learners.actors import PolicyActor, greedy_q_actor
from fasttrain.models import make_policy


def test_greedy_q_actor_loads_the_weights_and_takes_the_argmax():
    q_network = torch.nn.Linear(2, 3, bias=False)
    weights = {"weight": torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])}
    act = greedy_q_actor(q_network, weights)
    obs = torch.tensor([[2.0, 1.0], [0.0, 3.0], [-1.0, -2.0]])
    assert act(obs).tolist() == [0, 1, 2]
    assert not q_network.training


def policy(core: str = "none"):
    torch.manual_seed(0)
    model = cfg.ModelConfig(hidden=16, core=core, core_size=8)
    return make_policy((4,), torch.float32, 3, model)


def test_a_greedy_actor_takes_the_most_likely_action_and_a_sampling_one_is_seeded():
    obs = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
    net = policy()
    logits, _, _ = net(obs)
    assert torch.equal(PolicyActor(net)(obs), logits.argmax(dim=1))
    first, again = PolicyActor(net, greedy=False, seed=5), PolicyActor(net, greedy=False, seed=5)
    sampled = first(obs)
    assert torch.equal(sampled, again(obs))  # the same seed, the same samples
    assert not torch.equal(sampled, logits.argmax(dim=1))  # 64 rows: some not the argmax


def test_a_recurrent_actor_keeps_a_state_per_row_and_refuses_another_row_count():
    actor = PolicyActor(policy("gru"))
    obs = torch.randn(4, 4, generator=torch.Generator().manual_seed(2))
    actor(obs)
    assert actor.state is not None and actor.state.shape[0] == 4
    with pytest.raises(ValueError, match="call reset"):
        actor(obs[:2])
    with pytest.raises(ValueError, match="one per row"):
        actor(obs, episode_starts=torch.ones(3, dtype=torch.bool))
    actor.reset()
    assert actor.state is None
    actor(obs[:2])  # a fresh state takes any number of rows
