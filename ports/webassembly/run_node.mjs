// The lab's own WebAssembly build under Node, as the page runs it (mtlab.mjs):
//   node run_node.mjs BUILD_DIR SITE_DIR HEAP_BYTES < script.py
// writes SITE_DIR/manifest.json's files into the interpreter's file system
// (SITE_DIR may be "-": none), runs the script from standard input and exits 1
// if it raised. tests/firmware/test_wasm.py compares its output with the host's.
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";

const [build, site, heap] = process.argv.slice(2);
// mtlab.mjs imports ./micropython.mjs: the build's copy sits beside it in the build folder
fs.copyFileSync(new URL("mtlab.mjs", import.meta.url), path.join(build, "mtlab.mjs"));
const { loadMicroPython } = await import(pathToFileURL(path.join(build, "mtlab.mjs")).href);
const mp = await loadMicroPython({
  heapsize: Number(heap),
  wasmBinary: fs.readFileSync(path.join(build, "micropython.wasm")),
  stdout: (s) => process.stdout.write(s + "\n"),
  stderr: (s) => process.stderr.write(s + "\n"),
});
if (site !== "-") {
  for (const f of JSON.parse(fs.readFileSync(path.join(site, "manifest.json"))).files) {
    const parts = f.split("/");
    for (let i = 1; i < parts.length; i++) {
      const dir = "/" + parts.slice(0, i).join("/");
      if (!mp.FS.analyzePath(dir).exists) mp.FS.mkdir(dir);
    }
    mp.FS.writeFile("/" + f, fs.readFileSync(path.join(site, "fs", f)));
  }
}
try {
  mp.runPython(fs.readFileSync(0, "utf8"));
} catch (e) {
  process.exit(1);
}
