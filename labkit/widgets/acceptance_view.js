// AcceptanceView front end (labkit/widgets/acceptance_view.py): three small panels —
// accepted/rejected per recent verification, acceptance by draft position, speed-up vs k.

const AV_PANEL_H = 150, AV_PAD = { left: 34, right: 8, top: 18, bottom: 28 };

function panelBox(x, width) {
  return { x: x + AV_PAD.left, y: AV_PAD.top, w: Math.max(20, width - AV_PAD.left - AV_PAD.right),
           h: AV_PANEL_H - AV_PAD.top - AV_PAD.bottom };
}

function panelTitle(ctx, palette, box, title, xLabel) {
  ctx.font = "11px sans-serif"; ctx.fillStyle = palette.ink;
  ctx.textAlign = "left"; ctx.textBaseline = "bottom";
  ctx.fillText(title, box.x - AV_PAD.left + 4, box.y - 4);
  ctx.textAlign = "center"; ctx.textBaseline = "top";
  ctx.fillText(xLabel, box.x + box.w / 2, box.y + box.h + 14);
}

function niceTicks(max) {
  const step = max <= 4 ? 1 : max <= 10 ? 2 : Math.ceil(max / 4);
  const ticks = [];
  for (let v = 0; v <= max + 1e-9; v += step) ticks.push(Math.round(v * 100) / 100);
  return ticks;
}

function drawHistory(ctx, m, box, L) {
  const k = Math.max(1, m.k);
  const axes = lkAxes(ctx, box, 2, k, niceTicks(k), m.palette, "");
  const slots = Math.min(m.window, Math.max(40, m.history.length));   // readable bars early on
  const barW = box.w / slots;
  const offset = slots - m.history.length;
  m.history.forEach(([accepted, drafted], i) => {
    const x = box.x + (offset + i) * barW;
    const w = Math.max(1, barW - (barW > 3 ? 1 : 0));
    ctx.fillStyle = m.palette.accepted;
    ctx.fillRect(x, axes.py(accepted), w, axes.py(0) - axes.py(accepted));
    ctx.fillStyle = m.palette.rejected;
    ctx.fillRect(x, axes.py(drafted), w, axes.py(accepted) - axes.py(drafted));
  });
  panelTitle(ctx, m.palette, box, L("per_verify") + " · " + L("tokens"), "");
}

function drawPositions(ctx, m, box, L) {
  const axes = lkAxes(ctx, box, 2, 1, [0, 0.5, 1], m.palette, "");
  const n = m.acceptance_per_pos.length;
  const slot = box.w / Math.max(n, 1);
  ctx.font = "10px sans-serif"; ctx.textAlign = "center";
  m.acceptance_per_pos.forEach((rate, i) => {
    const x = box.x + i * slot + slot * 0.15;
    ctx.fillStyle = m.palette.accepted;
    ctx.fillRect(x, axes.py(rate), slot * 0.7, axes.py(0) - axes.py(rate));
    ctx.fillStyle = m.palette.ink;
    ctx.textBaseline = "bottom"; ctx.fillText(lkFmt(rate * 100, 0) + "%", x + slot * 0.35, axes.py(rate) - 1);
    ctx.textBaseline = "top"; ctx.fillText(String(i + 1), x + slot * 0.35, box.y + box.h + 2);
  });
  panelTitle(ctx, m.palette, box, L("per_position"), L("position"));
}

function drawSpeedup(ctx, m, box, L) {
  const curve = m.predicted_curve;
  const values = curve.map(([, s]) => s).concat([1, m.measured_speedup || 0]);
  const yMax = Math.max(1.5, Math.ceil(Math.max(...values) * 2) / 2);
  const kMax = Math.max(1, curve.length, m.k);
  const px = (k) => box.x + ((k - 1) / Math.max(1, kMax - 1)) * box.w;
  const axes = lkAxes(ctx, box, 2, yMax, niceTicks(yMax), m.palette, "");
  lkPolyline(ctx, [[box.x, axes.py(1)], [box.x + box.w, axes.py(1)]], m.palette.idle, false);
  lkPolyline(ctx, curve.map(([k, s]) => [px(k), axes.py(s)]), m.palette.predicted, true);
  const dot = (k, s, color) => { ctx.fillStyle = color; ctx.beginPath(); ctx.arc(px(k), axes.py(s), 4, 0, 2 * Math.PI); ctx.fill(); };
  if (m.predicted_speedup !== null && m.k > 0) dot(m.k, m.predicted_speedup, m.palette.predicted);
  if (m.measured_speedup !== null && m.k > 0) dot(m.k, m.measured_speedup, m.palette.ink);
  ctx.font = "10px sans-serif"; ctx.fillStyle = m.palette.ink; ctx.textAlign = "center"; ctx.textBaseline = "top";
  for (let k = 1; k <= kMax; k += Math.ceil(kMax / 8)) ctx.fillText(String(k), px(k), box.y + box.h + 2);
  panelTitle(ctx, m.palette, box, L("speedup_vs_k") + " · " + L("speedup"), L("k"));
  if (curve.length === 0) {
    ctx.textAlign = "center"; ctx.textBaseline = "middle";
    ctx.fillText(L("need_c"), box.x + box.w / 2, box.y + box.h / 2);
  }
}

function numberInput(onCommit) {
  const label = lkEl("label");
  const text = lkEl("span");
  const input = lkEl("input");
  input.type = "number"; input.min = "0"; input.step = "any";
  input.addEventListener("change", () => onCommit(input.value === "" ? null : Number(input.value)));
  label.append(text, document.createTextNode(" "), input);
  return { label, text, input };
}

function render({ model, el }) {
  el.classList.add("lk-view", "lk-acceptance-view");
  const header = lkHeader(el);
  const controls = lkEl("div", "lk-controls");
  const stats = lkEl("div", "lk-stats");
  const legendBox = lkEl("div");
  const canvas = lkEl("canvas");
  el.append(controls, stats, legendBox, canvas);
  const L = (key) => (model.get("labels") || {})[key] || key;

  const cInput = numberInput((v) => { model.set("c", v); model.save_changes(); });
  const baseInput = numberInput((v) => {
    model.set("baseline_tpot_s", v === null ? null : v / 1000); model.save_changes(); });
  controls.append(cInput.label, baseInput.label);

  function readState() {
    const names = ["history", "k", "window", "acceptance_per_pos", "predicted_curve", "predicted_speedup",
      "measured_speedup", "palette"];
    return Object.fromEntries(names.map((name) => [name, model.get(name)]));
  }

  function statItem(label, value) {
    const item = lkEl("span", "", label + ": ");
    item.appendChild(lkEl("b", "", value));
    return item;
  }

  const inputs = () => model.get("show_inputs") !== false;

  function drawStats() {
    const pct = (v) => (v === null ? "—" : lkFmt(v * 100) + "%");
    const x = (v) => (v === null ? "—" : lkFmt(v, 2) + "×");
    const tpot = model.get("tpot_s");
    stats.replaceChildren(
      statItem(L("drafts"), String(model.get("num_drafts"))),
      statItem(L("acceptance_rate"), pct(model.get("acceptance_rate"))),
      statItem(L("alpha"), model.get("alpha") === null ? "—" : lkFmt(model.get("alpha"), 3)),
      statItem(L("mean_length"), lkFmt(model.get("mean_acceptance_length"), 2)),
      statItem(L("c"), model.get("c") !== null ? lkFmt(model.get("c"), 3)
        : model.get("c_measured") !== null ? lkFmt(model.get("c_measured"), 3) + L("c_measured") : "—"),
      statItem(L("predicted"), model.get("predicted_speedup") === null ? L(inputs() ? "need_c" : "from_run")
                                                                      : x(model.get("predicted_speedup"))),
      statItem(L("tpot"), tpot === null ? "—" : lkFmt(tpot * 1000, 2) + " ms"),
      statItem(L("measured"), model.get("baseline_tpot_s") === null ? L(inputs() ? "need_baseline" : "from_run")
                                                                    : x(model.get("measured_speedup"))));
  }

  function drawControls() {
    controls.style.display = inputs() ? "" : "none";
    cInput.text.textContent = L("c_input");
    baseInput.text.textContent = L("baseline_input");
    const c = model.get("c"), base = model.get("baseline_tpot_s");
    if (document.activeElement !== cInput.input) cInput.input.value = c === null ? "" : String(c);
    if (document.activeElement !== baseInput.input) baseInput.input.value = base === null ? "" : String(base * 1000);
  }

  function draw() {
    const m = readState();
    header.title.textContent = L("title");
    header.status.textContent = model.get("num_drafts") === 0 ? L("waiting") : "";
    drawControls();
    drawStats();
    const p = m.palette;
    legendBox.replaceChildren(lkLegend([
      { color: p.accepted, label: L("accepted") }, { color: p.rejected, label: L("rejected") },
      { color: p.predicted, label: L("predicted"), kind: "dash" },
      { color: p.ink, label: L("measured"), kind: "dot" }]));
    // The speed-up-vs-k panel appears once there is a curve (c known): no empty frame before that.
    const panels = m.predicted_curve.length ? [drawHistory, drawPositions, drawSpeedup] : [drawHistory, drawPositions];
    const width = lkWidth(el) - 18;
    const narrow = width < 600;
    const panelW = narrow ? width : width / panels.length;
    const ctx = lkSize(canvas, width, narrow ? panels.length * AV_PANEL_H : AV_PANEL_H);
    const place = (i) => (narrow ? [0, i * AV_PANEL_H] : [i * panelW, 0]);
    panels.forEach((drawPanel, i) => {
      const [x, y] = place(i);
      ctx.save(); ctx.translate(0, y);
      drawPanel(ctx, m, panelBox(x, panelW), L);
      ctx.restore();
    });
  }

  return lkWatch(model, el, ["history", "k", "window", "num_drafts", "acceptance_rate", "alpha",
    "mean_acceptance_length", "acceptance_per_pos", "predicted_curve", "predicted_speedup", "c", "c_measured",
    "baseline_tpot_s", "tpot_s", "measured_speedup", "show_inputs", "labels", "palette"], draw);
}

export default { render };
