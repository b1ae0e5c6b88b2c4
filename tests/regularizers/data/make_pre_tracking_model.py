"""Writes pre_tracking_regularizers.keras/.npz with the regularizer code of main at 9c64df5 (before
`track_state`); kept to show how the committed file was made. Run from a checkout of that commit:

    KERAS_BACKEND=tensorflow python tests/regularizers/data/make_pre_tracking_model.py
"""

import os

import keras
import numpy as np

from sphere_tf import regularizers

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    keras.utils.set_random_seed(0)
    mhe = regularizers.MHE(num_samples=3, seed=3)
    rp = regularizers.CoMHE(projection="random", projection_dim=2, num_projections=2, seed=5)
    ap = regularizers.CoMHE(projection="angle_preserving", projection_dim=2, seed=7)
    inputs = keras.Input((4,))
    h = keras.layers.Dense(6, kernel_regularizer=mhe, name="mhe_dense")(inputs)
    h = keras.layers.Dense(6, kernel_regularizer=rp, name="rp_dense")(h)
    outputs = keras.layers.Dense(5, kernel_regularizer=ap, name="ap_dense")(h)
    model = keras.Model(inputs, outputs)
    for _ in range(3):  # three loss collections: counters at 3, P after three own steps
        model.losses
    x = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    model.save(os.path.join(HERE, "pre_tracking_regularizers.keras"))
    np.savez(
        os.path.join(HERE, "pre_tracking_regularizers.npz"),
        x=x,
        y=keras.ops.convert_to_numpy(model(x)),
        mhe_step=mhe.get_config()["step"],
        rp_step=rp.get_config()["step"],
        ap_projection=np.asarray(ap.get_config()["projection_state"]["ap_dense/kernel"], np.float32),
    )


if __name__ == "__main__":
    main()
