// Building the page. Text from the server (file names, chunk text, messages) only ever
// becomes text nodes: nothing here assigns innerHTML.

/**
 * h("button", {class: "x", onclick: fn, "aria-label": "..."}, "text", child...): an element.
 * Attribute values are set as attributes or properties, children strings as text nodes.
 */
export function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "class") element.className = value;
    else if (name in element && !name.includes("-") && name !== "list" && name !== "form") {
      element[name] = value;
    } else element.setAttribute(name, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces an element's children. */
export function fill(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

const STOPWORDS = new Set(
  "a an and are as at be by do does for from how in is it of on or that the this to was what when where which who why with".split(
    " ",
  ),
);

/** The words of a query worth marking, each cut to a stem ("configuring" -> "configur"). */
export function queryTerms(query) {
  const words = (query.toLowerCase().match(/[\p{L}\p{N}_]+/gu) || []).filter(
    (word) => word.length > 1 && !STOPWORDS.has(word),
  );
  const stems = words.map((word) => word.replace(/(ing|ed|es|s|ly)$/u, "")).map(
    (stem, index) => (stem.length >= 3 ? stem : words[index]),
  );
  return [...new Set(stems)].sort((a, b) => b.length - a.length);
}

function escapeRegExp(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/**
 * The text as text nodes with <mark> around the words that start with a query term: what
 * lexical search matched, roughly (it stems English words the same way).
 */
export function highlight(text, query) {
  const fragment = document.createDocumentFragment();
  const terms = queryTerms(query || "");
  if (!terms.length) {
    fragment.append(document.createTextNode(text));
    return fragment;
  }
  const pattern = new RegExp(
    `(?<![\\p{L}\\p{N}_])(?:${terms.map(escapeRegExp).join("|")})[\\p{L}\\p{N}_]*`,
    "giu",
  );
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    fragment.append(document.createTextNode(text.slice(last, match.index)));
    fragment.append(h("mark", {}, match[0]));
    last = match.index + match[0].length;
  }
  fragment.append(document.createTextNode(text.slice(last)));
  return fragment;
}

export function formatBytes(bytes) {
  if (!Number.isFinite(bytes)) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return `${unit ? value.toFixed(value < 10 ? 1 : 0) : value} ${units[unit]}`;
}

export function formatNumber(value) {
  return Number.isFinite(value) ? value.toLocaleString("en-US") : "–";
}

/** A Unix time (seconds) as local date and time. */
export function formatTime(seconds) {
  if (!seconds) return "–";
  return new Date(seconds * 1000).toLocaleString(undefined, {
    dateStyle: "medium",
    timeStyle: "short",
  });
}

/** Said by screen readers (the page's one polite live region). */
export function announce(message) {
  const live = document.getElementById("live");
  live.textContent = "";
  // A fresh node each time, so that the same words twice are read twice.
  window.setTimeout(() => {
    live.textContent = message;
  }, 50);
}

/** An error shown in place, as an alert. */
export function errorBox(error, prefix) {
  return h("p", { class: "error", role: "alert" }, prefix ? `${prefix} ` : "", error.message);
}

/** A status badge: in_progress, completed, failed, cancelled. */
export function badge(status) {
  return h("span", { class: `badge badge-${status}` }, status.replace("_", " "));
}

/** A button that copies what `text()` returns, and says so. */
export function copyButton(text, label) {
  const button = h("button", { type: "button", class: "secondary small" }, `Copy ${label}`);
  button.addEventListener("click", async () => {
    const value = text();
    try {
      await navigator.clipboard.writeText(value);
    } catch {
      // No clipboard API outside secure contexts (plain http on another host): the old way.
      const area = h("textarea", { class: "visually-hidden", readOnly: true }, value);
      document.body.append(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    button.textContent = "Copied";
    announce(`${label} copied`);
    window.setTimeout(() => {
      button.textContent = `Copy ${label}`;
    }, 1500);
  });
  return button;
}

/** A modal confirmation (the page's <dialog>): resolves to true when confirmed. */
export function confirmAction({ title, message, action }) {
  const dialog = document.getElementById("confirm-dialog");
  fill(dialog.querySelector("h2"), title);
  fill(dialog.querySelector("p"), message);
  fill(dialog.querySelector("[value=confirm]"), action);
  dialog.returnValue = "";
  dialog.showModal();
  dialog.querySelector("[value=cancel]").focus();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "confirm"), {
      once: true,
    });
  });
}

/** A table (in a box that scrolls sideways if it must): header cells and rows of cells. */
export function table(caption, columns, rows) {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      {},
      h("caption", { class: "visually-hidden" }, caption),
      h("thead", {}, h("tr", {}, columns.map((name) => h("th", { scope: "col" }, name)))),
      h(
        "tbody",
        {},
        // Each cell names its column: narrow screens show the rows as cards (CSS), without
        // the cells that hold nothing ("–").
        rows.map((cells) =>
          h("tr", {}, cells.map((cell, i) => h("td", { "data-label": columns[i], class: cell === "–" ? "none" : null }, cell))),
        ),
      ),
    ),
  );
}

/** Attributes as small key=value chips. */
export function attributeChips(attributes) {
  const entries = Object.entries(attributes || {});
  if (!entries.length) return "–";
  return h(
    "span",
    { class: "chips" },
    entries.map(([key, value]) => h("span", { class: "chip" }, `${key}=${JSON.stringify(value)}`)),
  );
}
