"""PPO acting while it learns (``ppo.overlap``), built on PPO's trainer (``learners/ppo.py``).

The rollout of iteration k + 1 is collected, in a second thread and a second storage, with the
weights from before update k while update k runs: one iteration of policy lag. Plain PPO clips
its ratio against the policy that acted, which with lag is one update old, so the trust region
is half spent before the update starts (measured: CartPole at a high learning rate collapses
from 500). With ``ppo.decoupled`` (the default) the ratio is taken against the weights the
update starts from (the proximal policy, one forward pass over the batch) and each sample is
weighted by proximal over behaviour probability, capped (Hilton et al. 2021, "Batch
size-invariance for policy optimization"). The rollout and the update draw from their own random
streams and the swap happens at a fixed point, so results never depend on timing.

``choose(config)`` (the learner's registration) picks this trainer where ``ppo.overlap`` is
set.
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F

from fasttrain.learners import distributed, savedstate
from fasttrain.learners.ppo import Trainer

# the largest weight proximal / behaviour probability a sample gets in the decoupled objective
DECOUPLED_WEIGHT_MAX = 2.0

# what a checkpoint keeps of a collected rollout that is still to be learned from
SAVED = (
    "obs",
    "final_obs",
    "actions",
    "logprobs",
    "values",
    "rewards",
    "final_values",
    "advantages",
    "returns",
    "terminated",
    "truncated",
    "episode_starts",
    "states",
)


class OverlapTrainer(Trainer):
    """PPO whose next rollout is collected, by a copy of the weights from before each update,
    while the update runs; with ``ppo.decoupled``, the decoupled objective."""

    # ------------------------------------------------------------------------------- SETUP

    def setup_behaviour(self) -> None:
        """A second policy that acts (no gradients), a second storage and a random stream of
        its own; with ``ppo.decoupled``, room for the batch's proximal log-probabilities."""
        self.decoupled = self.args.decoupled
        self.b_prox_logprobs = None
        if self.decoupled:  # the batch's log-probabilities under the weights the update starts at
            self.b_prox_logprobs = torch.zeros(self.batch_size, device=self.device)
        self.collected = False  # ``storage`` holds a rollout still to learn from
        self.behaviour = self.make_network()
        self.behaviour.requires_grad_(False)
        self.next_storage = self.new_rollout()
        seed = distributed.rank_seed(self.config.run.seed, self.ctx.ranks.rank) + 1
        self.rollout_generator = torch.Generator(device=self.device).manual_seed(seed % 2**63)
        self.rollout_streams = [self.rollout_generator]

    def storage_bytes(self) -> int:
        """Two rollouts' storage and, decoupled, the proximal log-probabilities."""
        proximal = self.args.num_steps * self.rows * 4 if self.args.decoupled else 0
        return 2 * super().storage_bytes() + proximal

    def zero_batch(self, shadow: Trainer) -> None:
        super().zero_batch(shadow)
        shadow.b_prox_logprobs = torch.zeros(self.batch_size, device=self.device)

    # ------------------------------------------------------------------------------- ROLLOUT

    def collect_and_update(self) -> dict:
        """Update k on ``storage`` (collected with the weights from before update k - 1)
        while a second thread collects rollout k + 1 into ``next_storage`` with the weights
        from before update k; then the two storages swap. Only the first iteration (and the
        first after a resume of a run stopped before its first update) collects alone."""
        if not self.collected:
            self.behaviour.load_state_dict(self.policy.state_dict())
            self.collect(self.storage)
        self.behaviour.load_state_dict(self.policy.state_dict())  # the weights before update k
        self.next_storage.carry_over(self.storage)
        worker = threading.Thread(target=self._collect_in_thread, name="fasttrain-rollout")
        self._failure = None
        worker.start()
        try:
            losses = self.update()
        finally:
            worker.join()
        if self._failure is not None:
            raise self._failure
        self.storage, self.next_storage = self.next_storage, self.storage
        self.collected = True
        self.global_step += self.steps_per_iteration  # the steps learned from, all ranks
        return losses

    def _collect_in_thread(self) -> None:
        try:
            if self.device.type == "cuda":  # its own stream: the update's work does not wait
                stream = torch.cuda.Stream(self.device)
                stream.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(stream):
                    self.collect(self.next_storage)
                torch.cuda.current_stream(self.device).wait_stream(stream)
            else:
                self.collect(self.next_storage)
        except BaseException as exc:  # raised again in the main thread, after the update
            self._failure = exc

    # ------------------------------------------------------------------------------- UPDATE

    def prepare_batch(self) -> None:
        """The batch's flat views and, decoupled, its proximal log-probabilities."""
        super().prepare_batch()
        if self.decoupled:
            self.proximal_logprobs()

    def proximal_logprobs(self) -> None:
        """Decoupled PPO, before the update: ``b_prox_logprobs``, the batch's actions under the
        weights the update starts from, a minibatch at a time (no gradient). The advantages keep
        the behaviour policy's values: recomputing them from these weights measured no better
        (CartPole, PufferLib's settings, seeds 0-2: final 497, 342, 500 against 236, 486, 500)."""
        with torch.no_grad():
            if not self.recurrent:
                pieces = torch.arange(self.batch_size, device=self.device).split(
                    self.minibatch_size
                )
            else:
                steps = torch.arange(self.horizon, device=self.device)[:, None] * self.rows
                per, first = self.sequences_per_minibatch, self.minibatch_firsts()
                pieces = [steps + first[None, i : i + per] for i in range(0, self.sequences, per)]
            for mb in pieces:
                with self.ctx.autocast():
                    logits, _ = self.evaluate_actions(mb)
                mb = mb.reshape(-1)
                log_probs = F.log_softmax(logits.float(), dim=1)
                self.b_prox_logprobs[mb] = log_probs.gather(1, self.b_actions[mb][:, None])[:, 0]

    def minibatch(self, flat, advantages=None):
        """Decoupled: the ratio against the proximal policy, each sample weighted by proximal
        over behaviour probability (capped at ``DECOUPLED_WEIGHT_MAX``)."""
        batch = super().minibatch(flat, advantages)
        if not self.decoupled:
            return batch
        prox = self.b_prox_logprobs[flat]
        weights = (prox - batch.old_logprobs).exp().clamp(max=DECOUPLED_WEIGHT_MAX)
        return batch._replace(old_logprobs=prox, weights=weights)

    # ------------------------------------------------------------------------------- STATE

    def member_state(self, k: int, env_state: dict | None = None) -> dict:
        """PPO's state, the rollout stream's and the rollout collected but not yet learned
        from."""
        state = super().member_state(k, env_state)
        state["rollout_generator"] = self.rollout_generator.get_state()
        if self.collected:
            s = self.storage
            state["collected"] = {
                k: getattr(s, k).cpu().clone() for k in SAVED if getattr(s, k) is not None
            }
        return state

    def check_member_state(self, k: int, state: dict) -> None:
        """PPO's checks, the rollout stream's state and the collected rollout's buffers."""
        super().check_member_state(k, state)
        stream = state["rollout_generator"]
        savedstate.generator_state(stream, "rollout_generator", self.rollout_generator.device)
        collected = state.get("collected")
        if collected is None:
            return
        kept = [k for k in SAVED if getattr(self.storage, k) is not None]
        for key, value in savedstate.table(collected, "collected").items():
            if key not in kept:
                raise savedstate.refuse(f"collected.{key}", value, f"one of {', '.join(kept)}")
            below = {"actions": self.env.num_actions}.get(key, 0)
            if key in ("obs", "final_obs"):
                below = self.env.spec.obs_categories
            savedstate.like(value, f"collected.{key}", getattr(self.storage, key), below)

    def load_members(self, states: list[dict]) -> None:
        super().load_members(states)  # refuses a checkpoint written without overlap
        (state,) = states
        self.rollout_generator.set_state(state["rollout_generator"])
        collected = state.get("collected")
        self.collected = collected is not None
        for key, value in (collected or {}).items():
            getattr(self.storage, key).copy_(value)


def choose(config) -> type | None:
    """PPO's variant for ``config``: this trainer where ``ppo.overlap`` is set."""
    return OverlapTrainer if config.learner.overlap else None
