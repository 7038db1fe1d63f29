/**
 * Helpers shared by the store URL parsers of the backends (`backends/<engine>/url.ts`): the
 * multi-host list and the integer parameters. Pure: no engine client, no network call.
 */
import { InvalidArgumentError } from '../errors.js';

/**
 * The `host:port[,host:port…]` list of a multi-host store URL (etcd, ZooKeeper, Redlock,
 * Sentinel). IPv6 hosts stay in brackets.
 * @throws InvalidArgumentError naming the store's `shape` when a member is malformed.
 */
export function parseHostList(
  hosts: string,
  shape: string,
  store: string,
): { host: string; port: number }[] {
  return hosts.split(',').map((member) => {
    const m = /^([a-z0-9.-]+|\[[0-9a-f:]+\]):(\d{1,5})$/i.exec(member);
    const port = Number(m?.[2]);
    if (m === null || !(port >= 1 && port <= 65535)) {
      throw new InvalidArgumentError('store', `${shape} with host:port members`, store);
    }
    return { host: m[1] as string, port };
  });
}

/**
 * Read an integer parameter of a store URL (`?name=…`), `fallback` when absent.
 * @throws InvalidArgumentError naming `store parameter <name>`, with the text given.
 */
export function integerParameter(
  params: URLSearchParams,
  name: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const raw = params.get(name) ?? String(fallback);
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new InvalidArgumentError(
      `store parameter ${name}`,
      `an integer in [${min}, ${max}]`,
      raw,
    );
  }
  return value;
}
