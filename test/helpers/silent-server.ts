/**
 * A TCP server on loopback that accepts every connection and never sends a byte: an engine that
 * is up but does not answer (frozen, overloaded, a black-holed route). `close()` destroys the
 * connections it accepted and stops listening.
 */
import { type AddressInfo, createServer, type Socket } from 'node:net';

export interface SilentServer {
  /** The port it listens on (127.0.0.1). */
  readonly port: number;
  /** Connections accepted so far. */
  readonly accepted: number;
  close(): Promise<void>;
}

export async function startSilentServer(): Promise<SilentServer> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server = createServer((socket) => {
    accepted += 1;
    sockets.add(socket);
    // Reads and drops what the client writes; a reset from the client is not an error here.
    socket.on('data', () => undefined);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;
  return {
    port,
    get accepted() {
      return accepted;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
