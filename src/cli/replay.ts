import { parseArgs } from 'node:util';
import type { StateValue } from 'xstate';
import { agentStateOf, statePaths, traceLog, type TraceStep } from '../../machines/index.ts';
import { loadConfig } from '../config.ts';
import { ConversationId, type LoggedEvent } from '../../protocol/index.ts';
import { withoutPassword, type EventLog } from '../store/index.ts';
import { openEventLog, type StoreOrigin } from './openStore.ts';
import { processIO, type CliIO } from './io.ts';

const USAGE = `usage: tether replay <conversation_id> [--at SEQ] [--json]

Folds a stored conversation through the session statechart without running
anything, and prints every stored event with the transition it caused (seq,
stored event, machine event, state before → after), then the final state,
agent state and context.
  --at SEQ  stop after the event at stream sequence SEQ
  --json    one JSON object instead of text
Reads NATS_URL, or the embedded store under TETHER_DATA_DIR (joining a
running Tether's nats-server, or starting one just for the read).`;

/** One line of the replay: a stored event and the transition it caused, if any. */
export type ReplayStep = TraceStep;

export interface ReplayReport {
  conversation_id: string;
  /** Where the events were read. */
  store: { url: string; origin: StoreOrigin };
  /** Stream sequence of the last event folded. */
  through_seq: number;
  /** Stream sequence of the conversation's last stored event. */
  last_seq: number;
  events_folded: number;
  steps: ReplayStep[];
  /** The active leaf states as dotted paths (several in parallel regions). */
  state: string[];
  value: StateValue;
  agent_state: string;
  status: string;
  context: unknown;
}

/** Folds `logged` (the conversation's events, in order) and explains every step. */
export function replayReport(
  conversationId: string,
  logged: LoggedEvent[],
  lastSeq: number,
  store: ReplayReport['store'],
): ReplayReport {
  if (logged.length === 0) throw new Error(`conversation ${conversationId}: no events to fold`);
  const { steps, snapshot } = traceLog(logged);
  return {
    conversation_id: conversationId,
    store,
    through_seq: logged[logged.length - 1]!.seq,
    last_seq: lastSeq,
    events_folded: logged.length,
    steps,
    state: statePaths(snapshot.value),
    value: snapshot.value,
    agent_state: agentStateOf(snapshot),
    status: snapshot.status,
    context: snapshot.context,
  };
}

const ORIGIN_TEXT: Record<StoreOrigin, string> = {
  nats_url: 'NATS_URL',
  running_embedded: 'the nats-server already running on TETHER_DATA_DIR',
  started_embedded: 'a nats-server started on TETHER_DATA_DIR for this read, now stopped',
};

/** The report as aligned text lines. */
export function formatReplay(report: ReplayReport): string {
  const seqWidth = String(report.through_seq).length;
  const stored = report.steps.map((s) => `${s.type} (${s.source})`);
  const storedWidth = Math.max(...stored.map((s) => s.length));
  const eventWidth = Math.max(...report.steps.map((s) => (s.event ?? '-').length));
  const lines = report.steps.map((s, i) => {
    const event = (s.event ?? '-').padEnd(eventWidth);
    const head = `${String(s.seq).padStart(seqWidth)}  ${stored[i]!.padEnd(storedWidth)}  ${event}`;
    if (s.to !== null) return `${head}  ${s.from === null ? '' : `${s.from} `}→ ${s.to}`;
    if (s.recorded_agent_state !== undefined) return `${head}  (recorded agent state: ${s.recorded_agent_state})`;
    return `${head}  (not a machine event)`;
  });
  const through =
    report.through_seq === report.last_seq
      ? `seq ${report.through_seq} (the last stored event)`
      : `seq ${report.through_seq} (the log goes on to seq ${report.last_seq})`;
  return [
    `conversation ${report.conversation_id}: ${report.events_folded} events folded, through ${through}`,
    `read from ${report.store.url} (${ORIGIN_TEXT[report.store.origin]})`,
    '',
    ...lines,
    '',
    `state    ${report.state.join(', ')}`,
    `agent    ${report.agent_state}`,
    `status   ${report.status}`,
    `context  ${JSON.stringify(report.context, null, 2).replace(/\n/g, '\n         ')}`,
    '',
  ].join('\n');
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

async function readAll(log: EventLog, conversationId: string): Promise<LoggedEvent[]> {
  const events: LoggedEvent[] = [];
  for (;;) {
    const page = await log.read(conversationId, { afterSeq: events[events.length - 1]?.seq ?? 0 });
    events.push(...page.items);
    if (!page.hasMore || page.items.length === 0) return events;
  }
}

interface ReplayArgs {
  conversationId: string;
  at: number | undefined;
  json: boolean;
}

/** The parsed arguments, or the message that says what is wrong with them. */
function parseReplayArgs(argv: string[]): ReplayArgs | { help: true } | string {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: { at: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
      strict: true,
      allowPositionals: true,
    });
  } catch (err) {
    return messageOf(err);
  }
  const { values, positionals } = parsed;
  if (values.help) return { help: true };
  if (positionals.length !== 1) return 'give exactly one conversation id';
  const conversationId = positionals[0]!;
  if (!ConversationId.safeParse(conversationId).success)
    return `invalid conversation id ${JSON.stringify(conversationId)}`;
  let at: number | undefined;
  if (values.at !== undefined) {
    at = Number(values.at);
    if (!/^\d+$/.test(values.at) || !Number.isSafeInteger(at)) {
      return `--at takes a stream sequence (an integer ≥ 0), not ${JSON.stringify(values.at)}`;
    }
  }
  return { conversationId, at, json: values.json ?? false };
}

/** `tether replay`: resolves with the exit code (2 for bad arguments, 1 for any other failure). */
export async function replay(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
  io: CliIO = processIO,
): Promise<number> {
  const args = parseReplayArgs(argv);
  if (typeof args === 'string') {
    io.stderr(`tether replay: ${args}\n${USAGE.split('\n')[0]}\n`);
    return 2;
  }
  if ('help' in args) {
    io.stdout(`${USAGE}\n`);
    return 0;
  }
  const fail = (message: string) => {
    io.stderr(`tether replay: ${message}\n`);
    return 1;
  };
  let logged: LoggedEvent[];
  let store: ReplayReport['store'];
  try {
    const config = loadConfig(env);
    const natsLog = (line: string) => io.stderr(`nats-server: ${line}\n`);
    const opened = await openEventLog(config, { name: 'tether-replay', log: natsLog, path: env.PATH });
    store = { url: withoutPassword(opened.url), origin: opened.origin };
    try {
      logged = await readAll(opened.log, args.conversationId);
    } finally {
      await opened.close();
    }
  } catch (err) {
    return fail(messageOf(err));
  }
  const last = logged[logged.length - 1];
  if (last === undefined) {
    return fail(`unknown conversation ${args.conversationId}: no events stored for it on NATS at ${store.url}`);
  }
  const at = args.at;
  const selected = at === undefined ? logged : logged.filter((l) => l.seq <= at);
  if (selected.length === 0) {
    const first = logged[0]!.seq;
    return fail(`conversation ${args.conversationId} has no event at or before seq ${at} (its first is seq ${first})`);
  }
  let report: ReplayReport;
  try {
    report = replayReport(args.conversationId, selected, last.seq, store);
  } catch (err) {
    return fail(`conversation ${args.conversationId} cannot be folded: ${messageOf(err)}`);
  }
  io.stdout(args.json ? `${JSON.stringify(report, null, 2)}\n` : formatReplay(report));
  return 0;
}
