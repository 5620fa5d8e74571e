// egress web page: live progress over server-sent events, confirmations, small niceties.
// No inline scripts (the Content-Security-Policy forbids them); everything hooks on data-*.
"use strict";

(function () {
  const TERMINAL = ["completed", "expired", "failed", "cancelled"];
  const nf = new Intl.NumberFormat();

  function count(n) { return n == null ? "–" : nf.format(Math.round(n)).replace(/,/g, "\u202f"); }
  function bytes(n) {
    if (n == null) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let v = n, u = 0;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; u += 1; }
    return u === 0 ? v + " B" : v.toFixed(1) + " " + units[u];
  }
  function seconds(s) {
    if (s == null) return "–";
    s = Math.max(Math.round(s), 0);
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    if (h) return h + " h " + String(m).padStart(2, "0") + " min";
    return m ? m + " min " + String(r).padStart(2, "0") + " s" : r + " s";
  }
  function percent(done, total, status) {
    if (status === "completed" || status === "expired") return 100;
    if (!total || done == null) return 0;
    return Math.max(0, Math.min(100, Math.floor(done * 100 / total)));
  }
  function set(root, role, text) {
    const el = root.querySelector('[data-role="' + role + '"]');
    if (el) el.textContent = text;
    return el;
  }
  function setStatus(root, status) {
    const badge = root.querySelector('[data-role="status"]');
    if (badge) { badge.textContent = status; badge.className = "badge badge-" + status; }
  }
  function setBar(root, done, total, status) {
    const bar = root.querySelector('[data-role="bar"]');
    if (!bar) return;
    const p = percent(done, total, status);
    bar.value = p;
    bar.textContent = p + " %";
    bar.className = "bar bar-" + status;
  }

  // One EventSource; closed on "end" (every watched export reached its final state).
  function watch(url, onEvent) {
    const source = new EventSource(url);
    for (const kind of ["snapshot", "progress", "state", "gone", "created"]) {
      source.addEventListener(kind, (e) => onEvent(kind, JSON.parse(e.data)));
    }
    source.addEventListener("end", () => source.close());
    window.addEventListener("pagehide", () => source.close());
    return source;
  }

  function showView(root, v) {
    set(root, "rows", count(v.rows));
    if (v.rows_estimate != null) set(root, "estimate", count(v.rows_estimate));
    set(root, "bytes", bytes(v.bytes));
    set(root, "rate", count(v.rate));
    set(root, "eta", seconds(v.eta_seconds));
    setStatus(root, v.status);
    setBar(root, v.rows, v.rows_estimate, v.status);
  }

  // A new export (the newest page only): its row, drawn by the server, on top.
  function addRow(table, id) {
    if (table.querySelector('tr[data-export="' + id + '"]')) return;
    fetch("/live/rows?id=" + encodeURIComponent(id), { credentials: "same-origin" })
      .then((r) => (r.ok ? r.text() : ""))
      .then((html) => {
        if (!html || table.querySelector('tr[data-export="' + id + '"]')) return;
        const body = table.tBodies[0];
        body.insertAdjacentHTML("afterbegin", html);
        localTimes(body.rows[0]);
        table.classList.remove("js-hide-empty");
        const empty = document.getElementById("empty");
        if (empty) empty.remove();
        const note = document.getElementById("live-note");
        if (note) note.textContent = "New export " + id + " added.";
      });
  }

  // The list: one stream for every unfinished export on the page (and new ones).
  function liveList(table) {
    watch(table.dataset.liveUrl, (kind, data) => {
      if (kind === "created") { addRow(table, data.id); return; }
      const row = table.querySelector('tr[data-export="' + data.id + '"]');
      if (!row) return;
      if (kind === "state") {
        setStatus(row, data.status);
        if (data.status === "completed") {
          setBar(row, 1, 1, "completed");
          set(row, "eta", seconds(0));
        } else if (TERMINAL.includes(data.status)) {
          const bar = row.querySelector('[data-role="bar"]');
          if (bar) bar.className = "bar bar-" + data.status;
          set(row, "eta", "–");
        }
      } else if (kind === "gone") {
        setStatus(row, "deleted");
      } else {
        showView(row, data);
      }
    });
  }

  // The detail page: overall and per-table bars, the throughput chart, the final state.
  function liveDetail(root) {
    const samples = [];
    const main = document.getElementById("main");
    watch(root.dataset.eventsUrl, (kind, data) => {
      if (kind === "snapshot" || kind === "progress") {
        showView(main, data);  // the first of each role: the heading's badge, the progress card
        for (const t of data.tables) {
          const li = main.querySelector('li[data-table="' + CSS.escape(t.table) + '"]');
          if (!li) continue;
          set(li, "rows", count(t.rows));
          set(li, "bytes", bytes(t.bytes));
          set(li, "attempts", String(t.attempts));
          setStatus(li, t.status);
          setBar(li, t.rows, t.rows_estimate, t.status);
        }
        if (data.rate != null && !TERMINAL.includes(data.status)) {
          samples.push([Date.now() / 1000, data.rate]);
          draw(samples);
        }
      } else if (kind === "state") {
        setStatus(root, data.status);
        const error = main.querySelector('[data-role="error"]');
        if (error && data.error) { error.textContent = data.error; error.hidden = false; }
        if (TERMINAL.includes(data.status)) refresh();
      }
    });
  }

  // Files, actions and deliveries after the final state: fetched, not a reload.
  function refresh() {
    fetch(window.location.href, { credentials: "same-origin" })
      .then((r) => (r.ok ? r.text() : Promise.reject(r.status)))
      .then((html) => {
        const doc = new DOMParser().parseFromString(html, "text/html");
        for (const id of ["refreshable", "facts"]) {
          const fresh = doc.getElementById(id), here = document.getElementById(id);
          if (fresh && here) { here.replaceWith(fresh); hookConfirms(fresh); localTimes(fresh); }
        }
        const note = document.getElementById("chart-note");
        const freshNote = doc.getElementById("chart-note");
        if (note && freshNote) note.textContent = freshNote.textContent;
      })
      .catch(() => {});
  }

  function draw(samples) {
    const svg = document.getElementById("chart");
    if (!svg) return;
    const note = document.getElementById("chart-note");
    const W = 600, H = 120, pad = 6;
    const t0 = samples[0][0], t1 = Math.max(samples[samples.length - 1][0], t0 + 1);
    const top = Math.max(...samples.map((s) => s[1]), 1) * 1.15;
    const pts = samples.map(([t, r]) => [(t - t0) / (t1 - t0) * W, H - pad - r / top * (H - 2 * pad)]);
    const ns = "http://www.w3.org/2000/svg";
    let line = svg.querySelector(".line"), area = svg.querySelector(".area");
    if (!line) {
      area = document.createElementNS(ns, "path"); area.setAttribute("class", "area"); svg.appendChild(area);
      line = document.createElementNS(ns, "polyline"); line.setAttribute("class", "line"); svg.appendChild(line);
    }
    line.setAttribute("points", pts.map((p) => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" "));
    area.setAttribute("d", "M0," + H + " " + pts.map((p) => "L" + p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" ") + " L" + pts[pts.length - 1][0].toFixed(1) + "," + H + " Z");
    const last = samples[samples.length - 1][1];
    if (note) note.textContent = "Now " + count(last) + " rows/s · peak " + count(Math.max(...samples.map((s) => s[1]))) + " rows/s over " + seconds(t1 - t0);
  }

  function hookConfirms(root) {
    for (const form of root.querySelectorAll("form[data-confirm]")) {
      form.addEventListener("submit", (e) => { if (!window.confirm(form.dataset.confirm)) e.preventDefault(); });
    }
  }

  function localTimes(root) {
    for (const el of root.querySelectorAll("time[datetime]")) {
      const d = new Date(el.getAttribute("datetime"));
      if (!isNaN(d)) { el.title = el.textContent; el.textContent = d.toLocaleString(); }
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.documentElement.classList.add("js");
    for (const select of document.querySelectorAll("select[data-autosubmit]")) {
      select.addEventListener("change", () => select.form.submit());
    }
    hookConfirms(document);
    localTimes(document);
    const table = document.querySelector("table[data-live-url]");
    if (table) liveList(table);
    const detail = document.querySelector("[data-events-url]");
    if (detail) liveDetail(detail);
  });
})();
