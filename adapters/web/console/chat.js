// The Chat page: conversations kept in this browser (localStorage), a question POSTed to /v1/turns with
// {"snapshots": true}, and its card drawn from that one stream: the first event names the turn, then
// each `snapshot` (the card as /v1/turns/{id}/card would send it) redraws tool lines, the muted thought,
// the answer as markdown, the footer, approval buttons while a tool waits, a Stop button until final.
// A stream that ends without a final snapshot (a card kept by another worker or replica, a dropped
// connection) is settled from GET /v1/turns/{id}, which any replica answers from the shared Store.
// The turn's pictures (charts) come below the answer, loaded from the gateway's own /console/artifacts/
// (never from a URL in the model's text), sized to the card, in the theme shown. What a card offers beside
// its answer (its time, each call's details, Copy, Ask again, 👍 / 👎) is chat_answers.js's; Ask again
// streams its new card here like a question.
"use strict";

const CHAT = { conversations: [], current: "", views: new WeakMap() };
const CHAT_PICTURES = "/console/artifacts/";
const FINAL = ["done", "failed", "stopped"];
const CHAT_KEY_PREFIX = "botgateway.conversations.";
const CHAT_MAX_CONVERSATIONS = 50;
const CHAT_MAX_TURNS = 50;
const CHAT_MAX_ERROR_CHARS = 500;
const CHAT_RESOLVE_TRIES = 12;

function chatKey() {
  return CHAT_KEY_PREFIX + (BG.session ? BG.session.principal : "");
}

/** A turn as kept in memory from what was saved (or an older save's full snapshot). */
function chatTurnFrom(saved) {
  const snap = saved && typeof saved.snapshot === "object" && saved.snapshot ? saved.snapshot : {};
  return {
    question: String(saved && saved.question || ""),
    turnId: String(saved && saved.turnId || ""),
    status: String(saved && saved.status || snap.status || "queued"),
    answer: String(saved && saved.answer || snap.answer || ""),
    error: String(saved && saved.error || snap.error || ""),
    at: Number(saved && saved.at) || 0,
    snapshot: null,
  };
}

function chatLoad() {
  let saved = [];
  try {
    saved = JSON.parse(localStorage.getItem(chatKey()) || "[]");
  } catch (e) {
    saved = [];
  }
  if (!Array.isArray(saved)) saved = [];
  CHAT.conversations = saved
    .filter((c) => c && typeof c.id === "string")
    .slice(0, CHAT_MAX_CONVERSATIONS)
    .map((c) => ({
      id: c.id,
      title: String(c.title || ""),
      turns: (Array.isArray(c.turns) ? c.turns : []).slice(-CHAT_MAX_TURNS).map(chatTurnFrom),
    }));
}

/** What is saved of a turn: its question, its status and final answer (or error), its id and time; never the
 * card. */
function chatStored(turn) {
  const kept = { question: turn.question, turnId: turn.turnId, status: turn.status, answer: turn.answer };
  if (turn.at) kept.at = turn.at;
  if (turn.error) kept.error = turn.error.slice(0, CHAT_MAX_ERROR_CHARS);
  return kept;
}

function chatQuotaError(e) {
  return !!e && (e.name === "QuotaExceededError" || e.name === "NS_ERROR_DOM_QUOTA_REACHED" || e.code === 22);
}

/** Drop the oldest of `saved` (the last conversation, or the only one's first turn); false when nothing is left. */
function chatDropOldest(saved) {
  if (saved.length > 1) {
    saved.pop();
    return true;
  }
  if (saved.length === 1 && saved[0].turns.length > 1) {
    saved[0].turns.shift();
    return true;
  }
  return false;
}

/** Save the conversations (the newest 50, their last 50 turns each); a full storage drops the oldest and retries.
 * Saving never fails the page: without room even for the newest turn, nothing is saved. */
function chatSave() {
  CHAT.conversations = CHAT.conversations.slice(0, CHAT_MAX_CONVERSATIONS);
  for (const conv of CHAT.conversations) {
    if (conv.turns.length > CHAT_MAX_TURNS) conv.turns = conv.turns.slice(-CHAT_MAX_TURNS);
  }
  const saved = CHAT.conversations.map((c) => ({ id: c.id, title: c.title, turns: c.turns.map(chatStored) }));
  for (;;) {
    try {
      localStorage.setItem(chatKey(), JSON.stringify(saved));
      return;
    } catch (e) {
      if (chatQuotaError(e) && chatDropOldest(saved)) continue;
      try { localStorage.removeItem(chatKey()); } catch (ignored) { /* storage unusable: keep nothing */ }
      return;
    }
  }
}

/** Forget every conversation saved in this browser (on logout: the next user of the browser sees none). */
function chatForget() {
  CHAT.conversations = [];
  CHAT.current = "";
  try {
    for (let i = localStorage.length - 1; i >= 0; i--) {
      const key = localStorage.key(i);
      if (key && key.startsWith(CHAT_KEY_PREFIX)) localStorage.removeItem(key);
    }
  } catch (e) { /* storage unusable: nothing saved */ }
}

function chatNewId() {
  const bytes = new Uint8Array(8);
  crypto.getRandomValues(bytes);
  return "web-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function chatCurrent() {
  return CHAT.conversations.find((c) => c.id === CHAT.current) || null;
}

function chatList() {
  const list = document.getElementById("conversation-list");
  list.replaceChildren();
  for (const conv of CHAT.conversations) {
    const li = document.createElement("li");
    li.classList.toggle("active", conv.id === CHAT.current);
    const open = document.createElement("button");
    open.type = "button";
    open.className = "link conversation-title";
    open.textContent = conv.title || conv.id;
    open.addEventListener("click", () => { CHAT.current = conv.id; bgLayoutClose(); chatList(); chatThread(); });
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "link muted delete";
    remove.title = t("delete_conversation");
    remove.textContent = "×";
    remove.addEventListener("click", () => chatDelete(conv.id));
    li.append(open, remove);
    list.appendChild(li);
  }
  document.getElementById("no-conversations").hidden = CHAT.conversations.length > 0;
}

async function chatDelete(id) {
  const response = await bgFetch("/v1/conversations/" + encodeURIComponent(id), { method: "DELETE" });
  if (!response.ok && response.status !== 404) {
    bgError(t("request_failed", { reason: await bgReason(response) }));
    return;
  }
  CHAT.conversations = CHAT.conversations.filter((c) => c.id !== id);
  if (CHAT.current === id) CHAT.current = CHAT.conversations.length ? CHAT.conversations[0].id : "";
  chatSave();
  chatList();
  chatThread();
}

function chatThread() {
  const thread = document.getElementById("thread");
  thread.replaceChildren();
  const conv = chatCurrent();
  if (!conv) return;
  for (const turn of conv.turns) {
    thread.appendChild(chatTurnView(turn).root);
  }
  thread.scrollTop = thread.scrollHeight;
}

/** What the card shows of `turn`: its live snapshot, else what was saved of it. */
function chatTurnSnap(turn) {
  return turn.snapshot || { status: turn.status, blocks: [], answer: turn.answer, error: turn.error };
}

/** The view of one question and its card; a turn not final when last saved, and not streaming in this page
 * (the page was reloaded), is settled from GET /v1/turns/{id}. */
function chatTurnView(turn) {
  const known = CHAT.views.get(turn);
  if (known) {
    chatRender(known, chatTurnSnap(turn));
    return known;
  }
  const root = document.createElement("div");
  root.className = "turn";
  const question = document.createElement("div");
  question.className = "question";
  question.textContent = turn.question;
  const card = document.createElement("div");
  card.className = "card";
  root.append(question, card);
  const view = { root, card, turn };
  CHAT.views.set(turn, view);
  chatRender(view, chatTurnSnap(turn));
  if (!turn.live && !FINAL.includes(turn.status)) {
    // Its stream was closed (the page reloaded), which stops a turn: its record says how it ended.
    if (turn.turnId) chatResolve(view);
    else chatSettle(view, { status: "failed", error: t("connection_lost") });
  }
  return view;
}

/** A tool call's line (the summary of its details: chat_answers.js opens it). */
function chatToolLine(block) {
  const line = document.createElement("summary");
  line.className = "tool-line";
  line.dataset.status = block.status;
  const dot = document.createElement("span");
  dot.className = "dot";  // coloured by the line's status (CSS): no emoji font needed
  const name = document.createElement("code");
  name.textContent = block.name;
  line.append(dot, name);
  if (block.args_preview) {
    const args = document.createElement("span");
    args.className = "muted";
    args.textContent = " " + block.args_preview;
    line.appendChild(args);
  }
  let state = "";
  if (block.status === "running") state = t("tool_running");
  else if (block.status === "waiting") state = t("tool_waiting");
  else if (block.status === "done") {
    state = block.duration_s != null ? t("tool_done", { s: Number(block.duration_s).toFixed(1) }) : t("status_done");
  }
  else state = t("tool_failed");
  const details = [state, block.summary, block.freshness, block.approval].filter(Boolean).join(" · ");
  line.appendChild(document.createTextNode(" — " + details));
  return line;
}

function chatApprovals(view, approvals) {
  const box = document.createElement("div");
  box.className = "approvals";
  for (const prompt of approvals) {
    const row = document.createElement("div");
    row.className = "approval";
    const what = document.createElement("div");
    const tool = document.createElement("code");
    tool.textContent = prompt.tool;
    what.append(tool, " " + t("approval_asks") + " (" + prompt.code + ")");
    const args = document.createElement("pre");
    args.textContent = prompt.arguments;
    const approve = document.createElement("button");
    approve.type = "button";
    approve.className = "approve";
    approve.textContent = t("approve");
    const deny = document.createElement("button");
    deny.type = "button";
    deny.className = "deny";
    deny.textContent = t("deny");
    approve.addEventListener("click", () => chatDecide(prompt, true, row));
    deny.addEventListener("click", () => chatDecide(prompt, false, row));
    row.append(what, args, approve, deny);
    box.appendChild(row);
  }
  return box;
}

async function chatDecide(prompt, approve, row) {
  for (const button of row.querySelectorAll("button")) button.disabled = true;
  const response = await bgFetch("/v1/approvals/" + encodeURIComponent(prompt.code), {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ approve, token: prompt.token }),
  });
  if (!response.ok) {
    bgError(t("request_failed", { reason: await bgReason(response) }));
    for (const button of row.querySelectorAll("button")) button.disabled = false;
  }
}

/** One picture's image (light, or dark) sized to the card with its aspect kept; on a failed load, its words. */
function chatPictureImage(picture, url, theme) {
  const img = document.createElement("img");
  img.className = "chart-" + theme;
  img.alt = picture.alt || picture.title || "";
  img.title = picture.title || "";
  if (picture.width > 0 && picture.height > 0) {
    img.width = picture.width;
    img.height = picture.height;
  }
  img.decoding = "async";
  img.addEventListener("error", () => {
    const figure = img.closest(".chart");
    if (!figure) return;
    const words = document.createElement("div");
    words.className = "chart-note muted";
    words.textContent = "📈 " + [picture.title, picture.alt].filter(Boolean).join(" · ");
    figure.replaceChildren(words);
  });
  img.src = url;
  return img;
}

/** The view's figure for `picture`: made once per picture and state, so a redraw keeps a loaded image. */
function chatPicture(view, picture) {
  if (!view.pictures) view.pictures = new Map();
  const key = picture.ref + "|" + picture.state + "|" + (picture.url || "");
  const known = view.pictures.get(picture.ref);
  if (known && known.key === key) return known.node;
  let node;
  if (picture.state === "shown" && typeof picture.url === "string" && picture.url.startsWith(CHAT_PICTURES)) {
    node = document.createElement("figure");
    node.className = "chart";
    node.dataset.ref = picture.ref;
    node.appendChild(chatPictureImage(picture, picture.url, "light"));
    const dark = typeof picture.dark_url === "string" && picture.dark_url.startsWith(CHAT_PICTURES);
    if (dark) node.appendChild(chatPictureImage(picture, picture.dark_url, "dark"));
    node.classList.toggle("has-dark", dark);
  } else if (picture.state === "failed") {
    node = document.createElement("div");
    node.className = "chart-note error";
    node.textContent = picture.note || picture.error || picture.title || "";
  } else {
    return null;  // on its way, or placed beside the card: nothing to draw yet
  }
  view.pictures.set(picture.ref, { key, node });
  return node;
}

function chatPictures(view, pictures) {
  const box = document.createElement("div");
  box.className = "charts";
  for (const picture of pictures) {
    if (!picture || typeof picture.ref !== "string") continue;
    const node = chatPicture(view, picture);
    if (node) box.appendChild(node);
  }
  return box.childElementCount ? box : null;
}

/** Draw `snap` (a full card snapshot) into the view's card. */
function chatRender(view, snap) {
  const card = view.card;
  const status = snap.status || "working";
  card.dataset.status = status;
  card.replaceChildren();
  const head = document.createElement("div");
  head.className = "card-head";
  const badge = document.createElement("span");
  badge.className = "card-status";
  const place = status === "queued" && snap.queue_position ? " · " + t("queued_at", { n: snap.queue_position }) : "";
  badge.textContent = t("status_" + status) + place;
  head.appendChild(badge);
  if (view.turn.at) head.appendChild(answersTime(view.turn.at));
  if (!FINAL.includes(status) && view.turn.turnId) {
    const stop = document.createElement("button");
    stop.type = "button";
    stop.className = "stop";
    stop.textContent = t("stop");
    stop.addEventListener("click", () => chatStop(view, stop));
    head.appendChild(stop);
  }
  card.appendChild(head);
  if (snap.preamble) {
    const pre = document.createElement("div");
    pre.className = "md preamble";
    pre.appendChild(renderMarkdown(snap.preamble));
    card.appendChild(pre);
  }
  let calls = 0;
  for (const block of snap.blocks || []) {
    if (block.type === "tool" || block.call_id !== undefined) {
      card.appendChild(answersToolCall(view, block, calls++, chatToolLine(block), FINAL.includes(status)));
    } else {
      const narration = document.createElement("div");
      narration.className = "narration md muted";
      narration.appendChild(renderMarkdown(block.text || ""));
      card.appendChild(narration);
    }
  }
  if (snap.thought) {
    const thought = document.createElement("div");
    thought.className = "thought muted";
    thought.textContent = snap.thought;
    card.appendChild(thought);
  }
  if (snap.approvals && snap.approvals.length) card.appendChild(chatApprovals(view, snap.approvals));
  if (snap.answer) {
    const answer = document.createElement("div");
    answer.className = "answer md";
    answer.appendChild(renderMarkdown(snap.answer, status === "streaming"));
    if (status === "streaming") {
      const cursor = document.createElement("span");
      cursor.className = "cursor";
      cursor.textContent = "▍";
      // At the end of the last block's text (a paragraph, a list item, a cell), not below it.
      let host = answer;
      const inline = ["STRONG", "EM", "CODE", "A", "SPAN", "BR"];
      while (host.lastElementChild && !inline.includes(host.lastElementChild.tagName)) {
        host = host.lastElementChild;
      }
      host.appendChild(cursor);
    }
    card.appendChild(answer);
  }
  const pictures = Array.isArray(snap.artifacts) ? chatPictures(view, snap.artifacts) : null;
  if (pictures) card.appendChild(pictures);
  if (snap.error) {
    const error = document.createElement("div");
    error.className = "card-error error";
    error.textContent = snap.error;
    card.appendChild(error);
  }
  if (snap.footer) {
    const footer = document.createElement("div");
    footer.className = "card-footer muted";
    footer.textContent = snap.footer;
    card.appendChild(footer);
  }
  if (snap.answer && FINAL.includes(status)) card.appendChild(answersActions(view, snap));
}

/** Draw the view's card again from what its turn shows now (a vote's note, a reason asked for). */
function chatRedraw(view) {
  chatRender(view, chatTurnSnap(view.turn));
}

async function chatStop(view, button) {
  button.disabled = true;
  const response = await bgFetch("/v1/turns/" + encodeURIComponent(view.turn.turnId) + "/stop", { method: "POST" });
  if (!response.ok) {
    bgError(t("request_failed", { reason: await bgReason(response) }));
    button.disabled = false;
  }
}

/** Show `snap` (a card snapshot, or a final state made from the turn's last event or record) on the card. */
function chatSnapshot(view, snap) {
  const turn = view.turn;
  if (snap.at) turn.at = snap.at;  // when its record says it ended
  else if (FINAL.includes(snap.status) && !FINAL.includes(turn.status)) turn.at = Date.now();  // answered now
  turn.snapshot = snap;
  turn.status = snap.status || "working";
  turn.answer = snap.answer || "";
  turn.error = snap.error || "";
  chatRender(view, snap);
  if (view.root.isConnected) {
    const thread = document.getElementById("thread");
    thread.scrollTop = thread.scrollHeight;
  }
  if (FINAL.includes(turn.status)) chatSave();
}

/** The card's last state with `changes` on top (a final state learnt without a final snapshot). */
function chatSettle(view, changes) {
  chatSnapshot(view, Object.assign({}, chatTurnSnap(view.turn), { approvals: [], thought: "" }, changes));
}

/** The card's final state from the turn's record (GET /v1/turns/{id}), which any replica answers from the Store
 * once the turn ended (202 while it runs or before its record is written: asked again a little later). A card
 * already final is redrawn from the record only when `always`. */
async function chatResolve(view, always) {
  const turn = view.turn;
  if (turn.resolving || (!always && FINAL.includes(turn.status))) return;
  turn.resolving = true;
  try {
    for (let n = 0; n < CHAT_RESOLVE_TRIES; n++) {
      if (n) await new Promise((resolve) => setTimeout(resolve, 250 * n));
      let response;
      try {
        response = await bgFetch("/v1/turns/" + encodeURIComponent(turn.turnId));
      } catch (e) {
        continue;  // the gateway restarting: ask again
      }
      if (response.status === 202) continue;
      if (!response.ok) {
        const reason = await bgReason(response);
        if (!FINAL.includes(turn.status)) {
          chatSettle(view, { status: "failed", error: t("request_failed", { reason }) });
        }
        return;
      }
      const record = await response.json();
      const stopped = ["stopped", "moved"].includes(record.outcome);
      const status = record.outcome === "done" ? "done" : stopped ? "stopped" : "failed";
      const at = record.started_at ? Math.round((record.started_at + (record.duration_s || 0)) * 1000) : 0;
      chatSettle(view, { status, answer: record.answer || turn.answer, error: status === "done" ? "" : turn.error, at });
      return;
    }
  } finally {
    turn.resolving = false;
  }
}

/** The turn's stream ended without a final snapshot (its card kept by another worker or replica, or the
 * stream cut short): show how it ended from its last event, then from its record. */
async function chatFinish(view, last) {
  const turn = view.turn;
  if (last && last.kind === "done") {
    const result = last.data.result || {};
    chatSettle(view, { status: "done", answer: result.answer || turn.answer, error: "" });
  } else if (last && last.kind === "error") {
    const stopped = last.data.reason === "cancelled";
    chatSettle(view, { status: stopped ? "stopped" : "failed", answer: last.data.partial_answer || turn.answer,
                       error: last.data.message || last.data.reason || "error" });
  }
  if (turn.turnId) await chatResolve(view, true);
  if (!FINAL.includes(turn.status)) chatSettle(view, { status: "failed", error: t("connection_lost") });
}

/** Read the SSE body of `response`, calling `onEvent(kind, data)` for each message. */
async function chatReadEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const message = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let kind = "message";
      const data = [];
      for (const line of message.split("\n")) {
        if (line.startsWith("event:")) kind = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (!data.length) continue;  // a keep-alive comment
      let parsed = null;
      try { parsed = JSON.parse(data.join("\n")); } catch (e) { continue; }
      onEvent(kind, parsed);
    }
  }
}

/** POST `body` to `url` (a question to /v1/turns, or an answer's Refresh) and follow the one stream it answers
 * (the turn's events and card snapshots) until it ends; returns the last `done`/`error` event as {kind, data},
 * or null when the stream broke before one. */
async function chatStream(view, url, body) {
  const turn = view.turn;
  let response;
  try {
    response = await bgFetch(url, {
      method: "POST",
      // The card's fixed words (stopped, the footer) in the console's language.
      headers: { "Content-Type": "application/json", "Accept": "text/event-stream", "Accept-Language": bgLocale() },
      body: JSON.stringify(body),
    });
  } catch (e) {
    return { kind: "error", data: { message: t("connection_lost") } };
  }
  if (!response.ok) {
    return { kind: "error", data: { message: t("request_failed", { reason: await bgReason(response) }) } };
  }
  let last = null;
  try {
    await chatReadEvents(response, (kind, data) => {
      if (kind === "turn" && data.turn_id) {
        turn.turnId = data.turn_id;
        turn.status = data.status === "queued" ? "queued" : "working";
        chatSave();
        if (!turn.snapshot) chatRender(view, { status: turn.status, blocks: [], queue_position: data.position });
      } else if (kind === "snapshot") {
        if (!data.turn_id || !turn.turnId || data.turn_id === turn.turnId) chatSnapshot(view, data);
      } else if (kind === "tool_call_started" || kind === "tool_call_finished") {
        answersNoteCall(view, data);
      } else if (kind === "done" || kind === "error") {
        last = { kind, data };
      }
    });
  } catch (e) {
    /* the connection broke: the record tells how the turn ended */
  }
  return last;
}

/** The conversation a question goes to (the one shown, else a new one), first in the list from now on. */
function chatConversationFor(question) {
  let conv = chatCurrent();
  if (!conv) {
    conv = { id: chatNewId(), title: "", turns: [] };
    CHAT.current = conv.id;
  }
  if (!conv.title) conv.title = question.slice(0, 60);
  CHAT.conversations = [conv, ...CHAT.conversations.filter((c) => c !== conv)];
  return conv;
}

/** Add a new turn asking `question` to `conv` (first in the list from now on), shown when `conv` is, and follow
 * its stream from `url` until its card is final. */
async function chatRun(conv, question, url, body) {
  const turn = { question, turnId: "", status: "queued", answer: "", error: "", snapshot: null, live: true,
                 at: Date.now() };
  conv.turns.push(turn);
  CHAT.conversations = [conv, ...CHAT.conversations.filter((c) => c !== conv)];
  chatSave();
  chatList();
  const view = chatTurnView(turn);
  if (CHAT.current === conv.id) {
    const thread = document.getElementById("thread");
    thread.appendChild(view.root);
    thread.scrollTop = thread.scrollHeight;
  }
  let last = null;
  try {
    last = await chatStream(view, url, body);
  } finally {
    turn.live = false;
  }
  if (!FINAL.includes(turn.status)) await chatFinish(view, last);
}

async function chatAsk(question) {
  const conv = chatConversationFor(question);
  await chatRun(conv, question, "/v1/turns", { question, conversation: conv.id, snapshots: true });
}

/** Ask the answer of `view` again (its Refresh), as a new turn of its conversation. */
async function chatRefresh(view) {
  const conv = CHAT.conversations.find((c) => c.turns.includes(view.turn)) || chatCurrent();
  if (!conv || !view.turn.turnId) return;
  const url = "/console/answers/" + encodeURIComponent(view.turn.turnId) + "/refresh";
  await chatRun(conv, view.turn.question, url, {});
}

function bgChatSetup() {
  chatLoad();
  CHAT.current = CHAT.conversations.length ? CHAT.conversations[0].id : "";
  document.getElementById("new-conversation").addEventListener("click", () => {
    CHAT.current = "";
    bgLayoutClose();
    chatList();
    chatThread();
    document.getElementById("question").focus();
  });
  const form = document.getElementById("ask-form");
  const input = document.getElementById("question");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const question = input.value.trim();
    if (!question) return;
    input.value = "";
    chatAsk(question);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
}

function bgChatShow() {
  chatList();
  chatThread();
}
