/**
 * A TCP proxy between one client and the test server that records, per socket, the frames the
 * client wrote before the server's first frame (AUTH_OK or the refusal): what shows a client
 * pipelined its requests behind AUTH instead of waiting. It can also hold new sockets (a
 * network that is down) and cut the open ones without a close frame (a dead network).
 */
import { connect, createServer, type Server, type Socket } from "node:net";

const HEADERS_END = Buffer.from("\r\n\r\n");

/** One client socket: the type of each text frame written before the server's first frame. */
export class ProxiedSocket {
  readonly early: string[] = [];
  later = 0;
  serverSpoke = false;
  private clientBytes: Buffer = Buffer.alloc(0);
  private clientUpgraded = false;
  private serverBytes: Buffer = Buffer.alloc(0);

  constructor(private readonly onEarly: (socket: ProxiedSocket) => void) {}

  fromClient(data: Buffer): void {
    this.clientBytes = Buffer.concat([this.clientBytes, data]);
    if (!this.clientUpgraded) {
      const end = this.clientBytes.indexOf(HEADERS_END);
      if (end < 0) return;
      this.clientBytes = this.clientBytes.subarray(end + HEADERS_END.length);
      this.clientUpgraded = true;
    }
    for (;;) {
      const taken = takeFrame(this.clientBytes);
      if (taken === null) return;
      this.clientBytes = taken.rest;
      if (this.serverSpoke) {
        this.later += 1;
      } else {
        this.early.push(taken.type);
        this.onEarly(this);
      }
    }
  }

  fromServer(data: Buffer): void {
    if (this.serverSpoke) return;
    this.serverBytes = Buffer.concat([this.serverBytes, data]);
    const end = this.serverBytes.indexOf(HEADERS_END);
    // A byte past the 101 response: the answer to AUTH.
    if (end >= 0 && this.serverBytes.length > end + HEADERS_END.length) this.serverSpoke = true;
  }
}

/** One whole client frame off the front of `buffer`: its JSON `type` ("" if not a plain text frame). */
function takeFrame(buffer: Buffer): { type: string; rest: Buffer } | null {
  if (buffer.length < 2) return null;
  let length = buffer[1] & 0x7f;
  let offset = 2;
  if (length === 126) {
    if (buffer.length < 4) return null;
    length = buffer.readUInt16BE(2);
    offset = 4;
  } else if (length === 127) {
    if (buffer.length < 10) return null;
    length = Number(buffer.readBigUInt64BE(2));
    offset = 10;
  }
  const masked = (buffer[1] & 0x80) !== 0;
  const mask = masked ? buffer.subarray(offset, offset + 4) : null;
  if (masked) offset += 4;
  if (buffer.length < offset + length) return null;
  const payload = Buffer.from(buffer.subarray(offset, offset + length));
  if (mask !== null) for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i % 4];
  const rest = buffer.subarray(offset + length);
  if ((buffer[0] & 0x0f) !== 1 || (buffer[0] & 0x40) !== 0) return { type: "", rest }; // not text, or compressed
  try {
    return { type: String((JSON.parse(payload.toString("utf-8")) as { type?: unknown }).type), rest };
  } catch {
    return { type: "", rest };
  }
}

export class FrameProxy {
  readonly sockets: ProxiedSocket[] = [];
  /** Set: the next socket whose client writes this many frames before the server's first is
   * cut with every other one at that moment (a network dying mid-reconnect); once. */
  cutWhenEarly: number | null = null;
  private holding = false;
  private readonly held: Array<() => void> = [];
  private readonly open: Socket[] = [];
  private server: Server | null = null;

  constructor(private readonly upstreamPort: number) {}

  start(): Promise<string> {
    const server = (this.server = createServer((client) => this.serve(client)));
    return new Promise((done) => {
      server.listen(0, "127.0.0.1", () => {
        const address = server.address();
        done(`ws://127.0.0.1:${typeof address === "object" && address ? address.port : 0}/ws/v1`);
      });
    });
  }

  /** New sockets wait (the client's handshake stalls) until `release()`. */
  hold(): void {
    this.holding = true;
  }

  release(): void {
    this.holding = false;
    for (const go of this.held.splice(0)) go();
  }

  /** Every open socket reset both ways: no close frame, as when a network dies. */
  cut(): void {
    for (const socket of this.open.splice(0)) socket.resetAndDestroy();
  }

  stop(): void {
    this.cut();
    this.server?.close();
  }

  private serve(client: Socket): void {
    // What the client writes while held waits here (no pause(): a paused socket the client
    // resets was seen to leave the process spinning in its poll loop).
    const early: Buffer[] = [];
    let upstream: Socket | null = null;
    let recorded: ProxiedSocket | null = null;
    client.on("error", () => undefined);
    client.on("data", (data: Buffer) => {
      if (upstream === null || recorded === null) {
        early.push(data);
        return;
      }
      recorded.fromClient(data);
      upstream.write(data);
    });
    const go = () => {
      if (client.destroyed) return;
      const server = (upstream = connect(this.upstreamPort, "127.0.0.1"));
      const socket = (recorded = new ProxiedSocket((s) => this.earlyWritten(s)));
      this.sockets.push(socket);
      this.open.push(client, server);
      server.on("error", () => client.destroy());
      server.on("data", (data: Buffer) => {
        socket.fromServer(data);
        client.write(data);
      });
      // end(), not destroy(): what was written (the server's close frame) is still delivered.
      client.on("close", () => server.end());
      server.on("close", () => client.end());
      for (const data of early.splice(0)) {
        socket.fromClient(data);
        server.write(data);
      }
    };
    client.on("close", () => {
      if (upstream === null) this.held.splice(this.held.indexOf(go) >>> 0, 1);
    });
    if (this.holding) this.held.push(go);
    else go();
  }

  private earlyWritten(socket: ProxiedSocket): void {
    if (this.cutWhenEarly !== null && socket.early.length >= this.cutWhenEarly) {
      this.cutWhenEarly = null;
      this.cut();
    }
  }
}
