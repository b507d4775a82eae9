// The trace page: headline, failures, the process tree on a timeline, memory and CPU over
// time, the critical path, the programs and the top processes. Everything comes from DATA;
// nothing here computes a figure the report does not have.
(function () {
  const D = DATA, P = D.p, S = D.strings, N = P.pid.length;
  const app = document.getElementById("app");
  const wall = Math.max(1, D.wall_ns);
  const endOf = (i) => (P.end[i] === null ? wall : P.end[i]);
  const label = (i) => S[P.label[i]];
  const argv = (i) => P.argv[i].map((k) => S[k]).join(" ");
  const failed = new Set(D.failures);
  const onPath = new Set(D.path.filter((s) => s[0] >= 0).map((s) => s[0]));
  const FAILURE = "#c62828";
  // A program's colour comes with the data; none is the failures' red.
  const colourOf = (k) => (k >= 0 && k < D.programs.length ? D.programs[k].colour : NO_PROGRAM);
  const color = (i) => colourOf(P.program[i]);
  // A figure of the table, as its unit reads.
  const figText = (f, v) => (v === null ? "?" : f.bytes ? fmtBytes(v) : String(v));

  // Headline.
  const bad = D.exit_code !== null && D.exit_code !== 0;
  app.append(el("h1", {}, "spacetime"), el("div", { class: "cmd" }, D.command));
  const peakIdx = D.peak_index;
  const chips = el("div", { class: "chips" },
    chip("status", D.status, bad ? { class: "chip bad", id: "status" } : { id: "status" }),
    chip("wall", fmtNs(D.wall_ns)),
    chip("CPU", fmtNs(D.cpu_ns)),
    chip("parallelism", D.parallelism === null ? "?" : D.parallelism.toFixed(2) + " cores"),
    chip("tree-wide peak RSS", el("span", { id: "tree-peak", "data-bytes": D.tree_peak_rss_bytes === null ? "" : D.tree_peak_rss_bytes },
      D.tree_peak_rss_bytes === null ? "?" : fmtBytes(D.tree_peak_rss_bytes))),
    chip("max PSS", el("span", { id: "max-pss", "data-bytes": D.max_pss_bytes === null ? "" : D.max_pss_bytes },
      D.max_pss_bytes !== null ? fmtBytes(D.max_pss_bytes) : D.max_pss_note === null ? "?" : D.max_pss_note)),
    chip("largest process", (peakIdx === null ? "" : label(peakIdx) + " · ") + fmtBytes(D.peak_rss_bytes)),
    ...D.figures.map((f) => chip(f.title, el("span", { id: "figure-" + f.key, "data-value": f.tree === null ? "" : f.tree },
      f.tree === null ? f.tree_note : figText(f, f.tree)))),
    chip("processes", el("span", { id: "processes", "data-count": D.processes }, String(D.processes))),
    chip("failed", el("span", { id: "failed", "data-count": D.failures.length }, String(D.failures.length)),
      D.failures.length ? { class: "chip bad" } : {}));
  app.append(chips);
  if (!D.complete) app.append(el("p", { class: "note" }, "INCOMPLETE: " + D.lost_events + " events lost; the figures cover what arrived."));

  // Failures, before anything else.
  if (D.failures.length) {
    app.append(el("h2", {}, "Failed: " + D.failures.length + " of " + N + " processes"));
    const rows = D.failures.slice(0, 500).map((i) => ({
      bad: true, mono: [false, false, false, true, true],
      cells: [String(P.pid[i]), P.exit[i] === null ? "?" : String(P.exit[i]), fmtNs(endOf(i)), argv(i) || label(i),
        P.parent[i] >= 0 ? P.pid[P.parent[i]] + " " + label(P.parent[i]) : ""],
    }));
    app.append(el("div", { id: "failures", class: "scroll" }, table(["pid", "exit", "at", "command", "parent"], rows, [true, true, true, false, false])));
    if (D.failures.length > 500) app.append(el("p", { class: "note" }, (D.failures.length - 500) + " more in the JSON report."));
  }

  // The timeline: each depth of the tree a band, each band as many lanes as processes ran
  // at once in it (at most LANES; more share the last lane and are drawn merged).
  const LANES = 48, LANE_H = 14, PATH_H = 18;
  // Deeper than MAX_DEPTH shares the last band.
  const MAX_DEPTH = 64;
  const depth = new Int32Array(N);
  let maxDepth = 0;
  for (let i = 0; i < N; i++) {
    const p = P.parent[i];
    depth[i] = p >= 0 && p < i ? Math.min(MAX_DEPTH, depth[p] + 1) : 0;
    if (depth[i] > maxDepth) maxDepth = depth[i];
  }
  const laneEnds = [], laneOf = new Int32Array(N), lanesAt = [];
  for (let d = 0; d <= maxDepth; d++) { laneEnds.push([]); lanesAt.push(0); }
  for (let i = 0; i < N; i++) {
    const ends = laneEnds[depth[i]];
    let k = 0;
    while (k < ends.length && ends[k] > P.start[i]) k++;
    if (k === ends.length) { if (ends.length < LANES) ends.push(0); else k = ends.length - 1; }
    ends[k] = Math.max(ends[k], endOf(i));
    laneOf[i] = k;
  }
  const bandTop = [];
  let y = PATH_H + 6;
  for (let d = 0; d <= maxDepth; d++) { bandTop.push(y); y += Math.max(1, laneEnds[d].length) * LANE_H + 4; }
  const tlHeight = Math.min(y + 24, 4000);
  const rowY = (i) => bandTop[depth[i]] + laneOf[i] * LANE_H;
  const byLane = new Map();
  for (let i = 0; i < N; i++) {
    const key = depth[i] * LANES + laneOf[i];
    if (!byLane.has(key)) byLane.set(key, []);
    byLane.get(key).push(i);
  }

  // Memory, CPU and the processes share one x axis: the same plot box (a left margin for the
  // y labels, a right one for the last time label) and the same view [v0, v1], so a process
  // lines up with its memory and CPU. Wheel, drag and double-click act on all three.
  const LEFT = 72, RIGHT = 18;
  let v0 = 0, v1 = wall;
  const plotBox = (w) => ({ x: LEFT, w: Math.max(10, w - LEFT - RIGHT) });
  const xOf = (box, t) => box.x + (t - v0) / Math.max(1, v1 - v0) * box.w;
  const tOf = (box, px) => v0 + (px - box.x) / box.w * (v1 - v0);
  const cores = (n) => (n === 1 ? "1 core" : n + " cores");

  app.append(el("h2", {}, "Memory, CPU and processes over time"));
  const peakText = D.tree_peak_rss_bytes === null ? "no kernel RSS figures"
    : "tree-wide peak " + fmtBytes(D.tree_peak_rss_bytes) + " at " + fmtNs(D.tree_peak_at_ns);
  const memCanvas = el("canvas", { id: "memory" }), cpuCanvas = el("canvas", { id: "cpu" });
  const tlCanvas = el("canvas", { id: "timeline" });
  const cursor = el("div", { class: "cursor", id: "cursor" });
  const tip = el("div", { class: "tip", id: "tip" });
  const legend = el("div", { class: "legend" });
  D.programs.slice(0, 16).forEach((g) => legend.append(el("span", { style: "--c:" + g.colour }, g.name + " ×" + g.runs)));
  app.append(el("div", { class: "panel", id: "over-time" },
    el("div", { class: "note" }, "memory: the tree's RSS (" + (D.rss_source === "kernel" ? "every change, from the kernel" : "sampled from statm") + ") · ",
      el("span", { id: "mem-peak", "data-bytes": D.tree_peak_rss_bytes === null ? "" : D.tree_peak_rss_bytes }, peakText)),
    memCanvas,
    el("div", { class: "note" }, "CPU: cores in use (" + D.cpu.label + "; the buckets add up to the total CPU, ",
      el("span", { id: "cpu-total", "data-ns": D.cpu.total_ns }, fmtNs(D.cpu.total_ns)), ")"),
    cpuCanvas,
    el("div", { class: "note" }, "Processes: each band is a depth of the process tree (children under their parents), coloured by program; red outline: failed; black outline and the top lane: the critical path. Hover: the figures at that time, or the process. Wheel: zoom, drag: pan, double-click: reset."),
    legend, tlCanvas, cursor), tip);

  function drawTimeline() {
    const { ctx, w } = sizedCanvas(tlCanvas, tlHeight);
    ctx.clearRect(0, 0, w, tlHeight);
    const box = plotBox(w);
    const X = (t) => xOf(box, t);
    let rects = 0, placed = 0;
    ctx.save(); ctx.beginPath(); ctx.rect(box.x, 0, box.w, tlHeight); ctx.clip();
    // The critical path lane.
    for (const [i, s, e] of D.path) {
      if (e < v0 || s > v1) continue;
      const a = X(s), b = X(e);
      ctx.fillStyle = i >= 0 ? color(i) : "#ddd";
      ctx.fillRect(a, 2, Math.max(0.5, b - a), PATH_H);
      rects++;
      if (b - a > 50 && i >= 0) {
        ctx.fillStyle = "#111"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "middle"; ctx.textAlign = "left";
        ctx.save(); ctx.beginPath(); ctx.rect(a, 2, b - a, PATH_H); ctx.clip();
        ctx.fillText(label(i), a + 3, 2 + PATH_H / 2); ctx.restore();
      }
    }
    ctx.font = "10px system-ui, sans-serif"; ctx.textBaseline = "middle"; ctx.textAlign = "left";
    for (const list of byLane.values()) {
      let lastPx = -Infinity;
      for (const i of list) {
        placed++;
        const s = P.start[i], e = endOf(i);
        if (e < v0 || s > v1) continue;
        const a = X(s), b = Math.max(X(e), a + 0.5), yy = rowY(i);
        const special = failed.has(i) || onPath.has(i);
        // Bars inside a pixel already drawn in this lane are merged into it.
        if (b <= lastPx && !special) continue;
        ctx.fillStyle = color(i);
        ctx.fillRect(a, yy, b - a, LANE_H - 2);
        rects++;
        lastPx = Math.max(lastPx, Math.ceil(b));
        if (onPath.has(i)) { ctx.strokeStyle = "#111"; ctx.lineWidth = 1.5; ctx.strokeRect(a, yy + 0.75, b - a, LANE_H - 3.5); }
        if (failed.has(i)) {
          ctx.strokeStyle = FAILURE; ctx.lineWidth = 2; ctx.strokeRect(a, yy + 1, b - a, LANE_H - 4);
          ctx.fillStyle = FAILURE; ctx.beginPath(); ctx.moveTo(b, yy); ctx.lineTo(b + 6, yy); ctx.lineTo(b, yy + 6); ctx.fill();
        }
        if (b - a > 60) {
          ctx.save(); ctx.beginPath(); ctx.rect(a, yy, b - a, LANE_H); ctx.clip();
          ctx.fillStyle = "#111"; ctx.fillText(label(i), a + 3, yy + LANE_H / 2 - 1); ctx.restore();
        }
      }
    }
    ctx.restore();
    ctx.fillStyle = "#5d6975"; ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    ctx.fillText("critical path", box.x - 6, 2 + PATH_H / 2);
    xLabels(ctx, box, v0, v1, tlHeight - 18, (t) => fmtNs(Math.round(t)));
    tlCanvas.dataset.bars = String(placed);
    tlCanvas.dataset.rects = String(rects);
  }

  // The process under the pointer (-1: none).
  function hit(ev) {
    const r = tlCanvas.getBoundingClientRect(), box = plotBox(r.width);
    const px = ev.clientX - r.left, py = ev.clientY - r.top;
    if (px < box.x || px > box.x + box.w) return -1;
    const t = tOf(box, px);
    const slack = (v1 - v0) / box.w * 2;
    if (py < PATH_H + 2) {
      for (const [i, s, e] of D.path) if (i >= 0 && s <= t && t <= e) return i;
      return -1;
    }
    for (let d = 0; d <= maxDepth; d++) {
      const k = Math.floor((py - bandTop[d]) / LANE_H);
      if (k < 0 || k >= laneEnds[d].length) continue;
      const list = byLane.get(d * LANES + k) || [];
      let lo = 0, hi = list.length;
      while (lo < hi) { const m = (lo + hi) >> 1; if (P.start[list[m]] <= t + slack) lo = m + 1; else hi = m; }
      for (let j = lo - 1; j >= 0 && j >= lo - 64; j--) {
        const i = list[j];
        if (endOf(i) + slack >= t) return i;
      }
    }
    return -1;
  }

  // The tree's RSS at time t (the step series' last point at or before t).
  function memoryAt(t) {
    const m = D.memory;
    let lo = 0, hi = m.length;
    while (lo < hi) { const k = (lo + hi) >> 1; if (m[k][0] <= t) lo = k + 1; else hi = k; }
    return lo === 0 ? 0 : m[lo - 1][1];
  }
  // Cores in use during the CPU bucket that holds t.
  function coresAt(t) {
    const b = Math.max(1, D.cpu.bucket_ns), k = Math.floor(t / b);
    return k >= 0 && k < D.cpu.cpu_ns.length ? D.cpu.cpu_ns[k] / b : 0;
  }

  function showTip(ev, lines) {
    tip.textContent = lines.join("\n");
    tip.style.display = "block";
    tip.style.left = Math.max(0, Math.min(ev.clientX + 14, window.innerWidth - 420)) + "px";
    tip.style.top = (ev.clientY + 14) + "px";
  }
  function hideTip() { tip.style.display = "none"; cursor.style.display = "none"; }

  // Hover on any of the three: a line at that time across them, and what was there.
  function hover(ev, canvas) {
    const r = canvas.getBoundingClientRect(), box = plotBox(r.width), px = ev.clientX - r.left;
    if (px < box.x || px > box.x + box.w) { hideTip(); return; }
    const t = Math.max(0, Math.min(wall, tOf(box, px)));
    cursor.style.display = "block";
    cursor.style.left = (canvas.offsetLeft + px) + "px";
    cursor.dataset.ns = String(Math.round(t));
    const i = canvas === tlCanvas ? hit(ev) : -1;
    if (i >= 0) {
      const lines = [label(i), argv(i), "pid " + P.pid[i] + (P.parent[i] >= 0 ? " · parent " + P.pid[P.parent[i]] : ""),
        "from " + fmtNs(P.start[i]) + " to " + (P.end[i] === null ? "the end (still running)" : fmtNs(P.end[i])) + " · " + fmtNs(endOf(i) - P.start[i]),
        "peak RSS " + fmtBytes(P.peak[i]) + " · CPU " + fmtNs(P.cpu[i]) + " · exit " + (P.exit[i] === null ? "?" : P.exit[i]),
        S[P.exe[i]]];
      D.figures.forEach((f) => { if (f.processes[i] !== null) lines.push(f.title + " " + figText(f, f.processes[i])); });
      if (onPath.has(i)) lines.push("on the critical path");
      showTip(ev, lines);
      tip.dataset.process = String(i);
      return;
    }
    delete tip.dataset.process;
    const c = coresAt(t);
    showTip(ev, ["at " + fmtNs(Math.round(t)), "memory " + fmtBytes(memoryAt(t)), "CPU " + (c === 1 ? "1 core" : c.toFixed(2) + " cores")]);
  }

  let drag = null;
  for (const canvas of [memCanvas, cpuCanvas, tlCanvas]) {
    canvas.addEventListener("mousemove", (ev) => {
      if (drag) {
        const r = canvas.getBoundingClientRect(), dt = (ev.clientX - drag.x) / plotBox(r.width).w * (drag.v1 - drag.v0);
        v0 = Math.max(0, Math.min(wall - (drag.v1 - drag.v0), drag.v0 - dt)); v1 = v0 + (drag.v1 - drag.v0); drawAll(); return;
      }
      hover(ev, canvas);
    });
    canvas.addEventListener("mouseleave", () => { hideTip(); drag = null; });
    canvas.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, v0: v0, v1: v1 }; });
    canvas.addEventListener("dblclick", () => { v0 = 0; v1 = wall; drawAll(); });
    canvas.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const r = canvas.getBoundingClientRect(), box = plotBox(r.width);
      const f = Math.min(1, Math.max(0, (ev.clientX - r.left - box.x) / box.w));
      const t = v0 + f * (v1 - v0), k = ev.deltaY > 0 ? 1.25 : 0.8;
      const span = Math.min(wall, Math.max(1000, (v1 - v0) * k));
      v0 = Math.max(0, t - f * span); v1 = Math.min(wall, v0 + span); v0 = Math.max(0, v1 - span);
      drawAll();
    }, { passive: false });
  }
  window.addEventListener("mouseup", () => { drag = null; });

  function drawMemory() {
    const { ctx, w, h } = sizedCanvas(memCanvas, 220);
    const pts = D.memory;
    const top = pts.reduce((m, p) => Math.max(m, p[1]), Math.max(1, D.tree_peak_rss_bytes || 0));
    const box = frame(ctx, w, h, v0, v1, [[0, "0"], [0.5, fmtBytes(top / 2)], [1, fmtBytes(top)]], plotBox(w));
    const X = (t) => xOf(box, t), Y = (v) => box.y + box.h * (1 - v / top);
    ctx.save(); ctx.beginPath(); ctx.rect(box.x, 0, box.w, h); ctx.clip();
    ctx.beginPath(); ctx.moveTo(X(0), Y(0));
    let last = 0;
    for (const [t, v] of pts) { ctx.lineTo(X(t), Y(last)); ctx.lineTo(X(t), Y(v)); last = v; }
    ctx.lineTo(X(wall), Y(last)); ctx.lineTo(X(wall), Y(0)); ctx.closePath();
    ctx.fillStyle = "rgba(38, 132, 160, 0.35)"; ctx.fill();
    ctx.strokeStyle = "rgb(38, 132, 160)"; ctx.lineWidth = 1; ctx.stroke();
    ctx.restore();
    if (D.tree_peak_rss_bytes !== null && D.tree_peak_at_ns !== null && D.tree_peak_at_ns >= v0 && D.tree_peak_at_ns <= v1) {
      const px = X(D.tree_peak_at_ns), py = Y(D.tree_peak_rss_bytes);
      ctx.fillStyle = FAILURE; ctx.beginPath(); ctx.arc(px, py, 4, 0, 2 * Math.PI); ctx.fill();
      ctx.font = "12px system-ui, sans-serif"; ctx.textBaseline = "bottom";
      ctx.textAlign = px > box.x + box.w * 0.7 ? "right" : "left";
      ctx.fillText("peak " + fmtBytes(D.tree_peak_rss_bytes), px + (ctx.textAlign === "left" ? 6 : -6), Math.max(py - 2, 14));
    }
  }

  function drawCpu() {
    const { ctx, w, h } = sizedCanvas(cpuCanvas, 140);
    const b = D.cpu.bucket_ns, v = D.cpu.cpu_ns;
    const peak = v.reduce((m, x) => Math.max(m, x), 0) / Math.max(1, b);
    const top = Math.max(1, Math.ceil(peak));
    const box = frame(ctx, w, h, v0, v1, [[0, "0"], [0.5, cores(top / 2)], [1, cores(top)]], plotBox(w));
    ctx.save(); ctx.beginPath(); ctx.rect(box.x, 0, box.w, h); ctx.clip();
    ctx.fillStyle = "rgba(205, 120, 40, 0.75)";
    v.forEach((x, k) => {
      if (!x) return;
      const a = xOf(box, k * b), z = xOf(box, Math.min(wall, (k + 1) * b));
      const hh = box.h * (x / b) / top;
      ctx.fillRect(a, box.y + box.h - hh, Math.max(0.5, z - a), hh);
    });
    ctx.restore();
  }

  // The critical path.
  if (N > 1 && D.path.length) {
    app.append(el("h2", {}, "Critical path: " + D.path.length + " steps"),
      el("p", { class: "note" }, "The chain of processes that set the wall time, read backwards from the end: at each process, the child that ended last before the time reached; the rest is the process's own time."));
    const bar = el("div", { class: "bar", id: "path-bar" });
    D.path_programs.forEach((g) => {
      const k = D.programs.findIndex((x) => x.name === g.name);
      bar.append(el("div", { title: g.name + " " + (100 * g.ns / wall).toFixed(1) + "%", style: "width:" + (100 * g.ns / wall) + "%;background:" + colourOf(k) }));
    });
    app.append(bar, el("p", { class: "note" }, D.path_programs.map((g) => (g.name || "(no traced process)") + " " + (100 * g.ns / wall).toFixed(1) + "% (" + g.steps + ")").join(" · ")));
    const longest = D.path.map((s, k) => k).sort((a, b) => (D.path[b][2] - D.path[b][1]) - (D.path[a][2] - D.path[a][1])).slice(0, 25).sort((a, b) => a - b);
    app.append(el("div", { id: "path", class: "scroll" }, table(["share", "time", "from", "process"], longest.map((k) => {
      const [i, s, e] = D.path[k];
      return { mono: [false, false, false, true], cells: [(100 * (e - s) / wall).toFixed(1) + "%", fmtNs(e - s), fmtNs(s), i >= 0 ? label(i) : "(no traced process)"] };
    }), [true, true, true, false])));
  }

  // Programs, and the top processes.
  app.append(el("h2", {}, "Programs (" + D.programs.length + "), by peak RSS"));
  app.append(el("div", { id: "programs" }, table(["program", "runs", "failed", "peak RSS", "CPU"].concat(D.figures.map((f) => f.title)),
    D.programs.slice(0, 200).map((g, k) => ({
      bad: g.failed > 0, mono: [true], cells: [g.exe, String(g.runs), String(g.failed), fmtBytes(g.peak_rss_bytes), fmtNs(g.cpu_ns)]
        .concat(D.figures.map((f) => figText(f, f.programs[k]))),
    })), [false, true, true, true, true].concat(D.figures.map(() => true)))));
  const idx = Array.from({ length: N }, (_, i) => i);
  const topBy = (f) => idx.slice().sort((a, b) => f(b) - f(a) || P.start[a] - P.start[b]).slice(0, 10);
  app.append(el("div", { class: "two" },
    el("div", {}, el("h2", {}, "Top by CPU"), table(["CPU", "process"], topBy((i) => P.cpu[i]).map((i) => ({ mono: [false, true], cells: [fmtNs(P.cpu[i]), label(i)] })), [true, false])),
    el("div", {}, el("h2", {}, "Top by peak RSS"), table(["peak RSS", "process"], topBy((i) => P.peak[i] || 0).map((i) => ({ mono: [false, true], cells: [fmtBytes(P.peak[i]), label(i)] })), [true, false]))));
  app.append(el("p", { class: "note" }, "spacetime " + D.version + " · " + D.host + " · started " + D.start));

  function drawAll() { drawMemory(); drawCpu(); drawTimeline(); }
  drawAll();
  window.addEventListener("resize", drawAll);
  // Time from navigation to the page drawn: what opening the report costs.
  document.body.dataset.renderMs = String(Math.round(performance.now()));
  document.body.dataset.rendered = "1";
})();
