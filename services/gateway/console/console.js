// The console's shell: hash routes (#/stores, #/stores/<id>, #/search/<id>, #/chat/<id>, #/ops),
// so a reload keeps the page, and the API key form shown on a 401.

import { apiKey, onUnauthorized, setApiKey } from "./api.js";
import { chatPage } from "./chat.js";
import { announce, errorBox, fill, h } from "./dom.js";
import { opsPage } from "./ops.js";
import { searchPage } from "./search.js";
import { storePage, storesPage } from "./stores.js";

const ROUTES = [
  [/^#\/stores\/?$/, "stores", storesPage],
  [/^#\/stores\/([\w.-]+)$/, "stores", storePage],
  [/^#\/search(?:\/([\w.-]+))?$/, "search", searchPage],
  [/^#\/chat(?:\/([\w.-]+))?$/, "chat", chatPage],
  [/^#\/ops$/, "ops", opsPage],
];

const main = document.getElementById("main");
let current = null;
let asking = false;

/** The page the hash names: #/<page>[/<id>][?<params>]. */
function route() {
  const [path, query] = (location.hash || "#/stores").split("?", 2);
  for (const [pattern, section, view] of ROUTES) {
    const match = path.match(pattern);
    if (match) return { section, view, id: match[1], params: new URLSearchParams(query || "") };
  }
  return null;
}

/** Shows the page the hash names; the previous page's polling stops. */
async function render() {
  if (!location.hash) history.replaceState(null, "", "#/stores");
  const found = route();
  if (!found) {
    // An in-page link (the skip link's #main) leaves the page as it is; an unknown page, or
    // such a link on a fresh load, shows the stores.
    if (current && !location.hash.startsWith("#/")) return;
    location.replace("#/stores");
    return;
  }
  if (current) current.abort();
  current = new AbortController();
  const { signal } = current;
  asking = false;
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.section === found.section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  fill(main, h("p", { class: "muted" }, "Loading…"));
  try {
    await found.view(main, signal, found.id, found.params);
  } catch (error) {
    if (signal.aborted || asking) return;
    fill(main, h("h1", { tabindex: "-1" }, "Something went wrong"), errorBox(error));
  }
  if (!signal.aborted) {
    // A new page is said by its heading (focused unless the page put the focus in itself,
    // as the search box does) and by the tab's title.
    const heading = main.querySelector("h1");
    if (heading && !main.contains(document.activeElement)) heading.focus({ preventScroll: true });
    document.title = heading ? `${heading.textContent} · ragd console` : "ragd console";
  }
}

function showKeyState() {
  const key = apiKey();
  fill(document.getElementById("key-state"), key ? "API key set" : "No API key");
  document.getElementById("forget-key").hidden = !key;
}

/** The key form, in place of the page that needed it; the page is shown again once set. */
function askForKey(error) {
  if (asking) return;
  asking = true;
  if (current) current.abort();
  const input = h("input", {
    id: "api-key",
    type: "password",
    autocomplete: "off",
    spellcheck: false,
    required: true,
  });
  const form = h(
    "form",
    { class: "panel key-form" },
    h("label", { for: "api-key" }, "API key"),
    input,
    h("p", { class: "hint" }, "Kept in this browser tab only (sessionStorage), sent with each request as a Bearer token."),
    h("button", { type: "submit" }, "Use this key"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    setApiKey(input.value.trim());
    showKeyState();
    announce("API key set");
    render();
  });
  document.title = "API key · ragd console";
  fill(
    main,
    h("h1", { tabindex: "-1" }, "This ragd needs an API key"),
    h("p", {}, apiKey() ? "The server refused the key: " : "The server said: ", h("q", {}, error.message)),
    form,
  );
  input.focus();
}

onUnauthorized(askForKey);
// The skip link moves the focus without touching the hash (which names the page).
document.querySelector(".skip").addEventListener("click", (event) => {
  event.preventDefault();
  main.focus();
});
document.getElementById("forget-key").addEventListener("click", () => {
  setApiKey("");
  showKeyState();
  announce("API key forgotten");
  render();
});
window.addEventListener("hashchange", render);
showKeyState();
render();
