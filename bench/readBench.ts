// (b) Reading one conversation's whole log: Tether's `log.read` against a raw
// JetStream ordered consumer that reads the same messages and parses each.
import { performance } from 'node:perf_hooks';
import { jetstream, jetstreamManager, type JetStreamClient } from '@nats-io/jetstream';
import { EVENT_VERSION, StoredEvent } from '../protocol/index.ts';
import { jetStreamEventLog, subjectFor, type JetStreamEventLog, type NatsConnection } from '../src/store/index.ts';
import { messageText } from './benchClient.ts';
import { fmt, within } from './measure.ts';

export interface ReadFixture {
  log: JetStreamEventLog;
  js: JetStreamClient;
  stream: string;
  subject: string;
  conversationId: string;
  count: number;
  drop(): Promise<void>;
}

/**
 * A conversation as the scripted agent leaves it: created, then rounds of user
 * message, running, agent reply, awaiting. Every event passes the StoredEvent schema.
 */
export function conversationEvents(conversationId: string, count: number): string[] {
  const t0 = Date.parse('2025-01-01T00:00:00.000Z');
  const out: string[] = [];
  for (let id = 0; id < count; id++) {
    const envelope = {
      v: EVENT_VERSION,
      id,
      conversation_id: conversationId,
      ts: new Date(t0 + id * 250).toISOString(),
    };
    const round = Math.floor((id - 1) / 4);
    const event =
      id === 0
        ? {
            ...envelope,
            source: 'user',
            type: 'conversation_created',
            data: { user: 'local', confirmation_mode: false, max_iterations: 10_000, secret_names: [], replay: false },
          }
        : [
            { ...envelope, source: 'user', type: 'message', data: { content: messageText(0, round) } },
            {
              ...envelope,
              source: 'environment',
              type: 'agent_state_changed',
              data: { state: 'running' },
              cause: id - 1,
            },
            {
              ...envelope,
              source: 'agent',
              type: 'message',
              data: {
                content: `You said: "${messageText(0, round)}". To run a shell command, start a message with "!".`,
              },
              cause: id - 2,
            },
            {
              ...envelope,
              source: 'environment',
              type: 'agent_state_changed',
              data: { state: 'awaiting_user_input' },
              cause: id - 1,
            },
          ][(id - 1) % 4]!;
    out.push(JSON.stringify(StoredEvent.parse(event)));
  }
  return out;
}

/** Stores `count` events of one conversation on a fresh stream (raw async publish, in order, then all acks). */
export async function readFixture(
  nc: NatsConnection,
  count: number,
  tag: string,
  timeoutMs: number,
): Promise<ReadFixture> {
  const stream = `BENCH_READ_${tag}`;
  const prefix = `bench.read${tag}`;
  const conversationId = `read${tag}`;
  const log = await jetStreamEventLog(nc, { stream, subjectPrefix: prefix });
  const js = jetstream(nc);
  const subject = subjectFor(prefix, conversationId);
  const events = conversationEvents(conversationId, count);
  // Another conversation's events in the same stream, so the filter has something to skip.
  const other = subjectFor(prefix, `${conversationId}other`);
  await within(
    timeoutMs,
    'storing the read fixture',
    Promise.all(events.flatMap((e) => [js.publish(subject, e), js.publish(other, e)])),
  );
  if ((await log.lastSeq(conversationId)) === 0) throw new Error('the read fixture was not stored');
  return {
    log,
    js,
    stream,
    subject,
    conversationId,
    count,
    drop: async () => {
      await (await jetstreamManager(nc)).streams.delete(stream).catch(() => false);
    },
  };
}

export interface ReadRun {
  ms: number;
  summary: string;
}

export async function tetherRead(f: ReadFixture, timeoutMs: number): Promise<ReadRun> {
  const t0 = performance.now();
  const page = await within(timeoutMs, 'log.read', f.log.read(f.conversationId));
  const ms = performance.now() - t0;
  if (page.items.length !== f.count || page.hasMore)
    throw new Error(`log.read returned ${page.items.length} events (has_more ${page.hasMore}), expected ${f.count}`);
  if (page.items[f.count - 1]!.event.id !== f.count - 1) throw new Error('log.read returned events out of order');
  return { ms, summary: `${fmt.int(f.count)} events in ${fmt.ms(ms)} ms` };
}

/**
 * The baseline: what a program following the subject would write with nats.js
 * v3: an ordered consumer on the one subject (a string filter: nats-server 2.9
 * has no `filter_subjects` list), consumed until nothing is pending, each message
 * JSON-parsed. Its pulls are bounded in bytes (8 MiB), as any reader's must be:
 * a pull counted in messages (this baseline pulled 1,000 until 2026-11-24) can
 * ask for more than the 64 MiB nats-server queues for one client when events are
 * large, and the server then drops the reader's connection as a slow consumer.
 */
export async function rawRead(f: ReadFixture, timeoutMs: number): Promise<ReadRun> {
  const t0 = performance.now();
  const consumer = await f.js.consumers.get(f.stream, { filter_subjects: f.subject });
  const messages = await consumer.consume({ max_bytes: 8 * 1024 * 1024 });
  const parsed: unknown[] = [];
  const drain = (async () => {
    for await (const m of messages) {
      parsed.push({ seq: m.seq, event: JSON.parse(m.string()) as unknown });
      if (m.info.pending === 0) break;
    }
  })();
  await within(timeoutMs, 'raw ordered consumer read', drain);
  const ms = performance.now() - t0;
  consumer.delete().catch(() => {});
  if (parsed.length !== f.count) throw new Error(`raw read got ${parsed.length} messages, expected ${f.count}`);
  return { ms, summary: `${fmt.int(f.count)} messages in ${fmt.ms(ms)} ms` };
}
