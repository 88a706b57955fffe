import { describe, expect, it } from 'vitest';
import { agentStateOf, foldEvents, statePaths, traceLog } from '../../machines/index.ts';
import { scriptedAgent, type Agent } from '../../src/agent/index.ts';
import type { LoggedEvent, StoredEvent } from '../../protocol/index.ts';
import { memoryRuntimeProvider, type CommandHandler } from '../../src/runtime/memoryRuntime.ts';
import { BadSeqError, ConversationNotFoundError } from '../../src/errors.ts';
import type { NodeHost } from '../../src/host/index.ts';
import {
  memoryStores,
  StoreUnavailableError,
  type EventLog,
  type MemoryCheckpointStore,
  type MemoryEventLog,
  type Stores,
} from '../../src/store/index.ts';
import { CountingLog } from '../support/countingLog.ts';
import { wrapLog } from '../support/wrapLog.ts';
import { until } from '../support/until.ts';
import { memoryHost } from '../support/memoryHost.ts';

const EVERY = 5;
const body = { confirmation_mode: false, max_iterations: 50, secrets: {} };

function ids(): () => string {
  let n = 0;
  return () => `c${(n++).toString(16).padStart(31, '0')}`;
}

function setup(
  options: {
    log?: (inner: MemoryEventLog) => EventLog;
    agentFor?: (id: string) => Agent;
    handler?: CommandHandler;
  } = {},
) {
  const stores = memoryStores();
  const checkpoints = stores.checkpoints as MemoryCheckpointStore;
  const log = options.log ? options.log(stores.log) : stores.log;
  const newId = ids();
  const manager = (over: Partial<Stores> = {}) =>
    memoryHost({
      ...stores,
      log,
      ...over,
      runtimes: memoryRuntimeProvider(options.handler),
      agentFor: options.agentFor ?? (() => scriptedAgent()),
      limits: { checkpointEvery: EVERY, idleMs: 1e9, closeDelayMs: 1e9 },
      newId,
    });
  return { stores, checkpoints, log, manager };
}

async function events(log: EventLog, id: string): Promise<LoggedEvent[]> {
  return (await log.read(id)).items;
}

/** Waits until the conversation's log stops changing and its agent waits for the user. */
async function settled(m: NodeHost, log: EventLog, id: string, state = 'awaiting_user_input'): Promise<void> {
  let last = -1;
  let same = 0;
  await until(async () => {
    const seq = await log.lastSeq(id);
    same = seq === last ? same + 1 : 0;
    last = seq;
    return same >= 5 && (await m.queries.info(id, 'local')).state === state;
  }, `conversation ${id} settled in ${state}`);
}

const kinds = (items: readonly StoredEvent[]) => items.map((e) => e.type);

describe('the state at an event', () => {
  it('equals a fold of the log up to it, at every event, from checkpoints; nothing is stored and a passivated conversation stays out of memory', async () => {
    const counting = { log: undefined as CountingLog | undefined };
    const { checkpoints, log, manager } = setup({ log: (inner) => (counting.log = new CountingLog(inner)) });
    const m = manager();
    const { conversation_id: id } = await m.commands.create('local', { ...body, initial_message: 'hello' });
    await settled(m, log, id);
    for (const content of ['!echo one', 'two', '!echo three']) {
      await m.commands.act(id, 'local', { type: 'message', content });
      await settled(m, log, id);
    }
    await m.passivate(id, 'idle');
    expect(m.isLive(id)).toBe(false);
    const logged = await events(log, id);
    expect(logged.length).toBeGreaterThan(4 * EVERY);
    // The owner wrote a checkpoint each time the count passed a multiple of EVERY.
    const written = checkpoints.size;
    expect(written).toBeGreaterThanOrEqual(Math.floor(logged.length / EVERY) - 2);
    const lastSeq = await log.lastSeq(id);

    const { steps } = traceLog(logged);
    for (const [i, item] of logged.entries()) {
      const fold = foldEvents(logged.slice(0, i + 1).map((l) => l.event)).snapshot;
      const at = await m.queries.stateAt(id, 'local', item.seq);
      expect(at.seq).toBe(item.seq);
      expect(at.event).toEqual(item.event);
      expect(at.state).toBe(agentStateOf(fold));
      expect(at.value).toEqual(fold.value);
      expect(at.context).toEqual(JSON.parse(JSON.stringify(fold.context)));
      const step = steps[i]!;
      expect(at.transition, `event ${i} (${item.event.type})`).toEqual(
        step.to === null ? null : { from: step.from === null ? [] : step.from.split(', '), to: step.to.split(', ') },
      );
    }
    // Without at_seq: the last event.
    expect(await m.queries.stateAt(id, 'local')).toMatchObject({ seq: lastSeq, state: 'awaiting_user_input' });
    expect(statePaths((await m.queries.stateAt(id, 'local')).value as never)).toEqual(['passivated']);

    // A look near the end read one page from a checkpoint, not the log from its start.
    const reads = counting.log!.callsFor(id).length;
    await m.queries.stateAt(id, 'local', logged.at(-2)!.seq);
    expect(counting.log!.callsFor(id).length - reads).toBe(1);

    // Nothing stored, nothing loaded.
    expect(await log.lastSeq(id)).toBe(lastSeq);
    expect(checkpoints.size).toBe(written);
    expect(m.isLive(id)).toBe(false);
    await m.shutdown();
  });

  it('answers BAD_SEQ for a seq that is not one of the conversation’s events, and 404 to another user', async () => {
    const { log, manager } = setup();
    const m = manager();
    const { conversation_id: a } = await m.commands.create('local', { ...body, initial_message: 'hello' });
    const { conversation_id: b } = await m.commands.create('local', body);
    await settled(m, log, a);
    const ofB = (await events(log, b))[0]!.seq;
    const last = await log.lastSeq(a);
    for (const seq of [ofB, last + 1000]) await expect(m.queries.stateAt(a, 'local', seq)).rejects.toThrow(BadSeqError);
    await expect(m.queries.stateAt(a, 'mallory', last)).rejects.toThrow(ConversationNotFoundError);
    await expect(m.commands.fork(a, 'local', ofB)).rejects.toThrow(BadSeqError);
    await expect(m.commands.fork(a, 'mallory', last)).rejects.toThrow(ConversationNotFoundError);
    await m.shutdown();
  });
});

describe('a fork', () => {
  it('copies the parent’s history through at_seq, says where it came from, goes on by itself, and leaves the parent as it was', async () => {
    const { log, checkpoints, manager } = setup();
    const m = manager();
    const { conversation_id: parent } = await m.commands.create('local', { ...body, initial_message: 'hello' });
    await settled(m, log, parent);
    await m.commands.act(parent, 'local', { type: 'message', content: '!echo one' });
    await settled(m, log, parent);
    const cut = await log.lastSeq(parent);
    await m.commands.act(parent, 'local', { type: 'message', content: 'later' });
    await settled(m, log, parent);
    const parentBefore = await events(log, parent);
    const copied = parentBefore.filter((l) => l.seq <= cut).map((l) => l.event);

    const { conversation_id: fork } = await m.commands.fork(parent, 'local', cut);
    expect(fork).not.toBe(parent);
    await settled(m, log, fork);
    const forked = (await events(log, fork)).map((l) => l.event);
    // Copies keep id, ts, cause, source, type and data; only the conversation id is the fork's.
    expect(forked.slice(0, copied.length)).toEqual(copied.map((e) => ({ ...e, conversation_id: fork })));
    expect(forked[copied.length]).toMatchObject({
      id: copied.length,
      type: 'conversation_forked',
      data: { conversation_id: parent, seq: cut },
    });
    expect(forked[copied.length + 1]).toMatchObject({ type: 'session_rehydrated' });
    expect(await m.queries.info(fork, 'local')).toMatchObject({ forked_from: { conversation_id: parent, seq: cut } });
    expect(await m.queries.info(parent, 'local')).toMatchObject({ forked_from: null });
    expect((await m.queries.list('local', { limit: 10 })).items.map((i) => i.conversation_id)).toContain(fork);
    // Checkpoints of the copied part, where the owner would have written them.
    expect(checkpoints.size).toBeGreaterThan(0);
    for (const item of (await log.read(fork)).items) {
      const at = await m.queries.stateAt(fork, 'local', item.seq);
      const upTo = (await events(log, fork)).filter((l) => l.seq <= item.seq).map((l) => l.event);
      expect(at.context).toEqual(JSON.parse(JSON.stringify(foldEvents(upTo).snapshot.context)));
    }

    // It goes on by itself, and answers.
    await m.commands.act(fork, 'local', { type: 'message', content: 'in the fork' });
    await settled(m, log, fork);
    expect(kinds((await events(log, fork)).map((l) => l.event)).slice(-3)).toContain('message');
    // The parent is untouched.
    expect(await events(log, parent)).toEqual(parentBefore);
    // Another user cannot fork it (nor see the fork).
    await expect(m.commands.fork(parent, 'mallory', cut)).rejects.toThrow(ConversationNotFoundError);
    await expect(m.queries.info(fork, 'mallory')).rejects.toThrow(ConversationNotFoundError);
    await m.shutdown();
  });

  it('asks a pending agent step again', async () => {
    let parentId = '';
    const held: Agent = {
      context: () => {
        const inner = scriptedAgent().context();
        return { observe: (e) => inner.observe(e), step: () => new Promise(() => {}) };
      },
    };
    const { log, manager } = setup({ agentFor: (id) => (id === parentId ? held : scriptedAgent()) });
    const m = manager();
    parentId = 'c' + '0'.repeat(31);
    const { conversation_id: parent } = await m.commands.create('local', { ...body, initial_message: 'hello' });
    expect(parent).toBe(parentId);
    await settled(m, log, parent, 'running');
    const cut = await log.lastSeq(parent);
    const { conversation_id: fork } = await m.commands.fork(parent, 'local', cut);
    await settled(m, log, fork);
    const forked = (await events(log, fork)).map((l) => l.event);
    const answer = forked.find((e) => e.source === 'agent' && e.type === 'message');
    expect(answer).toBeDefined();
    expect(forked.indexOf(answer!)).toBeGreaterThan(forked.findIndex((e) => e.type === 'conversation_forked'));
    expect((await m.queries.info(parent, 'local')).state).toBe('running');
    await m.shutdown();
  });

  it('reports a pending command interrupted, and never runs it again', async () => {
    const ran: string[] = [];
    const handler: CommandHandler = (command) => {
      ran.push(command);
      return command === 'echo slow'
        ? new Promise(() => {})
        : { exit_code: 0, output: '', timed_out: false, truncated: false };
    };
    const { log, manager } = setup({ handler });
    const m = manager();
    const { conversation_id: parent } = await m.commands.create('local', { ...body, initial_message: '!echo slow' });
    await until(() => ran.includes('echo slow'), 'the parent runs its command');
    const cut = await log.lastSeq(parent);
    const command = (await events(log, parent)).find((l) => l.event.type === 'command')!.event;
    const { conversation_id: fork } = await m.commands.fork(parent, 'local', cut);
    await settled(m, log, fork);
    const output = (await events(log, fork)).map((l) => l.event).find((e) => e.type === 'command_output');
    expect(output).toMatchObject({ cause: command.id, data: { exit_code: null } });
    expect(output?.type === 'command_output' && output.data.output).toMatch(/^interrupted: .*it was not run again/);
    expect(ran.filter((c) => c === 'echo slow')).toHaveLength(1);
    await m.shutdown();
  });

  it('cut off half-way (its process gone) is never listed, and its copies are purged by recovery', async () => {
    const hang = { after: Infinity, appended: 0 };
    const { stores, log, manager } = setup({
      log: (inner) =>
        wrapLog(inner, {
          // The process dies here: this append and everything after it never happen.
          append: (event, options) =>
            ++hang.appended > hang.after ? new Promise(() => {}) : inner.append(event, options),
        }),
    });
    const first = manager();
    const { conversation_id: parent } = await first.commands.create('local', { ...body, initial_message: 'hello' });
    await settled(first, log, parent);
    const cut = await log.lastSeq(parent);
    hang.after = hang.appended + 3;
    void first.commands.fork(parent, 'local', cut);
    const forkId = 'c' + '1'.padStart(31, '0');
    await until(async () => (await stores.log.lastSeq(forkId)) > 0, 'copies stored');
    expect((await first.queries.list('local', { limit: 10 })).items.map((i) => i.conversation_id)).toEqual([parent]);

    // A new process on the same stores.
    const second = manager({ log: stores.log });
    await second.recover();
    expect((await second.queries.list('local', { limit: 10 })).items.map((i) => i.conversation_id)).toEqual([parent]);
    expect(await stores.log.lastSeq(forkId)).toBe(0);
    expect(await stores.conversations.markers()).not.toContainEqual(
      expect.objectContaining({ conversation_id: forkId }),
    );
    await expect(second.queries.info(forkId, 'local')).rejects.toThrow(ConversationNotFoundError);
    await second.shutdown();
  });

  it('of a conversation replaying a recorded trajectory stops replaying: its pending step is asked of the live agent', async () => {
    const { log, manager } = setup();
    const m = manager();
    const recorded = (id: number, content: string): LoggedEvent => ({
      seq: id + 1,
      event: {
        v: 1,
        id,
        conversation_id: 'x',
        ts: new Date(0).toISOString(),
        source: 'agent',
        type: 'message',
        data: { content },
      },
    });
    const replay = [recorded(1, 'recorded one'), recorded(3, 'recorded two')];
    const { conversation_id: parent } = await m.commands.create('local', { ...body, initial_message: 'hello', replay });
    await settled(m, log, parent);
    const agentSaid = async (id: string) =>
      (await events(log, id)).flatMap(({ event }) =>
        event.source === 'agent' && event.type === 'message' ? [event.data.content] : [],
      );
    expect(await agentSaid(parent)).toEqual(['recorded one']);
    const { seq: cut } = await m.commands.act(parent, 'local', { type: 'message', content: 'again' });
    await settled(m, log, parent);
    // The parent replays its second recorded answer; the fork, cut at the message, asks the live agent.
    expect(await agentSaid(parent)).toEqual(['recorded one', 'recorded two']);
    const { conversation_id: fork } = await m.commands.fork(parent, 'local', cut);
    await settled(m, log, fork);
    const said = await agentSaid(fork);
    expect(said).toHaveLength(2);
    expect(said[0]).toBe('recorded one');
    expect(said[1]).not.toBe('recorded two');
    await m.shutdown();
  });

  it('of a fork names its own parent; a fork of a parent whose delete was cut off is refused', async () => {
    let failPurges = 1;
    const { log, manager } = setup({
      log: (inner) =>
        wrapLog(inner, {
          purge: (id) => (failPurges-- > 0 ? Promise.reject(new Error('the store is down')) : inner.purge(id)),
        }),
    });
    const m = manager();
    const { conversation_id: parent } = await m.commands.create('local', { ...body, initial_message: 'hello' });
    await settled(m, log, parent);
    const { conversation_id: first } = await m.commands.fork(parent, 'local', await log.lastSeq(parent));
    await settled(m, log, first);
    const { conversation_id: second } = await m.commands.fork(first, 'local', await log.lastSeq(first));
    await settled(m, log, second);
    expect((await m.queries.info(second, 'local')).forked_from).toEqual({
      conversation_id: first,
      seq: expect.any(Number),
    });
    const forks = (await events(log, second)).filter((l) => l.event.type === 'conversation_forked');
    expect(forks.map((l) => l.event.type === 'conversation_forked' && l.event.data.conversation_id)).toEqual([
      parent,
      first,
    ]);

    // A delete whose purge failed leaves the log ending with session_closed, but not the record: nothing to fork.
    await expect(m.commands.delete(parent, 'local')).rejects.toThrow(/store is down/);
    const closed = (await events(log, parent)).findLast((l) => l.event.type === 'session_closed')!;
    await expect(m.commands.fork(parent, 'local', closed.seq)).rejects.toThrow(ConversationNotFoundError);
    await m.shutdown();
  });

  it('whose record cannot be written fails, and leaves nothing behind', async () => {
    const { stores, log, manager } = setup();
    const m = manager({
      conversations: {
        ...stores.conversations,
        get: (user, id) => stores.conversations.get(user, id),
        list: (user, page) => stores.conversations.list(user, page),
        delete: (user, id) => stores.conversations.delete(user, id),
        mark: (marker) => stores.conversations.mark(marker),
        unmark: (id) => stores.conversations.unmark(id),
        markers: () => stores.conversations.markers(),
        // Records of anything but the first conversation fail.
        put: (entry) =>
          entry.conversation_id.endsWith('0')
            ? stores.conversations.put(entry)
            : Promise.reject(new Error('KV is down')),
      },
    });
    const { conversation_id: parent } = await m.commands.create('local', { ...body, initial_message: 'hello' });
    await settled(m, log, parent);
    await expect(m.commands.fork(parent, 'local', await log.lastSeq(parent))).rejects.toThrow(StoreUnavailableError);
    const fork = 'c' + '1'.padStart(31, '0');
    expect(await log.lastSeq(fork)).toBe(0);
    expect(await stores.conversations.markers()).not.toContainEqual(expect.objectContaining({ conversation_id: fork }));
    expect(m.isLive(fork)).toBe(false);
    await m.shutdown();
  });
});
