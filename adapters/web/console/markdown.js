// Markdown to DOM, safely: the text is never parsed as HTML. Every piece becomes a text node or
// one of a few elements built here (paragraphs, bold, italics, code spans and blocks, lists,
// headings, quotes, simple tables, links). The link rule is the server's (botgateway/cards/links.py),
// which the text it sends already went through; a text kept in this browser (or a turn's record) is held
// to it here too: a link is kept only for http(s) addresses, without credentials, opens with
// rel="noopener noreferrer", and shows its host beside its text unless the text already does
// ("the runbook (evil.example)"). An image is shown as its alt text and never fetched.
// A text still streaming is drawn as if it ended here: its open code fence, code span and emphasis are
// closed first (as the server's close_open_fence does for fences), so no raw `**` shows mid-answer.
"use strict";

const MD_INLINE = new RegExp([
  "(`+)([\\s\\S]*?[^`])\\1(?!`)",              // 1,2: code span
  "!\\[([^\\]]*)\\]\\(([^)\\s]*)[^)]*\\)",      // 3,4: image → its alt text
  "\\[([^\\]]+)\\]\\(([^)\\s]+)[^)]*\\)",        // 5,6: link
  "\\*\\*([\\s\\S]+?)\\*\\*",                   // 7: bold
  "__([\\s\\S]+?)__",                           // 8: bold
  "\\*([^*\\s][^*]*?)\\*",                      // 9: italics
  "(?<![\\w])_([^_\\s][^_]*?)_(?![\\w])",       // 10: italics
].join("|"), "g");

function mdSafeUrl(url) {
  try {
    const parsed = new URL(url);
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return null;
    parsed.username = "";
    parsed.password = "";
    return parsed;
  } catch (e) {
    return null;
  }
}

const MD_URL_IN_TEXT = /[A-Za-z][A-Za-z0-9+.-]*:\/\/[^\s<>()\[\]`*|"']+/g;
const MD_HOST_IN_TEXT = /(?<![\p{L}\p{N}_.@-])(?:[\p{L}\p{N}](?:[\p{L}\p{N}_-]*[\p{L}\p{N}])?\.)+\p{L}{2,63}(?![\p{L}\p{N}_-])|(?<![\p{L}\p{N}_.])\d{1,3}(?:\.\d{1,3}){3}(?![\p{L}\p{N}_.])/gu;

function mdHostOf(url) {
  const parsed = mdSafeUrl(url);
  return parsed ? parsed.hostname : null;
}

/** Whether a link's `text` tells the reader it goes to `host` (the server's reveals_host). */
function mdRevealsHost(text, host) {
  if (text.trimEnd().endsWith("(" + host + ")")) return true;
  if (host.startsWith("xn--") || host.includes(".xn--")) return false;
  const named = [...text.matchAll(MD_URL_IN_TEXT)].map((m) => mdHostOf(m[0]));
  const rest = text.replace(MD_URL_IN_TEXT, " ");
  for (const m of rest.matchAll(MD_HOST_IN_TEXT)) named.push(mdHostOf("http://" + m[0]));
  return named.length > 0 && named.every((name) => name === host);
}

/** Append the inline markdown `text` to `parent` as text nodes and whitelisted elements. */
function mdInline(parent, text) {
  let last = 0;
  MD_INLINE.lastIndex = 0;
  const matches = [...text.matchAll(MD_INLINE)];
  for (const m of matches) {
    if (m.index < last) continue;
    if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
    last = m.index + m[0].length;
    if (m[2] !== undefined) {
      const code = document.createElement("code");
      code.textContent = m[2].trim() ? m[2].replace(/^ (.*) $/, "$1") : m[2];
      parent.appendChild(code);
    } else if (m[4] !== undefined) {
      const alt = document.createElement("span");
      alt.className = "md-image";
      alt.textContent = m[3] ? "[" + m[3] + "]" : "[image]";
      parent.appendChild(alt);
    } else if (m[6] !== undefined) {
      const url = mdSafeUrl(m[6]);
      if (url) {
        const a = document.createElement("a");
        a.href = url.href;
        a.rel = "noopener noreferrer";
        a.target = "_blank";
        mdInline(a, m[5]);
        if (!mdRevealsHost(a.textContent, url.hostname)) a.appendChild(document.createTextNode(" (" + url.hostname + ")"));
        parent.appendChild(a);
      } else {
        mdInline(parent, m[5]);
      }
    } else if (m[7] !== undefined || m[8] !== undefined) {
      const strong = document.createElement("strong");
      mdInline(strong, m[7] !== undefined ? m[7] : m[8]);
      parent.appendChild(strong);
    } else {
      const em = document.createElement("em");
      mdInline(em, m[9] !== undefined ? m[9] : m[10]);
      parent.appendChild(em);
    }
  }
  if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
}

function mdLines(parent, lines) {
  lines.forEach((line, i) => {
    if (i > 0) parent.appendChild(document.createElement("br"));
    mdInline(parent, line);
  });
}

function mdTableRow(line) {
  let cells = line.trim();
  if (cells.startsWith("|")) cells = cells.slice(1);
  if (cells.endsWith("|")) cells = cells.slice(0, -1);
  return cells.split("|").map((cell) => cell.trim());
}

const MD_FENCE = /^\s*(```|~~~)/;
const MD_HEADING = /^(#{1,6})\s+(.*?)\s*#*\s*$/;
const MD_BULLET = /^\s*[-*+]\s+(.*)$/;
const MD_NUMBERED = /^\s*\d+[.)]\s+(.*)$/;
const MD_QUOTE = /^\s*>\s?(.*)$/;
const MD_TABLE_RULE = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;

/** The markers of `line` still open at its end (code span runs, `**`, `__`, `*`, `_`), innermost last, each
 * with where it starts. Inline markup never spans lines here (each line is drawn on its own). */
function mdOpenMarkers(line) {
  const open = [];
  let i = 0;
  while (i < line.length) {
    const c = line[i];
    if (c === "\\") { i += 2; continue; }
    if (c === "`") {
      let n = 1;
      while (line[i + n] === "`") n++;
      const run = "`".repeat(n);
      const end = line.indexOf(run, i + n);
      if (end < 0) { open.push({ marker: run, at: i }); return open; }  // the rest is code
      i = end + n;
      continue;
    }
    if (c === "*" || c === "_") {
      const marker = line[i + 1] === c ? c + c : c;
      const top = open[open.length - 1];
      const before = i > 0 ? line[i - 1] : " ";
      const after = line[i + marker.length];
      if (top && top.marker === marker && !/\s/.test(before)) {
        open.pop();
      } else if (after === undefined) {
        open.push({ marker, at: i });  // the line ends on it: a marker half-way (left out until its text comes)
      } else if (!/\s/.test(after) && !(c === "_" && /[\p{L}\p{N}]/u.test(before))) {
        open.push({ marker, at: i });
      }
      i += marker.length;
      continue;
    }
    i++;
  }
  return open;
}

const MD_BLOCK_COMING = /^\s*(?:[-*+>]|#{1,6}|\d+[.)])\s*$/;

/** `text` as it would read had it ended here: an open fence, code span or emphasis closed; a marker with nothing
 * after it yet left out (it shows once its text comes), as is a line that so far only opens a list item, a heading or a
 * quote; a link whose address is still coming shown as its words. */
function mdCloseOpen(text) {
  let fence = null;
  for (const line of text.split("\n")) {
    const m = line.match(MD_FENCE);
    if (m && !fence) fence = m[1];
    else if (fence && line.trim().startsWith(fence)) fence = null;
  }
  const cut = text.lastIndexOf("\n") + 1;
  if (fence) {
    const last = text.slice(cut).trim();
    const body = last && fence.startsWith(last) ? text.slice(0, cut) : text;  // its closing fence half-way
    return body + (body.endsWith("\n") ? "" : "\n") + fence;
  }
  if (MD_FENCE.test(text.slice(cut))) return text;  // a fence just closed
  if (MD_BLOCK_COMING.test(text.slice(cut))) return text.slice(0, cut);  // a list item, heading or quote to come
  const LINK_COMING = /(!?)\[([^\]]*)\]\([^)\s]*$/, BRACKET_COMING = /\[([^\]]*)\]?$/;
  let line = text.slice(cut);
  if (LINK_COMING.test(line)) {
    line = line.replace(LINK_COMING, (m, image, words) => (image ? "[" + (words || "image") + "]" : words));
  } else {
    line = line.replace(BRACKET_COMING, "$1");
  }
  const open = mdOpenMarkers(line);
  const closers = [];
  for (let k = open.length - 1; k >= 0; k--) {
    const { marker, at } = open[k];
    if (!line.slice(at + marker.length).trim()) line = line.slice(0, at) + line.slice(at + marker.length);
    else closers.push(marker);
  }
  line = line.replace(/\s+$/, "");
  if (!closers.length && MD_BLOCK_COMING.test(line)) line = "";  // its text was all markers so far
  // Closers side by side would read as one longer run ("***"): a zero-width space keeps them apart.
  return text.slice(0, cut) + line + closers.join("\u200b");
}

/** The markdown `text` as a DOM fragment (see the file's comment for what is kept); `partial`: the text is still
 * coming, so what is open at its end is closed first (mdCloseOpen). */
function renderMarkdown(text, partial) {
  const out = document.createDocumentFragment();
  const source = String(text || "").replace(/\r\n?/g, "\n");
  const lines = (partial ? mdCloseOpen(source) : source).split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) { i++; continue; }
    const fence = line.match(MD_FENCE);
    if (fence) {
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i++;
      const pre = document.createElement("pre");
      const code = document.createElement("code");
      code.textContent = body.join("\n");
      pre.appendChild(code);
      out.appendChild(pre);
      continue;
    }
    const heading = line.match(MD_HEADING);
    if (heading) {
      const h = document.createElement("h" + heading[1].length);
      mdInline(h, heading[2]);
      out.appendChild(h);
      i++;
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && MD_TABLE_RULE.test(lines[i + 1])) {
      const table = document.createElement("table");
      const head = table.createTHead().insertRow();
      for (const cell of mdTableRow(line)) {
        const th = document.createElement("th");
        mdInline(th, cell);
        head.appendChild(th);
      }
      const body = table.createTBody();
      i += 2;
      while (i < lines.length && lines[i].includes("|") && lines[i].trim()) {
        const row = body.insertRow();
        for (const cell of mdTableRow(lines[i++])) mdInline(row.insertCell(), cell);
      }
      const wrap = document.createElement("div");
      wrap.className = "md-table";
      wrap.appendChild(table);
      out.appendChild(wrap);
      continue;
    }
    const bullet = MD_BULLET.test(line), numbered = MD_NUMBERED.test(line);
    if (bullet || numbered) {
      const pattern = bullet ? MD_BULLET : MD_NUMBERED;
      const list = document.createElement(bullet ? "ul" : "ol");
      while (i < lines.length && pattern.test(lines[i])) {
        const li = document.createElement("li");
        const item = [lines[i].match(pattern)[1]];
        i++;
        // A continuation line (indented, not a new item) belongs to the item.
        while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !MD_BULLET.test(lines[i]) && !MD_NUMBERED.test(lines[i])) {
          item.push(lines[i++].trim());
        }
        mdLines(li, item);
        list.appendChild(li);
      }
      out.appendChild(list);
      continue;
    }
    if (MD_QUOTE.test(line)) {
      const quoted = [];
      while (i < lines.length && MD_QUOTE.test(lines[i])) quoted.push(lines[i++].match(MD_QUOTE)[1]);
      const quote = document.createElement("blockquote");
      quote.appendChild(renderMarkdown(quoted.join("\n")));
      out.appendChild(quote);
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && !MD_FENCE.test(lines[i]) && !MD_HEADING.test(lines[i])
           && !MD_BULLET.test(lines[i]) && !MD_NUMBERED.test(lines[i]) && !MD_QUOTE.test(lines[i])) {
      para.push(lines[i++]);
    }
    const p = document.createElement("p");
    mdLines(p, para);
    out.appendChild(p);
  }
  return out;
}
