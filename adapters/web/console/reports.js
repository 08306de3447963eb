// The Audit, Usage and Feedback pages (a filter form, the rows of /console/api/<report>, a CSV download
// of the same query) and the Status page (/console/api/status).
"use strict";

const REPORT_FILTERS = {
  audit: [["since", "text", "since"], ["user", "text", "user"], ["tool", "text", "tool"]],
  usage: [["since", "text", "since"], ["by", ["model", "user", "channel", "day"], "by"]],
  feedback: [["since", "text", "since"], ["vote", ["", "up", "down"], "vote"]],
};

const REPORT_STATE = { page: "", values: {} };

function reportQuery(page) {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(REPORT_STATE.values[page] || {})) if (value) params.set(name, value);
  return params;
}

function reportForm(page) {
  const form = document.getElementById("report-filters");
  form.replaceChildren();
  const values = REPORT_STATE.values[page] || (REPORT_STATE.values[page] = {});
  for (const [name, kind, label] of REPORT_FILTERS[page]) {
    const wrap = document.createElement("label");
    const caption = document.createElement("span");
    caption.textContent = t(label);
    let input;
    if (Array.isArray(kind)) {
      input = document.createElement("select");
      for (const option of kind) {
        const el = document.createElement("option");
        el.value = option;
        el.textContent = option || t("vote_any");
        input.appendChild(el);
      }
    } else {
      input = document.createElement("input");
      input.type = "text";
    }
    input.name = name;
    input.value = values[name] || (Array.isArray(kind) ? kind[0] : "");
    wrap.append(caption, input);
    form.appendChild(wrap);
  }
  const apply = document.createElement("button");
  apply.type = "submit";
  apply.textContent = t("apply");
  const csv = document.createElement("a");
  csv.id = "report-csv";
  csv.className = "button";
  csv.textContent = t("download_csv");
  form.append(apply, csv);
  form.onsubmit = (event) => {
    event.preventDefault();
    for (const el of form.elements) if (el.name) values[el.name] = el.value.trim();
    reportLoad(page);
  };
}

function reportCell(value) {
  if (value === null || value === undefined) return "";
  if (Array.isArray(value)) return value.join("; ");
  return String(value);
}

async function reportLoad(page) {
  const query = reportQuery(page);
  const csvQuery = new URLSearchParams(query);
  csvQuery.set("format", "csv");
  document.getElementById("report-csv").href = "/console/api/" + page + "?" + csvQuery.toString();
  const table = document.getElementById("report-table");
  const summary = document.getElementById("report-summary");
  const response = await bgFetch("/console/api/" + page + "?" + query.toString());
  if (page !== REPORT_STATE.page) return;  // another page was chosen meanwhile
  if (!response.ok) {
    table.replaceChildren();
    summary.textContent = "";
    bgError(response.status === 403 ? t("admin_only") : t("request_failed", { reason: await bgReason(response) }));
    return;
  }
  bgError("");
  const data = await response.json();
  summary.textContent = (data.rows.length ? t("rows", { n: data.rows.length }) : t("no_rows"))
    + (data.cut_at ? " " + t("cut_at", { n: data.cut_at }) : "");
  const head = document.createElement("thead");
  const headRow = head.insertRow();
  for (const column of data.columns) {
    const th = document.createElement("th");
    th.textContent = column;
    headRow.appendChild(th);
  }
  const body = document.createElement("tbody");
  for (const row of data.rows) {
    const tr = body.insertRow();
    for (const column of data.columns) tr.insertCell().textContent = reportCell(row[column]);
  }
  table.replaceChildren(head, body);
}

function bgReportShow(page) {
  REPORT_STATE.page = page;
  reportForm(page);
  reportLoad(page);
}

function statusTable(columns, rows) {
  if (!rows.length) {
    const none = document.createElement("p");
    none.className = "muted";
    none.textContent = t("none");
    return none;
  }
  const table = document.createElement("table");
  const head = table.createTHead().insertRow();
  for (const column of columns) {
    const th = document.createElement("th");
    th.textContent = column;
    head.appendChild(th);
  }
  const body = table.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    for (const column of columns) tr.insertCell().textContent = reportCell(row[column]);
  }
  const wrap = document.createElement("div");
  wrap.className = "table-wrap";
  wrap.appendChild(table);
  return wrap;
}

function statusSection(title, content) {
  const section = document.createElement("section");
  const h = document.createElement("h3");
  h.textContent = title;
  section.append(h, content);
  return section;
}

async function bgStatusLoad() {
  const body = document.getElementById("status-body");
  const response = await bgFetch("/console/api/status");
  if (!response.ok) {
    body.replaceChildren();
    bgError(response.status === 403 ? t("admin_only") : t("request_failed", { reason: await bgReason(response) }));
    return;
  }
  const data = await response.json();
  const checks = Object.entries(data.checks).map(([name, result]) => ({ name, result }));
  const store = document.createElement("p");
  store.className = data.store === "ok" ? "ok" : "error";
  store.textContent = data.store;
  const replicas = data.replicas.map((id) => ({ instance: id + (id === data.instance ? " (" + t("this_instance") + ")" : "") }));
  body.replaceChildren(
    statusSection(t("checks"), statusTable(["name", "result"], checks)),
    statusSection(t("store"), store),
    // "limit" is the configured one; "learned" what the platform's throttles taught (see botgateway.budget.learned).
    statusSection(t("budgets"), statusTable(
      ["key", "limit", "learned", "throttles", "granted", "waiting", "reserved", "spare", "paused_s"], data.budgets)),
    statusSection(t("open_cards"), statusTable(["platform", "turn_id", "owner", "age_s"], data.open_cards)),
    statusSection(t("replicas"), statusTable(["instance"], replicas)),
  );
}

function bgStatusShow() {
  const refresh = document.getElementById("status-refresh");
  refresh.onclick = bgStatusLoad;
  bgStatusLoad();
}
