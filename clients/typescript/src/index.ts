// A client for Ferry's local API, for apps written in TypeScript that run on Node (services,
// Electron's main process, a Tauri app's Node side car). Node's own modules only: a browser
// page cannot call the API directly (it has no token, and the API refuses other origins).
//
// Every write ends as exactly one `WriteResult`, and its `outcome` says which (SPEC 5):
//   done              the owner carried it out.
//   refused           the owner answered and did not carry it out (`conflict`, `busy`, ...);
//                     `busy` and `rate_limited` may be sent again with the same request id.
//                     (A `busy` with reason `caller_cap`, `saturated` or `background_full`
//                     whose detail ends "nothing was sent" came from the local gateway, which
//                     keeps the owner's cap for this app, or what the loaded owner last took
//                     of this machine's writes of the class: not carried out either, and sent
//                     again the same way.)
//   not_carried_out   the request left, the connection broke, and the owner confirmed it never
//                     ran and never will: send it again under a new request id.
//   unavailable       the local gateway did not send it: nothing was sent.
//   outcome_unknown   the request may have reached the owner and no answer came back: settle it
//                     with `settle(requestId, { vault })`; never send it again under a new id.
//   invalid           the local gateway refused it before sending anything.
//   local_gateway_down  the local gateway could not be reached: not a byte of the request left.
//
// The client makes the request id (a UUIDv7) before anything is sent, so an `outcome_unknown`
// can always be settled. It opens one connection per call and tells "could not connect"
// (nothing was sent) from "the connection broke after it was made" (a byte may have left): a
// pooling client such as `fetch` cannot tell those apart, which is how an app gets told
// "nothing was sent" for a write the owner carried out.

import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";

/** Seconds a call may take when the app gives none (SPEC 5). */
export const DEFAULT_TIMEOUT_S = 30;
/** The longest timeout the gateway accepts. */
export const MAX_TIMEOUT_S = 600;
/** How much longer than its own timeout the client waits for the gateway's answer. */
const CLIENT_GRACE_S = 5;

export type WriteResult =
  | { outcome: "done"; revision: number; requestId: string }
  | {
      outcome: "refused";
      status: number;
      error: string;
      detail: string;
      requestId: string;
      currentRevision?: number;
      retryAfterS?: number;
    }
  | { outcome: "not_carried_out"; requestId: string; reason: string; detail: string }
  | { outcome: "unavailable"; requestId: string; detail: string }
  | { outcome: "outcome_unknown"; requestId: string; vault: string; owner?: string; detail: string }
  | { outcome: "invalid"; status: number; error: string; detail: string }
  | { outcome: "local_gateway_down"; detail: string };

/** When a write was refused `busy` or `rate_limited` (not carried out; the same id may be sent
 * again): seconds to wait first. `undefined` for every other result. */
export function mayResendAfterS(result: WriteResult): number | undefined {
  if (result.outcome === "refused" && (result.error === "busy" || result.error === "rate_limited")) {
    return result.retryAfterS ?? 1;
  }
  return undefined;
}

export type Settlement =
  | { state: "done"; revision: number }
  | { state: "refused"; status: number; error: string; detail: string }
  | { state: "not_carried_out"; reason: string }
  /** Still running at the owner, or on its way there: ask again. */
  | { state: "running" }
  /** The owner (or this machine's gateway) could not be asked: the outcome is still unknown. */
  | { state: "unavailable"; detail: string }
  /** The local gateway never sent a write with that id (and was not told its vault). */
  | { state: "never_sent"; detail: string };

export interface ReadRecord {
  value: Uint8Array;
  revision: number;
  /** `local`, `cache`, `owner` or `replica:LABEL`. */
  source: string;
  /** The answer may be behind the owner. */
  stale: boolean;
}

export interface Change {
  key: string;
  revision: number;
  deleted: boolean;
}

export interface ChangePage {
  changes: Change[];
  /** Ask again with `after: next`. */
  next: number;
  more: boolean;
  vaultRevision: number;
}

export interface WriteOptions {
  /** Compare-and-swap: the revision the record must have (0: must not exist). */
  ifRevision?: number;
  /** The write's id; made here when absent. */
  requestId?: string;
  /** Seconds the write may take (0 < t <= 600; default 30). */
  timeoutS?: number;
  /** The owner's background class (bulk imports). */
  background?: boolean;
}

/** A call other than a write that the gateway answered with an error. Safe to repeat. */
export class FerryError extends Error {
  constructor(
    readonly status: number,
    readonly error: string,
    readonly detail: string,
  ) {
    super(`${status} ${error}: ${detail}`);
  }
}

/** A call other than a write could not reach the local gateway, or broke off. Safe to repeat. */
export class GatewayDown extends Error {}

/** A UUIDv7: 48 bits of Unix milliseconds, then random bits (RFC 9562). */
export function newRequestId(): string {
  const bytes = randomBytes(16);
  bytes.writeUIntBE(Date.now(), 0, 6);
  bytes[6] = ((bytes[6] ?? 0) & 0x0f) | 0x70;
  bytes[8] = ((bytes[8] ?? 0) & 0x3f) | 0x80;
  const hex = bytes.toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Escapes everything but ASCII letters, digits, `-`, `_` and `~`, so a key with `/` or `.` is
 * always exactly one path segment (as the Rust kit does). */
function segment(text: string): string {
  let out = "";
  for (const byte of Buffer.from(text, "utf8")) {
    const char = String.fromCharCode(byte);
    out += /[A-Za-z0-9_~-]/.test(char) ? char : "%" + byte.toString(16).toUpperCase().padStart(2, "0");
  }
  return out;
}

function query(pairs: [string, string][]): string {
  return pairs.length ? "?" + pairs.map(([k, v]) => `${k}=${segment(v)}`).join("&") : "";
}

/** The gateway's default state directory on this platform (as `ferry serve` picks it). */
export function defaultHome(): string {
  if (process.env.FERRY_HOME) return process.env.FERRY_HOME;
  if (process.platform === "win32") {
    return path.join(process.env.LOCALAPPDATA ?? os.homedir(), "ferry");
  }
  if (process.platform === "darwin") {
    return path.join(os.homedir(), "Library", "Application Support", "ferry");
  }
  return path.join(process.env.XDG_DATA_HOME ?? path.join(os.homedir(), ".local", "share"), "ferry");
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** Nothing left this process: no address, no token, or the connect failed. */
class Down extends Error {}
/** The request could not be built (a header Node refuses): nothing left this process. */
class Unbuildable extends Error {}
/** The connection was made and broke before a whole answer came: a byte may have left. */
class Broken extends Error {}

export interface ClientOptions {
  /** The gateway's state directory; default `FERRY_HOME` or the platform's. */
  home?: string;
  /** `HOST:PORT` of the local API, instead of reading `api.addr`. */
  address?: string;
  /** The bearer token, instead of reading `local-token`. */
  token?: string;
}

/** Calls one gateway's local API as `app`. The address and token are read from the state
 * directory at each call, so a restarted gateway on a new port is found. */
export class Client {
  readonly home: string;

  constructor(
    readonly app: string,
    private readonly options: ClientOptions = {},
  ) {
    this.home = options.home ?? defaultHome();
  }

  put(vault: string, key: string, value: Uint8Array | string, options: WriteOptions = {}): Promise<WriteResult> {
    const body = typeof value === "string" ? Buffer.from(value, "utf8") : Buffer.from(value);
    return this.write("PUT", vault, key, body, options);
  }

  delete(vault: string, key: string, options: WriteOptions = {}): Promise<WriteResult> {
    return this.write("DELETE", vault, key, Buffer.alloc(0), options);
  }

  private async write(
    method: string,
    vault: string,
    key: string,
    body: Buffer,
    options: WriteOptions,
  ): Promise<WriteResult> {
    const requestId = options.requestId ?? newRequestId();
    const headers: Record<string, string> = { "X-Ferry-Request-Id": requestId };
    if (options.timeoutS !== undefined) {
      if (!(options.timeoutS > 0 && options.timeoutS <= MAX_TIMEOUT_S)) {
        return {
          outcome: "invalid",
          status: 400,
          error: "bad_request",
          detail: `timeout ${options.timeoutS} s: must be greater than 0 and at most ${MAX_TIMEOUT_S}; nothing was sent`,
        };
      }
      headers["X-Ferry-Timeout"] = Math.max(options.timeoutS, 0.001).toFixed(3);
    }
    if (options.ifRevision !== undefined) headers["If-Match"] = String(options.ifRevision);
    if (options.background) headers["X-Ferry-Class"] = "background";
    const bound = (options.timeoutS ?? DEFAULT_TIMEOUT_S) + CLIENT_GRACE_S;
    let answer: Answer;
    try {
      answer = await this.call(method, `/v1/vaults/${segment(vault)}/records/${segment(key)}`, headers, body, bound);
    } catch (err) {
      if (err instanceof Down) return { outcome: "local_gateway_down", detail: err.message };
      if (err instanceof Unbuildable) {
        return { outcome: "invalid", status: 400, error: "bad_request", detail: `${err.message}; nothing was sent` };
      }
      // A byte may have reached the gateway: from here on, never "nothing was sent".
      return {
        outcome: "outcome_unknown",
        requestId,
        vault,
        detail: `the call to the local gateway ended without an answer (${String(err)}); settle it by its request id`,
      };
    }
    return writeResult(answer, requestId, vault);
  }

  /** What became of the write `requestId`. `vault` lets the gateway ask the owner even if it has
   * no memory of the call; `waitS` waits while the owner says it is running. */
  async settle(requestId: string, options: { vault?: string; waitS?: number } = {}): Promise<Settlement> {
    const pairs: [string, string][] = [];
    if (options.vault !== undefined) pairs.push(["vault", options.vault]);
    if (options.waitS) pairs.push(["wait", Math.min(Math.max(options.waitS, 0.001), MAX_TIMEOUT_S).toFixed(3)]);
    let answer: Answer;
    try {
      answer = await this.call("GET", `/v1/calls/${segment(requestId)}${query(pairs)}`, {}, Buffer.alloc(0), (options.waitS ?? 0) + 60);
    } catch (err) {
      if (err instanceof Unbuildable) throw new FerryError(400, "bad_request", err.message);
      // A gateway that cannot be asked says nothing about the write.
      return {
        state: "unavailable",
        detail: `${(err as Error).message}; the write's outcome is still unknown: settle it again later`,
      };
    }
    const body = json(answer);
    if (answer.status === 200) {
      if (typeof body.state !== "string") {
        throw new FerryError(200, "other", "the gateway answered a settle query without a call state");
      }
      if (body.state === "done") {
        if (body.status === 200 && typeof body.revision === "number") return { state: "done", revision: body.revision };
        return { state: "refused", status: Number(body.status ?? 0), error: String(body.error ?? "other"), detail: String(body.detail ?? "") };
      }
      if (body.state === "not_carried_out") return { state: "not_carried_out", reason: String(body.reason ?? "") };
      return { state: "running" };
    }
    if (answer.status === 503) return { state: "unavailable", detail: String(body.detail ?? "") };
    if (answer.status === 404 && body.error === "unknown_call") return { state: "never_sent", detail: String(body.detail ?? "") };
    throw new FerryError(answer.status, String(body.error ?? "other"), String(body.detail ?? ""));
  }

  /** The record, or `undefined` if the vault has no such key. */
  async get(vault: string, key: string, options: { timeoutS?: number } = {}): Promise<ReadRecord | undefined> {
    const headers: Record<string, string> = {};
    if (options.timeoutS !== undefined) headers["X-Ferry-Timeout"] = options.timeoutS.toFixed(3);
    const answer = await this.read(
      `/v1/vaults/${segment(vault)}/records/${segment(key)}`,
      headers,
      (options.timeoutS ?? DEFAULT_TIMEOUT_S) + CLIENT_GRACE_S,
    );
    if (answer.status === 200) {
      return {
        value: new Uint8Array(answer.body),
        revision: Number(answer.headers["x-ferry-revision"] ?? 0),
        source: String(answer.headers["x-ferry-source"] ?? ""),
        stale: answer.headers["x-ferry-stale"] === "true",
      };
    }
    const body = json(answer);
    if (answer.status === 404 && body.error === "not_found") return undefined;
    throw new FerryError(answer.status, String(body.error ?? "other"), String(body.detail ?? ""));
  }

  /** The changes after revision `after` in this gateway's copy; with `waitS`, waits up to that
   * long for the first one (a long poll). */
  async changes(vault: string, options: { after?: number; limit?: number; waitS?: number } = {}): Promise<ChangePage> {
    const pairs: [string, string][] = [["after", String(options.after ?? 0)]];
    if (options.limit !== undefined) pairs.push(["limit", String(options.limit)]);
    if (options.waitS) pairs.push(["wait", options.waitS.toFixed(3)]);
    const body = await this.readJson(`/v1/vaults/${segment(vault)}/changes${query(pairs)}`, (options.waitS ?? 0) + 60);
    return {
      changes: (body.changes as Change[]).map((c) => ({ key: c.key, revision: c.revision, deleted: c.deleted })),
      next: body.next as number,
      more: body.more as boolean,
      vaultRevision: body.vault_revision as number,
    };
  }

  /** Follows the vault's changes from `after`, every change once and in order, across restarts
   * of the gateway (which it waits out). */
  async *follow(vault: string, after = 0, waitS = 30): AsyncGenerator<Change> {
    let next = after;
    for (;;) {
      let page: ChangePage;
      try {
        page = await this.changes(vault, { after: next, waitS });
      } catch (err) {
        if (!(err instanceof GatewayDown)) throw err;
        await new Promise((resolve) => setTimeout(resolve, 500));
        continue;
      }
      for (const change of page.changes) yield change;
      next = page.next;
    }
  }

  status(): Promise<Record<string, unknown>> {
    return this.readJson("/v1/status", 60);
  }

  private async readJson(pathAndQuery: string, bound: number): Promise<Record<string, unknown>> {
    const answer = await this.read(pathAndQuery, {}, bound);
    const body = json(answer);
    if (answer.status !== 200) {
      throw new FerryError(answer.status, String(body.error ?? "other"), String(body.detail ?? ""));
    }
    return body;
  }

  private async read(pathAndQuery: string, headers: Record<string, string>, bound: number): Promise<Answer> {
    try {
      return await this.call("GET", pathAndQuery, headers, Buffer.alloc(0), bound);
    } catch (err) {
      if (err instanceof Unbuildable) throw new FerryError(400, "bad_request", err.message);
      throw new GatewayDown((err as Error).message);
    }
  }

  private endpoint(): { host: string; port: number; token: string } {
    let address = this.options.address;
    if (address === undefined) {
      try {
        address = readFileSync(path.join(this.home, "api.addr"), "utf8").trim();
      } catch {
        throw new Down(`no gateway answers for ${this.home} (it has not written api.addr); start it with \`ferry serve\`; nothing was sent`);
      }
    }
    let token = this.options.token;
    if (token === undefined) {
      try {
        token = readFileSync(path.join(this.home, "local-token"), "utf8").trim();
      } catch (err) {
        throw new Down(`cannot read the gateway's token (${String(err)}); nothing was sent`);
      }
    }
    const colon = address.lastIndexOf(":");
    const port = Number(address.slice(colon + 1));
    if (colon < 0 || !Number.isInteger(port)) throw new Down(`api.addr holds ${JSON.stringify(address)}, not HOST:PORT; nothing was sent`);
    return { host: address.slice(0, colon).replace(/^\[|\]$/g, ""), port, token };
  }

  /** One exchange on a connection of its own. Rejects with `Down` if nothing left this process
   * (the connect failed), `Broken` if the connection was made (a byte may have left). */
  private call(method: string, pathAndQuery: string, headers: Record<string, string>, body: Buffer, boundS: number): Promise<Answer> {
    let endpoint: { host: string; port: number; token: string };
    try {
      endpoint = this.endpoint();
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise((resolve, reject) => {
      let connected = false;
      let request: http.ClientRequest;
      try {
        request = http.request({
        host: endpoint.host,
        port: endpoint.port,
        method,
        path: pathAndQuery,
        agent: false,
        headers: {
          Authorization: `Bearer ${endpoint.token}`,
          "X-Ferry-App": this.app,
          "Content-Length": String(body.length),
          ...headers,
        },
      });
      } catch (err) {
        // Node checks every header as the request is made, before any connection.
        reject(new Unbuildable(`the request cannot be made: ${(err as Error).message}`));
        return;
      }
      request.on("socket", (socket) => socket.once("connect", () => (connected = true)));
      request.setTimeout(boundS * 1000, () => request.destroy(new Error(`no answer within ${boundS} s`)));
      request.on("error", (err) => {
        reject(
          connected
            ? new Broken(err.message)
            : new Down(`cannot connect to the gateway at ${endpoint.host}:${endpoint.port} (${err.message}); nothing was sent`),
        );
      });
      request.on("response", (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("error", (err) => reject(new Broken(err.message)));
        response.on("aborted", () => reject(new Broken("the answer broke off")));
        response.on("end", () => {
          if (!response.complete) return reject(new Broken("the answer broke off"));
          resolve({ status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(chunks) });
        });
      });
      request.end(body);
    });
  }
}

function json(answer: Answer): Record<string, unknown> {
  try {
    const body: unknown = JSON.parse(answer.body.toString("utf8"));
    if (body && typeof body === "object" && !Array.isArray(body)) return body as Record<string, unknown>;
    return { error: "other", detail: String(body) };
  } catch {
    return { error: "other", detail: `the gateway answered ${answer.status} without Ferry's error body` };
  }
}

const INVALID = new Set(["400 bad_request", "400 stale_request_id", "401 unauthorized", "404 unknown_vault", "409 vault_ambiguous"]);
const REFUSALS = new Set(["conflict", "not_found", "forbidden", "rate_limited", "busy", "ticket_refused", "refused"]);

/** The one place a write's answer becomes a result. Anything not recognised is
 * `outcome_unknown`: the client never guesses that nothing happened. */
function writeResult(answer: Answer, requestId: string, vault: string): WriteResult {
  const unknown = (detail: string): WriteResult => ({ outcome: "outcome_unknown", requestId, vault, detail });
  let body: Record<string, unknown>;
  try {
    const parsed: unknown = JSON.parse(answer.body.toString("utf8"));
    if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error("not an object");
    body = parsed as Record<string, unknown>;
  } catch {
    return unknown(`the gateway answered ${answer.status} without a JSON body; settle it by its request id`);
  }
  const status = answer.status;
  if (status === 200) {
    return typeof body.revision === "number"
      ? { outcome: "done", revision: body.revision, requestId }
      : unknown("the gateway answered 200 without a revision; settle it by its request id");
  }
  const error = String(body.error ?? "");
  const detail = String(body.detail ?? "");
  if (status === 503 && error === "not_carried_out") {
    return { outcome: "not_carried_out", requestId, reason: String(body.reason ?? ""), detail };
  }
  if (status === 503 && error === "unavailable") return { outcome: "unavailable", requestId, detail };
  if (status === 502 && error === "outcome_unknown") {
    return {
      outcome: "outcome_unknown",
      requestId,
      vault,
      detail,
      ...(typeof body.owner === "string" ? { owner: body.owner } : {}),
    };
  }
  if (INVALID.has(`${status} ${error}`)) return { outcome: "invalid", status, error, detail };
  if (REFUSALS.has(error)) {
    const retry = String(answer.headers["retry-after"] ?? "");
    return {
      outcome: "refused",
      status,
      error,
      detail,
      requestId,
      ...(typeof body.current_revision === "number" ? { currentRevision: body.current_revision } : {}),
      ...(/^\d+$/.test(retry) ? { retryAfterS: Number(retry) } : {}),
    };
  }
  // A code this client does not know, or an internal error: it cannot say nothing ran.
  return unknown(`the gateway answered ${status} ${error}: ${detail}; settle it by its request id`);
}
