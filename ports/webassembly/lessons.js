// The five lessons of the page: each runs its code cell on the interpreter, reads the
// lesson's result (lab_common.page_json) and draws it; its check calls the lesson's own
// check() in Python. The lesson logic lives in examples/lab_lessons (the same files a
// board runs); this file only draws.
const $ = (id) => document.getElementById(id);
const INK = "#111";

// a value in [-1, 1] as blue (negative), white, red (positive)
function diverging(v) {
  const t = Math.max(-1, Math.min(1, v));
  const a = Math.round(255 * (1 - Math.abs(t)));
  return t < 0 ? `rgb(${a},${a},255)` : `rgb(255,${a},${a})`;
}

// int8 input pixels (-128 paper .. 127 ink) as grey squares
function digit(g, px, x0, y0, cell) {
  for (let i = 0; i < 64; i++) {
    const v = Math.round(255 - (px[i] + 128));
    g.fillStyle = `rgb(${v},${v},${v})`;
    g.fillRect(x0 + (i % 8) * cell, y0 + Math.floor(i / 8) * cell, cell, cell);
  }
  g.strokeStyle = "#888";
  g.strokeRect(x0, y0, 8 * cell, 8 * cell);
}

function text(g, s, x, y, color = INK, font = "13px sans-serif") {
  g.fillStyle = color;
  g.font = font;
  g.fillText(s, x, y);
}

function clear(c) {
  const g = c.getContext("2d");
  g.fillStyle = "#fff";
  g.fillRect(0, 0, c.width, c.height);
  return g;
}

function bars(g, vals, x0, y0, w, h, label, hi) {
  // 10 class probabilities, the label's bar green
  g.strokeStyle = "#555";
  g.strokeRect(x0, y0, w, h);
  const bw = w / vals.length;
  vals.forEach((v, i) => {
    g.fillStyle = i === hi ? "#1e7b34" : "#5d6d7e";
    g.fillRect(x0 + i * bw + 2, y0 + h - v * h, bw - 4, v * h);
    text(g, String(i), x0 + i * bw + bw / 2 - 4, y0 + h + 13);
  });
  text(g, label, x0, y0 - 5);
}

const draw = {
  1(r) {
    const g = clear($("cv-1a"));
    const k = r.k, cell = 32;
    const fmax = Math.max(...r.w_float.map(Math.abs));
    text(g, "filters of layer " + r.layer + ": float (left) and int8 (right); red > 0 > blue", 4, 14);
    const grid = (x0, y0, vals, scale, fmt) => {
      vals.forEach((v, i) => {
        const t = v / scale;
        const x = x0 + (i % 3) * cell, y = y0 + Math.floor(i / 3) * cell;
        g.fillStyle = diverging(t);
        g.fillRect(x, y, cell, cell);
        text(g, fmt(v), x + 2, y + cell / 2 + 4, Math.abs(t) > 0.55 ? "#fff" : INK, "10px monospace");
      });
      g.strokeStyle = "#888";
      g.strokeRect(x0, y0, 3 * cell, 3 * cell);
    };
    r.w_scale.forEach((s, c) => {
      const x0 = 6 + (c % 3) * 232, y0 = 24 + Math.floor(c / 3) * 150;
      grid(x0, y0, r.w_float.slice(c * k, c * k + k), fmax, (v) => v.toFixed(2));
      grid(x0 + 3 * cell + 8, y0, r.w_int8.slice(c * k, c * k + k), 127, (v) => String(v));
      if (c === r.ask.channel) {
        g.strokeStyle = "#000";
        g.lineWidth = 3;
        g.strokeRect(x0 + 3 * cell + 8 + (r.ask.index % 3) * cell, y0 + Math.floor(r.ask.index / 3) * cell, cell, cell);
        g.lineWidth = 1;
      }
      text(g, `channel ${c}: scale ${s.toFixed(5)}, zero point 0`, x0, y0 + 3 * cell + 16, INK, "12px sans-serif");
    });
    const h = clear($("cv-1b"));
    text(h, "test digits: float / int8 prediction (label under each, red where wrong)", 4, 14);
    r.digits.forEach((px, i) => {
      const x0 = 4 + i * 34;
      digit(h, px, x0, 22, 4);
      text(h, r.pred_float[i] + "/" + r.pred_int8[i], x0 + 2, 72, r.pred_int8[i] === r.labels[i] ? INK : "#b03a2e");
      text(h, "(" + r.labels[i] + ")", x0 + 2, 88, "#444");
    });
    text(h, `input: scale ${r.in_scale.toFixed(5)}, zero point ${r.in_zp}; float and int8 agree on ${r.agree}/${r.n}`, 4, 112);
    $("sum-1").textContent = `The int8 model and the float network agree on ${r.agree} of ${r.n} digits. Each int8 filter keeps the float filter's pattern: the largest weight becomes ±127.`;
    $("q-1").textContent = `Question: the outlined int8 weight (channel ${r.ask.channel}) is q = ${r.ask.q}. What real value does it stand for?`;
  },
  2(r) {
    const g = clear($("cv-2a"));
    digit(g, r.digit, 8, 24, 14);
    text(g, `training digit ${r.index}, label ${r.label}`, 8, 16);
    bars(g, r.probs_before, 150, 26, 240, 110, `before: predicted ${r.pred_before}, loss ${r.loss.toFixed(3)}`, r.label);
    bars(g, r.probs_after, 430, 26, 240, 110, `after one step: predicted ${r.pred_after}, loss ${r.loss_after.toFixed(3)}`, r.label);
    const h = clear($("cv-2b"));
    const top = Math.max(...r.grad.map(Math.abs)) || 1;
    const cw = Math.min(5, 640 / r.cols);
    text(h, "gradient of the last layer's weights: one row per class, one column per input (red > 0 > blue)", 4, 14);
    for (let row = 0; row < r.rows; row++) {
      text(h, String(row), 4, 32 + row * 15, row === r.label ? "#1e7b34" : INK);
      for (let c = 0; c < r.cols; c++) {
        h.fillStyle = diverging(r.grad[row * r.cols + c] / top);
        h.fillRect(20 + c * cw, 21 + row * 15, cw, 14);
      }
    }
    h.strokeStyle = "#888";
    h.strokeRect(20, 21, r.cols * cw, r.rows * 15);
    text(h, "error of the logits: " + r.err.map((v) => v.toFixed(2)).join("  "), 4, 192);
    $("sum-2").textContent = `Loss ${r.loss.toFixed(3)} before, ${r.loss_after.toFixed(3)} after one step with lr ${r.lr}; the prediction went from ${r.pred_before} to ${r.pred_after} (label ${r.label}).`;
    $("q-2").textContent = "Question: which row (class) of the gradient is negative, the one the update pulls up?";
  },
  3(r) {
    const body = $("tab-3").querySelector("tbody");
    body.textContent = "";
    for (const w of r.rows) {
      const tr = document.createElement("tr");
      for (const v of [w.config, w.mode, w.params, (w.plan_bytes / 1024).toFixed(1) + " KB",
        w.heap_bytes === null ? "—" : (w.heap_bytes / 1024).toFixed(1) + " KB", w.ms_per_step.toFixed(1), w.acc.toFixed(2)]) {
        const td = document.createElement("td");
        td.textContent = String(v);
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
    const g = clear($("cv-3"));
    const top = Math.max(...r.rows.map((w) => w.plan_bytes));
    text(g, "RAM the planner counts for training, KB", 4, 14);
    r.rows.forEach((w, i) => {
      const y = 24 + i * 30;
      text(g, w.config, 4, y + 15);
      g.fillStyle = "#1f4e79";
      g.fillRect(160, y, (w.plan_bytes / top) * 440, 20);
      text(g, (w.plan_bytes / 1024).toFixed(1), 166 + (w.plan_bytes / top) * 440, y + 15);
    });
    const heap = r.rows[0].heap_bytes === null ? " Heap taken: — here, because this port's garbage collector frees only between calls from the page; a board or the unix port measures it." : "";
    $("sum-3").textContent = `The converted model's accuracy was ${r.acc_before.toFixed(2)} on these ${r.n_eval} digits.` + heap;
  },
  4(r) {
    const g = clear($("cv-4"));
    const cw = 18, rh = 9, x0 = 60, y0 = 40;
    let x = x0;
    r.layers.forEach((name, i) => {
      text(g, "layer " + name + " (" + r.widths[i] + ")", x, 30, INK, "12px sans-serif");
      x += r.widths[i] * cw;
    });
    r.heat.forEach((row, s) => {
      if (s % 5 === 0) text(g, "step " + s, 4, y0 + s * rh + 8, INK, "10px sans-serif");
      row.forEach((v, c) => {
        g.fillStyle = v ? "#b03a2e" : "#d5d8dc";
        g.fillRect(x0 + c * cw, y0 + s * rh, cw - 1, rh - 1);
      });
    });
    text(g, "red: channel updated; grey: skipped", 4, 14);
    $("sum-4").textContent = `${r.kept} of ${r.seen} channel updates were kept (${r.policy}). Backward took ${r.bwd_ms.toFixed(0)} ms for these steps; the same steps with every channel: ${r.bwd_ms_dense.toFixed(0)} ms.`;
  },
  5(r) {
    $("cv-5b").height = 46 + Math.max(1, Math.ceil(r.n_held / 17)) * 60;  // room for every held-out drawing
    const g = clear($("cv-5b"));
    text(g, `held-out drawings: accuracy ${(100 * r.acc_before).toFixed(0)} % before, ${(100 * r.acc_after).toFixed(0)} % after training on ${r.n_train} drawings`, 4, 14);
    text(g, "under each: the prediction before → after (green: right, red: wrong)", 4, 30);
    r.held_x.forEach((q, i) => {
      const x0 = 4 + (i % 17) * 40, y0 = 40 + Math.floor(i / 17) * 60;
      digit(g, q, x0, y0, 4);
      const p = r.pred[i];
      text(g, `${r.pred_before[i]}→${p}`, x0, y0 + 46, p === r.labels[i] ? "#1e7b34" : "#b03a2e", "12px sans-serif");
    });
    $("sum-5").textContent = `Accuracy on your ${r.n_held} held-out drawings: ${(100 * r.acc_before).toFixed(0)} % before, ${(100 * r.acc_after).toFixed(0)} % after.`;
  },
};

// the drawing pad of lesson 5: pointer events (mouse, pen, touch) draw round strokes
const lab5 = { train: 0, held: 0, drawn: [], log: [] };

function padSetup(mp, print) {
  const pad = $("pad");
  const g = pad.getContext("2d");
  const wipe = () => { g.fillStyle = "#fff"; g.fillRect(0, 0, pad.width, pad.height); };
  wipe();
  let down = false;
  let last = null;
  // where the pointer is in canvas pixels (the canvas may be shown scaled)
  const at = (e) => {
    const b = pad.getBoundingClientRect();
    return [((e.clientX - b.left) * pad.width) / b.width, ((e.clientY - b.top) * pad.height) / b.height];
  };
  pad.addEventListener("pointerdown", (e) => {
    down = true;
    last = at(e);
    pad.setPointerCapture?.(e.pointerId);
    e.preventDefault();
  });
  pad.addEventListener("pointermove", (e) => {
    if (!down) return;
    g.strokeStyle = "#000";
    g.lineCap = "round";
    g.lineWidth = +$("pen-5").value;
    g.beginPath();
    const p = at(e);
    g.moveTo(last[0], last[1]);
    g.lineTo(p[0], p[1]);
    g.stroke();
    last = p;
    e.preventDefault();
  });
  const up = () => { down = false; };
  pad.addEventListener("pointerup", up);
  pad.addEventListener("pointerleave", up);
  // the ink's bounding box, as a square, shrunk to 8x8: the share of ink in each cell
  const grid = () => {
    const d = g.getImageData(0, 0, pad.width, pad.height).data;
    const W = pad.width, H = pad.height;
    let x0 = W, y0 = H, x1 = -1, y1 = -1;
    for (let y = 0; y < H; y++) for (let x = 0; x < W; x++) if (d[4 * (y * W + x)] < 128) {
      x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
    }
    if (x1 < 0) return null;
    const side = Math.max(x1 - x0, y1 - y0) + 1;
    const cx = (x0 + x1) / 2 - side / 2, cy = (y0 + y1) / 2 - side / 2;
    const v = new Array(64).fill(0);
    const n = new Array(64).fill(0);
    for (let y = 0; y < side; y++) for (let x = 0; x < side; x++) {
      const px = Math.round(cx + x), py = Math.round(cy + y);
      const cell = Math.min(7, Math.floor((8 * y) / side)) * 8 + Math.min(7, Math.floor((8 * x) / side));
      n[cell]++;
      if (px >= 0 && py >= 0 && px < W && py < H) v[cell] += 1 - d[4 * (py * W + px)] / 255;
    }
    return v.map((s, i) => Math.round((1e4 * s) / n[i]) / 1e4);
  };
  const add = (test) => {
    const v = grid();
    if (!v) return;
    const label = Math.max(0, Math.min(9, parseInt($("label-5").value, 10) || 0));
    const line = `lesson5_own.add(${label}, [${v.join(", ")}], ${test ? "True" : "False"})`;
    mp.runPython("import lesson5_own\n" + line);
    lab5.log.push(line);
    lab5.drawn.push([label, v, test]);
    const q = v.map((a) => Math.round(255 * a) - 128);  // (the preview: the model's own quantisation is close)
    if (test) lab5.held++;
    else lab5.train++;
    const p = $("cv-5a").getContext("2d");
    digit(p, q, 0, 0, 8);
    $("count-5").textContent = `training ${lab5.train}, held-out ${lab5.held}`;
    wipe();
  };
  $("add-5").onclick = () => add(false);
  $("test-5").onclick = () => add(true);
  $("clear-5").onclick = wipe;
  pad.addEventListener("keydown", (e) => {
    if (e.key >= "0" && e.key <= "9") $("label-5").value = e.key;
    else if (e.key === "Enter") add(false);
    else if (e.key === "t" || e.key === "T") add(true);
    else if (e.key === "Delete" || e.key === "Backspace") wipe();
    else return;
    e.preventDefault();
  });
  $("save-5").onclick = () => {
    const d = { train: lab5.drawn.filter((s) => !s[2]).map((s) => [s[0], s[1]]),
      held: lab5.drawn.filter((s) => s[2]).map((s) => [s[0], s[1]]) };
    const a = $("dl-5");
    a.href = URL.createObjectURL(new Blob([JSON.stringify(d)], { type: "application/json" }));
    a.hidden = false;
  };
}

export function setupLessons(mp, run, print) {
  const common = () => mp.pyimport("lab_common");
  const names = { 1: "lesson1_int8", 2: "lesson2_step", 3: "lesson3_what", 4: "lesson4_sparse", 5: "lesson5_own" };
  const results = {};
  const frame = () => new Promise((r) => setTimeout(r, 0));
  padSetup(mp, print);
  for (const n of [1, 2, 3, 4, 5]) {
    $("run-" + n).onclick = async () => {
      $("sum-" + n).textContent = "running...";
      await frame();
      const t0 = performance.now();
      run($("cell-" + n).value);
      let r;
      try {
        r = JSON.parse(common().page_json(names[n]));
      } catch (e) {
        $("sum-" + n).textContent = "no result: " + e;
        return;
      }
      results[n] = r;
      draw[n](r);
      print(`lesson ${n}: ran in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
      document.body.dataset["lesson" + n] = "ran";
    };
    $("chk-" + n).onclick = () => {
      const m = mp.pyimport(names[n]);
      let ok = false;
      try {
        const v = $("ans-" + n)?.value;
        ok = n === 5 ? m.check() : m.check(n === 3 ? v : parseFloat(v));
      } catch (e) {
        print(String(e));
      }
      $("res-" + n).textContent = ok ? "passed" : "not yet: look again";
      $("res-" + n).className = ok ? "ok" : "no";
      document.body.dataset["check" + n] = ok ? "passed" : "failed";
    };
  }
  return { results, lab5 };
}
