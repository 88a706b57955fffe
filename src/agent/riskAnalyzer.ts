import type { SecurityRisk } from '../../protocol/index.ts';

/**
 * How risky an agent's shell command is, by a small fixed rule set (the
 * README and docs/security.md list it): the floor under the model's own
 * rating (`rateCall`). The rules catch the obvious destructive or escaping
 * moves; they are a seatbelt, not a sandbox, and err on the side of asking (a
 * mention inside an echoed string can trip them).
 */
export type Risk = 'low' | 'high';

export const HIGH_RISK_RULES: ReadonlyArray<{ rule: string; pattern: RegExp }> = [
  { rule: 'recursive or forced delete (rm -r, rm -f)', pattern: /\brm\s+(-[a-zA-Z]*[rRf]|--recursive|--force)/ },
  { rule: 'runs as another user (sudo, su, doas)', pattern: /(^|[;&|(]\s*)(sudo|su|doas)\s/ },
  { rule: 'pipes a download into a shell (curl … | sh)', pattern: /\b(curl|wget)\b[^|]*\|\s*(ba|z|da)?sh\b/ },
  {
    rule: 'writes raw disks or makes filesystems (dd of=, mkfs, > /dev/sd…)',
    pattern: /\bdd\b.*\bof=|\bmkfs(\.\w+)?\b|>\s*\/dev\/(sd|nvme|hd|disk)/,
  },
  { rule: 'opens permissions wide (chmod 777, chmod -R)', pattern: /\bchmod\s+(-[a-zA-Z]*R|[0-7]*777)/ },
  {
    rule: 'rewrites shared history (git push --force, git reset --hard)',
    pattern: /\bgit\s+push\b.*(--force|-f\b)|\bgit\s+reset\s+--hard\b/,
  },
  {
    rule: 'stops the machine (shutdown, reboot, halt, poweroff)',
    pattern: /(^|[\s;&|])(shutdown|reboot|halt|poweroff)\b/,
  },
  { rule: 'kills every process (kill -9 -1, killall)', pattern: /\bkill\s+-\w+\s+-1\b|\bkillall\b|\bpkill\b/ },
  { rule: 'a fork bomb', pattern: /:\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:/ },
  {
    rule: 'touches files outside the workspace by absolute path under /etc, /usr, /boot, /root',
    pattern: /(^|[\s>])\/(etc|usr|boot|root)\//,
  },
];

/** The rule a command breaks, or undefined when it is rated low. */
export function riskRule(command: string): string | undefined {
  return HIGH_RISK_RULES.find(({ pattern }) => pattern.test(command))?.rule;
}

export function rateCommand(command: string): Risk {
  return riskRule(command) === undefined ? 'low' : 'high';
}

/** A call's two ratings (the decider combines them when it stores the call: machines/calls.ts). */
export interface CallRating {
  /** The rules' rating: only a shell command can be high. */
  risk: Risk;
  /** The model's rating; none for a call that does not act (`read_file`, `ask_user`, `finish`). */
  securityRisk?: SecurityRisk;
}

/** Calls that only read or talk: no rating, never a wait. */
const DOES_NOT_ACT: ReadonlySet<string> = new Set(['read_file', 'ask_user', 'finish']);

/**
 * Rates one call: the model's `security_risk` argument (LOW, MEDIUM, HIGH; any
 * other value or none is UNKNOWN) and the rules' floor. The decider combines
 * them, the higher winning, so the model can raise a risk but never lower it.
 */
export function rateCall(name: string, args: Record<string, unknown>): CallRating {
  if (DOES_NOT_ACT.has(name)) return { risk: 'low' };
  const risk = name === 'run_command' && typeof args.command === 'string' ? rateCommand(args.command) : 'low';
  const given = typeof args.security_risk === 'string' ? args.security_risk.toUpperCase() : '';
  const securityRisk: SecurityRisk = given === 'LOW' || given === 'MEDIUM' || given === 'HIGH' ? given : 'UNKNOWN';
  return { risk, securityRisk };
}
