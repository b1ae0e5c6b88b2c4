"""`SOPTEpisodes`: drives the episodes of stochastic OPT (S-OPT).

S-OPT (wy1iu/OPT, `sopt_gs`; Liu et al., "Orthogonal Over-Parameterized
Training", CVPR 2021) trains, per layer, an identity-initialised m×m rotation
on m randomly chosen rows of V for one *episode*, then merges the rotation into
V and starts over on new rows.  Upstream: 400 episodes × 750
iterations, m = 3·3·16 = 144 of d = 576.

Note: upstream re-initialised every variable in the layer's scope (BN γ/β
included) at each episode and kept the optimizer's momentum of R̃; here only R̃
is reset (to the identity) and, by default, so are the optimizer slots of R̃
(their directions referred to the previous rows).  The episode length is the
same for every S-OPT layer of the model.

The callback's state (steps into the current episode, episodes completed, the
seed) is kept in `keras.Variable`s (int64, values below 2^31) and returned by `checkpoint_state()`, so that
`training.fit_resumable` saves it with the model; the rows of episode k are
drawn from a NumPy generator keyed by (seed, k), so a resumed run draws the
rows the uninterrupted run draws.
"""

import keras
import numpy as np
from keras import ops

from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.layers import opt as opt_lib

# Upstream episode length (iterations per episode, wy1iu/OPT sopt_gs).
DEFAULT_EPISODE_LENGTH = 750
# Largest seed: JAX without x64 holds int64 variables as int32.
_MAX_SEED = 2**31 - 1


def _counter(value, name):
    return keras.Variable(value, dtype="int64", trainable=False, name=name)


def _leaf_optimizers(optimizer):
    """The optimizer and every optimizer it wraps (LossScaleOptimizer, OPTOptimizer)."""
    found, stack = [], [optimizer]
    while stack:
        opt = stack.pop()
        if opt is None or any(opt is f for f in found):
            continue
        found.append(opt)
        for attr in ("inner_optimizer", "optimizer", "rotation_optimizer"):
            child = getattr(opt, attr, None)
            if isinstance(child, keras.optimizers.Optimizer):
                stack.append(child)
    return found


def reset_optimizer_slots(optimizer, variables):
    """Zero the optimizer slot variables (momenta, …) that belong to `variables`.

    Keras names a slot ``"<variable path with / → _>_<slot name>"``; slots are found by
    that prefix in every optimizer reachable from `optimizer`.

    Returns:
        int, the number of slot variables reset.
    """
    prefixes = tuple(v.path.replace("/", "_") + "_" for v in variables)
    seen = set()
    for opt in _leaf_optimizers(optimizer):
        if not opt.built:
            continue
        for slot in opt.variables:  # wrappers list their children's slots too: dedupe
            if id(slot) not in seen and slot.name.startswith(prefixes):
                slot.assign(np.zeros(slot.shape, slot.dtype))
                seen.add(id(slot))
    return len(seen)


@saving.register_serializable()
class SOPTEpisodes(keras.callbacks.Callback):
    """Every `episode_length` training steps, start a new S-OPT episode.

    For each OPT layer built with `stochastic_dims` (see `sphere_tf.layers.OPTConv2D`):
    V ← W (merge), R̃ ← I, and a new random subset of rows is drawn.

    Args:
        episode_length: int > 0, training steps per episode (upstream 750).
        seed: None or int >= 0, seeds the row sampling (None: a random seed,
            drawn once and saved with `checkpoint_state()`).
        reset_optimizer_state: bool, zero the optimizer slots of R̃ at each episode.
        merge_on_train_end: bool, merge R̃ into V when `fit` ends (W is unchanged
            either way; merging leaves V = W and R̃ = I).
    """

    def __init__(self, episode_length=DEFAULT_EPISODE_LENGTH, seed=None, reset_optimizer_state=True,
                 merge_on_train_end=False):
        super().__init__()
        self.episode_length = validation.positive_int(episode_length, "episode_length", maximum=validation.MAX_INT32)
        self.seed = validation.integer(seed, "seed", minimum=0, allow_none=True, maximum=validation.MAX_INT32)
        if self.seed is not None and self.seed > _MAX_SEED:
            raise validation.invalid_argument("seed", f"None or an int in [0, {_MAX_SEED}]", seed)
        self.reset_optimizer_state = validation.boolean(reset_optimizer_state, "reset_optimizer_state")
        self.merge_on_train_end = validation.boolean(merge_on_train_end, "merge_on_train_end")
        if self.seed is None:  # drawn once, then saved and restored with the rest of the state
            drawn = int(np.random.SeedSequence().generate_state(1, np.uint32)[0] >> 1)
        else:
            drawn = self.seed
        # int64 as in checkpoints written before; values below 2^31 because JAX (without x64)
        # holds int64 variables as int32.
        self._seed = _counter(drawn, "sopt_seed")
        self._steps_in_episode = _counter(0, "sopt_steps_in_episode")
        self._episodes_completed = _counter(0, "sopt_episodes_completed")

    @property
    def steps_in_episode(self):
        """int, training steps taken in the current episode."""
        return int(ops.convert_to_numpy(self._steps_in_episode))

    @property
    def episodes_completed(self):
        """int, episodes ended so far (over every run resumed from the same checkpoints)."""
        return int(ops.convert_to_numpy(self._episodes_completed))

    def checkpoint_state(self):
        """dict name -> `keras.Variable`: the state to save and restore with the model."""
        return {
            "seed": self._seed,
            "steps_in_episode": self._steps_in_episode,
            "episodes_completed": self._episodes_completed,
        }

    def episode_rng(self, episode):
        """The `numpy.random.Generator` that draws the rows of episode `episode` (1 for the first new episode)."""
        episode = validation.integer(episode, "episode", minimum=0)
        return np.random.default_rng([int(ops.convert_to_numpy(self._seed)), episode])

    def _sopt_layers(self):
        return [layer for layer in opt_lib.opt_layers(self.model) if layer.stochastic_dims is not None]

    def on_train_begin(self, logs=None):
        if not self._sopt_layers():
            raise ValueError("SOPTEpisodes: the model has no OPT layer with `stochastic_dims` set.")

    def on_train_batch_end(self, batch, logs=None):
        self._steps_in_episode.assign_add(1)
        if self.steps_in_episode >= self.episode_length:
            self.new_episode()

    def new_episode(self):
        """Merge, reset and resample every S-OPT layer now."""
        layers = self._sopt_layers()
        rng = self.episode_rng(self.episodes_completed + 1)
        for layer in layers:
            layer.start_episode(rng)
        if self.reset_optimizer_state and getattr(self.model, "optimizer", None) is not None:
            reset_optimizer_slots(self.model.optimizer, [layer.rotation_param for layer in layers])
        self._steps_in_episode.assign(0)
        self._episodes_completed.assign_add(1)

    def on_train_end(self, logs=None):
        if self.merge_on_train_end:
            for layer in self._sopt_layers():
                layer.merge_rotation()

    def get_config(self):
        return {
            "episode_length": self.episode_length,
            "seed": self.seed,
            "reset_optimizer_state": self.reset_optimizer_state,
            "merge_on_train_end": self.merge_on_train_end,
        }
