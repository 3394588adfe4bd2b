// loadMicroPython for the lab's own WebAssembly build (main.c, Makefile): the
// part of the npm package's interface that lab.js and lessons.js use (FS,
// runPython, pyimport with calls of module functions), over main.c's three
// exported functions. `native` tells the page that the C kernels are built in.
import createMicroPython from "./micropython.mjs";

// A JavaScript argument as a Python literal (the lab passes strings and numbers).
function pyLiteral(v) {
  if (typeof v === "string") return JSON.stringify(v);
  if (typeof v === "number") return Number.isFinite(v) ? String(v) : `float('${v}')`;
  if (typeof v === "boolean") return v ? "True" : "False";
  if (v === null || v === undefined) return "None";
  throw new TypeError("mtlab: cannot pass " + typeof v + " to Python");
}

export async function loadMicroPython({ heapsize = 8 * 1024 * 1024, stdout = console.log, stderr = console.error,
  wasmBinary } = {}) {
  const opts = { print: stdout, printErr: stderr };
  if (wasmBinary) opts.wasmBinary = wasmBinary;  // (Node: no fetch of a file path)
  const M = await createMicroPython(opts);
  if (M.ccall("mtw_init", "number", ["number"], [heapsize])) throw new Error("mtlab: no memory for the heap");
  const evalPython = (expr) => {
    const r = M.ccall("mtw_eval", "string", ["string"], [expr]);
    const tag = r[0], rest = r.slice(1);
    if (tag === "s") return rest;
    if (tag === "b") return rest === "1";
    if (tag === "n") return Number(rest);
    if (tag === "0") return null;
    throw new Error("Python: " + expr + " raised (traceback above)");
  };
  const mp = {
    FS: M.FS,
    native: true,
    runPython(code) {
      if (M.ccall("mtw_exec", "number", ["string"], [code])) throw new Error("Python: the code raised (traceback above)");
      return null;
    },
    evalPython,
    // a module whose functions are called by name: m.f(a, b) is f(a, b) in Python
    pyimport(name) {
      const mod = `__import__(${JSON.stringify(name)})`;
      evalPython(mod + " and None");
      return new Proxy({}, {
        get(_, attr) {
          if (typeof attr !== "string" || attr === "then") return undefined;
          return (...args) => evalPython(`${mod}.${attr}(${args.map(pyLiteral).join(", ")})`);
        },
      });
    },
  };
  return mp;
}
