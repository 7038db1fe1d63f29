// The Locks view (the held keys under the prefix) and a lock's page (holders, waiters, history).
import { $, cell, formatMs } from './dom.js';
import { route, state } from './state.js';

function lockLink(key) {
  const a = document.createElement('a');
  a.href = `#/lock/${encodeURIComponent(key)}`;
  a.textContent = key;
  return a;
}

export function renderLocks() {
  const snapshot = state.snapshot;
  const body = $('locks-table').tBodies[0];
  body.replaceChildren();
  $('locks-caption').textContent = `Held locks under “${state.prefix}”`;
  if (snapshot === null) {
    $('locks-note').textContent = '';
    return;
  }
  const needle = $('search').value.trim().toLowerCase();
  let shown = 0;
  for (const lock of snapshot.locks) {
    const owners = lock.holders.map((h) => h.owner).join(' ');
    if (needle && !`${lock.key} ${owners}`.toLowerCase().includes(needle)) continue;
    shown++;
    const holders = lock.holders.length > 0 ? lock.holders : [null];
    holders.forEach((holder, i) => {
      const row = document.createElement('tr');
      row.dataset.key = lock.key;
      const keyCell = cell(row, '', 'key');
      if (i === 0) keyCell.append(lockLink(lock.key));
      cell(row, lock.mode === 'permits' ? `permits (${lock.permits})` : lock.mode);
      cell(row, holder?.owner ?? '–');
      cell(row, holder?.fencingToken ?? '–');
      cell(row, holder ? formatMs(holder.ttlMs) : '–');
      cell(row, holder ? formatMs(holder.heldForMs) : '–');
      cell(row, i === 0 ? String(lock.waiters) : '');
      body.append(row);
    });
  }
  const parts = [`${shown} of ${snapshot.locks.length} held keys shown`];
  if (snapshot.truncated) parts.push('the listing stops at its first 500 keys');
  if (snapshot.error) parts.push(`the last listing failed: ${snapshot.error}`);
  parts.push(`listed at ${new Date(snapshot.at).toLocaleTimeString()}`);
  $('locks-note').textContent = `${parts.join('; ')}.`;
}

export function renderLock(key) {
  $('lock-key').textContent = key;
  const lock = state.snapshot?.locks.find((l) => l.key === key);
  const outside = !key.startsWith(state.prefix);
  $('lock-outside').hidden = !outside;
  let mode = 'not held';
  if (lock) mode = lock.mode === 'permits' ? `permits (${lock.permits})` : lock.mode;
  else if (outside) mode = 'unknown: the key is outside the watched prefix';
  else if (state.snapshot?.truncated) mode = 'not in the listing (it stops at 500 keys)';
  $('lock-mode').textContent = mode;
  $('lock-waiters').textContent = lock ? String(lock.waiters) : mode === 'not held' ? '0' : '–';
  const holders = $('holders-table').tBodies[0];
  holders.replaceChildren();
  for (const holder of lock?.holders ?? []) {
    const row = document.createElement('tr');
    cell(row, holder.owner);
    cell(row, holder.fencingToken);
    cell(row, formatMs(holder.ttlMs));
    cell(row, formatMs(holder.heldForMs));
    holders.append(row);
  }
  const history = $('history-table').tBodies[0];
  history.replaceChildren();
  const entries = state.detail.key === key ? state.detail.entries : [];
  for (const entry of [...entries].reverse()) {
    const row = document.createElement('tr');
    cell(row, new Date(entry.at).toLocaleTimeString());
    cell(row, entry.reason ? `${entry.event} (${entry.reason})` : entry.event);
    cell(row, entry.owner);
    cell(row, entry.fencingToken);
    history.append(row);
  }
}

export function addHistory(key, entry) {
  if (state.detail.key !== key) return;
  if (entry.event === 'released' || entry.event === 'lost') {
    // It takes the place of an `ended` the listing told of the same grant (the server did too).
    state.detail.entries = state.detail.entries.filter(
      (e) =>
        !(e.event === 'ended' && e.owner === entry.owner && e.fencingToken === entry.fencingToken),
    );
  }
  const same = (e) =>
    e.at === entry.at &&
    e.event === entry.event &&
    e.owner === entry.owner &&
    e.fencingToken === entry.fencingToken;
  if (!state.detail.entries.some(same)) state.detail.entries.push(entry);
}

export async function openLock(key) {
  if (state.detail.key === key) return;
  state.detail = { key, entries: [] };
  const answer = await fetch(`/ui/api/history?key=${encodeURIComponent(key)}`);
  if (!answer.ok || state.detail.key !== key) return;
  const { entries } = await answer.json();
  const later = state.detail.entries;
  state.detail.entries = entries;
  for (const entry of later) addHistory(key, entry);
  if (route().view === 'lock') renderLock(key);
}
