// What the dashboard's page knows: the watched prefix, the streams, the last listing and health
// series, the lock on view, the followed elections; and which view the URL's hash names.

export const state = {
  prefix: new URLSearchParams(location.search).get('prefix') ?? '',
  source: null,
  snapshot: null,
  health: [],
  /** History of the lock on view: its key and entries, oldest first. */
  detail: { key: null, entries: [] },
  charts: new Map(),
  /** Followed elections by name: their stream, leader (or null), when it changed, last error. */
  elections: new Map(),
};

export function route() {
  const hash = location.hash;
  if (hash.startsWith('#/lock/')) {
    try {
      return { view: 'lock', key: decodeURIComponent(hash.slice('#/lock/'.length)) };
    } catch {
      return { view: 'locks' }; // not a key this page made (malformed percent-encoding)
    }
  }
  if (hash === '#/health') return { view: 'health' };
  if (hash === '#/elections') return { view: 'elections' };
  return { view: 'locks' };
}
