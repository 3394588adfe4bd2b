// The lab page: a MicroPython WebAssembly build (the project's own with the C
// kernels, or the npm package: vendor/loader.mjs, chosen by `microtrain lab`)
// with the microtrain package, a model and a data set in its file system
// (listed in manifest.json), driven step by step from the buttons; every step
// runs Python code on one interpreter, which the code cell shares.
import { loadMicroPython } from "./vendor/loader.mjs";
import { setupLessons } from "./lessons.js";

const $ = (id) => document.getElementById(id);
const out = $("out");
const losses = [];  // {step, hex, loss, acc}
let mp = null;
let busy = false;

function print(line) {
  out.textContent += line + "\n";
  out.scrollTop = out.scrollHeight;
}

function setStatus(s) {
  $("status").textContent = s;
}

async function putFiles() {
  const manifest = await (await fetch("manifest.json")).json();
  for (const path of manifest.files) {
    const parts = path.split("/");
    for (let i = 1; i < parts.length; i++) {
      const dir = "/" + parts.slice(0, i).join("/");
      if (!mp.FS.analyzePath(dir).exists) mp.FS.mkdir(dir);
    }
    const data = new Uint8Array(await (await fetch("fs/" + path)).arrayBuffer());
    mp.FS.writeFile("/" + path, data);
  }
  return manifest;
}

function run(code) {
  // Python errors print their traceback on stderr (shown in the output);
  // the page goes on so that the learner can fix the code and rerun it.
  try {
    return mp.runPython(code);
  } catch (e) {
    print(String(e));
    return null;
  }
}

// one frame between steps so the plot and the text update while training
const frame = () => new Promise((r) => setTimeout(r, 0));

function plot() {
  const c = $("plot");
  const g = c.getContext("2d");
  g.clearRect(0, 0, c.width, c.height);
  if (!losses.length) return;
  const n = Math.max(losses.length, 10);
  const top = 1.1 * Math.max(...losses.map((p) => p.loss), 1e-9);
  const x = (i) => 40 + (i / (n - 1)) * (c.width - 80);
  const line = (color, y) => {
    g.strokeStyle = color;
    g.beginPath();
    losses.forEach((p, i) => (i ? g.lineTo(x(i), y(p)) : g.moveTo(x(i), y(p))));
    g.stroke();
  };
  line("#c0392b", (p) => c.height - 20 - (p.loss / top) * (c.height - 30));
  line("#2471a3", (p) => c.height - 20 - p.acc * (c.height - 30));
  // axes: steps below, loss on the left, accuracy on the right
  g.strokeStyle = "#333";
  g.strokeRect(40, 10, c.width - 80, c.height - 30);
  g.fillStyle = "#333";
  g.font = "11px sans-serif";
  g.fillText("0", 36, c.height - 6);
  g.fillText(String(n), c.width - 48, c.height - 6);
  g.fillText("step", c.width / 2, c.height - 6);
  g.fillStyle = "#c0392b";
  g.fillText(top.toFixed(2), 2, 20);
  g.fillText("0", 28, c.height - 20);
  g.fillStyle = "#2471a3";
  g.fillText("1.0", c.width - 36, 20);
  g.fillText("0", c.width - 36, c.height - 20);
  g.fillStyle = "#333";
  g.fillText("steps: " + losses.length + "  loss: " + losses[losses.length - 1].loss.toFixed(4) +
             "  running acc: " + losses[losses.length - 1].acc.toFixed(3), 46, 24);
}

async function train(steps) {
  busy = true;
  losses.length = 0;
  $("losses").textContent = "";
  run("L.begin(lr=0.005)");
  const L = mp.pyimport("lab_session");  // a proxy: L.step() returns its Python str
  const t0 = performance.now();
  let inStep = 0;  // ms spent in the steps themselves (Python and kernels)
  let shown = t0;
  for (let i = 0; i < steps; i++) {
    let r;
    try {
      const ts = performance.now();
      r = L.step();
      inStep += performance.now() - ts;
    } catch (e) {
      print(String(e));
      break;
    }
    const [step, hex, loss, acc] = r.split(" ");
    losses.push({ step: +step, hex, loss: +loss, acc: +acc });
    const li = document.createElement("li");
    li.textContent = r;
    $("losses").appendChild(li);
    $("train-state").textContent = "step " + step + "/" + steps;
    // the plot and a frame every ~30 ms, not every step: a step can take well under a frame
    if (performance.now() - shown > 30) {
      plot();
      await frame();
      shown = performance.now();
    }
  }
  plot();
  const s = (performance.now() - t0) / 1000;
  print("trained " + losses.length + " steps in " + s.toFixed(2) + " s (" + (1000 * s / losses.length).toFixed(2) +
        " ms per step)");
  document.body.dataset.trainms = String(1000 * s);
  document.body.dataset.stepms = String(inStep);
  $("train-state").textContent = "done: " + losses.length + " steps";
  document.body.dataset.trained = String(losses.length);
  busy = false;
}

function save() {
  run('L.save("digits_trained.mtm")');
  const data = mp.FS.readFile("/digits_trained.mtm");
  const a = $("download");
  a.href = URL.createObjectURL(new Blob([data], { type: "application/octet-stream" }));
  a.hidden = false;
  document.body.dataset.saved = String(data.length);
}

async function main() {
  const t0 = performance.now();
  mp = await loadMicroPython({ heapsize: 8 * 1024 * 1024, stdout: print, stderr: print });
  const manifest = await putFiles();
  run("import sys\nsys.path.insert(0, '/lib')\nimport lab_session as L");
  const version = mp.native ? mp.evalPython("__import__('sys').version") : mp.pyimport("sys").version;
  setStatus("Ready: MicroPython " + version + ", " + manifest.files.length + " files in its file system (" +
            ((performance.now() - t0) / 1000).toFixed(1) + " s). Kernels: " +
            (mp.native ? "C, built into the WebAssembly build." : "pure Python."));
  const on = (id, f) => ($(id).onclick = async () => {
    if (busy) return;
    await f();
  });
  on("b-load", () => run("L.load()"));
  on("b-predict", () => run("L.predict(20)"));
  on("b-train", () => train(parseInt($("steps").value, 10)));
  on("b-save", save);
  on("b-run", () => run($("cell").value));
  window.lab = setupLessons(mp, run, print);
  for (const b of document.querySelectorAll("button")) b.disabled = false;
  document.body.dataset.ready = "1";
}

main().catch((e) => {
  setStatus("Failed: " + e);
  document.body.dataset.error = String(e);
});
