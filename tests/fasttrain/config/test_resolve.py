"""Config: code defaults equal config.toml, overrides apply, bad input fails with one line."""

import dataclasses
import re

import pytest
import tomllib

from fasttrain import games
from fasttrain.config import choices
from fasttrain.config import file as configfile
from fasttrain.config import resolve as cfg
from fasttrain.learners import LEARNERS
from fasttrain.learners.ppo_config import PPOConfig
from tests.cli import ROOT


def test_config_toml_equals_code_defaults():
    text = (ROOT / "config.toml").read_text()
    parsed = cfg.from_dict(tomllib.loads(text))
    defaults = cfg.defaults()
    for name in ("run", "game", "log"):
        assert getattr(parsed, name) == getattr(defaults, name), f"[{name}] differs"
    for name in cfg.LEARNER_SECTIONS:  # [ppo], [dqn]: the dataclass defaults
        assert parsed.layers.section(name) == LEARNERS[name].config(), f"[{name}] differs"
    assert parsed.layers.section("model") == cfg.ModelConfig()
    assert parsed.model == defaults.model  # the chosen game's network, presets applied
    (file,) = parsed.layers.items  # the file is one layer
    for game in games.names():  # [game.<name>]: the params dataclass defaults < the preset
        spec = games.get(game)
        want = spec.params_cls(**cfg.GAME_DEFAULTS.get(game, {}).get("params", {}))
        assert spec.make_params(**file.games[game]["params"]) == want
        assert parsed.layers.params(game) == defaults.layers.params(game) == want
        for section in [*cfg.LEARNER_SECTIONS, "model"]:
            want = cfg.GAME_DEFAULTS.get(game, {}).get(section, {})
            assert file.games[game].get(section, {}) == want, f"[game.{game}.{section}]"
    # and the file is exactly what the code renders, comments included
    assert text == configfile.config_file(), (
        "config.toml is stale: python -m fasttrain.config.file > config.toml"
    )


def test_set_parses_types_and_nested_game_keys():
    config = cfg.load(
        sets=[
            "ppo.learning_rate=3e-4",
            "ppo.anneal_lr=false",
            "run.device=cpu",
            "game.snake.height=8",
            "game.snake.ppo.num_envs=64",
            "log.interval_s=1",
        ]
    )
    assert (
        config.layers.section("ppo").learning_rate == 3e-4
        and config.layers.section("ppo").anneal_lr is False
    )
    assert config.run.device == "cpu" and config.log.interval_s == 1.0
    assert config.params.height == 8
    assert config.learner.num_envs == 64  # per-game section overrides [ppo]
    assert config.layers.section("ppo").num_envs == PPOConfig().num_envs


def test_game_section_overrides_ppo_section():
    config = cfg.from_dict(
        {"ppo": {"ent_coef": 0.5}, "game": {"snake": {"ppo": {"ent_coef": 0.25}}}}
    )
    assert config.learner.ent_coef == 0.25
    other = cfg.from_dict({"ppo": {"ent_coef": 0.5}})
    assert cfg.GAME_DEFAULTS["snake"]["ppo"]["ent_coef"] != 0.5
    assert other.learner.ent_coef == 0.5  # [ppo] in a file beats snake's preset


def test_config_file_then_set(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[ppo]\nnum_steps = 32\n[run]\nseed = 5\n")
    config = cfg.load(path, sets=["run.seed=6"])
    assert config.layers.section("ppo").num_steps == 32 and config.run.seed == 6


@pytest.mark.parametrize(
    "data, words",
    [
        ({"ppoo": {}}, ["unknown section [ppoo]", "run", "ppo", "model"]),
        ({"ppo": {"learnin_rate": 1.0}}, ["unknown key 'learnin_rate' in [ppo]", "learning_rate"]),
        ({"ppo": {"num_envs": 2.5}}, ["ppo.num_envs must be int"]),
        ({"ppo": {"anneal_lr": 1}}, ["ppo.anneal_lr must be bool"]),
        ({"run": {"device": "gpu"}}, ["run.device must be one of auto, cpu, cuda"]),
        ({"run": {"amp": "fp8"}}, ["off, bf16, fp16"]),
        ({"run": {"compile": "yes"}}, ["reduce-overhead"]),
        ({"game": {"name": "tetris"}}, ["unknown game 'tetris'", "snake"]),
        ({"game": {"tetris": {"height": 3}}}, ["unknown game section [game.tetris]", "snake"]),
        ({"game": {"snake": {"heigth": 3}}}, ["[game.snake]", "heigth", "height"]),
        ({"game": {"snake": {"height": 2}}}, ["at least 3x3"]),
        (
            {"ppo": {"num_envs": 10, "num_steps": 3, "num_minibatches": 4}},
            ["30", "num_minibatches = 4"],
        ),
        ({"ppo": {"gamma": 1.5}}, ["ppo.gamma must be in [0, 1]"]),
        ({"ppo": {"num_steps": 0}}, ["ppo.num_steps must be >= 1"]),
        ({"game": {"snake": {"ppo": {"num_envs": 11, "num_steps": 3}}}}, ["does not split"]),
    ],
)
def test_bad_input_fails_with_one_clear_line(data, words):
    with pytest.raises(cfg.ConfigError) as info:
        cfg.from_dict(data)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(cfg.ConfigError, match="not found"):
        cfg.load(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[ppo\nx=")
    with pytest.raises(cfg.ConfigError, match="not valid TOML"):
        cfg.load(bad)


# ------------------------------------------------------------------ precedence
# built-in defaults < per-game presets < --config file < --set < command-line flags


def test_set_beats_the_game_presets():
    preset = cfg.GAME_DEFAULTS["snake"]["ppo"]
    assert preset["num_envs"] != 8 and preset["total_timesteps"] != 10_000
    config = cfg.load(sets=["ppo.num_envs=8", "ppo.total_timesteps=10000"])
    assert config.learner.num_envs == 8
    assert config.learner.total_timesteps == 10_000
    # the README's example on cartpole, whose presets set learning_rate too
    config = cfg.load(sets=["game.name=cartpole", "ppo.learning_rate=3e-4"])
    assert cfg.GAME_DEFAULTS["cartpole"]["ppo"]["learning_rate"] != 3e-4
    assert config.learner.learning_rate == 3e-4


def test_config_file_beats_presets_and_set_beats_the_file(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text("[ppo]\nnum_steps = 16\nnum_envs = 64\n[game.snake.ppo]\nnum_envs = 128\n")
    config = cfg.load(path)
    assert config.learner.num_steps == 16  # [ppo] in the file beats snake's preset 32
    assert config.learner.num_envs == 128  # inside one file the game's table wins
    config = cfg.load(path, sets=["ppo.num_envs=8"])
    assert config.learner.num_envs == 8  # --set beats everything in the file
    # presets still apply to what nobody set
    assert config.learner.total_timesteps == cfg.GAME_DEFAULTS["snake"]["ppo"]["total_timesteps"]


def test_set_game_learner_section_still_works():
    config = cfg.load(sets=["game.snake.ppo.num_steps=16", "game.cartpole.ppo.num_steps=8"])
    assert config.learner.num_steps == 16
    assert config.layers.learner("ppo", "cartpole").num_steps == 8
    assert (
        config.layers.section("ppo").num_steps == PPOConfig().num_steps
    )  # [ppo] as written is untouched


def test_overrides_name_where_each_value_came_from(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text("[ppo]\nnum_steps = 16\n[run]\nseed = 4\n")
    config = cfg.load(path, sets=["ppo.num_envs=8", "game.snake.width=9"])
    lines = config.overrides()
    assert f"ppo.num_steps=16 (--config {path})" in lines
    assert "ppo.num_envs=8 (--set)" in lines
    total = cfg.GAME_DEFAULTS["snake"]["ppo"]["total_timesteps"]
    assert f"ppo.total_timesteps={total} (snake preset)" in lines
    assert f"run.seed=4 (--config {path})" in lines
    assert "game.snake.width=9 (--set)" in lines
    assert not any(line.startswith("ppo.clip_coef") for line in lines)  # the default


def test_model_presets_per_game_and_their_precedence(tmp_path):
    cartpole = cfg.GAME_DEFAULTS["cartpole"]["model"]["hidden"]
    assert cartpole != cfg.ModelConfig().hidden
    config = cfg.load(sets=["game.name=cartpole"])
    assert config.model.hidden == cartpole  # the game's tuned network
    assert cfg.load().model.hidden == cfg.ModelConfig().hidden  # snake keeps the default
    assert f"model.hidden={cartpole} (cartpole preset)" in config.overrides()
    # [model] in any layer beats the preset; [game.<name>.model] beats [model] in that layer
    assert cfg.load(sets=["game.name=cartpole", "model.hidden=32"]).model.hidden == 32
    path = tmp_path / "mine.toml"
    path.write_text(
        "[game]\nname = 'cartpole'\n[model]\nhidden = 32\n[game.cartpole.model]\nhidden = 16\n"
    )
    assert cfg.load(path).model.hidden == 16
    assert cfg.load(path, sets=["model.hidden=8"]).model.hidden == 8  # --set beats the file
    with pytest.raises(cfg.ConfigError, match="one of tanh, relu"):
        cfg.load(sets=["game.cartpole.model.activation=gelu"])
    with pytest.raises(cfg.ConfigError, match="unknown key 'width' in \\[game.cartpole.model\\]"):
        cfg.load(sets=["game.cartpole.model.width=3"])


def test_game_param_presets_and_their_precedence(tmp_path):
    # Breakout trains on the minimal action set although the game's own default is MinAtar's six
    assert games.get("minatar-breakout").params_cls().minimal_action_set is False
    assert cfg.GAME_DEFAULTS["minatar-breakout"]["params"]["minimal_action_set"] is True
    config = cfg.load(sets=["game.name=minatar-breakout"])
    assert config.params.minimal_action_set is True
    assert "game.minatar-breakout.minimal_action_set=True (minatar-breakout preset)" in (
        config.overrides()
    )
    # another game's preset does not leak into this one, and a plain load keeps snake's defaults
    invaders = "minatar-space_invaders"  # a game with no params preset of its own
    assert cfg.load().layers.params(invaders) == games.get(invaders).params_cls()
    # a file beats the preset, --set beats the file
    path = tmp_path / "mine.toml"
    path.write_text(
        "[game]\nname = 'minatar-breakout'\n[game.minatar-breakout]\nminimal_action_set = false\n"
    )
    assert cfg.load(path).params.minimal_action_set is False
    again = cfg.load(path, sets=["game.minatar-breakout.minimal_action_set=true"])
    assert again.params.minimal_action_set is True
    # the written config reads back to the same params, preset included
    again = cfg.from_dict(tomllib.loads(configfile.to_toml(config)))
    assert again.params == config.params


def test_the_resolved_config_is_frozen_and_says_where_each_value_came_from(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[ppo]\nnum_steps = 16\n\n[game.snake]\nwidth = 9\n")
    config = cfg.load(path, sets=["ppo.ent_coef=0.5", "model.hidden=64"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.learner = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.learner.num_steps = 3
    sources, preset = config.sources, cfg.GAME_DEFAULTS["snake"]["ppo"]
    assert config.learner.num_steps == 16 and sources["ppo.num_steps"] == f"--config {path}"
    assert config.learner.ent_coef == 0.5 and sources["ppo.ent_coef"] == "--set"
    assert config.learner.learning_rate == preset["learning_rate"]
    assert sources["ppo.learning_rate"] == "snake preset"
    assert "ppo.clip_coef" not in sources and config.learner.clip_coef == PPOConfig().clip_coef
    assert config.params.width == 9 and sources["game.snake.width"] == f"--config {path}"
    assert config.model.hidden == 64 and sources["model.hidden"] == "--set"
    # the command line's --num-envs sets a field of the resolved config, checked again
    later = config.with_learner("command line", num_envs=7)
    assert later.learner.num_envs == 7 and later.sources["ppo.num_envs"] == "command line"
    assert config.learner.num_envs == preset["num_envs"]  # the first one is unchanged
    with pytest.raises(cfg.ConfigError, match=r"^ppo\.num_envs must be >= 1, got 0$"):
        config.with_learner("command line", num_envs=0)
    assert "ppo.num_envs=7 (command line)" in later.overrides()
    # what the user typed is listed even where it equals the default
    assert "ppo.clip_coef=0.2 (--set)" in cfg.load(sets=["ppo.clip_coef=0.2"]).overrides()
    assert not any(line.startswith("ppo.clip_coef") for line in cfg.load().overrides())


def test_a_gpu_preset_applies_only_where_the_run_is_on_a_gpu(monkeypatch):
    from fasttrain.config import presets

    monkeypatch.setitem(presets.GPU_DEFAULTS, "snake", {"ppo": {"num_envs": 4096}})
    cpu_envs = cfg.GAME_DEFAULTS["snake"]["ppo"]["num_envs"]
    cpu = cfg.load(sets=["run.device=cpu"])
    assert cpu.learner.num_envs == cpu_envs and cpu.sources["ppo.num_envs"] == "snake preset"
    gpu = cfg.load(sets=["run.device=cuda"])
    assert gpu.learner.num_envs == 4096 and gpu.sources["ppo.num_envs"] == "snake gpu preset"
    assert "ppo.num_envs=4096 (snake gpu preset)" in gpu.overrides()  # on the settings line
    # the rest of the game's preset stays under it
    assert gpu.learner.learning_rate == cfg.GAME_DEFAULTS["snake"]["ppo"]["learning_rate"]
    # auto follows the machine (the one device rule): here a GPU is pretended, then none
    from fasttrain import device

    monkeypatch.setattr(device, "device_type", lambda name: "cuda")
    assert cfg.load().learner.num_envs == 4096
    monkeypatch.setattr(device, "device_type", lambda name: "cpu")
    assert cfg.load().learner.num_envs == cpu_envs
    # what the user sets beats the GPU preset
    assert cfg.load(sets=["run.device=cuda", "ppo.num_envs=64"]).learner.num_envs == 64


def test_a_game_may_name_its_own_learner_and_any_layer_overrides_it():
    """Seaquest trains with PQN where nothing names a learner (PPO does not learn it); --algo,
    a config file or --set still choose, and a resumed run keeps the learner it saved."""
    seaquest = cfg.from_dict({"game": {"name": "minatar-seaquest"}})
    assert seaquest.run.algo == "pqn" and seaquest.sources["run.algo"] == "minatar-seaquest preset"
    assert type(seaquest.learner).__name__ == "PQNConfig"
    assert seaquest.learner.total_timesteps == 10_000_000  # PQN's MinAtar preset
    chosen = cfg.from_dict({"game": {"name": "minatar-seaquest"}, "run": {"algo": "ppo"}})
    assert chosen.run.algo == "ppo" and chosen.sources["run.algo"] == "config"
    assert cfg.from_dict({"game": {"name": "minatar-breakout"}}).run.algo == "ppo"
    assert "run.algo" not in cfg.from_dict({"game": {"name": "minatar-breakout"}}).sources


# ------------------------------------------------------------------ no silent no-ops


@pytest.mark.parametrize(
    "sets, section, learner, source",
    [
        (["game.name=minatar-seaquest", "ppo.learning_rate=0.1"], "ppo", "pqn", "seaquest preset"),
        (["game.name=minatar-asterix", "ppo.ent_coef=0.1"], "ppo", "pqn", "asterix preset"),
        (["pqn.learning_rate=0.1"], "pqn", "ppo", "the default"),
        (["run.algo=pqn", "ppo.overlap=true"], "ppo", "pqn", "--set"),
        (["run.algo=ppo", "dqn.gamma=0.9"], "dqn", "ppo", "--set"),
        (["game.snake.dqn.gamma=0.9"], "dqn", "ppo", "the default"),
    ],
)
def test_set_into_another_learners_section_is_refused_in_one_line(sets, section, learner, source):
    config = cfg.load(sets=sets)  # valid settings, resolved: the run would ignore them
    with pytest.raises(cfg.ConfigError) as info:
        cfg.check_sections_apply(config)
    message = str(info.value)
    key = sets[-1].split("=")[0]
    assert message.startswith(f"--set {key}: this run's learner is {learner} (")
    assert f"reads [{learner}], not [{section}]; pass --algo {section} to train with" in message
    assert source in message and "\n" not in message


def test_set_into_the_running_learners_section_and_defaults_pass():
    for sets in (["ppo.learning_rate=0.1"], ["game.snake.ppo.num_steps=16"], []):
        cfg.check_sections_apply(cfg.load(sets=sets))
    for algo in LEARNERS:  # config.toml holds every learner's section, defaults and presets
        for game in ("snake", "minatar-seaquest"):
            sets = [f"run.algo={algo}", f"game.name={game}"]
            cfg.check_sections_apply(cfg.load(ROOT / "config.toml", sets=sets))


def test_a_config_file_may_not_set_a_learner_that_does_not_run(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text("[ppo]\nlearning_rate = 0.001\n[pqn]\nlearning_rate = 0.1\n")
    cfg.check_sections_apply(cfg.load(path, sets=["run.algo=pqn"]))  # [ppo] holds its default
    with pytest.raises(cfg.ConfigError) as info:
        cfg.check_sections_apply(cfg.load(path))
    assert str(info.value) == (
        f"--config {path}: [pqn] learning_rate = 0.1 is never read: this run's learner is ppo "
        "(the default), which reads [ppo], not [pqn]; pass --algo pqn to train with pqn"
    )
    # a value the game's preset gives that learner is what a written config.toml holds
    preset = cfg.GAME_DEFAULTS["minatar-seaquest"]["ppo"]["num_envs"]
    path.write_text(
        f'[game]\nname = "minatar-seaquest"\n[game.minatar-seaquest.ppo]\nnum_envs = {preset}\n'
    )
    cfg.check_sections_apply(cfg.load(path))


def test_settings_the_checkpoint_is_built_for_cannot_change_on_resume():
    saved = cfg.load(sets=["run.algo=dqn"])
    cfg.check_resume(saved, cfg.load(sets=["run.algo=dqn", "dqn.learning_rate=0.1"]))
    changed = cfg.load(sets=["run.algo=dqn", "dqn.buffer_size=4096", "dqn.dueling=true"])
    with pytest.raises(cfg.ConfigError) as info:
        cfg.check_resume(saved, changed)
    assert str(info.value).startswith(
        f"checkpoint was written with dqn.buffer_size = {saved.learner.buffer_size}, "
        "dqn.dueling = False; resume it with the same (this run has 4096, True, which --resume "
        "cannot apply"
    )
    assert LEARNERS["ppo"].fixed == ("optimizer", "overlap")
    assert LEARNERS["pqn"].fixed == ("optimizer", "layer_norm")


# ------------------------------------------------------------------ counts that set loop lengths

HUGE = 2**70  # 1180591620717411303424: once accepted, the first iteration never ended
# every bounded count and its section (a learner's settings are checked on every run, so DQN's
# need no --algo)
COUNTS = [
    *((name, key) for name in LEARNERS for key in cfg.SECTIONS[name].__dataclass_fields__),
    ("run", "action_repeat"),
    ("run", "torch_threads"),
    ("model", "layers"),
]
COUNTS = [(section, key) for section, key in COUNTS if key in choices.MOST]


@pytest.mark.parametrize("section, key", COUNTS)
def test_a_count_past_its_bound_is_refused_in_one_line_naming_the_range(section, key):
    with pytest.raises(cfg.ConfigError) as info:
        cfg.from_dict({section: {key: HUGE}})
    found = re.fullmatch(r"(\S+) must be in \[(\d+), ([\d_]+)\], got (\d+)", str(info.value))
    assert found, str(info.value)
    name, low, most, got = found.groups()
    assert name == f"{section}.{key}" and int(got) == HUGE
    assert int(low) == (0 if key in ("learning_starts", "torch_threads") else 1)
    assert int(most.replace("_", "")) == choices.MOST[key]  # as TOML writes it: 1_000_000


def test_the_bound_holds_wherever_a_config_is_built(tmp_path):
    """--set, a --config file, and a checkpoint's saved config (the layer --resume builds on),
    with the game's own section too."""
    line = f"ppo.update_epochs must be in [1, 1000], got {HUGE}"
    path = tmp_path / "epochs.toml"
    path.write_text(f"[game.cartpole.ppo]\nupdate_epochs = {HUGE}\n")
    builds = {
        "--set": lambda: cfg.load(sets=[f"ppo.update_epochs={HUGE}"]),
        "file": lambda: cfg.load(path, sets=["game.name=cartpole"]),
        "checkpoint": lambda: cfg.build([("checkpoint", {"ppo": {"update_epochs": HUGE}})]),
        "--steps": lambda: cfg.defaults().with_learner("command line", total_timesteps=HUGE),
    }
    for name, build in builds.items():
        with pytest.raises(cfg.ConfigError) as info:
            build()
        want = line if name != "--steps" else "ppo.total_timesteps must be in [1, "
        assert str(info.value).startswith(want), (name, str(info.value))
    assert cfg.load(sets=["ppo.update_epochs=1000"]).learner.update_epochs == 1000  # the bound


@pytest.mark.parametrize(
    ("device", "cls", "variant"),
    [("cpu", "amx", "base"), ("cpu", "avx2", "fp32"), ("cuda", "amx", "cuda")],
)
def test_every_preset_resolves_within_the_bounds(monkeypatch, device, cls, variant):
    from fasttrain import device as devices

    monkeypatch.delenv("FASTTRAIN_CPU", raising=False)
    monkeypatch.setattr(devices, "device_type", lambda name: device)
    monkeypatch.setattr(devices, "cpu_class", lambda: cls)
    for game in games.names():  # every learner's settings are checked on each game's run
        config = cfg.from_dict({"game": {"name": game}})
        assert config.layers.device == device
        assert (config.run.preset, config.layers.variant) == (variant, variant)
