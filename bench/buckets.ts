// What each share of a profile is, told from the frames on its stack. A
// sample goes to the first bucket that claims it, so order matters.
import { onStack, type Bucket } from './profile.ts';

const inFile = (part: string) => (stack: readonly { url: string }[]) => stack.some((f) => f.url.includes(part));
const leaf = (name: string) => (stack: readonly { functionName: string }[]) => stack[0]?.functionName === name;

const COMMON_TAIL: Bucket[] = [
  { label: 'garbage collector', test: leaf('(garbage collector)') },
  { label: 'idle (the event loop waiting for I/O)', test: leaf('(idle)') },
];

export const APPEND_BUCKETS: Bucket[] = [
  {
    label:
      'nats.js: Error objects made per request, stack traces included (with `noAsyncTraces` only `RequestOne.cancel()`\'s `RequestError("cancelled")`, made after every reply, remains)',
    test: onStack(/^(RequestError|TimeoutError)$/, 'nats-core'),
  },
  {
    // nats.js flushes from a queueMicrotask callback; the JIT often inlines its frames away, leaving write(2) alone.
    label: 'socket writes to nats-server (about one write(2) per append)',
    test: (s) => onStack('_send', 'transport-node')(s) || (leaf('writeBuffer')(s) && !inFile('/ws/lib/')(s)),
  },
  {
    label:
      "xstate: the throw-away actor that every pure `transition()` call builds (createInertActorScope), in Session.#apply; the machine's `context` factory throws a TypeError there (no input), and its stack trace is most of the cost",
    test: onStack('createInertActorScope', 'xstate'),
  },
  {
    label: 'xstate: the rest of the pure `transition()` in Session.#apply',
    test: onStack('transition', 'xstate/dist/xstate'),
  },
  {
    label: "xstate: `actor.send`, `snapshot.can` and the machine's own functions",
    test: (s) => inFile('/xstate/')(s) || inFile('/machines/')(s),
  },
  {
    label: 'JetStream append, rest (JSON.stringify, headers, nats.js request)',
    test: onStack('append', 'src/store/jetStreamEventLog'),
  },
  {
    label: 'ws fan-out of stored events to clients (server side: frame text, ws.send)',
    test: onStack('publishEvent', 'src/queries/conversationFeed'),
  },
  { label: 'bench harness (the ws clients run in their own process)', test: inFile('/bench/') },
  {
    label: 'nats.js receive path (parsing acks)',
    test: (s) => inFile('nats-core/lib/parser')(s) || inFile('nats-core/lib/protocol')(s),
  },
  { label: 'ws library (server end: framing, receive, writev)', test: inFile('/ws/lib/') },
  { label: 'Tether server and session code, rest', test: inFile('/src/') },
  ...COMMON_TAIL,
];

export const READ_BUCKETS: Bucket[] = [
  { label: 'toLoggedEvent: decode + JSON.parse of each event', test: onStack('toLoggedEvent') },
  { label: 'nats.js: JsMsg info parsing (reply subject)', test: onStack('parseInfo', 'jetstream') },
  { label: 'nats.js receive path (parser, iterators)', test: inFile('nats-core') },
  {
    label: 'nats.js JetStream consumer (fetch, heartbeats, consumer create/info/delete)',
    test: inFile('@nats-io/jetstream'),
  },
  { label: 'socket reads and writes', test: (s) => leaf('writeBuffer')(s) || inFile('node:net')(s) },
  ...COMMON_TAIL,
];

export const REHYDRATE_BUCKETS: Bucket[] = [
  {
    label: "fold: xstate (the machine's `transition` per event, inside foldEvents)",
    test: (s) => onStack('foldEvents')(s) && (inFile('/xstate/')(s) || inFile('/machines/sessionMachine')(s)),
  },
  { label: 'fold: the rest of foldEvents (toSessionEvent, the loop)', test: onStack('foldEvents') },
  ...READ_BUCKETS.filter((b) => !COMMON_TAIL.includes(b)),
  { label: 'readStoredState, rest (history copy, last state fact)', test: onStack('readStoredState') },
  ...COMMON_TAIL,
];

export const SEEK_BUCKETS: Bucket[] = [
  {
    label: 'checkpoint lookup (`KvCheckpointStore.before`: stream info with subjects_filter, KV get, JSON.parse)',
    test: inFile('src/store/kvCheckpointStore'),
  },
  {
    label: 'log read (`JetStreamEventLog.read`: direct get of the last seq, ordered consumer, JSON.parse)',
    test: inFile('src/store/jetStreamEventLog'),
  },
  {
    label: 'fold (`stateAt`, `foldEvents`, the checkpoint restored)',
    test: (s) => inFile('/machines/')(s) || onStack('snapshotFrom', 'src/conversation/storedState')(s),
  },
  { label: 'index entry (`KvConversationStore.get`)', test: inFile('src/store/kvConversationStore') },
  { label: 'nats.js (requests, receive path, consumers)', test: inFile('@nats-io') },
  { label: 'Tether code, rest', test: inFile('/src/') },
  ...COMMON_TAIL,
];
