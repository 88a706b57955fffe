import { describe, expect, it } from 'vitest';
import type { DeltaFrame } from '../../protocol/index.ts';
import { DeltaStream } from '../../src/conversation/deltaStream.ts';
import { secretMasker } from '../../src/conversation/secretMasker.ts';
import { DeltaRoom } from '../../src/queries/deltaRoom.ts';

const frame = (attempt: number, index: number, text = `t${index}`, item = '7'): DeltaFrame => ({
  type: 'delta',
  item_id: item,
  attempt,
  index,
  text,
});
const message = (f: DeltaFrame) => ({ frame: f, json: JSON.stringify(f) });

describe('the deltas of one attempt, on the node that runs it (DeltaStream)', () => {
  it('numbers them from 0 and keeps them for a catch-up; the text passes as it comes when there is no secret', () => {
    const sent: DeltaFrame[] = [];
    const stream = new DeltaStream('7', 2, [], (f) => sent.push(f));
    for (const piece of ['Hel', 'lo', '', ' world']) stream.push(piece);
    stream.end();
    expect(sent).toEqual([frame(2, 0, 'Hel'), frame(2, 1, 'lo'), frame(2, 2, ' world')]);
    expect(stream.frames).toEqual(sent);
    expect(stream.count).toBe(3);
  });

  it('sends nothing more once closed (the step was cut), also what it held back at the end', () => {
    const sent: DeltaFrame[] = [];
    const stream = new DeltaStream('7', 1, ['secret-value'], (f) => sent.push(f));
    stream.push('one ');
    stream.push('two sec');
    stream.close();
    stream.push('ret-value three');
    stream.end();
    expect(sent.map((f) => f.text)).toEqual(['one ', 'two ']);
    expect(stream.frames).toEqual(sent);
  });

  it('holds what comes while a cut is being stored: dropped once it is, sent after all when it stored nothing', () => {
    for (const stored of [true, false]) {
      const sent: DeltaFrame[] = [];
      const stream = new DeltaStream('7', 1, [], (f) => sent.push(f));
      stream.push('one ');
      stream.hold();
      stream.push('two ');
      if (stored) stream.close();
      else stream.release();
      stream.push('three');
      expect(sent.map((f) => f.text)).toEqual(stored ? ['one '] : ['one ', 'two ', 'three']);
      expect(sent.map((f) => f.index)).toEqual(sent.map((_, i) => i));
    }
  });

  it('masks a secret split across pieces, so the deltas joined equal the stored, masked text', () => {
    const secrets = ['hunter2-secret', 'tok'];
    const mask = secretMasker(secrets);
    const sent: DeltaFrame[] = [];
    const stream = new DeltaStream('7', 1, secrets, (f) => sent.push(f));
    const pieces = ['the key is hun', 'ter2-se', 'cret and ', 'to', 'k is short; hunt', 'ing ends'];
    for (const piece of pieces) stream.push(piece);
    stream.end();
    const joined = sent.map((f) => f.text).join('');
    expect(joined).toBe(mask(pieces.join('')));
    expect(joined).not.toContain('hunter2');
    for (const f of sent) expect(f.text).not.toMatch(/hunter2|ter2-se/);
    expect(sent.map((f) => f.index)).toEqual(sent.map((_, i) => i));
  });
});

describe("a node's deltas of a conversation (DeltaRoom)", () => {
  it('keeps the newest attempt of the current item, each index once, and drops an older attempt or a replaced item', () => {
    const room = new DeltaRoom();
    expect(room.add(message(frame(1, 0)))).toBe(true);
    expect(room.add(message(frame(1, 0)))).toBe(false);
    expect(room.add(message(frame(1, 2)))).toBe(true);
    expect(room.hasHole).toBe(true);
    expect(room.merge([frame(1, 0), frame(1, 1), frame(1, 2)])).toBe(true);
    expect(room.hasHole).toBe(false);
    // A newer attempt starts again from 0; the older one's stragglers are dropped.
    expect(room.add(message(frame(2, 0)))).toBe(true);
    expect(room.add(message(frame(1, 3)))).toBe(false);
    expect(room.held).toMatchObject({ itemId: '7', attempt: 2 });
    expect(room.held!.deltas.map((d) => d?.frame.index)).toEqual([0]);
    // A new item replaces it; a late delta of the replaced item is dropped.
    expect(room.add(message(frame(1, 0, 'next', '9')))).toBe(true);
    expect(room.add(message(frame(2, 1)))).toBe(false);
    expect(room.held).toMatchObject({ itemId: '9', attempt: 1 });
  });
});
