// A child process that never outlives the script that started it (npm run cluster).
// Plain JavaScript, like the other npm scripts. The technique is the embedded
// nats-server's guard (src/store/embeddedNats.ts), for any command.
import { spawn } from 'node:child_process';
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { constants } from 'node:os';
import { createInterface } from 'node:readline';
import { StringDecoder } from 'node:string_decoder';
import { setTimeout as sleep } from 'node:timers/promises';

// The guard sits between this script and the command. Its stdin is a pipe from
// the script that is never written, so it reads end-of-file exactly when the
// script closes it (stop()) or is gone, however it went: exit, crash, kill -9.
// A watcher then sends the command SIGTERM. The guard prints the command's pid,
// waits for it and exits with its status. Background jobs of a non-interactive
// sh get /dev/null as stdin, hence fd 3.
const GUARD = `
exec 3<&0 </dev/null
"$@" 1>&2 3<&- &
child=$!
echo "$child"
{ while read -r _ <&3; do :; done; kill -TERM "$child" 2>/dev/null; } &
watcher=$!
exec 3<&-
wait "$child"
status=$?
kill "$watcher" 2>/dev/null
exit "$status"
`;

/**
 * Starts `command ...args` under a guard, in a process group of its own: a
 * terminal's Ctrl-C reaches the script only, which stops its children in the
 * order it chooses. The command writes (stdout and stderr) to `logFile`, never
 * to a pipe that would break when the script is gone; `onLine` gets each line
 * it appends. `pid` resolves with the command's own pid (undefined when it
 * never started); `exited` with how it ended, once its last lines were read.
 */
export function guardedProcess({ command, args, env, cwd, logFile, onLine }) {
  const log = openSync(logFile, 'a');
  const follow = followFile(logFile, onLine);
  let guard;
  try {
    guard = spawn('/bin/sh', ['-c', GUARD, 'tether-guard', command, ...args], {
      cwd,
      env,
      stdio: ['pipe', 'pipe', log],
      detached: true,
    });
  } finally {
    closeSync(log);
  }
  // Closing stdin is how stop() speaks to the guard; a guard already gone must not crash the script.
  guard.stdin.on('error', () => {});
  const exited = new Promise((resolve) => {
    guard.once('error', (err) => resolve({ code: null, signal: null, error: err }));
    guard.once('exit', (code, signal) => resolve({ code, signal }));
  }).finally(() => follow.stop());
  const firstLine = new Promise((resolve) => createInterface({ input: guard.stdout }).once('line', resolve));
  const pid = Promise.race([firstLine.then(Number), exited.then(() => undefined)]);
  let done = false;
  void exited.then(() => (done = true));
  let stopping;
  return {
    pid,
    exited,
    get running() {
      return !done;
    },
    /** SIGTERM to the command; SIGKILL to its whole process group after `graceMs`. Resolves with whether it ended by itself. */
    stop(graceMs) {
      stopping ??= (async () => {
        if (done) return true;
        guard.stdin.end();
        if (await within(exited, graceMs)) return true;
        killGroup(guard.pid);
        await exited;
        return false;
      })();
      return stopping;
    },
    /** SIGKILL to the command's whole process group, now. */
    kill() {
      if (!done) killGroup(guard.pid);
    },
  };
}

/** Calls `onLine` with each line appended to `path` from now on, until stop(), which reads what is left. */
function followFile(path, onLine) {
  const fd = openSync(path, 'r');
  const chunk = Buffer.alloc(64 * 1024);
  const decoder = new StringDecoder('utf8');
  let position = fstatSync(fd).size;
  let partial = '';
  const read = () => {
    for (let n; (n = readSync(fd, chunk, 0, chunk.length, position)) > 0; position += n) {
      const lines = (partial + decoder.write(chunk.subarray(0, n))).split('\n');
      partial = lines.pop();
      for (const line of lines) onLine(line);
    }
  };
  const timer = setInterval(read, 100);
  return {
    stop() {
      clearInterval(timer);
      read();
      if (partial) onLine(partial);
      closeSync(fd);
    },
  };
}

/** How a guarded command ended, for messages: the guard exits with 128 + n when a signal n ended the command. */
export function describeExit({ code, signal, error }) {
  if (error) return `could not be started: ${error.message}`;
  if (signal) return `was killed by ${signal}`;
  const byNumber = Object.entries(constants.signals).find(([, n]) => n === code - 128);
  if (code > 128 && byNumber) return `was killed by ${byNumber[0]}`;
  return `exited with code ${code}`;
}

async function within(promise, ms) {
  const timer = new AbortController();
  const late = sleep(ms, false, { signal: timer.signal }).catch(() => false);
  try {
    return await Promise.race([promise.then(() => true), late]);
  } finally {
    timer.abort();
  }
}

function killGroup(pid) {
  try {
    if (pid !== undefined) process.kill(-pid, 'SIGKILL');
  } catch {
    // Already gone.
  }
}
