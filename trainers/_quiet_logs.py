"""Quiets TensorFlow's and absl's INFO lines for a trainer run, before TensorFlow is imported.

TensorFlow reads its C++ log level once, at import, and `import sphere_tf`
imports TensorFlow, so `sphere_tf.training.progress` is loaded here from its
file (found without importing the package) and `quiet_tensorflow_logs` runs
first. absl's `--verbosity` (`-v`) brings the lines back: 0 for INFO, n >= 1
for TensorFlow's VLOG(n) too.
"""

import importlib.util
import os


def quiet_tensorflow_logs():
    """`progress.quiet_tensorflow_logs()` with the verbosity of `sys.argv`; returns it."""
    package = importlib.util.find_spec("sphere_tf").submodule_search_locations[0]
    spec = importlib.util.spec_from_file_location(
        "sphere_tf_progress_early", os.path.join(package, "training", "progress.py")
    )
    progress = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(progress)
    return progress.quiet_tensorflow_logs()
