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

// Every trait draw() needs, read once per frame. With `frames` (a finished run, small enough)
// the step under the slider is drawn from the browser's copy: no round trip through the kernel.
const FRAME_TRAITS = ["step", "owner", "filled", "ref_cnt", "cached", "block_tables", "regions", "colors",
  "block_size", "num_blocks", "kv_layout", "summary"];

function readState(model) {
  const frames = model.get("frames") || [];
  const cursor = model.get("cursor");
  const local = cursor >= 0 && cursor < frames.length ? frames[cursor] : null;
  const m = Object.fromEntries(FRAME_TRAITS.map((name) => [name, local ? local[name] : model.get(name)]));
  m.palette = model.get("palette");
  return m;
}

// Requests whose block table holds physical block `i` (a shared block has several).
function holdersOf(m, i) {
  return Object.entries(m.block_tables || {}).filter(([, table]) => table.includes(i)).map(([rid]) => rid);
}

// physical block -> logical index, over the tables of the active requests (the first one wins).
function activeTable(m, requests) {
  const logical = new Map();
  for (const request of requests) {
    ((m.block_tables || {})[request] || []).forEach((physical, i) => {
      if (!logical.has(physical)) logical.set(physical, i);
    });
  }
  return logical;
}

function drawBlock(ctx, m, geo, i, logical, highlight) {
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
  if (highlight) drawActive(ctx, palette, x, y, size, logical.get(i));
  if (i === m.selected_block) {
    ctx.strokeStyle = palette.verify; ctx.lineWidth = 3; ctx.strokeRect(x + 1.5, y + 1.5, size - 3, size - 3);
  }
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
  // The requests drawn highlighted: a pinned shared block's holders, else the pinned/hovered request.
  function activeRequests(m) {
    const block = model.get("selected_block");
    if (block >= 0 && block < (m.num_blocks || 0)) return holdersOf(m, block);
    const request = active();
    return request ? [request] : [];
  }

  function statusText(m) {
    const s = m.summary || {};
    if (m.step < 0) return L("waiting");
    const parts = [`${L("step")} ${m.step}`,
      `${L("usage")} ${lkFmt(s.kv_cache_usage_perc)}%`, `${L("waste")} ${lkFmt(s.kv_waste_perc)}%`];
    if (m.kv_layout === "contiguous") {
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

  const tableLine = (m, request) => `${request} · ${L("block_table")}: ` +
    ((m.block_tables || {})[request] || []).map((b, i) => `${i}→${b}`).join("  ");

  // Lines under the map: the pinned shared block and every holder's table, or one request's.
  function infoLines(m) {
    const request = active();
    const contiguous = m.kv_layout === "contiguous";
    const block = model.get("selected_block");
    if (!contiguous && block >= 0 && block < (m.num_blocks || 0)) {
      const holders = holdersOf(m, block);
      return [`${L("block")} #${block} · ${L("ref_cnt")} ${m.ref_cnt[block]} · ${L("holders")}: ${holders.join(", ")}`,
        ...holders.map((rid) => tableLine(m, rid))];
    }
    if (!request) return [L(contiguous ? "hint_contiguous" : "hint")];
    if (contiguous) {
      const r = m.regions.find((x) => x.request_id === request);
      if (!r) return [request];
      return [`${request} · ${L("region")} [${r.start}, ${r.start + r.reserved}) · ` +
        `${L("used")} ${r.used} · ${L("needed")} ${r.needed} · ${L("reserved")} ${r.reserved}`];
    }
    return [tableLine(m, request)];
  }

  function draw() {
    const m = readState(model);
    m.selected_block = model.get("selected_block");
    refreshSlider();
    header.title.textContent = L("title");
    header.status.textContent = statusText(m);
    el.dataset.step = String(m.step);
    legendBox.replaceChildren(lkLegend(legendItems()));
    info.replaceChildren(...infoLines(m).map((line) => lkEl("div", "lk-info-line", line)));
    const width = lkWidth(el) - 18;
    const contiguous = m.kv_layout === "contiguous";
    geo = contiguous ? arenaGeometry(width, m.num_blocks * m.block_size) : pagedGeometry(width, m.num_blocks);
    canvas.dataset.cell = String(geo.cell || 0);
    canvas.dataset.cols = String(geo.cols || 0);
    const ctx = lkSize(canvas, width, Math.max(geo.height, 1));
    const requests = activeRequests(m);
    if (contiguous) { drawArena(ctx, m, geo, requests[0] || ""); return; }
    const logical = activeTable(m, requests);
    for (let i = 0; i < m.num_blocks; i++) drawBlock(ctx, m, geo, i, logical, requests.length > 0);
  }

  // What is under the mouse: {lines for the tooltip, request id or ""}, or null.
  function pick(x, y) {
    if (!geo || x < 0 || y < 0) return null;
    const m = readState(model);
    if (geo.kind === "paged") {
      const i = Math.floor(y / geo.cell) * geo.cols + Math.floor(x / geo.cell);
      if (Math.floor(x / geo.cell) >= geo.cols || i >= m.num_blocks) return null;
      const owner = m.owner[i];
      const holders = holdersOf(m, i);
      return { request: owner || "", block: i, shared: (m.ref_cnt[i] || 0) > 1, lines: [
        `${L("block")} #${i}`, `${L("owner")}: ${holders.length > 1 ? holders.join(", ") : (owner || L("free"))}`,
        `${L("slots")}: ${m.filled[i]}/${m.block_size}`,
        `${L("ref_cnt")}: ${m.ref_cnt[i]}`,
        `${L("prefix_cached")}: ${m.cached[i] ? L("yes") : L("no")}`] };
    }
    const row = Math.floor(y / (geo.rowH + geo.gap));
    if (y - row * (geo.rowH + geo.gap) > geo.rowH) return null;
    const slot = row * geo.perRow + Math.floor(x / geo.pxPerSlot);
    const total = m.num_blocks * m.block_size;
    if (slot >= total || Math.floor(x / geo.pxPerSlot) >= geo.perRow) return null;
    const r = m.regions.find((q) => slot >= q.start && slot < q.start + q.reserved);
    if (r) {
      return { request: r.request_id, lines: [`${L("owner")}: ${r.request_id}`,
        `${L("start")}: ${r.start}`, `${L("reserved")}: ${r.reserved}`,
        `${L("used")}: ${r.used}`, `${L("needed")}: ${r.needed}`] };
    }
    const [lo, hi] = holeAround(m.regions, slot, total);
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
    if (hit && hit.shared) {   // a shared block: pin the block, list every holder
      const again = model.get("selected_block") === hit.block;
      model.set("selected_block", again ? -1 : hit.block);
      model.set("selected", "");
    } else {
      const request = hit ? hit.request : "";
      model.set("selected_block", -1);
      model.set("selected", model.get("selected") === request ? "" : request);
    }
    model.save_changes();
  });

  return lkWatch(model, el, ["step", "kv_layout", "block_size", "num_blocks", "owner", "filled",
    "ref_cnt", "cached", "block_tables", "regions", "colors", "summary", "selected", "selected_block",
    "frames", "labels", "palette", "history_steps", "cursor", "peak_index", "pinned", "running"], draw);
}

export default { render };
