/**
 * Where a session's keepalives go: one client per cluster member, used in turn. A keepalive that
 * gets no answer moves every session of the backend to the next member, so a member that froze
 * costs one deadline, then is left alone. (The etcd3 package's own pool picks a member at random
 * for each call, and measured here it kept landing on a frozen member for several calls in a row,
 * its channel "waiting for LB pick", long enough to lose a 4 s lease.)
 */
import type { Etcd3 } from 'etcd3';

export class KeepaliveRoute {
  readonly #clients: readonly Etcd3[];
  readonly #owned: boolean;
  #index = 0;

  /**
   * @param clients one client per member (or the backend's single client when the members are
   *   not known).
   * @param owned whether `close()` closes them.
   */
  constructor(clients: readonly Etcd3[], owned: boolean) {
    this.#clients = clients;
    this.#owned = owned;
  }

  /** The client of the member keepalives go to now. */
  get client(): Etcd3 {
    return this.#clients[this.#index % this.#clients.length] as Etcd3;
  }

  /** `client` got no answer: move on to the next member (once, however many sessions saw it). */
  failed(client: Etcd3): void {
    if (this.client === client) this.#index += 1;
  }

  /** Close the per-member clients this route opened. */
  close(): void {
    if (this.#owned) for (const client of this.#clients) client.close();
  }
}
