// The Elections view: the elections this browser follows (kept in its local storage), one event
// stream each (/ui/api/elections/observe).
import { $, cell } from './dom.js';
import { route, state } from './state.js';

/** Where this browser keeps the names of the followed elections. */
const ELECTIONS_STORAGE = 'fencelock.dashboard.elections';

export function savedElections() {
  try {
    const names = JSON.parse(localStorage.getItem(ELECTIONS_STORAGE) ?? '[]');
    return Array.isArray(names) ? names.filter((n) => typeof n === 'string') : [];
  } catch {
    return [];
  }
}

export function saveElections() {
  localStorage.setItem(ELECTIONS_STORAGE, JSON.stringify([...state.elections.keys()]));
}

export function followElection(name) {
  if (state.elections.has(name)) return;
  const election = { source: null, leader: null, since: null, error: null };
  state.elections.set(name, election);
  const source = new EventSource(`/ui/api/elections/observe?name=${encodeURIComponent(name)}`);
  election.source = source;
  source.addEventListener('message', (event) => {
    const { leader } = JSON.parse(event.data);
    if (leader?.term !== election.leader?.term) election.since = Date.now();
    election.leader = leader;
    election.error = null;
    if (route().view === 'elections') renderElections();
  });
  source.addEventListener('error', (event) => {
    // The server's own `event: error` carries its answer; a lost connection carries nothing.
    election.error = event.data ? JSON.parse(event.data).message : 'no answer; trying again';
    if (source.readyState === EventSource.CLOSED)
      election.error = 'the sidecar refused to follow it';
    if (route().view === 'elections') renderElections();
  });
}

function unfollowElection(name) {
  state.elections.get(name)?.source?.close();
  state.elections.delete(name);
  saveElections();
  renderElections();
}

export function renderElections() {
  const body = $('elections-table').tBodies[0];
  body.replaceChildren();
  for (const [name, election] of state.elections) {
    const row = document.createElement('tr');
    row.dataset.election = name;
    const leader = election.leader;
    cell(row, name, 'key');
    cell(row, election.error ?? leader?.ownerId ?? 'nobody');
    cell(row, leader?.term ?? '–');
    cell(row, leader?.value ?? '–');
    cell(row, leader && election.since ? new Date(election.since).toLocaleTimeString() : '–');
    cell(row, leader ? String(leader.candidates) : '–');
    const stop = document.createElement('button');
    stop.type = 'button';
    stop.textContent = 'Stop';
    stop.setAttribute('aria-label', `Stop following ${name}`);
    stop.addEventListener('click', () => unfollowElection(name));
    cell(row, '').append(stop);
    body.append(row);
  }
}
