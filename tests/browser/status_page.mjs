// Drives the system's Chromium against a running Ferry gateway for tests/tests/status_page.rs,
// which starts the gateways, mints the codes, and checks what this prints (one JSON object on
// standard output). Every wait here is bounded and fails with what it waited for.
//
//   node status_page.mjs page  API CODE SCREENSHOT PEER VAULT
//   node status_page.mjs other API CODE SESSION STRANGER
//   node status_page.mjs handover API FILE LABEL
//   node status_page.mjs act API CODE SHOTS ACTION ARGS...
//
// `page`: opens the page as `ferry ui` would and reports what it shows once the pair's route
// is up and the vault listed, and saves a screenshot.
// `other`: from a page of another origin (and from a name rebound to this machine), tries to
// read the status and to act (stop the gateway, trade a code, and with SESSION, a session
// that leaked, trust the node STRANGER, untrust peer `b`, follow `b`'s vault `diary` and
// unfollow `journal`), and reports what it could do.
// `handover`: opens FILE, the page `ferry ui` handed the browser, as the browser would, and
// reports what it shows once it is the status page of gateway LABEL (or says why not).
// `act`: opens the page as `ferry ui` would and does one thing on it as a person would,
// clicking its buttons and confirming, with screenshots into the directory SHOTS:
//   trust NODE LABEL      trusts the discovered peer NODE (first cancelling once)
//   follow VAULT          follows VAULT and waits until the replica has caught up
//   unfollow VAULT        stops following VAULT
//   untrust NODE LABEL    untrusts the peer LABEL
//   read-only VAULT       on a read-only page: reports the buttons shown, and tries to
//                         unfollow VAULT through the page's own session anyway

import http from "node:http";
import { pathToFileURL } from "node:url";
import { chromium } from "playwright-core";

const WAIT_MS = 20000;
// `code` is the handover mode's file.
const [mode, api, code, ...rest] = process.argv.slice(2);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    // A name of another site that resolves to this machine: a DNS rebinding, without DNS.
    "--host-resolver-rules=MAP rebind.test 127.0.0.1",
  ],
});

try {
  const modes = {
    page: () => page(...rest),
    other: () => other(...rest),
    handover: () => handover(code, ...rest),
    act: () => act(...rest),
  };
  const result = await modes[mode]();
  process.stdout.write(JSON.stringify(result) + "\n");
} finally {
  await browser.close();
}

// A new tab on the status page, opened with the one-time code; the errors its console shows
// are collected.
async function openStatusPage() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const tab = await context.newPage();
  const consoleErrors = [];
  tab.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
  tab.on("pageerror", (e) => consoleErrors.push(String(e)));
  await tab.goto(`http://${api}/ui#code=${code}`);
  return { context, tab, consoleErrors };
}

async function page(screenshot, peer, vault) {
  const { context, tab, consoleErrors } = await openStatusPage();
  const routeUp = `#routes tbody tr:has(td:text-is("up")):has(td:text-matches("^${peer}( ★)?$"))`;
  const vaultRow = `#vaults tbody tr:has(td:text-is("${vault}"))`;
  try {
    await tab.waitForSelector(routeUp, { timeout: WAIT_MS });
    await tab.waitForSelector(vaultRow, { timeout: WAIT_MS });
    // Two refreshes more, so the RTT chart has points to draw.
    await tab.waitForFunction(
      () => document.querySelectorAll("#routes svg.spark polyline[points*=' ']").length > 0,
      null,
      { timeout: WAIT_MS },
    );
  } catch (err) {
    const shown = await tab.evaluate(() => document.body.innerText);
    throw new Error(`the page never showed ${peer}'s route up and vault ${vault}: ${err}\n${shown}`);
  }
  await tab.screenshot({ path: screenshot, fullPage: true });
  const rows = (table) =>
    tab.$$eval(`#${table} tbody tr`, (trs) => trs.map((tr) => [...tr.cells].map((c) => c.innerText)));
  const result = {
    ...(await header(tab)),
    routes: await rows("routes"),
    vaults: await rows("vaults"),
    peers: await rows("peers"),
    calls: await rows("calls"),
    sparklines: await tab.$$eval("#routes svg.spark", (s) => s.length),
    progress_bars: await tab.$$eval("#vaults progress", (bars) => bars.map((b) => [b.value, b.max])),
    console_errors: consoleErrors,
  };
  // A used code works no more: a second tab opening the same link gets no session.
  const second = await context.newPage();
  await second.goto(`http://${api}/ui#code=${code}`);
  await second.waitForFunction(() => !document.getElementById("problem").hidden, null, {
    timeout: WAIT_MS,
  });
  result.reused_link_problem = await second.innerText("#problem");
  return result;
}

async function other(session, stranger) {
  // A page of another origin: a plain server on another port of this machine.
  const server = http.createServer((_, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end("<!doctype html><title>another site</title><p>hello</p>");
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin = `http://127.0.0.1:${server.address().port}`;
  const tab = await (await browser.newContext()).newPage();
  await tab.goto(origin + "/");
  const report = await tab.evaluate(
    async ({ api, code, session, stranger }) => {
      const attempt = async (url, init) => {
        try {
          const r = await fetch(url, init);
          let body = null;
          try {
            body = await r.text();
          } catch (_) {}
          return { type: r.type, status: r.status, body };
        } catch (err) {
          return { error: String(err) };
        }
      };
      return {
        read_status: await attempt(`http://${api}/v1/status`),
        read_status_with_credentials: await attempt(`http://${api}/v1/status`, {
          credentials: "include",
        }),
        read_page: await attempt(`http://${api}/ui`),
        stop: await attempt(`http://${api}/v1/admin/stop`, { method: "POST", mode: "no-cors" }),
        trade: await attempt(`http://${api}/v1/ui/session`, {
          method: "POST",
          mode: "no-cors",
          headers: { "content-type": "text/plain" },
          body: JSON.stringify({ code }),
        }),
        // A form's kind of request (no preflight): it arrives, with this page's Origin, and
        // is refused; the page cannot read the answer.
        trust_simple: await attempt(`http://${api}/v1/admin/trust`, {
          method: "POST",
          mode: "no-cors",
          headers: { "content-type": "text/plain" },
          body: JSON.stringify({ node_id: stranger, label: "intruder" }),
        }),
        // With a leaked session: the Authorization header and the JSON type need a preflight,
        // which the API refuses, so the browser never sends the request.
        ...Object.fromEntries(
          await Promise.all(
            [
              ["trust_with_session", "/v1/admin/trust", { node_id: stranger, label: "intruder" }],
              ["untrust_with_session", "/v1/admin/untrust", { label: "b" }],
              ["follow_with_session", "/v1/admin/vaults/follow", { name: "diary", owner: "b" }],
              ["unfollow_with_session", "/v1/admin/vaults/unfollow", { name: "journal" }],
            ].map(async ([name, path, body]) => [
              name,
              await attempt(`http://${api}${path}`, {
                method: "POST",
                headers: { authorization: `Bearer ${session}`, "content-type": "application/json" },
                body: JSON.stringify(body),
              }),
            ]),
          ),
        ),
      };
    },
    { api, code, session, stranger },
  );
  // A frame of the page inside the other site: refused by frame-ancestors.
  await tab.setContent(`<iframe id="f" src="http://${api}/ui"></iframe>`);
  const frame = await (await tab.waitForSelector("#f")).contentFrame();
  report.framed_page_text = frame ? await frame.evaluate(() => document.body?.innerText ?? "").catch((e) => String(e)) : null;
  // The same gateway under a rebound name: everything refused, the page included.
  const port = api.split(":").pop();
  const rebound = await (await browser.newContext()).newPage();
  const answer = await rebound.goto(`http://rebind.test:${port}/ui#code=${code}`);
  report.rebound_page_status = answer ? answer.status() : null;
  report.rebound_trade = await rebound.evaluate(async (code) => {
    const r = await fetch("/v1/ui/session", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ code }),
    });
    return r.status;
  }, code);
  report.rebound_status = await rebound.evaluate(async () => (await fetch("/v1/status")).status);
  // Same-origin to the rebound name, so no preflight: the request arrives and is refused.
  report.rebound_trust = await rebound.evaluate(
    async ({ session, stranger }) => {
      const r = await fetch("/v1/admin/trust", {
        method: "POST",
        headers: { authorization: `Bearer ${session}`, "content-type": "application/json" },
        body: JSON.stringify({ node_id: stranger, label: "intruder" }),
      });
      return r.status;
    },
    { session, stranger },
  );
  server.close();
  return report;
}

// One action on the status page, done as a person does it; see the top of the file.
async function act(shots, action, ...args) {
  const { tab, consoleErrors } = await openStatusPage();
  await wait(tab, "the page to load", () => document.body.dataset.loaded === "true");
  const shot = (name) => tab.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
  const steps = { trust, follow, unfollow, untrust, "read-only": readOnly };
  const report = await steps[action](tab, shot, ...args);
  return { ...report, ...(await header(tab)), console_errors: consoleErrors };
}

// Waits (bounded) until `test` holds in the page; fails naming `what` and what the page shows.
async function wait(tab, what, test, arg) {
  try {
    await tab.waitForFunction(test, arg, { timeout: WAIT_MS });
  } catch (err) {
    const shown = await tab.evaluate(() => document.body.innerText).catch(() => "");
    throw new Error(`waited for ${what}: ${err}\n${shown}`);
  }
}

// What the open confirmation dialog says.
async function dialog(tab) {
  return tab.evaluate(() => ({
    title: document.getElementById("confirm-title").textContent,
    body: document.getElementById("confirm-body").innerText,
    node_id: document.querySelector("#confirm-body code.node-id")?.textContent ?? null,
    label: document.getElementById("confirm-label-row").hidden
      ? null
      : document.getElementById("confirm-label").value,
    ok: document.getElementById("confirm-ok").textContent,
  }));
}

// Functions, not constants: the mode runs (top-level await, above) before a constant here
// would be initialised.
function dialogOpen() {
  return document.getElementById("confirm").open;
}

function dialogClosed() {
  return !document.getElementById("confirm").open;
}

function noticeText(tab) {
  return tab.evaluate(() => document.getElementById("notice").textContent);
}

function rows(tab, table) {
  return tab.$$eval(`#${table} tbody tr`, (trs) =>
    trs.map((tr) => [...tr.cells].map((c) => c.innerText.trim())),
  );
}

// Opens the confirmation of the button `selector`, takes its screenshot `name`, confirms.
async function confirmVia(tab, shot, selector, name) {
  await tab.click(selector);
  await wait(tab, "the confirmation", dialogOpen);
  const said = await dialog(tab);
  await shot(name);
  await tab.click("#confirm-ok");
  await wait(tab, "the confirmation to close after the action", dialogClosed);
  return said;
}

async function trust(tab, shot, node, label) {
  const button = `#peers button[data-action="trust"][data-node="${node}"]`;
  await wait(tab, `a Trust button for ${label}`, (b) => document.querySelector(b) !== null, button);
  await shot("01-discovered");
  // Cancelled first: nothing happens.
  await tab.click(button);
  await wait(tab, "the confirmation", dialogOpen);
  await tab.click("#confirm-cancel");
  await wait(tab, "the cancelled confirmation to close", dialogClosed);
  const updated = await tab.innerText("#updated");
  await wait(tab, "a refresh after the cancel", (u) => document.getElementById("updated").textContent !== u, updated);
  const still_untrusted_after_cancel = (await tab.$(button)) !== null;
  const said = await confirmVia(tab, shot, button, "02-trust-confirm");
  const trusted = `#peers button[data-action="untrust"][data-node="${node}"]`;
  await wait(tab, `${label} listed as trusted`, (b) => document.querySelector(b) !== null, trusted);
  await shot("03-trusted");
  return { dialog: said, still_untrusted_after_cancel, notice: await noticeText(tab), peers: await rows(tab, "peers") };
}

async function follow(tab, shot, vault) {
  const said = await confirmVia(tab, shot, `#vaults button[data-action="follow"][data-vault="${vault}"]`, "04-follow-confirm");
  // Caught up: the replica's bar full, at the owner's revision.
  await wait(
    tab,
    `the replica of ${vault} caught up`,
    (v) => {
      const row = [...document.querySelectorAll("#vaults tbody tr")].find((tr) => tr.cells[0].textContent === v);
      const bar = row?.querySelector("progress");
      return row?.cells[2].textContent === "replica" && bar && bar.value > 0 && bar.value === bar.max;
    },
    vault,
  );
  await shot("05-following");
  return { dialog: said, notice: await noticeText(tab), vaults: await rows(tab, "vaults") };
}

async function unfollow(tab, shot, vault) {
  const said = await confirmVia(tab, shot, `#vaults button[data-action="unfollow"][data-vault="${vault}"]`, "06-unfollow-confirm");
  await wait(
    tab,
    `${vault} listed as a remote vault again`,
    (v) => document.querySelector(`#vaults button[data-action="follow"][data-vault="${v}"]`) !== null,
    vault,
  );
  await shot("07-unfollowed");
  return { dialog: said, notice: await noticeText(tab), vaults: await rows(tab, "vaults") };
}

async function untrust(tab, shot, node, label) {
  const said = await confirmVia(tab, shot, `#peers button[data-action="untrust"][data-label="${label}"]`, "08-untrust-confirm");
  await wait(
    tab,
    `${label} listed as seen, not trusted`,
    (n) => document.querySelector(`#peers button[data-action="trust"][data-node="${n}"]`) !== null,
    node,
  );
  await shot("09-untrusted");
  return { dialog: said, notice: await noticeText(tab), peers: await rows(tab, "peers") };
}

async function readOnly(tab, shot, vault) {
  await shot("10-read-only");
  const buttons = await tab.$$eval("button[data-action]", (b) => b.map((x) => x.textContent));
  const badge = await tab.evaluate(() => !document.getElementById("read-only").hidden);
  // The page's own session, its own origin: only the session's kind stands in the way.
  const tried = await tab.evaluate(async (v) => {
    const r = await fetch("/v1/admin/vaults/unfollow", {
      method: "POST",
      headers: {
        Authorization: "Bearer " + sessionStorage.getItem("ferry-session"),
        "Content-Type": "application/json",
      },
      body: JSON.stringify({ name: v }),
    });
    return { status: r.status, body: await r.json() };
  }, vault);
  return { buttons, badge, unfollow_anyway: tried, vaults: await rows(tab, "vaults") };
}

async function handover(file, label) {
  const tab = await (await browser.newContext()).newPage();
  const consoleErrors = [];
  tab.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
  tab.on("pageerror", (e) => consoleErrors.push(String(e)));
  await tab.goto(pathToFileURL(file).href);
  try {
    await tab.waitForFunction(
      (title) => document.title === title || document.getElementById("problem")?.hidden === false,
      `Ferry · ${label}`,
      { timeout: WAIT_MS },
    );
  } catch (err) {
    const shown = await tab.evaluate(() => document.body?.innerText ?? "");
    throw new Error(`the handover page never became ${label}'s status page: ${err}\n${tab.url()}\n${shown}`);
  }
  return { ...(await header(tab)), console_errors: consoleErrors };
}

// What the status page in `tab` says of itself: its title and machine line, the problem it
// shows (null when none), its address, and whether it holds a session.
async function header(tab) {
  return {
    title: await tab.title(),
    machine: await tab.innerText("#machine"),
    problem: await tab.evaluate(() => {
      const p = document.getElementById("problem");
      return p.hidden ? null : p.textContent;
    }),
    address_bar: tab.url(),
    session_stored: await tab.evaluate(() => sessionStorage.getItem("ferry-session") !== null),
  };
}
