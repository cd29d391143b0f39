// The hadar dashboard: polls the API with the token the user gives, draws the cluster, the jobs,
// utilization and placement. Plain DOM and SVG: nothing is loaded from anywhere else.
"use strict";

const POLL_MS = 1500;
const SVG = "http://www.w3.org/2000/svg";
const state = { token: sessionStorage.getItem("hadar-token") || "", rounds: [], lastRound: 0, timer: null };

const $ = (id) => document.getElementById(id);

function color(jobId) {
  const hue = (jobId * 137.508) % 360;
  return `hsl(${hue.toFixed(0)}, 55%, 45%)`;
}

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: `Bearer ${state.token}` }, options.headers || {});
  const resp = await fetch(path, Object.assign({}, options, { headers }));
  let body = null;
  try { body = await resp.json(); } catch (e) { body = { error: `HTTP ${resp.status}` }; }
  if (!resp.ok) {
    const err = new Error(body && body.error ? body.error : `HTTP ${resp.status}`);
    err.status = resp.status;
    throw err;
  }
  return body;
}

function el(tag, attrs = {}, children = []) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v; else if (k === "style") node.style.cssText = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.appendChild(c);
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function fmtTime(s) {
  if (s === null || s === undefined) return "-";
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(2)} h`;
}

function fmtRate(v) { return v === null || v === undefined ? "-" : v.toFixed(v < 10 ? 2 : 1); }

function drawCluster(cluster) {
  const root = $("cluster");
  root.replaceChildren();
  for (const node of cluster.nodes) {
    const gpus = el("div", { class: "gpus" });
    for (const g of node.gpus) {
      const busy = g.job !== null && g.job !== undefined;
      const box = el("div", { class: busy ? "gpu busy" : "gpu", "data-gpu": g.id, title: `GPU ${g.id}`,
                              text: busy ? `#${g.job}` : "idle" });
      if (busy) box.style.background = color(g.job);
      gpus.appendChild(box);
    }
    root.appendChild(el("div", { class: node.up ? "node" : "node down", "data-node": node.name }, [
      el("div", { class: "name", text: node.name }),
      el("div", { class: "meta", text: `${node.gpu_type} x ${node.gpus.length}${node.up ? "" : " - DOWN"}` }),
      gpus,
    ]));
  }
}

function rateCell(job) {
  const cell = el("td", { class: "rates" });
  for (const [type, r] of Object.entries(job.throughput)) {
    const line = el("div");
    line.appendChild(document.createTextNode(`${type}: `));
    line.appendChild(el("b", { text: fmtRate(r.measured) }));
    line.appendChild(document.createTextNode(` / ${fmtRate(r.estimated)}`));
    cell.appendChild(line);
  }
  return cell;
}

function drawJobs(jobs) {
  const body = $("jobs").querySelector("tbody");
  body.replaceChildren();
  for (const job of jobs.slice().reverse()) {
    const pct = (100 * job.progress).toFixed(1);
    const bar = el("span", { class: "bar" }, [el("div", { style: `width: ${pct}%` })]);
    const cancel = el("td");
    if (job.status === "queued" || job.status === "running") {
      const b = el("button", { class: "cancel", text: job.cancel_requested ? "cancelling" : "cancel" });
      b.addEventListener("click", () => cancelJob(job.id));
      cancel.appendChild(b);
    }
    const statusText = job.status + (job.failure ? `: ${job.failure}` : "");
    body.appendChild(el("tr", { "data-job-id": job.id, "data-status": job.status }, [
      el("td", { class: "num", text: String(job.id) }),
      el("td", { text: job.name }),
      el("td", { class: "team", text: job.team ? `${job.team} (${job.user})` : "-" }),
      el("td", { text: job.job_type }),
      el("td", { class: "num", text: String(job.gpus) }),
      el("td", { class: `status ${job.status}`, text: statusText }),
      el("td", { class: "progress num", "data-progress": job.progress }, [bar, document.createTextNode(` ${pct} %`)]),
      rateCell(job),
      el("td", { class: "num", text: fmtTime(job.jct_s) }),
      cancel,
    ]));
  }
}

function perType(counts) {
  if (counts === null || counts === undefined) return "not limited";
  const parts = Object.entries(counts).map(([t, k]) => `${t} ${k}`);
  return parts.length ? parts.join(", ") : "-";
}

function drawTeams(teams) {
  $("teams-section").hidden = teams.length === 0;
  const body = $("teams").querySelector("tbody");
  body.replaceChildren();
  for (const t of teams) {
    body.appendChild(el("tr", { "data-team": t.team }, [
      el("td", { text: t.team }),
      el("td", { class: "num", text: String(t.weight) }),
      el("td", { class: "quota", text: perType(t.quota) + (t.borrow ? " (borrows)" : "") }),
      el("td", { class: "in-use", text: perType(t.in_use) }),
      el("td", { class: "borrowed", text: perType(t.borrowed) }),
      el("td", { class: "running num", text: String(t.running) }),
      el("td", { class: "waiting num", text: String(t.waiting) }),
    ]));
  }
}

const PLOT = { left: 46, right: 596, top: 8, bottom: 150 };  // inside the 600 x 170 view box

function axisText(root, x, y, text, anchor = "start") {
  const t = svg("text", { x, y, "font-size": 11, fill: "#66707c", "text-anchor": anchor });
  t.textContent = text;
  root.appendChild(t);
}

function timeAxis(root, t0, t1) {
  axisText(root, PLOT.left, 166, fmtTime(t0));
  axisText(root, PLOT.right, 166, fmtTime(t1), "end");
  axisText(root, (PLOT.left + PLOT.right) / 2, 166, "service time", "middle");
}

function xOf(t, t0, span) { return PLOT.left + (PLOT.right - PLOT.left) * (t - t0) / span; }

function drawUtilization(rounds) {
  const root = $("utilization");
  root.replaceChildren();
  if (!rounds.length) return;
  const t0 = rounds[0].start_s, t1 = rounds[rounds.length - 1].end_s, span = Math.max(1e-6, t1 - t0);
  const yOf = (u) => PLOT.bottom - (PLOT.bottom - PLOT.top) * u;
  const pts = [];
  for (const r of rounds) {
    const u = r.up_gpus ? r.busy_gpus / r.up_gpus : 0;
    pts.push(`${xOf(r.start_s, t0, span).toFixed(1)},${yOf(u).toFixed(1)}`);
    pts.push(`${xOf(r.end_s, t0, span).toFixed(1)},${yOf(u).toFixed(1)}`);
  }
  for (const u of [0, 0.5, 1]) {
    root.appendChild(svg("line", { x1: PLOT.left, x2: PLOT.right, y1: yOf(u), y2: yOf(u), stroke: "#e5e8ec" }));
    axisText(root, PLOT.left - 4, yOf(u) + 4, `${100 * u}%`, "end");
  }
  root.appendChild(svg("polyline", { points: pts.join(" "), fill: "none", stroke: "#2e86c1", "stroke-width": 2 }));
  const last = rounds[rounds.length - 1];
  axisText(root, PLOT.right, PLOT.top + 14, `last round: ${last.busy_gpus}/${last.up_gpus} GPUs busy`, "end");
  timeAxis(root, t0, t1);
}

function drawTimeline(rounds, gpuCount) {
  const root = $("timeline");
  root.replaceChildren();
  if (!rounds.length || !gpuCount) return;
  const t0 = rounds[0].start_s, t1 = rounds[rounds.length - 1].end_s, span = Math.max(1e-6, t1 - t0);
  const h = (PLOT.bottom - PLOT.top) / gpuCount;
  for (let g = 0; g < gpuCount; g++) axisText(root, PLOT.left - 4, PLOT.top + g * h + h / 2 + 4, `GPU ${g}`, "end");
  for (const r of rounds) {
    const x = xOf(r.start_s, t0, span), w = Math.max(0.5, xOf(r.end_s, t0, span) - x);
    for (const [job, copy, gpus, failed] of r.leases) {
      for (const g of gpus) {
        const rect = svg("rect", { x: x.toFixed(2), y: (PLOT.top + g * h + 1).toFixed(2), width: w.toFixed(2),
                                   height: Math.max(1, h - 2).toFixed(2), fill: failed ? "#c0392b" : color(job) });
        const tip = svg("title");
        tip.textContent = `job ${job}${copy ? ` copy ${copy}` : ""} on GPU ${g}, round ${r.id}${failed ? " (failed)" : ""}`;
        rect.appendChild(tip);
        root.appendChild(rect);
      }
    }
  }
  timeAxis(root, t0, t1);
}

async function refresh() {
  try {
    const [health, jobs, cluster, timeline, teams, me] = await Promise.all([
      api("/api/health"), api("/api/jobs"), api("/api/cluster"), api(`/api/timeline?since=${state.lastRound}`),
      api("/api/teams"), api("/api/whoami"),
    ]);
    state.rounds = state.rounds.concat(timeline.rounds).slice(-300);
    if (state.rounds.length) state.lastRound = state.rounds[state.rounds.length - 1].id;
    const counts = {};
    for (const j of jobs.jobs) counts[j.status] = (counts[j.status] || 0) + 1;
    const summary = Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(", ") || "no jobs yet";
    const who = me.tenants ? `${me.user}${me.team ? ` (${me.team})` : ""}${me.admin ? ", admin" : ""} | ` : "";
    $("status-line").textContent = `${who}${health.state}${health.error ? `: ${health.error}` : ""} | policy ` +
      `${health.policy} | ${cluster.gpus_up}/${cluster.gpus} GPUs up | ${summary} | t = ${fmtTime(health.now_s)}`;
    drawCluster(cluster);
    drawJobs(jobs.jobs);
    drawTeams(teams.teams);
    drawUtilization(state.rounds);
    drawTimeline(state.rounds, cluster.gpus);
  } catch (e) {
    if (e.status === 401) { logout(e.message); return; }
    $("status-line").textContent = `cannot reach the server: ${e.message}`;
  }
}

function start() {
  $("login").hidden = true;
  $("app").hidden = false;
  refresh();
  if (state.timer === null) state.timer = setInterval(refresh, POLL_MS);
}

function logout(message) {
  sessionStorage.removeItem("hadar-token");
  state.token = "";
  if (state.timer !== null) { clearInterval(state.timer); state.timer = null; }
  $("app").hidden = true;
  $("login").hidden = false;
  $("token-error").textContent = message || "";
}

async function cancelJob(id) {
  try { await api(`/api/jobs/${id}/cancel`, { method: "POST" }); } catch (e) { alert(e.message); }
  refresh();
}

async function submitJobs(event) {
  event.preventDefault();
  const out = $("submit-result");
  out.className = "";
  try {
    const res = await api("/api/jobs", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ file: { name: $("submit-format").value, text: $("submit-text").value } }),
    });
    out.textContent = `submitted: job ${res.ids.join(", ")}`;
  } catch (e) {
    out.className = "error";
    out.textContent = e.message;
  }
  refresh();
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  state.token = $("token").value.trim();
  sessionStorage.setItem("hadar-token", state.token);
  $("token-error").textContent = "";
  start();
});
$("submit-form").addEventListener("submit", submitJobs);
if (state.token) start();
