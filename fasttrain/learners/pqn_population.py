"""PQN for a population: ``M`` members, one per seed, trained side by side in one process as
each would train alone (issue 53).

The members' environments, Q-networks, random streams and optimizer are ``population_base``'s.
Each member draws from its own stream what the solo PQN trainer draws, in the same order (its
rollout's exploration draws, then its minibatch orders), acts epsilon-greedily with its own
epsilon, and regresses its Q-values on the Q(lambda) returns of its own columns (one kernel
launch over every member's columns), so member ``k`` sees the same observations, takes the same
actions and makes the same update as the solo run with ``run.seed = seeds[k]``, up to the float
rounding of batched matrix products (``tests/fasttrain/learners/test_pqn_population.py``).
Members may differ in ``VARIABLE``: the learning rate, the gradient clip and the exploration
schedule. ``fasttrain/population_run.py`` gives it its run directory (``fasttrain run --seeds``).
"""

from __future__ import annotations

import math
import time

import torch

from fasttrain.kernels.qlambda import QLAMBDA
from fasttrain.learners.base import check_memory
from fasttrain.learners.population_base import PopulationBase, learner_problem
from fasttrain.learners.pqn import epsilon_at
from fasttrain.learners.pqn_config import POPULATION_VARIABLE

LOSS_NAMES = ("td_loss", "q_values")

VARIABLE = POPULATION_VARIABLE  # the settings members may differ in


def population_problem(config) -> str | None:
    """None where ``config`` can train as a PQN population here, else why not (one line)."""
    return learner_problem(config, "pqn")  # model.core is PPO's alone: the config refuses it


class PQNPopulationTrainer(PopulationBase):
    """``len(seeds)`` PQN members trained side by side; ``iterate()`` returns each member's
    losses and epsilon, ``member_stats()`` each member's episode means."""

    ALGO = "pqn"
    VARIABLE = VARIABLE
    problem = staticmethod(population_problem)

    def __init__(self, config, seeds, member_configs=None, warn=print):
        super().__init__(config, seeds, member_configs)
        args, env, M = self.args, self.env, self.num_members
        T, N, dev = args.num_steps, self.rows, self.device
        self.batch_size = args.num_envs * T  # per member
        self.minibatch_size = self.batch_size // args.num_minibatches
        self.num_iterations = max(1, args.total_timesteps // self.batch_size)
        obs_bytes = env.obs_dtype.itemsize * math.prod(env.obs_shape)
        check_memory((2 * T + 1) * N * obs_bytes + T * N * 48,
                     f"the population's PQN rollout storage ({M} members)", dev)  # fmt: skip

        def zeros(*shape, dtype=torch.float32):
            return torch.zeros(shape, dtype=dtype, device=dev)

        self.obs = zeros(T + 1, N, *env.obs_shape, dtype=env.obs_dtype)
        self.final_obs = zeros(T, N, *env.obs_shape, dtype=env.obs_dtype)
        self.actions = zeros(T, N, dtype=torch.int64)
        self.rewards, self.values, self.final_values = zeros(T, N), zeros(T, N), zeros(T, N)
        self.last_values, self.returns = zeros(N), zeros(T, N)
        self.terminated = zeros(T, N, dtype=torch.bool)
        self.truncated = zeros(T, N, dtype=torch.bool)
        self.explore = zeros(T, N, dtype=torch.bool)
        self.uniform = zeros(T, N)
        self.random_actions = zeros(T, N, dtype=torch.int64)
        self.greedy = zeros(T, N, dtype=torch.int64)
        self.obs[0].copy_(env.obs)
        self.step_outputs = [env.bind_outputs(self.obs[t + 1], self.final_obs[t]) for t in range(T)]
        kernel_args = (self.rewards, self.values, self.last_values, self.final_values,
                       self.terminated, self.truncated, args.gamma, args.q_lambda,
                       self.returns)  # fmt: skip
        backend = self.ctx.device.backend
        if backend == "cpu":  # CPU tensors as NumPy views
            kernel_args = tuple(
                a.numpy() if isinstance(a, torch.Tensor) else a for a in kernel_args
            )
        self.qlambda = QLAMBDA.bind(backend, kernel_args)
        # on cuda the rollout's steps as one CUDA graph (they draw nothing: every member's
        # exploration is drawn before them, as pqn.Trainer's); the update runs eagerly
        self.horizon_graph = self.rollout_graph([], warn)

    # ------------------------------------------------------------------------------ ROLLOUT

    def epsilons(self) -> list[float]:
        """Each member's epsilon for the current iteration's rollout (``pqn.epsilon_at``)."""
        return [epsilon_at(a, self.iteration, self.num_iterations) for a in self.member_args]

    def rollout(self) -> None:
        """``num_steps`` epsilon-greedy steps of every member's envs: each member's exploration
        drawn first from its own stream (its uniforms, then its random actions, as
        ``pqn.Trainer.rollout``), then the steps."""
        env, args, T = self.env, self.args, self.args.num_steps
        with torch.inference_mode():
            t0 = time.perf_counter()
            uniform, random_actions = (
                self.by_columns(self.uniform),
                self.by_columns(self.random_actions),
            )
            for k, g in enumerate(self.generators):
                uniform[k].copy_(torch.rand((T, self.n), generator=g, device=self.device))
                draws = torch.randint(0, env.num_actions, (T, self.n), generator=g,
                                      device=self.device)  # fmt: skip
                random_actions[k].copy_(draws)
            epsilon = torch.tensor(self.epsilons(), device=self.device)
            torch.lt(self.uniform, epsilon.repeat_interleave(self.n), out=self.explore)
            self.timers.forward += time.perf_counter() - t0
        self.run_steps(None)
        self.global_step += args.num_steps * self.n  # each member's agent steps

    def rollout_steps(self, _slot=None) -> None:
        """The rollout's steps, launched one by one (what a CUDA graph captures): act on the
        exploration drawn before them, step, store."""
        env = self.env
        with torch.inference_mode():
            for t in range(self.args.num_steps):
                t0 = time.perf_counter()
                q = self.population(self.by_member(self.obs[t])).reshape(self.rows, -1)
                torch.max(q, dim=1, out=(self.values[t], self.greedy[t]))
                torch.where(
                    self.explore[t], self.random_actions[t], self.greedy[t], out=self.actions[t]
                )
                t1 = time.perf_counter()
                env.step(self.actions[t], out=self.step_outputs[t], check=False)
                self.rewards[t] = env.rewards
                self.terminated[t] = env.terminated
                self.truncated[t] = env.truncated
                self.timers.forward += t1 - t0
                self.timers.env += time.perf_counter() - t1

    def by_columns(self, storage: torch.Tensor) -> torch.Tensor:
        """A time-major ``(T, rows)`` tensor as ``(M, T, n)`` views: member ``k``'s columns."""
        return storage.view(storage.shape[0], self.num_members, self.n).transpose(0, 1)

    # ------------------------------------------------------------------------------ RETURNS

    def compute_returns(self) -> None:
        """Q(lambda) returns of every member's columns, from the values each member's network
        gave (``pqn.Trainer.compute_returns``)."""
        t0 = time.perf_counter()
        with torch.inference_mode():
            last = self.population(self.by_member(self.obs[-1]))  # (M, n, A)
            self.last_values.copy_(last.max(dim=-1).values.reshape(-1))
            self.final_values.zero_()
            rows = self.truncated.nonzero(as_tuple=True)  # once per rollout, usually few rows
            for k in torch.unique(rows[1] // self.n).tolist() if rows[0].numel() else []:
                mine = tuple(r[rows[1] // self.n == k] for r in rows)
                self.final_values[mine] = self.member_call(k, self.final_obs[mine]).max(1).values
        stream = 0
        if self.device.type == "cuda":
            stream = torch.cuda.current_stream(self.device).cuda_stream
        self.qlambda(stream=stream)
        self.timers.forward += time.perf_counter() - t0

    # ------------------------------------------------------------------------------ UPDATE

    def losses(self, mb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every member's regression of Q(s, a) on its returns over its minibatch ``mb``
        (M, B) of flat storage indices: ``(M,)`` losses and ``(M, 2)`` stats (``LOSS_NAMES``),
        each as ``pqn.Trainer._train_step``."""
        obs = self.obs[:-1].reshape(-1, *self.env.obs_shape)[mb]  # (M, B, *obs_shape)
        with self.autocast():
            q_all = self.population(obs)
        q = q_all.float().gather(-1, self.actions.reshape(-1)[mb][..., None])[..., 0]
        loss = 0.5 * ((q - self.returns.reshape(-1)[mb]) ** 2).mean(-1)
        return loss, torch.stack([loss, q.mean(-1)], dim=-1).detach()

    def update(self) -> torch.Tensor:
        """Every member's epochs of minibatch steps; returns the mean stats, ``(M, 2)``."""
        args = self.args
        t0 = time.perf_counter()
        if args.anneal_lr:
            self.optimizer.set_learning_rates(
                (1.0 - self.iteration / self.num_iterations) * self.lrs
            )
        means = self.minibatch_steps(len(LOSS_NAMES))
        self.iteration += 1
        self.timers.learn += time.perf_counter() - t0
        return means

    def iterate(self) -> list[dict]:
        """One rollout, return pass and update of every member; returns each member's losses
        (``losses/...``, the updates it skipped in this iteration) and its rollout's epsilon."""
        epsilons = self.epsilons()  # the rollout's, logged with it
        self.rollout()
        self.compute_returns()
        before = self.optimizer.skipped.clone()
        means = self.update().tolist()  # the one host sync
        self.obs[0].copy_(self.obs[-1])  # the next rollout starts where this one ended
        skipped = (self.optimizer.skipped - before).tolist()
        return [
            {
                **{f"losses/{n}": v for n, v in zip(LOSS_NAMES, row, strict=True)},
                "losses/skipped_updates": skipped[k],
                "charts/epsilon": epsilons[k],
            }  # fmt: skip
            for k, row in enumerate(means)
        ]

    # ------------------------------------------------------------------------------ STATE

    def carried(self) -> dict[str, torch.Tensor]:
        """Where the next rollout starts: its observations (the rollout is thrown away)."""
        return {"next_obs": self.obs[0]}
