import { ConfigError } from '../config.ts';

const USAGE = `usage: tether <command>

commands:
  serve                                run the server (default): REST and WebSocket on TETHER_HOST:TETHER_PORT
  replay <conversation_id> [--at SEQ]  fold a stored conversation and print its transitions and state (--json)
  machines [--id ID] [--out FILE]      the statechart definitions as JSON for the Stately visualizer
  help                                 this text

Configuration comes from environment variables; see README.md.`;

async function main(argv: string[]): Promise<number> {
  const [command = 'serve'] = argv;
  switch (command) {
    case 'serve': {
      const { serve } = await import('./serve.ts');
      // Exit explicitly, stopped or failed: a stray handle must not keep the process alive.
      return process.exit(await serve().catch(report));
    }
    case 'replay': {
      const { replay } = await import('./replay.ts');
      return replay(argv.slice(1));
    }
    case 'machines': {
      const { machinesCommand } = await import('./machines.ts');
      return machinesCommand(argv.slice(1));
    }
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(`${USAGE}\n`);
      return 0;
    default:
      process.stderr.write(`tether: unknown command ${JSON.stringify(command)}\n${USAGE}\n`);
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code !== 0) process.exitCode = code;
  },
  (err: unknown) => {
    process.exitCode = report(err);
  },
);

/** The error as one line on stderr; the exit code for it. */
function report(err: unknown): number {
  const message = err instanceof ConfigError || err instanceof Error ? err.message : String(err);
  process.stderr.write(`tether: ${message}\n`);
  return 1;
}
