import { describe, expect, it } from 'vitest';
import { memoryHost } from '../support/memoryHost.ts';
import { jsonLogger, type LogLevel } from '../../src/logger.ts';
import { IllegalTransitionError } from '../../src/errors.ts';
import { maskingLogger, SECRET_MASK } from '../../src/conversation/secretMasker.ts';
import { memoryEventLog } from '../../src/store/index.ts';

const SECRET = 'sk-debug-0123456789';

type Line = Record<string, unknown> & { level: string; msg: string };

const DEBUG_MESSAGES = ['decided', 'refused', 'appended', 'effect started', 'effect finished'];

/**
 * A conversation with a secret, at `level`: created, then a user message that
 * makes the scripted agent run a command, then an action its state refuses,
 * then the server shuts down. Returns every log line, how many the creation
 * wrote, and what the actions answered.
 */
async function session(level: LogLevel) {
  const lines: Line[] = [];
  const log = memoryEventLog();
  const m = memoryHost({ log, logger: jsonLogger(level, (line) => lines.push(JSON.parse(line) as Line)) });
  const idle = async () => {
    for (let i = 0; i < 500; i++) {
      const live = await m.session(id, 'local');
      if (live.state === 'awaiting_user_input') return;
      await new Promise((r) => setTimeout(r, 2));
    }
    throw new Error('the conversation never came back to awaiting_user_input');
  };
  const body = { confirmation_mode: false, max_iterations: 10, secrets: { API_KEY: SECRET } };
  const { conversation_id: id } = await m.commands.create('local', body);
  await idle();
  const created = lines.length;
  try {
    const sent = await m.commands.act(id, 'local', { type: 'message', content: `!echo ${SECRET}` });
    await idle();
    const refusal = await m.commands
      .act(id, 'local', { type: 'change_agent_state', state: 'user_confirmed' })
      .catch((err: unknown) => err);
    return { id, log, lines, created, sent, refusal };
  } finally {
    await m.shutdown();
  }
}

describe('debug logging of a session', () => {
  it('at level debug, logs each decision, each append with its seq and each effect start and end, never a secret', async () => {
    const { id, lines, created, sent, refusal, log } = await session('debug');
    const events = (await log.read(id)).items;
    expect(refusal).toBeInstanceOf(IllegalTransitionError);
    const debug = lines.filter((l) => l.level === 'debug');
    expect(debug.every((l) => l.conversation_id === id)).toBe(true);
    expect(JSON.stringify(lines)).not.toContain(SECRET);

    // The creation: its decision, and the first runtime start, asked for by the creation record (id 0).
    const start = debug.slice(0, created);
    expect(start).toContainEqual(
      expect.objectContaining({ msg: 'decided', input: 'create', events: ['conversation_created'] }),
    );
    expect(start).toContainEqual(expect.objectContaining({ msg: 'effect started', effect: 'runtime start', cause: 0 }));
    expect(start).toContainEqual(
      expect.objectContaining({ msg: 'effect finished', effect: 'runtime start', cause: 0, outcome: 'connected' }),
    );

    const after = debug.slice(created);
    const message = events.find((e) => e.seq === sent.seq)!.event;
    expect(message).toMatchObject({ source: 'user', type: 'message' });
    // The decision: the input, the events it stores, and the agent state it leads to.
    expect(after).toContainEqual(
      expect.objectContaining({
        msg: 'decided',
        input: 'user message',
        from: 'awaiting_user_input',
        to: 'running',
        events: ['message', 'agent_state_changed'],
      }),
    );
    // Every append, with the stream sequence the log gave it.
    const appended = after.filter((l) => l.msg === 'appended');
    expect(appended[0]).toMatchObject({ event_id: message.id, type: 'message', seq: sent.seq });
    const stored = events.filter((e) => e.event.id >= message.id);
    expect(appended.map((l) => [l.event_id, l.type, l.seq])).toEqual(
      stored.map((e) => [e.event.id, e.event.type, e.seq]),
    );
    // The effects: the agent step answering the message, the command it ran, the step on its output.
    const command = stored.find((e) => e.event.type === 'command')!.event;
    const output = stored.find((e) => e.event.type === 'command_output')!.event;
    const effects = after
      .filter((l) => l.msg.startsWith('effect '))
      .map((l) => [l.msg, l.effect, l.cause, l.outcome ?? null]);
    const expected = [
      ['effect started', 'agent step', message.id, null],
      ['effect finished', 'agent step', message.id, '1 call(s)'],
      ['effect started', 'command', command.id, null],
      ['effect finished', 'command', command.id, 'exit code 0'],
      ['effect started', 'agent step', output.id, null],
      ['effect finished', 'agent step', output.id, 'message'],
      ['effect started', 'runtime stop', 'passivated (shutdown)', null],
      ['effect finished', 'runtime stop', 'passivated (shutdown)', 'done'],
    ];
    // Effects overlap (a step's command starts before the step has returned): compare as sets, then the order of each.
    const key = (line: unknown[]) => JSON.stringify(line);
    expect(effects.map(key).sort()).toEqual(expected.map(key).sort());
    for (let i = 0; i < expected.length; i += 2) {
      expect(effects.findIndex((l) => key(l) === key(expected[i]!))).toBeLessThan(
        effects.findIndex((l) => key(l) === key(expected[i + 1]!)),
      );
    }
    // A refusal says what was refused, in which state, and why.
    expect(after).toContainEqual(
      expect.objectContaining({
        msg: 'refused',
        input: 'user change_agent_state',
        state: 'awaiting_user_input',
        reason: (refusal as Error).message,
      }),
    );
  });

  it('at level info, writes none of those lines', async () => {
    const { lines, refusal } = await session('info');
    expect(refusal).toBeInstanceOf(IllegalTransitionError);
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.filter((l) => l.level === 'debug' || DEBUG_MESSAGES.includes(l.msg))).toEqual([]);
  });
});

describe('the masking logger', () => {
  it('masks secrets in debug fields, and leaves the fields alone when debug lines are not written', () => {
    const written: Line[] = [];
    const logger = (level: LogLevel) =>
      maskingLogger(
        jsonLogger(level, (line) => written.push(JSON.parse(line) as Line)),
        () => [{ API_KEY: SECRET }],
      );
    const debug = logger('debug');
    expect(debug.isDebug).toBe(true);
    debug.debug('effect failed', { error: `refused ${SECRET}` });
    expect(written).toEqual([expect.objectContaining({ level: 'debug', error: `refused ${SECRET_MASK}` })]);

    written.length = 0;
    const info = logger('info');
    expect(info.isDebug).toBe(false);
    let read = false;
    info.debug('effect failed', {
      get error() {
        read = true;
        return SECRET;
      },
    });
    expect(written).toEqual([]);
    expect(read).toBe(false);
  });
});
