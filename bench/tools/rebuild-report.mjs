#!/usr/bin/env node
// Rebuild the markdown, SVG and JSON of a bench result from its JSON (after a change to the
// report's wording or layout; the measurements are not touched).
// Usage: node bench/tools/rebuild-report.mjs bench/results/<date>.json
import { readFileSync } from 'node:fs';
import { writeFile } from '../lib/env.mjs';
import { buildReport } from '../lib/report.mjs';

const path = process.argv[2];
if (!path?.endsWith('.json')) {
  console.error('usage: rebuild-report.mjs <result>.json');
  process.exit(2);
}
const saved = JSON.parse(readFileSync(path, 'utf8'));
const report = buildReport({ ...saved, results: saved.runs });
const base = path.slice(0, -'.json'.length);
writeFile(`${base}.json`, `${JSON.stringify(report.json, null, 2)}\n`);
writeFile(`${base}.md`, report.markdown);
writeFile(`${base}.svg`, report.svg);
console.log(`rebuilt ${base}.{json,md,svg}`);
