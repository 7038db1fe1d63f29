/**
 * Where the engines started by `scripts/services.sh` listen. Keep ports in step with it.
 */
export const REDIS_PORT = Number(process.env.FENCELOCK_REDIS_PORT ?? 6390);
export const REDIS_URL = `redis://127.0.0.1:${REDIS_PORT}`;
