import { beforeAll, describe, expect, it } from 'vitest';
import { useE2e } from '../support/e2e.ts';
import { deltasOf, expectStreamedOnce } from '../support/deltaChecks.ts';
import { createConversation, type ServerProcess } from '../support/serverProcess.ts';
import type { Frame, WsClient } from '../support/wsClient.ts';

type DeltaFrame = Extract<Frame, { type: 'delta' }>;

// Two `tether serve` processes on one nats-server, the scripted agent
// streaming its replies three words per delta, 25 ms apart: a client of
// either node gets every delta of a reply once, in order, before the stored
// message, also after it drops mid-message and comes back on either node.
const e2e = useE2e();
let a: ServerProcess;
let b: ServerProcess;

beforeAll(async () => {
  const nats = await e2e.nats();
  const env = { NATS_URL: nats.url, TETHER_AGENT_DELTA_MS: '25' };
  [a, b] = await Promise.all([e2e.start({ env }), e2e.start({ env })]);
}, 60_000);

/** A user message the scripted agent echoes in about 30 deltas (some 0.7 s). */
const LONG = Array.from({ length: 60 }, (_, i) => `word${i}`).join(' ');

/** The item of the reply to the newest user message on this connection: its first delta's. */
function firstDelta(client: WsClient, from = 0) {
  return client.waitFor<DeltaFrame>((f) => f.type === 'delta', { from, what: 'a delta' });
}

const replyTo = (client: WsClient, content: string) =>
  client.waitFor(
    (f) =>
      f.type === 'event' &&
      f.event.source === 'agent' &&
      f.event.type === 'message' &&
      f.event.data.content.includes(content.slice(0, 40)),
    { what: `the stored reply to "${content.slice(0, 20)}"`, timeoutMs: 20_000 },
  );

describe('streamed replies (scripted agent)', () => {
  it('reach a client of the owner and of another node as deltas, each index once and in order, then the stored message equal to them joined', async () => {
    const id = await createConversation(a.baseUrl);
    const onA = await e2e.connect(a, id);
    const onB = await e2e.connect(b, id);
    onA.sendMessage(LONG);
    await replyTo(onA, LONG);
    await replyTo(onB, LONG);
    const item = deltasOf(onA.frames)[0]!.item_id;
    const stored = expectStreamedOnce(onA.frames, item);
    expect(stored.data.deltas).toBeGreaterThan(10);
    expect(stored.data).toMatchObject({ attempt: 1, item_id: item });
    expect(expectStreamedOnce(onB.frames, item)).toEqual(stored);
    expect([onA.invalid, onB.invalid]).toEqual([[], []]);
  }, 30_000);

  for (const where of ['the same node', 'the other node'] as const) {
    it(`reach a client dropped mid-message and back on ${where}: its missed events, then the attempt's deltas from index 0, each once, then the stored message`, async () => {
      const id = await createConversation(a.baseUrl);
      const first = await e2e.connect(b, id);
      first.sendMessage(LONG);
      const delta = await firstDelta(first);
      await first.waitUntil(() => deltasOf(first.frames).length >= 5, { what: 'five deltas' });
      const cursor = first.lastSeq();
      await first.terminate();
      const again = await e2e.connect(where === 'the same node' ? b : a, id, { afterSeq: cursor });
      await replyTo(again, LONG);
      const stored = expectStreamedOnce(again.frames, delta.item_id);
      // It came back mid-message: it got deltas, not only the stored message.
      expect(deltasOf(again.frames).length).toBeGreaterThan(0);
      expect(stored.data.deltas).toBeGreaterThan(deltasOf(first.frames).length);
      expect(again.invalid).toEqual([]);
    }, 30_000);
  }
});
