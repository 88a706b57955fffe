import type { Socket } from 'node:net';

/**
 * The shell script that ties a runtime's shell to the server through fd 3.
 *
 * A command must not outlive the server that would report it as interrupted.
 * A background watcher (a bash of its own, `$0` = tether-lifeline) waits for EOF on fd 3 (the server's end closes when the
 * server dies, however it dies) and then kills the shell's whole process group.
 * The shell itself closes fd 3 so the commands it runs never hold it.
 *
 * With `heartbeatTimeoutMs`, the watcher also kills the group when no heartbeat
 * (see {@link heartbeat}) came for that long: a frozen server (SIGSTOP, a paused
 * VM) keeps its end of fd 3 open, and in a cluster another node may already have
 * taken the conversation over, so its command must not go on. `read -t` ends
 * with a status above 128 on timeout and 1 on EOF: either ends the loop.
 */
export function lifeline(heartbeatTimeoutMs?: number, closing = ''): string {
  const wait =
    heartbeatTimeoutMs === undefined
      ? 'read -r -u 3 _'
      : `while read -r -t ${(heartbeatTimeoutMs / 1000).toFixed(3)} -u 3 _; do :; done`;
  // Its own bash, named in its argv, so that reaping what an interrupted command left behind spares it.
  // BASH_ENV emptied: a startup file from the environment (secrets included) must not end the watcher.
  return `BASH_ENV= "\${BASH:-bash}" --noprofile --norc -c '${wait}; kill -KILL 0' ${LIFELINE_NAME} </dev/null >/dev/null 2>&1 ${closing}&\nexec 3<&-\n`;
}

/** The watcher's `$0`: how `groupStragglers` tells it from a command's processes. */
export const LIFELINE_NAME = 'tether-lifeline';

/**
 * Writes a heartbeat line to the fd 3 that `line()` gives (the current shell's)
 * four times per `heartbeatTimeoutMs`, so that a late timer or two do not kill a
 * live server's commands. One unref'd timer; call the returned function to stop it.
 * Write errors are ignored: they mean the shell died, and its exit says so.
 */
export function heartbeat(line: () => Socket | null | undefined, heartbeatTimeoutMs: number): () => void {
  const timer = setInterval(() => {
    const socket = line();
    // A heartbeat still queued means the watcher is not reading: another one adds nothing.
    if (socket?.writable && socket.writableLength === 0) socket.write('\n');
  }, heartbeatTimeoutMs / 4);
  timer.unref();
  return () => clearInterval(timer);
}
