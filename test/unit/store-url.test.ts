/** The store URL helpers the backends' URL parsers share. */
import { describe, expect, it } from 'vitest';
import {
  integerParameter,
  parseHostList,
} from '../../packages/fencelock/src/backends/store-url.js';
import { InvalidArgumentError } from '../../packages/fencelock/src/index.js';

describe('parseHostList', () => {
  it('splits host:port members, IPv6 hosts in brackets', () => {
    expect(parseHostList('a.example:1,[::1]:65535,10.0.0.5:2379', 'x://h:p', 'x://…')).toEqual([
      { host: 'a.example', port: 1 },
      { host: '[::1]', port: 65535 },
      { host: '10.0.0.5', port: 2379 },
    ]);
  });

  it.each(['a', 'a:0', 'a:65536', 'a:1,', 'a:1,b', 'a_b:1', '::1:1'])(
    'rejects %j naming the store shape',
    (hosts) => {
      const error = (() => {
        try {
          parseHostList(hosts, 'etcd://host:port[,host:port…]', `etcd://${hosts}`);
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).message).toContain('etcd://host:port[,host:port…]');
    },
  );
});

describe('integerParameter', () => {
  const params = new URLSearchParams('n=42&bad=4.5&low=0');
  it('reads the parameter, or the fallback when absent', () => {
    expect(integerParameter(params, 'n', 7, 1, 100)).toBe(42);
    expect(integerParameter(params, 'absent', 7, 1, 100)).toBe(7);
  });

  it('rejects a non-integer or out-of-range value, naming the parameter and the text given', () => {
    for (const [name, text] of [
      ['bad', '4.5'],
      ['low', '0'],
      ['n', '42'],
    ] as const) {
      const max = name === 'n' ? 10 : 100;
      expect(() => integerParameter(params, name, 7, 1, max)).toThrow(InvalidArgumentError);
      expect(() => integerParameter(params, name, 7, 1, max)).toThrow(
        new RegExp(`store parameter ${name}.*${text.replace('.', '\\.')}`, 's'),
      );
    }
  });
});
