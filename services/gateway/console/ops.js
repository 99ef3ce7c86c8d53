// Operations, for admin keys: GET /admin/stats (refreshed every few seconds), the audit log's
// newest entries (GET /admin/audit), a backup (POST /admin/backup) and GET /version.

import { get, post } from "./api.js";
import { announce, errorBox, fill, formatBytes, formatNumber, formatTime, h, table } from "./dom.js";

const REFRESH_MS = 5000;
const AUDIT_ROWS = 25;

function card(label, value, note) {
  return h("div", { class: "card" }, h("dt", {}, label), h("dd", {}, value, note ? h("span", { class: "muted small-text" }, note) : ""));
}

function cards(stats) {
  const g = stats.global;
  const cache = stats.embedding_cache;
  const lookups = cache.hits + cache.misses;
  return [
    card("Vector stores", formatNumber(g.vector_stores)),
    card("Files", formatNumber(g.files), formatBytes(g.file_bytes)),
    card("Chunks", formatNumber(g.chunks), `${formatNumber(g.vectors)} vectors`),
    card("Jobs pending", formatNumber(g.jobs.pending), `${formatNumber(g.jobs.leased)} leased`),
    card(
      "Cache hit rate",
      lookups ? `${(cache.hit_rate * 100).toFixed(1)} %` : "–",
      `${formatNumber(cache.hits)} hits · ${formatNumber(cache.misses)} misses${cache.enabled ? "" : " · off"}`,
    ),
    card("Database", formatBytes(g.db_bytes), `WAL ${formatBytes(g.wal_bytes)}`),
    card("Disk free", formatBytes(g.disk?.free_bytes), g.disk?.full ? "FULL: writes refused" : ""),
    card("Audit entries", formatNumber(g.audit_entries)),
  ];
}

function perStore(stats) {
  if (!stats.vector_stores.length) return h("p", { class: "empty" }, "No vector stores.");
  return table(
    "Vector stores",
    ["Vector store", "Model", "Files", "Chunks", "Vectors", "Vector slots", "Size"],
    stats.vector_stores.map((s) => [
      h("a", { href: `#/stores/${s.id}` }, s.name || s.id),
      `${s.embedding_model.name} (${s.embedding_model.dimensions})`,
      formatNumber(s.files),
      formatNumber(s.chunks),
      formatNumber(s.vectors),
      formatNumber(s.vector_slots),
      formatBytes(s.usage_bytes),
    ]),
  );
}

function auditTable(entries) {
  if (!entries.length) return h("p", { class: "empty" }, "No entries yet.");
  return table(
    "Audit log",
    ["When", "Key", "Operation", "Vector store", "Latency", "Outcome"],
    entries.map((e) => [
      h("time", { title: formatTime(e.at) }, new Date(e.at * 1000).toLocaleTimeString()),
      e.key || "–",
      h("span", {}, e.operation, e.detail ? h("span", { class: "muted" }, ` · ${e.detail}`) : ""),
      e.vector_store_id || "–",
      `${e.latency_ms.toFixed(1)} ms`,
      e.error_code
        ? h("span", { class: "failed" }, e.error_code)
        : e.operation === "search"
          ? `${e.result_count} of k=${e.k}`
          : "ok",
    ]),
  );
}

function backupForm() {
  const path = h("input", { id: "backup-path", placeholder: "ragd-<UTC time>.db", autocomplete: "off" });
  const said = h("p", { class: "status", role: "status" }, " ");
  const button = h("button", { type: "submit" }, "Back up now");
  const form = h(
    "form",
    { class: "inline-form" },
    h("div", { class: "field" }, h("label", { for: "backup-path" }, "File name (optional)"), path),
    button,
    said,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    button.disabled = true;
    fill(said, "Backing up…");
    try {
      const done = await post("/admin/backup", path.value.trim() ? { path: path.value.trim() } : {});
      fill(said, `Written ${done.path}: ${formatBytes(done.bytes)} in ${done.seconds} s`);
      announce("Backup written");
    } catch (error) {
      fill(said, errorBox(error));
    } finally {
      button.disabled = false;
    }
  });
  return form;
}

function versions(info) {
  const model = (info.embedders || []).map((e) => e.model || e.error).filter(Boolean).join(", ");
  return `ragd ${info.version} · store schema ${info.store?.schema_version ?? "?"} · ${model}`;
}

export async function opsPage(main, signal) {
  const heading = h("h1", { tabindex: "-1" }, "Operations");
  let stats;
  try {
    stats = await get("/admin/stats", {}, signal);
  } catch (error) {
    if (error.status !== 403) throw error;
    fill(main, heading, h("p", { class: "error", role: "alert" }, "Operations need an admin API key. The server said: ", h("q", {}, error.message)));
    return;
  }
  const info = await get("/version", {}, signal).catch(() => null);
  if (signal.aborted) return;
  const overview = h("dl", { class: "cards" }, cards(stats));
  const stores = h("div", {}, perStore(stats));
  const audit = h("div", {});
  const updated = h("p", { class: "muted small-text" });
  const stamp = () => fill(updated, `Updated ${new Date().toLocaleTimeString()}, every ${REFRESH_MS / 1000} s`);
  const loadAudit = async () => {
    try {
      fill(audit, auditTable((await get("/admin/audit", { limit: AUDIT_ROWS }, signal)).data));
    } catch (error) {
      if (!signal.aborted) fill(audit, errorBox(error));
    }
  };
  stamp();
  fill(
    main,
    heading,
    info ? h("p", { class: "muted" }, versions(info)) : "",
    h("section", { "aria-labelledby": "stats-heading" }, h("h2", { id: "stats-heading" }, "Stats"), overview, updated),
    h("section", { class: "panel", "aria-labelledby": "backup-heading" }, h("h2", { id: "backup-heading" }, "Backup"), backupForm()),
    h("section", { "aria-labelledby": "per-store-heading" }, h("h2", { id: "per-store-heading" }, "Vector stores"), stores),
    h(
      "section",
      { "aria-labelledby": "audit-heading" },
      h("div", { class: "section-head" }, h("h2", { id: "audit-heading" }, `Audit log (newest ${AUDIT_ROWS})`), h("button", { type: "button", class: "secondary small", onclick: loadAudit }, "Refresh")),
      audit,
    ),
  );
  await loadAudit();
  refresh(signal, async () => {
    const fresh = await get("/admin/stats", {}, signal);
    fill(overview, cards(fresh));
    fill(stores, perStore(fresh));
    stamp();
  });
}

/** Jobs pending and the cache move while ingest runs: the stats again every few seconds while
 * the page is shown (each read is an audit entry of its own: no faster than that). */
async function refresh(signal, update) {
  while (!signal.aborted) {
    await new Promise((resolve) => window.setTimeout(resolve, REFRESH_MS));
    if (signal.aborted) return;
    if (document.visibilityState !== "visible") continue;
    try {
      await update();
    } catch {
      // Shown stale until the next try; the page stays usable.
    }
  }
}
