"""fasttrain.learners.savedstate: a well-formed checkpoint (valid SHA-256, written by the project's
own ``checkpoint.save``) with one bad learner value is refused by every reader in one line naming
the field, the value and what was expected, before the run or the agent changes; the good
checkpoint it was made from still resumes. The files are made with ``tests.checkpoints`` from one
tiny real PPO run per module."""

from __future__ import annotations

import math

import pytest
import torch

import fasttrain
from fasttrain.errors import RunError
from fasttrain.learners import savedstate
from fasttrain.learners.actors import PolicyActor
from fasttrain.run import checkpoint
from fasttrain.run.runner import run as run_training
from tests.checkpoints import DELETE, get, mutated, read, write_mutated
from tests.cli import cli_in_process, one_line
from tests.fasttrain.run.test_checkpoint import TINY

STEPS = "game.snake.ppo.total_timesteps=256"


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    """A finished two-iteration PPO run on Snake 6x6 (16 envs, a 16-wide network)."""
    out = tmp_path_factory.mktemp("ppo") / "run"
    config = fasttrain.config.resolve.load(sets=[*TINY, STEPS])
    run_training(config, out=out, echo=lambda *a, **k: None)
    return out


WHOLE = "a whole number in [0, 2**63 - 1]"
# path, value, the line every reader prints (after "Error: checkpoint ")
EVERY_READER = {
    "negative step": (("global_step",), -1000, f"global_step = -1000; expected {WHOLE}"),
    "fractional step": (("global_step",), 1.5, f"global_step = 1.5; expected {WHOLE}"),
    "step past int64": (("global_step",), 2**80, f"global_step = {2**80}; expected {WHOLE}"),
    "missing step": (("global_step",), DELETE, f"has no global_step; expected {WHOLE}"),
    "bool iteration": (("iteration",), True, f"iteration = True; expected {WHOLE}"),
    "negative iteration": (("iteration",), -5, f"iteration = -5; expected {WHOLE}"),
    "float iteration": (("iteration",), 1e12, f"iteration = 1000000000000.0; expected {WHOLE}"),
    "more iterations than steps": (
        ("iteration",),
        257,
        "iteration = 257; expected at most global_step (256): each iteration takes steps",
    ),
    "nan clock": (("time_s",), math.nan, "time_s = nan; expected a finite number of seconds >= 0"),
    "negative clock": (
        ("time_s",),
        -1.0,
        "time_s = -1.0; expected a finite number of seconds >= 0",
    ),
    "identity game_params a list": (
        ("identity", "game_params"),
        [1],
        "identity.game_params = [1]; expected a table of settings (numbers, strings, bools)",
    ),
    "identity obs_shape a number": (
        ("identity", "obs_shape"),
        5,
        "identity.obs_shape = 5; expected a list of whole numbers",
    ),
    "identity world_size a string": (
        ("identity", "world_size"),
        "2",
        "identity.world_size = '2'; expected a whole number >= 1",
    ),
    "learner a number": (("learner",), 3, "learner = 3; expected a string"),
    "rank states a table": (
        ("rank_states",),
        {"x": 1},
        "rank_states = a table of 1 entry; expected a list of the other ranks' states",
    ),
    "curriculum stage a string": (
        ("curriculum",),
        {"stage": "1", "stage_start": 0, "batches": []},
        f"curriculum.stage = '1'; expected {WHOLE}",
    ),
    "episode mean a string": (
        ("episode", "return"),
        "x",
        "episode.return = 'x'; expected a finite number or nan",
    ),
}


@pytest.mark.parametrize("case", EVERY_READER)
def test_a_bad_learner_field_is_one_line_from_every_reader(ppo_run, tmp_path, case):
    path, value, expected = EVERY_READER[case]
    run_dir = write_mutated(ppo_run, tmp_path / "run", path, value)
    before = (run_dir / checkpoint.FILENAME).read_bytes()
    calls = {
        "resume": ("run", "--resume", run_dir, "--steps", 512),
        "inspect": ("checkpoint", "inspect", run_dir),
        "eval": ("eval", "--run", run_dir, "--episodes", 1),
        "play": ("play", "--checkpoint", run_dir, "--steps", 1),
    }
    for name, args in calls.items():
        assert one_line(cli_in_process(*args)) == f"Error: checkpoint {expected}", name
    assert (run_dir / checkpoint.FILENAME).read_bytes() == before  # a refusal writes nothing


# what the trainer holds the file's values against: refused on --resume, before any change
ON_RESUME = {
    "generator cut short": (
        ("generator",),
        lambda t: t[:10],
        "generator = a uint8 tensor of shape (10,); expected a uint8 tensor of shape (5056,)",
    ),
    "generator a list": (
        ("generator",),
        [1, 2],
        "generator = [1, 2]; expected a uint8 tensor of shape (5056,)",
    ),
    "torch_rng torch refuses": (
        ("torch_rng",),
        lambda t: torch.zeros_like(t),
        "torch_rng = a uint8 tensor of shape (5056,); expected a state torch's generator takes "
        "(Invalid mt19937 state)",
    ),
    "missing optimizer": (
        ("optimizer",),
        DELETE,
        "has no optimizer; expected this run's optimizer state",
    ),
    "learning rate a string": (
        ("optimizer", "param_groups", 0, "lr"),
        "x",
        "optimizer.param_groups[0].lr = 'x'; expected a finite number >= 0",
    ),
    "learning rate nan": (
        ("optimizer", "param_groups", 0, "lr"),
        math.nan,
        "optimizer.param_groups[0].lr = nan; expected a finite number >= 0",
    ),
    "moment of another shape": (
        ("optimizer", "state", 0, "exp_avg"),
        lambda t: t[:1],
        "optimizer.state[0].exp_avg = a float32 tensor of shape (1, 144); expected a "
        "floating-point tensor of shape (16, 144)",
    ),
    "moment not finite": (
        ("optimizer", "state", 1, "exp_avg_sq"),
        lambda t: t + math.inf,
        "optimizer.state[1].exp_avg_sq = a float32 tensor of shape (16,); expected finite values",
    ),
    "step count negative": (
        ("optimizer", "state", 2, "step"),
        lambda t: t - 1e9,
        "optimizer.state[2].step = -1000000000.0; expected a finite step count >= 0",
    ),
    "weight of another shape": (
        ("model", "actor.weight"),
        lambda t: t[:2],
        "model.actor.weight = a float32 tensor of shape (2, 16); expected a float32 tensor of "
        "shape (4, 16)",
    ),
    "a weight the network lacks": (
        ("model", "extra.weight"),
        torch.zeros(2),
        "model.extra.weight = a float32 tensor of shape (2,); expected no such weight in this "
        "run's network",
    ),
    "next_obs cut short": (
        ("next_obs",),
        lambda t: t[:3],
        "next_obs = a uint8 tensor of shape (3, 4, 6, 6); expected a uint8 tensor of shape "
        "(16, 4, 6, 6)",
    ),
    "next_episode_starts of another dtype": (
        ("next_episode_starts",),
        lambda t: t.float(),
        "next_episode_starts = a float32 tensor of shape (16,); expected a bool tensor of shape "
        "(16,)",
    ),
}


@pytest.mark.parametrize("case", ON_RESUME)
def test_a_bad_trainer_field_is_refused_on_resume_in_one_line(ppo_run, tmp_path, case):
    path, value, expected = ON_RESUME[case]
    run_dir = write_mutated(ppo_run, tmp_path / "run", path, value)
    before = sorted(p.name for p in run_dir.iterdir())
    result = cli_in_process("run", "--resume", run_dir, "--steps", 512)
    assert one_line(result) == f"Error: checkpoint {expected}"
    assert sorted(p.name for p in run_dir.iterdir()) == before


def test_the_good_checkpoint_the_cases_are_made_from_resumes(ppo_run, tmp_path):
    """The mutations are the only difference: the same file written back by the helper runs."""
    run_dir = write_mutated(ppo_run, tmp_path / "run", ("time_s",), lambda s: s)
    result = cli_in_process("run", "--resume", run_dir, "--steps", 512)
    assert result.returncode == 0, result.stderr
    assert read(run_dir)["global_step"] == 512


def test_an_optimizer_setting_the_file_lacks_takes_this_runs_own(ppo_run, tmp_path):
    """An older torch may not write a setting a newer one has; cut out, ``eps`` is this run's."""
    run_dir = write_mutated(
        ppo_run, tmp_path / "run", ("optimizer", "param_groups", 0, "eps"), DELETE
    )
    result = cli_in_process("run", "--resume", run_dir, "--steps", 512)
    assert result.returncode == 0, result.stderr
    assert (
        read(run_dir)["optimizer"]["param_groups"][0]["eps"]
        == read(ppo_run)["optimizer"]["param_groups"][0]["eps"]
    )


def test_a_config_that_is_not_toml_is_one_line_on_resume_as_on_eval(ppo_run, tmp_path):
    run_dir = write_mutated(ppo_run, tmp_path / "run", ("config",), "x")
    expected = f"Error: checkpoint {run_dir / checkpoint.FILENAME} holds an unreadable config"
    assert one_line(cli_in_process("run", "--resume", run_dir, "--steps", 512)) == expected
    assert one_line(cli_in_process("eval", "--run", run_dir, "--episodes", 1)) == expected


def test_oversized_weights_cannot_play_or_eval_and_are_never_saved(ppo_run, tmp_path):
    run_dir = write_mutated(
        ppo_run, tmp_path / "run", ("model", "actor.weight"), lambda t: t * 1e30
    )
    expected = (
        f"Error: checkpoint {run_dir / checkpoint.FILENAME} holds oversized (beyond +-1e+06) "
        "weights (model.actor.weight); it cannot play"
    )
    assert one_line(cli_in_process("eval", "--run", run_dir, "--episodes", 1)) == expected
    assert one_line(cli_in_process("play", "--checkpoint", run_dir, "--steps", 1)) == expected
    assert checkpoint.weight_fault(read(run_dir)) == ("model.actor.weight", "beyond +-1e+06")
    assert checkpoint.weight_fault(read(ppo_run)) is None


def test_a_config_claiming_a_wide_network_is_refused_before_it_is_built(ppo_run, tmp_path):
    """A small file whose config says model.hidden = 4096 is refused by counting the torso on
    the meta device: no reader builds (and initialises) the network."""
    wide = lambda text: text.replace("hidden = 16", "hidden = 4096")  # noqa: E731
    run_dir = write_mutated(ppo_run, tmp_path / "run", ("config",), wide)
    (run_dir / "config.toml").write_text(wide((run_dir / "config.toml").read_text()))
    state = read(run_dir)
    state["identity"]["model"]["hidden"] = 4096
    checkpoint.save(run_dir / checkpoint.FILENAME, state)
    expected = (
        f"Error: checkpoint {run_dir / checkpoint.FILENAME}: its config's network "
        "(model.hidden = 4096, model.layers = 2) has 17,375,232 weights in its torso alone and "
        "the checkpoint holds 2,677; the config does not fit its weights"
    )
    built = []
    original = torch.nn.Linear.reset_parameters
    torch.nn.Linear.reset_parameters = lambda self: built.append(self) or original(self)
    try:
        for args in (
            ("eval", "--run", run_dir, "--episodes", 1),
            ("play", "--checkpoint", run_dir, "--steps", 1),
            ("run", "--resume", run_dir, "--steps", 512),
        ):
            assert one_line(cli_in_process(*args)) == expected, args[0]
    finally:
        torch.nn.Linear.reset_parameters = original
    assert not [m for m in built if m.weight.device.type != "meta"], "a network was built"


# ------------------------------------------------------------------------------- the checks


def test_counts_refuse_bools_floats_and_out_of_range_values():
    assert savedstate.count(0, "n") == 0 and savedstate.count(2**63 - 1, "n") == 2**63 - 1
    for bad in (True, 1.0, -1, 2**63, "3", None):
        with pytest.raises(RunError, match=r"^checkpoint n = .*; expected a whole number in "):
            savedstate.count(bad, "n")


def test_generator_states_are_tried_on_a_scratch_generator_only():
    generator = torch.Generator().manual_seed(3)
    before = generator.get_state()
    good = torch.Generator().manual_seed(5).get_state()
    assert savedstate.generator_state(good, "g", torch.device("cpu")) is good
    with pytest.raises(RunError, match=r"Invalid mt19937 state\)$"):
        savedstate.generator_state(torch.zeros_like(good), "g", torch.device("cpu"))
    assert torch.equal(generator.get_state(), before)


def test_muon_settings_that_set_the_work_of_a_step_must_be_this_runs():
    """Muon's Newton-Schulz step count is structure, not a setting: a file cannot raise it."""
    from fasttrain.learners.optim import make_optimizer

    net = torch.nn.Sequential()
    net.add_module("torso", torch.nn.Sequential(torch.nn.Linear(4, 4)))
    optimizer = make_optimizer("muon", net, 1e-3)
    state = optimizer.state_dict()
    savedstate.optimizer_state(state, optimizer)
    bad = mutated(state, ("optimizers", 0, "param_groups", 0, "ns_steps"), 10**9)
    with pytest.raises(RunError) as refusal:
        savedstate.optimizer_state(bad, optimizer)
    assert str(refusal.value) == (
        "checkpoint optimizer.optimizers[0].param_groups[0].ns_steps = 1000000000; "
        "expected 5, as this run's optimizer has it"
    )


def test_a_policy_whose_logits_overflow_cannot_sample_and_says_so():
    class Overflowing(torch.nn.Module):
        is_recurrent = False

        def forward(self, obs, state, starts):
            return torch.full((obs.shape[0], 3), math.inf), None, None

    actor = PolicyActor(Overflowing(), greedy=False)
    with pytest.raises(RunError, match=r"^the policy's action probabilities are not finite"):
        actor(torch.zeros(2, 4))


def test_the_mutation_helper_changes_one_path_and_leaves_the_state_alone(ppo_run):
    state = read(ppo_run)
    bad = mutated(state, ("optimizer", "param_groups", 0, "betas", 1), 2.0)
    assert get(bad, ("optimizer", "param_groups", 0, "betas")) == (0.9, 2.0)
    assert get(state, ("optimizer", "param_groups", 0, "betas")) == (0.9, 0.999)
    assert "time_s" not in mutated(state, ("time_s",), DELETE) and "time_s" in state
