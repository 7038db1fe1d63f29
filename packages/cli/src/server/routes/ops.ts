/** Operations routes: `GET /healthz` (no auth) and `GET /metrics` (Prometheus text format). */
import type { FastifyInstance } from 'fastify';
import type { Registry } from 'prom-client';
import { HttpError } from '../http-errors.js';

/** Register `/healthz` and `/metrics`. */
export function registerOpsRoutes(
  app: FastifyInstance,
  ctx: { readonly registry: Registry; readonly shutdown: AbortSignal },
): void {
  app.get('/healthz', async () => {
    if (ctx.shutdown.aborted) {
      throw new HttpError(503, {
        errorCode: 'ERR_SHUTTING_DOWN',
        message: 'the sidecar is shutting down',
      });
    }
    return { status: 'ok' };
  });

  app.get('/metrics', async (_request, reply) => {
    reply.type(ctx.registry.contentType);
    return ctx.registry.metrics();
  });
}
