// The append benchmark's WebSocket clients, in a node process of their own
// (started by clientFleet.ts), so the server's process does server work only,
// as with real clients. Commands and replies travel over the IPC channel.
import { performance } from 'node:perf_hooks';
import { BenchClient } from './benchClient.ts';

export interface ClientSpec {
  /** Extra query naming the caller. */
  auth: string;
  conversationId: string;
  afterSeq: number;
  /** Distinct per conversation: it picks the messages' text. */
  index: number;
  /** One client per conversation sends; the others only watch. */
  sends: boolean;
}

export type FleetCommand =
  | { type: 'connect'; wsBase: string; clients: ClientSpec[] }
  | { type: 'run'; messages: number; window: number; settle: boolean }
  | { type: 'frames' }
  | { type: 'close' };

/** An event frame as received: its seq and the event's JSON text. */
export type Frame = [seq: number, eventJson: string];

export type FleetReply =
  | { type: 'connected' }
  | { type: 'done'; ms: number }
  | { type: 'frames'; received: Frame[][] }
  | { type: 'closed' }
  | { type: 'failed'; error: string };

let specs: ClientSpec[] = [];
let clients: BenchClient[] = [];

async function handle(command: FleetCommand): Promise<FleetReply> {
  switch (command.type) {
    case 'connect':
      specs = command.clients;
      clients = await Promise.all(specs.map((c) => BenchClient.connect(command.wsBase, c.auth, c.conversationId, c.afterSeq, c.index)));
      return { type: 'connected' };
    case 'run': {
      const t0 = performance.now();
      await Promise.all(
        clients.map(async (sender, i) => {
          if (!specs[i]!.sends) return;
          await sender.run(command.messages, command.window, command.settle);
          // Done when every watcher of the conversation has what the sender has.
          const watchers = clients.filter((_, k) => k !== i && specs[k]!.conversationId === specs[i]!.conversationId);
          await Promise.all(watchers.map((w) => w.until(sender.lastSeq)));
        }),
      );
      return { type: 'done', ms: performance.now() - t0 };
    }
    case 'frames':
      return { type: 'frames', received: clients.map((c) => c.received.map((r): Frame => [r.seq, r.eventJson])) };
    case 'close':
      for (const c of clients) c.close();
      clients = [];
      specs = [];
      return { type: 'closed' };
  }
}

let queue: Promise<unknown> = Promise.resolve();
process.on('message', (command: FleetCommand) => {
  queue = queue.then(() =>
    handle(command).then(
      (reply) => process.send?.(reply),
      (err: unknown) => process.send?.({ type: 'failed', error: err instanceof Error ? (err.stack ?? err.message) : String(err) } satisfies FleetReply),
    ),
  );
});
// The parent going away ends the clients too.
process.on('disconnect', () => process.exit(0));
