"""sphere_tf.training.runtime: the BFC CPU allocator switch (each case in a fresh process)."""

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(code, onednn=None):
    """Runs `code` in a fresh Python; `onednn` False/True sets TF_ENABLE_ONEDNN_OPTS.

    With oneDNN on (TensorFlow's default on CPUs with AVX-512 VNNI/BF16 or AMX),
    TensorFlow's CPU allocator is oneDNN's pooling one, so the malloc-allocator
    cases below switch oneDNN off to behave the same on every machine.
    """
    env = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    if onednn is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = "1" if onednn else "0"
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
        """,
        onednn=False,
    )
    assert out["error"] is not None and "before creating any tensor" in out["error"]
    assert out["env"] is None and not out["active"] and out["info"] is None


def test_request_before_the_strategy_makes_the_later_check_pass():
    """The runner's order: ask (environment only), build the strategy (it creates the CPU device), then check.

    Without oneDNN's pooling allocator (off here, as on AVX2 hosts) asking only after the strategy is too late
    (the case above), which failed every run of `sphere_tf_cli.run` on such hosts.
    """
    out = _run(
        """
        import json
        from sphere_tf.training import runtime
        runtime.request_bfc_cpu_allocator()
        import tensorflow as tf
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
        with strategy.scope():
            x = tf.Variable(tf.ones((256, 1024)))
        print(json.dumps({"checked": runtime.use_bfc_cpu_allocator(), "current": runtime.cpu_memory_info()["current"]}))
        """,
        onednn=False,
    )
    assert out["checked"] is True and out["current"] >= 256 * 1024 * 4


def test_default_process_has_no_allocator_statistics():
    out = _run(
        """
        import json
        import tensorflow as tf
        from sphere_tf.training import runtime
        x = tf.ones((4,))
        print(json.dumps({"active": runtime.bfc_cpu_allocator_active()}))
        """,
        onednn=False,
    )
    assert out == {"active": False}


def test_onednn_allocator_pools_from_the_start():
    # With oneDNN requested, the allocator pools exactly when oneDNN is really on
    # (it needs AVX-512 VNNI/BF16 or AMX), and a late call then has nothing to fix.
    out = _run(
        """
        import json
        import tensorflow as tf
        from tensorflow.python.util import _pywrap_util_port
        from sphere_tf.training import runtime
        x = tf.ones((256, 1024))
        onednn = bool(_pywrap_util_port.IsMklEnabled())
        try:
            late = runtime.use_bfc_cpu_allocator()
        except RuntimeError:
            late = False
        info = runtime.cpu_memory_info()
        print(json.dumps({"onednn": onednn, "late": late,
                          "current": info["current"] if info else None}))
        """,
        onednn=True,
    )
    assert out["late"] == out["onednn"]
    if out["onednn"]:
        assert out["current"] >= 256 * 1024 * 4
    else:
        assert out["current"] is None
