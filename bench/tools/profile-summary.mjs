#!/usr/bin/env node
// Where the time went in one or more V8 CPU profiles (`node --cpu-prof`, written by
// `npm run bench -- --profile`): self time per function and per file, largest first.
// Usage: node bench/tools/profile-summary.mjs <file.cpuprofile|dir>... [--top N]
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { parseArgs } from 'node:util';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { top: { type: 'string', default: '25' } },
});
const files = positionals.flatMap((p) =>
  statSync(p).isDirectory()
    ? readdirSync(p)
        .filter((f) => f.endsWith('.cpuprofile'))
        .map((f) => join(p, f))
    : [p],
);
if (files.length === 0) {
  console.error('usage: profile-summary.mjs <file.cpuprofile|dir>... [--top N]');
  process.exit(2);
}

const byFunction = new Map();
const byFile = new Map();
let totalUs = 0;
const shortUrl = (url) => {
  if (!url) return '(native)';
  const path = url.replace(/^file:\/\//, '');
  const nm = path.lastIndexOf('node_modules/');
  if (nm >= 0) return path.slice(nm + 'node_modules/'.length);
  return relative(process.cwd(), path) || path;
};
for (const file of files) {
  const profile = JSON.parse(readFileSync(file, 'utf8'));
  const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
  // Self time: each sample is attributed to the node it hit, for the time until the next one.
  const selfUs = new Map();
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i + 1] ?? 0;
    selfUs.set(id, (selfUs.get(id) ?? 0) + dt);
  });
  for (const [id, us] of selfUs) {
    const { callFrame } = nodes.get(id);
    const name = callFrame.functionName || '(anonymous)';
    const where = `${shortUrl(callFrame.url)}:${callFrame.lineNumber + 1}`;
    const key = `${name}  ${where}`;
    byFunction.set(key, (byFunction.get(key) ?? 0) + us);
    const fileKey = ['(idle)', '(program)', '(garbage collector)'].includes(name)
      ? name
      : shortUrl(callFrame.url);
    byFile.set(fileKey, (byFile.get(fileKey) ?? 0) + us);
    totalUs += us;
  }
}

const top = Number(values.top);
const show = (title, map) => {
  console.log(`\n${title}`);
  for (const [key, us] of [...map].sort((a, b) => b[1] - a[1]).slice(0, top)) {
    console.log(
      `${((us / totalUs) * 100).toFixed(1).padStart(6)} %  ${(us / 1000).toFixed(0).padStart(7)} ms  ${key}`,
    );
  }
};
console.log(`${files.length} profile(s), ${(totalUs / 1000).toFixed(0)} ms sampled`);
show('self time by file', byFile);
show('self time by function', byFunction);
