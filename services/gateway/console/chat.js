// The chat playground: a conversation (POST /v1/conversations) whose turns are streamed
// responses (POST /v1/responses, stream: true) with file_search over the chosen stores; the
// passages it found, those the answer cited marked; the conversations, to resume or search.

import { all, del, get, post, stream } from "./api.js";
import { announce, errorBox, fill, formatTime, h, highlight } from "./dom.js";

const CHOSEN = "ragd.chatStores";
// OpenAI: one or two vector stores per file_search tool.
const MAX_STORES = 2;
const RESULTS = "file_search_call.results";

function text(item) {
  return (item.content || [])
    .map((part) => part.text || "")
    .join("");
}

function passages(results, cited, query) {
  return h(
    "ol",
    { class: "passages" },
    (results || []).map((result) =>
      h(
        "li",
        { class: cited.has(result.file_id) ? "passage cited" : "passage", "data-file": result.file_id },
        h(
          "div",
          { class: "result-head" },
          h("span", { class: "filename" }, result.filename),
          h("span", { class: "score" }, `score ${Number(result.score).toFixed(3)}`),
          h("span", { class: "cited-mark" }, cited.has(result.file_id) ? "cited" : ""),
        ),
        h("p", { class: "chunk" }, highlight(result.text, query)),
      ),
    ),
  );
}

/** A file_search_call item: what was searched and the passages found. */
function searchTurn(item, cited = new Set()) {
  const found = item.results || [];
  const queries = (item.queries || []).join(" · ");
  return h(
    "li",
    { class: "turn search" },
    h(
      "details",
      { open: true },
      h(
        "summary",
        {},
        item.status === "completed" ? `Searched “${queries}”: ${found.length} passage${found.length === 1 ? "" : "s"}` : "Searching…",
      ),
      passages(found, cited, queries),
    ),
  );
}

function sources(annotations) {
  const seen = new Map();
  for (const note of annotations || []) seen.set(note.file_id, note.filename);
  if (!seen.size) return h("p", { class: "sources" });
  return h("p", { class: "sources" }, "Cited: ", [...seen.values()].join(", "));
}

function messageTurn(role, body, annotations) {
  return h(
    "li",
    { class: `turn ${role}` },
    h("span", { class: "who" }, role === "user" ? "You" : "Assistant"),
    h("p", { class: "text" }, body),
    role === "assistant" ? sources(annotations) : "",
  );
}

/** A conversation's items as turns, cited passages marked. */
function transcript(items) {
  const turns = [];
  for (const [index, item] of items.entries()) {
    if (item.type === "message") {
      const annotations = (item.content || []).flatMap((part) => part.annotations || []);
      turns.push(messageTurn(item.role, text(item), annotations));
    } else if (item.type === "file_search_call") {
      const reply = items.slice(index + 1).find((next) => next.type === "message" && next.role === "assistant");
      const cited = new Set((reply?.content || []).flatMap((p) => p.annotations || []).map((a) => a.file_id));
      turns.push(searchTurn(item, cited));
    }
  }
  return turns;
}

function conversationList(conversations, currentId) {
  if (!conversations.length) return h("p", { class: "empty" }, "No conversations yet.");
  return h(
    "ul",
    { class: "conversations" },
    conversations.map((c) =>
      h(
        "li",
        {},
        h(
          "a",
          { href: `#/chat/${c.id}`, "aria-current": c.id === currentId ? "page" : null },
          h("span", { class: "title" }, c.title || "(untitled)"),
          h("span", { class: "muted small-text" }, `${c.turn_count} turn${c.turn_count === 1 ? "" : "s"} · ${formatTime(c.last_active_at)}`),
        ),
      ),
    ),
  );
}

function historySearch() {
  const input = h("input", { id: "history-query", type: "search", autocomplete: "off", required: true });
  const found = h("div", { class: "history-results" });
  const form = h(
    "form",
    { class: "history-search", role: "search" },
    h("label", { for: "history-query" }, "Search conversations"),
    h("div", { class: "row" }, input, h("button", { type: "submit", class: "secondary" }, "Search")),
    found,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const page = await post("/v1/conversations/search", { query: input.value, max_num_results: 10 });
      announce(`${page.data.length} matching turn${page.data.length === 1 ? "" : "s"}`);
      fill(
        found,
        page.data.length
          ? h(
              "ul",
              { class: "conversations" },
              page.data.map((hit) =>
                h("li", {}, h("a", { href: `#/chat/${hit.conversation_id}` }, h("span", { class: "snippet-text" }, highlight(text(hit.item).slice(0, 160), input.value)))),
              ),
            )
          : h("p", { class: "empty" }, "No turn matches."),
      );
    } catch (error) {
      fill(found, errorBox(error));
    }
  });
  return form;
}

function storeChoice(stores, preferred) {
  const boxes = stores.map((store) =>
    h("input", { type: "checkbox", id: `chat-store-${store.id}`, value: store.id, checked: preferred.includes(store.id) }),
  );
  const limit = () => {
    const count = boxes.filter((box) => box.checked).length;
    for (const box of boxes) box.disabled = !box.checked && count >= MAX_STORES;
    sessionStorage.setItem(CHOSEN, JSON.stringify(boxes.filter((box) => box.checked).map((box) => box.value)));
  };
  boxes.forEach((box) => box.addEventListener("change", limit));
  limit();
  // Two stores of one name are told apart by their ids.
  const names = stores.map((store) => store.name || store.id);
  const label = (store, i) =>
    names.indexOf(names[i]) === names.lastIndexOf(names[i]) ? names[i] : `${names[i]} (${store.id})`;
  const fieldset = h(
    "fieldset",
    { class: "chat-stores" },
    h("legend", {}, `Search in (file_search, up to ${MAX_STORES})`),
    stores.length
      ? stores.map((store, i) => h("label", { class: "check" }, boxes[i], ` ${label(store, i)}`))
      : h("span", { class: "hint" }, "No vector stores: the model answers without file_search."),
  );
  return { fieldset, chosen: () => boxes.filter((box) => box.checked).map((box) => box.value) };
}

export async function chatPage(main, signal, conversationId, params) {
  const [stores, conversations, items] = await Promise.all([
    all("/v1/vector_stores"),
    get("/v1/conversations", { limit: 30 }).then((page) => page.data),
    conversationId
      ? all(`/v1/conversations/${conversationId}/items`, { order: "asc", include: RESULTS }, 500)
      : Promise.resolve([]),
  ]);
  if (signal.aborted) return;
  let current = conversationId;
  const preferred = params.get("store") ? [params.get("store")] : JSON.parse(sessionStorage.getItem(CHOSEN) || "[]");
  const choice = storeChoice(stores, preferred);
  const turns = h("ol", { class: "transcript", "aria-label": "Conversation" }, transcript(items));
  const status = h("p", { class: "status", role: "status" }, " ");
  const problem = h("div", { class: "chat-problem" });
  const message = h("textarea", { id: "chat-message", rows: 3, required: true });
  const send = h("button", { type: "submit" }, "Send");
  const composer = h(
    "form",
    { class: "composer" },
    h("label", { for: "chat-message" }, "Message"),
    message,
    h("div", { class: "row" }, send, status),
  );
  message.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) composer.requestSubmit();
  });
  composer.addEventListener("submit", async (event) => {
    event.preventDefault();
    const input = message.value.trim();
    if (!input) return;
    fill(problem);
    send.disabled = true;
    let created = false;
    let streaming = false;
    let asked = null;
    try {
      if (!current) {
        current = (await post("/v1/conversations", {})).id;
        created = true;
      }
      const body = { conversation: current, input, stream: true, include: [RESULTS] };
      const ids = choice.chosen();
      // Every turn with stores chosen searches them (the model writes the queries).
      if (ids.length) Object.assign(body, { tools: [{ type: "file_search", vector_store_ids: ids }], tool_choice: "required" });
      asked = turns.appendChild(messageTurn("user", input));
      message.value = "";
      let searching = null;
      let reply = null;
      let answer = null;
      const cited = new Set();
      fill(status, "Thinking…");
      await stream("/v1/responses", body, (event) => {
        streaming = true;
        const item = event.item || {};
        if (event.type === "response.output_item.added" && item.type === "file_search_call") {
          searching = turns.appendChild(searchTurn(item));
          fill(status, "Searching…");
        } else if (event.type === "response.output_item.done" && item.type === "file_search_call") {
          const done = searchTurn(item);
          if (searching) searching.replaceWith(done);
          else turns.append(done);
          searching = done;
        } else if (event.type === "response.output_item.added" && item.type === "message") {
          reply = turns.appendChild(messageTurn("assistant", ""));
          answer = reply.querySelector(".text");
          fill(status, "Answering…");
        } else if (event.type === "response.output_text.delta") {
          answer.append(event.delta);
        } else if (event.type === "response.output_text.annotation.added") {
          cited.add(event.annotation.file_id);
          reply.querySelector(".sources").replaceWith(sources([...cited].map((id) => ({ file_id: id, filename: searching?.querySelector(`[data-file="${CSS.escape(id)}"] .filename`)?.textContent || id }))));
          for (const passage of searching?.querySelectorAll(".passage") || []) {
            if (cited.has(passage.dataset.file)) {
              passage.classList.add("cited");
              fill(passage.querySelector(".cited-mark"), "cited");
            }
          }
        } else if (event.type === "response.completed" || event.type === "response.incomplete") {
          const cut = event.response.incomplete_details?.reason;
          fill(status, cut ? `Stopped: ${cut.replace(/_/g, " ")}` : "Done");
          announce("Answer complete");
        } else if (event.type === "error") {
          fill(problem, errorBox(event));
          fill(status, "Failed");
        }
      }, signal);
      if (created) history.replaceState(null, "", `#/chat/${current}`);
      // The turn changed the list (a new conversation, its title, the order).
      const listed = await get("/v1/conversations", { limit: 30 });
      recent.replaceChildren(conversationList(listed.data, current));
    } catch (error) {
      if (signal.aborted) return;
      // Refused before it started (e.g. no chat model configured): an empty conversation made
      // for this turn is not kept.
      if (created && !streaming) {
        await del(`/v1/conversations/${current}`).catch(() => {});
        current = null;
      }
      fill(problem, errorBox(error));
      fill(status, " ");
      if (!streaming) {
        asked?.remove();
        message.value = input;
      }
    } finally {
      send.disabled = false;
    }
  });
  const fresh = h("a", { class: "button secondary", href: "#/chat" }, "New conversation");
  const recent = h("div", {}, conversationList(conversations, conversationId));
  fill(
    main,
    h("h1", { tabindex: "-1" }, "Chat"),
    h(
      "div",
      { class: "chat-layout" },
      h(
        "aside",
        { class: "panel chat-side", "aria-label": "Conversations" },
        fresh,
        historySearch(),
        h("h2", {}, "Recent conversations"),
        recent,
      ),
      h(
        "section",
        { class: "chat-main", "aria-label": "Conversation" },
        choice.fieldset,
        items.length || conversationId ? "" : h("p", { class: "hint" }, "Ask a question about the files in the chosen stores; the answer is streamed with the passages it was given."),
        turns,
        problem,
        composer,
      ),
    ),
  );
}
