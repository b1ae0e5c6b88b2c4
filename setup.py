"""sphere_tf: deep learning on the hypersphere for Keras 3 (TensorFlow, JAX and PyTorch backends)."""

import setuptools

setuptools.setup(
    name="sphere_tf",
    version="0.1.0",
    description=(
        "SphereNet, DCNet, angular-margin losses, MHE/CoMHE, OPT and ConvNorm "
        "for Keras 3 / TensorFlow 2."
    ),
    python_requires=">=3.11,<3.12",
    # The C++ kernel sources sphere_tf compiles on first use (sphere_tf/backends/tensorflow/kernels/build.py).
    package_data={"sphere_tf.backends.tensorflow.kernels": ["*.cc"]},
    packages=setuptools.find_packages(include=["sphere_tf", "sphere_tf.*", "trainers", "configs", "configs.*"]),
    # The core (layers, losses, regularizers, models, ops, optimizers, callbacks) needs Keras alone and runs on
    # its TensorFlow, JAX and PyTorch backends; install the backend of your choice (the extras below, or your
    # own JAX/PyTorch GPU build). The runner reads its data with Grain, decodes image files with Pillow and
    # writes TensorBoard scalars with tensorboardX on every backend (none of them needs TensorFlow). The TF
    # Serving export, the tf.data pipeline (the TensorFlow backend's default), tensorflow-datasets folders, face
    # evaluation and the cleverhans attacks need TensorFlow: the `tensorflow` extra.
    install_requires=[
        "keras>=3.12,<4",
        "absl-py",
        "ml_collections",
        "numpy",
        "grain",
        "tensorboardX",
        "pillow",
    ],
    extras_require={
        "tensorflow": [
            "tensorflow-cpu==2.21.*",
            # TensorBoard summaries (the tensorflow-cpu 2.21 wheel no longer pulls it in).
            "tensorboard",
            # tensorflow-datasets imports importlib_resources without declaring it.
            "tensorflow-datasets",
            "importlib_resources",
            "cleverhans==4.0.0",
        ],
        # Not listed: tensorflow-serving-api==2.21.* (the TF Serving protos of sphere_tf.export). Its metadata
        # requires the full `tensorflow` wheel, which would replace tensorflow-cpu; scripts/setup.sh installs it
        # with `pip install --no-deps` (its real needs, grpcio and protobuf, come with tensorflow-cpu). README,
        # "Serving".
        # GPU hosts: the full wheel (pip install -e .[gpu] then uninstall tensorflow-cpu).
        "gpu": ["tensorflow[and-cuda]==2.21.*"],
        "test": ["pytest", "pytest-xdist", "hypothesis", "matplotlib", "foolbox>=3.3,<4",
                 "tf2onnx>=1.17", "onnxruntime>=1.20", "jax[cpu]"],
        # The JAX backend on CPU (GPU: install jax[cuda12] or jax[cuda13] instead); the runner needs no TensorFlow.
        "jax": ["jax[cpu]"],
        # The PyTorch backend (the CPU or CUDA wheel your index serves); the runner needs no TensorFlow.
        "torch": ["torch"],
        # Optional export formats (sphere_tf.export.export_onnx; TFLite needs TensorFlow only).
        "export": ["tf2onnx>=1.17", "onnxruntime>=1.20"],
        "examples": ["matplotlib"],
        # DeepFool strength (sphere_tf.adversarial.deepfool_strength) and the adversarial runner's plot.
        "adversarial": ["foolbox>=3.3,<4", "matplotlib"],
    },
)
