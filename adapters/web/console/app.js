// The console's frame: the session (its CSRF token), the pages behind the hash (#chat, #audit…),
// the theme and language switches, logging out (which forgets the conversations saved in this browser);
// on a phone the header and the conversations fold away (layout.js).
"use strict";

const BG = { session: null };

/** fetch() for the console: same-origin credentials, and the session's CSRF token on state-changing calls. */
function bgFetch(url, options) {
  const init = Object.assign({ credentials: "same-origin" }, options || {});
  const method = (init.method || "GET").toUpperCase();
  init.headers = Object.assign({}, init.headers || {});
  if (!["GET", "HEAD", "OPTIONS"].includes(method) && BG.session) init.headers["X-CSRF-Token"] = BG.session.csrf;
  return fetch(url, init);
}

/** Show `message` in the page's error line (empty hides it). */
function bgError(message) {
  const line = document.getElementById("page-error");
  line.textContent = message || "";
  line.hidden = !message;
}

/** The reason of a failed response: its JSON `error`, else its status. */
async function bgReason(response) {
  try {
    const body = await response.json();
    if (body && body.error) return typeof body.error === "string" ? body.error : body.error.message;  // /v1: OpenAI's
  } catch (e) { /* not JSON */ }
  return "HTTP " + response.status;
}

const BG_PAGES = ["chat", "audit", "usage", "feedback", "status"];

function bgShowPage() {
  let page = location.hash.replace(/^#/, "") || "chat";
  if (!BG_PAGES.includes(page) || (page !== "chat" && !BG.session.admin)) page = "chat";
  bgError("");
  bgLayoutPage(page);
  for (const link of document.querySelectorAll("#nav a")) link.classList.toggle("active", link.dataset.page === page);
  document.getElementById("page-chat").hidden = page !== "chat";
  document.getElementById("page-report").hidden = !["audit", "usage", "feedback"].includes(page);
  document.getElementById("page-status").hidden = page !== "status";
  if (page === "chat") bgChatShow();
  else if (page === "status") bgStatusShow();
  else bgReportShow(page);
}

async function bgStart() {
  bgTranslate();
  const response = await fetch("/console/session", { credentials: "same-origin" });
  if (!response.ok) {
    location.assign("/login");
    return;
  }
  BG.session = await response.json();
  document.getElementById("who").textContent = BG.session.principal;
  for (const el of document.querySelectorAll(".admin-only")) el.hidden = !BG.session.admin;
  document.getElementById("theme-toggle").addEventListener("click", bgToggleTheme);
  document.getElementById("locale-toggle").addEventListener("click", () => {
    bgToggleLocale();
    bgTranslate();
    bgShowPage();
  });
  document.getElementById("logout").addEventListener("click", async () => {
    chatForget();  // this browser keeps no one's conversations once they log out
    try { await bgFetch("/logout", { method: "POST" }); } catch (e) { /* gone already: the login page says so */ }
    location.assign("/login");
  });
  bgLayoutSetup();
  bgChatSetup();
  window.addEventListener("hashchange", bgShowPage);
  bgShowPage();
}

document.addEventListener("DOMContentLoaded", bgStart);
