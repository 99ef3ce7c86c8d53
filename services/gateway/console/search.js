// The search playground: POST /v1/vector_stores/{id}/search from a form, the results with the
// query's words marked, and the same request as curl and Python to copy.

import { all, get, post } from "./api.js";
import { announce, attributeChips, copyButton, errorBox, fill, h, highlight } from "./dom.js";
import { curl, pythonSearch } from "./snippets.js";

const OPERATORS = ["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"];

/** The attribute keys of a store's files (its first 100), each with the type of its values. */
async function attributeKeys(storeId) {
  const files = await get(`/v1/vector_stores/${storeId}/files`, { limit: 100 });
  const keys = new Map();
  for (const file of files.data) {
    for (const [key, value] of Object.entries(file.attributes || {})) {
      if (!keys.has(key)) keys.set(key, { type: typeof value, values: new Set() });
      keys.get(key).values.add(String(value));
    }
  }
  return keys;
}

function typed(text, type) {
  if (type === "number") return Number(text);
  if (type === "boolean") return text === "true";
  return text;
}

function filterRow(keys, index) {
  const id = `filter-${index}`;
  const key = h(
    "select",
    { id: `${id}-key`, name: "key" },
    [...keys.keys()].map((name) => h("option", { value: name }, name)),
  );
  const operator = h("select", { id: `${id}-op`, name: "op" }, OPERATORS.map((op) => h("option", { value: op }, op)));
  const values = h("datalist", { id: `${id}-values` });
  const value = h("input", { id: `${id}-value`, name: "value", list: `${id}-values`, autocomplete: "off" });
  const fillValues = () => {
    const known = keys.get(key.value);
    fill(values, known ? [...known.values].slice(0, 50).map((v) => h("option", { value: v })) : []);
  };
  key.addEventListener("change", fillValues);
  fillValues();
  const row = h(
    "div",
    { class: "filter-row" },
    h("label", { for: `${id}-key` }, "Attribute"),
    key,
    h("label", { for: `${id}-op` }, "Comparison"),
    operator,
    h("label", { for: `${id}-value` }, "Value"),
    value,
    values,
    h("button", { type: "button", class: "secondary small", "aria-label": "Remove this filter", onclick: () => row.remove() }, "Remove"),
  );
  return row;
}

/** The filter rows as OpenAI's filter object (a comparison, or and/or of several). */
function filters(rows, keys, combine) {
  const comparisons = [];
  for (const row of rows.querySelectorAll(".filter-row")) {
    const key = row.querySelector("[name=key]").value;
    const type = row.querySelector("[name=op]").value;
    const text = row.querySelector("[name=value]").value;
    const kind = keys.get(key)?.type || "string";
    const value = ["in", "nin"].includes(type)
      ? text.split(",").map((part) => typed(part.trim(), kind))
      : typed(text, kind);
    comparisons.push({ type, key, value });
  }
  if (comparisons.length <= 1) return comparisons[0];
  return { type: combine, filters: comparisons };
}

function ranks(hit) {
  if (!hit.ranks) return "";
  const one = (name) => `${name} ${hit.ranks[name] ? `#${hit.ranks[name]}` : "–"}`;
  return h(
    "span",
    { class: "ranks", title: "This chunk's rank in the vector list and in the lexical list (– : not found there)" },
    `${one("vector")} · ${one("lexical")}`,
  );
}

function results(page, query) {
  const head = h(
    "p",
    { class: "result-summary" },
    `${page.data.length} result${page.data.length === 1 ? "" : "s"}`,
    page.mode ? ` · ranked by ${page.mode}` : "",
    page.degraded ? h("strong", { class: "failed" }, " · degraded: the embedder was unavailable, lexical results") : "",
  );
  if (!page.data.length) return [head, h("p", { class: "empty" }, "Nothing matched.")];
  const list = h(
    "ol",
    { class: "results" },
    page.data.map((hit, index) =>
      h(
        "li",
        { class: "result" },
        h(
          "div",
          { class: "result-head" },
          h("span", { class: "rank" }, `${index + 1}`),
          h("span", { class: "filename" }, hit.filename),
          h("span", { class: "score" }, `score ${hit.score.toFixed(4)}`),
          ranks(hit),
        ),
        h("div", { class: "result-meta muted" }, h("span", { class: "mono" }, hit.file_id), " ", attributeChips(hit.attributes)),
        hit.content.map((part) => h("p", { class: "chunk" }, highlight(part.text, query))),
      ),
    ),
  );
  return [head, list];
}

export async function searchPage(main, signal, storeId) {
  const stores = await all("/v1/vector_stores");
  if (signal.aborted) return;
  if (!stores.length) {
    fill(main, h("h1", { tabindex: "-1" }, "Search"), h("p", { class: "empty" }, "No vector stores yet: ", h("a", { href: "#/stores" }, "create one"), " first."));
    return;
  }
  let keys = new Map();
  const store = h(
    "select",
    { id: "search-store", name: "store" },
    stores.map((s) => h("option", { value: s.id, selected: s.id === storeId }, `${s.name || s.id} (${s.file_counts.completed} files)`)),
  );
  const query = h("input", { id: "search-query", type: "search", required: true, maxLength: 4096, autocomplete: "off" });
  const mode = h(
    "select",
    { id: "search-mode" },
    h("option", { value: "" }, "default (hybrid)"),
    ["hybrid", "vector", "lexical"].map((m) => h("option", { value: m }, m)),
  );
  const k = h("input", { id: "search-k", type: "number", min: 1, max: 50, value: 10 });
  const threshold = h("input", { id: "search-threshold", type: "number", min: 0, max: 1, step: 0.05, value: 0 });
  const combine = h("select", { id: "filter-combine" }, h("option", { value: "and" }, "all of"), h("option", { value: "or" }, "any of"));
  const filterRows = h("div", { class: "filter-rows" });
  const addFilter = h("button", { type: "button", class: "secondary small" }, "Add filter");
  const noKeys = h("span", { class: "hint" });
  const output = h("div", { class: "search-output" });
  const curlCode = h("code", {});
  const pythonCode = h("code", {});
  let count = 0;

  const body = () => {
    const asked = { query: query.value || "…", max_num_results: Number(k.value) || 10 };
    const filter = filters(filterRows, keys, combine.value);
    if (filter) asked.filters = filter;
    if (Number(threshold.value) > 0) asked.ranking_options = { score_threshold: Number(threshold.value) };
    if (mode.value) asked.mode = mode.value;
    return asked;
  };
  const path = () => `/v1/vector_stores/${store.value}/search`;
  const snippets = () => {
    fill(curlCode, curl("POST", path(), body()));
    fill(pythonCode, pythonSearch(store.value, body()));
  };
  const loadKeys = async () => {
    keys = await attributeKeys(store.value).catch(() => new Map());
    fill(filterRows);
    addFilter.disabled = !keys.size;
    fill(noKeys, keys.size ? "" : "This store's files have no attributes to filter on.");
    snippets();
  };
  addFilter.addEventListener("click", () => {
    filterRows.append(filterRow(keys, (count += 1)));
    filterRows.lastElementChild.querySelector("select").focus();
    snippets();
  });
  store.addEventListener("change", () => {
    history.replaceState(null, "", `#/search/${store.value}`);
    fill(output);
    loadKeys();
  });
  const form = h(
    "form",
    { class: "panel search-form", oninput: snippets, onchange: snippets, onclick: () => window.setTimeout(snippets) },
    h("div", { class: "field wide" }, h("label", { for: "search-store" }, "Vector store"), store),
    h("div", { class: "field wide" }, h("label", { for: "search-query" }, "Query"), query),
    h("div", { class: "field" }, h("label", { for: "search-mode" }, "Mode"), mode),
    h("div", { class: "field" }, h("label", { for: "search-k" }, "Results (k)"), k),
    h("div", { class: "field" }, h("label", { for: "search-threshold" }, "Score threshold"), threshold),
    h(
      "fieldset",
      { class: "filters" },
      h("legend", {}, "Filters"),
      h("div", { class: "toolbar" }, h("label", { for: "filter-combine" }, "Match"), combine, addFilter, noKeys),
      filterRows,
    ),
    h("button", { type: "submit" }, "Search"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const asked = body();
    const question = query.value;
    fill(output, h("p", { class: "muted" }, "Searching…"));
    try {
      const page = await post(path(), asked);
      fill(output, results(page, question));
      announce(`${page.data.length} result${page.data.length === 1 ? "" : "s"}`);
    } catch (error) {
      fill(output, errorBox(error));
    }
  });
  const snippetBox = h(
    "aside",
    { class: "snippets", "aria-labelledby": "snippets-heading" },
    h("h2", { id: "snippets-heading" }, "The same request"),
    h("div", { class: "snippet" }, h("div", { class: "snippet-head" }, h("h3", {}, "curl"), copyButton(() => curlCode.textContent, "curl")), h("pre", { tabindex: 0, "aria-label": "curl command" }, curlCode)),
    h("div", { class: "snippet" }, h("div", { class: "snippet-head" }, h("h3", {}, "Python (openai SDK)"), copyButton(() => pythonCode.textContent, "Python")), h("pre", { tabindex: 0, "aria-label": "Python code" }, pythonCode)),
  );
  fill(
    main,
    h("h1", { tabindex: "-1" }, "Search"),
    h(
      "div",
      { class: "split" },
      h("div", {}, form, h("section", { "aria-labelledby": "results-heading" }, h("h2", { id: "results-heading" }, "Results"), output)),
      snippetBox,
    ),
  );
  if (storeId && store.value !== storeId) fill(output, h("p", { class: "error", role: "alert" }, `No vector store ${storeId}.`));
  await loadKeys();
  query.focus();
}
