/**
 * Why no server of a ZooKeeper ensemble could be reached, asked of the operating system. The
 * native client never reports why a connection failed: a refused connect goes through the C
 * client's `handle_socket_error_msg`, which writes errno to its log (off here, see attach.ts) and
 * resets the handle's state to 0 (zookeeper-client-c 3.8.2, src/zookeeper.c:1999-2047), and the
 * binding passes on only that state. So once the client gave up, each member is connected to
 * once with node:net: when every member refuses, the ensemble is down (`connection refused`, with
 * Node's ECONNREFUSED errors as the evidence); when one accepts or does not answer in time, it is
 * up but silent.
 */
import { connect } from 'node:net';
import type { Unreachable } from '../../errors.js';
import { unreachableAt } from '../unreachable.js';

/** How long a probe waits for a member's TCP answer, ms, at most. */
export const PROBE_MS = 200;

/**
 * Connect once to every member of `ensemble` (`host:port,host:port`) and close at once.
 * @returns each member's connect error, or undefined for a member that accepted the connection
 *   or did not answer within `timeoutMs`.
 */
export function probeMembers(ensemble: string, timeoutMs: number): Promise<(Error | undefined)[]> {
  return Promise.all(ensemble.split(',').map((member) => probe(member, timeoutMs)));
}

function probe(member: string, timeoutMs: number): Promise<Error | undefined> {
  const at = member.lastIndexOf(':');
  const host = member.slice(0, at).replace(/^\[|\]$/g, '');
  const port = Number(member.slice(at + 1));
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    // Resolved once the socket is closed: nothing of the probe outlives it.
    const done = (error: Error | undefined) => {
      clearTimeout(timer);
      socket.once('close', () => resolve(error));
      socket.destroy();
    };
    const timer = setTimeout(() => done(undefined), timeoutMs);
    socket.once('connect', () => done(undefined));
    socket.once('error', (error) => done(error));
  });
}

/**
 * What to tell about an ensemble no request reached: `connection refused` when every member
 * refuses a connection now, else `otherwise` (the caller's own finding: no answer within its
 * bound, or a connection that closed).
 */
export async function ensembleUnreachable(
  ensemble: string,
  otherwise: Unreachable,
  probeMs: number,
): Promise<Unreachable> {
  const errors = await probeMembers(ensemble, probeMs);
  const refused = errors.every(
    (e) => e !== undefined && (e as NodeJS.ErrnoException).code === 'ECONNREFUSED',
  );
  return (refused && unreachableAt(ensemble, errors, 0)) || otherwise;
}
