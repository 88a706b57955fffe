/**
 * `base` without Tether's and NATS's settings (`TETHER_*`, `NATS_*`: the
 * server's secrets and addresses), and without unset variables: what every
 * process the server starts for a conversation (its shell, its clone) begins with.
 */
export function serverFreeEnv(base: NodeJS.ProcessEnv): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(base)) {
    if (value !== undefined && !name.startsWith('TETHER_') && !name.startsWith('NATS_')) env[name] = value;
  }
  return env;
}
