import { describe, expect, test } from 'vitest';
import { deliveredSeqs } from '../../src/store/creditedPull.ts';

describe('deliveredSeqs (the sequences of a pulled message, from its ack subject)', () => {
  test('reads the stream and consumer sequences of the nats-server 2.9 form', () => {
    // $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>
    expect(deliveredSeqs('$JS.ACK.EVENTS.follow_1.1.4711.12.1764200000000000000.3')).toEqual({
      streamSeq: 4711,
      consumerSeq: 12,
    });
  });

  test('reads them after a domain and an account hash (2.10 and later), with or without a trailing token', () => {
    const withDomain = '$JS.ACK.hub.ACCHASH.EVENTS.follow_1.1.4711.12.1764200000000000000.3';
    expect(deliveredSeqs(withDomain)).toEqual({ streamSeq: 4711, consumerSeq: 12 });
    expect(deliveredSeqs(`${withDomain}.rand0m`)).toEqual({ streamSeq: 4711, consumerSeq: 12 });
  });

  test('gives null for what is not a stored message: a status answer, another subject, a token short', () => {
    expect(deliveredSeqs(undefined)).toBeNull();
    expect(deliveredSeqs('_INBOX.abc.def')).toBeNull();
    expect(deliveredSeqs('$JS.ACK.EVENTS.follow_1.1.4711.12.3')).toBeNull();
    expect(deliveredSeqs('$JS.ACK.EVENTS.follow_1.1.x.12.1764200000000000000.3')).toBeNull();
  });
});
