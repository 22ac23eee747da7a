// hostbroker console: reads the broker's JSON API (/api/...) and draws the page.
// Every value from the broker is put in the page as text (textContent), never as
// markup. Changes (POST) carry the admin token kept in sessionStorage, JSON, and
// the X-Hostbroker-Console header the broker's cross-site check asks for.
"use strict";

const TOKEN_KEY = "hostbroker-admin-token";
const RATES_EVERY_MS = 5000;
const PAGE = 100;
const state = { broker: null, topics: { offset: 0, filter: "" },
                groups: { offset: 0, filter: "" },
                partitions: { offset: 0, limit: PAGE, goto: null },
                group: { offset: 0, topic: "", sortLag: false } };

function $(id) { return document.getElementById(id); }

function say(text, ok) {
  const m = $("message");
  m.textContent = text;
  m.className = ok ? "ok" : (text ? "error" : "");
}

async function getJson(path) {
  const answer = await fetch(path, { headers: { "Accept": "application/json" } });
  const body = await answer.json().catch(() => ({ error: answer.statusText }));
  if (!answer.ok) { throw new Error(body.error || answer.statusText); }
  return body;
}

async function postJson(path, document) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) { throw new Error("enter the admin token first"); }
  const answer = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Authorization": "Bearer " + token,
               "X-Hostbroker-Console": "1" },
    body: JSON.stringify(document || {}),
  });
  const body = await answer.json().catch(() => ({ error: answer.statusText }));
  if (!answer.ok) {
    if (answer.status === 401) { sessionStorage.removeItem(TOKEN_KEY); showToken(); }
    throw new Error(body.error || answer.statusText);
  }
  return body;
}

// -- units -------------------------------------------------------------------

function bytes(n) {
  if (n === null || n === undefined) { return "–"; }
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(Math.round(n))) + " " + units[i];
}

function count(n) {
  if (n === null || n === undefined) { return "–"; }
  if (Math.abs(n) >= 1e6) { return (n / 1e6).toFixed(1) + "M"; }
  if (Math.abs(n) >= 1e3) { return (n / 1e3).toFixed(1) + "k"; }
  return String(Math.round(n * 10) / 10);
}

function perSecond(n, unit) {
  if (n === null || n === undefined) { return "–"; }
  return (unit === "bytes" ? bytes(n) : count(n)) + "/s";
}

// -- tables --------------------------------------------------------------------

function cell(row, value, numeric) {
  const td = document.createElement("td");
  td.textContent = value === null || value === undefined ? "–" : String(value);
  if (numeric) { td.className = "num"; }
  row.appendChild(td);
  return td;
}

function linkCell(row, text, href) {
  const td = document.createElement("td");
  const a = document.createElement("a");
  a.href = href;
  a.textContent = text;
  td.appendChild(a);
  row.appendChild(td);
}

function fill(tableId, rows, draw) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren();
  for (const item of rows) {
    const row = document.createElement("tr");
    draw(row, item);
    body.appendChild(row);
  }
}

function pager(id, page, total, go) {
  const el = $(id);
  const last = Math.min(page.offset + page.limit, total);
  el.querySelector(".where").textContent =
    total ? `${page.offset + 1}–${last} of ${total}` : "none";
  const prev = el.querySelector(".prev"), next = el.querySelector(".next");
  prev.disabled = page.offset <= 0;
  next.disabled = last >= total;
  prev.onclick = () => go(Math.max(0, page.offset - page.limit));
  next.onclick = () => go(page.offset + page.limit);
}

function pairs(text) {  // "k=v, k2=v2" -> {k: v, k2: v2}
  const out = {};
  for (const part of text.split(",").map(s => s.trim()).filter(Boolean)) {
    const at = part.indexOf("=");
    if (at < 1) { throw new Error(`"${part}" is not KEY=VALUE`); }
    out[part.slice(0, at).trim()] = part.slice(at + 1).trim();
  }
  return out;
}

function words(text) { return text.split(",").map(s => s.trim()).filter(Boolean); }

// -- admin token ---------------------------------------------------------------

function showToken() {
  const admin = state.broker && state.broker.admin;
  const token = sessionStorage.getItem(TOKEN_KEY);
  $("token-form").classList.toggle("hidden", !admin || !!token);
  $("token-state").classList.toggle("hidden", !admin || !token);
  $("token-state").textContent = token ? "admin" : "";
  for (const el of document.querySelectorAll(".admin")) {
    el.classList.toggle("hidden", !admin);
  }
}

$("token-form").addEventListener("submit", event => {
  event.preventDefault();
  const token = $("token-input").value.trim();
  if (token) { sessionStorage.setItem(TOKEN_KEY, token); }
  $("token-input").value = "";
  showToken();
});

// -- views ---------------------------------------------------------------------

async function loadBroker() {
  const b = await getJson("/api/broker");
  state.broker = b;
  $("broker-summary").textContent =
    `broker ${b.broker_id} · ${b.mode} · ${b.state} · version ${b.version}`;
  showToken();
  return b;
}

async function showBroker() {
  const b = await loadBroker();
  fill("broker-table", [["broker id", b.broker_id], ["mode", b.mode], ["state", b.state],
                        ["version", b.version], ["topics", b.topics],
                        ["partitions", b.partitions],
                        ["controller", b.controller_id >= 0 ? b.controller_id : "none"],
                        ["console changes", b.admin ? "enabled" : "disabled"]],
       (row, [k, v]) => { cell(row, k); cell(row, v); });
  if (b.zookeeper_problem) { say("brokers not read from ZooKeeper: " + b.zookeeper_problem); }
  fill("brokers", b.brokers || [], (row, x) => {
    if (x.state !== "live") { row.className = "bad"; }
    cell(row, x.broker_id, true); cell(row, x.host); cell(row, x.port, true);
    cell(row, x.unix_path); cell(row, x.state);
  });
  fill("log-dirs", b.log_dirs || [], (row, d) => {
    if (d.state !== "online") { row.className = "bad"; }
    cell(row, d.dir_id, true); cell(row, d.path); cell(row, d.state);
  });
  fill("processes", b.processes || [], (row, p) => {
    if (p.state !== "ready") { row.className = "bad"; }
    cell(row, p.kind); cell(row, p.index, true); cell(row, p.pid, true);
    cell(row, p.state); cell(row, p.restarts, true);
  });
}

async function showTopics() {
  const page = state.topics;
  const q = new URLSearchParams({ filter: page.filter, offset: page.offset, limit: PAGE });
  const answer = await getJson("/api/topics?" + q);
  fill("topics", answer.topics, (row, t) => {
    if (t.offline) { row.className = "bad"; }
    linkCell(row, t.topic, "#/topics/" + encodeURIComponent(t.topic));
    cell(row, t.partitions, true); cell(row, t.replication, true);
    cell(row, bytes(t.size_bytes), true);
    cell(row, perSecond(t.messages_in_per_s), true);
    cell(row, perSecond(t.bytes_in_per_s, "bytes"), true);
    cell(row, perSecond(t.bytes_out_per_s, "bytes"), true);
    cell(row, t.offline, true);
  });
  pager("topics-pager", answer, answer.total, offset => { page.offset = offset; route(); });
}

async function showTopic(name) {
  const page = state.partitions;
  if (page.topic !== name) { page.topic = name; page.offset = 0; page.goto = null; }
  const q = new URLSearchParams({ offset: page.offset, limit: page.limit });
  if (page.goto !== null) { q.set("partition", page.goto); page.goto = null; }
  const t = await getJson("/api/topics/" + encodeURIComponent(name) + "?" + q);
  page.offset = t.offset;  // where a go-to landed
  const most = state.broker ? state.broker.page_max : t.limit;
  $("partition-page-size").placeholder = `${t.limit} (up to ${most})`;
  $("topic-name").textContent = t.topic;
  $("topic-summary").textContent =
    `${t.total} partitions · replication ${t.replication} · ${bytes(t.size_bytes)}`;
  $("add-partitions").value = t.total + 1;
  $("add-partitions").min = t.total + 1;
  const overrides = Object.entries(t.config || {});
  fill("topic-config", overrides.length ? overrides : [["(none)", ""]],
       (row, [k, v]) => { cell(row, k); cell(row, v); });
  fill("partitions", t.partitions, (row, p) => {
    if (p.error !== "NONE") { row.className = "bad"; }
    cell(row, p.partition, true); cell(row, p.leader);
    cell(row, (p.replicas || []).join(", ")); cell(row, (p.isr || []).join(", "));
    cell(row, p.log_start_offset, true); cell(row, p.log_end_offset, true);
    cell(row, bytes(p.size_bytes), true);
    cell(row, perSecond(p.messages_in_per_s), true);
    cell(row, perSecond(p.bytes_in_per_s, "bytes"), true);
    cell(row, perSecond(p.bytes_out_per_s, "bytes"), true);
    cell(row, p.error);
  });
  pager("partitions-pager", t, t.total, offset => { page.offset = offset; route(); });
}

async function showGroups() {
  const page = state.groups;
  const q = new URLSearchParams({ filter: page.filter, offset: page.offset, limit: PAGE });
  const answer = await getJson("/api/groups?" + q);
  fill("groups", answer.groups, (row, g) => {
    linkCell(row, g.group, "#/groups/" + encodeURIComponent(g.group));
    cell(row, g.members ? "yes" : "offsets only");
  });
  pager("groups-pager", answer, answer.total, offset => { page.offset = offset; route(); });
}

async function showGroup(name) {
  const page = state.group;
  if (page.name !== name) {
    page.name = name; page.offset = 0; page.topic = ""; page.sortLag = false;
    $("group-topic").value = ""; $("group-sort-lag").checked = false;
  }
  const q = new URLSearchParams({ offset: page.offset, limit: PAGE });
  q.set("group", name);  // in the query: a group id may hold "/" or be ".."
  if (page.topic) { q.set("topic", page.topic); }
  if (page.sortLag) { q.set("sort", "lag"); }
  const g = await getJson("/api/group?" + q);
  $("group-name").textContent = g.group;
  $("group-summary").textContent = (g.members.length
    ? `${g.phase}, generation ${g.generation}, ${g.members.length} member(s)`
    : "no members (committed offsets only)") + ` · total lag ${bytes(g.total_lag)}`;
  fill("members", g.members, (row, m) => {
    cell(row, m.member_id); cell(row, m.client_id);
    cell(row, m.session_timeout_ms + " ms", true);
    cell(row, m.assignment.map(a => `${a.topic} ${a.stream}: ${a.partitions.join(",")}`)
      .join("; "));
  });
  fill("group-partitions", g.partitions, (row, p) => {
    cell(row, p.topic); cell(row, p.partition, true); cell(row, p.owner);
    cell(row, p.committed, true); cell(row, p.high_watermark, true); cell(row, p.lag, true);
  });
  pager("group-pager", g, g.total, offset => { page.offset = offset; route(); });
}

// -- changes -------------------------------------------------------------------

function change(formId, work) {
  $(formId).addEventListener("submit", async event => {
    event.preventDefault();
    try {
      say(await work(), true);
    } catch (e) {
      say(e.message);
    }
  });
}

change("create-topic-form", async () => {
  const name = $("create-name").value.trim();
  const document = { topic: name, partitions: Number($("create-partitions").value),
                     config: pairs($("create-configs").value) };
  await postJson("/api/topics", document);
  $("create-name").value = "";
  $("create-configs").value = "";
  await showTopics();
  return `created topic ${name}`;
});

function currentTopic() { return state.partitions.topic; }

change("add-partitions-form", async () => {
  const name = currentTopic(), n = Number($("add-partitions").value);
  await postJson(`/api/topics/${encodeURIComponent(name)}/partitions`, { partitions: n });
  await showTopic(name);
  return `topic ${name} now has ${n} partitions`;
});

change("config-form", async () => {
  const name = currentTopic();
  await postJson(`/api/topics/${encodeURIComponent(name)}/config`,
                 { set: pairs($("config-set").value), delete: words($("config-delete").value) });
  $("config-set").value = "";
  $("config-delete").value = "";
  await showTopic(name);
  return `config of ${name} changed`;
});

change("delete-topic-form", async () => {
  const name = currentTopic();
  if ($("delete-confirm").value !== name) { throw new Error("type the topic's name to delete it"); }
  await postJson(`/api/topics/${encodeURIComponent(name)}/delete`, {});
  $("delete-confirm").value = "";
  // to the topics, without a hashchange (its handler clears the message shown next)
  history.pushState(null, "", "#/topics");
  await route();
  return `deleted topic ${name}`;
});

$("topic-filter-form").addEventListener("submit", event => {
  event.preventDefault();
  state.topics.filter = $("topic-filter").value.trim();
  state.topics.offset = 0;
  route();
});

$("partition-goto-form").addEventListener("submit", event => {
  event.preventDefault();
  const page = state.partitions;
  const size = $("partition-page-size").value.trim();
  const wanted = $("partition-goto").value.trim();
  if (!/^[0-9]*$/.test(size + wanted) || size === "0") {
    say("a partition and a page size are whole numbers (a page 1 or more)");
    return;
  }
  if (size) { page.limit = Number(size); }
  if (wanted !== "") { page.goto = Number(wanted); }  // else the same place, resized
  route();
});

$("group-rows-form").addEventListener("submit", event => {
  event.preventDefault();
  state.group.topic = $("group-topic").value.trim();
  state.group.sortLag = $("group-sort-lag").checked;
  state.group.offset = 0;
  route();
});

$("group-filter-form").addEventListener("submit", event => {
  event.preventDefault();
  state.groups.filter = $("group-filter").value.trim();
  state.groups.offset = 0;
  route();
});

// -- live charts -----------------------------------------------------------------

const CHARTS = [["messages_in", "count"], ["bytes_in", "bytes"], ["bytes_out", "bytes"],
                ["requests", "count"]];

function sparkline(canvas, points) {
  const g = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
  g.clearRect(0, 0, w, h);
  if (points.length < 2) { return; }
  const top = Math.max(1, ...points);
  g.strokeStyle = "#2a6fdb";
  g.lineWidth = 1.5;
  g.beginPath();
  points.forEach((v, i) => {
    const x = (i / (points.length - 1)) * (w - 2) + 1;
    const y = h - 2 - (v / top) * (h - 4);
    if (i === 0) { g.moveTo(x, y); } else { g.lineTo(x, y); }
  });
  g.stroke();
}

async function pollRates() {
  try {
    const rates = await getJson("/api/rates");
    for (const [name, unit] of CHARTS) {
      const points = (rates.series[name] || []).map(p => p[1]);
      sparkline($("chart-" + name), points);
      $("now-" + name).textContent =
        points.length ? perSecond(points[points.length - 1], unit) : "–";
    }
  } catch (e) {
    // the charts keep their last picture; the next poll tries again
  }
}

// -- routing ---------------------------------------------------------------------

const VIEWS = ["broker", "topics", "topic", "groups", "group"];

function show(view) {
  for (const v of VIEWS) { $("view-" + v).classList.toggle("hidden", v !== view); }
  for (const n of ["broker", "topics", "groups"]) {
    $("nav-" + n).classList.toggle("current", view.startsWith(n.slice(0, -1)));
  }
}

async function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const what = parts[0] || "topics";
  let name;
  try {
    name = parts.length > 1 ? decodeURIComponent(parts.slice(1).join("/")) : null;
  } catch (e) {  // a hand-edited or cut link: not percent-encoding
    say("not a valid link: " + location.hash.slice(0, 80));
    return;
  }
  try {
    if (what === "broker") { show("broker"); await showBroker(); }
    else if (what === "groups" && name !== null) { show("group"); await showGroup(name); }
    else if (what === "groups") { show("groups"); await showGroups(); }
    else if (name !== null) { show("topic"); await showTopic(name); }
    else { show("topics"); await showTopics(); }
  } catch (e) {
    say(e.message);
  }
}

window.addEventListener("hashchange", () => { say(""); route(); });
loadBroker().catch(e => say(e.message)).then(route);
pollRates();
setInterval(pollRates, RATES_EVERY_MS);
