"""The cuda backend: simulator parity with the CPU in CI; real-GPU checks marked `gpu`."""

import pytest

from fasttrain import games
from tests.cli import ROOT
from tests.simulator import run_on_simulator

# Run in a subprocess: the simulator is chosen when numba.cuda is first imported. One process
# checks every game (an interpreter with torch and the simulator takes seconds to start); each
# game reports OK or its own traceback, and each game's test reads its own line.
SIM_SCRIPT = """
import sys
import traceback

import numpy as np
import torch

import fasttrain
from fasttrain import games
from fasttrain.kernels import assert_backends_agree, get_backend
from fasttrain.kernels import cuda as cuda_backend

# The simulator runs one Python thread per CUDA thread: blocks of 256 for 4-8 envs were 30x the
# threads the games need, and most of this process's time. Blocks of 3 launch 9-12 threads and
# cover what 256 never did at these sizes: several blocks, and a last one partly past the envs.
cuda_backend.THREADS_PER_BLOCK = 3


def check(name):
    spec = games.get(name)
    num_envs, steps, short = 8, 150, {}
    if name.startswith("minatar-"):  # costly on the simulator: fewer envs and steps, a time limit
        num_envs, steps, short = 4, 60, {"max_episode_steps": 25}
    params = spec.make_params(**short)
    episodes = assert_backends_agree(spec, ["cpu", "cuda"], num_envs, steps, seed=11, params=params)
    assert episodes > 0, "random play should end some episodes"

    a = fasttrain.make(name, num_envs=num_envs, backend="cuda", seed=11)
    b = fasttrain.make(name, num_envs=num_envs, backend="cpu", seed=11)
    assert a.backend == "cuda" and torch.equal(a.obs, b.obs)
    # the kernels ran over the cuda backend's layout: observations written to an env-minor
    # stage and copied into env-major rows (what the learner reads)
    core = a._core
    assert core.layout == "obs-minor" and core._stage.strides[0] == core._stage.itemsize
    assert a.obs.is_contiguous() and b._core.layout == "env-major"
    # and over the env-minor state too, the same numbers
    backend = get_backend("cuda")
    backend.layout = "env-minor"
    try:
        assert_backends_agree(spec, ["cpu", "cuda"], num_envs, steps // 3, seed=5, params=params)
        c = fasttrain.make(name, num_envs=num_envs, backend="cuda", seed=11)
    finally:
        backend.layout = "obs-minor"
    for f in spec.state:
        array = c._core.arrays[f.name]
        assert array.ndim == 1 or array.strides[0] == array.itemsize, (f.name, array.strides)
    g = torch.Generator().manual_seed(1)
    # writing into learner-owned slots (rollout storage) and a saved state work the same way
    slots = torch.zeros((3, *a.obs.shape), dtype=a.obs.dtype)
    finals = torch.zeros_like(slots)
    saved = a.state_dict()
    for t in range(3):
        act = torch.randint(0, a.num_actions, (a.num_rows,), generator=g)
        a.step(act, obs_out=slots[t], final_obs_out=finals[t], check=False)
        b.step(act)
        assert torch.equal(slots[t], b.obs), (name, t)
        ended = b.terminated | b.truncated
        assert torch.equal(finals[t][ended], b.final_obs[ended]), (name, t)
    a.load_state_dict(saved)
    for t in range(3):
        a.step(torch.zeros(a.num_rows, dtype=torch.int64))
    a.load_state_dict(saved)
    for key, value in a.state_dict().items():
        assert np.array_equal(value, saved[key]), (name, key)
    # the device functions are compiled from the very same game source as the CPU path
    launcher = get_backend("cuda").compile(spec).step.py_func
    module = sys.modules[launcher.__module__]
    assert module.step_one.fn.__code__ is spec.step_one.__code__
    if spec.agent_game:
        assert module.observe.fn.__code__ is spec.observe.__code__
    try:
        a.step(torch.full((a.num_rows,), a.num_actions))
        raise SystemExit("out-of-range action accepted")
    except ValueError as exc:
        assert "out of range" in str(exc)


for name in sys.argv[1:]:
    try:
        check(name)
    except BaseException:
        print(f"SIMULATOR FAILED {name}", flush=True)
        print(f"BEGIN {name}", file=sys.stderr, flush=True)
        traceback.print_exc()
        print(f"END {name}", file=sys.stderr, flush=True)
    else:
        print(f"SIMULATOR OK {name}", flush=True)
"""

GAE_SCRIPT = """
import sys

import numpy as np

from fasttrain.kernels.gae import GAE, columns, gae, gae_env

rng = np.random.default_rng(0)
T, N = 9, 5
f32 = np.float32
args = [rng.standard_normal((T, N)).astype(f32), rng.standard_normal((T, N)).astype(f32),
        rng.standard_normal(N).astype(f32), rng.standard_normal((T, N)).astype(f32),
        rng.random((T, N)) < 0.2, rng.random((T, N)) < 0.2]
out = [np.zeros((T, N), f32) for _ in range(4)]
settings = (columns(0.99, N), columns(0.95, N))
gae(*args, 0.99, 0.95, out[0], out[1])
GAE("cuda", *args, *settings, out[2], out[3])
assert np.array_equal(out[0], out[2]) and np.array_equal(out[1], out[3])
# bound once, launched twice: the second launch reads rewards edited in place
bound = GAE.bind("cuda", (*args, *settings, out[2], out[3]))
args[0][...] = rng.standard_normal((T, N)).astype(f32)
bound(stream=0)
gae(*args, 0.99, 0.95, out[0], out[1])
assert np.array_equal(out[0], out[2]) and np.array_equal(out[1], out[3])
# the device function is compiled from the very same scalar source as the CPU path
module = sys.modules[GAE.launcher("cuda").py_func.__module__]
assert module.column_one.fn.__code__ is gae_env.__code__
# a gamma and lambda per column (a population's members): column i as the reference with its own
gammas, lambdas = np.linspace(0.5, 0.999, N), np.linspace(0.0, 1.0, N)
GAE("cuda", *args, gammas, lambdas, out[2], out[3])
for i in range(N):
    gae(*args, gammas[i], lambdas[i], out[0], out[1])
    assert np.array_equal(out[0][:, i], out[2][:, i]) and np.array_equal(out[1][:, i], out[3][:, i])
print("SIMULATOR OK")

# the copy of env-minor observations into rows (cuda.copy_rows_kernel), itself on the simulator:
# a stage of several tiles each way, the last ones partly past its edges
from fasttrain.kernels.cuda import copy_rows_grid, copy_rows_module
from numba import cuda

for dtype in (np.uint8, np.float32):
    stage = (rng.random((45, 70)) * 250).astype(dtype)
    out = np.full((70, 45), 7, dtype)
    kernel = cuda.jit(copy_rows_module(dtype).copy_rows_kernel)
    blocks, threads = copy_rows_grid(stage.shape)
    assert blocks == (3, 2), blocks  # rows on x (2^20 envs: 32,768 blocks; y stops at 65,535)
    kernel[blocks, threads](stage, out)
    assert np.array_equal(out, stage.T), dtype
print("COPY ROWS OK")
"""


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """SIM_SCRIPT run once over every registered game."""
    return run_on_simulator(SIM_SCRIPT, *games.names(), cwd=tmp_path_factory.mktemp("sim"))


@pytest.mark.parametrize("game", games.names())
def test_cuda_backend_on_the_simulator_matches_cpu_bit_for_bit(game, simulated):
    assert simulated.returncode == 0, simulated.stderr[-3000:]
    if f"SIMULATOR OK {game}\n" not in simulated.stdout:
        failed = simulated.stderr.split(f"BEGIN {game}\n")[-1].split(f"END {game}\n")[0]
        raise AssertionError(f"{game} on the simulator:\n{failed[-3000:]}")


@pytest.fixture(scope="module")
def kernels_simulated(tmp_path_factory):
    """GAE_SCRIPT (the learner kernels and the observation copy) run once."""
    return run_on_simulator(GAE_SCRIPT, cwd=tmp_path_factory.mktemp("sim-kernels"))


def test_gae_on_the_simulator_matches_the_python_reference_bit_for_bit(kernels_simulated):
    assert "SIMULATOR OK" in kernels_simulated.stdout, kernels_simulated.stderr[-3000:]


def test_the_observation_copy_kernel_on_the_simulator_writes_every_row(kernels_simulated):
    result = kernels_simulated
    assert result.returncode == 0, result.stderr[-3000:]
    assert "COPY ROWS OK" in result.stdout


def test_games_hold_no_backend_code():
    paths = sorted((ROOT / "fasttrain" / "games").glob("*.py"))
    assert len(paths) >= len(games.names())  # the folder the games live in, not an empty one
    for path in paths:
        text = path.read_text()
        for word in ("numba", "cuda", "prange", "njit"):
            assert word not in text, f"{path.name} mentions {word}: games are backend-free"


def _gpu_ready():
    try:
        import torch

        from fasttrain.kernels import cuda_available

        return cuda_available() and torch.cuda.is_available()
    except Exception:
        return False


gpu = pytest.mark.skipif(not _gpu_ready(), reason="needs a CUDA GPU with the cuda extra")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize(
    "game, layout",
    [("snake", "obs-minor"), ("snake", "env-major"), ("snake", "env-minor")],
)
def test_gpu_matches_cpu_at_scale(game, layout):
    """Thousands of envs over several tiles of the observation copy, in every layout."""
    import torch

    import fasttrain
    from fasttrain.kernels import get_backend

    backend = get_backend("cuda")
    before, backend.layout = backend.layout, layout
    try:
        a = fasttrain.make(game, num_envs=4100, backend="cuda", seed=3)
    finally:
        backend.layout = before
    b = fasttrain.make(game, num_envs=4100, backend="cpu", seed=3)
    assert a._core.layout == layout and torch.equal(a.obs.cpu(), b.obs)
    g = torch.Generator().manual_seed(0)
    for t in range(300):
        act = torch.randint(0, a.num_actions, (4100,), generator=g)
        a.step(act.cuda())
        b.step(act)
        assert torch.equal(a.obs.cpu(), b.obs), t
        assert torch.equal(a.rewards.cpu(), b.rewards) and torch.equal(
            a.terminated.cpu(), b.terminated
        )
        ended = b.terminated | b.truncated
        assert torch.equal(a.final_obs.cpu()[ended], b.final_obs[ended]), t
    for name, value in a.state_dict().items():
        assert (value == b.state_dict()[name]).all(), name


@pytest.mark.gpu
@gpu
def test_gpu_views_are_zero_copy():
    import torch

    import fasttrain

    env = fasttrain.make("snake", num_envs=256, backend="cuda", seed=0)
    pointer = env.obs.data_ptr()
    assert env.obs.device.type == "cuda"
    assert pointer == env.arrays["obs"].data.ptr
    for _ in range(10):
        obs, *_ = env.step(torch.zeros(256, dtype=torch.int64, device="cuda"))
        assert obs.data_ptr() == pointer
    env.arrays["rewards"][3] = 42.0
    assert float(env.rewards[3]) == 42.0
    # NumPy actions (what the Gymnasium and SB3 adapters pass) reach the device buffer
    import numpy as np

    host_actions = np.arange(256, dtype=np.int32) % 4
    env.step(host_actions)
    assert torch.equal(env.actions.cpu(), torch.from_numpy(host_actions.astype(np.int64)))


@pytest.mark.gpu
@gpu
def test_short_ppo_run_on_gpu(tmp_path):
    """The whole run on the GPU: every planned step, finite losses in every row, and Snake's
    score past 1 apple (random play: 0.07) after 1M steps. Measured with this preset: on an
    H200, 0.55 at 400k steps; on the CPU with the CNN the GPU picks, 0.71 at 400k, 1.9 at 1M."""
    import csv
    import math

    from fasttrain.config import resolve as cfg
    from fasttrain.run.runner import run

    ppo = {"total_timesteps": 1_000_000}
    config = cfg.from_dict(
        {"run": {"device": "cuda"}, "log": {"progress": False}, "game": {"snake": {"ppo": ppo}}}
    )
    summary = run(config, out=tmp_path / "gpu", echo=lambda *_: None)
    batch = config.learner.num_envs * config.learner.num_steps
    assert summary["global_step"] == 1_000_000 // batch * batch
    with open(tmp_path / "gpu" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and int(rows[-1]["global_step"]) == summary["global_step"]
    for row in rows:
        for name, value in row.items():
            if name.startswith("losses/"):
                assert math.isfinite(float(value)), (name, row)
    assert float(rows[-1]["charts/score"]) > 1.0, rows[-1]


@pytest.mark.gpu
@gpu
def test_first_ppo_iteration_on_the_gpu_matches_the_cpu(monkeypatch):
    """The environment is bit-identical across backends, so given the same initial weights, the
    same sampling noise and the same minibatch order (drawn here from one CPU stream, restarted
    for each run: torch's CPU and CUDA generators give different numbers), the GPU's first PPO
    iteration sees the same observations, takes the same actions and ends with the CPU's losses
    and weight update within float tolerance."""
    import torch

    from fasttrain.config import resolve as cfg
    from fasttrain.learners.ppo import Trainer

    real_rand, real_randperm = torch.rand, torch.randperm
    stream = torch.Generator()

    def rand(*shape, generator=None, device=None, **kwargs):
        return real_rand(*shape, generator=stream, **kwargs).to(device)

    def randperm(n, generator=None, device=None, **kwargs):
        return real_randperm(n, generator=stream, **kwargs).to(device)

    monkeypatch.setattr(torch, "rand", rand)
    monkeypatch.setattr(torch, "randperm", randperm)

    def trainer(device):
        ppo = {"num_envs": 256, "num_steps": 16, "num_minibatches": 2, "update_epochs": 2}
        config = cfg.from_dict(
            {
                "run": {"device": device, "compile": "off", "amp": "off", "seed": 3},
                "model": {"kind": "mlp"},
                "log": {"progress": False},
                "game": {"snake": {"ppo": ppo}},
            }
        )
        return Trainer(config, warn=lambda *_: None)

    cpu, gpu = trainer("cpu"), trainer("cuda")
    start = {k: v.clone() for k, v in cpu.policy.state_dict().items()}
    gpu.policy.load_state_dict(start)
    stream.manual_seed(11)
    cpu_losses = cpu.iterate()
    stream.manual_seed(11)
    gpu_losses = gpu.iterate()
    for name in ("obs", "actions", "rewards", "terminated", "truncated"):
        assert torch.equal(getattr(cpu.storage, name), getattr(gpu.storage, name).cpu()), name
    assert cpu_losses.keys() == gpu_losses.keys()
    # the GPU's float32 matmuls use TF32 (~1e-3 relative); abs 1e-3 is two samples' clipfrac
    for name, value in cpu_losses.items():
        assert gpu_losses[name] == pytest.approx(value, rel=1e-3, abs=1e-3), name
    # Adam's normalised steps carry that rounding to weights whose gradient is near zero, so
    # the updates are compared as vectors: same direction, and no weight off by a whole step
    cpu_after, gpu_after = cpu.policy.state_dict(), gpu.policy.state_dict()
    cpu_step = torch.cat([(cpu_after[k] - v).flatten() for k, v in start.items()])
    gpu_step = torch.cat([(gpu_after[k].cpu() - v).flatten() for k, v in start.items()])
    assert torch.nn.functional.cosine_similarity(cpu_step, gpu_step, dim=0) > 0.99
    assert (cpu_step - gpu_step).abs().max() < cpu_step.abs().max()


@pytest.mark.gpu
@gpu
def test_gpu_steps_are_ordered_on_torch_current_stream():
    """Kernels follow torch's current stream: actions written by torch on a side stream are
    read by the step launched in the same stream context, with no host synchronisation."""
    import torch

    import fasttrain

    a = fasttrain.make("snake", num_envs=4096, backend="cuda", seed=5)
    b = fasttrain.make("snake", num_envs=4096, backend="cpu", seed=5)
    side = torch.cuda.Stream()
    g = torch.Generator().manual_seed(2)
    with torch.cuda.stream(side):
        for _ in range(200):
            act = torch.randint(0, 4, (4096,), generator=g)
            # a long kernel on the side stream before the step: without stream ordering the
            # step would read actions that are not written yet
            torch.cuda._sleep(100_000)
            a.step(act.to("cuda", non_blocking=True), check=False)
            b.step(act)
            assert a.stream == side.cuda_stream
    side.synchronize()
    assert torch.equal(a.obs.cpu(), b.obs) and torch.equal(a.rewards.cpu(), b.rewards)


@pytest.mark.gpu
@gpu
def test_gpu_rollout_makes_no_host_sync():
    """A rollout never waits for the GPU: with a long sleep queued on its stream first, the
    host has queued the whole rollout while the GPU still sleeps. This sees every kind of wait
    (torch's, CuPy's and numba-cuda's copies and synchronisations), which torch's sync debug
    mode alone does not."""
    import torch

    from fasttrain.config import resolve as cfg
    from fasttrain.learners.ppo import Trainer

    ppo = {"num_envs": 4096, "num_steps": 8, "num_minibatches": 1}
    config = cfg.from_dict(
        {
            "run": {"device": "cuda", "compile": "off"},
            "log": {"progress": False},
            "game": {"snake": {"ppo": ppo}},
        }
    )
    trainer = Trainer(config, warn=lambda *_: None)
    trainer.rollout()  # warm-up: compile and allocate
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # torch's own syncs fail at once, with a stack
    try:
        torch.cuda._sleep(4_000_000_000)  # several seconds of GPU cycles on the current stream
        trainer.rollout()
        queued = torch.cuda.Event()
        queued.record()
        assert not queued.query(), "the rollout waited for the GPU (a host sync or copy)"
    finally:
        torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()


def test_few_envs_are_spread_over_the_multiprocessors(monkeypatch):
    """A preset's few envs run in blocks small enough that every multiprocessor gets one (a
    warp at least), a large count in full blocks (each a power of two); the blocks always cover
    every env."""
    from fasttrain.kernels import cuda as cuda_backend

    monkeypatch.setattr(cuda_backend, "THREADS_PER_BLOCK", 256)
    spread = cuda_backend.threads_per_block
    assert spread(512, 132) == 32  # Snake's preset on an H200: 16 blocks, not 2
    assert spread(1, 132) == 32 and spread(64, 132) == 32
    assert spread(16_384, 132) == 128
    assert spread(2**20, 132) == 256 and spread(2**20, 1) == 256
    for envs in (1, 31, 33, 512, 4_224, 16_384, 100_000):
        threads = spread(envs, 132)
        blocks = -(-envs // threads)
        assert threads in (32, 64, 128, 256) and blocks * threads >= envs
        # the fewest threads that still fit the envs into one block per multiprocessor
        assert threads == 32 or threads // 2 < -(-envs // 132)
    monkeypatch.setattr(cuda_backend, "THREADS_PER_BLOCK", 16)
    assert spread(512, 132) == 16  # never more than the most a block gets
