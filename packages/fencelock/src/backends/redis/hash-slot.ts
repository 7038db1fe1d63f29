/**
 * The Redis Cluster hash slot of a key name, computed here as the Redis Cluster specification
 * defines it ("Keys distribution model" and "Hash tags"): CRC16 (the XMODEM variant: polynomial
 * 0x1021, initial value 0, no reflection) of the key's bytes, modulo 16384; when the name has a
 * `{` followed later by a `}` with at least one byte between them, only the bytes between the
 * first `{` and the first `}` after it are hashed. The backend uses it to tell, with no round
 * trip, whether the keys of several locks may go to one script call on a Cluster. (The same
 * algorithm as the `cluster-key-slot` package the Redis clients use; computed here so that the
 * library keeps no dependency of its own.)
 */

/** Slots of a Redis Cluster. */
const SLOTS = 16_384;

/** CRC16-XMODEM of each byte value, for a byte-at-a-time CRC. */
const CRC16_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let byte = 0; byte < 256; byte++) {
    let crc = byte << 8;
    for (let bit = 0; bit < 8; bit++) {
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    table[byte] = crc;
  }
  return table;
})();

const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;

/**
 * The hash slot (0 to 16383) of key name `name`, its UTF-8 bytes hashed as a Redis client sends
 * them.
 */
export function hashSlot(name: string): number {
  const bytes = Buffer.from(name, 'utf8');
  let start = 0;
  let end = bytes.length;
  const open = bytes.indexOf(OPEN_BRACE);
  if (open !== -1) {
    const close = bytes.indexOf(CLOSE_BRACE, open + 1);
    if (close > open + 1) {
      start = open + 1;
      end = close;
    }
  }
  let crc = 0;
  for (let i = start; i < end; i++) {
    crc = ((crc << 8) & 0xffff) ^ CRC16_TABLE[((crc >> 8) ^ bytes[i]!) & 0xff]!;
  }
  return crc % SLOTS;
}

/** The one hash slot of every name in `names`, or undefined when they span several. */
export function sharedSlot(names: readonly string[]): number | undefined {
  let slot: number | undefined;
  for (const name of names) {
    const own = hashSlot(name);
    if (slot === undefined) slot = own;
    else if (own !== slot) return undefined;
  }
  return slot;
}
