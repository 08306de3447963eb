// The login page: an API key or the admin password, posted as JSON; the session cookie comes back.
"use strict";

function loginKind() {
  return document.querySelector("input[name=kind]:checked").value;
}

function showKind() {
  document.getElementById("secret-label").textContent = t(loginKind() === "key" ? "login_key" : "login_password");
}

async function login(event) {
  event.preventDefault();
  const error = document.getElementById("login-error");
  error.hidden = true;
  const secret = document.getElementById("secret").value;
  const body = loginKind() === "key" ? { key: secret } : { password: secret };
  let response;
  try {
    response = await fetch("/login", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
      credentials: "same-origin",
    });
  } catch (e) {
    error.textContent = t("connection_lost");
    error.hidden = false;
    return;
  }
  if (response.ok) {
    location.assign("/");
    return;
  }
  let code = "";
  try { code = (await response.json()).code || ""; } catch (e) { /* not JSON: the generic message */ }
  error.textContent = code && BG_STRINGS.en["err_" + code] ? t("err_" + code) : t("login_failed") + " (" + response.status + ")";
  error.hidden = false;
}

document.addEventListener("DOMContentLoaded", () => {
  bgTranslate();
  showKind();
  for (const radio of document.querySelectorAll("input[name=kind]")) radio.addEventListener("change", showKind);
  document.getElementById("login-form").addEventListener("submit", login);
  document.getElementById("theme-toggle").addEventListener("click", bgToggleTheme);
  document.getElementById("locale-toggle").addEventListener("click", () => { bgToggleLocale(); bgTranslate(); showKind(); });
});
