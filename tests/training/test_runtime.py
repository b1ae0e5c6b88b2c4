"""sphere_tf.training.runtime: the BFC CPU allocator switch (each case in a fresh process)."""

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(code):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_bfc_allocator_is_active_and_counts_tensor_bytes():
    out = _run(
        """
        import json
        from sphere_tf.training import runtime
        runtime.use_bfc_cpu_allocator()
        import tensorflow as tf
        x = tf.ones((256, 1024))  # 1 MiB
        info = runtime.cpu_memory_info()
        print(json.dumps({"active": runtime.bfc_cpu_allocator_active(),
                          "current": info["current"], "peak": info["peak"]}))
        """
    )
    assert out["active"]
    assert out["current"] >= 256 * 1024 * 4 and out["peak"] >= out["current"]


def test_too_late_raises_and_restores_the_environment():
    out = _run(
        """
        import json, os
        import tensorflow as tf
        from sphere_tf.training import runtime
        x = tf.ones((4,)) + 1.0  # the default CPU allocator now exists
        try:
            runtime.use_bfc_cpu_allocator()
            error = None
        except RuntimeError as e:
            error = str(e)
        print(json.dumps({"error": error, "env": os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"),
                          "active": runtime.bfc_cpu_allocator_active(),
                          "info": runtime.cpu_memory_info()}))
        """
    )
    assert out["error"] is not None and "before creating any tensor" in out["error"]
    assert out["env"] is None and not out["active"] and out["info"] is None


def test_default_process_has_no_allocator_statistics():
    out = _run(
        """
        import json
        import tensorflow as tf
        from sphere_tf.training import runtime
        x = tf.ones((4,))
        print(json.dumps({"active": runtime.bfc_cpu_allocator_active()}))
        """
    )
    assert out == {"active": False}
