// The append benchmark's clients, in a node process of their own (started by
// clientFleet.ts), so the server's process does server work only, as with real
// clients: Tether's WebSocket clients, or the Socket.IO baseline's clients.
// Commands and replies travel over the IPC channel.
import { performance } from 'node:perf_hooks';
import { BenchClient } from './benchClient.ts';
import { pacedRun, type PacedGroup, type PacedMember } from './latencyPacing.ts';
import { SocketIoBenchClient } from './socketIoClient.ts';

export interface ClientSpec {
  /** Extra query naming the caller. */
  auth: string;
  conversationId: string;
  afterSeq: number;
  /** Distinct per conversation: it picks the messages' text. */
  index: number;
  /** One client per conversation sends; the others only watch. */
  sends: boolean;
  /** The server this client connects to, when not `connect`'s (a cluster's clients spread over its nodes). */
  wsBase?: string;
}

/** A Socket.IO room: what its sender emits, and how many clients join it (the sender first). */
export interface RoomSpec {
  room: string;
  payloads: string[];
  clients: number;
}

export type FleetCommand =
  | { type: 'connect'; wsBase: string; clients: ClientSpec[] }
  | { type: 'connectSocketIo'; url: string; rooms: RoomSpec[] }
  | { type: 'run'; messages: number; window: number; settle: boolean }
  | { type: 'paced'; messages: number; perSecond: number }
  | { type: 'frames' }
  | { type: 'close' };

/**
 * An event frame as received: its seq and the event's JSON text. For the
 * Socket.IO baseline: the message's position and its payload's JSON.
 */
export type Frame = [seq: number, eventJson: string];

export type FleetReply =
  | { type: 'connected' }
  | { type: 'done'; ms: number }
  | { type: 'paced'; ms: number; latencies: Float64Array; memberLatencies: Float64Array[]; sendLags: Float64Array }
  | { type: 'frames'; received: Frame[][] }
  | { type: 'closed' }
  | { type: 'failed'; error: string };

/** What is connected now: Tether's ws clients or the baseline's, grouped by conversation (sender first). */
type Fleet =
  | { kind: 'tether'; clients: BenchClient[]; groups: BenchClient[][] }
  | { kind: 'socketio'; clients: SocketIoBenchClient[]; groups: SocketIoBenchClient[][] };

let fleet: Fleet | null = null;

function connected(): Fleet {
  if (!fleet) throw new Error('no clients are connected');
  return fleet;
}

function groupBy<T>(items: readonly T[], key: (item: T) => string): T[][] {
  const groups = new Map<string, T[]>();
  items.forEach((item) => {
    const k = key(item);
    const group = groups.get(k);
    if (group) group.push(item);
    else groups.set(k, [item]);
  });
  return [...groups.values()];
}

async function connectTether(wsBase: string, specs: ClientSpec[]): Promise<Fleet> {
  const clients = await Promise.all(
    specs.map((c) => BenchClient.connect(c.wsBase ?? wsBase, c.auth, c.conversationId, c.afterSeq, c.index)),
  );
  // The sender first in each group.
  const order = specs.map((_, i) => i).sort((a, b) => Number(specs[b]!.sends) - Number(specs[a]!.sends));
  const groups = groupBy(order, (i) => specs[i]!.conversationId);
  if (groups.some((g) => g.filter((i) => specs[i]!.sends).length !== 1))
    throw new Error('every conversation needs exactly one sender');
  return { kind: 'tether', clients, groups: groups.map((g) => g.map((i) => clients[i]!)) };
}

async function connectSocketIo(url: string, rooms: RoomSpec[]): Promise<Fleet> {
  const groups = await Promise.all(
    rooms.map((r) =>
      Promise.all(
        Array.from({ length: r.clients }, (_, k) =>
          SocketIoBenchClient.connect(url, r.room, k === 0 ? r.payloads : []),
        ),
      ),
    ),
  );
  return { kind: 'socketio', clients: groups.flat(), groups };
}

/** Windowed run: every sender keeps at most `window` in flight; done when every client has everything. */
async function run(f: Fleet, command: Extract<FleetCommand, { type: 'run' }>): Promise<number> {
  const t0 = performance.now();
  if (f.kind === 'tether') {
    await Promise.all(
      f.groups.map(async ([sender, ...watchers]) => {
        await sender!.run(command.messages, command.window, command.settle);
        // Done when every watcher of the conversation has what the sender has.
        await Promise.all(watchers.map((w) => w.until(sender!.lastSeq)));
      }),
    );
  } else {
    await Promise.all(
      f.groups.map(async ([sender, ...watchers]) => {
        await sender!.run(command.window);
        await Promise.all(watchers.map((w) => w.until(sender!.received.length)));
      }),
    );
  }
  return performance.now() - t0;
}

async function handle(command: FleetCommand): Promise<FleetReply> {
  switch (command.type) {
    case 'connect':
      fleet = await connectTether(command.wsBase, command.clients);
      return { type: 'connected' };
    case 'connectSocketIo':
      fleet = await connectSocketIo(command.url, command.rooms);
      return { type: 'connected' };
    case 'run':
      return { type: 'done', ms: await run(connected(), command) };
    case 'paced': {
      const groups: PacedGroup[] = (connected().groups as PacedMember[][]).map((members) => ({
        sender: members[0]!,
        members,
      }));
      return { type: 'paced', ...(await pacedRun(groups, command.messages, command.perSecond)) };
    }
    case 'frames': {
      const f = connected();
      const received =
        f.kind === 'tether'
          ? f.clients.map((c) => c.received.map((r): Frame => [r.seq, r.eventJson]))
          : f.clients.map((c) => c.received.map((payload, k): Frame => [k, JSON.stringify(payload)]));
      return { type: 'frames', received };
    }
    case 'close':
      for (const c of fleet?.clients ?? []) c.close();
      fleet = null;
      return { type: 'closed' };
  }
}

let queue: Promise<unknown> = Promise.resolve();
process.on('message', (command: FleetCommand) => {
  queue = queue.then(() =>
    handle(command).then(
      (reply) => process.send?.(reply),
      (err: unknown) =>
        process.send?.({
          type: 'failed',
          error: err instanceof Error ? (err.stack ?? err.message) : String(err),
        } satisfies FleetReply),
    ),
  );
});
// The parent going away ends the clients too.
process.on('disconnect', () => process.exit(0));
