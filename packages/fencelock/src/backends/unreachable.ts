/**
 * Whether an engine client's error means the engine could not be reached at all, read from the
 * error's `code` and text as the clients give them (ioredis, etcd3 over gRPC, node-postgres):
 * the connection was refused, closed before any answer, or nothing answered in time. Each
 * backend names its store's address and turns the answer into the one message form of
 * `BackendError` (`Unreachable`). No engine client is imported here.
 */
import type { Unreachable } from '../errors.js';

/** What an error says about reaching the engine, without the address. */
export type UnreachableReason =
  | { readonly reason: 'connection-refused' | 'connection-closed' }
  | { readonly reason: 'no-answer'; readonly afterMs: number };

/** Connection refused: Node's `ECONNREFUSED` (gRPC repeats it in its message). */
const REFUSED = /ECONNREFUSED/;
/**
 * No answer in time: ioredis' `Command timed out` and connect `ETIMEDOUT`, gRPC's
 * `DEADLINE_EXCEEDED`, node-postgres' connection and query timeouts, and this library's own
 * bounds (`not connected within`, `no answer within`).
 */
const NO_ANSWER =
  /Command timed out|ETIMEDOUT|DEADLINE_EXCEEDED|Deadline exceeded|connection timeout|timeout exceeded when trying to connect|Query read timeout|not connected within|no answer within/i;
/**
 * The connection ended before an answer: ioredis' `Connection is closed.`, its retry limit and
 * its refusal to queue while disconnected (`Stream isn't writeable`),
 * its Cluster's `None of startup nodes is available`, its Sentinel's `All sentinels are
 * unreachable`, gRPC's `UNAVAILABLE`, node-postgres' `Connection terminated`.
 */
const CLOSED =
  /Connection is closed|max retries per request|Stream isn't writeable|None of startup nodes|All sentinels are unreachable|UNAVAILABLE|Connection terminated|ECONNRESET|EPIPE/i;

/**
 * Classify `errors` (the failed call's error first, then what the client reported on its
 * connection since it last worked): a refusal says most (a silent engine never refuses), then
 * a timeout, then a closed connection.
 * @param boundMs the bound that ran out, for `no answer within <boundMs> ms`.
 * @returns undefined when the errors are not about reaching the engine (a server's answer).
 */
export function unreachableReason(
  errors: readonly unknown[],
  boundMs: number,
): UnreachableReason | undefined {
  const texts = errors.filter((e) => e !== undefined).map(textOf);
  if (texts.some((t) => REFUSED.test(t))) return { reason: 'connection-refused' };
  if (texts.some((t) => NO_ANSWER.test(t))) return { reason: 'no-answer', afterMs: boundMs };
  if (texts.some((t) => CLOSED.test(t))) return { reason: 'connection-closed' };
  return undefined;
}

/** `unreachableReason` with the store's address, ready for `BackendError`. */
export function unreachableAt(
  address: string,
  errors: readonly unknown[],
  boundMs: number,
): Unreachable | undefined {
  const found = unreachableReason(errors, boundMs);
  return found && { address, ...found };
}

/** An error's code and message, and its cause's (gRPC and pg nest them). */
function textOf(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const code = (error as { code?: unknown }).code;
  const cause = (error as { cause?: unknown }).cause;
  return `${typeof code === 'string' ? `${code} ` : ''}${error.message}${cause instanceof Error ? ` ${textOf(cause)}` : ''}`;
}
