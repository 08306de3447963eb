// The Chat page: conversations kept in this browser (localStorage), a question POSTed to /v1/turns
// (its SSE read with fetch streaming: the first event names the turn), and the turn's card drawn from
// the snapshots of /v1/turns/{id}/card: tool lines, the muted thought, the answer as markdown, the
// footer, approval buttons while a tool waits, a Stop button until the card is final.
"use strict";

const CHAT = { conversations: [], current: "", views: new WeakMap() };
const FINAL = ["done", "failed", "stopped"];

function chatKey() {
  return "botgateway.conversations." + (BG.session ? BG.session.principal : "");
}

function chatLoad() {
  try {
    CHAT.conversations = JSON.parse(localStorage.getItem(chatKey()) || "[]");
  } catch (e) {
    CHAT.conversations = [];
  }
  if (!Array.isArray(CHAT.conversations)) CHAT.conversations = [];
}

function chatSave() {
  localStorage.setItem(chatKey(), JSON.stringify(CHAT.conversations.slice(0, 50)));
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
    open.addEventListener("click", () => { CHAT.current = conv.id; chatList(); chatThread(); });
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

/** The view of one question and its card; reattaches to a card that was not final when last seen. */
function chatTurnView(turn) {
  const known = CHAT.views.get(turn);
  if (known) {
    chatRender(known, turn.snapshot || { status: "queued", blocks: [] });
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
  const view = { root, card, turn, source: null };
  CHAT.views.set(turn, view);
  if (turn.snapshot) chatRender(view, turn.snapshot);
  else chatRender(view, { status: "queued", blocks: [], answer: "" });
  if (turn.turnId && !(turn.snapshot && FINAL.includes(turn.snapshot.status))) chatFollow(view);
  return view;
}

function chatToolLine(block) {
  const line = document.createElement("div");
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
  else if (block.status === "done") state = block.duration_s != null ? t("tool_done", { s: Number(block.duration_s).toFixed(1) }) : t("status_done");
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
  badge.textContent = t("status_" + status) + (status === "queued" && snap.queue_position ? " · " + t("queued_at", { n: snap.queue_position }) : "");
  head.appendChild(badge);
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
  for (const block of snap.blocks || []) {
    if (block.type === "tool" || block.call_id !== undefined) {
      card.appendChild(chatToolLine(block));
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
    answer.appendChild(renderMarkdown(snap.answer));
    if (status === "streaming") {
      const cursor = document.createElement("span");
      cursor.className = "cursor";
      cursor.textContent = "▍";
      // At the end of the last block's text (a paragraph, a list item, a cell), not below it.
      let host = answer;
      while (host.lastElementChild && !["STRONG", "EM", "CODE", "A", "SPAN", "BR"].includes(host.lastElementChild.tagName)) {
        host = host.lastElementChild;
      }
      host.appendChild(cursor);
    }
    card.appendChild(answer);
  }
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
}

async function chatStop(view, button) {
  button.disabled = true;
  const response = await bgFetch("/v1/turns/" + encodeURIComponent(view.turn.turnId) + "/stop", { method: "POST" });
  if (!response.ok) {
    bgError(t("request_failed", { reason: await bgReason(response) }));
    button.disabled = false;
  }
}

function chatSnapshot(view, snap) {
  view.turn.snapshot = snap;
  chatRender(view, snap);
  const thread = document.getElementById("thread");
  thread.scrollTop = thread.scrollHeight;
  if (FINAL.includes(snap.status)) {
    if (view.source) view.source.close();
    view.source = null;
    chatSave();
  }
}

/** Follow the turn's card: the snapshots of /v1/turns/{id}/card, until a final one. */
function chatFollow(view, attempt) {
  if (view.source) return;
  const source = new EventSource("/v1/turns/" + encodeURIComponent(view.turn.turnId) + "/card");
  view.source = source;
  source.addEventListener("snapshot", (event) => {
    try { chatSnapshot(view, JSON.parse(event.data)); } catch (e) { /* a malformed event: wait for the next */ }
  });
  source.addEventListener("error", () => {
    if (source.readyState !== EventSource.CLOSED) return;  // the browser reconnects by itself
    view.source = null;
    const snap = view.turn.snapshot;
    const n = attempt || 0;
    if ((!snap || !FINAL.includes(snap.status)) && n < 5 && !view.ended) {
      setTimeout(() => chatFollow(view, n + 1), 300 * (n + 1));
    }
  });
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
      if (!data.length) continue;
      let parsed = null;
      try { parsed = JSON.parse(data.join("\n")); } catch (e) { continue; }
      onEvent(kind, parsed);
    }
  }
}

async function chatAsk(question) {
  let conv = chatCurrent();
  if (!conv) {
    conv = { id: chatNewId(), title: "", turns: [] };
    CHAT.conversations.unshift(conv);
    CHAT.current = conv.id;
  }
  if (!conv.title) conv.title = question.slice(0, 60);
  const turn = { question, turnId: "", snapshot: null };
  conv.turns.push(turn);
  chatSave();
  chatList();
  const view = chatTurnView(turn);
  document.getElementById("thread").appendChild(view.root);
  let response;
  try {
    response = await bgFetch("/v1/turns", {
      method: "POST",
      // The card's fixed words (stopped, the footer) in the console's language.
      headers: { "Content-Type": "application/json", "Accept": "text/event-stream", "Accept-Language": bgLocale() },
      body: JSON.stringify({ question, conversation: conv.id }),
    });
  } catch (e) {
    chatSnapshot(view, { status: "failed", error: t("connection_lost") });
    return;
  }
  if (!response.ok) {
    chatSnapshot(view, { status: "failed", error: t("request_failed", { reason: await bgReason(response) }) });
    return;
  }
  let failure = "";
  try {
    await chatReadEvents(response, (kind, data) => {
      if (kind === "turn" && data.turn_id) {
        turn.turnId = data.turn_id;
        chatSave();
        chatRender(view, turn.snapshot || { status: "working", blocks: [] });
        chatFollow(view);
      } else if (kind === "error") {
        failure = data.message || data.reason || "error";
      }
    });
  } catch (e) {
    failure = failure || t("connection_lost");
  }
  view.ended = true;
  // The card's own stream brings the final snapshot; without one (no card), say how the turn ended.
  if (failure && !(turn.snapshot && FINAL.includes(turn.snapshot.status))) {
    chatSnapshot(view, Object.assign({}, turn.snapshot || {}, { status: "failed", error: failure }));
  }
}

function bgChatSetup() {
  chatLoad();
  CHAT.current = CHAT.conversations.length ? CHAT.conversations[0].id : "";
  document.getElementById("new-conversation").addEventListener("click", () => {
    CHAT.current = "";
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
