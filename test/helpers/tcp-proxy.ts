/** The fault proxy lives with the torture harness; tests use the same one. */
export * from '../../tools/torture/src/proxy.js';
