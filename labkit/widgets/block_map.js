// BlockMap front end (labkit/widgets/block_map.py). Paged: one cell per physical block.
// Contiguous: the token-slot arena with each request's reservation and the free holes.

function pagedGeometry(width, numBlocks) {
  const n = Math.max(numBlocks, 1);
  const cell = Math.max(6, Math.min(28, Math.floor(Math.sqrt((width * 360) / n))));
  const cols = Math.max(1, Math.floor(width / cell));
  return { kind: "paged", cell, cols, height: Math.ceil(n / cols) * cell };
}

function arenaGeometry(width, totalSlots) {
  const n = Math.max(totalSlots, 1);
  const pxPerSlot = Math.max(1, Math.min(16, (width * 8) / n));
  const perRow = Math.max(1, Math.floor(width / pxPerSlot));
  const rowH = 18, gap = 5;
  return { kind: "contiguous", pxPerSlot, perRow, rowH, gap,
           height: Math.ceil(n / perRow) * (rowH + gap) };
}

// Call fn(x, y, w) for each row piece of the slot run [start, start + length).
function slotRuns(geo, start, length, fn) {
  let slot = start, left = length;
  while (left > 0) {
    const row = Math.floor(slot / geo.perRow), col = slot % geo.perRow;
    const take = Math.min(left, geo.perRow - col);
    fn(col * geo.pxPerSlot, row * (geo.rowH + geo.gap), take * geo.pxPerSlot);
    slot += take;
    left -= take;
  }
}

// Every trait draw() needs, read once per frame.
function readState(model) {
  const names = ["owner", "filled", "ref_cnt", "cached", "block_tables", "regions", "colors",
    "palette", "block_size", "num_blocks", "kv_layout"];
  return Object.fromEntries(names.map((name) => [name, model.get(name)]));
}

function activeTable(m, request) {
  const logical = new Map();
  ((m.block_tables || {})[request] || []).forEach((physical, i) => logical.set(physical, i));
  return logical;
}

function drawBlock(ctx, m, geo, i, logical, request) {
  const palette = m.palette;
  const owner = m.owner[i];
  const size = geo.cell - 1;
  const x = (i % geo.cols) * geo.cell, y = Math.floor(i / geo.cols) * geo.cell;
  if (owner === null || owner === undefined) {
    ctx.fillStyle = m.cached[i] ? lkAlpha(palette.cached, 0.35) : palette.free;
    ctx.fillRect(x, y, size, size);
  } else {
    const color = m.colors[owner] || palette.ink;
    ctx.fillStyle = lkAlpha(color, 0.3);
    ctx.fillRect(x, y, size, size);
    ctx.fillStyle = color;   // filled slots, left to right like the tokens they hold
    ctx.fillRect(x, y, size * Math.min(1, (m.filled[i] || 0) / Math.max(1, m.block_size)), size);
  }
  if (m.cached[i]) {
    const c = Math.max(3, size / 3);
    ctx.fillStyle = palette.cached;
    ctx.beginPath(); ctx.moveTo(x + size - c, y); ctx.lineTo(x + size, y); ctx.lineTo(x + size, y + c);
    ctx.fill();
  }
  if ((m.ref_cnt[i] || 0) > 1) drawShared(ctx, palette, x, y, size, m.ref_cnt[i]);
  if (request) drawActive(ctx, palette, x, y, size, logical.get(i));
}

function drawShared(ctx, palette, x, y, size, refs) {
  const r = Math.max(1.5, size / 8);
  ctx.fillStyle = palette.ink;
  ctx.beginPath(); ctx.arc(x + r + 1, y + size - r - 1, r, 0, 2 * Math.PI); ctx.fill();
  if (size >= 18) {
    ctx.font = "9px sans-serif"; ctx.textAlign = "left"; ctx.textBaseline = "bottom";
    ctx.fillText(String(refs), x + 2 * r + 2, y + size);
  }
}

// Highlight the active request's blocks (with their logical index) and dim the rest.
function drawActive(ctx, palette, x, y, size, logicalIndex) {
  if (logicalIndex === undefined) {
    ctx.fillStyle = "rgba(255,255,255,0.6)";
    ctx.fillRect(x, y, size, size);
    return;
  }
  ctx.strokeStyle = palette.ink;
  ctx.lineWidth = 2;
  ctx.strokeRect(x + 1, y + 1, size - 2, size - 2);
  if (size >= 14) {
    ctx.font = "bold 9px sans-serif"; ctx.fillStyle = palette.ink;
    ctx.textAlign = "center"; ctx.textBaseline = "middle";
    ctx.fillText(String(logicalIndex), x + size / 2, y + size / 2);
  }
}

function drawArena(ctx, m, geo, request) {
  const palette = m.palette;
  const total = m.num_blocks * m.block_size;
  slotRuns(geo, 0, total, (x, y, w) => { ctx.fillStyle = palette.free; ctx.fillRect(x, y, w, geo.rowH); });
  for (const region of m.regions) {
    const color = m.colors[region.request_id] || palette.ink;
    const later = Math.max(0, Math.min(region.needed, region.reserved) - region.used);
    const never = Math.max(0, region.reserved - Math.max(region.needed, region.used));
    const dim = request && request !== region.request_id;
    ctx.globalAlpha = dim ? 0.35 : 1;
    slotRuns(geo, region.start, region.used, (x, y, w) => { ctx.fillStyle = color; ctx.fillRect(x, y, w, geo.rowH); });
    slotRuns(geo, region.start + region.used, later, (x, y, w) => {
      ctx.fillStyle = palette.reserved_unused; ctx.fillRect(x, y, w, geo.rowH); });
    slotRuns(geo, region.start + region.reserved - never, never, (x, y, w) => {
      ctx.fillStyle = "#ffffff"; ctx.fillRect(x, y, w, geo.rowH);
      lkHatch(ctx, x, y, w, geo.rowH, palette.internal_frag); });
    slotRuns(geo, region.start, region.reserved, (x, y, w) => {   // who owns the reservation
      ctx.fillStyle = color; ctx.fillRect(x, y, w, 3); });
    ctx.globalAlpha = 1;
    if (request === region.request_id) {
      slotRuns(geo, region.start, region.reserved, (x, y, w) => {
        ctx.strokeStyle = palette.ink; ctx.lineWidth = 2; ctx.strokeRect(x + 1, y + 1, w - 2, geo.rowH - 2); });
    }
  }
}

// The free hole around `slot`: [end of the region before, start of the region after).
function holeAround(regions, slot, total) {
  let lo = 0, hi = total;
  for (const r of regions) {
    if (r.start + r.reserved <= slot) lo = Math.max(lo, r.start + r.reserved);
    if (r.start > slot) hi = Math.min(hi, r.start);
  }
  return [lo, hi];
}

function render({ model, el }) {
  el.classList.add("lk-view", "lk-block-map");
  const header = lkHeader(el);
  const legendBox = lkEl("div");
  const canvas = lkEl("canvas");
  const info = lkEl("div", "lk-info lk-mono");
  el.append(legendBox, canvas, info);
  const L = (key) => (model.get("labels") || {})[key] || key;
  const refreshSlider = lkStepSlider(el, model, L);
  const tip = lkTooltip(el);
  let geo = null;
  let hovered = "";

  const active = () => model.get("selected") || hovered;

  function statusText() {
    const s = model.get("summary") || {};
    if (model.get("step") < 0) return L("waiting");
    const parts = [`${L("step")} ${model.get("step")}`,
      `${L("usage")} ${lkFmt(s.kv_cache_usage_perc)}%`, `${L("waste")} ${lkFmt(s.kv_waste_perc)}%`];
    if (model.get("kv_layout") === "contiguous") {
      parts.push(`${L("external_frag")} ${lkFmt(s.kv_external_frag_perc)}%`);
    } else {
      parts.push(`${L("used_blocks")} ${s.num_used}/${s.num_blocks}`,
        `${L("shared")} ${s.num_shared}`, `${L("cached")} ${s.num_cached}`);
    }
    return parts.join(" · ");
  }

  function legendItems() {
    const p = model.get("palette");
    if (model.get("kv_layout") === "contiguous") {
      return [{ color: p.ink, label: L("used_slots") },
        { color: p.reserved_unused, label: L("reserved_later") },
        { color: p.internal_frag, label: L("internal_frag"), kind: "hatch" },
        { color: p.free, label: L("free_hole") }];
    }
    return [{ color: p.ink, label: L("filled_part") },
      { color: lkAlpha(p.ink, 0.3), label: L("empty_part") },
      { color: p.free, label: L("free") },
      { color: p.cached, label: L("cached") },
      { color: p.ink, label: L("shared"), kind: "dot" }];
  }

  function infoText() {
    const request = active();
    const contiguous = model.get("kv_layout") === "contiguous";
    if (!request) return L(contiguous ? "hint_contiguous" : "hint");
    if (contiguous) {
      const r = model.get("regions").find((x) => x.request_id === request);
      if (!r) return request;
      return `${request} · ${L("region")} [${r.start}, ${r.start + r.reserved}) · ` +
        `${L("used")} ${r.used} · ${L("needed")} ${r.needed} · ${L("reserved")} ${r.reserved}`;
    }
    const table = (model.get("block_tables") || {})[request] || [];
    return `${request} · ${L("block_table")}: ` + table.map((b, i) => `${i}→${b}`).join("  ");
  }

  function draw() {
    refreshSlider();
    header.title.textContent = L("title");
    header.status.textContent = statusText();
    legendBox.replaceChildren(lkLegend(legendItems()));
    info.textContent = infoText();
    const width = lkWidth(el) - 18;
    const contiguous = model.get("kv_layout") === "contiguous";
    geo = contiguous ? arenaGeometry(width, model.get("num_blocks") * model.get("block_size"))
                     : pagedGeometry(width, model.get("num_blocks"));
    const ctx = lkSize(canvas, width, Math.max(geo.height, 1));
    const request = active();
    const m = readState(model);
    if (contiguous) { drawArena(ctx, m, geo, request); return; }
    const logical = activeTable(m, request);
    for (let i = 0; i < m.num_blocks; i++) drawBlock(ctx, m, geo, i, logical, request);
  }

  // What is under the mouse: {lines for the tooltip, request id or ""}, or null.
  function pick(x, y) {
    if (!geo || x < 0 || y < 0) return null;
    if (geo.kind === "paged") {
      const i = Math.floor(y / geo.cell) * geo.cols + Math.floor(x / geo.cell);
      if (Math.floor(x / geo.cell) >= geo.cols || i >= model.get("num_blocks")) return null;
      const owner = model.get("owner")[i];
      return { request: owner || "", lines: [
        `${L("block")} #${i}`, `${L("owner")}: ${owner || L("free")}`,
        `${L("slots")}: ${model.get("filled")[i]}/${model.get("block_size")}`,
        `${L("ref_cnt")}: ${model.get("ref_cnt")[i]}`,
        `${L("prefix_cached")}: ${model.get("cached")[i] ? L("yes") : L("no")}`] };
    }
    const row = Math.floor(y / (geo.rowH + geo.gap));
    if (y - row * (geo.rowH + geo.gap) > geo.rowH) return null;
    const slot = row * geo.perRow + Math.floor(x / geo.pxPerSlot);
    const total = model.get("num_blocks") * model.get("block_size");
    if (slot >= total || Math.floor(x / geo.pxPerSlot) >= geo.perRow) return null;
    const r = model.get("regions").find((q) => slot >= q.start && slot < q.start + q.reserved);
    if (r) {
      return { request: r.request_id, lines: [`${L("owner")}: ${r.request_id}`,
        `${L("start")}: ${r.start}`, `${L("reserved")}: ${r.reserved}`,
        `${L("used")}: ${r.used}`, `${L("needed")}: ${r.needed}`] };
    }
    const [lo, hi] = holeAround(model.get("regions"), slot, total);
    return { request: "", lines: [`${L("free_hole")}: [${lo}, ${hi}) = ${hi - lo} ${L("slots")}`] };
  }

  canvas.addEventListener("mousemove", (event) => {
    const m = lkMouse(event, canvas, el);
    const hit = pick(m.x, m.y);
    if (hit) tip.show(m.ex, m.ey, hit.lines); else tip.hide();
    const request = hit ? hit.request : "";
    if (request !== hovered) { hovered = request; draw(); }
  });
  canvas.addEventListener("mouseleave", () => { tip.hide(); if (hovered) { hovered = ""; draw(); } });
  canvas.addEventListener("click", (event) => {
    const m = lkMouse(event, canvas, el);
    const hit = pick(m.x, m.y);
    const request = hit ? hit.request : "";
    model.set("selected", model.get("selected") === request ? "" : request);
    model.save_changes();
  });

  return lkWatch(model, el, ["step", "kv_layout", "block_size", "num_blocks", "owner", "filled",
    "ref_cnt", "cached", "block_tables", "regions", "colors", "summary", "selected", "labels",
    "palette", "history_steps", "cursor", "peak_index", "pinned", "running"], draw);
}

export default { render };
