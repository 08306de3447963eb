// What a card offers beside its answer: when it was answered (local time; the full ISO time on hover), each tool
// call opened to its arguments, its result and its sources, and for a finished answer Copy, Ask again (the
// answer's Refresh: POST /console/answers/{id}/refresh, streamed as a new card by chat.js) and 👍 / 👎, a 👎
// with an optional one-line reason (POST /console/answers/{id}/feedback, into the gateway's feedback store).
// A call's details come from the turn's own events while it runs, and from its record (GET /v1/turns/{id},
// arguments with their secrets masked by the gateway) once it ended. Every piece is text: nothing in a tool's
// arguments, summary or sources is parsed as markup.
"use strict";

const ANSWERS_SECRET_KEY = /token|secret|passw|api[_-]?key|authori[sz]ation|credential|cookie/i;
// A thumb drawn here (no emoji font needed); 👎 is the same thumb turned over (CSS).
const ANSWERS_THUMB = "M2 21h4V9H2v12zm20-11c0-1.1-.9-2-2-2h-6.31l.95-4.57.03-.32c0-.41-.17-.79-.44-1.06L14.17 1 "
  + "7.59 7.59C7.22 7.95 7 8.45 7 9v10c0 1.1.9 2 2 2h9c.83 0 1.54-.5 1.84-1.22l3.02-7.05c.09-.23.14-.47.14-.73v-2z";

function answersPad(n) {
  return String(n).padStart(2, "0");
}

/** `date` as a local ISO 8601 time with its UTC offset (2026-11-30T14:03:09+08:00). */
function answersIsoLocal(date) {
  const offset = -date.getTimezoneOffset();
  const sign = offset >= 0 ? "+" : "-";
  const hours = answersPad(Math.floor(Math.abs(offset) / 60)), minutes = answersPad(Math.abs(offset) % 60);
  return date.getFullYear() + "-" + answersPad(date.getMonth() + 1) + "-" + answersPad(date.getDate()) + "T"
    + answersPad(date.getHours()) + ":" + answersPad(date.getMinutes()) + ":" + answersPad(date.getSeconds())
    + sign + hours + ":" + minutes;
}

/** The card's time: the hour and minute (with the date unless today), the full ISO time on hover. */
function answersTime(at) {
  const date = new Date(at);
  const time = document.createElement("time");
  time.className = "card-time muted";
  time.dateTime = answersIsoLocal(date);
  time.title = time.dateTime;
  const today = new Date().toDateString() === date.toDateString();
  const options = today ? { hour: "2-digit", minute: "2-digit" }
    : { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" };
  time.textContent = date.toLocaleString(bgLocale(), options);
  return time;
}

/** Keep what a live `tool_call_started` / `tool_call_finished` event says of its call. */
function answersNoteCall(view, data) {
  if (!data || typeof data.call_id !== "string") return;
  if (!view.calls) view.calls = new Map();
  const known = view.calls.get(data.call_id) || {};
  const { kind, t: _elapsed, ...fields } = data;
  view.calls.set(data.call_id, Object.assign(known, fields));
}

/** `value` with the values of secret-looking keys masked (the record's arguments come masked already). */
function answersMasked(value) {
  if (Array.isArray(value)) return value.map(answersMasked);
  if (!value || typeof value !== "object") return value;
  const out = {};
  for (const [key, inner] of Object.entries(value)) out[key] = ANSWERS_SECRET_KEY.test(key) ? "***" : answersMasked(inner);
  return out;
}

/** The record's entry for the `index`-th tool line (named `name`): the calls are kept in the order they began. */
function answersRecordCall(record, index, name) {
  const calls = Array.isArray(record && record.tool_calls) ? record.tool_calls : [];
  if (calls[index] && calls[index].name === name) return calls[index];
  return calls.find((call) => call && call.name === name) || null;
}

/** The turn's record (null when it cannot be read): asked again a little later while the gateway is still
 * writing it (202), and kept once read. */
async function answersReadRecord(turnId) {
  for (let n = 0; n < CHAT_RESOLVE_TRIES; n++) {
    if (n) await new Promise((resolve) => setTimeout(resolve, 250 * n));
    try {
      const response = await bgFetch("/v1/turns/" + encodeURIComponent(turnId));
      if (response.status === 200) return await response.json();
      if (response.status !== 202) return null;
    } catch (e) { /* the gateway restarting: ask again */ }
  }
  return null;
}

function answersRecord(view) {
  if (!view.record) {
    view.record = answersReadRecord(view.turn.turnId);
    view.record.then((record) => { if (!record) view.record = null; });  // the next opening asks again
  }
  return view.record;
}

function answersField(label, content) {
  const field = document.createElement("div");
  field.className = "tool-field";
  const name = document.createElement("div");
  name.className = "tool-field-name muted";
  name.textContent = label;
  field.append(name, content);
  return field;
}

function answersSourceText(source) {
  const parts = [source.label || source.provider, source.account, source.region, source.api].filter(Boolean);
  if (source.fetched_at) {
    parts.push(t("fetched_at", { time: new Date(source.fetched_at * 1000).toLocaleString(bgLocale()) }));
  }
  if (source.cached) parts.push(t("cached"));
  return parts.join(" · ");
}

/** The details of one call (`call`: its record entry or what its events said; `line`: its card line). */
function answersCallDetails(call, line) {
  const box = document.createDocumentFragment();
  const args = document.createElement("pre");
  const shown = call && call.arguments && Object.keys(call.arguments).length ? answersMasked(call.arguments) : null;
  args.textContent = shown ? JSON.stringify(shown, null, 2) : (line.args_preview || t("tool_no_arguments"));
  box.appendChild(answersField(t("tool_arguments"), args));
  const result = document.createElement("div");
  result.className = "tool-result";
  result.textContent = (call && call.summary) || line.summary || "—";
  box.appendChild(answersField(t("tool_result"), result));
  const sources = Array.isArray(call && call.sources) ? call.sources.filter((s) => s && typeof s === "object") : [];
  let list;
  if (sources.length) {
    list = document.createElement("ul");
    list.className = "tool-sources";
    for (const source of sources) {
      const item = document.createElement("li");
      item.textContent = answersSourceText(source);
      list.appendChild(item);
    }
  } else {
    list = document.createElement("div");
    list.className = "muted";
    list.textContent = t("tool_no_sources");
  }
  box.appendChild(answersField(t("tool_sources"), list));
  return box;
}

/** Fill an opened call's box: from the record once the turn ended, else from the turn's events. */
async function answersFillCall(view, body, line, index, final) {
  const live = view.calls && view.calls.get(line.call_id);
  if (final && view.turn.turnId) {
    if (live) body.replaceChildren(answersCallDetails(live, line));  // until its record (secrets masked) comes
    else body.textContent = t("loading");
    const record = await answersRecord(view);
    const call = answersRecordCall(record, index, line.name) || live;
    body.replaceChildren(answersCallDetails(call, line));
  } else if (live) {
    body.replaceChildren(answersCallDetails(live, line));
    if (!live.summary) {
      const later = document.createElement("div");
      later.className = "muted";
      later.textContent = t("tool_details_later");
      body.appendChild(later);
    }
  } else {
    body.textContent = t("tool_details_later");
  }
}

/** A tool line that opens to its call's details (`summary`: the line as chat.js draws it). It stays open across
 * redraws of the card. */
function answersToolCall(view, line, index, summary, final) {
  if (!view.openCalls) view.openCalls = new Set();
  const details = document.createElement("details");
  details.className = "tool-call";
  details.dataset.callId = line.call_id;
  summary.title = t("tool_details");
  const body = document.createElement("div");
  body.className = "tool-details";
  details.append(summary, body);
  details.open = view.openCalls.has(line.call_id);
  if (details.open) answersFillCall(view, body, line, index, final);
  details.addEventListener("toggle", () => {
    if (details.open) {
      view.openCalls.add(line.call_id);
      answersFillCall(view, body, line, index, final);
    } else {
      view.openCalls.delete(line.call_id);
    }
  });
  return details;
}

/** Put `text` on the clipboard: the Clipboard API, else a selected hidden text box and the copy command. */
async function answersCopy(text) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch (e) { /* refused (no permission, no focus): the old way may still work */ }
  const area = document.createElement("textarea");
  area.className = "offscreen";
  area.value = text;
  area.setAttribute("readonly", "");
  document.body.appendChild(area);
  area.select();
  let copied = false;
  try { copied = document.execCommand("copy"); } catch (e) { copied = false; }
  area.remove();
  return copied;
}

function answersThumb(down) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("width", "15");
  svg.setAttribute("height", "15");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", down ? "thumb thumb-down" : "thumb");
  const path = document.createElementNS(ns, "path");
  path.setAttribute("d", ANSWERS_THUMB);
  path.setAttribute("fill", "currentColor");
  svg.appendChild(path);
  return svg;
}

function answersButton(className, label, title) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "answer-action " + className;
  if (typeof label === "string") button.textContent = label;
  else button.appendChild(label);
  if (title) {
    button.title = title;
    button.setAttribute("aria-label", title);
  }
  return button;
}

/** Send the vote (and a 👎's reason); the note the gateway answers is shown under the buttons. */
async function answersVote(view, vote, reason) {
  const turn = view.turn;
  let response;
  try {
    response = await bgFetch("/console/answers/" + encodeURIComponent(turn.turnId) + "/feedback", {
      method: "POST", headers: { "Content-Type": "application/json", "Accept-Language": bgLocale() },
      body: JSON.stringify(reason ? { vote, reason } : { vote }),
    });
  } catch (e) {
    view.note = { text: t("connection_lost"), error: true };
    chatRedraw(view);
    return;
  }
  if (response.ok) {
    const body = await response.json();
    turn.vote = vote;
    view.asking = vote === "down" && !reason;
    view.note = { text: body.note || "", error: false };
  } else {
    view.note = { text: t("request_failed", { reason: await bgReason(response) }), error: true };
  }
  chatRedraw(view);
}

function answersReasonForm(view) {
  const form = document.createElement("form");
  form.className = "reason-form";
  const input = document.createElement("input");
  input.type = "text";
  input.name = "reason";
  input.maxLength = 300;
  input.placeholder = t("reason_placeholder");
  const send = document.createElement("button");
  send.type = "submit";
  send.textContent = t("send_reason");
  form.append(input, send);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const reason = input.value.trim();
    if (!reason) return;
    send.disabled = true;
    answersVote(view, "down", reason);
  });
  return form;
}

/** The row under a card's answer: Copy (any answer), and for a finished one Ask again, 👍 and 👎. */
function answersActions(view, snap) {
  const turn = view.turn;
  const row = document.createElement("div");
  row.className = "answer-actions";
  const copy = answersButton("copy", t("copy"));
  copy.addEventListener("click", async () => {
    const copied = await answersCopy(turn.answer || snap.answer || "");
    copy.textContent = copied ? t("copied") : t("copy");
    if (!copied) bgError(t("copy_failed"));
    else setTimeout(() => { copy.textContent = t("copy"); }, 2000);
  });
  row.appendChild(copy);
  if (snap.status === "done" && turn.turnId) {
    const again = answersButton("ask-again", "↻ " + t("ask_again"));
    again.addEventListener("click", () => chatRefresh(view));
    const up = answersButton("vote-up", answersThumb(false), "👍 " + t("vote_up"));
    const down = answersButton("vote-down", answersThumb(true), "👎 " + t("vote_down"));
    up.setAttribute("aria-pressed", String(turn.vote === "up"));
    down.setAttribute("aria-pressed", String(turn.vote === "down"));
    up.addEventListener("click", () => answersVote(view, "up", ""));
    down.addEventListener("click", () => answersVote(view, "down", ""));
    row.append(again, up, down);
  }
  const box = document.createDocumentFragment();
  box.appendChild(row);
  if (view.asking && turn.vote === "down") box.appendChild(answersReasonForm(view));
  if (view.note && view.note.text) {
    const note = document.createElement("div");
    note.className = "answer-note " + (view.note.error ? "error" : "muted");
    note.setAttribute("role", "status");
    note.textContent = view.note.text;
    box.appendChild(note);
  }
  return box;
}
