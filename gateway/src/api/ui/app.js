// Ferry's status page. It holds no secret in the page or its URL: `ferry ui` opens it with a
// one-time code in the fragment (never sent to a server), which is traded once for a session
// kept in this tab's sessionStorage. Unless the session is read-only, the page trusts and
// untrusts peers and follows and unfollows vaults, each after the person confirms in a
// dialog, through the same admin routes as the CLI. Every value from the gateway is put in
// the page as text, never as HTML.
"use strict";

const REFRESH_MS = 2000;
const RTT_SAMPLES = 90; // three minutes at one sample per refresh
const rttHistory = new Map(); // "peer kind address" -> [rtt_ms]
// Until the session says otherwise, the page only shows.
let readOnly = true;

function sessionHeaders() {
  return { Authorization: "Bearer " + sessionStorage.getItem("ferry-session") };
}

async function startSession() {
  const match = /^#code=([0-9a-f]+)$/.exec(location.hash);
  if (match) {
    // The code works once: take it out of the address bar and history right away.
    history.replaceState(null, "", location.pathname);
    const response = await fetch("/v1/ui/session", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ code: match[1] }),
    });
    if (!response.ok) {
      throw new Error("this link has been used or is more than a minute old: run `ferry ui` again");
    }
    const session = await response.json();
    sessionStorage.setItem("ferry-session", session.session);
    sessionStorage.setItem("ferry-read-only", String(session.read_only !== false));
  }
  if (!sessionStorage.getItem("ferry-session")) {
    throw new Error("open this page with `ferry ui`");
  }
  readOnly = sessionStorage.getItem("ferry-read-only") !== "false";
  document.getElementById("read-only").hidden = !readOnly;
  document.body.classList.toggle("read-only", readOnly);
}

async function read(path) {
  const response = await fetch(path, { headers: sessionHeaders() });
  if (response.status === 401) throw sessionEnded();
  if (!response.ok) throw new Error(path + " answered " + response.status);
  return response.json();
}

function sessionEnded() {
  sessionStorage.removeItem("ferry-session");
  return new Error("this page's session ended (the gateway restarted?): run `ferry ui` again");
}

// One of the page's actions: a POST of `body` as JSON with the session, as only this page can
// send it (another site's page cannot set these headers without a preflight, which the API
// never grants). The gateway's answer, or an Error with its detail.
async function act(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { ...sessionHeaders(), "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  let answer = null;
  try {
    answer = await response.json();
  } catch (_) {}
  if (response.status === 401) throw sessionEnded();
  if (!response.ok) throw new Error(answer?.detail ?? path + " answered " + response.status);
  return answer;
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function fill(tableId, rows, columns, emptyText) {
  const body = document.querySelector("#" + tableId + " tbody");
  body.replaceChildren();
  if (rows.length === 0) {
    const tr = el("tr", undefined, "empty");
    const td = el("td", emptyText);
    td.colSpan = columns;
    tr.append(td);
    body.append(tr);
    return;
  }
  for (const cells of rows) {
    const tr = el("tr");
    for (const cell of cells) tr.append(cell instanceof Node ? cell : el("td", cell ?? "–"));
    body.append(tr);
  }
}

function td(child, className) {
  const cell = el("td", undefined, className);
  cell.append(child);
  return cell;
}

// The actions cell of a row: its buttons, none on a read-only page. Each button is
// `[text, data, open]`: `data` goes into its data-* attributes (what the tests find it by),
// `open` opens its confirmation.
function actions(buttons) {
  const cell = el("td", undefined, "act");
  if (readOnly) return cell;
  for (const [text, data, open] of buttons) {
    const button = el("button", text);
    button.type = "button";
    Object.assign(button.dataset, data);
    button.addEventListener("click", open);
    cell.append(button);
  }
  return cell;
}

// Opens the confirmation dialog: `title`, the `body` nodes, an optional label field holding
// `label`, and `ok` (its text) which runs `run(label)`; on success the dialog closes, `done`
// says what happened, and the page refreshes; on failure the dialog stays open with why.
function confirmAction({ title, body, label, ok, danger, run, done }) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-body").replaceChildren(...body);
  const labelRow = document.getElementById("confirm-label-row");
  const labelInput = document.getElementById("confirm-label");
  labelRow.hidden = label === undefined;
  labelInput.value = label ?? "";
  const error = document.getElementById("confirm-error");
  error.hidden = true;
  const okButton = document.getElementById("confirm-ok");
  const cancel = document.getElementById("confirm-cancel");
  // Fresh buttons: no listener of an earlier dialog stays attached.
  const go = okButton.cloneNode(false);
  go.textContent = ok;
  go.className = danger ? "danger" : "primary";
  okButton.replaceWith(go);
  const stop = cancel.cloneNode(true);
  cancel.replaceWith(stop);
  stop.addEventListener("click", () => dialog.close());
  go.addEventListener("click", async () => {
    go.disabled = stop.disabled = true;
    try {
      const answer = await run(labelInput.value.trim());
      dialog.close();
      notice(done(answer));
      await refresh();
    } catch (err) {
      error.hidden = false;
      error.textContent = err instanceof TypeError ? "the gateway does not answer (is it running?)" : err.message;
    } finally {
      go.disabled = stop.disabled = false;
    }
  });
  dialog.showModal();
  (label === undefined ? stop : labelInput).focus();
}

function para(...parts) {
  const p = el("p");
  for (const part of parts) p.append(part instanceof Node ? part : document.createTextNode(part));
  return p;
}

function code(text, className) {
  return el("code", text, className);
}

function trustDiscovered(peer) {
  const routes = peer.routes.map((r) => r.address + " (" + r.kind + ")").join(", ");
  confirmAction({
    title: "Trust the gateway that calls itself “" + peer.label + "”?",
    body: [
      para("Trusted, it may read and write the vaults this machine owns, and this machine " +
        "reaches the vaults it owns. Anyone on the network can announce any name, so compare " +
        "its node id with what ", code("ferry id"), " prints on that machine, every character:"),
      code(peer.node_id, "node-id"),
      para("Seen at " + (routes || "no address yet") + "; its addresses keep coming from discovery."),
    ],
    label: peer.label,
    ok: "Trust",
    run: (label) => act("/v1/admin/trust", { node_id: peer.node_id, label, routes: [] }),
    done: (trusted) => "Trusted " + trusted.label + " (" + trusted.node_id + ").",
  });
}

function untrust(peer) {
  confirmAction({
    title: "Stop trusting " + peer.label + "?",
    body: [
      para("Node id ", code(peer.node_id, "node-id")),
      para("Its connections close at once. It can no longer reach this machine's vaults, and " +
        "this machine no longer reaches its vaults: replicas of them here stop syncing."),
    ],
    ok: "Untrust",
    danger: true,
    run: () => act("/v1/admin/untrust", { label: peer.label }),
    done: (gone) => "No longer trusting " + gone.label + ".",
  });
}

function follow(vault) {
  confirmAction({
    title: "Follow vault " + vault.name + "?",
    body: [
      para("This machine keeps a replica of ", code(vault.name), ", owned by " + vault.owner +
        ", and syncs it in the background; its reads are then answered here. The same as ",
        code("ferry vault follow " + vault.name + " --owner " + vault.owner + " --detach"), "."),
    ],
    ok: "Follow",
    run: () => act("/v1/admin/vaults/follow", { name: vault.name, owner: vault.owner }),
    done: (held) => "Following " + held.name + " from " + held.owner + ".",
  });
}

function unfollow(vault) {
  confirmAction({
    title: "Stop following " + vault.name + "?",
    body: [
      para("The sync stops and the replica here (revision " + (vault.revision ?? 0) +
        ") is removed. Reads of ", code(vault.name), " then go to its owner, " + vault.owner +
        ", while it can be reached. Nothing changes at the owner."),
    ],
    ok: "Stop following",
    danger: true,
    run: () => act("/v1/admin/vaults/unfollow", { name: vault.name }),
    done: (gone) => "Stopped following " + gone.name + "; its replica here is removed.",
  });
}

function notice(text) {
  const p = document.getElementById("notice");
  p.hidden = !text;
  p.textContent = text ?? "";
}

function ago(ms) {
  if (ms === null || ms === undefined) return "never";
  if (ms < 1000) return ms + " ms ago";
  return (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + " s ago";
}

function duration(s) {
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  return (d ? d + "d " : "") + (d || h ? h + "h " : "") + m + "m " + (s % 60) + "s";
}

function sparkline(samples) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 120 24");
  const known = samples.filter((v) => v !== null);
  const max = Math.max(1, ...known);
  const points = [];
  // The newest sample at the right edge; older ones to its left, one step per refresh.
  const step = 120 / (RTT_SAMPLES - 1);
  samples.forEach((v, i) => {
    if (v === null) return;
    const x = 120 - (samples.length - 1 - i) * step;
    points.push(x.toFixed(1) + "," + (23 - (22 * v) / max).toFixed(1));
  });
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", points.join(" "));
  svg.append(line);
  const title = document.createElementNS(ns, "title");
  title.textContent = known.length + " samples, highest " + max.toFixed(2) + " ms";
  svg.append(title);
  return svg;
}

function showMachine(status) {
  document.getElementById("label").textContent = status.label;
  document.title = "Ferry · " + status.label;
  document.getElementById("machine").textContent =
    "node " + status.short_id + " · release " + status.version + " (protocols " + status.protocols +
    ") · up " + duration(status.uptime_s) + " · " + status.peers + " trusted peers · QUIC " +
    status.addresses.join(", ");
  const q = status.owner_queue;
  document.getElementById("queue").textContent =
    q.interactive + " interactive and " + q.background + " background writes waiting (of " +
    q.queue_depth + "); capacity rules " + (q.rules_on ? "on" : "off") + ": " + q.per_caller +
    " at once per caller app, " + (q.rate_per_minute ? q.rate_per_minute + " a minute" : "no rate limit");
  fill("callers", q.top_callers.map((c) => [c.node, c.app, c.in_flight, c.admitted, c.refused]), 5,
    "no callers lately");
}

function showVaults(vaults) {
  const held = new Set(vaults.filter((v) => v.role !== "remote").map((v) => v.name));
  fill("vaults", vaults.map((v) => {
    let sync = el("td", v.role === "remote" && v.replicas?.length ? "replicas: " + v.replicas.join(", ") : "–");
    if (v.sync) {
      // The replica's revision against the owner's (not the count of changes applied since
      // the gateway started, which restarts and falls short when keys were written twice).
      const reached = v.revision ?? 0;
      const bar = el("progress");
      bar.max = Math.max(1, v.sync.owner_revision);
      bar.value = Math.min(reached, bar.max);
      sync = td(bar);
      sync.append(" " + reached + " / " + v.sync.owner_revision +
        (v.sync.last_error ? " · " + v.sync.last_error : ""));
    }
    const lag = v.lag_revisions === null ? "–" :
      v.lag_revisions + " revisions" + (v.lag_s ? ", " + v.lag_s.toFixed(1) + " s" : "");
    if (v.collision) {
      // Another machine owns a vault of the same name: two vaults, never one picked silently.
      sync = el("td", "⚠ " + v.collision, "down");
    }
    // A vault a trusted peer owns can be followed unless one of that name is held here.
    const buttons = [];
    if (v.role === "remote" && !held.has(v.name) && !v.collision) {
      buttons.push(["Follow…", { action: "follow", vault: v.name }, () => follow(v)]);
    } else if (v.role === "replica") {
      buttons.push(["Stop following…", { action: "unfollow", vault: v.name }, () => unfollow(v)]);
    }
    return [v.name + (v.collision ? " ⚠" : ""), v.owner, v.role, v.revision, el("td", lag, "num"), sync,
      actions(buttons)];
  }), 7, "no vaults yet: `ferry vault create NAME` or `ferry vault follow NAME --owner PEER`");
}

function showRoutes(routes) {
  const seen = new Set();
  fill("routes", routes.map((r) => {
    const key = r.peer + " " + r.kind + " " + r.address;
    seen.add(key);
    const history = rttHistory.get(key) ?? [];
    history.push(r.rtt_ms);
    if (history.length > RTT_SAMPLES) history.shift();
    rttHistory.set(key, history);
    return [
      r.peer + (r.carried_last_call ? " ★" : ""),
      r.kind,
      r.address,
      el("td", r.state, r.state),
      el("td", r.rtt_ms === null ? "–" : r.rtt_ms.toFixed(2) + " ms", "num"),
      td(sparkline(history)),
      ago(r.last_heard_ms_ago),
      r.last_error,
    ];
  }), 8, "no routes: trust a peer with `ferry trust`");
  for (const key of rttHistory.keys()) if (!seen.has(key)) rttHistory.delete(key);
}

function showPeers(peers) {
  fill("peers", peers.map((p) => {
    const node = el("td", p.node_id.slice(0, 16) + "…");
    node.title = p.node_id;
    const button = p.trusted
      ? ["Untrust…", { action: "untrust", label: p.label, node: p.node_id }, () => untrust(p)]
      : ["Trust…", { action: "trust", label: p.label, node: p.node_id }, () => trustDiscovered(p)];
    return [
      p.label, node, p.trusted ? "yes" : "seen, not trusted", p.release, p.protocol, p.last_error,
      actions([button]),
    ];
  }), 7, "no peers trusted or seen");
}

function showCalls(calls) {
  fill("calls", calls.map((c) => [
    el("td", c.request_id), c.vault, c.owner, c.state,
    c.since ? new Date(c.since).toLocaleString() : null,
  ]), 5, "none: every write this gateway sent has a known outcome");
}

function problem(text) {
  const p = document.getElementById("problem");
  p.hidden = !text;
  p.textContent = text ?? "";
}

async function refresh() {
  try {
    const [status, vaults, routes, peers, calls] = await Promise.all([
      read("/v1/status"), read("/v1/vaults"), read("/v1/routes"), read("/v1/peers"),
      read("/v1/calls?state=unknown"),
    ]);
    showMachine(status);
    showVaults(vaults);
    showRoutes(routes);
    showPeers(peers);
    showCalls(calls);
    problem(null);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.loaded = "true";
  } catch (err) {
    problem(err instanceof TypeError ? "the gateway does not answer (is it running?)" : err.message);
  }
}

async function main() {
  try {
    await startSession();
  } catch (err) {
    problem(err.message);
    document.getElementById("machine").textContent = "";
    return;
  }
  await refresh();
  setInterval(refresh, REFRESH_MS);
}

main();
