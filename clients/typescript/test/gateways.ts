// Real `ferry serve` processes for the client's tests: a pair that trusts each other, with a
// vault on the first. The binary is FERRY_BIN, else the workspace's test build of the gateway
// (target/debug/ferry-under-test, which has the fault points the outcome_unknown test uses;
// `cargo build -p ferry-tests --bins` makes it).

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");
const START_BOUND_MS = 30_000;

export function ferryBin(): string {
  const bin = process.env.FERRY_BIN ?? path.join(REPO, "target", "debug", "ferry-under-test");
  if (!existsSync(bin)) {
    throw new Error(`no gateway binary at ${bin}: run \`cargo build -p ferry-tests --bins\` (or set FERRY_BIN)`);
  }
  return bin;
}

export class Gateway {
  readonly home: string;
  readonly nodeId: string;
  readonly quic: string;
  private readonly dir: string;
  private readonly process: ChildProcess;

  private constructor(readonly label: string, dir: string, process: ChildProcess, nodeId: string, quic: string) {
    this.dir = dir;
    this.home = path.join(dir, "home");
    this.process = process;
    this.nodeId = nodeId;
    this.quic = quic;
  }

  static async start(label: string, env: Record<string, string> = {}): Promise<Gateway> {
    const dir = mkdtempSync(path.join(os.tmpdir(), `ferry-ts-${label}-`));
    const home = path.join(dir, "home");
    const log = openSync(path.join(dir, "log"), "w");
    const child = spawn(
      ferryBin(),
      ["--home", home, "serve", "--api", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--no-mdns", "--label", label],
      { stdio: ["ignore", log, log], env: { ...process.env, ...env } },
    );
    const started = Date.now();
    while (!existsSync(path.join(home, "api.addr"))) {
      if (child.exitCode !== null || Date.now() - started > START_BOUND_MS) {
        throw new Error(`gateway ${label} did not start:\n${readFileSync(path.join(dir, "log"), "utf8")}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const status = JSON.parse(cli(home, "--json", "status"));
    return new Gateway(label, dir, child, status.node_id, status.addresses[0]);
  }

  cli(...args: string[]): string {
    return cli(this.home, ...args);
  }

  trustEachOther(other: Gateway): void {
    for (const [me, them] of [[this, other], [other, this]] as const) {
      me.cli("trust", them.nodeId, "--label", them.label, "--addr", them.quic);
    }
  }

  async stop(): Promise<void> {
    if (this.process.exitCode === null) {
      const exited = new Promise((resolve) => this.process.once("exit", resolve));
      this.process.kill("SIGTERM");
      const bound = setTimeout(() => this.process.kill("SIGKILL"), 20_000);
      await exited;
      clearTimeout(bound);
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function cli(home: string, ...args: string[]): string {
  return execFileSync(ferryBin(), ["--home", home, ...args], { encoding: "utf8", timeout: 60_000 });
}

/** `a` owns vault `notes`; `b` trusts it (and is trusted). */
export async function pairWithNotes(ownerEnv: Record<string, string> = {}): Promise<[Gateway, Gateway]> {
  const a = await Gateway.start("a", ownerEnv);
  const b = await Gateway.start("b");
  a.trustEachOther(b);
  a.cli("vault", "create", "notes");
  return [a, b];
}
