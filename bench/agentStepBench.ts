// (i) The host's work per agent step in a short and in a long conversation:
// the conversations, written through a real NodeHost, and the rounds
// that are measured on them.
import { scriptedAgent } from '../src/agent/index.ts';
import { silentLogger } from '../src/logger.ts';
import { CreateConversationBody, type LoggedEvent } from '../protocol/index.ts';
import { memoryRuntimeProvider, type CommandHandler } from '../src/runtime/memoryRuntime.ts';
import type { NodeHost } from '../src/host/index.ts';
import { createTether } from '../src/tether.ts';
import type { JetStreamEventLog, NatsConnection } from '../src/store/index.ts';
import { benchStoreNames, deleteBenchStores } from './benchStores.ts';
import { fmt, listened, progress, within } from './measure.ts';
import {
  jetStreamEventLog,
  kvCheckpointStore,
  kvConversationStore,
  kvSnapshotStore,
  natsStatusChannel,
} from '../src/store/index.ts';

const USER = 'agent-step-user';
/** Each command prints this many lines of 64 characters (about 1 KiB), as `cat` of a small file would. */
const OUTPUT_LINES = 16;
/** The scripted agent's steps per round: the command, then the summary of its output. */
export const STEPS_PER_ROUND = 2;

/** What every command of the bench prints: 1 KiB that differs per command. */
const catHandler: CommandHandler = (command) => ({
  exit_code: 0,
  output: Array.from({ length: OUTPUT_LINES }, (_, i) => `${command} line ${i} `.padEnd(63, '.') + '\n').join(''),
  timed_out: false,
  truncated: false,
});

export interface AgentStepFixture {
  host: NodeHost;
  log: JetStreamEventLog;
  /** Conversation id by name ('short', 'long'). */
  conversations: Map<string, string>;
  /** Runs one round (a user `!cat` message, its two agent steps) on a conversation; resolves when the agent waits again. */
  round(conversationId: string): Promise<void>;
  /** Stored events and their JSON bytes so far. */
  size(conversationId: string): Promise<{ events: number; bytes: number }>;
  drop(): Promise<void>;
}

/**
 * One Tether (JetStream log, KV stores, scripted agent, in-memory runtime whose
 * commands print 1 KiB) holding a conversation of about `sizes[name]` events
 * for each name, each written one round at a time as a user would work:
 * `!cat file-N`, the agent runs it, summarises its output, waits.
 */
export async function agentStepFixture(
  nc: NatsConnection,
  sizes: Record<string, number>,
  tag: string,
  timeoutMs: number,
): Promise<AgentStepFixture> {
  const names = benchStoreNames('agentstep', tag);
  const log = await jetStreamEventLog(nc, names);
  const tether = createTether({
    stores: {
      log,
      conversations: await kvConversationStore(nc, { bucket: names.conversationBucket }),
      snapshots: await kvSnapshotStore(nc, { bucket: names.snapshotBucket }),
      checkpoints: await kvCheckpointStore(nc, { bucket: names.checkpointBucket }),
      status: natsStatusChannel(nc, names.subjectPrefix),
    },
    runtimes: memoryRuntimeProvider(catHandler),
    agent: scriptedAgent(),
    logger: silentLogger,
  });
  const { host } = tether;
  const idle = new Map<string, { last: number; wake: (() => void) | null }>();
  const unsubscribes: Array<() => void> = [];
  let rounds = 0;
  const round = async (id: string): Promise<void> => {
    const state = idle.get(id)!;
    const before = state.last;
    const done = new Promise<void>((resolve) => (state.wake = () => state.last > before && resolve()));
    await host.commands.act(id, USER, { type: 'message', content: `!cat file-${rounds++}` });
    if (state.last <= before) await done;
  };
  const size = async (id: string) => {
    const { items } = await log.read(id);
    return { events: items.length, bytes: items.reduce((n, i) => n + JSON.stringify(i.event).length, 0) };
  };
  const drop = async () => {
    for (const unsubscribe of unsubscribes) unsubscribe();
    await tether.close();
    await deleteBenchStores(nc, names);
  };
  try {
    const conversations = new Map<string, string>();
    for (const [name, events] of Object.entries(sizes)) {
      const { conversation_id: id } = await host.commands.create(
        USER,
        CreateConversationBody.parse({ max_iterations: 10_000 }),
      );
      const state = { last: -1, wake: null as (() => void) | null };
      idle.set(id, state);
      unsubscribes.push(
        await listened(
          host.feed.listen(id, 0, {
            event: ({ event }: LoggedEvent) => {
              if (event.type !== 'agent_state_changed' || event.data.state !== 'awaiting_user_input') return;
              state.last = event.id;
              state.wake?.();
            },
            status: () => {},
          }),
        ),
      );
      await within(
        timeoutMs,
        `building the ${name} conversation`,
        build(log, id, events, state, () => round(id)),
      );
      conversations.set(name, id);
    }
    return { host, log, conversations, round, size, drop };
  } catch (err) {
    await drop();
    throw err;
  }
}

/** Waits for the start-up to end, then runs rounds until the conversation holds `events` events. */
async function build(
  log: JetStreamEventLog,
  id: string,
  events: number,
  state: { last: number },
  round: () => Promise<void>,
): Promise<void> {
  for (;;) {
    const last = await log.last(id);
    if (last?.event.type === 'agent_state_changed' && last.event.data.state === 'awaiting_user_input') {
      state.last = Math.max(state.last, last.event.id);
      break;
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  let shown = 0;
  while (state.last + 1 < events) {
    await round();
    if (state.last + 1 >= shown + 2_000)
      progress(`agent step: ${fmt.int((shown = state.last + 1))} events of ${fmt.int(events)}`);
  }
}
