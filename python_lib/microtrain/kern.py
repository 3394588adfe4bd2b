# Kernel selection, per function: the native _microtrain module when it can
# be imported (natmod .mpy or built into the firmware), else the pure-Python
# kernel of the same name from microtrain.pyk (identical numerics,
# docs/numerics.md), whose modules are imported one by one on first use.
#
# MICROTRAIN_PURE=1 in the environment (ports with os.getenv, e.g. unix; set
# by `microtrain run --pure`) forces the pure-Python kernels even when
# _microtrain is built into the firmware, where hiding it from sys.path
# cannot work.


def _pure_requested():
    try:
        from os import getenv
    except ImportError:  # boards: no environment
        return False
    v = getenv("MICROTRAIN_PURE")
    return v is not None and v != "" and v != "0"


PURE = _pure_requested()
NATIVE = False
# Why a _microtrain module that is there could not be used (None: absent, or loaded).
NATIVE_ERROR = None
if not PURE:
    try:
        import _microtrain as K

        NATIVE = True
    except ImportError:  # absent: the pure-Python kernels, silently (a supported setup)
        pass
    except ValueError as e:
        # present but refused: a .mpy for another arch or .mpy version, or CircuitPython
        # refusing a MicroPython .mpy ("use CircuitPython mpy-cross"). The package still
        # works (same results, slower): say so once, since the copy was meant to be used.
        NATIVE_ERROR = str(e)
        print("microtrain: _microtrain not loaded (%s): using the pure-Python kernels" % NATIVE_ERROR)


def py(name):
    """The pure-Python kernel `name` (imports only the microtrain.pyk module holding it)."""
    from microtrain.pyk import kernel

    return kernel(name)


if not NATIVE:  # (the class only then: with native kernels it would be heap for nothing)
    class _Py:
        # Stands in for the _microtrain module: attribute `name` is the pure-Python
        # kernel, imported on first access and then cached as an instance attribute.
        HAS_FLOAT = True

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            f = py(name)
            setattr(self, name, f)
            return f

    K = _Py()


def release(mod):
    """Forget the pure-Python kernel module microtrain.pyk.`mod` and the kernels
    cached from it, so the GC can free its code (the .mtm validator is ~40 KB of
    heap when compiled on the board and only `load` and a checkpoint's read-back
    need it; the next use imports it again). Nothing to do with native kernels."""
    if NATIVE:
        return
    import sys

    import microtrain.pyk as pyk

    try:
        K.__dict__, pyk.__dict__  # noqa: B018 (ports without __dict__: keep the module)
    except AttributeError:
        return

    for name, m in pyk.WHERE.items():
        if m == mod and name in K.__dict__:
            # None first: MicroPython's map delete keeps the old value in the
            # freed slot, where the GC would still see the function
            setattr(K, name, None)
            delattr(K, name)
    sys.modules.pop("microtrain.pyk." + mod, None)
    if mod in pyk.__dict__:  # the package's reference to its imported submodule
        setattr(pyk, mod, None)
        delattr(pyk, mod)


def forget(name):
    """Drop the package's submodule `name` (place, plan: code only a plan needs) so the GC
    can free it; the next plan imports it again. (Here, not in model.py: plan.py calls it
    too and must not import model.py.)"""
    import sys

    sys.modules.pop("microtrain." + name, None)
    pkg = sys.modules.get("microtrain")  # not imported: the package imports this module
    try:  # not dir(): it would call the package's __getattr__ for every name
        d = pkg.__dict__
    except AttributeError:
        return
    if name in d:
        setattr(pkg, name, None)  # noqa: B010 (the map keeps a deleted value)
        delattr(pkg, name)


# whether the float32 kernels run on an FPU: native, on a core whose native arch has one
# (sys.implementation._mpy >> 10: armv6, armv6m, armv7m, armv7em (no FPU), xtensa (lx106)
# and rv32imc compute floats in software). The Trainer's batch-1 momentum mode (no gradient
# sums) costs a second float pass per update: cheap on an FPU, dear in software float
# (Cortex-M0)
try:
    from sys import implementation as _impl

    _ARCH = getattr(_impl, "_mpy", 0) >> 10
    del _impl  # (not kept: an entry of this module's globals)
except ImportError:
    _ARCH = 0
FAST_FLOAT = NATIVE and K.HAS_FLOAT and _ARCH not in (3, 4, 5, 6, 9, 11)


def f32(name):
    """A float32 kernel: native where the build has an FPU (HAS_FLOAT), else the
    pure-Python one (same numerics; used on Cortex-M0 natmods): only its module
    (with the helpers it imports) is loaded."""
    if NATIVE and K.HAS_FLOAT:
        return getattr(K, name)
    return py(name)
