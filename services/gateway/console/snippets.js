// The console's requests written out as a curl command and an OpenAI SDK call, to copy.
// The key itself is never written: both read RAGD_API_KEY from the environment.

import { apiKey, apiUrl } from "./api.js";

function shellQuote(text) {
  return `'${text.replace(/'/g, `'\\''`)}'`;
}

/** A JSON value as Python source (True, False, None; JSON's string escapes are Python's). */
export function python(value, indent = "") {
  if (value === null || value === undefined) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "number" || typeof value === "string") return JSON.stringify(value);
  const inner = `${indent}    `;
  if (Array.isArray(value)) {
    if (!value.length) return "[]";
    return `[${value.map((item) => python(item, indent)).join(", ")}]`;
  }
  const entries = Object.entries(value);
  if (!entries.length) return "{}";
  const flat = `{${entries.map(([k, v]) => `${JSON.stringify(k)}: ${python(v, indent)}`).join(", ")}}`;
  if (flat.length <= 72) return flat;
  return `{\n${entries.map(([k, v]) => `${inner}${JSON.stringify(k)}: ${python(v, inner)},`).join("\n")}\n${indent}}`;
}

export function curl(method, path, body) {
  const lines = [`curl -s${method === "GET" ? "" : ` -X ${method}`} ${shellQuote(apiUrl(path))}`];
  if (apiKey()) lines.push(`-H "Authorization: Bearer $RAGD_API_KEY"`);
  if (body !== undefined) {
    lines.push(`-H 'Content-Type: application/json'`);
    lines.push(`-d ${shellQuote(JSON.stringify(body, null, 2))}`);
  }
  return lines.join(" \\\n  ");
}

/** The OpenAI client, pointed at this gateway. */
export function client() {
  return [
    "import os",
    "",
    "from openai import OpenAI",
    "",
    "client = OpenAI(",
    `    base_url=${JSON.stringify(apiUrl("/v1").replace(/\/$/, ""))},`,
    `    api_key=os.environ.get("RAGD_API_KEY", "unused"),`,
    ")",
  ].join("\n");
}

// The search request's fields the SDK takes as arguments; the rest are ragd's extensions.
const SDK_SEARCH = ["query", "filters", "max_num_results", "ranking_options", "rewrite_query"];

export function pythonSearch(storeId, body) {
  const args = [JSON.stringify(storeId)];
  const extra = {};
  for (const [name, value] of Object.entries(body)) {
    if (SDK_SEARCH.includes(name)) args.push(`${name}=${python(value, "    ")}`);
    else extra[name] = value;
  }
  if (Object.keys(extra).length) args.push(`extra_body=${python(extra, "    ")},  # ragd's extensions`);
  const call = args.map((arg) => `    ${arg}${arg.endsWith("extensions") ? "" : ","}`).join("\n");
  return [
    client(),
    `results = client.vector_stores.search(\n${call}\n)`,
    "for hit in results:",
    "    print(round(hit.score, 3), hit.filename)",
  ].join("\n");
}
