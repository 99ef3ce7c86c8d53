// Vector stores: the list (create, delete) and one store's page (its files, uploads).

import { all, del, get, post } from "./api.js";
import {
  announce,
  attributeChips,
  badge,
  confirmAction,
  errorBox,
  fill,
  formatBytes,
  formatNumber,
  formatTime,
  h,
  table,
} from "./dom.js";
import { uploadPanel } from "./upload.js";

const PAGE = 20;
const STATUSES = ["in_progress", "completed", "failed", "cancelled"];

function storeName(store) {
  return store.name || store.id;
}

function model(store) {
  const used = store.embedding_model || {};
  return used.name ? `${used.name} (${used.dimensions})` : "–";
}

function counts(store) {
  const c = store.file_counts;
  return h(
    "span",
    { class: "counts" },
    `${c.completed} of ${c.total} completed`,
    c.in_progress ? `, ${c.in_progress} in progress` : "",
    c.failed ? h("span", { class: "failed" }, `, ${c.failed} failed`) : "",
    c.cancelled ? `, ${c.cancelled} cancelled` : "",
  );
}

/** Deletes a store once the user confirmed it; true if deleted. */
async function deleteStore(store) {
  const confirmed = await confirmAction({
    title: "Delete this vector store?",
    message: `“${storeName(store)}” (${store.id}) and its ${store.file_counts.total} files' chunks and vectors will be deleted. This cannot be undone.`,
    action: "Delete vector store",
  });
  if (!confirmed) return false;
  await del(`/v1/vector_stores/${store.id}`);
  announce(`Vector store ${storeName(store)} deleted`);
  return true;
}

export async function storesPage(main, signal) {
  const [stores, models] = await Promise.all([
    all("/v1/vector_stores", {}, 1000),
    get("/v1/models").then((page) => page.data, () => []),
  ]);
  if (signal.aborted) return;
  const status = h("p", { class: "status", role: "status" });
  const name = h("input", { id: "new-store-name", name: "name", required: true, maxLength: 256 });
  const choice = h(
    "select",
    { id: "new-store-model", name: "embedding_model" },
    models.map((m) => h("option", { value: m.id }, m.id)),
  );
  const form = h(
    "form",
    { class: "panel inline-form", "aria-labelledby": "create-heading" },
    h("h2", { id: "create-heading" }, "Create a vector store"),
    h("div", { class: "field" }, h("label", { for: "new-store-name" }, "Name"), name),
    models.length > 1
      ? h("div", { class: "field" }, h("label", { for: "new-store-model" }, "Embedding model"), choice)
      : "",
    h("button", { type: "submit" }, "Create"),
    status,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { name: name.value.trim() };
    if (models.length > 1) body.embedding_model = choice.value;
    try {
      const created = await post("/v1/vector_stores", body);
      announce(`Vector store ${storeName(created)} created`);
      location.hash = `#/stores/${created.id}`;
    } catch (error) {
      fill(status, errorBox(error));
    }
  });
  const rows = stores.map((store) => [
    h("a", { href: `#/stores/${store.id}` }, storeName(store)),
    counts(store),
    formatNumber(store.chunk_count),
    formatBytes(store.usage_bytes),
    model(store),
    store.vector_index || "–",
    badge(store.status),
    h(
      "button",
      {
        type: "button",
        class: "danger small",
        "aria-label": `Delete ${storeName(store)}`,
        onclick: async () => {
          try {
            if (await deleteStore(store)) storesPage(main, signal);
          } catch (error) {
            fill(status, errorBox(error));
          }
        },
      },
      "Delete",
    ),
  ]);
  fill(
    main,
    h("h1", { tabindex: "-1" }, "Vector stores"),
    form,
    stores.length
      ? table(
          "Vector stores",
          ["Name", "Files", "Chunks", "Size", "Model", "Index", "Status", "Actions"],
          rows,
        )
      : h("p", { class: "empty" }, "No vector stores yet: create one above, then drop files into it."),
  );
}

/** The page's file table: filtered by status, `PAGE` at a time, with Previous and Next. */
function filesSection(storeId, signal) {
  const state = { filter: "", cursors: [undefined], page: 0 };
  const body = h("div", { class: "files-body" });
  const filter = h(
    "select",
    { id: "file-filter" },
    h("option", { value: "" }, "All"),
    STATUSES.map((s) => h("option", { value: s }, s.replace("_", " "))),
  );
  const previous = h("button", { type: "button", class: "secondary" }, "Previous");
  const next = h("button", { type: "button", class: "secondary" }, "Next");
  const where = h("span", { class: "muted", "aria-live": "polite" });

  async function load() {
    const page = await get(
      `/v1/vector_stores/${storeId}/files`,
      { limit: PAGE, filter: state.filter, after: state.cursors[state.page], order: "desc" },
      signal,
    );
    // filename and chunk_count: ragd's extensions of the vector store file object.
    const rows = page.data.map((file) => [
      h("span", { class: "filename" }, file.filename || file.id),
      badge(file.status),
      file.status === "completed" ? formatNumber(file.chunk_count) : "–",
      formatBytes(file.usage_bytes),
      attributeChips(file.attributes),
      file.last_error ? h("span", { class: "failed wrap" }, `${file.last_error.code}: ${file.last_error.message}`) : "–",
      formatTime(file.created_at),
    ]);
    if (signal.aborted) return;
    state.cursors[state.page + 1] = page.has_more ? page.last_id : undefined;
    previous.disabled = state.page === 0;
    next.disabled = !page.has_more;
    fill(where, `Page ${state.page + 1}`);
    fill(
      body,
      rows.length
        ? table("Files", ["File", "Status", "Chunks", "Size", "Attributes", "Last error", "Added"], rows)
        : h("p", { class: "empty" }, state.filter ? `No ${state.filter.replace("_", " ")} files.` : "No files yet."),
    );
  }

  filter.addEventListener("change", () => {
    Object.assign(state, { filter: filter.value, cursors: [undefined], page: 0 });
    load();
  });
  previous.addEventListener("click", () => {
    state.page = Math.max(0, state.page - 1);
    load();
  });
  next.addEventListener("click", () => {
    state.page += 1;
    load();
  });
  const section = h(
    "section",
    { "aria-labelledby": "files-heading" },
    h("h2", { id: "files-heading" }, "Files"),
    h("div", { class: "toolbar" }, h("label", { for: "file-filter" }, "Status"), filter),
    body,
    h("div", { class: "pager" }, previous, where, next),
  );
  return { section, load };
}

function summary(store) {
  const c = store.file_counts;
  const item = (term, value) => h("div", {}, h("dt", {}, term), h("dd", {}, value));
  return [
    item("Files", `${c.total}`),
    item("Completed", `${c.completed}`),
    item("In progress", `${c.in_progress}`),
    item("Failed", `${c.failed}`),
    item("Chunks", formatNumber(store.chunk_count)),
    item("Size", formatBytes(store.usage_bytes)),
    item("Model", model(store)),
    item("Index", store.vector_index || "–"),
    item("Created", formatTime(store.created_at)),
  ];
}

export async function storePage(main, signal, storeId) {
  let store = await get(`/v1/vector_stores/${storeId}`, {}, signal);
  if (signal.aborted) return;
  const facts = h("dl", { class: "facts" }, summary(store));
  const status = h("div", { role: "status" });
  const files = filesSection(storeId, signal);
  let refreshing = null;
  // Called as uploads finish: the counts and the table, at most one refresh at a time.
  const refresh = () => {
    refreshing ||= (async () => {
      try {
        store = await get(`/v1/vector_stores/${storeId}`, {}, signal);
        fill(facts, summary(store));
        await files.load();
      } catch (error) {
        if (!signal.aborted) fill(status, errorBox(error));
      } finally {
        refreshing = null;
      }
    })();
  };
  const remove = h("button", { type: "button", class: "danger" }, "Delete vector store");
  remove.addEventListener("click", async () => {
    try {
      if (await deleteStore(store)) location.hash = "#/stores";
    } catch (error) {
      fill(status, errorBox(error));
    }
  });
  fill(
    main,
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/stores" }, "Vector stores"), " / "),
    h("h1", { tabindex: "-1" }, storeName(store)),
    h("p", { class: "muted mono" }, store.id),
    facts,
    h(
      "div",
      { class: "actions" },
      h("a", { class: "button secondary", href: `#/search/${storeId}` }, "Search this store"),
      h("a", { class: "button secondary", href: `#/chat?store=${storeId}` }, "Chat with it"),
      remove,
    ),
    status,
    uploadPanel(storeId, signal, refresh),
    files.section,
  );
  await files.load();
}
