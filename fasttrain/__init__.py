"""fasttrain: games compiled by Numba for CPU and GPU, and a lean PyTorch learner.

>>> import fasttrain
>>> env = fasttrain.make("snake", num_envs=1024, backend="cpu", seed=0)
>>> obs, reward, terminated, truncated = env.step(actions)

``make``, ``VecEnv`` and ``games`` load on first use, so ``fasttrain --help`` and a Ctrl-C at
start-up stay quick and clean (torch and Numba take seconds to import).

Gymnasium: every single-agent game is registered as ``fasttrain/<Name>-v0`` (see
``fasttrain.adapters.gym``) as soon as both fasttrain and gymnasium are imported, in either
order, without importing gymnasium here: if it is already imported the ids are registered now,
else a one-shot import hook registers them right after gymnasium's own import finishes.
"""

import importlib
import importlib.abc
import importlib.util
import os
import sys
import warnings

# OpenMP (torch's and Numba's libgomp) reads these once, when it loads: set here, before
# anything of fasttrain imports torch or Numba, so a run, a benchmark and an embedding user all
# get the same. libgomp's default (spin ~3 ms before a waiting thread sleeps) made a 2-core
# machine with one other busy process 20x slower; spinning only ~10 us (1,000) halved torch's
# update on a quiet one (each small op's threads slept and woke). ~0.1 ms (10,000) keeps both:
# 2 cores, 2026-11-27, quiet / one competing process: Snake env-steps/s (4,096 envs) 41M / 13M
# at 1,000, 42M / 10M at 10,000 (libgomp's default: 44.7M / 1.8M); PPO steps/s, quiet: CartPole
# at PufferLib's settings 0.80M -> 1.47M, Snake's default 181k -> 238k. A user's own setting of
# either variable wins; so does an OpenMP that loaded before fasttrain was imported.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ["GOMP_SPINCOUNT"] = "10000"  # libgomp: spin this long, then sleep

# FASTTRAIN_CPU=avx2 (docs/performance.md): an AVX2 laptop's arithmetic on a machine with
# AVX-512 or AMX, set here for the same reason, before torch loads
from fasttrain.environ import emulate_cpu  # noqa: E402

emulate_cpu()

__version__ = "0.1.0"
__all__ = ["VecEnv", "games", "make", "__version__"]
_LAZY = {"make": "fasttrain.vecenv", "VecEnv": "fasttrain.vecenv", "games": "fasttrain.games"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'fasttrain' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])
    value = module if name == "games" else getattr(module, name)
    globals()[name] = value
    return value


def _register_gym_envs() -> None:
    try:
        from fasttrain.adapters.gym_registry import register_envs

        register_envs()
    except Exception as exc:  # noqa: BLE001 - never break the user's own gymnasium import
        warnings.warn(
            f"fasttrain: could not register its games with gymnasium: {exc}", stacklevel=2
        )


class _AfterGymnasium(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``gymnasium`` is about to be imported, it wraps the real
    loader's ``exec_module`` so fasttrain's ids are registered once gymnasium is complete."""

    def find_spec(self, name, path=None, target=None):
        if name != "gymnasium":
            return None
        sys.meta_path.remove(self)  # one shot; and the real finders answer below
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_then_register(module):
            run(module)
            _register_gym_envs()

        spec.loader.exec_module = exec_then_register
        return spec


if "gymnasium" in sys.modules:
    _register_gym_envs()
elif not any(isinstance(finder, _AfterGymnasium) for finder in sys.meta_path):
    sys.meta_path.insert(0, _AfterGymnasium())
