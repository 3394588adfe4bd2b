# Kernel selection: the native _microtrain module when it can be imported
# (natmod .mpy or built into the firmware), else the pure-Python kernels with
# identical numerics (docs/numerics.md).
try:
    import _microtrain as K

    NATIVE = True
except (ImportError, ValueError):  # absent, or a .mpy built for another arch
    from microtrain import pykernels as K

    NATIVE = False

_py = None


def py():
    """The pure-Python kernel module (imported on first use only)."""
    global _py
    if _py is None:
        from microtrain import pykernels

        _py = pykernels
    return _py


def f32(name):
    """A float32 kernel: native where the build has an FPU (HAS_FLOAT), else the
    pure-Python one (same numerics; used on Cortex-M0 natmods)."""
    if K.HAS_FLOAT:
        return getattr(K, name)
    return getattr(py(), name)
