import { setTimeout as sleep } from 'node:timers/promises';
import type { KV } from '@nats-io/kv';
import type { ZodType } from 'zod';
import { isWrongLastSequence } from './kvRemove.ts';

/** Compare-and-set rounds before a change gives up (writers of one key contend only at once). */
const CAS_ROUNDS = 100;

/**
 * Read-modify-write of small shared values in a KV bucket by compare-and-set:
 * changes of one key made by this process run one after another (they contend
 * only with other processes'), and a lost round waits a little and reads again.
 */
export class KvCas {
  readonly #kv: KV;
  readonly #queues = new Map<string, Promise<unknown>>();

  constructor(kv: KV) {
    this.#kv = kv;
  }

  async read<T>(key: string, schema: ZodType<T>): Promise<{ value: T; revision: number } | undefined> {
    const found = await this.#kv.get(key);
    if (found === null || found.operation !== 'PUT') return undefined;
    const parsed = schema.safeParse(safeJson(found.value));
    if (!parsed.success) throw new Error(`value ${key} is invalid`, { cause: parsed.error });
    return { value: parsed.data, revision: found.revision };
  }

  /**
   * Compare-and-set `change` of the key's value (undefined: none yet), one
   * change of the key at a time in this process; the value written and its
   * revision, or null when `change` said no write (null).
   */
  change<T>(
    key: string,
    schema: ZodType<T>,
    change: (value: T | undefined) => T | null,
  ): Promise<{ value: T; revision: number } | null> {
    const turn = (this.#queues.get(key) ?? Promise.resolve()).then(
      () => this.#cas(key, schema, change),
      () => this.#cas(key, schema, change),
    );
    this.#queues.set(key, turn);
    void turn.then(
      () => this.#queues.get(key) === turn && this.#queues.delete(key),
      () => this.#queues.get(key) === turn && this.#queues.delete(key),
    );
    return turn;
  }

  async #cas<T>(
    key: string,
    schema: ZodType<T>,
    change: (value: T | undefined) => T | null,
  ): Promise<{ value: T; revision: number } | null> {
    for (let round = 0; round < CAS_ROUNDS; round++) {
      if (round > 0) await sleep(Math.random() * Math.min(50, round * 2));
      const read = await this.read(key, schema);
      const value = change(read?.value);
      if (value === null) return null;
      try {
        const json = JSON.stringify(value);
        const revision =
          read === undefined ? await this.#kv.create(key, json) : await this.#kv.update(key, json, read.revision);
        return { value, revision };
      } catch (err) {
        if (!isWrongLastSequence(err)) throw err;
      }
    }
    throw new Error(`key ${key}: ${CAS_ROUNDS} writers in a row changed it first`);
  }
}

function safeJson(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return undefined;
  }
}
