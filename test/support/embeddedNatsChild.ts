// A child process for test/store/embeddedNats.int.test.ts: starts an embedded
// nats-server, prints it as one JSON line, then idles until it is killed or,
// in `crash` mode, throws an uncaught error.
import { startEmbeddedNats } from '../../src/store/embeddedNats.ts';
import { natsBinary } from './natsBinary.ts';

const [dataDir, mode = 'idle'] = process.argv.slice(2);
if (!dataDir) throw new Error('usage: embeddedNatsChild.ts <dataDir> [idle|crash]');
const nats = await startEmbeddedNats({ dataDir, binary: natsBinary() });
process.stdout.write(`${JSON.stringify({ pid: nats.pid, url: nats.url })}\n`);
setInterval(() => {}, 60_000);
if (mode === 'crash') {
  setTimeout(() => {
    throw new Error('child crashed on purpose');
  }, 100);
}
