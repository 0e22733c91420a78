/**
 * A real QIM server for the tests: `manage.py migrate` + `qim_bootstrap` on a temp SQLite,
 * then daphne on a free port (the env of tests/harness/qim_process.py BASE_ENV). Python is
 * `$QIM_PYTHON`, else the repo's `.venv/bin/python`. `stop()` fails if the log shows a
 * Traceback or an " ERROR qim" line, as the Python suite's fixture does.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, closeSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { WebSocket } from "ws";

import { Backoff, QimClient, RestClient, type ClientOptions } from "../src/index.js";

const HERE = dirname(fileURLToPath(import.meta.url));
/** clients/js, whether running from test/ or build/test/. */
const PACKAGE = resolve(HERE, basename(dirname(HERE)) === "build" ? "../.." : "..");
export const REPO = resolve(PACKAGE, "../..");
const PYTHON = process.env.QIM_PYTHON ?? resolve(PACKAGE, "../../.venv/bin/python");

const BASE_ENV: Record<string, string> = {
  DJANGO_SETTINGS_MODULE: "qim.settings",
  QIM_SECRET_KEY: "test-secret-key-not-for-production",
  QIM_ALLOWED_HOSTS: "127.0.0.1,localhost",
  QIM_ALLOWED_ORIGINS: "http://allowed.example",
  QIM_PASSWORD_HASHERS: "django.contrib.auth.hashers.MD5PasswordHasher",
  QIM_LOG_LEVEL: "WARNING",
  QIM_AUTH_TIMEOUT_S: "3",
  // Tests log many personas in from 127.0.0.1: the production login throttles would refuse them.
  QIM_AUTH_TOKEN_RATE_PER_ACCOUNT: "10000/minute",
  QIM_AUTH_TOKEN_RATE_PER_ADDRESS: "100000/minute",
  PYTHONUNBUFFERED: "1",
};

export const TENANT = "jsdk";
export const ADMIN_PASSWORD = "admin-password";
/** Generous: the machine is a loaded 2-core box. */
export const WAIT_MS = 30_000;
export const FAST_BACKOFF = new Backoff({ initialMs: 50, maximumMs: 500, jitter: 0.5 });

function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => done(typeof address === "object" && address ? address.port : 0));
    });
  });
}

function processEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!key.startsWith("QIM_")) env[key] = value;
  return { ...env, ...BASE_ENV, ...extra };
}

export interface Persona {
  userId: string;
  /** A token for `deviceId` (one per device: AUTH must name the token's device). */
  token(deviceId: string): Promise<string>;
  client(deviceId?: string, options?: Partial<ClientOptions>): Promise<QimClient>;
  rest(deviceId?: string): Promise<RestClient>;
}

export class QimServer {
  readonly dir = mkdtempSync(join(tmpdir(), "qim-jssdk-"));
  readonly env: Record<string, string>;
  port = 0;
  adminToken = "";
  private daphne: ChildProcess | null = null;
  private readonly clients: QimClient[] = [];
  private users = 0;

  constructor(extraEnv: Record<string, string> = {}) {
    this.env = { QIM_DATABASE_URL: `sqlite:///${join(this.dir, "qim.sqlite3")}`, QIM_VAR_DIR: this.dir, ...extraEnv };
  }

  get httpUrl(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get wsUrl(): string {
    return `ws://127.0.0.1:${this.port}/ws/v1`;
  }

  get logPath(): string {
    return join(this.dir, "daphne.log");
  }

  manage(...args: string[]): string {
    const done = spawnSync(PYTHON, [join(REPO, "manage.py"), ...args], {
      cwd: REPO, env: processEnv(this.env), encoding: "utf-8", timeout: 300_000,
    });
    if (done.status !== 0) throw new Error(`manage.py ${args.join(" ")} failed:\n${done.stdout}\n${done.stderr}`);
    return done.stdout;
  }

  /** Runs a Python snippet against the server's SQLite file (to set up what no API offers). */
  sql(statement: string): void {
    const path = join(this.dir, "qim.sqlite3");
    const code = `import sqlite3,sys\nc=sqlite3.connect(sys.argv[1],timeout=30)\nc.execute(sys.argv[2])\nc.commit()`;
    const done = spawnSync(PYTHON, ["-c", code, path, statement], { encoding: "utf-8" });
    if (done.status !== 0) throw new Error(`sql failed: ${done.stderr}`);
  }

  /** The rows a SELECT answers from the server's SQLite file (what no API shows, e.g. a device's stored push subscription). */
  query(statement: string): unknown[][] {
    const path = join(this.dir, "qim.sqlite3");
    const code = `import json,sqlite3,sys\nc=sqlite3.connect(sys.argv[1],timeout=30)\nprint(json.dumps(c.execute(sys.argv[2]).fetchall()))`;
    const done = spawnSync(PYTHON, ["-c", code, path, statement], { encoding: "utf-8" });
    if (done.status !== 0) throw new Error(`query failed: ${done.stderr}`);
    return JSON.parse(done.stdout) as unknown[][];
  }

  async start(): Promise<void> {
    this.manage("migrate", "-v0");
    const out = this.manage("qim_bootstrap", "--tenant", TENANT, "--admin", "admin", "--password", ADMIN_PASSWORD);
    this.adminToken = JSON.parse(out.trim().split("\n").pop() as string).token;
    this.port = await freePort();
    await this.spawnDaphne();
  }

  /** Stops daphne and starts it again on the same port and database (rooms move to a new epoch). */
  async restart(): Promise<void> {
    await this.stopDaphne();
    await this.spawnDaphne();
  }

  private async spawnDaphne(): Promise<void> {
    const log = openSync(this.logPath, "a");
    this.daphne = spawn(
      PYTHON,
      ["-m", "daphne", "-b", "127.0.0.1", "-p", String(this.port),
        "--websocket-max-message-size", "1048576", "--websocket-max-frame-size", "1048576", "qim.asgi:application"],
      { cwd: REPO, env: processEnv(this.env), stdio: ["ignore", log, log] },
    );
    closeSync(log);
    await this.waitHealthy();
  }

  private async stopDaphne(): Promise<void> {
    const daphne = this.daphne;
    if (daphne === null || daphne.exitCode !== null) return;
    const exited = new Promise((done) => daphne.once("exit", done));
    daphne.kill("SIGTERM");
    const timer = setTimeout(() => daphne.kill("SIGKILL"), 15_000);
    await exited;
    clearTimeout(timer);
  }

  private async waitHealthy(): Promise<void> {
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      if (this.daphne?.exitCode !== null) throw new Error(`daphne exited:\n${this.logTail()}`);
      try {
        const response = await fetch(`${this.httpUrl}/api/v1/health`);
        if (response.ok) return;
      } catch {
        // not listening yet
      }
      await new Promise((done) => setTimeout(done, 100));
    }
    throw new Error(`daphne not healthy within 60 s:\n${this.logTail()}`);
  }

  logTail(): string {
    try {
      return readFileSync(this.logPath, "utf-8").slice(-4000);
    } catch {
      return "";
    }
  }

  /** A fresh user of the tenant, made by the admin over REST. */
  async persona(name: string): Promise<Persona> {
    const userId = `${name}${++this.users}`;
    const password = `pw-${userId}`;
    await new RestClient(this.httpUrl, this.adminToken).createUser(userId, password);
    const tokens = new Map<string, string>();
    const token = async (deviceId: string) => {
      let value = tokens.get(deviceId);
      if (value === undefined) {
        value = (await new RestClient(this.httpUrl).login(TENANT, userId, password, deviceId)).token;
        tokens.set(deviceId, value);
      }
      return value;
    };
    return {
      userId,
      token,
      rest: async (deviceId = "phone") => new RestClient(this.httpUrl, await token(deviceId)),
      client: async (deviceId = "phone", options = {}) => {
        const client = new QimClient({
          url: this.wsUrl, token: await token(deviceId), deviceId, WebSocket,
          backoff: FAST_BACKOFF, requestTimeoutMs: WAIT_MS, ...options,
        });
        this.clients.push(client);
        return client;
      },
    };
  }

  /** Closes every client, stops daphne, and fails on any Traceback or " ERROR qim" line. */
  async stop(): Promise<void> {
    for (const client of this.clients) client.close();
    await this.stopDaphne();
    const log = readFileSync(this.logPath, "utf-8");
    if (log.includes("Traceback") || log.includes(" ERROR qim")) {
      throw new Error(`the server logged an error:\n${log.slice(-4000)}`);
    }
  }
}

/** Polls `condition` until true, or fails after `timeoutMs` (no fixed sleeps). */
export async function waitFor(condition: () => boolean, what: string, timeoutMs = WAIT_MS): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((done) => setTimeout(done, 20));
  }
}
