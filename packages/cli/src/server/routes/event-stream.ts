/**
 * Server-Sent Events answers (https://html.spec.whatwg.org/multipage/server-sent-events.html),
 * as the election observers and the dashboard stream them: the reply taken over from fastify,
 * its headers written at once, and a comment line every `SSE_HEARTBEAT_MS` that keeps an idle
 * stream (and proxies on its way) open.
 */
import type { ServerResponse } from 'node:http';
import type { FastifyReply } from 'fastify';

/** Interval of the comment lines that keep an idle event stream (and proxies on its way) open, ms. */
export const SSE_HEARTBEAT_MS = 15_000;

/** A stream opened by `openEventStream`. */
export interface EventStreamReply {
  readonly stream: ServerResponse;
  /** Write one event: `event: <name>` when named, then the `data:` line of `data` as JSON. */
  send(data: unknown, event?: string): void;
  /** Stop the heartbeat (idempotent); the caller ends the stream. */
  stopHeartbeat(): void;
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
      const name = event === undefined ? '' : `event: ${event}\n`;
      stream.write(`${name}data: ${JSON.stringify(data)}\n\n`);
    },
    stopHeartbeat: () => clearInterval(heartbeat),
  };
}
