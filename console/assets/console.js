// The downloader console's controls. The cap form posts to POST /console/settings; fetch
// and probe call the service's own API (POST /v1/render, POST /v1/probe). With a signed-in
// session the browser sends its cookie and the page's CSRF token; an admin token typed into
// the form is sent as a bearer token instead. The pages themselves change nothing. No
// control here lowers an interval.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);

  const csrfMeta = document.querySelector('meta[name="csrf-token"]');
  const csrf = csrfMeta ? csrfMeta.content : "";

  function headers(contentType) {
    const h = { "Content-Type": contentType };
    const token = $("admin-token") ? $("admin-token").value.trim() : "";
    if (token) h["Authorization"] = "Bearer " + token;
    else if (csrf) h["X-CSRF-Token"] = csrf;
    const actor = $("actor") ? $("actor").value.trim() : "";
    if (actor) h["X-Actor"] = actor;
    return h;
  }

  async function call(method, path, body) {
    const form = body instanceof URLSearchParams;
    const resp = await fetch(path, {
      method, credentials: "same-origin",
      headers: headers(form ? "application/x-www-form-urlencoded" : "application/json"),
      body: form ? body.toString() : JSON.stringify(body),
    });
    let data = null;
    try { data = await resp.json(); } catch (e) { data = null; }
    return { status: resp.status, data, retryAfter: resp.headers.get("Retry-After") };
  }

  function fmt(n) { return Number(n).toLocaleString("en-US"); }

  // Auto-refresh: off unless the operator turns it on (kept in this browser). It waits
  // while a control is in use, so a reload never eats what is being typed.
  const auto = $("auto-refresh");
  if (auto) {
    const key = "downloader.auto_refresh";
    auto.checked = localStorage.getItem(key) === "on";
    auto.addEventListener("change", () => localStorage.setItem(key, auto.checked ? "on" : "off"));
    setInterval(() => {
      if (!auto.checked) return;
      const busy = document.activeElement && document.activeElement.closest("form") && document.activeElement !== auto;
      const open = [$("settings-confirm"), $("action-panel")].some((el) => el && !el.hidden);
      if (!busy && !open) location.reload();
    }, 30000);
  }

  // max_concurrent_count: ask for confirmation, then POST /console/settings.
  const form = $("settings-form");
  if (form) {
    const confirmBox = $("settings-confirm");
    const result = $("settings-result");
    let pending = null;
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const n = parseInt($("new-max-concurrent-count").value, 10);
      if (!Number.isInteger(n) || n < 1) {
        result.textContent = "max_concurrent_count must be a whole number ≥ 1";
        result.className = "result err";
        return;
      }
      pending = n;
      $("confirm-old").textContent = $("max-concurrent-count").textContent;
      $("confirm-new").textContent = fmt(n);
      confirmBox.hidden = false;
      result.textContent = "";
      $("settings-yes").focus();
    });
    $("settings-no").addEventListener("click", () => { confirmBox.hidden = true; pending = null; });
    $("settings-yes").addEventListener("click", async () => {
      if (pending === null) return;
      const n = pending;
      pending = null;
      confirmBox.hidden = true;
      try {
        const r = await call("POST", "/console/settings", new URLSearchParams(new FormData(form)));
        if (r.status === 200 && r.data) {
          $("max-concurrent-count").textContent = fmt(r.data.max_concurrent_count);
          $("confirm-old").textContent = fmt(r.data.max_concurrent_count);
          result.textContent = "max_concurrent_count = " + fmt(r.data.max_concurrent_count) + " ✓ 已生效";
          result.className = "result ok";
        } else {
          const msg = r.data && r.data.error ? r.data.error : "HTTP " + r.status;
          result.textContent = "HTTP " + r.status + ": " + msg;
          result.className = "result err";
        }
      } catch (e) {
        result.textContent = String(e);
        result.className = "result err";
      }
    });
  }

  // fetch (entry B) and probe (entry C) of one domain, with its current interval.
  const panel = $("action-panel");
  if (panel) {
    let current = null;
    document.addEventListener("click", (ev) => {
      const b = ev.target.closest("button[data-action]");
      if (!b) return;
      current = { action: b.dataset.action, domain: b.dataset.domain, minIntervalMs: parseInt(b.dataset.minIntervalMs, 10) };
      $("action-title").textContent = current.action === "fetch" ? "fetch抓取 · POST /v1/render" : "probe探针 · POST /v1/probe";
      $("action-domain").textContent = current.domain;
      $("action-url").value = "https://" + current.domain + "/";
      $("action-should-render").checked = current.action === "fetch";
      $("action-min-interval-ms").textContent = fmt(current.minIntervalMs);
      $("action-result").textContent = "";
      panel.hidden = false;
      $("action-url").focus();
    });
    $("action-close").addEventListener("click", () => { panel.hidden = true; current = null; });
    $("action-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (!current) return;
      const body = {
        url: $("action-url").value.trim(),
        domain: current.domain,
        should_render: $("action-should-render").checked,
        min_interval_ms: current.minIntervalMs,
      };
      const path = current.action === "fetch" ? "/v1/render" : "/v1/probe";
      const out = $("action-result");
      out.textContent = "…";
      try {
        const r = await call("POST", path, body);
        let shown = r.data;
        if (r.data && current.action === "fetch" && r.status === 200) {
          // The summary and the content's size, not the page itself.
          shown = Object.assign({}, r.data);
          shown.html = r.data.html ? "(" + r.data.html.length + " characters)" : r.data.html;
          shown.text = r.data.text ? "(" + r.data.text.length + " characters)" : r.data.text;
        }
        out.textContent = "HTTP " + r.status + (r.retryAfter ? " · Retry-After: " + r.retryAfter : "") + "\n" + JSON.stringify(shown, null, 2);
        out.dataset.status = String(r.status);
      } catch (e) {
        out.textContent = String(e);
      }
    });
  }
})();
