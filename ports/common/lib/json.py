# Minimal `json` for the project's own ports (ports/qemu, ports/host), whose
# core-only MicroPython tree has no extmod/modjson.c. Enough for microtrain's
# trainer log (dumps) and the test runners' configs (load/loads): objects,
# arrays, strings, numbers, true/false/null.

_ESC = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_WS = " \t\r\n"


def _str(s, i):
    out = []
    start = i
    while True:
        c = s[i]
        if c == '"':
            out.append(s[start:i])
            return "".join(out), i + 1
        if c == "\\":
            out.append(s[start:i])
            e = s[i + 1]
            if e == "u":
                out.append(chr(int(s[i + 2:i + 6], 16)))
                i += 6
            else:
                out.append(_ESC[e])
                i += 2
            start = i
        else:
            i += 1


def _val(s, i):
    while s[i] in _WS:
        i += 1
    c = s[i]
    if c == "{":
        d = {}
        i += 1
        while True:
            while s[i] in _WS:
                i += 1
            if s[i] == "}":
                return d, i + 1
            if s[i] == ",":
                i += 1
                continue
            k, i = _str(s, s.index('"', i) + 1)
            i = s.index(":", i) + 1
            d[k], i = _val(s, i)
    if c == "[":
        a = []
        i += 1
        while True:
            while s[i] in _WS:
                i += 1
            if s[i] == "]":
                return a, i + 1
            if s[i] == ",":
                i += 1
                continue
            v, i = _val(s, i)
            a.append(v)
    if c == '"':
        return _str(s, i + 1)
    for word, v in (("true", True), ("false", False), ("null", None)):
        if s.startswith(word, i):
            return v, i + len(word)
    j = i
    while j < len(s) and s[j] in "+-0123456789.eE":
        j += 1
    t = s[i:j]
    if not t:
        raise ValueError("json: syntax error at " + str(i))
    return (float(t) if ("." in t or "e" in t or "E" in t) else int(t)), j


def loads(s):
    if isinstance(s, (bytes, bytearray)):
        s = s.decode()
    v, i = _val(s, 0)
    while i < len(s) and s[i] in _WS:
        i += 1
    if i != len(s):
        raise ValueError("json: extra data at " + str(i))
    return v


def load(f):
    return loads(f.read())


def _qstr(s):
    out = ['"']
    for c in s:
        o = ord(c)
        if c == '"' or c == "\\":
            out.append("\\" + c)
        elif o < 32:
            out.append(f"\\u{o:04x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


# Double-precision builds: the core's repr(float) is not exact in the last digit, so a
# float that must read back the same (a trainer log against its dump) is written with 17
# significant digits computed exactly from its binary value, which always round-trips.
_DOUBLE = 1.0 + 2.0 ** -40 != 1.0


def _float(x):
    if not _DOUBLE or x == 0 or x != x or x - x != 0:  # single floats, zero, nan, inf
        return repr(x)
    from math import frexp

    m, e = frexp(x)
    n = int(m * 9007199254740992)  # 2**53: x == n * 2**(e - 53) exactly
    e -= 53
    sign = "-" if n < 0 else ""
    n = abs(n)
    num, den = (n << e, 1) if e >= 0 else (n, 1 << -e)
    k = 17 - (len(str(num)) - len(str(den)))  # 10**16 <= x * 10**k < 10**17, within one
    while True:
        a, b = (num * 10**k, den) if k >= 0 else (num, den * 10**-k)
        d = (2 * a + b) // (2 * b)  # round to nearest
        if d >= 10**17:
            k -= 1
        elif d < 10**16:
            k += 1
        else:
            break
    t = str(d)
    return sign + t[0] + "." + (t[1:].rstrip("0") or "0") + "e" + str(16 - k)


def dumps(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return _qstr(v)
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, int):
        return repr(v)
    if isinstance(v, dict):
        return "{" + ", ".join(_qstr(str(k)) + ": " + dumps(x) for k, x in v.items()) + "}"
    return "[" + ", ".join(dumps(x) for x in v) + "]"


def dump(v, f):
    f.write(dumps(v))
