// The console's only way to the server: the public REST API of the gateway that served it,
// with the API key the user typed (kept in sessionStorage for this tab only).

const KEY = "ragd.apiKey";
// The console is served at <prefix>/console/: the API is at <prefix>/.
const BASE = new URL("../", document.baseURI);

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `the server answered HTTP ${status}`);
    this.status = status;
    this.code = error.code || null;
    this.param = error.param || null;
  }
}

let unauthorized = () => {};

/** Called with the ApiError of every 401 (the console then asks for a key). */
export function onUnauthorized(handler) {
  unauthorized = handler;
}

export function apiKey() {
  return sessionStorage.getItem(KEY) || "";
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

/** The absolute URL of an API path, for requests and for the copyable snippets. */
export function apiUrl(path, query) {
  const url = new URL(path.replace(/^\//, ""), BASE);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
  }
  return url.href;
}

function headers(extra) {
  const all = { ...extra };
  const key = apiKey();
  if (key) all.Authorization = `Bearer ${key}`;
  return all;
}

async function failure(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // Not JSON (a proxy's page): the status says enough.
  }
  const error = new ApiError(response.status, body);
  if (response.status === 401) unauthorized(error);
  return error;
}

/** One API call: resolves to {data, headers}; rejects with an ApiError. */
export async function request(method, path, { json, form, query, signal } = {}) {
  const init = { method, headers: headers(), signal };
  if (json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(json);
  } else if (form !== undefined) {
    init.body = form;
  }
  const response = await fetch(apiUrl(path, query), init);
  if (!response.ok) throw await failure(response);
  return { data: await response.json(), headers: response.headers };
}

export async function get(path, query, signal) {
  return (await request("GET", path, { query, signal })).data;
}

export async function post(path, json, signal) {
  return (await request("POST", path, { json, signal })).data;
}

export async function del(path) {
  return (await request("DELETE", path)).data;
}

/** A multipart upload with progress (fetch cannot report it): onProgress(fraction). */
export function upload(path, form, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", apiUrl(path));
    for (const [name, value] of Object.entries(headers())) xhr.setRequestHeader(name, value);
    xhr.upload.onprogress = (event) => {
      if (event.lengthComputable) onProgress(event.loaded / event.total);
    };
    xhr.onerror = () => reject(new ApiError(0, { error: { message: "the upload did not reach the server" } }));
    xhr.onload = () => {
      let body = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch {
        // Left null: the status speaks.
      }
      if (xhr.status >= 200 && xhr.status < 300) {
        resolve(body);
        return;
      }
      const error = new ApiError(xhr.status, body);
      if (xhr.status === 401) unauthorized(error);
      reject(error);
    };
    xhr.send(form);
  });
}

/** POST with "stream": true: calls onEvent(event) for each server-sent event's JSON. */
export async function stream(path, json, onEvent, signal) {
  const response = await fetch(apiUrl(path), {
    method: "POST",
    headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
    body: JSON.stringify(json),
    signal,
  });
  if (!response.ok) throw await failure(response);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    buffered += decoder.decode(value || new Uint8Array(), { stream: !done });
    let end;
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const block = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      const data = block
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).trimStart())
        .join("\n");
      if (data && data !== "[DONE]") onEvent(JSON.parse(data));
    }
    if (done) return;
  }
}

/** Every page of a list endpoint (OpenAI's envelope), up to `most` objects. */
export async function all(path, query = {}, most = 1000) {
  const found = [];
  let after;
  for (;;) {
    const page = await get(path, { limit: 100, ...query, after });
    found.push(...page.data);
    if (!page.has_more || !page.data.length || found.length >= most) return found;
    after = page.last_id;
  }
}
