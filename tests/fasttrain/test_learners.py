"""The learner contract, run over every registered learner, and a toy learner plugged in at runtime.

Each learner trains with its ``smoke`` settings on Snake 6x6: a resumed run equals a straight one
bit for bit, the run directory is complete and reads back, ``play`` replays the checkpoint's
greedy agent, bad settings end in one line, and another learner's checkpoint is refused.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import json
import math
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

import fasttrain
from fasttrain import games
from fasttrain.cli import main
from fasttrain.config import file as configfile
from fasttrain.config import resolve as cfg
from fasttrain.errors import ConfigError, RunError
from fasttrain.learners import LEARNERS, Learner, register
from fasttrain.learners.base import TrainerBase
from fasttrain.models import make_policy
from fasttrain.run import checkpoint
from fasttrain.run.runner import run
from tests.cli import ROOT, sets

BOARD = {"height": 6, "width": 6}


def quiet(*_):
    pass


def smoke_config(name: str, steps: int, **section) -> cfg.Config:
    """Learner ``name`` with its smoke settings (plus ``section``) on Snake 6x6, on the CPU."""
    return cfg.from_dict(
        {
            "run": {"algo": name, "device": "cpu", "torch_threads": 1, "numba_threads": 1},
            "game": {"name": "snake", "snake": BOARD},
            name: {**LEARNERS[name].smoke, "total_timesteps": steps, **section},
            "model": {"hidden": 32},
            "log": {"progress": False, "interval_s": 1e-9},  # a metrics row every iteration
        }
    )


def cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "fasttrain.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
    )


def metrics_steps(out: Path) -> list[int]:
    return [int(row["global_step"]) for row in csv.DictReader(open(out / "metrics.csv"))]


def assert_same(a, b, where="state"):
    """Recursive bit-for-bit equality of checkpoint contents."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{k}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b, equal_nan=True), where
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert a == b, where


def checkpoint_actor(out: Path):
    """The greedy agent of the checkpoint in ``out``, built by hand from its config and weights."""
    state = checkpoint.load(out)
    config = cfg.from_dict(cfg.tomllib.loads(state["config"]))
    spec, params = games.get("snake"), config.params
    learner = LEARNERS[config.run.algo]
    return learner.actor(
        config, spec.obs_shape(params), spec.obs_dtype, spec.actions(params), state["model"]
    )


def replay_frames(act, steps: int, shift: int = 0) -> list[str]:
    """The boards ``play --seed 0 --steps steps`` shows when ``act`` picks (shifted) actions."""
    env = fasttrain.make("snake", num_envs=1, backend="cpu", seed=0, **BOARD)
    frames = [env.render(0)]
    for _ in range(steps):
        env.step((act(env.obs) + shift) % env.num_actions)
        frames.append(env.render(0))
    return frames


def printed_frames(output: str) -> list[str]:
    return re.findall(r"^\+-{6}\+\n(?:\|[.@o*]{6}\|\n){6}\+-{6}\+$", output, flags=re.M)


def play(out: Path, steps: int):
    return CliRunner().invoke(
        main,
        ["play", "--game", "snake", "--checkpoint", str(out), "--steps", str(steps), "--fps", "0"],
    )


# ------------------------------------------------------------------------------- contract runs


@dataclass
class SmokeRuns:
    """A straight run of ``2 * half`` iterations and one of ``half`` resumed to the same total."""

    config: cfg.Config  # of the straight run and the resumed half
    iteration_steps: int  # env steps per iteration
    half: int  # iterations of the first half
    straight: Path
    halves: Path


def make_runs(name: str, root: Path) -> SmokeRuns:
    probe = LEARNERS[name].trainer(smoke_config(name, 10**6), warn=quiet)
    probe.iterate()
    size = probe.global_step  # one iteration's env steps, whatever the learner's layout
    assert size > 0
    # the first half ends past learning_starts, so updates run on both sides of the resume
    half = max(2, 1 + math.ceil(getattr(probe.args, "learning_starts", 0) / size))
    straight, halves = root / "straight", root / "halves"
    run(smoke_config(name, 2 * half * size), out=straight, echo=quiet)
    run(smoke_config(name, half * size), out=halves, echo=quiet)
    run(smoke_config(name, 2 * half * size), resume=halves, echo=quiet)
    return SmokeRuns(smoke_config(name, 2 * half * size), size, half, straight, halves)


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    """``smoke_runs(name)``: the learner's runs, trained once per module."""
    cache: dict[str, SmokeRuns] = {}

    def get(name: str) -> SmokeRuns:
        if name not in cache:
            cache[name] = make_runs(name, tmp_path_factory.mktemp(f"runs-{name}"))
        return cache[name]

    return get


@pytest.mark.parametrize("name", list(LEARNERS))
def test_resume_equals_straight_run_bit_for_bit(smoke_runs, name):
    runs = smoke_runs(name)
    a, b = checkpoint.load(runs.straight), checkpoint.load(runs.halves)
    total = 2 * runs.half * runs.iteration_steps
    assert a["global_step"] == b["global_step"] == total
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    for key in a["env"]:
        assert np.array_equal(a["env"][key], b["env"][key], equal_nan=True), key
    # and everything else a learner keeps: optimizer, random streams, buffers, target networks
    assert_same(
        {k: v for k, v in a.items() if k != "time_s"}, {k: v for k, v in b.items() if k != "time_s"}
    )
    # the resumed half appended its rows after the first half's, one per iteration
    every = [runs.iteration_steps * (i + 1) for i in range(2 * runs.half)]
    assert metrics_steps(runs.straight) == metrics_steps(runs.halves) == every


def saved_rates(state: dict) -> list[float]:
    """The learning rate of every parameter group of a checkpoint's optimizer."""
    parts = state["optimizer"].get("optimizers", [state["optimizer"]])
    return [float(group["lr"]) for part in parts for group in part["param_groups"]]


@pytest.mark.parametrize("name", list(LEARNERS))
def test_a_learning_rate_changed_on_resume_takes_effect(smoke_runs, name, tmp_path):
    runs = smoke_runs(name)
    out = shutil.copytree(runs.halves, tmp_path / "run")
    old = runs.config.learner.learning_rate
    assert saved_rates(checkpoint.load(out)) == [pytest.approx(old)]
    total = (2 * runs.half + 2) * runs.iteration_steps  # two more iterations
    run(smoke_config(name, total, learning_rate=3 * old), resume=out, echo=quiet)
    assert saved_rates(checkpoint.load(out)) == [pytest.approx(3 * old)]
    with open(out / "metrics.csv", newline="") as f:
        rates = [float(row["charts/learning_rate"]) for row in csv.DictReader(f)]
    assert rates == [pytest.approx(old)] * (2 * runs.half) + [pytest.approx(3 * old)] * 2


@pytest.mark.parametrize("name", list(LEARNERS))
def test_a_setting_the_checkpoint_is_built_for_cannot_change_on_resume(smoke_runs, name, tmp_path):
    out = shutil.copytree(smoke_runs(name).halves, tmp_path / "run")
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ConfigError) as info:
        run(smoke_config(name, 10**6, optimizer="muon"), resume=out, echo=quiet)
    message = str(info.value)
    assert f"checkpoint was written with {name}.optimizer = 'adam'; resume it with" in message
    assert "this run has 'muon'" in message and "\n" not in message
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files  # nothing written


@pytest.mark.parametrize("name", list(LEARNERS))
def test_run_directory_is_complete_and_reads_back(smoke_runs, name):
    runs = smoke_runs(name)
    out = runs.straight
    assert {"config.toml", "metrics.csv", "checkpoint.pt", "summary.json"} <= {
        p.name for p in out.iterdir()
    }
    summary = json.loads((out / "summary.json").read_text())
    assert summary["game"] == "snake" and summary["algo"] == name
    assert summary["global_step"] == 2 * runs.half * runs.iteration_steps
    assert summary["interrupted"] is False
    with open(out / "metrics.csv", newline="") as f:
        header = next(csv.reader(f))
    assert {"global_step", "charts/episodic_return"} <= set(header)
    assert any(column.startswith("losses/") for column in header)
    assert metrics_steps(out)[-1] == summary["global_step"]
    assert checkpoint.load(out)["global_step"] == summary["global_step"]

    back = cfg.from_dict(cfg.tomllib.loads((out / "config.toml").read_text()))
    assert back.run.algo == name
    assert back.learner == runs.config.learner
    for key, value in LEARNERS[name].smoke.items():
        assert getattr(back.learner, key) == value, key
    assert back.params == runs.config.params
    assert back.model == runs.config.model


@pytest.mark.parametrize("name", list(LEARNERS))
def test_play_replays_the_checkpoint_agent(smoke_runs, name):
    out = smoke_runs(name).straight
    result = play(out, steps=5)
    assert result.exit_code == 0, result.output
    frames = printed_frames(result.output)
    assert frames == replay_frames(checkpoint_actor(out), 5)
    assert all(frame.count("@") == 1 for frame in frames)

    act, params = checkpoint.load_agent(out)
    assert (params["height"], params["width"]) == (6, 6)
    env = fasttrain.make("snake", num_envs=4, **BOARD)
    actions = act(env.obs)
    assert actions.dtype == torch.int64 and actions.shape == (4,)
    assert ((0 <= actions) & (actions < env.num_actions)).all()
    assert torch.equal(actions, checkpoint_actor(out)(env.obs))


@pytest.mark.parametrize("name", list(LEARNERS))
def test_bad_learner_settings_end_in_one_line(name, tmp_path):
    for num_envs in (0, -3):
        with pytest.raises(ConfigError) as info:
            cfg.from_dict({name: {"num_envs": num_envs}})
        message = str(info.value)
        assert "\n" not in message and f"{name}.num_envs" in message, message
    for section in ({name: {"num_envz": 4}}, {"game": {"snake": {name: {"num_envz": 4}}}}):
        with pytest.raises(ConfigError) as info:
            cfg.from_dict(section)
        message = str(info.value)
        assert "\n" not in message and "'num_envz'" in message, message
        assert re.search(rf"\[(game\.snake\.)?{name}\]", message), message

    result = cli(
        "run",
        *sets(f"run.algo={name}", f"{name}.num_envs=0"),
        "--out",
        "never",
        cwd=tmp_path,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{name}.num_envs" in lines[0], result.stderr
    assert list(tmp_path.iterdir()) == []  # no --out directory, no runs/


FOREIGN = [
    pytest.param(name, other, id=f"{name}-from-{other}")
    for name in LEARNERS
    for other in LEARNERS
    if other != name
]


@pytest.mark.parametrize("name, other", FOREIGN)
def test_resuming_from_another_learners_checkpoint_is_refused(name, other, tmp_path):
    # the same num_envs, so the env buffers fit and only the learner differs
    num_envs = smoke_config(name, 8192).learner.num_envs
    foreign = tmp_path / other
    run(smoke_config(other, 1024, num_envs=num_envs), out=foreign, echo=quiet)
    files = {p.name: p.read_bytes() for p in foreign.iterdir()}

    with pytest.raises(ConfigError) as info:
        run(smoke_config(name, 8192), resume=foreign, echo=quiet)
    assert "\n" not in str(info.value)
    assert {p.name: p.read_bytes() for p in foreign.iterdir()} == files

    trainer = LEARNERS[name].trainer(smoke_config(name, 8192), warn=quiet)
    before = copy.deepcopy(trainer.state_dict())
    with pytest.raises(ConfigError):
        trainer.load_state_dict(checkpoint.load(foreign))
    assert_same(trainer.state_dict(), before)


# ------------------------------------------------------------------------------- a toy learner


@dataclass(frozen=True)
class ToyConfig:
    total_timesteps: int = 1024
    """environment steps to train for (--steps)"""
    num_envs: int = 8
    """parallel environments"""
    num_steps: int = 4
    """steps per environment per iteration"""
    learning_rate: float = 0.05
    """SGD learning rate"""


def validate_toy(toy: ToyConfig, where: str = "toy") -> None:
    for key in ("total_timesteps", "num_envs", "num_steps"):
        if getattr(toy, key) < 1:
            raise ConfigError(f"{where}.{key} must be >= 1, got {getattr(toy, key)}")
    if toy.learning_rate <= 0:
        raise ConfigError(f"{where}.learning_rate must be > 0, got {toy.learning_rate}")


class ToyTrainer(TrainerBase):
    """REINFORCE on immediate rewards with an entropy bonus: one SGD step per iteration. The
    base writes its checkpoint state (``member_state``: counters, optimizer, env, random
    streams and ``network``'s weights) and reads it back (``load_members``)."""

    def __init__(self, config, warn=print, members=None):
        super().__init__(config, members)
        args, env = self.args, self.env
        self.policy = make_policy(
            env.obs_shape, env.obs_dtype, env.num_actions, config.model, self.device
        )
        self.optimizer = torch.optim.SGD(self.policy.parameters(), lr=args.learning_rate)
        self.batch_size = args.num_envs * args.num_steps
        self.num_iterations = max(1, args.total_timesteps // self.batch_size)

    @property
    def network(self):
        return self.policy

    acting = network

    def iterate(self) -> list[dict]:
        log_probs, rewards, entropies = [], [], []
        for _ in range(self.args.num_steps):
            logits, _, _ = self.policy(self.env.obs.clone())  # step rewrites env.obs in place
            log_p = F.log_softmax(logits, dim=1)
            actions = torch.multinomial(log_p.exp().detach(), 1, generator=self.generator)[:, 0]
            self.env.step(actions)
            log_probs.append(log_p.gather(1, actions[:, None])[:, 0])
            entropies.append(-(log_p.exp() * log_p).sum(1))
            rewards.append(self.env.rewards.clone())
            self.global_step += self.args.num_envs
        pg_loss = -(torch.stack(log_probs) * torch.stack(rewards)).mean()
        entropy = torch.stack(entropies).mean()
        self.ctx.optimizer_step(
            self.optimizer, pg_loss - 0.1 * entropy, self.policy.parameters(), max_grad_norm=1.0
        )
        self.iteration += 1
        return [{"losses/policy_loss": pg_loss.item(), "losses/entropy": entropy.item()}]


def toy_actor(config, obs_shape, obs_dtype, num_actions: int, model_state: dict):
    policy = make_policy(obs_shape, obs_dtype, num_actions, config.model)
    policy.load_state_dict(model_state)

    def act(obs: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return policy(obs)[0].argmax(dim=1)

    return act


TOY = Learner(
    "toy", ToyConfig, validate_toy, ToyTrainer, toy_actor, smoke={"num_envs": 8, "num_steps": 4}
)


@contextlib.contextmanager
def registered(learner: Learner):
    register(learner)
    try:
        yield learner
    finally:
        if LEARNERS.get(learner.name) is learner:
            del LEARNERS[learner.name]


@pytest.fixture
def toy():
    """The toy learner, registered for one test only."""
    with registered(TOY) as learner:
        yield learner


def test_the_registry_imports_a_trainer_only_when_it_is_asked_for():
    """Config classes and checks are torch-free; ``trainer``, ``actor`` and ``ceiling`` named
    as "module:attribute" are imported on first use (and are then the real objects)."""
    probe = (
        "import sys\n"
        "from fasttrain.learners import LEARNERS\n"
        "from fasttrain.config import resolve as config\n"
        "config.check_layer({'ppo': {'num_envs': 8}, 'dqn': {'loss': 'huber'}})\n"
        "heavy = ('torch', 'numba', 'fasttrain.learners.ppo')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "trainer = LEARNERS['ppo'].trainer\n"
        "print(trainer.__module__, trainer.__name__, 'torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert result.stdout.splitlines() == ["[]", "fasttrain.learners.ppo Trainer True"]
    from fasttrain.learners import dqn

    assert LEARNERS["dqn"].actor is dqn.actor
    assert callable(LEARNERS["pqn"].ceiling)


def test_a_registered_learner_gets_config_sections_and_leaves_none_behind():
    with registered(TOY):
        assert "toy" in cfg.choices("run", "algo")
        with pytest.raises(ValueError, match="already registered"):
            register(TOY)
        config = cfg.from_dict(
            {
                "run": {"algo": "toy"},
                "toy": {"num_steps": 3},
                "game": {"snake": {"toy": {"num_envs": 5}}},
            }
        )
        assert config.learner == ToyConfig(num_steps=3, num_envs=5)
        assert config.layers.learner("toy", "cartpole") == ToyConfig(num_steps=3)
        text = configfile.to_toml(config)
        assert "[toy]" in text and "[game.snake.toy]" in text
        assert "# SGD learning rate" in text  # the field docstrings are its comments
        assert cfg.from_dict(cfg.tomllib.loads(text)).learner == config.learner
        with pytest.raises(ConfigError, match=r"^toy\.num_steps must be >= 1, got 0$"):
            cfg.from_dict({"toy": {"num_steps": 0}})
    assert "toy" not in LEARNERS
    with pytest.raises(ConfigError, match="run.algo must be one of"):
        cfg.from_dict({"run": {"algo": "toy"}})
    with pytest.raises(ConfigError, match=r"unknown section \[toy\]"):
        cfg.from_dict({"toy": {"num_steps": 3}})
    assert "[toy]" not in configfile.to_toml(cfg.from_dict({}))


def toy_config(steps: int) -> cfg.Config:
    return smoke_config("toy", steps)


def test_toy_learner_trains_resumes_and_plays(toy, tmp_path):
    size = 8 * 4  # num_envs x num_steps of its smoke settings
    total = 8 * size
    straight, halves = tmp_path / "straight", tmp_path / "halves"

    # the straight run through the command line: --steps reaches the chosen learner, toy
    sets = [
        "run.algo=toy",
        "run.device=cpu",
        "run.torch_threads=1",
        "run.numba_threads=1",
        "game.snake.height=6",
        "game.snake.width=6",
        "toy.num_envs=8",
        "toy.num_steps=4",
        "model.hidden=32",
        "log.progress=false",
        "log.interval_s=1e-9",
    ]
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--steps",
            str(total),
            "--out",
            str(straight),
            *sum((["--set", s] for s in sets), []),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "learner: toy ([toy] applies)" in result.output
    assert "8 envs x 4 steps = batch 32" in result.output

    run(toy_config(total // 2), out=halves, echo=quiet)
    assert metrics_steps(halves) == [size * (i + 1) for i in range(4)]
    run(toy_config(total), resume=halves, echo=quiet)

    # every iteration logged a row; the resumed half appended its own
    every = [size * (i + 1) for i in range(8)]
    assert metrics_steps(straight) == metrics_steps(halves) == every
    for row in csv.DictReader(open(halves / "metrics.csv")):
        assert np.isfinite(float(row["losses/policy_loss"]))
        assert np.isfinite(float(row["losses/entropy"]))

    a, b = checkpoint.load(straight), checkpoint.load(halves)
    assert a["global_step"] == b["global_step"] == total and a["iteration"] == 8
    # the CLI run put --steps in [game.snake.toy], the API run in [toy]: the same settings
    config_a = cfg.from_dict(cfg.tomllib.loads(a["config"]))
    config_b = cfg.from_dict(cfg.tomllib.loads(b["config"]))
    assert config_a.learner == config_b.learner
    skip = ("time_s", "config")
    assert_same(
        {k: v for k, v in a.items() if k not in skip}, {k: v for k, v in b.items() if k not in skip}
    )
    initial = ToyTrainer(toy_config(total)).policy.state_dict()  # same seed: the run's init
    assert initial.keys() == a["model"].keys()
    assert any(not torch.equal(initial[k], a["model"][k]) for k in initial)

    # play: the boards are those of the checkpoint's greedy agent, and no other
    result = play(straight, steps=20)
    assert result.exit_code == 0, result.output
    frames = printed_frames(result.output)
    assert len(frames) == 21
    assert frames == replay_frames(checkpoint_actor(straight), 20)
    assert frames != replay_frames(checkpoint_actor(straight), 20, shift=1)

    act, params = checkpoint.load_agent(straight, game="snake")
    assert act.__qualname__.startswith("toy_actor")
    assert (params["height"], params["width"]) == (6, 6)
    env = fasttrain.make("snake", num_envs=4, **BOARD)
    policy = make_policy(env.obs_shape, env.obs_dtype, env.num_actions, toy_config(total).model)
    policy.load_state_dict(a["model"])
    with torch.inference_mode():
        by_hand = policy(env.obs)[0].argmax(dim=1)
    actions = act(env.obs)
    assert actions.dtype == torch.int64 and torch.equal(actions, by_hand)


# ------------------------------------------------------------------------ a learner owns itself


@dataclass(frozen=True)
class CriticConfig(ToyConfig):
    baseline: str = "mean"
    """mean | none: what the toy subtracts from the rewards"""


class CriticTrainer(ToyTrainer):
    """The toy learner with a second network of its own (a critic), poisoned on demand."""

    poison = False

    def __init__(self, config, warn=print, members=None):
        super().__init__(config, warn, members)
        self.critic = torch.nn.Linear(4, 1)

    def iterate(self) -> list[dict]:
        losses = super().iterate()
        if self.poison:
            with torch.no_grad():
                self.critic.weight.fill_(float("nan"))
        return losses

    def member_state(self, k: int, env_state: dict | None = None) -> dict:
        return {**super().member_state(k, env_state), "critic": self.critic.state_dict()}


CRITIC = Learner(
    "critic",
    CriticConfig,
    validate_toy,
    CriticTrainer,
    toy_actor,
    choices={"baseline": ("mean", "none")},
    short_names={"losses/policy_loss": "toypg"},
    networks=("model", "critic"),
)


def test_a_learner_declared_in_a_test_file_owns_its_choices_short_names_and_networks(tmp_path):
    with registered(CRITIC):
        with pytest.raises(ConfigError, match=r"^critic\.baseline must be one of mean, none"):
            cfg.from_dict({"run": {"algo": "critic"}, "critic": {"baseline": "median"}})
        sets = {
            "run": {"algo": "critic", "torch_threads": 1, "numba_threads": 1},
            "game": {"snake": {"height": 6, "width": 6}},
            "critic": {"baseline": "none", "total_timesteps": 64},
            "model": {"hidden": 16},
            "log": {"progress": False, "interval_s": 1e-9, "curves": False},
        }
        config = cfg.from_dict(sets)
        assert config.learner.baseline == "none"
        lines = []
        run(config, out=tmp_path / "good", echo=lines.append)
        steps = [line for line in lines if line.startswith("step ")]
        assert steps and all(" toypg " in line and " pg " not in line for line in steps)
        state = checkpoint.load(tmp_path / "good")
        assert checkpoint.networks(state) == ("model", "critic") and "critic" in state
        CriticTrainer.poison = True
        try:
            with pytest.raises(RunError, match=r"^weights are not finite at step 64;"):
                run(config, out=tmp_path / "poisoned", echo=quiet)
        finally:
            CriticTrainer.poison = False
        assert not (tmp_path / "poisoned" / checkpoint.FILENAME).exists()
