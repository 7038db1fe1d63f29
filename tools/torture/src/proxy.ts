/**
 * A small userspace TCP fault proxy on loopback (node:net), in front of one engine port. It stands
 * in for netem / Toxiproxy (neither is available on the project's machines).
 *
 * Modes, switchable at any time:
 * - pass (default, and after `restore()`): forward both ways.
 * - `cut()`: reset every open connection and stop listening, so new connections are refused
 *   (ECONNREFUSED). `restore()` listens again on the same port.
 * - `blackhole()`: accept connections, forward nothing in either direction. Data is held (up to
 *   a bound per connection, like a kernel buffer) and delivered in order on `restore()`; a
 *   connection whose held data passes the bound is reset instead.
 * - `delayReplies(ms)`: hold every engine→client chunk `ms` before delivering it (order kept).
 * - `holdNextRequest()`: hold the next client→engine chunk of any connection until that client
 *   sends another, then deliver both in order: a server that sits on a request until its next
 *   one arrives, as ZooKeeper 3.6.0–3.8.0 can (ZOOKEEPER-4537). Other modes are unaffected.
 *
 * Loopback only: it listens on 127.0.0.1 and forwards to 127.0.0.1. Bounded: at most
 * `maxConnections` connections and `maxHeldBytes` held per direction. `close()` resets every
 * connection, clears every timer and stops listening; the listener is unref'd, so a forgotten
 * proxy does not keep the process alive.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';

export interface TcpProxyOptions {
  /** Engine port on 127.0.0.1. */
  readonly targetPort: number;
  /** Port to listen on; 0 (default) picks a free one. */
  readonly port?: number;
  /** @default 64 */
  readonly maxConnections?: number;
  /** Per connection and direction. @default 4 MiB */
  readonly maxHeldBytes?: number;
}

export type ProxyMode = 'pass' | 'cut' | 'blackhole' | 'delay';

export interface TcpProxy {
  /** Port the proxy listens on (127.0.0.1). */
  readonly port: number;
  /** `redis://127.0.0.1:<port>` for convenience. */
  readonly url: string;
  readonly mode: ProxyMode;
  /** Connections accepted so far. */
  readonly accepted: number;
  /** Connections open now. */
  readonly open: number;
  cut(): void;
  blackhole(): void;
  delayReplies(ms: number): void;
  /** Hold the next client→engine chunk until its client sends another (see above). */
  holdNextRequest(): void;
  /** Back to pass-through (listening again after a cut; held data flows). */
  restore(): Promise<void>;
  close(): Promise<void>;
}

interface Chunk {
  readonly data: Buffer;
  readonly releaseAt: number;
}

/** One direction of one connection: an ordered queue released by time, held while blackholed. */
class Lane {
  readonly #queue: Chunk[] = [];
  #bytes = 0;
  #timer: NodeJS.Timeout | undefined;
  readonly proxy: FaultProxy;
  readonly target: () => Socket | undefined;
  readonly onOverflow: () => void;

  constructor(proxy: FaultProxy, target: () => Socket | undefined, onOverflow: () => void) {
    this.proxy = proxy;
    this.target = target;
    this.onOverflow = onOverflow;
  }

  push(data: Buffer, delayMs: number): void {
    this.#queue.push({ data, releaseAt: performance.now() + delayMs });
    this.#bytes += data.length;
    if (this.#bytes > this.proxy.maxHeldBytes) {
      this.onOverflow();
      return;
    }
    this.pump();
  }

  pump(): void {
    if (this.proxy.mode === 'blackhole' || this.proxy.mode === 'cut') return;
    const target = this.target();
    if (target === undefined || target.connecting || target.destroyed) return;
    while (this.#queue.length > 0) {
      const head = this.#queue[0]!;
      const wait = head.releaseAt - performance.now();
      if (wait > 0) {
        if (this.#timer === undefined) {
          this.#timer = setTimeout(() => {
            this.#timer = undefined;
            this.pump();
          }, wait);
        }
        return;
      }
      this.#queue.shift();
      this.#bytes -= head.data.length;
      target.write(head.data);
    }
  }

  clear(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#queue.length = 0;
    this.#bytes = 0;
  }
}

class Connection {
  readonly proxy: FaultProxy;
  readonly client: Socket;
  upstream: Socket | undefined;
  readonly up: Lane;
  readonly down: Lane;
  /** A chunk held by `holdNextRequest()` until this client sends another. */
  #held: Buffer | undefined;
  #closed = false;

  constructor(proxy: FaultProxy, client: Socket) {
    this.proxy = proxy;
    this.client = client;
    this.up = new Lane(
      proxy,
      () => this.upstream,
      () => this.close(true),
    );
    this.down = new Lane(
      proxy,
      () => this.client,
      () => this.close(true),
    );
    client.on('error', () => this.close(true));
    client.on('close', () => this.close(false));
    client.on('data', (data: Buffer) => this.#fromClient(data));
    const upstream = createConnection({ host: '127.0.0.1', port: proxy.targetPort });
    this.upstream = upstream;
    upstream.setNoDelay(true);
    client.setNoDelay(true);
    upstream.on('connect', () => this.up.pump());
    upstream.on('error', () => this.close(true));
    upstream.on('close', () => this.close(false));
    upstream.on('data', (data: Buffer) => this.down.push(data, proxy.replyDelayMs));
  }

  #fromClient(data: Buffer): void {
    if (this.#held === undefined && this.proxy.holdNext) {
      this.proxy.holdNext = false;
      this.#held = data;
      return;
    }
    this.releaseHeld();
    this.up.push(data, 0);
  }

  /** Deliver the chunk held by `holdNextRequest()`, if any. */
  releaseHeld(): void {
    const held = this.#held;
    this.#held = undefined;
    if (held !== undefined) this.up.push(held, 0);
  }

  pump(): void {
    this.up.pump();
    this.down.pump();
  }

  /** Tear down both sides; `reset` sends RST instead of FIN. */
  close(reset: boolean): void {
    if (this.#closed) return;
    this.#closed = true;
    this.up.clear();
    this.down.clear();
    this.#held = undefined;
    for (const socket of [this.client, this.upstream]) {
      if (socket === undefined || socket.destroyed) continue;
      // resetAndDestroy() on a socket whose writable side has ended leaves a handle that spins
      // the event loop at exit (seen on Node 20): a plain destroy() is enough there.
      if (reset && !socket.connecting && !socket.writableEnded) socket.resetAndDestroy();
      else socket.destroy();
    }
    this.proxy.connections.delete(this);
  }
}

class FaultProxy implements TcpProxy {
  readonly targetPort: number;
  readonly maxConnections: number;
  readonly maxHeldBytes: number;
  readonly connections = new Set<Connection>();
  mode: ProxyMode = 'pass';
  replyDelayMs = 0;
  /** The next client→engine chunk is to be held (`holdNextRequest()`). */
  holdNext = false;
  accepted = 0;
  port = 0;
  #server: Server | undefined;
  #closed = false;

  constructor(options: TcpProxyOptions) {
    this.targetPort = options.targetPort;
    this.maxConnections = options.maxConnections ?? 64;
    this.maxHeldBytes = options.maxHeldBytes ?? 4 * 1024 * 1024;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get open(): number {
    return this.connections.size;
  }

  async listen(port: number): Promise<void> {
    const server = createServer((client) => this.#accept(client));
    server.maxConnections = this.maxConnections;
    server.unref();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', () => undefined);
    const address = server.address();
    if (address === null || typeof address !== 'object') throw new Error('proxy has no address');
    this.port = address.port;
    this.#server = server;
  }

  #accept(client: Socket): void {
    if (this.#closed || this.mode === 'cut' || this.connections.size >= this.maxConnections) {
      client.resetAndDestroy();
      return;
    }
    this.accepted += 1;
    this.connections.add(new Connection(this, client));
  }

  cut(): void {
    this.#assertOpen();
    this.mode = 'cut';
    this.replyDelayMs = 0;
    void this.#stopListening();
    for (const connection of [...this.connections]) connection.close(true);
  }

  blackhole(): void {
    this.#assertOpen();
    if (this.mode === 'cut') throw new Error('restore() the proxy before blackholing it');
    this.mode = 'blackhole';
  }

  delayReplies(ms: number): void {
    this.#assertOpen();
    if (!(Number.isFinite(ms) && ms >= 0 && ms <= 60_000)) throw new Error(`bad delay ${ms}`);
    if (this.mode === 'cut') throw new Error('restore() the proxy before delaying it');
    this.mode = 'delay';
    this.replyDelayMs = ms;
  }

  holdNextRequest(): void {
    this.#assertOpen();
    this.holdNext = true;
  }

  async restore(): Promise<void> {
    this.#assertOpen();
    const wasCut = this.mode === 'cut';
    this.mode = 'pass';
    this.replyDelayMs = 0;
    this.holdNext = false;
    if (wasCut) await this.listen(this.port);
    for (const connection of this.connections) {
      connection.releaseHeld();
      connection.pump();
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.mode = 'cut';
    for (const connection of [...this.connections]) connection.close(true);
    await this.#stopListening();
  }

  #stopListening(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    if (server === undefined) return Promise.resolve();
    return new Promise((resolve) => server.close(() => resolve()));
  }

  #assertOpen(): void {
    if (this.#closed) throw new Error('proxy is closed');
  }
}

/** Start a proxy on 127.0.0.1 in front of `127.0.0.1:<targetPort>`, in pass mode. */
export async function startTcpProxy(options: TcpProxyOptions): Promise<TcpProxy> {
  if (!Number.isInteger(options.targetPort) || options.targetPort < 1) {
    throw new Error(`bad target port ${options.targetPort}`);
  }
  const proxy = new FaultProxy(options);
  await proxy.listen(options.port ?? 0);
  return proxy;
}
