// The console's words, in English and Simplified Chinese. The language comes from the browser
// (navigator.language) unless the switch in the header chose one (kept in localStorage).
"use strict";

const BG_STRINGS = {
  en: {
    title: "botgateway console",
    login_title: "Log in to the botgateway console",
    login_key: "API key",
    login_password: "Admin password",
    login_with_key: "Log in with an API key",
    login_with_password: "Log in with the admin password",
    login_submit: "Log in",
    login_failed: "Login failed",
    err_bad_credentials: "The API key or password is not right.",
    err_throttled: "Too many failed logins from this address; wait 15 minutes.",
    err_no_login: "No login is configured: set web.admin_password_hash or web.api_keys.",
    logout: "Log out",
    nav_chat: "Chat",
    nav_audit: "Audit",
    nav_usage: "Usage",
    nav_feedback: "Feedback",
    nav_status: "Status",
    theme: "Theme",
    language: "中文",
    new_conversation: "New conversation",
    no_conversations: "No conversations yet.",
    delete_conversation: "Delete",
    ask_placeholder: "Ask about your infrastructure… (Enter sends, Shift+Enter for a new line)",
    ask: "Ask",
    stop: "Stop",
    approve: "Approve",
    deny: "Deny",
    approval_asks: "needs an approval",
    status_queued: "queued",
    status_working: "working",
    status_streaming: "answering",
    status_done: "done",
    status_failed: "failed",
    status_stopped: "stopped",
    queued_at: "place {n} in line",
    tool_running: "running…",
    tool_waiting: "waiting for approval…",
    tool_done: "done in {s} s",
    tool_failed: "failed",
    thought: "thinking",
    request_failed: "The request failed: {reason}",
    connection_lost: "The connection to the gateway was lost.",
    filters: "Filters",
    since: "Since (30m, 1h, 2d, 2026-11-30)",
    user: "User (slack:U0123)",
    tool: "Tool (a glob: k8s__*)",
    vote: "Vote",
    vote_any: "any",
    by: "Group by",
    apply: "Apply",
    download_csv: "Download CSV",
    rows: "{n} row(s)",
    no_rows: "Nothing matches.",
    cut_at: "Only the newest {n} records were read; narrow the time with Since.",
    admin_only: "Only the admin login may read this page.",
    checks: "Checks",
    store: "Store",
    budgets: "Rate budgets in use",
    open_cards: "Open cards",
    replicas: "Replicas (live instances)",
    this_instance: "this process",
    refresh: "Refresh",
    none: "none",
    conversations: "Conversations",
    menu: "Menu",
    copy: "Copy",
    copied: "Copied",
    copy_failed: "Could not copy; select the answer and copy it by hand.",
    ask_again: "Ask again",
    vote_up: "Helpful",
    vote_down: "Not helpful",
    reason_placeholder: "What was wrong? (optional, one line)",
    send_reason: "Send",
    tool_details: "Details of this call",
    tool_arguments: "Arguments",
    tool_result: "Result",
    tool_sources: "Sources",
    tool_no_arguments: "(none)",
    tool_no_sources: "The tool named no sources.",
    tool_details_later: "Its details come once the answer is done.",
    loading: "Loading…",
    cached: "cached",
    fetched_at: "fetched {time}",
    answered_at: "Answered {time}",
  },
  "zh-CN": {
    title: "botgateway 控制台",
    login_title: "登录 botgateway 控制台",
    login_key: "API 密钥",
    login_password: "管理员密码",
    login_with_key: "用 API 密钥登录",
    login_with_password: "用管理员密码登录",
    login_submit: "登录",
    login_failed: "登录失败",
    err_bad_credentials: "API 密钥或密码不正确。",
    err_throttled: "此地址登录失败次数过多，请 15 分钟后再试。",
    err_no_login: "未配置登录方式：请设置 web.admin_password_hash 或 web.api_keys。",
    logout: "退出登录",
    nav_chat: "对话",
    nav_audit: "审计",
    nav_usage: "用量",
    nav_feedback: "反馈",
    nav_status: "状态",
    theme: "主题",
    language: "English",
    new_conversation: "新对话",
    no_conversations: "还没有对话。",
    delete_conversation: "删除",
    ask_placeholder: "询问你的基础设施…（回车发送，Shift+回车换行）",
    ask: "提问",
    stop: "停止",
    approve: "批准",
    deny: "拒绝",
    approval_asks: "需要审批",
    status_queued: "排队中",
    status_working: "处理中",
    status_streaming: "回答中",
    status_done: "完成",
    status_failed: "失败",
    status_stopped: "已停止",
    queued_at: "排在第 {n} 位",
    tool_running: "运行中…",
    tool_waiting: "等待审批…",
    tool_done: "完成，用时 {s} 秒",
    tool_failed: "失败",
    thought: "思考",
    request_failed: "请求失败：{reason}",
    connection_lost: "与网关的连接已断开。",
    filters: "筛选",
    since: "起始（30m、1h、2d、2026-11-30）",
    user: "用户（slack:U0123）",
    tool: "工具（通配：k8s__*）",
    vote: "评价",
    vote_any: "全部",
    by: "分组",
    apply: "应用",
    download_csv: "下载 CSV",
    rows: "{n} 行",
    no_rows: "没有匹配的记录。",
    cut_at: "只读取了最新的 {n} 条记录；请用“起始”缩小时间范围。",
    admin_only: "只有管理员登录可以查看此页。",
    checks: "检查",
    store: "存储",
    budgets: "使用中的速率预算",
    open_cards: "未完成的卡片",
    replicas: "副本（在线实例）",
    this_instance: "本进程",
    refresh: "刷新",
    none: "无",
    conversations: "对话列表",
    menu: "菜单",
    copy: "复制",
    copied: "已复制",
    copy_failed: "无法复制，请手动选中回答后复制。",
    ask_again: "重新提问",
    vote_up: "有帮助",
    vote_down: "没帮助",
    reason_placeholder: "哪里不对？（可选，一行）",
    send_reason: "发送",
    tool_details: "这次调用的详情",
    tool_arguments: "参数",
    tool_result: "结果",
    tool_sources: "数据来源",
    tool_no_arguments: "（无）",
    tool_no_sources: "该工具未说明数据来源。",
    tool_details_later: "回答完成后可查看详情。",
    loading: "加载中…",
    cached: "缓存",
    fetched_at: "获取于 {time}",
    answered_at: "回答于 {time}",
  },
};

const BG_LOCALE_KEY = "botgateway.locale";

/** The language in use: the one chosen with the switch, else the browser's (zh* → zh-CN), else en. */
function bgLocale() {
  const chosen = localStorage.getItem(BG_LOCALE_KEY);
  if (chosen && BG_STRINGS[chosen]) return chosen;
  const browser = (navigator.languages && navigator.languages[0]) || navigator.language || "en";
  return browser.toLowerCase().startsWith("zh") ? "zh-CN" : "en";
}

/** The string `key` in the language in use, with {name} placeholders filled from `values`. */
function t(key, values) {
  const table = BG_STRINGS[bgLocale()] || BG_STRINGS.en;
  let text = table[key] !== undefined ? table[key] : (BG_STRINGS.en[key] !== undefined ? BG_STRINGS.en[key] : key);
  for (const [name, value] of Object.entries(values || {})) text = text.split("{" + name + "}").join(String(value));
  return text;
}

/** Fill every element with data-i18n (its text), data-i18n-placeholder (its placeholder) or data-i18n-label (the
 * label and tooltip of a button that shows only a symbol). */
function bgTranslate(root) {
  document.documentElement.lang = bgLocale();
  for (const el of (root || document).querySelectorAll("[data-i18n]")) el.textContent = t(el.dataset.i18n);
  for (const el of (root || document).querySelectorAll("[data-i18n-placeholder]")) {
    el.placeholder = t(el.dataset.i18nPlaceholder);
  }
  for (const el of (root || document).querySelectorAll("[data-i18n-label]")) {
    el.setAttribute("aria-label", t(el.dataset.i18nLabel));
    el.title = t(el.dataset.i18nLabel);
  }
}

/** Switch between en and zh-CN. */
function bgToggleLocale() {
  localStorage.setItem(BG_LOCALE_KEY, bgLocale() === "zh-CN" ? "en" : "zh-CN");
}

const BG_THEME_KEY = "botgateway.theme";

/** Apply the chosen theme (light or dark); without a choice the CSS follows prefers-color-scheme. */
function bgApplyTheme() {
  const chosen = localStorage.getItem(BG_THEME_KEY);
  if (chosen === "light" || chosen === "dark") document.documentElement.dataset.theme = chosen;
  else delete document.documentElement.dataset.theme;
}

/** Toggle between light and dark, starting from what is shown now. */
function bgToggleTheme() {
  const shown = document.documentElement.dataset.theme
    || (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
  localStorage.setItem(BG_THEME_KEY, shown === "dark" ? "light" : "dark");
  bgApplyTheme();
}

bgApplyTheme();
