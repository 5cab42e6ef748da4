// The agent's status page: polls /status.json every second and renders it. The server computes every
// number (live rates included); this file only formats. Text goes in with textContent, never as HTML.
"use strict";

(function () {
  const POLL_MS = 1000;
  let lastOk = null;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === "class") node.className = v;
      else if (k.startsWith("data-")) node.setAttribute(k, String(v));
      else node[k] = v;
    }
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
  }

  function fmtBps(v) {
    if (v === null || v === undefined) return "\u2013";
    const units = ["bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"];
    let i = 0;
    while (v >= 1000 && i < units.length - 1) { v /= 1000; i++; }
    return (i === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 2 : 1)) + " " + units[i];
  }

  function fmtBytes(v) {
    if (v === null || v === undefined) return "\u2013";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? v.toFixed(0) : v.toFixed(1)) + " " + units[i];
  }

  function fmtTime(unix) {
    if (unix === null || unix === undefined) return "never";
    return new Date(unix * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
  }

  // A numeric cell: the formatted text, and the raw value in data-value for scripts and tests.
  function num(field, value, text) {
    return el("td", { class: "num", "data-field": field, "data-value": value === null ? "" : value }, text);
  }

  function renderHeader(s) {
    document.getElementById("host").textContent = s.host;
    document.getElementById("version").textContent = s.version;
    document.getElementById("last-apply").textContent = fmtTime(s.config.last_apply);
    document.getElementById("interfaces").textContent = s.interfaces
      .map((i) => i.name + (i.queues_present === false ? " (no queues)" : ""))
      .join(", ") || "none";
    document.getElementById("updated").textContent = fmtTime(s.time);
    const badge = document.getElementById("sync-badge");
    const inSync = s.config.in_sync;
    badge.className = "badge " + (inSync === null ? "unknown" : inSync ? "ok" : "bad");
    badge.dataset.inSync = inSync === null ? "" : String(inSync);
    badge.textContent = inSync === null ? "config: unknown"
      : inSync ? "config: in sync" : "config: drift (" + s.config.drift.length + ")";
    document.getElementById("drift-list").replaceChildren(
      ...s.config.drift.map((d) => el("li", { "data-field": "drift" }, d)));
    // The switch check (DCBX peer state vs the config) at the daemon's last verify; null = none made
    // (no DCB driver), no interfaces = no NIC reported the switch's advertisement.
    const peer = s.peer;
    const peerBadge = document.getElementById("peer-badge");
    const peerState = !peer || peer.interfaces.length === 0 ? "unknown" : peer.mismatches.length ? "bad" : "ok";
    peerBadge.className = "badge " + peerState;
    peerBadge.dataset.peer = peerState;
    peerBadge.textContent = peerState === "unknown" ? "switch: not reported"
      : peerState === "ok" ? "switch: agrees" : "switch: disagrees (" + peer.mismatches.length + ")";
    document.getElementById("peer-list").replaceChildren(
      ...(peer ? peer.mismatches : []).map((m) => el("li", { "data-field": "peer", "data-kind": m.kind },
        "switch: " + m.where + ": expected " + m.expected + ", found " + m.found)));
    document.getElementById("section-errors").replaceChildren(
      ...Object.entries(s.errors).map(([k, v]) => el("li", { "data-section": k }, "reading " + k + " failed: " + v)));
  }

  function renderClasses(s) {
    const rows = s.classes.map((c) => el("tr", { "data-class": c.name },
      el("td", { "data-field": "name" }, c.name),
      el("td", { "data-field": "dscp" }, c.dscps.join(", ")),
      el("td", { "data-field": "priority" }, c.priority),
      el("td", { "data-field": "lossless" }, c.lossless ? "yes (PFC)" : "no"),
      el("td", { "data-field": "tsa" }, c.tsa === "strict" ? "strict" : "ETS " + c.bandwidth + " %"),
      num("bps", c.bits_per_second, fmtBps(c.bits_per_second)),
      num("backlog", c.backlog_bytes, fmtBytes(c.backlog_bytes)),
      num("drops", c.drops, c.drops === null ? "\u2013" : c.drops)));
    document.querySelector("#classes tbody").replaceChildren(...rows);
  }

  function pairState(p) {
    if (p.ok) return el("span", { class: "badge ok", "data-field": "pair-state", "data-ok": "true" }, "ok");
    const parts = p.missing.map((m) => "missing class " + m).concat(p.wrong.map((d) => "wrong DSCP " + d));
    return el("span", { class: "badge bad", "data-field": "pair-state", "data-ok": "false" }, parts.join(", "));
  }

  function renderPair(p) {
    const head = el("tr", {}, ...["class", "DSCP", "role", "local", "remote", "live sent", "live received",
      "bytes sent", "bytes received", "RTT"].map((h, i) => el("th", { class: i >= 5 ? "num" : null }, h)));
    const rows = p.flows.map((f) => el("tr", { "data-flow": f.local + ">" + f.remote, "data-class": f.class, "data-dscp": f.dscp },
      el("td", { "data-field": "class" }, f.class),
      el("td", { "data-field": "dscp" }, f.dscp),
      el("td", { "data-field": "role" }, f.role),
      el("td", { "data-field": "local" }, f.local),
      el("td", { "data-field": "remote" }, f.remote),
      num("sent-bps", f.sent_bps, fmtBps(f.sent_bps)),
      num("received-bps", f.received_bps, fmtBps(f.received_bps)),
      num("bytes-sent", f.bytes_sent, fmtBytes(f.bytes_sent)),
      num("bytes-received", f.bytes_received, fmtBytes(f.bytes_received)),
      num("rtt", f.rtt_ms, f.rtt_ms.toFixed(2) + " ms")));
    const body = p.flows.length
      ? el("table", { class: "flows" }, el("thead", {}, head), el("tbody", {}, ...rows))
      : el("p", { class: "empty" }, "no connections");
    return el("div", { class: "pair", "data-pair": p.ps + "|" + p.worker, "data-ok": String(p.ok) },
      el("h4", {}, p.ps + " \u2194 " + p.worker + " ", pairState(p)), body);
  }

  function renderJob(j) {
    const thresholds = j.thresholds === null ? "not reported" : j.thresholds.join(", ");
    const facts = [
      ["classes", "classes", j.classes.map((c) => c.name + " (DSCP " + c.dscp + ")").join(", ")],
      ["thresholds", "threshold(s)", thresholds],
      ["iteration", "iteration time",
        j.iteration_time_s === null ? "not reported" : (j.iteration_time_s * 1000).toFixed(1) + " ms"],
      ["reports", "iterations reported", j.reports],
      ["threshold-changes", "threshold changes", j.threshold_changes + " (last " + fmtTime(j.threshold_changed_at) + ")"],
    ];
    // Only when some flow carried tensors the graph pass could not trace: nothing to say otherwise.
    for (const u of j.unresolved || []) {
      const way = u.direction === "received" ? " received from " : " sent to ";
      facts.push(["unresolved", "unresolved (untraced)",
        u.task + way + u.peer + ", class " + u.class + ": " + fmtBytes(u.bytes) + " in " + u.messages + " tensor(s)"]);
    }
    // issue 36: tasks that logged a fallback warning (more than 1% of their bytes on the default class).
    const causes = { no_map_table: "no map_table installed", unresolved_share: "edges the graph pass could not trace" };
    for (const w of j.fallback || []) {
      facts.push(["fallback", "fallback warnings",
        w.task + ": " + w.warnings + " warning(s), last " + (w.share * 100).toFixed(1) + "% on the default class (" +
        (causes[w.cause] || w.cause) + ")"]);
    }
    const dl = el("dl", {});
    for (const [field, label, value] of facts) dl.append(el("dt", {}, label), el("dd", { "data-field": field }, value));
    const pairs = j.pairs.length ? j.pairs.map(renderPair)
      : [el("p", { class: "empty" }, "No PS-worker pair of this job has a task on this host.")];
    return el("section", { class: "job", "data-job": j.job_id }, el("h3", {}, "job " + j.job_id), dl, ...pairs);
  }

  function render(s) {
    renderHeader(s);
    renderClasses(s);
    const jobs = s.jobs.length ? s.jobs.map(renderJob) : [el("p", { class: "empty" }, "No jobs registered.")];
    document.getElementById("jobs").replaceChildren(...jobs);
  }

  function showError(err) {
    const banner = document.getElementById("error-banner");
    banner.textContent = "Cannot reach the agent (" + err.message + "). " +
      (lastOk === null ? "No data yet." : "The data below is stale: last update " + fmtTime(lastOk) + ".");
    banner.hidden = false;
    document.body.dataset.state = "error";
  }

  async function poll() {
    try {
      const r = await fetch("/status.json", { cache: "no-store" });
      if (!r.ok) throw new Error("status.json: HTTP " + r.status);
      const s = await r.json();
      render(s);
      lastOk = s.time;
      document.getElementById("error-banner").hidden = true;
      document.body.dataset.state = "ok";
    } catch (err) {
      showError(err);
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  poll();
})();
