// Adding files to a vector store: drop files or a folder (or pick them), each uploaded with
// POST /v1/files, attached with POST /v1/vector_stores/{id}/files (attributes and chunking
// as set in the form), then followed until completed or failed. Each file has a row of fixed
// height from the start, so nothing moves while they progress.

import { ApiError, del, get, post, request, upload } from "./api.js";
import { announce, fill, formatBytes, h } from "./dom.js";

// Files uploaded at once; the rest wait their turn.
const PARALLEL = 2;
const MAX_ATTRIBUTES = 16;

/** The form's attribute rows and chunking choice, as the API's JSON (or an Error). */
function options(attributeRows, chunking) {
  const attributes = {};
  for (const row of attributeRows.querySelectorAll(".attribute-row")) {
    const [key, kind, value] = ["key", "kind", "value"].map((n) => row.querySelector(`[name=${n}]`).value);
    if (!key.trim()) continue;
    if (kind === "number") {
      const number = Number(value);
      if (value.trim() === "" || !Number.isFinite(number)) {
        throw new Error(`attribute “${key}”: “${value}” is not a number`);
      }
      attributes[key.trim()] = number;
    } else if (kind === "boolean") attributes[key.trim()] = value === "true";
    else attributes[key.trim()] = value;
  }
  const body = {};
  if (Object.keys(attributes).length) body.attributes = attributes;
  if (chunking.querySelector("[value=static]").checked) {
    const size = Number(chunking.querySelector("[name=max_chunk_size_tokens]").value);
    const overlap = Number(chunking.querySelector("[name=chunk_overlap_tokens]").value);
    body.chunking_strategy = {
      type: "static",
      static: { max_chunk_size_tokens: size, chunk_overlap_tokens: overlap },
    };
  }
  return body;
}

function attributeRow() {
  const id = `attr-${Math.random().toString(36).slice(2, 8)}`;
  const kind = h(
    "select",
    { name: "kind", id: `${id}-kind` },
    h("option", { value: "string" }, "text"),
    h("option", { value: "number" }, "number"),
    h("option", { value: "boolean" }, "true/false"),
  );
  const row = h(
    "div",
    { class: "attribute-row" },
    h("label", { for: `${id}-key` }, "Key"),
    h("input", { id: `${id}-key`, name: "key", maxLength: 64, autocomplete: "off" }),
    h("label", { for: `${id}-kind` }, "Type"),
    kind,
    h("label", { for: `${id}-value` }, "Value"),
    h("input", { id: `${id}-value`, name: "value", maxLength: 512, autocomplete: "off" }),
    h(
      "button",
      { type: "button", class: "secondary small", "aria-label": "Remove this attribute", onclick: () => row.remove() },
      "Remove",
    ),
  );
  return row;
}

/** Files of a dropped folder, recursively, with their paths; hidden files left out. */
async function entryFiles(entry, found) {
  if (entry.name.startsWith(".")) return;
  if (entry.isFile) {
    const file = await new Promise((resolve, reject) => entry.file(resolve, reject));
    found.push({ file, path: entry.fullPath.replace(/^\//, "") });
    return;
  }
  const reader = entry.createReader();
  for (;;) {
    const batch = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
    if (!batch.length) return;
    for (const child of batch) await entryFiles(child, found);
  }
}

class Row {
  constructor(path, size) {
    this.path = path;
    this.progress = h("progress", { max: 1, value: 0, "aria-label": `${path}: progress` });
    this.state = h("span", { class: "state" }, "queued");
    this.detail = h("span", { class: "detail" }, " ");
    this.element = h(
      "li",
      { class: "upload-row" },
      h("span", { class: "name", title: path }, path),
      h("span", { class: "size muted" }, formatBytes(size)),
      this.progress,
      this.state,
      this.detail,
    );
    this.fileId = null;
    this.done = false;
  }

  set(state, detail, value) {
    fill(this.state, state);
    this.element.dataset.state = state;
    if (detail !== undefined) {
      fill(this.detail, detail || " ");
      this.detail.title = detail || "";
    }
    if (value === null) this.progress.removeAttribute("value");
    else if (value !== undefined) this.progress.value = value;
  }
}

export function uploadPanel(storeId, signal, changed) {
  const queue = h("ol", { class: "queue", "aria-label": "Uploads" });
  // Each file's end is announced (live region); the tally is for the eye.
  const tally = h("p", { class: "status tally" }, " ");
  const problem = h("p", { class: "status", role: "alert" });
  const attributeRows = h("div", { class: "attribute-rows" });
  const chunking = h(
    "fieldset",
    { class: "chunking" },
    h("legend", {}, "Chunking"),
    h("label", {}, h("input", { type: "radio", name: "chunking", value: "auto", checked: true }), " auto"),
    h("label", {}, h("input", { type: "radio", name: "chunking", value: "static" }), " static:"),
    h("label", { for: "max-chunk" }, "max tokens"),
    h("input", { id: "max-chunk", name: "max_chunk_size_tokens", type: "number", min: 100, max: 4096, value: 200 }),
    h("label", { for: "chunk-overlap" }, "overlap"),
    h("input", { id: "chunk-overlap", name: "chunk_overlap_tokens", type: "number", min: 0, max: 2048, value: 50 }),
  );
  const rows = [];
  const waiting = [];
  let active = 0;
  let polling = false;
  let pollMs = 1000;

  function showTally() {
    const finished = rows.filter((row) => row.done);
    const failed = finished.filter((row) => row.element.dataset.state !== "completed").length;
    fill(
      tally,
      rows.length
        ? `${finished.length} of ${rows.length} files done${failed ? `, ${failed} failed` : ""}`
        : " ",
    );
  }

  function finish(row, file, chunks) {
    row.done = true;
    if (file.status === "completed") {
      row.set("completed", `${chunks} chunk${chunks === 1 ? "" : "s"}`, 1);
      announce(`${row.path} completed`);
    } else {
      const why = file.last_error ? `${file.last_error.code}: ${file.last_error.message}` : file.status;
      row.set(file.status, why, 1);
      announce(`${row.path} ${file.status}`);
    }
    showTally();
    changed();
  }

  async function settle(row) {
    const { data, headers } = await request("GET", `/v1/vector_stores/${storeId}/files/${row.fileId}`);
    pollMs = Math.min(5000, Math.max(250, Number(headers.get("openai-poll-after-ms")) || 1000));
    if (data.status === "in_progress") return;
    let chunks = "?";
    if (data.status === "completed") {
      const content = await get(`/v1/vector_stores/${storeId}/files/${row.fileId}/content`);
      chunks = content.data.length;
    }
    finish(row, data, chunks);
  }

  // One loop for every file being indexed: a GET per file while few are, else the list of
  // the store's files in progress and a GET only for those that left it.
  async function poll() {
    if (polling) return;
    polling = true;
    try {
      for (;;) {
        const pending = rows.filter((row) => row.fileId && !row.done);
        if (!pending.length || signal.aborted) return;
        await new Promise((resolve) => window.setTimeout(resolve, pollMs));
        let settled = pending;
        if (pending.length > 10) {
          const busy = new Set();
          let after;
          for (let page = 0; page < 10; page += 1) {
            const found = await get(`/v1/vector_stores/${storeId}/files`, { filter: "in_progress", limit: 100, after });
            for (const file of found.data) busy.add(file.id);
            if (!found.has_more) break;
            after = found.last_id;
          }
          settled = pending.filter((row) => !busy.has(row.fileId));
        }
        await Promise.all(settled.map((row) => settle(row).catch(() => {})));
      }
    } finally {
      polling = false;
    }
  }

  async function send(row, file, body) {
    try {
      row.set("uploading", "", 0);
      const form = new FormData();
      form.append("purpose", "assistants");
      form.append("file", file, row.path);
      const uploaded = await upload("/v1/files", form, (fraction) => row.set("uploading", undefined, fraction * 0.9));
      row.set("attaching", "", 0.9);
      const attached = await post(`/v1/vector_stores/${storeId}/files`, { file_id: uploaded.id, ...body })
        .catch(async (error) => {
          // Refused (a chunking size out of range, say): the upload is not left behind.
          await del(`/v1/files/${uploaded.id}`).catch(() => {});
          throw error;
        });
      // The same bytes already in the store come back as that file.
      row.fileId = attached.id;
      row.set("indexing", "", null);
      changed();
      poll();
    } catch (error) {
      row.done = true;
      row.set("failed", error instanceof ApiError ? error.message : String(error), 1);
      announce(`${row.path} failed`);
      showTally();
    }
  }

  function pump() {
    while (active < PARALLEL && waiting.length) {
      const [row, file, body] = waiting.shift();
      active += 1;
      send(row, file, body).finally(() => {
        active -= 1;
        pump();
      });
    }
  }

  function add(files) {
    fill(problem);
    if (!files.length) return;
    let body;
    try {
      body = options(attributeRows, chunking);
    } catch (error) {
      fill(problem, error.message);
      return;
    }
    for (const { file, path } of files) {
      const row = new Row(path, file.size);
      rows.push(row);
      queue.append(row.element);
      waiting.push([row, file, body]);
    }
    announce(`${files.length} file${files.length === 1 ? "" : "s"} added`);
    showTally();
    pump();
  }

  const picker = h("input", { id: "file-input", type: "file", multiple: true, class: "file-input" });
  const folder = h("input", { id: "folder-input", type: "file", multiple: true, webkitdirectory: true, class: "file-input" });
  for (const input of [picker, folder]) {
    input.addEventListener("change", () => {
      const files = [...input.files].map((file) => ({ file, path: file.webkitRelativePath || file.name }));
      // A picked folder's hidden files (.DS_Store, .git/...) stay out, as in a dropped one.
      add(files.filter(({ path }) => !path.split("/").some((part) => part.startsWith("."))));
      input.value = "";
    });
  }
  const zone = h(
    "div",
    { class: "dropzone" },
    h("p", {}, "Drop files or a folder here, or"),
    // Each input before its label: the input takes the focus, its label shows it (CSS).
    picker,
    h("label", { for: "file-input", class: "button secondary" }, "Choose files…"),
    folder,
    h("label", { for: "folder-input", class: "button secondary" }, "Choose a folder…"),
    h("p", { class: "hint" }, ".txt .md .rst .html .json .csv .pdf"),
  );
  zone.addEventListener("dragover", (event) => {
    event.preventDefault();
    zone.classList.add("over");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", async (event) => {
    event.preventDefault();
    zone.classList.remove("over");
    const entries = [...event.dataTransfer.items].map((item) => item.webkitGetAsEntry && item.webkitGetAsEntry());
    if (entries.every(Boolean)) {
      const found = [];
      for (const entry of entries) await entryFiles(entry, found);
      add(found);
    } else add([...event.dataTransfer.files].map((file) => ({ file, path: file.name })));
  });
  const addAttribute = h("button", { type: "button", class: "secondary small" }, "Add attribute");
  addAttribute.addEventListener("click", () => {
    if (attributeRows.children.length < MAX_ATTRIBUTES) attributeRows.append(attributeRow());
    attributeRows.lastElementChild.querySelector("input").focus();
  });
  attributeRows.append(attributeRow());
  return h(
    "section",
    { class: "panel", "aria-labelledby": "upload-heading" },
    h("h2", { id: "upload-heading" }, "Add files"),
    h(
      "div",
      { class: "upload-options" },
      h("fieldset", {}, h("legend", {}, "Attributes of the files"), attributeRows, addAttribute),
      chunking,
    ),
    zone,
    problem,
    tally,
    queue,
  );
}
