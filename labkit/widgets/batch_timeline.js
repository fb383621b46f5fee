// BatchTimeline front end (labkit/widgets/batch_timeline.py): slots × steps grid, newest step at
// the right edge, with batch occupancy and token-budget lines underneath on the same step axis.
// Until `window` steps have run, the steps kept so far fill the whole width (at least TL_MIN_COLS
// columns, so the first steps are not drawn as huge blocks); after that the grid scrolls.

const KIND_NAMES = { p: "prefill", d: "decode", v: "verify", i: "idle" };
const TL_LEFT = 40, TL_CHART_H = 90, TL_GAP = 10, TL_MIN_COLS = 12;

// How many step columns the width is divided into: the kept steps, within [TL_MIN_COLS, window].
function shownColumns(window, n) {
  return Math.max(1, Math.min(window, Math.max(n, TL_MIN_COLS)));
}

function timelineGeometry(width, window, numSlots) {
  const plotW = Math.max(50, width - TL_LEFT - 6);
  const cellH = Math.max(3, Math.min(14, Math.floor(220 / Math.max(numSlots, 1))));
  const gridH = Math.max(numSlots, 1) * cellH;
  return { plotW, cols: Math.max(window, 1), colW: plotW / Math.max(window, 1), cellH, gridH,
           chartY: gridH + TL_GAP, height: gridH + TL_GAP + TL_CHART_H + 14 };
}

// x of column i (0 = oldest kept) when n columns are shown: newest column touches the right edge.
function columnX(geo, window, n, i) {
  return TL_LEFT + (window - n + i) * geo.colW;
}

function drawGrid(ctx, m, geo) {
  const n = m.kinds.length;
  for (let i = 0; i < n; i++) {
    const x = columnX(geo, geo.cols, n, i);
    const code = m.kinds[i];
    for (let slot = 0; slot < code.length; slot++) {
      const kind = KIND_NAMES[code[slot]];
      if (!kind) continue;
      const rid = m.requests[i][slot];
      const color = m.color_by === "request" && kind !== "idle" ? (m.colors[rid] || m.palette.ink)
                                                               : m.palette[kind];
      ctx.fillStyle = color;
      ctx.fillRect(x, slot * geo.cellH, Math.max(1, geo.colW - (geo.colW > 3 ? 1 : 0)), geo.cellH - 1);
    }
  }
  ctx.font = "10px sans-serif"; ctx.fillStyle = m.palette.ink;
  ctx.textAlign = "right"; ctx.textBaseline = "middle";
  const every = Math.ceil(12 / geo.cellH);
  for (let slot = 0; slot < m.num_slots; slot += every) ctx.fillText(String(slot), TL_LEFT - 4, slot * geo.cellH + geo.cellH / 2);
}

function drawLines(ctx, m, geo, label) {
  const n = m.kinds.length;
  const box = { x: TL_LEFT, y: geo.chartY, w: geo.plotW, h: TL_CHART_H };
  const axes = lkAxes(ctx, box, 2, 100, [0, 50, 100], m.palette, "%");
  const x = (i) => columnX(geo, geo.cols, n, i) + geo.colW / 2;
  lkPolyline(ctx, m.occupancy_perc.map((v, i) => [x(i), axes.py(v)]), m.palette.ink, false);
  lkPolyline(ctx, m.token_budget_perc.map((v, i) => [x(i), axes.py(v)]), m.palette.ink, true);
  ctx.textAlign = "left"; ctx.textBaseline = "top"; ctx.fillStyle = m.palette.ink;
  if (n > 0) {
    ctx.fillText(`${label} ${m.steps[0]}`, x(0), box.y + box.h + 2);
    ctx.textAlign = "right";
    ctx.fillText(String(m.steps[n - 1]), x(n - 1), box.y + box.h + 2);
  }
}

const LEGEND_REQUESTS = 8;

// "By request" colours mean requests: the legend names the requests drawn (first seen first), at most
// LEGEND_REQUESTS of them, and counts the rest.
function requestLegend(m, requestWord) {
  const seen = [];
  for (let i = 0; i < m.kinds.length; i++) {
    for (let slot = 0; slot < m.kinds[i].length; slot++) {
      const rid = m.requests[i][slot];
      if (rid && KIND_NAMES[m.kinds[i][slot]] !== "idle" && !seen.includes(rid)) seen.push(rid);
    }
  }
  const items = seen.slice(0, LEGEND_REQUESTS).map((rid) => ({ color: m.colors[rid] || m.palette.ink,
    label: `${requestWord} ${rid}` }));
  if (seen.length > LEGEND_REQUESTS) items.push({ color: "#ffffff", label: `+${seen.length - LEGEND_REQUESTS}` });
  return items;
}

function render({ model, el }) {
  el.classList.add("lk-view", "lk-batch-timeline");
  const header = lkHeader(el);
  const controls = lkEl("div", "lk-controls");
  const legendBox = lkEl("div");
  const canvas = lkEl("canvas");
  el.append(controls, legendBox, canvas);
  const tip = lkTooltip(el);
  const L = (key) => (model.get("labels") || {})[key] || key;
  let geo = null;

  const toggleLabel = lkEl("span");
  const toggle = lkEl("select");
  controls.append(toggleLabel, toggle);
  toggle.addEventListener("change", () => { model.set("color_by", toggle.value); model.save_changes(); });

  function readState() {
    const names = ["kinds", "requests", "tokens", "steps", "occupancy_perc", "token_budget_perc",
      "colors", "palette", "window", "num_slots", "color_by"];
    return Object.fromEntries(names.map((name) => [name, model.get(name)]));
  }

  function drawControls(m) {
    toggleLabel.textContent = L("color_by");
    toggle.replaceChildren(...[["kind", L("by_kind")], ["request", L("by_request")]].map(([v, text]) => {
      const option = lkEl("option", "", text); option.value = v; return option; }));
    toggle.value = m.color_by;
  }

  function draw() {
    const m = readState();
    const n = m.kinds.length;
    header.title.textContent = L("title");
    header.status.textContent = n === 0 ? L("waiting") : `${L("step")} ${m.steps[n - 1]} · ` +
      `${L("occupancy")} ${lkFmt(m.occupancy_perc[n - 1])}% · ` +
      `${L("token_budget")} ${lkFmt(m.token_budget_perc[n - 1])}%`;
    drawControls(m);
    const p = m.palette;
    const lines = [{ color: p.ink, label: L("occupancy"), kind: "line" },
      { color: p.ink, label: L("token_budget"), kind: "dash" }];
    legendBox.replaceChildren(lkLegend(m.color_by === "request"
      ? [...requestLegend(m, L("request")), { color: p.idle, label: L("idle") }, ...lines]
      : [{ color: p.prefill, label: L("prefill") }, { color: p.decode, label: L("decode") },
        { color: p.verify, label: L("verify") }, { color: p.idle, label: L("idle") }, ...lines]));
    const width = lkWidth(el) - 18;
    geo = timelineGeometry(width, shownColumns(m.window, n), m.num_slots);
    const ctx = lkSize(canvas, width, geo.height);
    drawGrid(ctx, m, geo);
    drawLines(ctx, m, geo, L("step"));
  }

  function pick(x, y) {
    const m = readState();
    const n = m.kinds.length;
    const i = Math.floor((x - TL_LEFT) / geo.colW) - (geo.cols - n);
    if (i < 0 || i >= n) return null;
    if (y >= geo.chartY) {
      return [`${L("step")} ${m.steps[i]}`, `${L("occupancy")}: ${lkFmt(m.occupancy_perc[i])}%`,
        `${L("token_budget")}: ${lkFmt(m.token_budget_perc[i])}%`];
    }
    const slot = Math.floor(y / geo.cellH);
    if (slot >= m.num_slots) return null;
    const kind = KIND_NAMES[m.kinds[i][slot]];
    return [`${L("step")} ${m.steps[i]} · ${L("slot")} ${slot}`,
      kind ? `${L("request")}: ${m.requests[i][slot]} · ${L(kind)}` : L("empty"),
      kind ? `${L("tokens")}: ${m.tokens[i][slot]}` : ""].filter(Boolean);
  }

  canvas.addEventListener("mousemove", (event) => {
    const pos = lkMouse(event, canvas, el);
    const lines = geo ? pick(pos.x, pos.y) : null;
    if (lines) tip.show(pos.ex, pos.ey, lines); else tip.hide();
  });
  canvas.addEventListener("mouseleave", () => tip.hide());

  return lkWatch(model, el, ["step", "kinds", "requests", "tokens", "steps", "occupancy_perc",
    "token_budget_perc", "colors", "palette", "labels", "window", "num_slots", "color_by"], draw);
}

export default { render };
