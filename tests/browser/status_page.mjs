// Drives the system's Chromium against a running Ferry gateway for tests/tests/status_page.rs,
// which starts the gateways, mints the codes, and checks what this prints (one JSON object on
// standard output). Every wait here is bounded and fails with what it waited for.
//
//   node status_page.mjs page  API CODE SCREENSHOT PEER VAULT
//   node status_page.mjs other API CODE
//   node status_page.mjs handover API FILE LABEL
//
// `page`: opens the page as `ferry ui` would and reports what it shows once the pair's route
// is up and the vault listed, and saves a screenshot.
// `other`: from a page of another origin (and from a name rebound to this machine), tries to
// read the status and to act (stop the gateway, trade a code), and reports what it could do.
// `handover`: opens FILE, the page `ferry ui` handed the browser, as the browser would, and
// reports what it shows once it is the status page of gateway LABEL (or says why not).

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
  const modes = { page: () => page(...rest), other, handover: () => handover(code, ...rest) };
  const result = await modes[mode]();
  process.stdout.write(JSON.stringify(result) + "\n");
} finally {
  await browser.close();
}

async function page(screenshot, peer, vault) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const tab = await context.newPage();
  const consoleErrors = [];
  tab.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
  tab.on("pageerror", (e) => consoleErrors.push(String(e)));
  await tab.goto(`http://${api}/ui#code=${code}`);
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

async function other() {
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
    async ({ api, code }) => {
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
      };
    },
    { api, code },
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
  server.close();
  return report;
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
