/** Loopback ports for tests. */
import { type AddressInfo, createServer } from 'node:net';

/**
 * A loopback port nothing listens on (one the kernel just handed out and took back): a
 * connection to it is refused, as to an engine that is down.
 */
export function closedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
