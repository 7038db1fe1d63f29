/**
 * Server-Sent Events answers (https://html.spec.whatwg.org/multipage/server-sent-events.html),
 * as the election observers and the dashboard stream them: the reply taken over from fastify,
 * its headers written at once, a comment line every `SSE_HEARTBEAT_MS` that keeps an idle stream
 * (and proxies on its way) open, and two ends a server needs besides the client's hang-up:
 * - the connection's socket closing also ends the stream: a response queued behind another on a
 *   pipelined connection never sees its own `close` when the socket goes;
 * - a client that does not read is cut off once `MAX_BUFFERED_BYTES` wait for it, instead of
 *   the sidecar buffering without bound (an `EventSource` reconnects by itself).
 */
import type { ServerResponse } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';

/** Interval of the comment lines that keep an idle event stream (and proxies on its way) open, ms. */
export const SSE_HEARTBEAT_MS = 15_000;
/** Bytes a stream may have waiting for a slow reader before the sidecar ends it. */
export const MAX_BUFFERED_BYTES = 1024 * 1024;

/** A stream opened by `openEventStream`. */
export interface EventStreamReply {
  readonly stream: ServerResponse;
  /**
   * Write one event: `event: <name>` when named, then the `data:` line of `data` as JSON. A
   * stream past `MAX_BUFFERED_BYTES` is ended instead.
   */
  send(data: unknown, event?: string): void;
  /** Whether the client has not read the last writes yet (a superseded event may be skipped). */
  readonly behind: boolean;
  /** Stop the heartbeat (idempotent); the caller ends the stream. */
  stopHeartbeat(): void;
}

/**
 * Call `onGone` once when the client of `request` is gone: its response or its connection's
 * socket closed (whichever first).
 * @returns a function that stops listening.
 */
export function whenGone(
  request: FastifyRequest,
  reply: FastifyReply,
  onGone: () => void,
): () => void {
  const socket = request.raw.socket;
  let done = false;
  const gone = () => {
    if (done) return;
    done = true;
    off();
    onGone();
  };
  const off = () => {
    reply.raw.off('close', gone);
    socket?.off('close', gone);
  };
  reply.raw.once('close', gone);
  if (socket === null || socket.destroyed) queueMicrotask(gone);
  else socket.once('close', gone);
  return off;
}

/** Take `reply` over from fastify as an event stream (200, `text/event-stream`) with a heartbeat. */
export function openEventStream(reply: FastifyReply): EventStreamReply {
  reply.hijack();
  const stream = reply.raw;
  stream.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    'x-accel-buffering': 'no',
  });
  const heartbeat = setInterval(() => stream.write(': heartbeat\n\n'), SSE_HEARTBEAT_MS);
  return {
    stream,
    send(data, event) {
      if (stream.writableLength > MAX_BUFFERED_BYTES) {
        // Destroyed, not ended: an end would wait behind the bytes the client does not read.
        stream.destroy();
        return;
      }
      const name = event === undefined ? '' : `event: ${event}\n`;
      stream.write(`${name}data: ${JSON.stringify(data)}\n\n`);
    },
    get behind() {
      return stream.writableNeedDrain;
    },
    stopHeartbeat: () => clearInterval(heartbeat),
  };
}
