// The TypeScript client against real gateways: every kind of write outcome it can be told,
// reads with their source, settling, the change feed, and the edge where a client most easily
// lies (the connection breaks after the request left: that is never "nothing was sent").
//
// Run from clients/typescript: `npm test` (after `cargo build -p ferry-tests --bins`).

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { Client, mayResendAfterS, newRequestId, GatewayDown, type Settlement } from "../src/index.js";
import { pairWithNotes, type Gateway } from "./gateways.js";

const SETTLE_BOUND_MS = 30_000;

describe("against a pair", () => {
  let a: Gateway;
  let b: Gateway;
  let owner: Client;
  let caller: Client;

  before(async () => {
    [a, b] = await pairWithNotes();
    owner = new Client("ts-test", { home: a.home });
    caller = new Client("ts-test", { home: b.home });
  });
  after(async () => {
    await a.stop();
    await b.stop();
  });

  test("a write through a peer is done and reads back with its source", async () => {
    const result = await caller.put("notes", "dir/with spaces.txt", "hello");
    assert.equal(result.outcome, "done", JSON.stringify(result));
    if (result.outcome !== "done") return;
    assert.equal(result.requestId.length, 36);
    const record = await caller.get("notes", "dir/with spaces.txt");
    assert.ok(record);
    assert.equal(Buffer.from(record.value).toString(), "hello");
    assert.equal(record.revision, result.revision);
    assert.ok(["owner", "cache"].includes(record.source), record.source);
    const local = await owner.get("notes", "dir/with spaces.txt");
    assert.deepEqual([local?.source, local?.stale], ["local", false]);
    assert.equal(await caller.get("notes", "never-written"), undefined);
  });

  test("a compare-and-swap on a changed record is refused with the current revision", async () => {
    const done = await caller.put("notes", "cas", "1");
    assert.equal(done.outcome, "done");
    if (done.outcome !== "done") return;
    const refused = await caller.put("notes", "cas", "2", { ifRevision: 0 });
    assert.equal(refused.outcome, "refused", JSON.stringify(refused));
    if (refused.outcome !== "refused") return;
    assert.deepEqual([refused.status, refused.error, refused.currentRevision], [409, "conflict", done.revision]);
    assert.equal(mayResendAfterS(refused), undefined, "a conflict must not be sent again as it is");
    const deleted = await caller.delete("notes", "cas", { ifRevision: done.revision });
    assert.equal(deleted.outcome, "done", JSON.stringify(deleted));
    assert.equal(await owner.get("notes", "cas"), undefined);
  });

  test("bad input is invalid and nothing is sent", async () => {
    const unknownVault = await caller.put("nowhere", "k", "x");
    assert.deepEqual(
      unknownVault.outcome === "invalid" ? [unknownVault.status, unknownVault.error] : unknownVault,
      [404, "unknown_vault"],
    );
    assert.equal((await caller.put("notes", "k", "x", { timeoutS: 0 })).outcome, "invalid");
    // What cannot be a header is refused before anything leaves, never outcome_unknown.
    assert.equal((await caller.put("notes", "k", "x", { requestId: "two\nlines" })).outcome, "invalid");
    assert.equal((await new Client("café\u0100", { home: b.home }).put("notes", "k", "x")).outcome, "invalid");
  });

  test("a done write settles done and an id never sent is known as such", async () => {
    const done = await caller.put("notes", "settled", "x");
    assert.equal(done.outcome, "done");
    if (done.outcome !== "done") return;
    assert.deepEqual(await caller.settle(done.requestId), { state: "done", revision: done.revision });
    const never = await caller.settle(newRequestId());
    assert.ok(["never_sent", "not_carried_out"].includes(never.state), JSON.stringify(never));
  });

  test("the change feed pages, waits for news, and follows", async () => {
    const start = (await owner.changes("notes")).vaultRevision;
    const done = await caller.put("notes", "fed", "x");
    assert.equal(done.outcome, "done");
    const page = await owner.changes("notes", { after: start });
    assert.ok(page.changes.some((c) => c.key === "fed" && !c.deleted), JSON.stringify(page));
    const waiting = owner.changes("notes", { after: page.next, waitS: 10 });
    const later = await caller.put("notes", "fed-later", "y");
    assert.equal(later.outcome, "done");
    assert.deepEqual((await waiting).changes.map((c) => c.key), ["fed-later"]);
    const followed = [];
    for await (const change of owner.follow("notes", start)) {
      followed.push(change.key);
      if (change.key === "fed-later") break;
    }
    assert.deepEqual(followed, ["fed", "fed-later"]);
  });
});

describe("when the local gateway is down", () => {
  test("a write says local_gateway_down and a settle never says nothing was written", async () => {
    const port = await freePort();
    const home = mkdtempSync(path.join(os.tmpdir(), "ferry-ts-down-"));
    try {
      writeFileSync(path.join(home, "api.addr"), `127.0.0.1:${port}\n`);
      writeFileSync(path.join(home, "local-token"), "0".repeat(64));
      const client = new Client("ts-test", { home });
      const result = await client.put("notes", "k", "x");
      assert.equal(result.outcome, "local_gateway_down", JSON.stringify(result));
      assert.match(result.outcome === "local_gateway_down" ? result.detail : "", /nothing was sent/);
      const settled: Settlement = await client.settle(newRequestId(), { vault: "notes" });
      assert.equal(settled.state, "unavailable");
      await assert.rejects(client.get("notes", "k"), GatewayDown);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
    const empty = mkdtempSync(path.join(os.tmpdir(), "ferry-ts-empty-"));
    try {
      assert.equal((await new Client("ts-test", { home: empty }).put("notes", "k", "x")).outcome, "local_gateway_down");
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });

  test("a connection that breaks after the request left is outcome_unknown", async () => {
    // A "gateway" that takes the whole request and hangs up without a word: the request left,
    // so the client must not say nothing was sent.
    const received: string[] = [];
    const server = net.createServer((socket) => {
      let data = "";
      socket.on("data", (chunk) => {
        data += chunk.toString();
        if (data.includes("\r\n\r\n")) {
          received.push(data);
          socket.destroy();
        }
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as net.AddressInfo;
    try {
      const client = new Client("ts-test", { address: `127.0.0.1:${port}`, token: "t" });
      const result = await client.put("notes", "k", "x");
      assert.equal(result.outcome, "outcome_unknown", JSON.stringify(result));
      if (result.outcome !== "outcome_unknown") return;
      assert.equal(received.length, 1);
      assert.match(received[0] ?? "", new RegExp(`x-ferry-request-id: ${result.requestId}`, "i"));
    } finally {
      server.close();
    }
  });
});

describe("when the owner answers too late", () => {
  test("outcome_unknown carries its request id and settles to the truth", async () => {
    // The owner holds every write batch 1.5 s before its commit; the caller gives up at 1 s.
    const [a, b] = await pairWithNotes({ FERRY_DANGEROUS_FAULT: "before_commit=stall:1500" });
    try {
      const caller = new Client("ts-test", { home: b.home });
      assert.equal((await caller.put("notes", "warm-up", "x")).outcome, "done");
      const result = await caller.put("notes", "held", "carried out late", { timeoutS: 1 });
      assert.equal(result.outcome, "outcome_unknown", JSON.stringify(result));
      if (result.outcome !== "outcome_unknown") return;
      assert.deepEqual([result.vault, result.owner], ["notes", "a"]);
      const started = Date.now();
      let settled = await caller.settle(result.requestId, { vault: "notes", waitS: 5 });
      while (settled.state === "running" || settled.state === "unavailable") {
        assert.ok(Date.now() - started < SETTLE_BOUND_MS, `never settled: ${JSON.stringify(settled)}`);
        settled = await caller.settle(result.requestId, { vault: "notes", waitS: 5 });
      }
      assert.equal(settled.state, "done", JSON.stringify(settled));
      if (settled.state !== "done") return;
      const record = await new Client("ts-test", { home: a.home }).get("notes", "held");
      assert.deepEqual([Buffer.from(record?.value ?? []).toString(), record?.revision], ["carried out late", settled.revision]);
      // The same id sent again is answered from the owner's journal, not run twice.
      const again = await caller.put("notes", "held", "carried out late", { requestId: result.requestId });
      assert.deepEqual(again, { outcome: "done", revision: settled.revision, requestId: result.requestId });
    } finally {
      await a.stop();
      await b.stop();
    }
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
