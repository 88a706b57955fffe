import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { AgentState } from '../../protocol/index.ts';
import { useE2e } from '../support/e2e.ts';
import { endsAwaiting } from '../support/logQueries.ts';
import { allEvents, createConversation, eventsWhen, http, type ServerProcess } from '../support/serverProcess.ts';
import { wsUrlFor, type Frame, type WsClient } from '../support/wsClient.ts';

// Reproducible: the whole corpus follows from this seed (override with TETHER_FUZZ_SEED).
const SEED = Number(process.env.TETHER_FUZZ_SEED ?? 20_260_611);
// The documented default, set explicitly so the near-limit frames know their bound.
const MAX_FRAME_BYTES = 1_048_576;
const FRAMES = 10_000;
const CONNECTIONS = 4;
const BATCH = 250;
const BATCHES_PER_CONNECTION = FRAMES / CONNECTIONS / BATCH;

const CLIENT_FRAME_TYPES = new Set(['user_action', 'ping']);
const AGENT_STATES = new Set<string>(AgentState.options);
const MESSAGE_MAX_CHARS = 100_000;
const COMMAND_MAX_CHARS = 10_000;
const CLIENT_ID_MAX_CHARS = 128;

type ErrorFrame = Extract<Frame, { type: 'error' }>;

/** One fuzz frame: a text frame or a binary one, with the generator that made it (for failure messages). */
interface FuzzFrame {
  kind: string;
  text?: string;
  binary?: Uint8Array;
}

const e2e = useE2e();
let server: ServerProcess;
let conversationId: string;
/** The connections that take the fuzz, opened for the whole file: a later test goes on with one of them. */
let fuzzed: WsClient[];

beforeAll(async () => {
  server = await e2e.start({
    env: {
      // Rate limiting would answer RATE_LIMITED instead of letting the parser see the frame.
      TETHER_WS_FRAMES_PER_SECOND: '100000',
      TETHER_WS_FRAME_BURST: '100000',
      TETHER_MAX_FRAME_BYTES: String(MAX_FRAME_BYTES),
    },
  });
  conversationId = await createConversation(server.baseUrl);
  await idle(conversationId);
  fuzzed = await Promise.all(Array.from({ length: CONNECTIONS }, () => connect()));
}, 60_000);

async function connect(): Promise<WsClient> {
  const client = await e2e.connect(server, conversationId);
  // The history is sent before the first frame is answered: after a round trip it is all here.
  await client.roundTrip();
  return client;
}

/** The stored events once the agent waits for the user. */
const idle = (id: string) => eventsWhen(server, id, `conversation ${id} to await user input`, endsAwaiting, 30_000);

// ---------------------------------------------------------------------------
// The corpus. Every frame is bad by construction; the code the server owes it
// is worked out independently by `expectedCode` from the documented rules.
// ---------------------------------------------------------------------------

/** A JSON number literal written as is (JSON.stringify cannot write -0, 2**64 exactly or 1e309). */
class RawNumber {
  constructor(readonly literal: string) {}
}
const RAW_MARK = '@@raw-number-9f1c@@';

/** JSON text of a value that may hold RawNumber leaves. */
function toJson(value: unknown): string {
  const raws: string[] = [];
  const text = JSON.stringify(value, (_key, v: unknown) => {
    if (v instanceof RawNumber) {
      raws.push(v.literal);
      return `${RAW_MARK}${raws.length - 1}`;
    }
    return v;
  });
  return text.replace(new RegExp(`"${RAW_MARK}(\\d+)"`, 'g'), (_m, i: string) => raws[Number(i)]!);
}

const NUMBER_LITERALS = [
  '1e308',
  '-1e308',
  '1e309',
  '-1e309',
  '-0',
  '0',
  '-0.0',
  '18446744073709551616',
  '-18446744073709551616',
  '9007199254740993',
  '4.9e-324',
  '1e-400',
  '123456789012345678901234567890',
  '1E+2',
  '0.5',
  '-1',
  '42',
];
const rawNumber = fc.constantFrom(...NUMBER_LITERALS).map((n) => new RawNumber(n));

const ODD_STRINGS = [
  '\uD800',
  '\uDBFF',
  '\uDC00',
  '\uDFFF',
  'a\uD800b',
  '\uDC00\uD800',
  '\u0000',
  'nul\u0000byte',
  '\u202E',
  '\u200F',
  '\u200E',
  '\u2066rtl\u2069',
  '\uFEFF',
  '\u2028\u2029',
  '👩‍👩‍👧‍👦',
  '🏳️‍🌈',
  'e\u0301',
  '\uFFFF',
  '\uFFFE',
  '𝕋𝕖𝕥𝕙𝕖𝕣',
  'مرحبا بالعالم',
  '\u{10FFFF}',
  '\\',
  '"',
  '\u001b[31mred',
  '%s%n%x',
  '${process.exit()}',
  '../../etc/passwd',
  '<script>alert(1)</script>',
  '__proto__',
  'constructor',
  ' ',
  '\t\n\r',
];
const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c));
/** Strings built to upset encoders: lone surrogates, NUL, bidi marks, emoji, every plane. */
const oddString = fc.oneof(
  fc.constantFrom(...ODD_STRINGS),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc
    .array(fc.oneof(fc.constantFrom(...ODD_STRINGS), loneSurrogate, fc.string({ maxLength: 4 })), {
      minLength: 1,
      maxLength: 12,
    })
    .map((parts) => parts.join('')),
);
/** Any JSON value but a string (scalars, raw numbers, arrays, objects). */
const notAString = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer(),
  fc.double(),
  rawNumber,
  fc.array(fc.oneof(fc.integer(), oddString), { maxLength: 4 }),
  fc.dictionary(oddString, fc.oneof(fc.integer(), oddString), { maxKeys: 3 }),
);
const notAnObject = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer(),
  fc.double(),
  rawNumber,
  oddString,
  fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 5 }),
);
/** Extra fields are ignored by the protocol, so they only ever ride along with a real defect. */
const PROTOCOL_KEYS = new Set(['type', 'action', 'client_id', 'content', 'command', 'state']);
const extraFields = fc.option(
  fc.dictionary(
    oddString.filter((k) => !PROTOCOL_KEYS.has(k)),
    fc.jsonValue({ maxDepth: 1 }),
    { maxKeys: 3 },
  ),
  { nil: {} },
);
const validAction = fc.oneof(
  fc.record({ type: fc.constant('message'), content: fc.string({ minLength: 1, maxLength: 20 }) }),
  fc.record({ type: fc.constant('run'), command: fc.constant('true') }),
  fc.constant({ type: 'change_agent_state', state: 'stopped' }),
  fc.constant({ type: 'reconnect_runtime' }),
);
const unknownType = fc
  .oneof(
    fc.constantFrom(
      'PING',
      'Ping',
      'ping ',
      ' ping',
      'ping\u0000',
      'user-action',
      'userAction',
      'USER_ACTION',
      'user_action\u200F',
      'constructor',
      '__proto__',
      'toString',
      'hasOwnProperty',
      'message',
      'run',
      'pong',
      'sync',
      'event',
      'error',
      'status',
      '',
      'ｐｉｎｇ',
    ),
    oddString,
  )
  .filter((t) => !CLIENT_FRAME_TYPES.has(t));

/** A string a little over `max` characters. */
function longer(char: string, max: number): fc.Arbitrary<string> {
  return fc.integer({ min: max + 1, max: max + 2_000 }).map((n) => char.repeat(n));
}
const ACTION_TYPES = new Set(['message', 'run', 'change_agent_state', 'reconnect_runtime']);

/** Actions the schema must refuse: missing, wrong-typed, empty, too long or unknown fields. */
const badAction = fc.oneof(
  notAnObject,
  fc.constant({}),
  fc.record({ type: notAString }),
  fc.record({ type: unknownType.filter((t) => !ACTION_TYPES.has(t)) }),
  fc.constant({ type: 'message' }),
  fc.record({ type: fc.constant('message'), content: fc.oneof(notAString, fc.constant('')) }),
  fc.record({ type: fc.constant('message'), content: longer('m', MESSAGE_MAX_CHARS) }),
  fc.constant({ type: 'run' }),
  fc.record({ type: fc.constant('run'), command: fc.oneof(notAString, fc.constant('')) }),
  fc.record({ type: fc.constant('run'), command: longer('c', COMMAND_MAX_CHARS) }),
  fc.constant({ type: 'change_agent_state' }),
  fc.record({
    type: fc.constant('change_agent_state'),
    state: fc.oneof(
      notAString,
      oddString.filter((s) => !AGENT_STATES.has(s)),
      fc.constantFrom('RUNNING', 'Stopped', 'stopped ', 'hacked'),
    ),
  }),
  fc.record({ type: fc.constant('message'), text: fc.string({ minLength: 1 }) }),
  fc.record({ type: fc.constant('run'), cmd: fc.constant('rm -rf /') }),
);
function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof RawNumber);
}

const badClientId = fc.oneof(notAString, fc.constant(''), longer('k', CLIENT_ID_MAX_CHARS));

const badUserAction: fc.Arbitrary<FuzzFrame> = fc.oneof(
  extraFields.map((extra) => ({ kind: 'user_action without action', text: toJson({ type: 'user_action', ...extra }) })),
  fc
    .tuple(
      badAction,
      extraFields,
      extraFields,
      fc.option(fc.string({ minLength: 1, maxLength: 16 }), { nil: undefined }),
    )
    .map(([action, extra, actionExtra, clientId]) => ({
      kind: 'user_action with a bad action',
      text: toJson({
        ...extra,
        type: 'user_action',
        action: isPlainObject(action) ? { ...actionExtra, ...action } : action,
        ...(clientId !== undefined && { client_id: clientId }),
      }),
    })),
  fc.tuple(validAction, badClientId, extraFields).map(([action, clientId, extra]) => ({
    kind: 'user_action with a bad client_id',
    text: toJson({ ...extra, type: 'user_action', action, client_id: clientId }),
  })),
);

const SYNTAX_ERRORS = [
  '',
  ' ',
  '\n',
  '{',
  '}',
  '[',
  '{"type":"ping"',
  '{"type":"ping",}',
  '{"type":"ping"}}',
  '{"type":"ping"} x',
  "{'type':'ping'}",
  '{type:"ping"}',
  '{"type":"ping" /* c */}',
  '// {"type":"ping"}',
  'NaN',
  'Infinity',
  '-Infinity',
  'undefined',
  '{"type":NaN}',
  '{"type":"user_action","action":{"type":"message","content":"hi"},"client_id":Infinity}',
  '\uFEFF{"type":"ping"}',
  '"unterminated',
  '{"type":"\u0001"}',
  '{"type":"ping\n"}',
  '{"a":01}',
  '{"a":.5}',
  '{"a":+1}',
  '{"a":0x10}',
  '{"a":1.}',
  '{"a":"\\x41"}',
  '{"a":"\\u12"}',
  '{"a":"\\ud800\\u"}',
  'tru',
  'nul',
  '{"type":"ping"}\u0000',
  '\u0000',
];
const badJson: fc.Arbitrary<FuzzFrame> = fc.oneof(
  fc.constantFrom(...SYNTAX_ERRORS).map((text) => ({ kind: 'syntax error', text })),
  fc.tuple(fc.jsonValue({ maxDepth: 3 }), fc.nat()).map(([value, at]) => {
    const full = toJson({ type: 'user_action', action: { type: 'message', content: value } });
    return { kind: 'truncated JSON', text: full.slice(0, 1 + (at % (full.length - 1))) };
  }),
  oddString.map((text) => ({ kind: 'garbage text', text })),
);

const notObjectFrames: fc.Arbitrary<FuzzFrame> = fc.oneof(
  { arbitrary: notAnObject.map((value) => ({ kind: 'JSON that is not an object', text: toJson(value) })), weight: 4 },
  {
    arbitrary: fc
      .integer({ min: 100, max: 5_000 })
      .map((depth) => ({ kind: 'deeply nested arrays', text: '['.repeat(depth) + ']'.repeat(depth) })),
    weight: 1,
  },
);
const objectsWithoutType: fc.Arbitrary<FuzzFrame> = fc.oneof(
  fc
    .dictionary(
      oddString.filter((k) => k !== 'type'),
      fc.jsonValue({ maxDepth: 2 }),
      { maxKeys: 4 },
    )
    .map((o) => ({ kind: 'object without type', text: toJson(o) })),
  fc
    .tuple(notAString, extraFields)
    .map(([type, extra]) => ({ kind: 'type not a string', text: toJson({ ...extra, type }) })),
  fc
    .constantFrom(
      '{"__proto__":{"type":"ping"}}',
      '{"Type":"ping"}',
      '{"type ":"ping"}',
      '{"type":"ping","type":1}',
      '{"type":["ping"]}',
      '{"type":{"toString":"ping"}}',
      '{"constructor":{"prototype":{"type":"ping"}}}',
      '{"type":-0}',
      '{"type":18446744073709551616}',
    )
    .map((text) => ({ kind: 'object without a string type', text })),
);
const unknownTypeFrames: fc.Arbitrary<FuzzFrame> = fc.tuple(unknownType, extraFields).map(([type, extra]) => ({
  kind: 'unknown frame type',
  text: toJson({ ...extra, type }),
}));
const binaryFrames: fc.Arbitrary<FuzzFrame> = fc.oneof(
  fc.uint8Array({ maxLength: 2_048 }).map((binary) => ({ kind: 'binary frame', binary })),
  fc
    .constantFrom('{"type":"ping"}', '{"type":"user_action","action":{"type":"message","content":"hi"}}')
    .map((json) => ({
      kind: 'binary frame holding a valid frame',
      binary: new TextEncoder().encode(json),
    })),
);

/** A frame whose UTF-8 size is `bytes`: `prefix`, then `unit` repeated, then `suffix`. */
function sized(prefix: string, unit: string, suffix: string, bytes: number): string {
  const fixed = Buffer.byteLength(prefix + suffix);
  const unitBytes = Buffer.byteLength(unit);
  const count = Math.floor((bytes - fixed) / unitBytes);
  const pad = 'p'.repeat(bytes - fixed - count * unitBytes);
  return prefix + unit.repeat(count) + pad + suffix;
}
/** Frames just under the size limit, so the parser and the schema see the biggest input they can get. */
const nearLimit: fc.Arbitrary<FuzzFrame> = fc
  .tuple(
    fc.integer({ min: 1, max: 4_096 }),
    fc.constantFrom(
      ['message content too long', '{"type":"user_action","action":{"type":"message","content":"', 'x', '"}}'],
      [
        'message content of emoji, too long',
        '{"type":"user_action","action":{"type":"message","content":"',
        '😀',
        '"}}',
      ],
      [
        'message content of escaped lone surrogates',
        '{"type":"user_action","action":{"type":"message","content":"',
        '\\ud800',
        '"}}',
      ],
      ['long unknown type', '{"type":"', '\u202Eא', '"}'],
      ['long unterminated string', '{"type":"user_action","action":{"type":"message","content":"', 'z', ''],
      ['long JSON string of escaped NULs', '"', '\\u0000', '"'],
      ['long run command', '{"type":"user_action","action":{"type":"run","command":"', 'y', '"}}'],
      ['long client_id', '{"type":"user_action","action":{"type":"reconnect_runtime"},"client_id":"', 'k', '"}'],
    ),
  )
  .map(([under, [kind, prefix, unit, suffix]]) => ({
    kind: `near the limit: ${kind}`,
    text: sized(prefix, unit, suffix, MAX_FRAME_BYTES - under),
  }));

const fuzzFrame: fc.Arbitrary<FuzzFrame> = fc.oneof(
  { arbitrary: badJson, weight: 20 },
  { arbitrary: notObjectFrames, weight: 12 },
  { arbitrary: objectsWithoutType, weight: 12 },
  { arbitrary: unknownTypeFrames, weight: 12 },
  { arbitrary: badUserAction, weight: 35 },
  { arbitrary: binaryFrames, weight: 8 },
  { arbitrary: nearLimit, weight: 1 },
);

/** The batch of frames one connection sends in one round (reproducible from SEED). */
function batchFor(connection: number, batch: number): FuzzFrame[] {
  return fc.sample(fuzzFrame, { seed: SEED + connection * 1_000 + batch, numRuns: BATCH });
}

/** What the documented rules owe a frame, worked out from the bytes the server receives. */
function expectedCode(frame: FuzzFrame): string {
  if (frame.binary) return 'BAD_FRAME';
  // ws sends a string as UTF-8, where a lone surrogate becomes U+FFFD: parse what the server sees.
  const received = Buffer.from(frame.text!, 'utf8').toString('utf8');
  let value: unknown;
  try {
    value = JSON.parse(received);
  } catch {
    return 'BAD_JSON';
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'BAD_FRAME';
  const type = (value as { type?: unknown }).type;
  if (typeof type !== 'string') return 'BAD_FRAME';
  if (!CLIENT_FRAME_TYPES.has(type)) return 'UNKNOWN_FRAME_TYPE';
  // A known type: every such frame in the corpus breaks the schema on purpose.
  return 'BAD_FRAME';
}

function preview(frame: FuzzFrame): string {
  const body = frame.binary ? `<${frame.binary.length} binary bytes>` : JSON.stringify(frame.text!.slice(0, 100));
  return `${frame.kind}: ${body}${frame.text && frame.text.length > 100 ? `… (${Buffer.byteLength(frame.text)} bytes)` : ''}`;
}

interface ConnectionTally {
  sent: number;
  errors: number;
  byCode: Record<string, number>;
  mismatches: string[];
  otherFrames: string[];
}

/**
 * Sends every batch, each followed by a ping. The server answers a connection's frames in
 * order, so the frames between two pongs are the answers to that batch, one per frame.
 */
async function fuzzConnection(client: WsClient, connection: number): Promise<ConnectionTally> {
  const tally: ConnectionTally = { sent: 0, errors: 0, byCode: {}, mismatches: [], otherFrames: [] };
  for (let b = 0; b < BATCHES_PER_CONNECTION; b++) {
    const batch = batchFor(connection, b);
    for (const frame of batch) {
      const bytes = frame.binary ? frame.binary.length : Buffer.byteLength(frame.text!);
      if (bytes >= MAX_FRAME_BYTES) throw new Error(`corpus frame over the limit (${bytes} bytes): ${preview(frame)}`);
    }
    const from = client.frames.length;
    for (const frame of batch) {
      if (frame.binary) client.sendBinary(Buffer.from(frame.binary));
      else client.send(frame.text!);
    }
    tally.sent += batch.length;
    client.send({ type: 'ping' });
    const pong = await client.waitFor((f) => f.type === 'pong', {
      from,
      timeoutMs: 30_000,
      what: `the pong after batch ${b} of connection ${connection}`,
    });
    const answers = client.frames.slice(from, client.frames.indexOf(pong, from));
    // Status frames are transient news about the conversation, not answers to a frame.
    const replies = answers.filter((f) => f.type !== 'status');
    for (const f of replies)
      if (f.type !== 'error') tally.otherFrames.push(`batch ${b}: ${JSON.stringify(f).slice(0, 200)}`);
    const errors = replies.filter((f): f is ErrorFrame => f.type === 'error');
    tally.errors += errors.length;
    if (errors.length !== batch.length) {
      tally.mismatches.push(`batch ${b}: ${batch.length} bad frames sent, ${errors.length} error frames received`);
      continue;
    }
    batch.forEach((frame, i) => {
      const error = errors[i]!;
      tally.byCode[error.code] = (tally.byCode[error.code] ?? 0) + 1;
      const want = expectedCode(frame);
      if (error.code !== want || error.message.trim() === '') {
        tally.mismatches.push(
          `batch ${b} frame ${i} (${preview(frame)}): expected ${want}, got ${error.code} ${JSON.stringify(error.message).slice(0, 200)}`,
        );
      }
    });
  }
  return tally;
}

describe('a fuzzed WebSocket peer', () => {
  it(`gets exactly one error frame, in order and with the documented code, for each of ${FRAMES} bad frames, and nothing is stored`, async () => {
    console.log(`fuzz seed ${SEED} (rerun with TETHER_FUZZ_SEED=${SEED})`);
    const before = await idle(conversationId);
    const clients = fuzzed;

    const started = Date.now();
    const tallies = await Promise.all(clients.map((client, i) => fuzzConnection(client, i)));
    const byCode: Record<string, number> = {};
    for (const t of tallies) for (const [code, n] of Object.entries(t.byCode)) byCode[code] = (byCode[code] ?? 0) + n;
    console.log(
      `fuzz: ${tallies.reduce((n, t) => n + t.sent, 0)} frames sent, ${tallies.reduce((n, t) => n + t.errors, 0)} error frames ` +
        `received in ${Date.now() - started} ms over ${CONNECTIONS} connections; by code ${JSON.stringify(byCode)}`,
    );

    // Per connection: every batch answered by exactly one error frame per frame, with the owed code, and nothing else.
    expect(tallies.map((t) => ({ mismatches: t.mismatches, framesThatAnswerNothing: t.otherFrames }))).toEqual(
      tallies.map(() => ({ mismatches: [], framesThatAnswerNothing: [] })),
    );
    expect(tallies.map((t) => [t.sent, t.errors])).toEqual(
      tallies.map(() => [FRAMES / CONNECTIONS, FRAMES / CONNECTIONS]),
    );
    // Every kind of refusal was exercised, so a parser that lumps them together is noticed.
    expect(Object.keys(byCode).sort()).toEqual(['BAD_FRAME', 'BAD_JSON', 'UNKNOWN_FRAME_TYPE']);

    for (const [i, client] of clients.entries()) {
      expect(client.closeInfo, `connection ${i} was closed by the server`).toBeNull();
      expect(client.isOpen, `connection ${i}`).toBe(true);
      expect(client.invalid, `connection ${i}: frames outside the protocol`).toEqual([]);
    }

    // A bad frame is the client's problem: the server logs no error for any of them.
    expect(
      server
        .stderr()
        .split('\n')
        .filter((line) => /"level":"(error|fatal)"/.test(line)),
    ).toEqual([]);

    // Nothing was stored: no user event beyond conversation_created, no event of any kind.
    const after = await allEvents(server.baseUrl, conversationId);
    expect(after.filter((e) => e.event.source === 'user').map((e) => e.event.type)).toEqual(['conversation_created']);
    expect(after).toEqual(before);
  }, 120_000);

  it('still serves: healthz answers 200, and a valid message on a fuzzed connection is stored once and answered', async () => {
    const health = await http<{ ok: boolean }>(server.baseUrl, 'GET', '/healthz');
    expect(health.status).toBe(200);
    expect(health.body).toEqual({ ok: true });

    const before = await idle(conversationId);
    // One of the connections that took the fuzz, not a fresh one.
    const client = fuzzed[0]!;
    expect(client.isOpen).toBe(true);
    const from = client.frames.length;
    client.sendMessage('a valid message after the fuzz', 'after-fuzz-1');
    const reply = await client.waitFor(
      (f) => f.type === 'event' && f.event.source === 'agent' && f.event.type === 'message',
      { from, what: "the agent's reply", timeoutMs: 30_000 },
    );
    expect(reply).toMatchObject({
      type: 'event',
      event: { conversation_id: conversationId, source: 'agent', type: 'message' },
    });
    expect(client.frames.slice(from).filter((f) => f.type === 'error')).toEqual([]);

    const after = await idle(conversationId);
    expect(after.slice(0, before.length)).toEqual(before);
    // The only user event stored since the fuzz is the one valid message.
    const users = after.slice(before.length).filter((e) => e.event.source === 'user');
    expect(users.map((e) => e.event)).toEqual([
      expect.objectContaining({ type: 'message', data: { content: 'a valid message after the fuzz' } }),
    ]);
    expect(after.filter((e) => e.event.source === 'user').map((e) => e.event.type)).toEqual([
      'conversation_created',
      'message',
    ]);
  }, 60_000);

  it('refuses a cursor that is a huge, negative-zero or exponent number with close 4000 and no sync', async () => {
    for (const cursor of ['1e308', '-0', '18446744073709551616', '9007199254740993', '1e3', '0x10', ' 1', '1\u0000']) {
      const client = e2e.open(`${wsUrlFor(server.wsUrl, conversationId)}&after_seq=${encodeURIComponent(cursor)}`);
      const closed = await client.closed;
      expect(closed.code, `after_seq=${JSON.stringify(cursor)}`).toBe(4000);
      expect(client.frames, `after_seq=${JSON.stringify(cursor)}`).toEqual([]);
    }
  });

  it('closes a text frame that is not UTF-8 with 1007 (RFC 6455), stores nothing, and leaves other connections open', async () => {
    const before = await idle(conversationId);
    const bystander = await connect();
    const client = await connect();
    // A lone surrogate encoded as CESU-8, a truncated sequence and an overlong NUL: none is UTF-8.
    client.socket.send(Buffer.from([0x7b, 0xed, 0xa0, 0x80, 0xe2, 0x82, 0xc0, 0x80, 0x7d]), { binary: false });
    const closed = await client.closed;
    expect(closed.code).toBe(1007);
    await bystander.roundTrip();
    expect(bystander.isOpen).toBe(true);
    expect(await allEvents(server.baseUrl, conversationId)).toEqual(before);
    expect((await http(server.baseUrl, 'GET', '/healthz')).status).toBe(200);
  });
});
