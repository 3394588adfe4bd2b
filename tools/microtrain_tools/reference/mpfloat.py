"""Python floats as a MicroPython build has them: double (the host unix port) or float32.

``train_ref.RefTrainer(floats="float32")`` computes every Python-float value of the device
with the helpers here, so that it reproduces a single-precision MicroPython (the boards and
the float32 host twin, ports/host) bit for bit:

- a value is an ``np.float32`` scalar (or a float32 array, element-wise); numpy rounds each
  binary operation to float32, as ``mp_obj_float_binary_op`` does, and converts a Python int
  operand to float32 first, as MicroPython does;
- ``exp`` / ``log`` / ``pow`` / ``cos`` are ports/common/mtmath.c's ``expf`` / ``logf`` /
  ``powf`` / ``cosf``, which both the boards and the twin link: the same double operations in
  the same order, rounded once to float32 (Python floats are IEEE doubles, so the double steps
  are the C ones);
- ``sqrt`` is ``sqrtf`` (correctly rounded; a double square root rounded to float32 is too);
- ``parse`` is MicroPython's ``mp_parse_num_decimal`` in single precision (float literals of
  the device code, as the .mpy stores them, and ``float()`` of the JSON values): digits are
  accumulated in float32 and scaled by ``powf(10, n)``, which is not always the correctly
  rounded value.

``Floats(single=False)`` gives the double semantics (plain Python floats, the C library's
``math``), which train_ref uses by default.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["DOUBLE", "FLOAT32", "Floats", "cosf", "expf", "logf", "parse_f32", "powf", "sinf"]

# ports/common/mtmath.c's constants (the same decimal text: the same doubles)
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e00
_SQRT_HALF = 7.07106781186547524401e-01
_PIO2_1 = 1.57079632673412561417e00
_PIO2_2 = 6.07710050630396597660e-11
_PIO2_3 = 2.02226624879595063154e-21
_INV_PIO2 = 6.36619772367581382433e-01
_SIN_COEF = (1.0, -1.0 / 6.0, 1.0 / 120.0, -1.0 / 5040.0, 1.0 / 362880.0, -1.0 / 39916800.0,
             1.0 / 6227020800.0, -1.0 / 1307674368000.0, 1.0 / 355687428096000.0,
             -1.0 / 121645100408832000.0, 1.0 / 51090942171709440000.0)
_COS_COEF = (1.0, -1.0 / 2.0, 1.0 / 24.0, -1.0 / 720.0, 1.0 / 40320.0, -1.0 / 3628800.0,
             1.0 / 479001600.0, -1.0 / 87178291200.0, 1.0 / 20922789888000.0,
             -1.0 / 6402373705728000.0, 1.0 / 2432902008176640000.0)
_EXP_COEF = (1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
             1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0)


def _round_int(x: float) -> int:
    return int(x - 0.5) if x < 0.0 else int(x + 0.5)  # C (int) truncates, as int() does


def _mt_exp(x: float) -> float:
    k = _round_int(x * _INV_LN2)
    r = (x - k * _LN2_HI) - k * _LN2_LO
    p = 1.0 / 87178291200.0
    for c in _EXP_COEF:
        p = p * r + c
    return math.ldexp(p, k)


def _mt_log(x: float) -> float:
    m, e = math.frexp(x)
    if m < _SQRT_HALF:
        m *= 2.0
        e -= 1
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    q = 1.0 / 23.0
    for n in range(21, 0, -2):
        q = q * z + 1.0 / float(n)
    return e * _LN2_HI + (2.0 * s * q + e * _LN2_LO)


def expf(x: float) -> np.float32:
    """mtmath.c ``expf``."""
    d = float(np.float32(x))
    if math.isnan(d):
        return np.float32(d)
    if d > 90.0:
        return np.float32(np.inf)
    if d < -110.0:
        return np.float32(0.0)
    return np.float32(_mt_exp(d))


def logf(x: float) -> np.float32:
    """mtmath.c ``logf`` (MicroPython's math.log raises for x <= 0 before calling it)."""
    d = float(np.float32(x))
    if math.isnan(d) or d < 0.0:
        return np.float32(np.nan)
    if d == 0.0:
        return np.float32(-np.inf)
    if math.isinf(d):
        return np.float32(d)
    return np.float32(_mt_log(d))


def _poly(r: float, coef: tuple[float, ...]) -> float:
    z, p, t = r * r, 0.0, 1.0
    for c in coef:
        p += c * t
        t *= z
    return p


def _sincos(x: float, cos: int) -> np.float32:
    d = float(np.float32(x))
    if math.isnan(d) or math.isinf(d):
        return np.float32(np.nan)
    if d > 1.0e9 or d < -1.0e9:
        d = math.fmod(d, 2.0 * 3.14159265358979311600e00)
    n = float(_round_int(d * _INV_PIO2))
    r = ((d - n * _PIO2_1) - n * _PIO2_2) - n * _PIO2_3
    q = ((int(n) & 3) + cos) & 3
    v = _poly(r, _COS_COEF) if q & 1 else r * _poly(r, _SIN_COEF)
    return np.float32(-v if q & 2 else v)


def sinf(x: float) -> np.float32:
    """mtmath.c ``sinf``."""
    return _sincos(x, 0)


def cosf(x: float) -> np.float32:
    """mtmath.c ``cosf`` (the cosine learning-rate schedule)."""
    return _sincos(x, 1)


def _int_kind(y: float) -> int:
    if math.floor(y) != y:
        return 0
    return 1 if math.fmod(y, 2.0) == 0.0 else 2


def powf(x: float, y: float) -> np.float32:
    """mtmath.c ``powf`` (float ``**`` and the decimal parser's powers of ten)."""
    dx, dy = float(np.float32(x)), float(np.float32(y))
    if dy == 0.0 or dx == 1.0:
        return np.float32(1.0)
    if math.isnan(dx) or math.isnan(dy):
        return np.float32(np.nan)
    if math.isinf(dy):
        ax = abs(dx)
        if ax == 1.0:
            return np.float32(1.0)
        return np.float32(0.0 if (ax < 1.0) == (dy > 0.0) else np.inf)
    yk = _int_kind(dy)
    if dx == 0.0 or math.isinf(dx):
        mag = 0.0 if (dx == 0.0) == (dy > 0.0) else math.inf
        return np.float32(math.copysign(mag, dx) if yk == 2 else mag)
    sign = 1.0
    if dx < 0.0:
        if yk == 0:
            return np.float32(np.nan)
        sign = -1.0 if yk == 2 else 1.0
        dx = -dx
    t = dy * _mt_log(dx)
    if t > 90.0:
        return np.float32(sign * math.inf)
    if t < -110.0:
        return np.float32(sign * 0.0)
    return np.float32(sign * _mt_exp(t))


# py/parsenum.c, MICROPY_FLOAT_IMPL_FLOAT
_DEC_VAL_MAX = np.float32(1e20)
_SMALL_NORMAL_VAL = np.float32(1e-37)
_SMALL_NORMAL_EXP = -37
_EXACT_POWER_OF_10 = 9


def parse_f32(text: str) -> np.float32:
    """``float(text)`` on a single-precision MicroPython (``mp_parse_num_decimal``); plain
    decimal numbers only (no inf / nan / complex)."""
    s = text.strip().replace("_", "")
    neg = s.startswith("-")
    if s[:1] in "+-":
        s = s[1:]
    mant, _, ex = s.lower().partition("e")
    intg, _, frac = mant.partition(".")
    if not (intg + frac).isdigit() or (ex and not ex.lstrip("+-").isdigit()):
        raise ValueError(f"parse_f32: not a decimal number: {text!r}")
    dec = np.float32(0.0)
    exp_extra = 0
    zeros = [0, 0]  # deferred zeros of the integer / fraction part

    def accept(dig: int, in_frac: bool) -> None:
        nonlocal dec, exp_extra
        if dec < _DEC_VAL_MAX:
            dec = np.float32(np.float32(10.0) * dec) + np.float32(dig)
            if in_frac:
                exp_extra -= 1
        elif not in_frac:
            exp_extra += 1

    for part, in_frac in ((intg, False), (frac, True)):
        for ch in part:
            dig = ord(ch) - 48
            if dig == 0 or dec >= _DEC_VAL_MAX:
                zeros[in_frac] += 1
            else:
                while zeros[0]:
                    accept(0, False)
                    zeros[0] -= 1
                while zeros[1]:
                    accept(0, True)
                    zeros[1] -= 1
                accept(dig, in_frac)
    exp_val = int(ex) if ex else 0
    exp_val += exp_extra + zeros[0]
    if exp_val < _SMALL_NORMAL_EXP:
        exp_val -= _SMALL_NORMAL_EXP
        dec = dec * _SMALL_NORMAL_VAL
    if -_EXACT_POWER_OF_10 <= exp_val < 0:
        dec = dec / powf(10.0, float(-exp_val))
    else:
        dec = dec * powf(10.0, float(exp_val))
    return np.float32(-dec) if neg else np.float32(dec)


class Floats:
    """The platform float: ``single=False`` Python's double, ``single=True`` float32."""

    def __init__(self, single: bool) -> None:
        self.single = single
        self.dtype: type[np.floating] = np.float32 if single else np.float64
        self.name = "float32" if single else "double"
        # math.pi: mpy-cross folds it into the literal 3.141592653589793, which parses to float32(pi)
        self.pi: float = np.float32(math.pi) if single else math.pi  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Floats({self.name})"

    def __call__(self, v: float) -> float:
        """A value that is already a platform float (a float32 scale, a float from an array('f'))."""
        return np.float32(v) if self.single else float(v)  # type: ignore[return-value]

    def lit(self, text: str) -> float:
        """A float literal of the device code, as compiled (the text mpy-cross stores)."""
        return parse_f32(text) if self.single else float(text)  # type: ignore[return-value]

    def param(self, v: float) -> float:
        """A hyperparameter given to the device as decimal text (its shortest repr, json.dumps)."""
        return self.lit(repr(float(v)))

    def arr(self, v: ArrayLike) -> NDArray[np.floating]:
        return np.asarray(v, dtype=self.dtype)

    def exp(self, x: float) -> float:
        return expf(x) if self.single else math.exp(x)  # type: ignore[return-value]

    def log(self, x: float) -> float:
        return logf(x) if self.single else math.log(x)  # type: ignore[return-value]

    def pow(self, x: float, y: float) -> float:
        return powf(x, y) if self.single else math.pow(x, y)  # type: ignore[return-value]

    def cos(self, x: float) -> float:
        return cosf(x) if self.single else math.cos(x)  # type: ignore[return-value]

    def sqrt(self, x: float) -> float:
        return np.float32(math.sqrt(float(x))) if self.single else math.sqrt(x)  # type: ignore[return-value]

    def ldexp(self, x: float, n: int) -> float:
        return np.float32(math.ldexp(float(x), n)) if self.single else math.ldexp(x, n)  # type: ignore[return-value]


DOUBLE = Floats(False)
FLOAT32 = Floats(True)
