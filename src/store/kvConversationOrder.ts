import type { KV } from '@nats-io/kv';
import type { JetStreamManager } from '@nats-io/jetstream';
import { z } from 'zod';
import { ConversationId } from '../../protocol/index.ts';
import { counterKey, orderPagePrefix } from './conversationKeys.ts';
import type { ConversationEntry } from './conversationStore.ts';
import { KvCas } from './kvCas.ts';
import { removeKey } from './kvRemove.ts';

/** Places per page of a user's creation order. */
export const ORDER_PAGE_SIZE = 64;
/**
 * A place whose entry is still missing this long after it was taken is left
 * from a creation cut off: it goes. Long, because the clock that stamped it is
 * another node's.
 */
const STALE_PLACE_MS = 15 * 60_000;

const Counter = z.object({ next: z.number().int().min(0) });
/** A place: [ordinal, conversation id, when it was taken (epoch ms)]. */
const Place = z.tuple([z.number().int().min(0), ConversationId, z.number()]);
type Place = z.infer<typeof Place>;
const OrderPage = z.object({ places: z.array(Place) });
type OrderPage = z.infer<typeof OrderPage>;

/** Reads entries by id, in order; undefined for one that is not there. */
export type ResolveEntries = (ids: string[]) => Promise<(ConversationEntry | undefined)[]>;

/**
 * Each user's conversations in creation order, so that a list page reads
 * about one page whatever the user's history: a counter (`c.<user>`) hands
 * out ordinals, and page `n` (`p.<user>.<n>`) holds the places of ordinals
 * `n*64` to `n*64+63` still taken. Both change by compare-and-set. A page
 * emptied by deletes is removed with a purge bounded by its revision (a
 * place taken meanwhile stays), so pages grow with the conversations that
 * exist, never with those deleted. A list asks the stream which pages exist
 * (one request, one name per 64 conversations), then reads pages from the
 * newest until it has its items, and gets only those items' entries.
 */
export class KvConversationOrder {
  readonly #kv: KV;
  readonly #jsm: JetStreamManager;
  readonly #bucket: string;
  readonly #cas: KvCas;

  constructor(kv: KV, jsm: JetStreamManager, bucket: string) {
    this.#kv = kv;
    this.#jsm = jsm;
    this.#bucket = bucket;
    this.#cas = new KvCas(kv);
  }

  /** Takes the user's next place for the conversation; its ordinal. */
  async enter(user: string, conversationId: string): Promise<number> {
    const counted = await this.#cas.change(counterKey(user), Counter, (counter) => ({
      next: (counter?.next ?? 0) + 1,
    }));
    const ordinal = counted!.value.next - 1;
    const place: Place = [ordinal, conversationId, Date.now()];
    await this.#cas.change(pageKey(user, ordinal), OrderPage, (page) => ({
      places: [...(page?.places ?? []).filter(([o]) => o !== ordinal), place],
    }));
    return ordinal;
  }

  /** Gives the place back; the page goes when it holds no other. */
  async leave(user: string, conversationId: string, ordinal: number): Promise<void> {
    const key = pageKey(user, ordinal);
    const changed = await this.#cas.change(key, OrderPage, (page) => {
      const places = page?.places.filter(([o, id]) => o !== ordinal || id !== conversationId);
      return places === undefined || places.length === page?.places.length ? null : { places };
    });
    if (changed?.value.places.length === 0) await removeKey(this.#kv, key, changed.revision);
  }

  /**
   * The user's entries newest first after `after` (an ordinal), at most
   * `limit`, and whether more follow. A place whose entry is gone, or names
   * another place, is skipped (and given back once stale).
   */
  async page(
    user: string,
    limit: number,
    after: number | undefined,
    resolve: ResolveEntries,
  ): Promise<{ items: ConversationEntry[]; more: boolean }> {
    const found: ConversationEntry[] = [];
    const stale: Place[] = [];
    for (const n of await this.#pages(user)) {
      if (after !== undefined && n * ORDER_PAGE_SIZE >= after) continue;
      const read = await this.#cas.read(`${orderPagePrefix(user)}${n}`, OrderPage);
      const places = (read?.value.places ?? [])
        .filter(([o]) => after === undefined || o < after)
        .sort((a, b) => b[0] - a[0]);
      for (let i = 0; i < places.length && found.length <= limit;) {
        const batch = places.slice(i, i + limit + 1 - found.length);
        i += batch.length;
        const entries = await resolve(batch.map(([, id]) => id));
        batch.forEach((place, j) => {
          const entry = entries[j];
          if (entry?.ordinal === place[0]) found.push(entry);
          // Another place named (a duplicate of a migration), or none long after the place was taken.
          // An entry without an ordinal may be taking this place right now: it stays.
          else if (entry?.ordinal !== undefined || (entry === undefined && Date.now() - place[2] > STALE_PLACE_MS))
            stale.push(place);
        });
      }
      if (found.length > limit) break;
    }
    // Best effort: the next list that finds them tries again.
    for (const [ordinal, id] of stale) await this.leave(user, id, ordinal).catch(() => undefined);
    return { items: found.slice(0, limit), more: found.length > limit };
  }

  /** The numbers of the user's pages, newest first: the stream's subject index, one request. */
  async #pages(user: string): Promise<number[]> {
    const prefix = `$KV.${this.#bucket}.${orderPagePrefix(user)}`;
    const info = await this.#jsm.streams.info(`KV_${this.#bucket}`, { subjects_filter: `${prefix}*` });
    return Object.keys(info.state.subjects ?? {})
      .map((subject) => Number(subject.slice(prefix.length)))
      .filter((n) => Number.isSafeInteger(n) && n >= 0)
      .sort((a, b) => b - a);
  }
}

function pageKey(user: string, ordinal: number): string {
  return `${orderPagePrefix(user)}${Math.floor(ordinal / ORDER_PAGE_SIZE)}`;
}
